"""What a windowed bolt's author uses: :class:`BaseWindowedBolt` and
:class:`StatefulWindowedBolt`, the :class:`TupleWindow` their ``execute`` gets and the
:class:`WindowedOutputCollector` they emit through."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Self

from squall.api.component import Component
from squall.api.stateful import StatefulComponent
from squall.api.windowing.config import Count, Duration, WindowConfig

if TYPE_CHECKING:
    from squall.api.collector import IOutputCollector
    from squall.api.context import TopologyContext
    from squall.api.tuple import Tuple


class TupleWindow:
    """The tuples of one window, as ``execute`` gets them (Storm's ``TupleWindow``).

    ``get()``: every tuple of the window, in timestamp order (then arrival order);
    ``get_new()``: those that were not in the window that fired before; ``get_expired()``:
    those of that window that are not in this one (already acked). ``start_timestamp`` /
    ``end_timestamp`` (milliseconds): the window holds the tuples with start < timestamp <=
    end; ``start_timestamp`` is None for a window whose length is a ``Count``. In processing
    time the timestamps are the arrival times (milliseconds since the epoch), in event time
    those the tuples carry.
    """

    __slots__ = ("_tuples", "_new", "_expired", "start_timestamp", "end_timestamp")

    def __init__(self, tuples: list[Tuple], new: list[Tuple], expired: list[Tuple], start_timestamp: int | None,
                 end_timestamp: int) -> None:
        self._tuples = tuples
        self._new = new
        self._expired = expired
        self.start_timestamp = start_timestamp
        self.end_timestamp = end_timestamp

    def get(self) -> list[Tuple]:
        return self._tuples

    def get_new(self) -> list[Tuple]:
        return self._new

    def get_expired(self) -> list[Tuple]:
        return self._expired

    def get_start_timestamp(self) -> int | None:
        return self.start_timestamp

    def get_end_timestamp(self) -> int:
        return self.end_timestamp

    def __iter__(self) -> Iterator[Tuple]:
        return iter(self._tuples)

    def __len__(self) -> int:
        return len(self._tuples)

    def __repr__(self) -> str:
        return (f"TupleWindow({len(self._tuples)} tuples, {len(self._new)} new, {len(self._expired)} expired, "
                f"start={self.start_timestamp}, end={self.end_timestamp})")


class WindowedOutputCollector:
    """A windowed bolt's collector (Storm's ``WindowedOutputCollector``).

    An emit without ``anchors`` made during ``execute(window)``, from the executor's thread, is
    anchored to every tuple of the window, as in Storm: the window's output joins the trees
    of its inputs, which complete once the inputs have left the window and the output is
    processed. An emit with ``anchors`` keeps them; emits made elsewhere (``prepare``, threads
    of the bolt's own) are anchored only to what they name, and those tuples must still be in
    a window (a tuple already acked cannot anchor).

    Windowed bolts neither ack nor fail: their tuples are acked as they leave the window, and
    :meth:`ack` / :meth:`fail` raise ``TypeError`` saying so.
    """

    def __init__(self, collector: IOutputCollector) -> None:
        self._collector = collector
        self._window: list[Tuple] | None = None  # the window being executed
        self._thread: int | None = None  # the thread executing it

    def emit(self, values: Any, anchors: Tuple | Iterable[Tuple] | None = None, stream: str = "default") -> list[int]:
        """Emit ``values`` on ``stream``; returns the receiving task ids (see
        :meth:`squall.OutputCollector.emit`)."""
        return self._collector.emit(values, self._anchors(anchors), stream)

    def emit_direct(self, task_id: int, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = "default") -> None:
        self._collector.emit_direct(task_id, values, self._anchors(anchors), stream)

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of the trees ``tup`` belongs to (a tuple held in a long window)."""
        self._collector.reset_timeout(tup)

    def report_error(self, error: BaseException) -> None:
        self._collector.report_error(error)

    def ack(self, tup: Tuple) -> None:
        raise TypeError("a windowed bolt does not ack: its tuples are acked when they leave the window")

    def fail(self, tup: Tuple) -> None:
        raise TypeError("a windowed bolt does not fail tuples: raise from execute(window) to fail the window's")

    def _anchors(self, anchors: Tuple | Iterable[Tuple] | None) -> Tuple | Iterable[Tuple] | None:
        if anchors is None and self._window is not None and threading.get_ident() == self._thread:
            return self._window
        return anchors

    def _open(self, window: list[Tuple]) -> None:
        """``execute(window)`` starts, on this thread."""
        self._window, self._thread = window, threading.get_ident()

    def _close(self) -> None:
        self._window = self._thread = None


class UnanchoredOutputCollector(WindowedOutputCollector):
    """A :class:`StatefulWindowedBolt`'s collector: its emits are not anchored (as in Storm's
    ``PersistentWindowedBoltExecutor``). Its inputs are acked at the checkpoint that stores
    the window holding them, so they cannot anchor: an emit naming ``anchors`` raises
    ``TypeError``. What follows the bolt is made reliable by checkpoints (a stateful bolt
    downstream), not by replays."""

    def _anchors(self, anchors: Tuple | Iterable[Tuple] | None) -> None:
        if anchors is not None:
            raise TypeError("a stateful windowed bolt's emits cannot be anchored: its inputs are acked at the "
                            "checkpoint that stores its window")
        return None


class BaseWindowedBolt(Component):
    """A bolt that processes windows of tuples (Storm's ``BaseWindowedBolt``).

    Configure the window with the fluent ``with_*`` methods, each checked at once (a bad value
    raises ``ValueError``, a wrong type ``TypeError``, naming the method)::

        WordTrends().with_window(Duration(10), Duration(2)).with_timestamp_field("ts").with_lag(Duration(1))

    then give it to ``TopologyBuilder.set_bolt`` like any bolt: ``set_bolt`` runs it through a
    :class:`~squall.api.windowing.executor.WindowedBoltExecutor` (a rich bolt), and
    ``create_topology`` checks the rest, raising :class:`~squall.InvalidTopologyError` naming
    the component: a window is set; a late tuple stream needs event time; every input stream
    declares the timestamp field; a window that a component configuration's
    ``topology.message.timeout.secs`` / ``topology.max.spout.pending`` cannot hold (below;
    against the topology's configuration, the same check runs at submission, before anything
    starts).

    The author overrides, all called on the executor's thread and never concurrently:

    * :meth:`prepare` (``conf``, ``context``, a :class:`WindowedOutputCollector`), once, in
      the worker;
    * :meth:`execute`, called with a :class:`TupleWindow` each time a window fires; it must
      not block (the worker's cooperative thread runs it) unless the bolt is declared
      ``blocking``. If it raises, the error is recorded for the component and the window's
      tuples are failed (their spout tuples are replayed) and leave the window; the bolt goes on;
    * :meth:`cleanup`; ``declare_output_fields`` / ``outputs`` and
      ``get_component_configuration`` as any component.

    **When windows fire.** Processing time (no timestamp field or extractor): a ``Count``
    sliding interval fires as its n-th tuple arrives; a ``Duration`` one on the executor's
    tick tuples (``topology.tick.tuple.freq.secs``, which ``create_topology`` sets to a tenth
    of the shorter duration, between 10 ms and 1 s), so a window fires within one tick of its
    end. Event time: the watermark (the smallest, over the input streams, of the largest
    timestamp seen, minus the lag) is computed on ticks every ``watermark_interval``, and a
    window fires once the watermark is past its end. A tuple whose timestamp is below the
    watermark is *late*: emitted on the late tuple stream if there is one, else logged (as
    Storm logs it), and acked either way; it is in no window. A tuple whose timestamp is
    missing or not a number (or whose extractor raised) is failed, and an error naming the
    component and the field is recorded; the bolt goes on. The bolt never sees tick tuples.

    **Acks and the message timeout.** Tuples are acked when they leave the window (when no
    window still to fire can hold them), never by the bolt, and the window's emits are
    anchored to its tuples. A tuple's tree therefore stays pending while it is in a window,
    and a window longer than ``topology.message.timeout.secs`` would see its tuples time out
    and be replayed. As Storm does, the topology is refused when the ``Duration`` parts of the
    window (the length plus the sliding interval when both are durations, else the one that
    is) exceed the message timeout, and when its ``Count`` parts (likewise) exceed
    ``topology.max.spout.pending`` (a count window could never fill). Storm checks nothing
    more: in event time, the lag and the watermark interval also delay a tuple's ack, and a
    count window holds its tuples until enough new ones arrive, however long that takes;
    leave room for both, or call ``collector.reset_timeout``.
    """

    _window: WindowConfig = WindowConfig()
    _timestamp_extractor: Callable[[Tuple], Any] | None = None

    # -- configuration ---------------------------------------------------------------------

    def with_window(self, length: Count | Duration, sliding: Count | Duration | None = None) -> Self:
        """A window of ``length`` (``Count(n)`` tuples or a ``Duration``) evaluated every
        ``sliding`` (default ``Count(1)``: at every tuple, as in Storm)."""
        return self._configure("with_window", length=length, sliding=Count(1) if sliding is None else sliding)

    def with_tumbling_window(self, length: Count | Duration) -> Self:
        """Windows of ``length`` that do not overlap: every tuple is in exactly one."""
        return self._configure("with_tumbling_window", length=length, sliding=length)

    def with_timestamp_field(self, name: str) -> Self:
        """Event time: each tuple's timestamp (milliseconds, an int or float) is its field
        ``name``, which every input stream must declare. Replaces a timestamp extractor."""
        self._timestamp_extractor = None
        return self._configure("with_timestamp_field", timestamp_field=name)

    def with_timestamp_extractor(self, extractor: Callable[[Tuple], Any]) -> Self:
        """Event time: each tuple's timestamp (milliseconds) is ``extractor(tuple)``; the
        extractor travels with the bolt (it must be serializable). Replaces a timestamp field."""
        if not callable(extractor):
            raise TypeError(f"{type(self).__name__}.with_timestamp_extractor: {extractor!r} is not callable")
        self._configure("with_timestamp_extractor", timestamp_field=None)
        self._timestamp_extractor = extractor
        return self

    def with_watermark_interval(self, interval: Duration) -> Self:
        """Event time: how often the watermark moves (default 1 s), hence how soon a window
        fires once its end is passed."""
        return self._configure("with_watermark_interval", watermark_interval=interval)

    def with_lag(self, lag: Duration) -> Self:
        """Event time: how far out of order timestamps may arrive (default 0); the watermark
        trails the newest timestamp by this much, and a tuple older than the watermark is late."""
        return self._configure("with_lag", lag=lag)

    def with_late_tuple_stream(self, stream_id: str) -> Self:
        """Event time: emit late tuples on ``stream_id``, anchored to them, then ack them. The
        stream is declared for the bolt with Storm's one field ``late_tuple``, holding the late
        tuple's values as a list (a bolt that declares it itself must declare exactly that
        field). Without it, late tuples are logged and acked, as in Storm."""
        return self._configure("with_late_tuple_stream", late_tuple_stream=stream_id)

    def get_window_config(self) -> WindowConfig:
        return self._window

    def get_timestamp_extractor(self) -> Callable[[Tuple], Any] | None:
        return self._timestamp_extractor

    def _configure(self, method: str, **changes: Any) -> Self:
        try:
            self._window = replace(self._window, **changes)
        except (TypeError, ValueError) as e:
            raise type(e)(f"{type(self).__name__}.{method}: {e}") from None
        return self

    # -- what the author overrides -------------------------------------------------------

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: WindowedOutputCollector) -> None:
        """Called once in the worker before the first window."""

    def execute(self, window: TupleWindow) -> None:
        """Process one window (see the class)."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(window)")

    def cleanup(self) -> None:
        """The topology is being killed. Not guaranteed to run if the process dies."""


class StatefulWindowedBolt(BaseWindowedBolt, StatefulComponent):
    """A windowed bolt whose windows survive crashes and rollbacks (Storm's
    ``IStatefulWindowedBolt`` with persistence: ``BaseStatefulWindowedBolt.withPersistence()``).

    It runs through a :class:`~squall.api.windowing.executor.PersistentWindowedBoltExecutor`,
    which makes the topology checkpointed (see :mod:`squall.api.stateful`). Besides what a
    :class:`BaseWindowedBolt` gets, the author gets :meth:`init_state` (after ``prepare``,
    and again after every rollback, with the state rolled back) and ``pre_prepare`` /
    ``pre_commit`` / ``pre_rollback``, on the executor's thread.

    **The window is part of the state.** At each checkpoint (``pre_prepare``, after the
    author's), the whole content of the window manager — the tuples held (their values, source
    component, stream and task, and timestamps), the last window's bookkeeping, the trigger
    and the watermark — is written to the task's state under the reserved key
    ``"__window"``, which the author's state object neither shows nor takes. ``init_state``
    restores it, so a window half-filled at the last commit is still half-filled after a
    worker's crash, a rollback or a topology submitted again under the same name with the
    same state location. Restored tuples are untracked (their trees completed at that commit).
    Tuple values must therefore be storable with the topology's serializer; one that is not
    fails the checkpoint (an error naming the component and the key), which rolls back.

    **Acks.** Each input is acked as it arrives (or is found late), and the checkpoint
    mechanism holds the ack until the next checkpoint commits — the first one whose state
    holds the window with the tuple. So a tuple is acked once it is durable, not when it
    leaves the window: the window may be longer than ``topology.message.timeout.secs`` (no
    window check is made against it; the checkpoint interval must be below it, which the
    submission checks). A rollback fails the acks it holds: the spouts replay the tuples the
    restored window does not have. Emits are not anchored (:class:`UnanchoredOutputCollector`);
    a window whose ``execute`` raises is failed like any windowed bolt's (restored tuples,
    untracked, are then only dropped).
    """
