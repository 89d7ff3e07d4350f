"""The bolt that runs a fused chain of stream operations (Storm's ``ProcessorBolt``).

A :class:`ProcessorBolt` holds a tree of operations that need no repartition between them
(:mod:`squall.streams.builder` decides where bolts start). For each input tuple it decodes the
value (a spout's values through the stream's value mapper; a pair ``(key, value)`` from the
fields ``key``, ``value``; else field ``value``), calls the first operation, and each operation
calls the next ones directly; a value leaving the bolt is emitted on its operation's stream,
anchored to the input. The input is acked once the chain returns, so a spout tuple is complete
when everything it produced downstream is.

An exception raised by a user function fails the input (its spout tuple is replayed, if
tracked) and records an error naming the operation and the user's file and line; the bolt goes
on with the next input.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from squall.api.bolt import Bolt
from squall.api.stateful import StatefulComponent
from squall.streams.operations import Branch, Forward, Operation, UpdateStateByKey, user_code

#: how a bolt's input tuples become values: a spout's (through the value mapper), a pair stream's
#: or a value stream's
FROM_SPOUT, FROM_PAIRS, FROM_VALUES = "spout", "pairs", "values"


@dataclass(frozen=True)
class Step:
    """An operation in a bolt: ``parent`` is the index of the step it follows (-1: the bolt's
    input), ``stream`` the stream it emits on when its values leave the bolt (else None),
    ``pairs`` whether its values are pairs."""

    operation: Operation
    parent: int
    stream: str | None
    pairs: bool


class StreamOperationError(RuntimeError):
    """A user function of a stream operation raised (the cause is chained)."""


class ProcessorBolt(Bolt):
    """Runs ``steps`` (in tree order: a parent before its children) on each input; ``source``:
    :data:`FROM_SPOUT` (with ``value_mapper``), :data:`FROM_PAIRS` or :data:`FROM_VALUES`."""

    def __init__(self, steps: list[Step], source: str, value_mapper: Callable[[Any], Any] | None = None) -> None:
        self.steps = steps
        self.source = source
        self.value_mapper = value_mapper

    def declare_output_fields(self, declarer: Any) -> None:
        for step in self.steps:
            if step.stream is not None:
                declarer.declare_stream(step.stream, ["key", "value"] if step.pairs else ["value"])

    def describe_operations(self) -> str:
        """The operations this bolt runs, in order (``squall plan`` shows them)."""
        return " -> ".join(step.operation.name for step in self.steps)

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self._collector = collector
        self._input: Any = None
        children: list[list[int]] = [[] for _ in self.steps]
        for i, step in enumerate(self.steps):
            if step.parent >= 0:
                children[step.parent].append(i)
        processes: list[Forward | None] = [None] * len(self.steps)
        #: the task's KeyValueState once loaded (StatefulProcessorBolt.init_state)
        self._states: list[Any] = [None]
        for i in reversed(range(len(self.steps))):  # children come after their parent
            step = self.steps[i]
            forwards = [processes[c] for c in children[i]]
            if isinstance(step.operation, Branch):
                processes[i] = step.operation.bind_branches(forwards)
                continue
            if step.stream is not None:
                forwards.append(self._emitter(step))
            if isinstance(step.operation, UpdateStateByKey):
                processes[i] = step.operation.bind_state(_fan_out(forwards), self._states)
            else:
                processes[i] = step.operation.bind(_fan_out(forwards))
        self._entry = _fan_out([processes[i] for i, step in enumerate(self.steps) if step.parent < 0])
        self._decode = _decoder(self.source, self.value_mapper)
        # a user function's code -> its operation, to name the one that raised
        self._owners = {user_code(f): step.operation for step in self.steps for f in step.operation.functions}

    def _emitter(self, step: Step) -> Forward:
        emit, stream = self._collector.emit, step.stream
        if step.pairs:
            return lambda pair: emit([pair[0], pair[1]], anchors=self._input, stream=stream)
        return lambda value: emit([value], anchors=self._input, stream=stream)

    def execute(self, tup: Any) -> None:
        self._input = tup
        try:
            self._entry(self._decode(tup))
        except Exception as e:  # noqa: BLE001 - the input fails; the bolt goes on
            self._collector.report_error(self._blame(e))
            self._collector.fail(tup)
            return
        self._collector.ack(tup)

    def _blame(self, error: Exception) -> StreamOperationError:
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
    """A :class:`ProcessorBolt` whose chain holds an ``update_state_by_key``: its states are the
    task's checkpointed state (Storm's ``StatefulProcessorBolt``); its inputs' acks wait for the
    commit of the state they changed."""

    def init_state(self, state: Any) -> None:
        self._states[0] = state


def _fan_out(forwards: list[Forward]) -> Forward:
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


def _decoder(source: str, value_mapper: Callable[[Any], Any] | None) -> Callable[[Any], Any]:
    if source == FROM_SPOUT:
        return lambda tup: value_mapper(tup.values)
    if source == FROM_PAIRS:
        return lambda tup: (tup.values[0], tup.values[1])
    return lambda tup: tup.values[0]
