"""User metrics: Storm's metrics v2 types (Dropwizard's Counter, Gauge, Histogram, Meter and
Timer) in snake_case.

Updating costs a few attribute operations and takes no lock: a metric is updated by its task's
thread (or one thread at a time, as a component's own threads emit holding the executor's
lock); the figures are read racily by whoever reports them, as :class:`squall.runtime.stats.ExecutorStats`
is. A snapshot is a plain dict whose ``"type"`` names the metric type and whose other keys are
its figures; every figure is an int or a finite float within the bounds
:mod:`squall.runtime.messaging.schema` checks heartbeats against.

Histograms and timers keep a **sliding window** of their last :data:`WINDOW_SIZE` values
(Dropwizard's ``SlidingWindowReservoir``): bounded memory, O(1) updates with no random draw or
clock read; ``min``, ``max``, ``mean``, ``stddev`` and the percentiles describe that window,
``count`` and ``sum`` every value ever recorded. Meters and timers report Dropwizard's rates:
the mean rate since creation and exponentially weighted moving averages over 1, 5 and 15
minutes, per second, ticked every :data:`TICK_SECS` (lazily, when read).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any, ClassVar

#: how many of its last values a histogram or timer keeps (Dropwizard's default reservoir size)
WINDOW_SIZE = 1028
#: the longest metric name, and the most metrics one task may register (what a heartbeat carries)
MAX_NAME_LENGTH = 256
MAX_METRICS_PER_TASK = 1000
#: the largest magnitude a float figure is reported with (larger ones are clipped to it)
MAX_FIGURE = 1e300
_MIN_INT, _MAX_INT = -(1 << 63), (1 << 63) - 1
#: the percentiles a histogram or timer reports, by their figure's name
PERCENTILES = (("p50", 0.5), ("p75", 0.75), ("p95", 0.95), ("p98", 0.98), ("p99", 0.99), ("p999", 0.999))
TICK_SECS = 5.0
_RATE_MINUTES = ((1, "m1_rate"), (5, "m5_rate"), (15, "m15_rate"))


def figure(value: Any) -> int | float | None:
    """``value`` as a reportable figure: an int within 64 bits, or a float within
    ±:data:`MAX_FIGURE` (infinities clipped to it); None for NaN or a non-number."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return min(max(value, _MIN_INT), _MAX_INT)
    try:
        value = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    if math.isnan(value):
        return None
    return min(max(value, -MAX_FIGURE), MAX_FIGURE)


def _percentile(quantile: float) -> property:
    return property(lambda self: self.percentile(quantile), doc=f"The {quantile:g} quantile of the window's values.")


def _rate(name: str) -> property:
    return property(lambda self: self._rates.read(self.count)[name], doc=f"{name}, per second.")


class Counter:
    """A count that goes up and down (Dropwizard's ``Counter``): ``inc(n=1)``, ``dec(n=1)``;
    read ``count``."""

    kind: ClassVar[str] = "counter"
    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count: int | float = 0

    def inc(self, n: int | float = 1) -> None:
        self.count += n

    def dec(self, n: int | float = 1) -> None:
        self.count -= n

    def snapshot(self) -> dict[str, Any] | None:
        """``{"type": "counter", "count": ...}``; None while the count is not a number."""
        count = figure(self.count)
        return None if count is None else {"type": self.kind, "count": count}


class Gauge:
    """An instantaneous value (Dropwizard's ``Gauge``): read by calling the ``read`` callable it
    was registered with, when reported; or, registered without one, the last value ``set``
    (what a multilang component's ``metrics`` command updates)."""

    kind: ClassVar[str] = "gauge"
    __slots__ = ("_read", "_value")

    def __init__(self, read: Callable[[], Any] | None = None) -> None:
        if read is not None and not callable(read):
            raise TypeError(f"a gauge reads a callable returning a number, got {read!r}")
        self._read = read
        self._value: Any = 0

    @property
    def settable(self) -> bool:
        return self._read is None

    @property
    def value(self) -> Any:
        """The gauge's value now (what its callable returns; may raise what it raises)."""
        return self._value if self._read is None else self._read()

    def set(self, value: int | float) -> None:
        """Set the value of a gauge registered without a callable (TypeError otherwise)."""
        if self._read is not None:
            raise TypeError("this gauge reads its callable; only a gauge registered without one can be set")
        self._value = value

    def snapshot(self) -> dict[str, Any] | None:
        """``{"type": "gauge", "value": ...}``; None when the value is not a number, or reading
        it raised (the gauge is left out of that report)."""
        try:
            value = figure(self.value)
        except Exception:  # noqa: BLE001 - a user's callable: its failure only hides the gauge
            return None
        return None if value is None else {"type": self.kind, "value": value}


class Histogram:
    """The distribution of values (Dropwizard's ``Histogram``): ``update(value)``; read
    ``count`` and ``sum`` (every value ever), ``min``, ``max``, ``mean``, ``stddev`` and the
    percentiles ``p50`` ... ``p999`` (``percentile(q)`` for others) over the last
    :data:`WINDOW_SIZE` values (see the module's docstring). Percentiles interpolate between
    the two nearest values, as Dropwizard's snapshots do; an empty histogram reports zeros.
    ``update`` raises ValueError for NaN or an infinity, TypeError for a non-number and
    OverflowError for an int beyond a float's range (recording nothing)."""

    kind: ClassVar[str] = "histogram"
    __slots__ = ("count", "sum", "_window")

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self._window = [0.0] * WINDOW_SIZE

    def update(self, value: int | float) -> None:
        if value - value != 0:  # NaN or an infinity (a non-number raises TypeError here)
            raise ValueError(f"{self.kind} update with a non-finite value: {value!r}")
        self.sum += value  # first: an int beyond a float's range raises OverflowError, unrecorded
        count = self.count
        self._window[count % WINDOW_SIZE] = value
        self.count = count + 1

    def values(self) -> list[float]:
        """The window's values, sorted (read racily: one update may be half in)."""
        return sorted(self._window[:min(self.count, WINDOW_SIZE)])

    def percentile(self, quantile: float) -> float:
        """The ``quantile`` (0 to 1) of the window's values."""
        return _quantile(self.values(), quantile)

    p50, p75, p95, p98, p99, p999 = (_percentile(quantile) for _, quantile in PERCENTILES)

    @property
    def min(self) -> float:
        return min(self.values(), default=0.0)

    @property
    def max(self) -> float:
        return max(self.values(), default=0.0)

    @property
    def mean(self) -> float:
        return _mean(self.values())

    @property
    def stddev(self) -> float:
        return _stddev(self.values())

    def snapshot(self) -> dict[str, Any]:
        """``{"type", "count", "sum", "min", "max", "mean", "stddev", "p50", ..., "p999"}``,
        from one read of the window."""
        count, total, values = self.count, self.sum, self.values()
        out: dict[str, Any] = {
            "type": self.kind, "count": min(count, _MAX_INT), "sum": _float(total),
            "min": _float(values[0]) if values else 0.0, "max": _float(values[-1]) if values else 0.0,
            "mean": _float(_mean(values)), "stddev": _float(_stddev(values)),
        }
        for name, quantile in PERCENTILES:
            out[name] = _float(_quantile(values, quantile))
        return out


class _Rates:
    """Dropwizard's meter rates for a count that only its owner updates: the mean rate and
    1/5/15-minute EWMAs, ticked every :data:`TICK_SECS` when read (the ticks missed since the
    last read are replayed, the first taking every event counted meanwhile). Reads may come
    from several threads, so they take a lock; the owner's updates do not."""

    __slots__ = ("_start", "_last_tick", "_last_count", "_ewmas", "_lock")

    def __init__(self) -> None:
        self._start = self._last_tick = time.monotonic()
        self._last_count: int | float = 0
        self._ewmas: list[float | None] = [None] * len(_RATE_MINUTES)  # None: not ticked yet
        self._lock = threading.Lock()

    def read(self, count: int | float) -> dict[str, float]:
        """``mean_rate``, ``m1_rate``, ``m5_rate`` and ``m15_rate`` (per second) for ``count``."""
        now = time.monotonic()
        with self._lock:
            ticks = int((now - self._last_tick) // TICK_SECS)
            if ticks:
                self._last_tick += ticks * TICK_SECS
                instant = (count - self._last_count) / TICK_SECS
                self._last_count = count
                for i, (minutes, _) in enumerate(_RATE_MINUTES):
                    alpha = 1.0 - math.exp(-TICK_SECS / (60.0 * minutes))
                    rate = self._ewmas[i]
                    rate = instant if rate is None else rate + alpha * (instant - rate)
                    # the ticks with nothing counted since (replayed at once: a decay)
                    self._ewmas[i] = rate * (1.0 - alpha) ** (ticks - 1)
            elapsed = now - self._start
            rates = {"mean_rate": _float(count / elapsed) if elapsed > 0 else 0.0}
            for rate, (_, name) in zip(self._ewmas, _RATE_MINUTES):
                rates[name] = _float(rate or 0.0)
        return rates


class _Metered:
    """``mean_rate``, ``m1_rate``, ``m5_rate`` and ``m15_rate`` (per second) of a ``count`` whose
    :class:`_Rates` are ``_rates``."""

    __slots__ = ()
    count: int | float
    _rates: _Rates

    mean_rate, m1_rate, m5_rate, m15_rate = (_rate(name) for name in ("mean_rate", *(n for _, n in _RATE_MINUTES)))


class Meter(_Metered):
    """The rate of events (Dropwizard's ``Meter``): ``mark(n=1)``; read ``count``,
    ``mean_rate`` and the ``m1_rate``, ``m5_rate``, ``m15_rate`` moving averages (per second)."""

    kind: ClassVar[str] = "meter"
    __slots__ = ("count", "_rates")

    def __init__(self) -> None:
        self.count: int | float = 0
        self._rates = _Rates()

    def mark(self, n: int | float = 1) -> None:
        self.count += n

    def snapshot(self) -> dict[str, Any] | None:
        """``{"type": "meter", "count", "mean_rate", "m1_rate", "m5_rate", "m15_rate"}``; None
        while the count is not a number."""
        count = figure(self.count)
        return None if count is None else {"type": self.kind, "count": count, **self._rates.read(count)}


class Timer(Histogram, _Metered):
    """Durations, in seconds, and their rate (Dropwizard's ``Timer``): ``update(secs)``, or
    ``with timer.time(): ...`` (which times the block with :func:`time.perf_counter`); read what
    a :class:`Histogram` and a :class:`Meter` have (``count``, ``mean``, ``p99``, ``m1_rate``...)."""

    kind: ClassVar[str] = "timer"
    __slots__ = ("_rates",)

    def __init__(self) -> None:
        super().__init__()
        self._rates = _Rates()

    def time(self) -> TimerContext:
        """A context manager timing its block (also usable as ``ctx = timer.time(); ...;
        ctx.stop()``)."""
        return TimerContext(self)

    def snapshot(self) -> dict[str, Any]:
        """A :class:`Histogram`'s figures (in seconds) and a :class:`Meter`'s rates."""
        out = super().snapshot()
        out.update(self._rates.read(out["count"]))
        return out


class TimerContext:
    """One timing of a :class:`Timer`, started when made."""

    __slots__ = ("_timer", "_start")

    def __init__(self, timer: Timer) -> None:
        self._timer = timer
        self._start = time.perf_counter()

    def __enter__(self) -> TimerContext:
        return self  # started when made: ``with timer.time():`` makes it just before

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def stop(self) -> float:
        """Record the seconds since the start (or ``__enter__``) and return them."""
        secs = time.perf_counter() - self._start
        self._timer.update(secs)
        return secs


Metric = Counter | Gauge | Histogram | Meter | Timer


def _float(value: float) -> float:
    return min(max(float(value), -MAX_FIGURE), MAX_FIGURE) if value == value else 0.0


def _quantile(values: list[float], quantile: float) -> float:
    """The ``quantile`` of sorted ``values``, interpolated between the two nearest (position
    ``quantile * (n + 1)``, 1-based, clamped to the ends); 0.0 for none."""
    if not values:
        return 0.0
    position = quantile * (len(values) + 1)
    if position < 1:
        return float(values[0])
    if position >= len(values):
        return float(values[-1])
    index = int(position)
    lower, upper = values[index - 1], values[index]
    return lower + (position - index) * (upper - lower)


# Plain sums and products: with values near a float's limits they overflow to an infinity
# (clipped when reported) where math.fsum or ** would raise.


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _stddev(values: list[float]) -> float:
    """The sample standard deviation (0.0 for fewer than two values)."""
    if len(values) < 2:
        return 0.0
    mean = _mean(values)
    return math.sqrt(sum((v - mean) * (v - mean) for v in values) / (len(values) - 1))
