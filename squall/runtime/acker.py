"""The acker: tracks every spout tuple's tree with one 64-bit XOR (Storm's ``Acker``).

What comes in (streams towards component ``__acker``; their ids are in :mod:`squall.api.system_ids`):

* ``__ack_batch`` (roots, vals, spout-tasks): three columns; ``vals[i]`` is XOR-ed into tree
  ``roots[i]``, and ``spout_tasks[i]`` is the spout task of an init (the tree's new edges), -1
  for an ack. Every executor sends its inits and acks so, combined per tree
  (:mod:`squall.runtime.executor.ack_ledger`): as one tuple to an acker of its own worker, as a typed
  ``AckBatch`` with the same columns to another worker's;
* ``__ack_fail`` (id) from a bolt failing a tuple of tree ``id``;
* ``__ack_reset_timeout`` (id) from a bolt asking for more time.

For each tree the acker keeps ``val`` = XOR of every edge id seen so far. Every edge id
is XOR-ed in twice (once when the tuple is created, once when it is acked), so ``val``
returns to 0 exactly when the whole tree is processed. What goes out: the completed trees per
spout task (:meth:`Acker.take_completed`, one ``__ack_acked`` batch per spout task), a failed
tree on ``__ack_fail``, a reset on ``__ack_reset_timeout``. Memory per tree is constant
whatever its size. Trees are forgotten after 2 timeout periods (the spout fails them on its own
clock).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.api.system_ids import ACK_BATCH, ACK_FAIL, ACK_RESET_TIMEOUT
from squall.utils.rand import rand64
from squall.utils.u64_map import U64Map


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
    id (see squall.runtime.executor.checkpointing).
    """

    __slots__ = ("_count", "_local", "high_bit")

    def __init__(self, acker_tasks: list[int], local_tasks: frozenset[int] | set[int]) -> None:
        self._count = len(acker_tasks)
        #: positions in acker_tasks of this worker's ackers; all of them when there is none
        self._local = [i for i, t in enumerate(acker_tasks) if t in local_tasks] or list(range(self._count))
        self.high_bit = 0

    def new(self) -> int:
        """A new root id."""
        return self.from_bits(rand64() >> 1)

    def from_bits(self, bits: int) -> int:
        """The root id that 63 random ``bits`` make."""
        root = bits | self.high_bit
        count, local = self._count, self._local
        if len(local) == count:
            return root
        root += local[(root // count) % len(local)] - root % count
        if root >> 63 != self.high_bit >> 63:  # moved across 2**63 (or to 2**64): back by one round
            root += count if root < self.high_bit else -count
        return root


#: in a tree's ``meta``: a tuple of the tree failed (the rest is its spout task + 1, 0 until the
#: init arrives)
_FAILED = 1 << 63


class _Trees:
    """One generation of an acker's trees: root id -> the XOR of its edges (``vals``), and root
    id -> ``meta`` (spout task + 1, or 0 before the init; ``_FAILED`` set once failed). Both
    C tables compiled (see squall.utils.u64_map)."""

    __slots__ = ("vals", "meta")

    def __init__(self) -> None:
        self.vals = U64Map()
        self.meta = U64Map()

    def put(self, root: int, val: int, meta: int) -> None:
        self.vals.set(root, val)
        self.meta.set(root, meta)

    def remove(self, root: int) -> None:
        self.vals.pop(root)
        self.meta.pop(root)


class Acker:
    """The acker task's logic. ``send(task, stream, values)`` tells a spout task of a failed
    tree or a timeout reset; completed trees gather in :attr:`completed` until taken.

    Trees live in two generations, as in Storm's ``RotatingMap`` of two buckets: a tree new to
    the acker joins the newest; :meth:`rotate` forgets the older one (trees pending for two
    timeout periods) and starts a new one; a fail or a reset moves a tree to the newest.
    """

    def __init__(self, send: Callable[[int, str, list[Any]], None]) -> None:
        self._send = send
        self._newest = _Trees()
        self._older = _Trees()
        #: spout task -> the roots of its trees completed since :meth:`take_completed`
        self.completed: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self._newest.vals) + len(self._older.vals)

    def execute(self, stream: str, values: list[Any]) -> None:
        """One tuple of a stream towards the acker (see the module's docstring)."""
        if stream == ACK_BATCH:
            self.update_many(values[0], values[1], values[2])
        elif stream == ACK_FAIL:
            self.fail(values[0])
        elif stream == ACK_RESET_TIMEOUT:
            self.reset_timeout(values[0])
        else:
            raise ValueError(f"the acker takes no stream {stream!r}")

    def update_many(self, roots: list[int], vals: list[int], spout_tasks: list[int]) -> None:
        """:meth:`update` for each row of the three columns (the fold of an ack batch)."""
        for i in range(len(roots)):
            self.update(roots[i], vals[i], spout_tasks[i])

    def update(self, root: int, val: int, spout_task: int) -> None:
        """XOR ``val`` into tree ``root``'s value: an init (with its ``spout_task``) or an ack
        (``spout_task`` -1)."""
        trees = self._trees(root)
        trees.vals.xor(root, val)
        if spout_task >= 0:
            trees.meta.set(root, (trees.meta.value(root) & _FAILED) | (spout_task + 1))
        self._settle(root, trees)

    def fail(self, root: int) -> None:
        """A tuple of tree ``root`` failed: the tree fails (once its init is known)."""
        trees = self._newest_with(root)
        trees.meta.set(root, trees.meta.value(root) | _FAILED)
        self._settle(root, trees)

    def reset_timeout(self, root: int) -> None:
        """Restart tree ``root``'s expiry, and tell its spout task (once known) to do the same."""
        task_plus_one = self._newest_with(root).meta.value(root) & ~_FAILED
        if task_plus_one:
            self._send(task_plus_one - 1, ACK_RESET_TIMEOUT, [root])

    def take_completed(self) -> dict[int, list[int]]:
        """The completed trees' roots per spout task since the last call."""
        completed, self.completed = self.completed, {}
        return completed

    def _trees(self, root: int) -> _Trees:
        """The generation holding tree ``root``; a tree new here joins the newest."""
        if root in self._older.vals:
            return self._older
        trees = self._newest
        if root not in trees.vals:
            trees.put(root, 0, 0)
        return trees

    def _newest_with(self, root: int) -> _Trees:
        """The newest generation, holding tree ``root`` (moved there, or new): Storm's
        ``RotatingMap.put`` of a fail or a reset, which restarts the tree's expiry."""
        trees, newest = self._trees(root), self._newest
        if trees is not newest:
            newest.put(root, trees.vals.value(root), trees.meta.value(root))
            trees.remove(root)
        return newest

    def _settle(self, root: int, trees: _Trees) -> None:
        """Tell the spout task of a tree that failed or completed."""
        meta = trees.meta.value(root)
        task_plus_one = meta & ~_FAILED
        if not task_plus_one:
            return  # init not seen yet: acks from bolts can overtake it
        spout_task = task_plus_one - 1
        if meta & _FAILED:
            trees.remove(root)
            self._send(spout_task, ACK_FAIL, [root])
        elif trees.vals.value(root) == 0:
            trees.remove(root)
            roots = self.completed.get(spout_task)
            if roots is None:
                roots = self.completed[spout_task] = []
            roots.append(root)

    def rotate(self) -> None:
        """Forget trees older than two timeout periods."""
        self._older = self._newest
        self._newest = _Trees()
