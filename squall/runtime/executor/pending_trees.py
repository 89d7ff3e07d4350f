"""A spout task's pending trees (the ``pending`` map of Storm's ``SpoutExecutor``).

Every tracked emit of the task starts a tree; the tree stays pending, with its message id and
emit time, until the acker reports it complete or failed, or until it times out (two rotations,
one per ``topology.message.timeout.secs``). Settling a tree calls the spout's ``ack`` or ``fail``
with the message id, once, and counts it in the executor's figures.

Used from the spout executor's thread only (or holding its lock). The spout's ``ack`` and
``fail`` run there; an exception they raise is reported through ``report_error`` and processing
goes on. Nothing here blocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from squall.runtime.executor.executor_stats import ExecutorStats
from squall.utils.rotating_map import RotatingMap


#: what the map holds for a root that is not a pending tree
_NOT_PENDING = object()


class PendingTrees:
    """One spout task's pending trees: root id -> message id.

    :meth:`bind` gives it the task's spout once that exists; ``untracked(root, acked)``, if set,
    is told of a root settled here that is not a pending tree (a stateful spout's in-flight
    marker, or a tree that already timed out).

    Complete latency is sampled, as Storm samples it: one tree is timed at a time (the next
    tracked emit after the timed one settled), not every tree.
    """

    __slots__ = ("untracked", "_trees", "_task", "_stats", "_report_error", "_ack", "_fail", "_timed_root",
                 "_timed_t0")

    def __init__(self, task: int, stats: ExecutorStats, report_error: Callable[[int, BaseException], None]) -> None:
        self.untracked: Callable[[int, bool], None] | None = None
        self._trees = RotatingMap(2)
        self._task = task
        self._stats = stats
        self._report_error = report_error
        self._ack: Callable[[Any], None] | None = None  # the spout's ack and fail
        self._fail: Callable[[Any], None] | None = None
        self._timed_root: int | None = None  # the tree whose complete latency is being measured
        self._timed_t0 = 0.0

    def bind(self, spout: Any) -> None:
        """The task's spout, whose ``ack`` and ``fail`` settle its trees."""
        self._ack, self._fail = spout.ack, spout.fail

    def __len__(self) -> int:
        return len(self._trees)

    def start(self, root: int, msg_id: Any) -> None:
        """A tracked emit started tree ``root`` for ``msg_id``."""
        self._trees.put(root, msg_id)
        if self._timed_root is None:
            self._timed_root = root
            self._timed_t0 = time.perf_counter()

    def msg_id(self, root: int) -> Any:
        """The message id of pending tree ``root``; None if it is not pending."""
        return self._trees.get(root)

    def touch(self, root: int) -> None:
        """Restart the timeout of tree ``root`` (a bolt's ``reset_timeout``)."""
        self._trees.touch(root)

    def completed(self, roots: list[int]) -> None:
        """The acker (or the round, see squall.runtime.executor.ack_ledger) completed these trees."""
        for root in roots:
            self.settle(root, True)

    def settle(self, root: int, acked: bool) -> None:
        """Tree ``root`` completed (``acked``) or failed: the spout's ``ack`` or ``fail``."""
        msg_id = self._trees.pop(root, _NOT_PENDING)
        if msg_id is _NOT_PENDING:
            if self.untracked is not None:
                self.untracked(root, acked)
            return
        if root == self._timed_root:
            self._timed_root = None
            if acked:
                self._stats.complete_secs += time.perf_counter() - self._timed_t0
                self._stats.complete_count += 1
        self.settle_untracked(msg_id, acked)

    def settle_untracked(self, msg_id: Any, acked: bool) -> None:
        """The spout's ``ack`` or ``fail`` for ``msg_id``, counted: a settled tree's, or one that
        started no tree (ack: nothing to track, no ackers or no targets; fail: the emit raised)."""
        if acked:
            self._stats.acked += 1
            self._call(self._ack, msg_id)
        else:
            self._stats.failed += 1
            self._call(self._fail, msg_id)

    def expire(self) -> None:
        """A timeout period went by: fail the trees pending for two of them."""
        expired = self._trees.rotate()
        if self._timed_root in expired:
            self._timed_root = None
        for msg_id in expired.values():
            self.settle_untracked(msg_id, False)

    def _call(self, method: Callable[[Any], None], msg_id: Any) -> None:
        """The spout's ``ack`` or ``fail``; an exception is reported, not raised."""
        try:
            method(msg_id)
        except Exception as e:
            self._report_error(self._task, e)
