"""What one executor counts and times (Storm's ``BoltExecutorStats``/``SpoutExecutorStats``).

Counts are exact. Latencies are sampled: execute latency is measured per input batch
(total time / tuples), process latency on the first tuple of each batch (:meth:`ExecutorStats.sample`
until that tuple is acked or failed), complete latency on every acked spout tuple. Capacity is
the fraction of the last ``CAPACITY_WINDOW_SECS`` (or of the uptime, if shorter) the executor
spent in ``execute``: near 1.0 means the component needs more parallelism.

Written by the executor's thread (or a thread holding its lock); read racily by others, which
is fine for metrics. The roll-up per component is :mod:`squall.runtime.stats`.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

CAPACITY_WINDOW_SECS = 600.0


class ExecutorStats:
    """One executor's figures; :meth:`record_ack` and :meth:`record_fail` are called once per
    input tuple a collector acks or fails."""

    __slots__ = ("acked", "failed", "executed", "execute_secs", "process_secs", "process_count", "complete_secs",
                 "complete_count", "process_is_execute", "_busy_marks", "_sample_tup", "_sample_t0")

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.executed = 0
        self.execute_secs = 0.0
        self.process_secs = 0.0
        self.process_count = 0
        self.complete_secs = 0.0
        self.complete_count = 0
        self.process_is_execute = False
        self._busy_marks: deque[tuple[float, float]] = deque([(time.monotonic(), 0.0)])
        self._sample_tup: Any = None  # the input whose process latency is being measured
        self._sample_t0 = 0.0

    def sample(self, tup: Any) -> None:
        """Time ``tup`` (the first of a batch) from now until it is acked."""
        self._sample_tup = tup
        self._sample_t0 = time.perf_counter()

    def record_ack(self, tup: Any) -> None:
        self.acked += 1
        if tup is self._sample_tup:
            self.process_secs += time.perf_counter() - self._sample_t0
            self.process_count += 1
            self._sample_tup = None

    def record_fail(self, tup: Any) -> None:
        self.failed += 1
        if tup is self._sample_tup:
            self._sample_tup = None

    def record_execute(self, count: int, secs: float) -> None:
        self.executed += count
        self.execute_secs += secs
        now = time.monotonic()
        if now - self._busy_marks[-1][0] >= 1.0:
            self._busy_marks.append((now, self.execute_secs))
            while len(self._busy_marks) > 2 and now - self._busy_marks[1][0] >= CAPACITY_WINDOW_SECS:
                self._busy_marks.popleft()

    def capacity(self) -> float:
        now = time.monotonic()
        since, busy_then = self._busy_marks[0]
        window = now - since
        return min(1.0, (self.execute_secs - busy_then) / window) if window > 0 else 0.0

    def snapshot(self, emitted: int, transferred: int) -> dict[str, Any]:
        """The figures as a plain dict (what workers send in their heartbeats)."""
        process_secs, process_count = (
            (self.execute_secs, self.executed) if self.process_is_execute else (self.process_secs, self.process_count)
        )
        return {
            "emitted": emitted, "transferred": transferred, "acked": self.acked, "failed": self.failed,
            "executed": self.executed, "execute_secs": self.execute_secs, "process_secs": process_secs,
            "process_count": process_count, "complete_secs": self.complete_secs,
            "complete_count": self.complete_count, "capacity": self.capacity(),
        }
