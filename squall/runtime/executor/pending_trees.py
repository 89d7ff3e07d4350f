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


class PendingTrees:
    """One spout task's pending trees: root id -> (message id, emit time).

    ``spout`` is set once the task's spout exists; ``untracked(root, acked)``, if set, is told of
    a root settled here that is not a pending tree (a stateful spout's in-flight marker, or a tree
    that already timed out).
    """

    __slots__ = ("spout", "untracked", "_trees", "_task", "_stats", "_report_error")

    def __init__(self, task: int, stats: ExecutorStats, report_error: Callable[[int, BaseException], None]) -> None:
        self.spout: Any = None
        self.untracked: Callable[[int, bool], None] | None = None
        self._trees = RotatingMap(2)
        self._task = task
        self._stats = stats
        self._report_error = report_error

    def __len__(self) -> int:
        return len(self._trees)

    def start(self, root: int, msg_id: Any) -> None:
        """A tracked emit started tree ``root`` for ``msg_id``."""
        self._trees.put(root, (msg_id, time.perf_counter()))

    def msg_id(self, root: int) -> Any:
        """The message id of pending tree ``root``; None if it is not pending."""
        entry = self._trees.get(root)
        return None if entry is None else entry[0]

    def touch(self, root: int) -> None:
        """Restart the timeout of tree ``root`` (a bolt's ``reset_timeout``)."""
        self._trees.touch(root)

    def completed(self, roots: list[int]) -> None:
        """The acker (or the round, see squall.runtime.executor.ack_ledger) completed these trees."""
        for root in roots:
            self.settle(root, True)

    def settle(self, root: int, acked: bool) -> None:
        """Tree ``root`` completed (``acked``) or failed: the spout's ``ack`` or ``fail``."""
        entry = self._trees.pop(root)
        if entry is None:
            if self.untracked is not None:
                self.untracked(root, acked)
            return
        stats = self._stats
        if acked:
            stats.acked += 1
            stats.complete_secs += time.perf_counter() - entry[1]
            stats.complete_count += 1
            self.call("ack", entry[0])
        else:
            stats.failed += 1
            self.call("fail", entry[0])

    def settle_untracked(self, msg_id: Any, acked: bool) -> None:
        """The spout's ``ack`` (nothing to track: no ackers, no targets) or ``fail`` (the emit
        raised) for a message id that started no tree."""
        if acked:
            self._stats.acked += 1
            self.call("ack", msg_id)
        else:
            self._stats.failed += 1
            self.call("fail", msg_id)

    def expire(self) -> None:
        """A timeout period went by: fail the trees pending for two of them."""
        for entry in self._trees.rotate().values():
            self._stats.failed += 1
            self.call("fail", entry[0])

    def call(self, method: str, msg_id: Any) -> None:
        """The spout's ``ack`` or ``fail`` for ``msg_id``; an exception is reported, not raised."""
        try:
            getattr(self.spout, method)(msg_id)
        except Exception as e:
            self._report_error(self._task, e)
