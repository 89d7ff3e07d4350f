"""Stream groupings at run time: which task(s) of a subscribing bolt receive each tuple.

The algorithms are Storm's (``org.apache.storm.grouping``); what a topology declares is
:mod:`squall.api.grouping`. A grouper is built per (emitting task, stream, subscribing
component) by :func:`make_grouper` and is only used from the emitting executor's thread.
"""

from __future__ import annotations

import hashlib
import math
import random
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import cloudpickle
import msgpack

from squall.api.grouping import (
    ALL, CUSTOM, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, NONE, PARTIAL_KEY, SHUFFLE, CustomStreamGrouping,
    GlobalStreamId, GroupingSpec,
)
from squall.api.state.key_groups import key_group, owner
from squall.api.tuple import Fields

if TYPE_CHECKING:
    from squall.api.context import TopologyContext


_INT64_MIN, _UINT64_MAX = -(2**63), 2**64 - 1
_EXT_BIG_INT, _EXT_DICT, _EXT_SET = 0, 1, 2


def _canonical(value: Any) -> Any:
    """A msgpack-able form of a key value in which equal values (by ``==``) are identical:
    1, 1.0 and True; (1, "a") and [1.0, "a"]; dicts and sets in any order."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        value = int(value)
        return value if _INT64_MIN <= value <= _UINT64_MAX else msgpack.ExtType(_EXT_BIG_INT, str(value).encode())
    if isinstance(value, float):
        return _canonical(int(value)) if value.is_integer() else value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, dict):
        pairs = sorted((_pack([_canonical(k)]), _canonical(v)) for k, v in value.items())
        return msgpack.ExtType(_EXT_DICT, _pack(pairs))
    if isinstance(value, (set, frozenset)):
        return msgpack.ExtType(_EXT_SET, _pack(sorted(_pack([_canonical(v)]) for v in value)))
    raise TypeError(
        f"a grouping key value of type {type(value).__name__} has no stable hash; "
        "group on str, bytes, int, float, bool, None or lists/tuples/dicts/sets of them"
    )


def _pack(value: Any) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


def stable_key_bytes(key: Sequence[Any]) -> bytes:
    """The bytes a grouping key hashes as: the same in every process (unlike ``hash()``),
    and the same for keys that are equal."""
    return _pack([_canonical(v) for v in key])


def key_hash(key: Sequence[Any]) -> int:
    """The fields grouping's hash of a key (its selected values), which also names its key
    group (see :mod:`squall.api.state.key_groups`)."""
    return zlib.crc32(stable_key_bytes(key))


class _Grouper:
    """Chooses target tasks for the values of one tuple.

    ``fanout`` is how many tasks every choice has (int), or None when it varies.
    """

    fanout = 1

    def choose(self, values: list[Any]) -> list[int]:
        raise NotImplementedError


class ShuffleGrouper(_Grouper):
    """Round-robin over a once-shuffled list of the target tasks."""

    def __init__(self, targets: list[int], rng: random.Random) -> None:
        order = list(targets)
        rng.shuffle(order)
        self._choices = [[t] for t in order]
        self._n = len(order)
        self._i = rng.randrange(self._n)

    def choose(self, values: list[Any]) -> list[int]:
        i = self._i + 1
        if i >= self._n:
            i = 0
        self._i = i
        return self._choices[i]


class LoadAwareShuffleGrouper(_Grouper):
    """Shuffle in proportion to the targets' spare capacity (Storm 2's
    ``LoadAwareShuffleGrouping``, the default for shuffle and local-or-shuffle groupings).

    ``load(task)`` is 0.0 for an empty incoming queue and 1.0 for a full one (or a task that
    cannot take more now). A target whose queue is at most :data:`LOW_WATER` full weighs 100;
    above that the weight falls with the load, to 1 just short of full (about 1% of an idle
    target's share, as in Storm) and 0 when full. When every target is full the ring stays as
    it was (the one that filled last is likely the first to drain). While all weights are equal this is Storm's shuffle:
    round-robin over one permutation of the targets. Otherwise it is round-robin over a
    shuffled ring in which each target appears as often as its weight: a slow task, whose
    queue fills up, gets little or nothing until it has room again, and does not hold its
    stream back. The weights are taken anew at the end of each pass over the ring (about
    :data:`RING` choices), at most every ``refresh_secs`` (default :data:`REFRESH_SECS`).
    Between those, a target that weighs less than 100 has its load read again whenever it comes
    up: if it is full by then, the next choice with room goes instead, so that weights up to
    ``refresh_secs`` old do not send a tuple to a full queue, where it would hold its producer
    back until the slow task drains (unless every target weighs less than 100: then none is
    re-checked).
    """

    RING = 100
    REFRESH_SECS = 0.001
    LOW_WATER = 0.5

    def __init__(self, targets: list[int], rng: random.Random, load: Callable[[int], float],
                 refresh_secs: float = REFRESH_SECS) -> None:
        order = list(targets)
        self._refresh_secs = refresh_secs
        rng.shuffle(order)
        self._order = [[t] for t in order]  # what choose returns (callers must not modify it)
        self._rng = rng
        self._load = load
        self._weights: list[int] | None = None
        self._refreshed = 0.0
        self._choices: list[list[int]] = []
        self._n = 0
        self._watched: frozenset[int] = frozenset()  # the targets weighing less than 100
        self._refresh()
        self._i = rng.randrange(self._n)

    @property
    def ring_size(self) -> int:
        """How many choices one pass over the current ring makes (about :data:`RING`)."""
        return len(self._choices)

    def _weight(self, task: int) -> int:
        load = self._load(task)
        if load >= 1.0:
            return 0
        return 100 - min(99, max(0, math.ceil(100 * (load - self.LOW_WATER) / (1 - self.LOW_WATER))))

    def _refresh(self) -> None:
        self._refreshed = time.monotonic()
        weights = [self._weight(choice[0]) for choice in self._order]
        if weights == self._weights or (not any(weights) and self._weights is not None):
            return  # unchanged, or every target full: the ring that was right until now stays
        self._weights = weights
        # re-checked as they come up; none when every target is loaded (there is no better choice
        # then, and a saturated stream should not pay a load reading per tuple)
        watched = frozenset(c[0] for c, w in zip(self._order, weights) if w < 100)
        self._watched = watched if len(watched) < len(self._order) else frozenset()
        if len(set(weights)) == 1:  # the permutation, over and over: every target's equal share
            ring = self._order
        else:
            ring = [c for choice, w in zip(self._order, weights) for c in [choice] * w]
            self._rng.shuffle(ring)
        self._choices = ring * max(1, self.RING // len(ring))
        self._n = len(self._choices)

    def choose(self, values: list[Any]) -> list[int]:
        i = self._i + 1
        if i >= self._n:
            i = 0
            if time.monotonic() - self._refreshed >= self._refresh_secs:
                self._refresh()
        self._i = i
        choice = self._choices[i]
        if self._watched and choice[0] in self._watched and self._load(choice[0]) >= 1.0:
            return self._instead_of_full(i)
        return choice

    def _instead_of_full(self, i: int) -> list[int]:
        """The next choice after position ``i`` that is not a watched target found full; one that
        weighs 100 is taken unread (some target always does, see :meth:`_refresh`)."""
        choices, n, watched, load = self._choices, self._n, self._watched, self._load
        for step in range(1, n):
            j = (i + step) % n
            task = choices[j][0]
            if task not in watched or load(task) < 1.0:
                self._i = j
                return choices[j]
        return choices[i]


class FieldsGrouper(_Grouper):
    """Hash of the selected values modulo the number of tasks (stable across processes); with
    ``key_groups`` (the input of a stateful bolt), modulo that many key groups, each sent to
    the task that owns it (:mod:`squall.api.state.key_groups`)."""

    _CACHE_LIMIT = 65536

    def __init__(self, targets: list[int], output_fields: Fields, selected: Fields,
                 key_groups: int | None = None) -> None:
        ordered = sorted(targets)
        self._choices = [[t] for t in ordered]
        self._n = len(ordered)
        self._key_groups = 0 if key_groups is None else key_groups
        self._indexes = [output_fields.field_index(f) for f in selected]
        self._single = self._indexes[0] if len(self._indexes) == 1 else None
        self._cache: dict[Any, list[int]] = {}

    def choose(self, values: list[Any]) -> list[int]:
        # the cache is keyed by the value itself for one field, by a tuple of them otherwise
        single = self._single
        key = values[single] if single is not None else tuple([values[i] for i in self._indexes])
        try:
            return self._cache[key]
        except KeyError:
            pass
        except TypeError:  # unhashable value: hash it every time
            return self._choices[self._index(key)]
        if len(self._cache) >= self._CACHE_LIMIT:
            self._cache.clear()
        chosen = self._cache[key] = self._choices[self._index(key)]
        return chosen

    def _index(self, key: Any) -> int:
        """The index of the task for ``key`` (as cached): its hash modulo the tasks, or the
        owner of its key group."""
        h = key_hash([key] if self._single is not None else list(key))
        if not self._key_groups:
            return h % self._n
        return owner(key_group(h, self._key_groups), self._n, self._key_groups)


class PartialKeyGrouper(FieldsGrouper):
    """Two candidate tasks per key, from two independent hashes; send to the one this
    grouper has sent fewer tuples to (Storm's "power of both choices")."""

    def __init__(self, targets: list[int], output_fields: Fields, selected: Fields) -> None:
        super().__init__(targets, output_fields, selected)
        self._sent = [0] * self._n
        self._candidates: dict[Any, tuple[int, int]] = {}

    def choose(self, values: list[Any]) -> list[int]:
        key = tuple([values[i] for i in self._indexes])
        try:
            first, second = self._candidates[key]
        except (KeyError, TypeError):
            data = stable_key_bytes(key)
            first = zlib.crc32(data) % self._n
            second = int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "big") % self._n
            try:
                if len(self._candidates) >= self._CACHE_LIMIT:
                    self._candidates.clear()
                self._candidates[key] = (first, second)
            except TypeError:
                pass  # unhashable key: not cached
        chosen = first if self._sent[first] <= self._sent[second] else second
        self._sent[chosen] += 1
        return self._choices[chosen]


class AllGrouper(_Grouper):
    def __init__(self, targets: list[int]) -> None:
        self._all = sorted(targets)

    @property
    def fanout(self) -> int:  # type: ignore[override]
        return len(self._all)

    def choose(self, values: list[Any]) -> list[int]:
        return self._all


class GlobalGrouper(_Grouper):
    """The lowest task id."""

    def __init__(self, targets: list[int]) -> None:
        self._lowest = [min(targets)]

    def choose(self, values: list[Any]) -> list[int]:
        return self._lowest


class NoneGrouper(_Grouper):
    """A random task (Storm's none grouping)."""

    def __init__(self, targets: list[int], rng: random.Random) -> None:
        self._choices = [[t] for t in sorted(targets)]
        self._rng = rng

    def choose(self, values: list[Any]) -> list[int]:
        return self._rng.choice(self._choices)


class CustomGrouper(_Grouper):
    fanout = None

    def __init__(self, grouping: CustomStreamGrouping, source_task: int, targets: list[int], name: str) -> None:
        self._grouping = grouping
        self._source_task = source_task
        self._targets = frozenset(targets)
        self._name = name

    def choose(self, values: list[Any]) -> list[int]:
        from squall.api.errors import EmitError

        chosen = self._grouping.choose_tasks(self._source_task, values)
        chosen = list(chosen) if chosen is not None else []
        if not chosen or not self._targets.issuperset(chosen):
            raise EmitError(
                f"custom grouping {self._name} chose {chosen}, which is not a non-empty subset of "
                f"its target tasks {sorted(self._targets)}"
            )
        return chosen


def make_grouper(
    spec: GroupingSpec,
    *,
    context: TopologyContext,
    stream: GlobalStreamId,
    targets: list[int],
    output_fields: Fields,
    local_tasks: set[int],
    rng: random.Random,
    load: Callable[[int], float] | None = None,
    key_groups: int | None = None,
) -> _Grouper | None:
    """The grouper of one emitting task for one subscriber; None for direct grouping. With
    ``load`` (a target task's load, see :class:`LoadAwareShuffleGrouper`), shuffle and
    local-or-shuffle groupings are load-aware; with ``key_groups`` (a stateful subscriber's),
    a fields grouping sends each key group to the task that owns it."""
    kind = spec.type
    if kind in (SHUFFLE, LOCAL_OR_SHUFFLE):
        if kind == LOCAL_OR_SHUFFLE:
            targets = [t for t in targets if t in local_tasks] or targets
        if load is not None and len(targets) > 1:
            return LoadAwareShuffleGrouper(targets, rng, load)
        return ShuffleGrouper(targets, rng)
    if kind == FIELDS:
        return FieldsGrouper(targets, output_fields, spec.fields, key_groups)
    if kind == PARTIAL_KEY:
        return PartialKeyGrouper(targets, output_fields, spec.fields)
    if kind == ALL:
        return AllGrouper(targets)
    if kind == GLOBAL:
        return GlobalGrouper(targets)
    if kind == NONE:
        return NoneGrouper(targets, rng)
    if kind == DIRECT:
        return None
    if kind == CUSTOM:
        grouping = cloudpickle.loads(spec.custom)
        grouping.prepare(context, stream, sorted(targets))
        name = f"{type(grouping).__name__} on {stream.component_id}:{stream.stream_id}"
        return CustomGrouper(grouping, context.get_this_task_id(), targets, name)
    raise ValueError(f"unknown grouping type {kind!r}")
