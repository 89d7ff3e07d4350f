"""Per-executor statistics and their roll-up per component (what Storm's UI shows).

Counts are exact. Latencies are sampled: execute latency is measured per input batch
(total time / tuples), process latency on the first tuple of each batch, complete latency
on every acked spout tuple. Capacity is the fraction of the last ``CAPACITY_WINDOW_SECS``
(or of the uptime, if shorter) the executor spent in ``execute``: near 1.0 means the
component needs more parallelism.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

CAPACITY_WINDOW_SECS = 600.0


class ExecutorStats:
    """Written by one executor thread; read (racily, which is fine for metrics) by others."""

    __slots__ = ("emitted", "transferred", "acked", "failed", "executed", "execute_secs",
                 "process_secs", "process_count", "complete_secs", "complete_count", "process_is_execute",
                 "_busy_marks", "_started")

    def __init__(self) -> None:
        self.emitted: dict[str, int] = {}
        self.transferred: dict[str, int] = {}
        self.acked = 0
        self.failed = 0
        self.executed = 0
        self.execute_secs = 0.0
        self.process_secs = 0.0
        self.process_count = 0
        self.complete_secs = 0.0
        self.complete_count = 0
        self.process_is_execute = False
        self._started = time.monotonic()
        self._busy_marks: deque[tuple[float, float]] = deque([(self._started, 0.0)])

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


def _ms(total_secs: float, count: int) -> float:
    return round(1000.0 * total_secs / count, 4) if count else 0.0


def component_summary(kind: str, stats: list[ExecutorStats]) -> dict[str, Any]:
    """Roll the executors' stats of one component up into get_topology_info's shape."""
    user = lambda d: sum(v for k, v in d.items() if not k.startswith("__"))  # noqa: E731
    out: dict[str, Any] = {
        "emitted": sum(user(s.emitted) for s in stats),
        "transferred": sum(user(s.transferred) for s in stats),
        "acked": sum(s.acked for s in stats),
        "failed": sum(s.failed for s in stats),
        "execute_latency_ms": _ms(sum(s.execute_secs for s in stats), sum(s.executed for s in stats)),
        "process_latency_ms": _ms(
            sum(s.execute_secs if s.process_is_execute else s.process_secs for s in stats),
            sum(s.executed if s.process_is_execute else s.process_count for s in stats),
        ),
    }
    if kind == "spout":
        out["complete_latency_ms"] = _ms(sum(s.complete_secs for s in stats),
                                         sum(s.complete_count for s in stats))
    else:
        out["executed"] = sum(s.executed for s in stats)
        out["capacity"] = round(max((s.capacity() for s in stats), default=0.0), 4)
    return out
