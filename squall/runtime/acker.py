"""The acker: tracks every spout tuple's tree with one 64-bit XOR (Storm's ``Acker``).

Streams (all on component ``__acker`` or towards it; their ids are in :mod:`squall.api.system_ids`):

* ``__ack_init`` (id, init-val, spout-task) from a spout that emitted a tracked tuple;
* ``__ack_ack`` (id, ack-val) from a bolt acking a tuple of tree ``id``;
* ``__ack_fail`` (id) from a bolt failing one;
* ``__ack_reset_timeout`` (id) from a bolt asking for more time.

For each tree the acker keeps ``val`` = XOR of every edge id seen so far. Every edge id
is XOR-ed in twice (once when the tuple is created, once when it is acked), so ``val``
returns to 0 exactly when the whole tree is processed; the acker then tells the spout
task on its ``__ack_ack`` stream. A failed tree is reported on ``__ack_fail``. Memory per
tree is constant whatever its size. Trees are forgotten after 2 timeout periods (the
spout fails them on its own clock).

What executors send here, and how they combine it first, is :mod:`squall.runtime.ack_ledger`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.api.system_ids import ACK_ACK, ACK_BATCH, ACK_FAIL, ACK_INIT, ACK_RESET_TIMEOUT
from squall.utils.rand import rand_bits
from squall.utils.rotating_map import RotatingMap


def acker_for(root: int, acker_tasks: list[int]) -> int:
    """The acker task of tree ``root`` (Storm: fields grouping on id; roots are random)."""
    return acker_tasks[root % len(acker_tasks)]


class RootIds:
    """New root ids for one spout task's trees, each tracked by an acker task of the spout's
    own worker when it has one.

    Storm routes a tree's messages to its acker by fields grouping on the root id, and root
    ids are random. Here the id is random too, but for its remainder modulo the number of
    ackers, which names one of the local acker tasks (picked by other bits of the id): the
    spout's init and the acker's completion never cross workers, and whoever acks a tuple of
    the tree finds the same acker with :func:`acker_for`. ``high_bit`` is OR-ed into every
    id (see squall.runtime.state.checkpointing).
    """

    __slots__ = ("_count", "_local", "high_bit")

    def __init__(self, acker_tasks: list[int], local_tasks: frozenset[int] | set[int]) -> None:
        self._count = len(acker_tasks)
        #: positions in acker_tasks of this worker's ackers; all of them when there is none
        self._local = [i for i, t in enumerate(acker_tasks) if t in local_tasks] or list(range(self._count))
        self.high_bit = 0

    def new(self) -> int:
        root = rand_bits(63) | self.high_bit
        count, local = self._count, self._local
        if len(local) == count:
            return root
        root += local[(root // count) % len(local)] - root % count
        if root >> 63 != self.high_bit >> 63:  # moved across 2**63 (or to 2**64): back by one round
            root += count if root < self.high_bit else -count
        return root


class _Entry:
    __slots__ = ("val", "spout_task", "failed")

    def __init__(self) -> None:
        self.val = 0
        self.spout_task: int | None = None
        self.failed = False


class Acker:
    """The acker task's logic. ``send(task, stream, values)`` reaches spout tasks."""

    def __init__(self, send: Callable[[int, str, list[Any]], None]) -> None:
        self._send = send
        self._pending = RotatingMap(2)

    def __len__(self) -> int:
        return len(self._pending)

    def execute(self, stream: str, values: list[Any]) -> None:
        if stream == ACK_ACK:
            self.update(values[0], values[1], None)
        elif stream == ACK_INIT:
            self.update(values[0], values[1], values[2])
        elif stream == ACK_BATCH:
            update = self.update
            for root, (val, spout_task) in values[0].items():
                update(root, val, spout_task)
        else:
            root = values[0]
            entry = self._pending.get(root)
            if entry is None:
                entry = self._pending.put(root, _Entry())
            if stream == ACK_FAIL:
                entry.failed = True
                self._settle(root, entry)
            elif stream == ACK_RESET_TIMEOUT:
                self._pending.touch(root)
                if entry.spout_task is not None:
                    self._send(entry.spout_task, ACK_RESET_TIMEOUT, [root])

    def update(self, root: int, val: int, spout_task: int | None) -> None:
        """XOR ``val`` into tree ``root``'s value: an init (with its ``spout_task``) or an ack."""
        entry = self._pending.get(root)
        if entry is None:
            entry = self._pending.put(root, _Entry())
        entry.val ^= val
        if spout_task is not None:
            entry.spout_task = spout_task
        self._settle(root, entry)

    def _settle(self, root: int, entry: _Entry) -> None:
        """Tell the spout task of a tree that failed or completed."""
        if entry.spout_task is None:
            return  # init not seen yet: acks from bolts can overtake it
        if entry.failed:
            self._pending.pop(root)
            self._send(entry.spout_task, ACK_FAIL, [root])
        elif entry.val == 0:
            self._pending.pop(root)
            self._send(entry.spout_task, ACK_ACK, [root, 0])

    def rotate(self) -> None:
        """Forget trees older than two timeout periods."""
        self._pending.rotate()
