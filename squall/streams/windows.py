"""The windows of a stream (Storm's ``org.apache.storm.streams.windowing``):
``TumblingWindows.of(length)`` and ``SlidingWindows.of(length, sliding)``, with lengths and
intervals as ``Count(n)`` or ``Duration``, in processing time or, with
:meth:`Window.with_timestamp` or :meth:`Window.with_timestamp_field`, in event time.

A window is only a description; ``Stream.window`` runs it as Squall's windowing does (see
:mod:`squall.api.windowing`): which values form each window, when windows fire, watermarks,
lag and late values are those of a windowed bolt.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from squall.api.windowing.config import Count, Duration, WindowConfig


@dataclass(frozen=True)
class Window:
    """A window for ``Stream.window``: made by :class:`TumblingWindows` or
    :class:`SlidingWindows`, configured by the ``with_*`` methods (each returns a new window).
    Checked when made: a bad value raises ``ValueError``, a wrong type ``TypeError``."""

    config: WindowConfig
    #: event time from the stream's values: value -> milliseconds
    timestamp: Callable[[Any], Any] | None = None

    def with_timestamp(self, timestamp: Callable[[Any], Any]) -> Window:
        """Event time: each value's timestamp (milliseconds, an int or float) is
        ``timestamp(value)``."""
        if not callable(timestamp):
            raise TypeError(f"with_timestamp: {timestamp!r} is not callable")
        return Window(replace(self.config, timestamp_field=None), timestamp)

    def with_timestamp_field(self, name: str) -> Window:
        """Event time: each tuple's timestamp is its field ``name``; only for a window right
        after ``new_stream`` (whose spout declares the field)."""
        return Window(replace(self.config, timestamp_field=name), None)

    def with_lag(self, lag: Duration) -> Window:
        """Event time: how far out of order timestamps may arrive (default 0)."""
        return replace(self, config=replace(self.config, lag=lag))

    def with_watermark_interval(self, interval: Duration) -> Window:
        """Event time: how often the watermark moves (default 1 s)."""
        return replace(self, config=replace(self.config, watermark_interval=interval))

    def alike(self, other: Window) -> bool:
        """Whether ``other`` makes the same windows (a join needs it): the same length,
        interval, time (event or processing), lag and watermark interval; the timestamps may
        come from different fields or functions."""
        a, b = self.config, other.config
        return (a.length, a.sliding, a.lag, a.watermark_interval, self.event_time) == \
            (b.length, b.sliding, b.lag, b.watermark_interval, other.event_time)

    @property
    def event_time(self) -> bool:
        return self.timestamp is not None or self.config.timestamp_field is not None

    def __repr__(self) -> str:
        config = self.config
        kind = "TumblingWindows" if config.length == config.sliding else "SlidingWindows"
        sliding = "" if kind == "TumblingWindows" else f", {config.sliding}"
        time = " in event time" if self.event_time else ""
        return f"{kind}.of({config.length}{sliding}){time}"


class TumblingWindows:
    """Windows of a length that do not overlap: every value is in exactly one."""

    @staticmethod
    def of(length: Count | Duration) -> Window:
        _check_length("TumblingWindows.of", length)
        return Window(WindowConfig(length=length, sliding=length))


class SlidingWindows:
    """Windows of ``length`` evaluated every ``sliding``: a value may be in several."""

    @staticmethod
    def of(length: Count | Duration, sliding: Count | Duration) -> Window:
        _check_length("SlidingWindows.of", length)
        return Window(WindowConfig(length=length, sliding=sliding))


def _check_length(where: str, length: Any) -> None:
    if length is None:
        raise ValueError(f"{where}: a window needs a length, Count(n) or Duration(secs)")
