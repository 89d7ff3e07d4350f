"""A windowed bolt's settings: ``Count``, ``Duration`` and :class:`WindowConfig`.

``Count`` and ``Duration`` are checked when they are made, and a :class:`WindowConfig` when it
is made, so a bad value raises where the user wrote it (``Count(0)``,
``with_window(Count(3), "2")``). The window travels as the bolt's component configuration under
Storm's keys (``topology.bolts.window.length.count``, ...): :meth:`WindowConfig.to_conf` writes
every one of them (None for those unused, so that no topology-wide key leaks into the window)
at ``create_topology``, and :meth:`WindowConfig.from_conf` reads them back (in the worker, and
in the checks at ``create_topology`` and at submission), so that ``add_configuration``
overrides them as in Storm and every check sees what will run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from squall.api.component import check_id
from squall.api.config import Config

# Storm's keys, defined in the registry (squall/api/defaults.py)
LENGTH_COUNT = Config.TOPOLOGY_BOLTS_WINDOW_LENGTH_COUNT
LENGTH_DURATION_MS = Config.TOPOLOGY_BOLTS_WINDOW_LENGTH_DURATION_MS
SLIDING_COUNT = Config.TOPOLOGY_BOLTS_SLIDING_INTERVAL_COUNT
SLIDING_DURATION_MS = Config.TOPOLOGY_BOLTS_SLIDING_INTERVAL_DURATION_MS
TIMESTAMP_FIELD = Config.TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_FIELD_NAME
MAX_LAG_MS = Config.TOPOLOGY_BOLTS_TUPLE_TIMESTAMP_MAX_LAG_MS
WATERMARK_INTERVAL_MS = Config.TOPOLOGY_BOLTS_WATERMARK_EVENT_INTERVAL_MS
LATE_TUPLE_STREAM = Config.TOPOLOGY_BOLTS_LATE_TUPLE_STREAM

#: The one field of the late tuple stream: the late tuple's values, as a list (Storm's field name).
LATE_TUPLE_FIELD = "late_tuple"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Count:
    """A number of tuples: a window length or sliding interval (Storm's ``Count``)."""

    value: int

    def __post_init__(self) -> None:
        if not _is_int(self.value):
            raise TypeError(f"Count takes an integer, got {type(self.value).__name__} {self.value!r}")
        if self.value < 1:
            raise ValueError(f"Count must be >= 1, got {self.value!r}")

    @classmethod
    def of(cls, value: int) -> Count:
        return cls(value)

    def __repr__(self) -> str:
        return f"Count({self.value})"


@dataclass(frozen=True, init=False)
class Duration:
    """A span of time (Storm's ``Duration``): ``Duration(secs)``, ``Duration.seconds(n)``,
    ``Duration.milliseconds(n)``, ``Duration.minutes(n)``. Kept as whole milliseconds, the
    unit of window timestamps; a span that is not a whole number of them is refused."""

    millis: int

    def __init__(self, secs: float) -> None:
        if isinstance(secs, bool) or not isinstance(secs, (int, float)):
            raise TypeError(f"Duration takes a number of seconds, got {type(secs).__name__} {secs!r}")
        if not math.isfinite(secs) or secs < 0:
            raise ValueError(f"Duration takes a number of seconds >= 0, got {secs!r}")
        millis = secs * 1000
        if abs(millis - round(millis)) > 1e-6:
            raise ValueError(f"Duration({secs!r}) is not a whole number of milliseconds")
        object.__setattr__(self, "millis", int(round(millis)))

    @classmethod
    def seconds(cls, n: float) -> Duration:
        return cls(n)

    @classmethod
    def milliseconds(cls, n: int) -> Duration:
        if not _is_int(n):
            raise TypeError(f"Duration.milliseconds takes an integer, got {type(n).__name__} {n!r}")
        return cls(n / 1000)

    @classmethod
    def minutes(cls, n: float) -> Duration:
        return cls(n * 60)

    @property
    def secs(self) -> float:
        return self.millis / 1000

    def __repr__(self) -> str:
        secs = self.millis / 1000
        return f"Duration({int(secs) if secs.is_integer() else secs})"


Interval = Count | Duration


def _check_interval(what: str, value: Any) -> None:
    if isinstance(value, Duration):
        _check_duration(what, value, 1)
    elif not isinstance(value, Count):
        raise TypeError(f"{what} must be a Count or a Duration, got {type(value).__name__} {value!r}")


def _check_duration(what: str, value: Any, at_least_ms: int) -> None:
    if not isinstance(value, Duration):
        raise TypeError(f"{what} must be a Duration, got {type(value).__name__} {value!r}")
    if value.millis < at_least_ms:
        raise ValueError(f"{what} must be at least {at_least_ms} ms, got {value}")


@dataclass(frozen=True)
class WindowConfig:
    """What a windowed bolt's window is, checked when made (``ValueError`` / ``TypeError``
    saying what is wrong).

    * ``length``: ``Count(n)`` (the last n tuples) or ``Duration`` (the tuples of that span);
      None until ``with_window`` is called.
    * ``sliding``: how often the window is evaluated, every ``Count(n)`` tuples or every
      ``Duration``. Default ``Count(1)`` (Storm's). A sliding interval longer than the window
      is allowed, as in Storm: the tuples between two windows are in none (they are acked
      when they leave, like any other).
    * ``timestamp_field``: event time, read from that field of every input; None for
      processing time (or when a timestamp extractor, which is no configuration, is used).
    * ``lag``: how far out of order event timestamps may be (the watermark trails the newest
      timestamp by this much); ``watermark_interval``: how often the watermark moves.
    * ``late_tuple_stream``: the stream late tuples are emitted on (event time only).
    """

    length: Interval | None = None
    sliding: Interval = field(default_factory=lambda: Count(1))
    timestamp_field: str | None = None
    lag: Duration = field(default_factory=lambda: Duration(0))
    watermark_interval: Duration = field(default_factory=lambda: Duration(1))
    late_tuple_stream: str | None = None

    def __post_init__(self) -> None:
        if self.length is not None:
            _check_interval("window length", self.length)
        _check_interval("sliding interval", self.sliding)
        if self.timestamp_field is not None and (not isinstance(self.timestamp_field, str) or not self.timestamp_field):
            raise ValueError(f"timestamp field must be a non-empty string, got {self.timestamp_field!r}")
        _check_duration("lag", self.lag, 0)
        _check_duration("watermark interval", self.watermark_interval, 1)
        if self.late_tuple_stream is not None:
            try:
                check_id("late tuple stream id", self.late_tuple_stream)
            except ValueError as e:  # InvalidTopologyError is a ValueError; here it is a bad value
                raise ValueError(str(e)) from None

    def to_conf(self) -> dict[str, Any]:
        """Every configuration key (Storm's) of a window, None where this one has no value."""
        return {
            LENGTH_COUNT: _size(self.length) if isinstance(self.length, Count) else None,
            LENGTH_DURATION_MS: _size(self.length) if isinstance(self.length, Duration) else None,
            SLIDING_COUNT: _size(self.sliding) if isinstance(self.sliding, Count) else None,
            SLIDING_DURATION_MS: _size(self.sliding) if isinstance(self.sliding, Duration) else None,
            TIMESTAMP_FIELD: self.timestamp_field,
            MAX_LAG_MS: self.lag.millis,
            WATERMARK_INTERVAL_MS: self.watermark_interval.millis,
            LATE_TUPLE_STREAM: self.late_tuple_stream,
        }

    @classmethod
    def from_conf(cls, conf: dict[str, Any]) -> WindowConfig:
        """The window ``conf`` describes; ``ValueError`` naming the key for a bad value, or
        when both a count and a duration are given for the length or the sliding interval."""
        return cls(
            length=_interval(conf, LENGTH_COUNT, LENGTH_DURATION_MS, None),
            sliding=_interval(conf, SLIDING_COUNT, SLIDING_DURATION_MS, Count(1)),
            timestamp_field=conf.get(TIMESTAMP_FIELD),
            lag=_millis(conf, MAX_LAG_MS, 0),
            watermark_interval=_millis(conf, WATERMARK_INTERVAL_MS, 1000),
            late_tuple_stream=conf.get(LATE_TUPLE_STREAM),
        )

    @staticmethod
    def describes(conf: dict[str, Any]) -> bool:
        """Whether ``conf`` is a windowed bolt's (it sets a window length)."""
        return conf.get(LENGTH_COUNT) is not None or conf.get(LENGTH_DURATION_MS) is not None


def _size(interval: Interval) -> int:
    return interval.value if isinstance(interval, Count) else interval.millis


def _interval(conf: dict[str, Any], count_key: str, ms_key: str, default: Interval | None) -> Interval | None:
    count, ms = conf.get(count_key), conf.get(ms_key)
    if count is not None and ms is not None:
        raise ValueError(f"config sets both {count_key!r} ({count!r}) and {ms_key!r} ({ms!r}); set one")
    if count is not None:
        try:
            return Count(count)
        except (TypeError, ValueError) as e:
            raise ValueError(f"config {count_key!r}: {e}") from None
    if ms is not None:
        return _millis(conf, ms_key, None)
    return default


def _millis(conf: dict[str, Any], key: str, default: int | None) -> Duration:
    value = conf.get(key)
    if value is None:
        value = default
    if not _is_int(value) or value < 0:
        raise ValueError(f"config {key!r} must be a whole number of milliseconds >= 0, got {value!r}")
    return Duration.milliseconds(value)
