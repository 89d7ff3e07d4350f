"""Windowed bolts run as rich bolts: :class:`WindowedBoltExecutor` (Storm's) and, for a
:class:`~squall.api.windowing.bolt.StatefulWindowedBolt`, :class:`PersistentWindowedBoltExecutor`
(Storm's, a stateful bolt). ``TopologyBuilder.set_bolt`` wraps a windowed bolt in the one
:func:`windowed_executor` picks, so users never name them.

Everything happens on the bolt executor's thread, under its lock, one call at a time: the
inputs (``execute``), the tick tuples that drive time (processing-time windows and the
event-time watermark; see :func:`squall.api.windowing.checks.tick_secs`), the windows firing
(the :class:`~squall.api.windowing.manager.WindowManager` calls back from within ``execute``) and,
for the persistent one, the checkpoint hooks. Nothing calls into the user's bolt from
another thread.
"""

from __future__ import annotations

import logging
import math
import reprlib
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from squall.api.bolt import Bolt
from squall.api.errors import InvalidTopologyError
from squall.api.stateful import StatefulComponent
from squall.api.system_ids import CHECKPOINT_STREAM
from squall.api.tuple import StreamSource, Tuple
from squall.api.windowing.bolt import (
    BaseWindowedBolt, StatefulWindowedBolt, TupleWindow, UnanchoredOutputCollector, WindowedOutputCollector,
)
from squall.api.windowing.config import LATE_TUPLE_FIELD, WindowConfig
from squall.api.windowing.manager import WindowManager
from squall.utils import time as clock

if TYPE_CHECKING:
    from squall.api.collector import IOutputCollector
    from squall.api.component import OutputFieldsDeclarer
    from squall.api.context import TopologyContext
    from squall.api.state import KeyValueState

log = logging.getLogger("squall.windowing")

#: the key of a stateful windowed bolt's state that holds its window
WINDOW_STATE_KEY = "__window"


def windowed_executor(bolt: BaseWindowedBolt) -> WindowedBoltExecutor:
    """The rich bolt that runs ``bolt``."""
    if isinstance(bolt, StatefulWindowedBolt):
        return PersistentWindowedBoltExecutor(bolt)
    return WindowedBoltExecutor(bolt)


class WindowedBoltExecutor(Bolt):
    """Runs a :class:`~squall.api.windowing.bolt.BaseWindowedBolt` (see its contract) as a rich bolt.

    * An input is added to the window manager with its timestamp: its arrival time
      (processing time) or what the bolt's timestamp field or extractor gives (event time). A
      late input is emitted on the late tuple stream (anchored to it) if there is one, else
      logged, and acked; an input whose timestamp is missing or not a number is failed and
      an error naming the component and the field recorded.
    * A tick tuple moves time: processing-time windows whose end has passed fire, and items
      too old leave; in event time, the watermark is computed and the windows it passed fire.
    * A window firing calls the bolt's ``execute`` with a :class:`TupleWindow`; its emits
      without anchors are anchored to the window's tuples. If it raises, the error is recorded
      and the window's tuples are failed.
    * Tuples leaving the window are acked.
    """

    def __init__(self, bolt: BaseWindowedBolt) -> None:
        self.bolt = bolt
        self.blocking = bolt.blocking  # type: ignore[misc] - the bolt's, per instance

    # -- the topology's (create_topology) --------------------------------------------------

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The bolt's streams, and its late tuple stream (Storm's field ``late_tuple``)."""
        self.bolt.declare_output_fields(declarer)
        stream = self.bolt.get_window_config().late_tuple_stream
        if stream is None:
            return
        declared = declarer.streams.get(stream)
        if declared is None:
            declarer.declare_stream(stream, [LATE_TUPLE_FIELD])
        elif declared[0].to_list() != [LATE_TUPLE_FIELD] or declared[1]:
            raise InvalidTopologyError(
                f"windowed bolt {declarer.component_id!r}: its late tuple stream {stream!r} must have the one field "
                f"{LATE_TUPLE_FIELD!r} (not direct), but the bolt declares it with {declared[0].to_list()}; leave "
                "it undeclared, the windowed bolt declares it")

    def get_component_configuration(self) -> dict[str, Any]:
        """The window's keys (Storm's), under the bolt's own configuration."""
        conf = self.bolt.get_window_config().to_conf()
        conf.update(self.bolt.get_component_configuration() or {})
        return conf

    # -- the worker's ----------------------------------------------------------------------

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        self._collector = collector
        self._context = context
        self._component = context.get_this_component_id()
        self._config = WindowConfig.from_conf(conf)
        extractor = self.bolt.get_timestamp_extractor()
        self._field = self._config.timestamp_field if extractor is None else None
        self._extractor = extractor
        self._event_time = extractor is not None or self._field is not None
        self._late_stream = self._config.late_tuple_stream
        # processing time: the cluster clock (simulated in tests), as milliseconds since the epoch
        self._epoch_ms = round(time.time() * 1000 - clock.now() * 1000)
        self._manager = self._new_manager()
        self._output = self._output_collector(collector)
        self.bolt.prepare(conf, context, self._output)

    def _new_manager(self) -> WindowManager[Tuple]:
        streams = [s for s in self._context.get_this_sources() if s[1] != CHECKPOINT_STREAM]
        return WindowManager(self._config, self, event_time=self._event_time, streams=streams,
                             now_ms=self._origin_ms())

    def _output_collector(self, collector: IOutputCollector) -> WindowedOutputCollector:
        return WindowedOutputCollector(collector)

    def _now_ms(self) -> int:
        return int(clock.now() * 1000) + self._epoch_ms

    def _origin_ms(self) -> int:
        """Where processing-time windows start (the first window end): now."""
        return self._now_ms()

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            self._manager.tick(self._now_ms())
            return
        if not self._event_time:
            self._manager.add(tup, self._now_ms())
            self._accepted(tup)
            return
        ts = self._timestamp(tup)
        if ts is None:
            return
        if self._manager.add(tup, ts, (tup.source_component, tup.source_stream_id)):
            self._accepted(tup)
        else:
            self._late(tup, ts)

    def cleanup(self) -> None:
        self.bolt.cleanup()

    def _accepted(self, tup: Tuple) -> None:
        """``tup`` went into the window: acked when it leaves, not now."""

    def _timestamp(self, tup: Tuple) -> int | None:
        """``tup``'s event timestamp (whole milliseconds), or None once it is failed and an
        error recorded."""
        try:
            ts = tup[self._field] if self._extractor is None else self._extractor(tup)
        except Exception as e:  # noqa: BLE001 - the tuple is failed, the bolt goes on
            problem = f"its {self._what()} raised {type(e).__name__}: {e}"
        else:
            if ts.__class__ is int:
                return ts
            if isinstance(ts, (int, float)) and not isinstance(ts, bool) and math.isfinite(ts):
                return math.floor(ts)
            problem = f"its {self._what()} is {reprlib.repr(ts)}, not a number of milliseconds"
        self._collector.report_error(ValueError(
            f"windowed bolt {self._component!r}: a tuple from {tup.source_component!r}:{tup.source_stream_id!r} "
            f"has no event time: {problem}; the tuple is failed"))
        self._collector.fail(tup)
        return None

    def _what(self) -> str:
        return f"timestamp field {self._field!r}" if self._extractor is None else "timestamp extractor"

    def _late(self, tup: Tuple, ts: int) -> None:
        """``tup`` came after the watermark passed its timestamp: to the late tuple stream, or
        to the log, then acked (Storm's rule)."""
        if self._late_stream is not None:
            self._collector.emit([list(tup.values)], anchors=tup, stream=self._late_stream)
        else:
            log.info("windowed bolt %r: late tuple from %r:%r with timestamp %d (watermark %s) is acked and not "
                     "processed (with_late_tuple_stream keeps such tuples)", self._component, tup.source_component,
                     tup.source_stream_id, ts, self._manager.watermark)
        self._collector.ack(tup)

    # -- the window manager's listener -----------------------------------------------------

    def on_expiry(self, items: list[Tuple]) -> None:
        ack = self._collector.ack
        for tup in items:
            ack(tup)

    def on_activation(self, items: list[Tuple], new: list[Tuple], expired: list[Tuple], start_ts: int | None,
                      end_ts: int) -> None:
        self._output._open(items)
        try:
            self.bolt.execute(TupleWindow(items, new, expired, start_ts, end_ts))
        finally:
            self._output._close()

    def on_failure(self, items: list[Tuple], error: Exception) -> None:
        self._collector.report_error(error)
        fail = self._collector.fail
        for tup in items:
            fail(tup)


class PersistentWindowedBoltExecutor(WindowedBoltExecutor, StatefulComponent):
    """Runs a :class:`~squall.api.windowing.bolt.StatefulWindowedBolt` (see its contract) as a
    stateful bolt: the window manager's content is written to the task's state under
    :data:`WINDOW_STATE_KEY` at each ``pre_prepare`` and restored in ``init_state``; inputs
    are acked as they arrive (the checkpoint mechanism holds the acks until the commit of the
    checkpoint that stores them), not when they leave the window; emits are unanchored."""

    def _output_collector(self, collector: IOutputCollector) -> WindowedOutputCollector:
        return UnanchoredOutputCollector(collector)

    def _accepted(self, tup: Tuple) -> None:
        self._collector.ack(tup)

    def on_expiry(self, items: list[Tuple]) -> None:
        """Acked already, as they arrived."""

    def init_state(self, state: KeyValueState) -> None:
        self._state = state
        self._sources: dict[tuple[str, str], StreamSource] = {}
        self._manager = self._new_manager()
        data = state.get(WINDOW_STATE_KEY)
        if data is not None:
            self._manager.restore(data, self._decode)
        self.bolt.init_state(_AuthorState(state))

    def pre_prepare(self, txid: int) -> None:
        self.bolt.pre_prepare(txid)
        self._state.put(WINDOW_STATE_KEY, self._manager.snapshot(self._encode))

    def pre_commit(self, txid: int) -> None:
        self.bolt.pre_commit(txid)

    def pre_rollback(self) -> None:
        self.bolt.pre_rollback()

    @staticmethod
    def _encode(tup: Tuple) -> list[Any]:
        return [tup.source_component, tup.source_stream_id, tup.source_task, tup.values]

    def _decode(self, data: list[Any]) -> Tuple:
        component, stream, task, values = data
        sources = self._sources
        source = sources.get((component, stream))
        if source is None:
            try:
                fields = self._context.get_component_output_fields(component, stream)
            except KeyError:
                raise ValueError(f"windowed bolt {self._component!r}: its stored window holds a tuple of stream "
                                 f"{component!r}:{stream!r}, which the topology no longer has") from None
            source = sources[(component, stream)] = StreamSource(component, stream, fields)
        return Tuple(list(values), source, task)


class _AuthorState:
    """The state a stateful windowed bolt's author gets: the task's
    :class:`~squall.api.state.KeyValueState` without the key that holds the window."""

    def __init__(self, state: KeyValueState) -> None:
        self._state = state

    def put(self, key: Any, value: Any) -> None:
        self._check(key)
        self._state.put(key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        return default if key == WINDOW_STATE_KEY else self._state.get(key, default)

    def delete(self, key: Any) -> Any:
        self._check(key)
        return self._state.delete(key)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(self.items())

    def items(self) -> list[tuple[Any, Any]]:
        return [(k, v) for k, v in self._state.items() if k != WINDOW_STATE_KEY]

    def keys(self) -> list[Any]:
        return [k for k in self._state.keys() if k != WINDOW_STATE_KEY]

    def __len__(self) -> int:
        return len(self._state) - (WINDOW_STATE_KEY in self._state)

    def __contains__(self, key: Any) -> bool:
        return key != WINDOW_STATE_KEY and key in self._state

    def __repr__(self) -> str:
        return repr(self._state)

    @staticmethod
    def _check(key: Any) -> None:
        if key == WINDOW_STATE_KEY:
            raise KeyError(f"state key {WINDOW_STATE_KEY!r} is reserved: it holds the window of a stateful "
                           "windowed bolt")
