"""The window manager: which items form each window, when windows fire and when items leave
(Storm's ``WindowManager`` with its trigger and eviction policies, and its watermark generator).

Deterministic and single-threaded: it reads no clock and starts no thread. Its owner hands it
items with their timestamps (:meth:`WindowManager.add`) and calls :meth:`WindowManager.tick`
periodically with the current time; the manager calls its :class:`WindowListener` back,
synchronously, from within those calls. Timestamps are integers (milliseconds).

**Windows.** A window is identified by its *end* timestamp E and holds the items with a
timestamp at most E: those of the last ``length`` milliseconds (E - length < ts <= E) for a
``Duration`` length, the last n of them (by timestamp, then arrival) for a ``Count(n)`` length.

**Triggers.** With a ``Count(n)`` sliding interval, a window fires every n items: in processing
time as the n-th item arrives (E = its timestamp), in event time as the watermark passes the
n-th item (in timestamp order). With a ``Duration(d)`` sliding interval, window ends are
``origin + k * d`` (origin: the manager's start in processing time, 0 in event time, so that
event-time windows end at multiples of d as in Storm) and the window ending at E fires once
the current time (processing time) or the watermark (event time) is past E: its content is
then final, as any item still to come has a timestamp beyond E. Empty windows do not fire.

**Event time.** The watermark is the smallest, over the input streams, of the largest
timestamp seen on that stream, minus the lag; it is computed on each tick once every input
stream has delivered an item, and only moves forward. An item whose timestamp is below the
watermark is *late*: :meth:`WindowManager.add` refuses it.

**Expiry.** An item leaves (is *expired*) once no window still to fire can hold it, and the
listener's ``on_expiry`` gets it (the windowed bolt acks it there):

* when a window fires, the items before it, before it fires; and, once it has fired, those
  the next window cannot hold: all but the last ``n - s`` of it for a ``Count(n)`` length
  and ``Count(s)`` sliding interval (all of a tumbling window), those of timestamp at most
  ``E + d - length`` for a ``Duration`` length and ``Duration(d)`` sliding interval;
* on a tick in processing time with a ``Duration`` length, the items older than the length.

Other combinations (a ``Count`` length sliding by ``Duration``, a ``Duration`` length sliding
by ``Count``) cannot tell what the next window holds before it fires: their items leave when
a later window fires without them (or, for a ``Duration`` length in processing time, on the
tick that finds them too old).

**New and expired.** A window's ``new`` items are those that were not in the window that last
fired, its ``expired`` items those of that window that are no longer in this one, so that
``window = previous + new - expired`` holds for every window (also across windows that did not
fire); Storm's lists drift from it when a window is empty.
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from squall.api.windowing.config import Count, Duration, WindowConfig

T = TypeVar("T")


class WindowListener(Protocol[T]):
    """What a :class:`WindowManager` calls back, from within ``add`` and ``tick``."""

    def on_expiry(self, items: list[T]) -> None:
        """``items`` left the window for good (the windowed bolt acks them)."""

    def on_activation(self, items: list[T], new: list[T], expired: list[T], start_ts: int | None,
                      end_ts: int) -> None:
        """A window fired: its ``items`` in timestamp order, those ``new`` since the window that
        fired last and those ``expired`` from it; ``start_ts`` (for a ``Duration`` length, else
        None) and ``end_ts`` bound it: start_ts < ts <= end_ts."""

    def on_failure(self, items: list[T], error: Exception) -> None:
        """``on_activation`` raised ``error``: the window's ``items`` were taken out of the
        manager (the windowed bolt fails them) and the next window's ``new`` is all of it."""


@dataclass(slots=True)
class _Event:
    seq: int  # arrival order: breaks ties between equal timestamps
    ts: int
    item: Any


def _key(event: _Event) -> tuple[int, int]:
    return event.ts, event.seq


def _after(ts: int) -> tuple[float, float]:
    """A bisect key past every event of timestamp ``ts``."""
    return ts, math.inf


class WindowManager(Generic[T]):
    """Windows over items of type ``T`` (see the module).

    ``config.length`` must be set. ``event_time``: timestamps come with the items and windows
    follow the watermark; else they are the arrival times the owner passes. ``streams``: the
    input streams the watermark waits for (event time). ``now_ms``: the current time (the
    origin of processing-time windows).
    """

    def __init__(self, config: WindowConfig, listener: WindowListener[T], *, event_time: bool,
                 streams: Iterable[Hashable] = (), now_ms: int = 0) -> None:
        if config.length is None:
            raise ValueError("the window has no length: call with_window(...) or with_tumbling_window(...)")
        self._length = config.length
        self._sliding = config.sliding
        self._lag = config.lag.millis
        self._event_time = event_time
        self._streams = frozenset(streams)
        self._listener = listener
        self._events: list[_Event] = []  # sorted by (ts, seq)
        self._seq = 0
        self._prev: set[int] = set()  # seqs of the window that fired last
        self._expired: list[_Event] = []  # of that window, gone since
        # triggers: window ends are origin + k * sliding (Duration sliding). In processing time
        # the first end is now: windows are (end - length, end], and an item added in this very
        # millisecond (simulated time) belongs to the window ending now, not to none
        self._origin = 0 if event_time else now_ms
        self._next_end: int | None = None
        if not event_time and isinstance(self._sliding, Duration):
            self._next_end = now_ms
        self._since_trigger = 0  # processing time, Count sliding: items since the last window
        self._counted: tuple[int, int] | None = None  # event time, Count sliding: key of the last trigger
        # watermark
        self._stream_ts: dict[Hashable, int] = {}
        self._watermark: int | None = None

    @property
    def watermark(self) -> int | None:
        """The current watermark (event time), None before the first one."""
        return self._watermark

    def __len__(self) -> int:
        """The number of items held (in windows, or waiting for one)."""
        return len(self._events)

    # -- input ----------------------------------------------------------------------------

    def add(self, item: T, ts: int, stream: Hashable | None = None) -> bool:
        """Add ``item`` with timestamp ``ts`` (from ``stream``, in event time). False, and the
        item is not added, when it is late; else a processing-time count window may fire."""
        if self._event_time:
            if ts > self._stream_ts.get(stream, -math.inf):
                self._stream_ts[stream] = ts
            if self._watermark is not None and ts < self._watermark:
                return False
        event = _Event(self._seq, ts, item)
        self._seq += 1
        if not self._events or self._events[-1].ts <= ts:
            self._events.append(event)
        else:
            insort(self._events, event, key=_key)
        if not self._event_time and isinstance(self._sliding, Count):
            self._since_trigger += 1
            if self._since_trigger >= self._sliding.value:
                self._since_trigger = 0
                self._evaluate(ts)
        return True

    def tick(self, now_ms: int) -> None:
        """Called periodically. Processing time: fire the windows that ended before ``now_ms``
        and expire what no window can hold any more. Event time: move the watermark (Storm's
        watermark event) and fire the windows it passed."""
        if self._event_time:
            if not self._stream_ts or not self._streams <= self._stream_ts.keys():
                return  # some input stream has not delivered anything yet
            watermark = min(self._stream_ts.values()) - self._lag
            if self._watermark is not None and watermark <= self._watermark:
                return
            self._watermark = watermark
            self._fire_before(watermark)
            return
        self._fire_before(now_ms)
        if isinstance(self._length, Duration):
            # every window still to fire ends at now_ms or later
            self._expire(bisect_right(self._events, _after(now_ms - self._length.millis), key=_key))

    # -- triggers -------------------------------------------------------------------------

    def _fire_before(self, horizon: int) -> None:
        """Fire every window ending before ``horizon`` (the watermark, or now)."""
        if isinstance(self._sliding, Count):
            if self._event_time:
                self._fire_counted_before(horizon)
            return  # processing-time count windows fire in add
        end = self._next_end
        if end is None:  # event time, first watermark: the window of the earliest item
            end = self._align(self._events[0].ts if self._events else horizon)
        while end < horizon:
            if self._evaluate(end):
                end += self._sliding.millis
            else:
                # no item in this window: the next one that is not empty ends at the first
                # window end at or after the next item's timestamp (items to come: >= horizon)
                later = bisect_right(self._events, _after(end), key=_key)
                end = self._align(self._events[later].ts if later < len(self._events) else horizon)
        self._next_end = end

    def _fire_counted_before(self, horizon: int) -> None:
        """Event time, Count(n) sliding: a window at every n-th item (in timestamp order)
        that the watermark passed, ending at that item's timestamp."""
        first = 0 if self._counted is None else bisect_right(self._events, self._counted, key=_key)
        passed = self._events[first:bisect_left(self._events, (horizon, -math.inf), key=_key)]
        n = self._sliding.value
        for trigger in passed[n - 1::n]:
            self._counted = _key(trigger)
            self._evaluate(trigger.ts)

    def _align(self, ts: int) -> int:
        """The first window end at or after ``ts``."""
        d = self._sliding.millis
        return self._origin - (self._origin - ts) // d * d

    # -- windows --------------------------------------------------------------------------

    def _evaluate(self, end: int) -> bool:
        """Expire what precedes the window ending at ``end`` and fire it; False if empty."""
        events = self._events
        hi = bisect_right(events, _after(end), key=_key)
        if isinstance(self._length, Count):
            lo = max(0, hi - self._length.value)
        else:
            lo = bisect_right(events, _after(end - self._length.millis), key=_key)
        self._expire(lo)
        window = events[:hi - lo]
        if not window:
            return False
        prev = self._prev
        items = [e.item for e in window]
        new = [e.item for e in window if e.seq not in prev]
        expired = [e.item for e in self._expired]
        self._expired = []
        start = end - self._length.millis if isinstance(self._length, Duration) else None
        try:
            self._listener.on_activation(items, new, expired, start, end)
        except Exception as error:  # noqa: BLE001 - the window fails; the manager goes on
            del events[:len(window)]
            self._prev = set()
            self._listener.on_failure(items, error)
        else:
            self._prev = {e.seq for e in window}
            self._expire(self._unreachable(end, len(window)))
        return True

    def _unreachable(self, end: int, size: int) -> int:
        """How many of the first events no later window can hold, once the window ending at
        ``end`` (the first ``size`` events) fired (see the module, "Expiry")."""
        length, sliding = self._length, self._sliding
        if isinstance(length, Count) and isinstance(sliding, Count):
            kept = max(0, length.value - sliding.value)
            if self._counted is not None:  # event time: items of the trigger's timestamp after it count for the next
                kept += size - min(size, bisect_right(self._events, self._counted, key=_key))
            return max(0, size - kept)
        if isinstance(length, Duration) and isinstance(sliding, Duration):
            return bisect_right(self._events, _after(end + sliding.millis - length.millis), key=_key)
        return 0

    def _expire(self, count: int) -> None:
        """The first ``count`` events leave."""
        if not count:
            return
        gone = self._events[:count]
        del self._events[:count]
        prev = self._prev
        self._expired.extend(e for e in gone if e.seq in prev)
        self._listener.on_expiry([e.item for e in gone])

    # -- snapshots ------------------------------------------------------------------------

    def snapshot(self, encode: Callable[[T], Any]) -> dict[str, Any]:
        """The manager's content as plain data (msgpack-able if ``encode``'s results are):
        the items held (through ``encode``), the last window's bookkeeping, the trigger and
        the watermark state."""
        return {
            "seq": self._seq,
            "events": [[e.seq, e.ts, encode(e.item)] for e in self._events],
            "expired": [[e.seq, e.ts, encode(e.item)] for e in self._expired],
            "prev": sorted(self._prev),
            "origin": self._origin,
            "next_end": self._next_end,
            "since_trigger": self._since_trigger,
            "counted": None if self._counted is None else list(self._counted),
            "stream_ts": [[list(s) if isinstance(s, tuple) else s, ts] for s, ts in self._stream_ts.items()],
            "watermark": self._watermark,
        }

    def restore(self, data: dict[str, Any], decode: Callable[[Any], T]) -> None:
        """Replace the content with a :meth:`snapshot`'s (items through ``decode``). Nothing is
        called back: the restored items are not expired from what was held before."""
        self._seq = data["seq"]
        self._events = [_Event(seq, ts, decode(item)) for seq, ts, item in data["events"]]
        self._expired = [_Event(seq, ts, decode(item)) for seq, ts, item in data["expired"]]
        self._prev = set(data["prev"])
        self._origin = data["origin"]
        self._next_end = data["next_end"]
        self._since_trigger = data["since_trigger"]
        self._counted = None if data["counted"] is None else (data["counted"][0], data["counted"][1])
        # msgpack returns the tuple stream keys as lists
        self._stream_ts = {tuple(s) if isinstance(s, list) else s: ts for s, ts in data["stream_ts"]}
        self._watermark = data["watermark"]
