"""The cluster clock, real or simulated (Storm's ``Time`` with ``startSimulating``).

Timeouts, tick tuples and uptime read this clock. Inside :func:`simulated_time` it stands
still until the test calls :func:`advance_time`, which returns once every running worker
timer has acted on the new time (so the ticks and timeouts due are already queued).
Latencies are always measured in real time.
"""

from __future__ import annotations

import contextlib
import math
import threading
import time
from collections.abc import Callable, Iterator

_cond = threading.Condition()
_simulating = False
_sim_now = 0.0
_timers: set[Timer] = set()


def now() -> float:
    """Seconds on the cluster clock (monotonic, or simulated)."""
    return _sim_now if _simulating else time.monotonic()


def is_simulating() -> bool:
    return _simulating


@contextlib.contextmanager
def simulated_time(start: float = 0.0) -> Iterator[None]:
    """Run the block with a clock that moves only through :func:`advance_time`."""
    global _simulating, _sim_now
    with _cond:
        if _simulating:
            raise RuntimeError("simulated_time() is already active")
        _simulating, _sim_now = True, float(start)
    try:
        yield
    finally:
        with _cond:
            _simulating = False
            _cond.notify_all()


def advance_time(secs: float, wait_secs: float = 10.0) -> None:
    """Move the simulated clock ``secs`` forward and wait until the timers caught up."""
    global _sim_now
    if secs < 0:
        raise ValueError("time cannot go backwards")
    with _cond:
        if not _simulating:
            raise RuntimeError("advance_time() needs simulated_time()")
        _sim_now += secs
        target = _sim_now
        _cond.notify_all()
        if not _cond.wait_for(lambda: all(t.seen >= target or t.stopped for t in _timers), wait_secs):
            raise TimeoutError(f"worker timers did not reach simulated time {target} within {wait_secs}s")


class Timer:
    """A thread running periodic callbacks on the cluster clock (a worker's timer).

    Callbacks run on the timer thread and must not block. If one raises, the thread ends and
    ``on_death(error)`` is called on it (the worker fails fast).
    """

    def __init__(self, name: str, on_death: Callable[[BaseException], None] | None = None) -> None:
        self._jobs: list[list] = []  # [next_due, period, callback]
        self.seen = now()
        self.stopped = False
        self._on_death = on_death
        self._thread = threading.Thread(target=self._guarded_run, name=name, daemon=True)

    def schedule_recurring(self, period: float, callback) -> None:
        """Call ``callback()`` every ``period`` seconds, first ``period`` seconds from now."""
        self._jobs.append([now() + period, period, callback])

    def start(self) -> None:
        with _cond:
            _timers.add(self)
        self._thread.start()

    def stop(self) -> None:
        with _cond:
            self.stopped = True
            _timers.discard(self)
            _cond.notify_all()
        if self._thread is not threading.current_thread() and self._thread.is_alive():
            self._thread.join()

    def _guarded_run(self) -> None:
        try:
            self._run()
        except BaseException as e:
            with _cond:
                _timers.discard(self)  # advance_time must not wait for a dead timer
                _cond.notify_all()
            if self._on_death is None:
                raise
            self._on_death(e)

    def _run(self) -> None:
        while True:
            with _cond:
                if self.stopped:
                    return
                current = now()
            for job in self._jobs:
                if current - job[0] > 1000 * job[1]:
                    job[0] = current  # the clock switched between real and simulated: start over
                while job[0] <= current:
                    job[0] += job[1]
                    job[2]()
            with _cond:
                self.seen = current
                _cond.notify_all()
                next_due = min((job[0] for job in self._jobs), default=current + 3600)
                if _simulating:
                    _cond.wait_for(lambda: self.stopped or not _simulating or _sim_now > current)
                else:
                    _cond.wait(max(0.0, min(next_due - current, 0.5)))


def format_duration(secs: float) -> str:
    """``1d 2h 3m 4s``, from the first unit that is not zero (Storm UI's format)."""
    left = int(secs)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if left >= size or parts:
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join([*parts, f"{left}s"])


def parse_seconds(text: str) -> float:
    """A number of seconds >= 0, finite (a kill's or a rebalance's wait); ValueError otherwise."""
    try:
        secs = float(text)
    except ValueError:
        secs = math.nan
    if not (math.isfinite(secs) and secs >= 0):
        raise ValueError(f"expected a number of seconds >= 0, got {text!r}")
    return secs
