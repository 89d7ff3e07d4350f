"""Key groups: how a stateful bolt's keyed state is split among its tasks (Flink's key groups).

A stateful bolt fed by a fields grouping keeps its state by *key group*: a key's group is the
hash its fields grouping computes (``squall.runtime.grouping.key_hash``), mixed, modulo the
bolt's number of key groups, ``topology.state.key.groups`` (128 by default), which the state location
records when it is first claimed and keeps. Task ``i`` of ``n`` owns one contiguous range of
groups (:func:`owned`), and the fields grouping sends a key to the owner of its group
(:func:`owner`), so every task count from 1 to the number of groups divides the same groups.
Each state entry is stored with the group of the input that wrote it; a topology submitted
again with another task count restores each group into its new owner.
"""

from __future__ import annotations

#: ``topology.state.key.groups``'s default (Flink's default maximum parallelism)
DEFAULT_KEY_GROUPS = 128
#: the most key groups a component may have (Flink's limit)
MAX_KEY_GROUPS = 32768


def key_group(key_hash: int, groups: int) -> int:
    """The group of a key whose fields grouping hash is ``key_hash`` (a CRC-32), mixed first
    by MurmurHash3's finalizer, as Flink mixes a key's hash: a CRC's bits follow the input's
    linearly, so keys that differ in a few bits (``a``, ``b``, ``c``) would share the high
    groups' bits, and one task's contiguous range would take them all."""
    h = key_hash & 0xFFFFFFFF
    h = ((h ^ (h >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
    return (h ^ (h >> 16)) % groups


def owner(group: int, tasks: int, groups: int) -> int:
    """The index (0 .. ``tasks`` - 1) of the task that owns ``group`` among ``tasks`` tasks."""
    return group * tasks // groups


def owned(index: int, tasks: int, groups: int) -> range:
    """The groups task ``index`` of ``tasks`` owns: a contiguous range, empty for none (more
    tasks than groups)."""
    return range(-(-index * groups // tasks), -(-(index + 1) * groups // tasks))
