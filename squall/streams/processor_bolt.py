"""The bolts that run fused chains of stream operations (Storm's ``ProcessorBolt``,
``WindowedProcessorBolt`` and ``StatefulProcessorBolt``).

A :class:`ProcessorBolt` holds a tree of operations that need no repartition between them
(:mod:`squall.streams.builder` decides where bolts start). For each input tuple it decodes the
value (a spout's values through the stream's value mapper; a pair ``(key, value)`` from the
fields ``key``, ``value``; else field ``value``), calls the operation its stream feeds, and each
operation calls the next ones directly; a value leaving the bolt is emitted on its operation's
stream, anchored to the input. The input is acked once the chain returns, so a spout tuple is
complete when everything it produced downstream is.

**Windows.** A :class:`WindowedProcessorBolt` (a windowed bolt) feeds each window's values to
its chain, in order, then ends the window: aggregations and joins emit its results, anchored to
the window's tuples, and a *punctuation* ``[window]`` goes out on ``<stream>__punctuation``
beside each stream that leaves the bolt. Values on a windowed stream carry the window they
belong to (field ``window``): its end timestamp (milliseconds) for windows that slide by a
``Duration``, which end at multiples of it in every task; its ordinal (1, 2, ...) in the task
for windows that slide by a ``Count``. With a ``Duration``, each tick also punctuates the
time up to which no window of the task can end any more, so that an idle task does not hold
the bolts after it back (a ``Count`` cannot tell: every task must see values).

A :class:`ProcessorBolt` reading windowed streams receives the punctuations of every task
before it (all grouping): the windows up to the smallest of the latest ones are then complete,
and end; each input is held (not acked) until its window ends, and what the window's end
emits is anchored to the punctuations that ended it, so the spout tuples stay pending until the
window's results are processed.

An exception raised by a user function fails the input (its spout tuple is replayed, if
tracked) — in a windowed bolt, the window's tuples — and records an error naming the operation
and the user's file and line; the bolt goes on with the next input.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from squall.api.bolt import Bolt
from squall.api.stateful import StatefulComponent
from squall.api.windowing.bolt import BaseWindowedBolt, TupleWindow
from squall.api.windowing.config import Count, Duration
from squall.api.windowing.executor import WindowedBoltExecutor
from squall.streams.operations import Branch, Close, Fold, Forward, Join, Operation, StateQuery, user_code
from squall.streams.windows import Window

#: how a bolt's input tuples become values: a spout's (through the value mapper), a pair stream's
#: or a value stream's
FROM_SPOUT, FROM_PAIRS, FROM_VALUES = "spout", "pairs", "values"
#: the suffix of the stream a windowed stream's punctuations travel on
PUNCTUATION = "__punctuation"


@dataclass(frozen=True)
class Step:
    """An operation in a bolt: ``parent`` is the index of the step it follows (-1: it reads
    an input of the bolt), ``stream`` the stream it emits on when its values leave the bolt
    (else None), ``pairs`` whether its values are pairs, ``windowed`` whether they belong to
    windows, ``stateful`` whether it keeps a checkpointed state."""

    operation: Operation
    parent: int
    stream: str | None
    pairs: bool
    windowed: bool = False
    #: it keeps its state in the task's checkpointed state (update_state_by_key; an aggregation
    #: without a window whose spout keeps its position)
    stateful: bool = False


@dataclass(frozen=True)
class Input:
    """A stream the bolt reads: tuples of ``component``'s ``stream``, decoded as ``decoding``
    says, go to step ``step`` (``side`` 1: a join's right stream). ``late``: a windowed bolt's
    late tuples (Storm's one field holding the tuple's values); ``windowed``: the stream is
    windowed and punctuated."""

    component: str
    stream: str
    decoding: str
    step: int
    side: int = 0
    late: bool = False
    windowed: bool = False
    value_mapper: Callable[[Any], Any] | None = None


class StreamOperationError(RuntimeError):
    """A user function of a stream operation raised (the cause is chained)."""


class ProcessorBolt(Bolt):
    """Runs ``steps`` (in tree order: a parent before its children) on the tuples of
    ``inputs`` (see the module)."""

    def __init__(self, steps: list[Step], inputs: list[Input]) -> None:
        self.steps = steps
        self.inputs = inputs

    def declare_output_fields(self, declarer: Any) -> None:
        for step in self.steps:
            if step.stream is not None:
                fields = ["key", "value"] if step.pairs else ["value"]
                declarer.declare_stream(step.stream, fields + ["window"] if step.windowed else fields)
                if step.windowed:
                    declarer.declare_stream(step.stream + PUNCTUATION, ["window"])

    def describe_operations(self) -> str:
        """The operations this bolt runs, in order (``squall plan`` and the UI show them)."""
        return " -> ".join(step.operation.name for step in self.steps)

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self._collector = collector
        #: the anchors of what the chain emits: the input, or what ended the windows
        self._input: Any = None
        #: the window of the value being processed (see squall.streams.operations)
        self._window: list[Any] = [None]
        #: the task's KeyValueState once loaded (StatefulProcessorBolt.init_state)
        self._states: list[Any] = [None]
        self._bind()
        # a user function's code -> its operation, to name the one that raised
        self._owners = {user_code(f): step.operation for step in self.steps for f in step.operation.functions}
        self._punctuations: dict[tuple[str, str], str] = {}  # (component, punctuation stream) -> data stream
        self._channels = 0  # punctuating (task, stream) pairs before this bolt
        for source in self.inputs:
            if source.windowed:
                self._punctuations[(source.component, source.stream + PUNCTUATION)] = source.stream
                self._channels += len(context.get_component_tasks(source.component))
        self._ended: dict[tuple[int, str], Any] = {}  # channel -> the last window it ended
        self._last: Any = None  # the last window ended here
        self._held: list[tuple[Any, Any]] = []  # (window, input) waiting for the window's end

    def _bind(self) -> None:
        """Bind the operations (once per task; again to forget a failed window's values)."""
        children: list[list[int]] = [[] for _ in self.steps]
        for i, step in enumerate(self.steps):
            if step.parent >= 0:
                children[step.parent].append(i)
        processes: list[Any] = [None] * len(self.steps)
        closes: list[Close] = [_drop] * len(self.steps)
        # the aggregations of a bolt keeping several states keep theirs under (namespace, key)
        shared = sum(step.stateful for step in self.steps) > 1
        for i in reversed(range(len(self.steps))):  # children come after their parent
            step, operation = self.steps[i], self.steps[i].operation
            forwards = [processes[c] for c in children[i]]
            ends = [closes[c] for c in children[i]]
            if step.stream is not None:
                forwards.append(self._emitter(step))
                if step.windowed:
                    ends.append(self._punctuator(step.stream + PUNCTUATION))
            if isinstance(operation, Branch):
                processes[i], closes[i] = operation.bind_branches(forwards), _fan_out(ends)
            elif isinstance(operation, Join):
                left, right, closes[i] = operation.bind_join(_fan_out(forwards), _fan_out(ends), self._window)
                processes[i] = (left, right)
            elif step.windowed:
                processes[i], closes[i] = operation.bind_window(_fan_out(forwards), _fan_out(ends), self._window)
            elif step.stateful or isinstance(operation, StateQuery):
                namespace = f"{operation.name}#{i}" if shared and isinstance(operation, Fold) else None
                processes[i] = operation.bind_state(_fan_out(forwards), self._states, namespace)
            else:
                processes[i] = operation.bind(_fan_out(forwards))
        entries = {}
        for source in self.inputs:
            process = processes[source.step]  # a join's: one per side
            entries[(source.component, source.stream)] = (
                _decoder(source), process[source.side] if isinstance(process, tuple) else process)
        self._entries = entries
        self._close = _fan_out([closes[i] for i, step in enumerate(self.steps) if step.parent < 0 and step.windowed])
        self._only = next(iter(self._entries.values())) if len(self._entries) == 1 else None

    def _emitter(self, step: Step) -> Forward:
        emit, stream, window = self._collector.emit, step.stream, self._window
        if step.windowed:
            if step.pairs:
                return lambda pair: emit([pair[0], pair[1], window[0]], anchors=self._input, stream=stream)
            return lambda value: emit([value, window[0]], anchors=self._input, stream=stream)
        if step.pairs:
            return lambda pair: emit([pair[0], pair[1]], anchors=self._input, stream=stream)
        return lambda value: emit([value], anchors=self._input, stream=stream)

    def _punctuator(self, stream: str) -> Close:
        emit = self._collector.emit
        return lambda last: emit([last], anchors=self._input, stream=stream)

    def execute(self, tup: Any) -> None:
        if self._punctuations:
            self._execute_windowed(tup)
        elif self._run(tup):
            self._collector.ack(tup)

    def _run(self, tup: Any) -> bool:
        """Run the chain on ``tup``'s value; False once ``tup`` is failed for an error."""
        self._input = tup
        try:
            self._feed(tup)
        except Exception as e:  # noqa: BLE001 - the input fails; the bolt goes on
            self._collector.report_error(self.blame(e))
            self._collector.fail(tup)
            return False
        return True

    def _feed(self, tup: Any) -> None:
        entry = self._only or self._entries[(tup.source_component, tup.source_stream_id)]
        entry[1](entry[0](tup.values))

    def _execute_windowed(self, tup: Any) -> None:
        """An input of a bolt reading windowed streams: held until its window ends; or a
        punctuation, which may end windows."""
        stream = self._punctuations.get((tup.source_component, tup.source_stream_id))
        if stream is not None:
            self._punctuated(tup, (tup.source_task, stream))
            return
        window = self._window[0] = tup.values[-1]
        if self._run(tup):
            self._held.append((window, tup))

    def _punctuated(self, tup: Any, channel: tuple[int, str]) -> None:
        """``channel`` ended its windows up to ``tup``'s: once every channel has, the windows
        up to the smallest of their latest end here."""
        ended = self._ended
        ended[channel] = tup.values[0]
        self._held.append((tup.values[0], tup))
        if len(ended) < self._channels:
            return
        last = min(ended.values())
        if self._last is not None and last <= self._last:
            return
        self._last = last
        done = [t for w, t in self._held if w <= last]
        self._held = [(w, t) for w, t in self._held if w > last]
        self._input = [t for t in done if t.source_stream_id.endswith(PUNCTUATION)]
        try:
            self._close(last)
        except Exception as e:  # noqa: BLE001 - the windows' inputs fail; the bolt goes on
            self._collector.report_error(self.blame(e))
            self._bind()
            settle = self._collector.fail
        else:
            settle = self._collector.ack
        for t in done:
            settle(t)

    def blame(self, error: Exception) -> StreamOperationError:
        """The error to record: the operation whose user function raised, and the line."""
        frames = traceback.extract_tb(error.__traceback__)
        tb = error.__traceback__
        codes = []
        while tb is not None:
            codes.append(tb.tb_frame.f_code)
            tb = tb.tb_next
        for code, frame in zip(codes, frames):
            operation = self._owners.get(code)
            if operation is not None:
                message = (f"operation {operation.name} raised {type(error).__name__}: {error} "
                           f"(at {frame.filename}:{frame.lineno})")
                break
        else:  # a builtin or a library function: name the bolt's operations
            message = (f"one of the operations {self.describe_operations()} raised {type(error).__name__}: {error} "
                       f"(at {frames[-1].filename}:{frames[-1].lineno})")
        failure = StreamOperationError(message)
        failure.__cause__ = error
        return failure


class StatefulProcessorBolt(ProcessorBolt, StatefulComponent):
    """A :class:`ProcessorBolt` whose chain keeps states (:attr:`Step.stateful`) in the task's
    checkpointed state (Storm's ``StatefulProcessorBolt``); its inputs' acks wait for the
    commit of the state they changed."""

    def init_state(self, state: Any) -> None:
        self._states[0] = state


class WindowedProcessorBolt(BaseWindowedBolt):
    """The windowed bolt that starts at a ``window``: each window's values go through
    ``chain`` (a :class:`ProcessorBolt` whose first step is the window), then the window ends
    (see the module). Run by a :class:`WindowedStreamExecutor`."""

    def __init__(self, chain: ProcessorBolt, window: Window) -> None:
        self.chain = chain
        self.window = window
        self._window = window.config

    def declare_output_fields(self, declarer: Any) -> None:
        self.chain.declare_output_fields(declarer)

    def describe_operations(self) -> str:
        return self.chain.describe_operations()

    def get_timestamp_extractor(self) -> Callable[[Any], Any] | None:
        timestamp = self.window.timestamp
        if timestamp is None:
            return None
        decode = _decoder(self.chain.inputs[0])
        return lambda tup: timestamp(decode(tup.values))

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.chain.prepare(conf, context, collector)
        self._punctuated: Any = None
        #: windows that slide by a count are numbered (1, 2, ...), not timed
        self._counted = isinstance(self._window.sliding, Count)
        self._ordinal = 0

    def execute(self, window: TupleWindow) -> None:
        chain = self.chain
        if self._counted:
            self._ordinal += 1
            end = self._ordinal
        else:
            end = window.end_timestamp
        chain._window[0] = end
        try:
            for tup in window.get():
                chain._input = tup
                chain._feed(tup)
            chain._input = None  # what the window's end emits is anchored to the window
            chain._close(end)
        except Exception as e:
            chain._bind()  # forget the failed window's values
            raise chain.blame(e) from None
        self._punctuated = end

    def idle(self, until: int) -> None:
        """No window of this task can end at ``until`` or before any more: punctuate it."""
        if self._punctuated is None or until > self._punctuated:
            self._punctuated = until
            self.chain._input = None
            self.chain._close(until)


class WindowedStreamExecutor(WindowedBoltExecutor):
    """Runs a :class:`WindowedProcessorBolt`: windows that slide by a ``Duration`` end at
    multiples of it (in processing time too), so that the windows of parallel tasks are the
    same; on each tick, the bolt punctuates what no window can end at any more."""

    bolt: WindowedProcessorBolt

    def describe_operations(self) -> str:
        return self.bolt.describe_operations()

    def _origin_ms(self) -> int:
        now = self._now_ms()
        sliding = self._config.sliding
        return now - now % sliding.millis if isinstance(sliding, Duration) else now

    def execute(self, tup: Any) -> None:
        super().execute(tup)
        if tup.is_tick() and isinstance(self._config.sliding, Duration):
            if self._event_time:
                watermark = self._manager.watermark
                if watermark is not None:
                    self.bolt.idle(watermark - 1)
            else:
                self.bolt.idle(self._now_ms() - 1)


def _fan_out(forwards: list[Any]) -> Any:
    """One function calling each of ``forwards`` (none: values are dropped)."""
    if len(forwards) == 1:
        return forwards[0]
    if not forwards:
        return _drop

    def forward(value: Any) -> None:
        for f in forwards:
            f(value)
    return forward


def _drop(value: Any) -> None:
    """Where the values of an operation nothing follows go."""


def _decoder(source: Input) -> Callable[[list[Any]], Any]:
    """How the values of ``source``'s tuples become the stream's value."""
    if source.decoding == FROM_SPOUT:
        mapper = source.value_mapper
        decode = mapper
    elif source.decoding == FROM_PAIRS:
        decode = _pair
    else:
        decode = _first
    if source.late:
        return lambda values: decode(values[0])
    return decode


def _pair(values: list[Any]) -> tuple[Any, Any]:
    return values[0], values[1]


def _first(values: list[Any]) -> Any:
    return values[0]
