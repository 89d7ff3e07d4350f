"""A topology's figures over time, for Storm UI's windows (10 minutes, 3 hours, 1 day, all time).

Executors keep cumulative counts only. Nimbus records each component's cumulative counts
whenever it reads them (:meth:`StatsHistory.record`; ``squall run`` and ``squall submit`` read
them several times a second) and a window's figures are the difference between now and the
sample at the window's start: the counts of the window, and latencies as the window's total
time over its count. A topology younger than a window shows all its figures in it, as in Storm.

Memory is bounded whatever the uptime: samples are kept at three resolutions (every
``FINE_SECS`` for ten minutes, every minute for three hours, every ten minutes for a day), so
a window's start is off by at most one step of the resolution that covers it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any

from squall.utils.time import format_duration

#: Storm UI's windows, in seconds; None stands for all time (Storm's ":all-time")
WINDOWS: tuple[int | None, ...] = (600, 10800, 86400, None)
ALL_TIME = ":all-time"

#: the cumulative figures a window subtracts (each executor snapshot's keys of these names)
COUNTERS = ("emitted", "transferred", "acked", "failed", "executed", "execute_secs", "process_secs",
            "process_count", "complete_secs", "complete_count")

FINE_SECS = 2.0
# (step, span): one sample per step, kept for span
_RESOLUTIONS = ((FINE_SECS, 600.0), (60.0, 10800.0), (600.0, 86400.0))

Totals = dict[str, tuple[float, ...]]  # component -> the COUNTERS, summed over its executors


def parse_window(value: str | None) -> int | None:
    """A ``window`` request parameter: seconds (a positive integer) or ``:all-time`` (None).
    Raises ValueError naming the parameter for anything else."""
    if value is None or value == ALL_TIME:
        return None
    try:
        secs = int(value)
    except ValueError:
        secs = 0
    if secs <= 0:
        raise ValueError(f"window must be a number of seconds > 0 or {ALL_TIME!r}, got {value!r}")
    return secs


def window_pretty(window: int | None) -> str:
    """Storm UI's ``windowPretty``: "10m 0s", "3h 0m 0s", "1d 0h 0m 0s", "All time"."""
    return "All time" if window is None else format_duration(window)


def totals_of(snapshots: Iterable[tuple[str, Mapping[str, Any]]]) -> Totals:
    """Per component, the sum of its executors' cumulative figures."""
    totals: dict[str, list[float]] = {}
    for component, snapshot in snapshots:
        sums = totals.setdefault(component, [0.0] * len(COUNTERS))
        for i, key in enumerate(COUNTERS):
            sums[i] += snapshot.get(key, 0)
    return {component: tuple(sums) for component, sums in totals.items()}


class StatsHistory:
    """Samples of one topology's totals; thread-safe (the serve loop and the UI both read)."""

    def __init__(self, started: float) -> None:
        self.started = started
        self._rings: list[deque[tuple[float, Totals]]] = [deque() for _ in _RESOLUTIONS]
        self._lock = threading.Lock()

    def record(self, now: float, totals: Totals) -> None:
        """Keep ``totals`` (taken at ``now``) if a ring is due for a sample."""
        with self._lock:
            for ring, (step, span) in zip(self._rings, _RESOLUTIONS):
                if not ring or now - ring[-1][0] >= step:
                    ring.append((now, totals))
                while len(ring) > 1 and now - ring[1][0] >= span:
                    ring.popleft()  # the oldest kept sample is at least ``span`` old

    def __len__(self) -> int:
        """How many samples it holds, over all resolutions (what its memory grows with)."""
        with self._lock:
            return sum(len(ring) for ring in self._rings)

    def window(self, now: float, totals: Totals, window: int | None) -> Totals:
        """``totals`` (taken at ``now``) minus those at the start of ``window`` seconds ago; all
        of ``totals`` for all time, or while the topology is younger than the window."""
        if window is None or now - self.started <= window:
            return totals
        with self._lock:
            base = self._at(now - window)
        if base is None:
            return totals
        zero = (0.0,) * len(COUNTERS)
        # a worker restarted meanwhile counts from 0 again: no negative figures
        return {component: tuple(max(0.0, v - b) for v, b in zip(values, base.get(component, zero)))
                for component, values in totals.items()}

    def recent(self, now: float, totals: Totals) -> list[tuple[float, Totals]]:
        """The samples of the last ten minutes, oldest first, ending with ``totals`` at ``now``:
        what live plots draw (rates between consecutive samples)."""
        with self._lock:
            samples = [sample for sample in self._rings[0] if sample[0] < now]
        return [*samples, (now, totals)]

    def _at(self, since: float) -> Totals | None:
        """The oldest sample taken at or after ``since``, from the finest ring that reaches it."""
        for ring in self._rings:
            if ring and ring[0][0] <= since:
                return next(sample for t, sample in ring if t >= since) if ring[-1][0] >= since else ring[-1][1]
        for ring in reversed(self._rings):  # no ring reaches back that far: the oldest sample
            if ring:
                return ring[0][1]
        return None
