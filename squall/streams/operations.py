"""The operations of a stream pipeline (Storm's ``org.apache.storm.streams.processors``), as the
chain of Python calls a :class:`~squall.streams.processor_bolt.ProcessorBolt` runs.

An operation is bound once per task, in the worker (:meth:`Operation.bind`): given ``forward``
(what receives each value it produces: the next operations of the same bolt, called directly,
and the bolt's emit when the stream leaves it), it returns the function called with each input
value. Consecutive operations of one bolt are therefore nested calls: no tuple, queue or ack
between them (Storm's ``ForwardingProcessorContext``, Flink's operator chaining).

Pairs are Python tuples ``(key, value)`` (Storm's ``Pair``). Aggregations without a window keep
their state in the bound function and emit a running result after every input, for the input's
key (Storm's semantics for a stream that is not windowed).

Nothing here blocks; an exception raised by a user function goes up to the bolt, which fails the
input and names the operation (see :mod:`squall.streams.processor_bolt`).
"""

from __future__ import annotations

from collections.abc import Callable
from types import CodeType
from typing import Any

Forward = Callable[[Any], None]


class Operation:
    """One step of a pipeline. ``name`` is the Streams API method that made it (what errors,
    ``squall plan`` and the UI show); ``functions`` are the user's callables it runs."""

    name = "operation"
    #: whether each output pair keeps its input's key (a key partition upstream still holds)
    preserves_key = False

    def __init__(self, *functions: Callable[..., Any]) -> None:
        self.functions = functions

    def bind(self, forward: Forward) -> Forward:
        """The function a task calls with each input value; it calls ``forward`` with each
        value it produces. Called once per task, in the worker."""
        raise NotImplementedError

    def describe(self) -> str:
        """``name`` and where its first user function is defined (file:line), for messages."""
        where = _defined_at(self.functions[0]) if self.functions else None
        return f"{self.name} ({where})" if where else self.name


class Filter(Operation):
    name = "filter"
    preserves_key = True

    def bind(self, forward: Forward) -> Forward:
        predicate = self.functions[0]

        def process(value: Any) -> None:
            if predicate(value):
                forward(value)
        return process


class Map(Operation):
    name = "map"

    def bind(self, forward: Forward) -> Forward:
        function = self.functions[0]
        return lambda value: forward(function(value))


class FlatMap(Operation):
    name = "flat_map"

    def bind(self, forward: Forward) -> Forward:
        function = self.functions[0]

        def process(value: Any) -> None:
            for out in function(value):
                forward(out)
        return process


class Peek(Operation):
    name = "peek"
    preserves_key = True

    def bind(self, forward: Forward) -> Forward:
        action = self.functions[0]

        def process(value: Any) -> None:
            action(value)
            forward(value)
        return process


class ForEach(Operation):
    """A terminal operation: ``action(value)``, nothing forwarded."""

    name = "for_each"

    def bind(self, forward: Forward) -> Forward:
        return self.functions[0]


class Print(Operation):
    """``print(value)`` for each value, on the worker's standard output."""

    name = "print"

    def bind(self, forward: Forward) -> Forward:
        return print


class MapToPair(Map):
    name = "map_to_pair"


class FlatMapToPair(FlatMap):
    name = "flat_map_to_pair"


class MapValues(Operation):
    name = "map_values"
    preserves_key = True

    def bind(self, forward: Forward) -> Forward:
        function = self.functions[0]
        return lambda pair: forward((pair[0], function(pair[1])))


class FlatMapValues(Operation):
    name = "flat_map_values"
    preserves_key = True

    def bind(self, forward: Forward) -> Forward:
        function = self.functions[0]

        def process(pair: Any) -> None:
            key = pair[0]
            for out in function(pair[1]):
                forward((key, out))
        return process


class Branch(Operation):
    """Each value goes to the first branch whose predicate it satisfies (in the order given),
    or nowhere. Bound with one forward per branch (:meth:`bind_branches`)."""

    name = "branch"
    preserves_key = True

    def bind(self, forward: Forward) -> Forward:
        raise TypeError("a branch is bound with one forward per branch")

    def bind_branches(self, forwards: list[Forward]) -> Forward:
        cases = list(zip(self.functions, forwards))

        def process(value: Any) -> None:
            for predicate, forward in cases:
                if predicate(value):
                    forward(value)
                    return
        return process


class Aggregator:
    """Storm's ``CombinerAggregator``: how values fold into an accumulator and what is emitted.

    ``init()`` is a new accumulator, ``apply(acc, value)`` adds a value (and returns the
    accumulator), ``merge(a, b)`` combines two accumulators, ``result(acc)`` is what is emitted.
    Subclass it, or make one with :meth:`of`.
    """

    def init(self) -> Any:
        raise NotImplementedError

    def apply(self, accumulator: Any, value: Any) -> Any:
        raise NotImplementedError

    def merge(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def result(self, accumulator: Any) -> Any:
        return accumulator

    @staticmethod
    def of(initial: Any, accumulator: Callable[[Any, Any], Any], combiner: Callable[[Any, Any], Any]) -> Aggregator:
        """An aggregator from an initial value (or a function of no argument making one: a
        mutable initial value must be made anew for each key), an accumulator and a combiner."""
        return _FunctionAggregator(initial, accumulator, combiner)


class _FunctionAggregator(Aggregator):
    def __init__(self, initial: Any, accumulator: Callable[[Any, Any], Any],
                 combiner: Callable[[Any, Any], Any]) -> None:
        self.initial, self.accumulator, self.combiner = initial, accumulator, combiner

    def init(self) -> Any:
        return self.initial() if callable(self.initial) else self.initial

    def apply(self, accumulator: Any, value: Any) -> Any:
        return self.accumulator(accumulator, value)

    def merge(self, a: Any, b: Any) -> Any:
        return self.combiner(a, b)


class Count(Aggregator):
    """How many values (Storm's ``Count``)."""

    def init(self) -> int:
        return 0

    def apply(self, accumulator: int, value: Any) -> int:
        return accumulator + 1

    def merge(self, a: int, b: int) -> int:
        return a + b


class Aggregate(Operation):
    """A global aggregation: the running result over every value so far, after each."""

    name = "aggregate"

    def __init__(self, aggregator: Aggregator, name: str = "aggregate") -> None:
        super().__init__(*_aggregator_functions(aggregator))
        self.aggregator = aggregator
        self.name = name

    def bind(self, forward: Forward) -> Forward:
        aggregator = self.aggregator
        state = [aggregator.init()]

        def process(value: Any) -> None:
            state[0] = aggregator.apply(state[0], value)
            forward(aggregator.result(state[0]))
        return process


class Reduce(Operation):
    """A global reduction: the first value is the seed; the running result after each value."""

    name = "reduce"

    def bind(self, forward: Forward) -> Forward:
        reducer = self.functions[0]
        state: list[Any] = []

        def process(value: Any) -> None:
            if state:
                state[0] = reducer(state[0], value)
            else:
                state.append(value)
            forward(state[0])
        return process


class AggregateByKey(Operation):
    """Per key: the running result for the input's key, after each input (``(key, result)``)."""

    name = "aggregate_by_key"
    preserves_key = True

    def __init__(self, aggregator: Aggregator, name: str = "aggregate_by_key") -> None:
        super().__init__(*_aggregator_functions(aggregator))
        self.aggregator = aggregator
        self.name = name

    def bind(self, forward: Forward) -> Forward:
        aggregator = self.aggregator
        state: dict[Any, Any] = {}
        missing = object()

        def process(pair: Any) -> None:
            key = pair[0]
            accumulator = state.get(key, missing)
            if accumulator is missing:
                accumulator = aggregator.init()
            accumulator = state[key] = aggregator.apply(accumulator, pair[1])
            forward((key, aggregator.result(accumulator)))
        return process


class ReduceByKey(Operation):
    """Per key: the first value is the seed; ``(key, running reduction)`` after each input."""

    name = "reduce_by_key"
    preserves_key = True

    def bind(self, forward: Forward) -> Forward:
        reducer = self.functions[0]
        state: dict[Any, Any] = {}

        def process(pair: Any) -> None:
            key, value = pair
            if key in state:
                value = reducer(state[key], value)
            state[key] = value
            forward((key, value))
        return process


class GroupByKey(Operation):
    """Per key: ``(key, [every value so far])`` after each input (a copy: what was emitted is
    never changed later)."""

    name = "group_by_key"
    preserves_key = True

    def bind(self, forward: Forward) -> Forward:
        state: dict[Any, list[Any]] = {}

        def process(pair: Any) -> None:
            key = pair[0]
            values = state.setdefault(key, [])
            values.append(pair[1])
            forward((key, list(values)))
        return process


class UpdateStateByKey(Operation):
    """Per key, a state kept in the bolt's checkpointed :class:`~squall.api.state.KeyValueState`:
    ``update(state, value)`` for each pair (the key's state starting from ``initial``, or what a
    function of no argument makes), stored, and ``(key, new state)`` emitted. The state is read
    through ``states``, the task's state holder, set once the task's state is loaded."""

    name = "update_state_by_key"
    preserves_key = True

    def __init__(self, initial: Any, update: Callable[[Any, Any], Any]) -> None:
        super().__init__(update)
        self.initial = initial

    def bind(self, forward: Forward) -> Forward:
        raise TypeError("update_state_by_key is bound with the task's state holder")

    def bind_state(self, forward: Forward, states: list[Any]) -> Forward:
        update, initial = self.functions[0], self.initial
        missing = object()

        def process(pair: Any) -> None:
            key = pair[0]
            state = states[0]
            current = state.get(key, missing)
            if current is missing:
                current = initial() if callable(initial) else initial
            current = update(current, pair[1])
            state.put(key, current)
            forward((key, current))
        return process


def _aggregator_functions(aggregator: Aggregator) -> tuple[Callable[..., Any], ...]:
    """The user's callables of an aggregator, for messages and the shipping check."""
    if isinstance(aggregator, _FunctionAggregator):
        return tuple(f for f in (aggregator.accumulator, aggregator.combiner) if callable(f))
    return (aggregator.apply,)


def user_code(function: Callable[..., Any]) -> CodeType | None:
    """The code object a user's callable runs: a function's, a bound method's, a partial's
    function's, a callable object's ``__call__``; None for a builtin."""
    function = getattr(function, "func", function)  # functools.partial
    if not hasattr(function, "__code__") and not hasattr(function, "__func__"):
        function = getattr(type(function), "__call__", function)  # a callable object
    function = getattr(function, "__func__", function)
    return getattr(function, "__code__", None)


def _defined_at(function: Callable[..., Any]) -> str | None:
    """``file:line`` where a user's callable is defined, or None."""
    code = user_code(function)
    return None if code is None else f"{code.co_filename}:{code.co_firstlineno}"

