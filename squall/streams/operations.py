"""The operations of a stream pipeline (Storm's ``org.apache.storm.streams.processors``), as the
chain of Python calls a :class:`~squall.streams.processor_bolt.ProcessorBolt` runs.

An operation is bound once per task, in the worker: given ``forward`` (what receives each value
it produces: the next operations of the same bolt, called directly, and the bolt's emit when
the stream leaves it), :meth:`Operation.bind` returns the function called with each input
value. Consecutive operations of one bolt are therefore nested calls: no tuple, queue or ack
between them (Storm's ``ForwardingProcessorContext``, Flink's operator chaining).

On a windowed stream (after ``window``) an operation is bound with :meth:`Operation.bind_window`
instead, which also returns the function called when windows end (Storm's punctuation): given
the last window that ended, it emits what those windows hold and calls the next operations'.
``window[0]`` names the window the value being processed belongs to (its end timestamp, or its
ordinal for windows that slide by a count): the bolt sets it.

Pairs are Python tuples ``(key, value)`` (Storm's ``Pair``). Aggregations (:class:`Fold`) keep
a state: without a window they emit a running result after every input, for the input's key
(in the task's checkpointed state when the stream's spout keeps its position:
:meth:`Fold.bind_state`); on a windowed stream they emit every key's result when the window
ends, then forget it (Storm's semantics for both).

Nothing here blocks; an exception raised by a user function goes up to the bolt, which fails the
input and names the operation (see :mod:`squall.streams.processor_bolt`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from types import CodeType
from typing import Any

Forward = Callable[[Any], None]
#: called when the windows up to the one it names have ended
Close = Callable[[Any], None]


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

    def bind_window(self, forward: Forward, close: Close, window: list[Any]) -> tuple[Forward, Close]:
        """:meth:`bind` for a windowed stream: the function called with each value (of the
        window ``window[0]``) and the one called when windows end, which must call ``close``
        after emitting. An operation that keeps no state forwards values and window ends."""
        return self.bind(forward), close

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


class PassThrough(Operation):
    """Values go on unchanged: where a stream changes how it travels (``window``, the late
    values of a window, the values a state is queried with), which starts a bolt."""

    preserves_key = True

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name

    def bind(self, forward: Forward) -> Forward:
        return forward


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


class Fold(Operation):
    """An aggregation: it folds values into accumulators, one per key (a global aggregation's
    under the key None). ``add(state, value)`` folds a value into ``state`` (a mapping of key
    to accumulator) and returns the running result for it; ``results(state)`` are what a
    window's state emits when the window ends.

    Without a window, ``add``'s result is emitted after each value, and the accumulators live
    in the task's checkpointed :class:`~squall.api.state.KeyValueState` (:meth:`bind_state`)
    when the stream's spout keeps its position (a stateful spout, a broker's: the running
    results are then effectively once across failures), else in memory (:meth:`bind`). On a
    windowed stream (:meth:`bind_window`) each window has its own, in memory, emitted and
    dropped when the window ends."""

    def add(self, state: Any, value: Any) -> Any:
        raise NotImplementedError

    def results(self, state: dict[Any, Any]) -> Iterable[Any]:
        raise NotImplementedError

    def bind(self, forward: Forward) -> Forward:
        """The running aggregation, its accumulators in the task's memory."""
        return self.bind_state(forward, [MemoryState()], None)

    def bind_state(self, forward: Forward, states: list[Any], namespace: str | None) -> Forward:
        """The running aggregation, its accumulators in ``states[0]`` (the task's
        KeyValueState, set once loaded) under the keys themselves, or ``(namespace, key)``
        when the bolt keeps several states."""
        add, view = self.add, StateView(states, namespace)
        return lambda value: forward(add(view, value))

    def bind_window(self, forward: Forward, close: Close, window: list[Any]) -> tuple[Forward, Close]:
        states: dict[Any, dict[Any, Any]] = {}  # window -> its accumulators
        add = self.add

        def process(value: Any) -> None:
            w = window[0]
            state = states.get(w)
            if state is None:
                state = states[w] = {}
            add(state, value)

        def end(last: Any) -> None:
            for w in sorted(w for w in states if w <= last):
                window[0] = w
                for result in self.results(states.pop(w)):
                    forward(result)
            close(last)
        return process, end


class MemoryState(dict):  # type: ignore[type-arg]
    """Accumulators kept in memory, read and written as a KeyValueState is."""

    put = dict.__setitem__


class StateView:
    """A fold's accumulators as a mapping over the task's KeyValueState (``states[0]``): keys
    as they are, or ``(namespace, key)``."""

    __slots__ = ("_states", "_namespace")

    def __init__(self, states: list[Any], namespace: str | None) -> None:
        self._states, self._namespace = states, namespace

    def _key(self, key: Any) -> Any:
        return key if self._namespace is None else (self._namespace, key)

    def __contains__(self, key: Any) -> bool:
        return self._key(key) in self._states[0]

    def __getitem__(self, key: Any) -> Any:
        return self._states[0].get(self._key(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        self._states[0].put(self._key(key), value)

    def get(self, key: Any, default: Any = None) -> Any:
        return self._states[0].get(self._key(key), default)


class Aggregate(Fold):
    """A global aggregation: ``aggregator``'s result over the values (one task)."""

    def __init__(self, aggregator: Aggregator, name: str = "aggregate") -> None:
        super().__init__(*_aggregator_functions(aggregator))
        self.aggregator = aggregator
        self.name = name

    def add(self, state: Any, value: Any) -> Any:
        aggregator = self.aggregator
        accumulator = state[None] = aggregator.apply(state[None] if None in state else aggregator.init(), value)
        return aggregator.result(accumulator)

    def results(self, state: dict[Any, Any]) -> Iterator[Any]:
        yield self.aggregator.result(state[None])


class Reduce(Fold):
    """A global reduction (one task): the first value is the seed."""

    name = "reduce"

    def add(self, state: Any, value: Any) -> Any:
        if None in state:
            value = self.functions[0](state[None], value)
        state[None] = value
        return value

    def results(self, state: dict[Any, Any]) -> Iterator[Any]:
        yield state[None]


class AggregateByKey(Fold):
    """Per key: ``(key, result)`` of ``aggregator`` over the key's values."""

    preserves_key = True

    def __init__(self, aggregator: Aggregator, name: str = "aggregate_by_key") -> None:
        super().__init__(*_aggregator_functions(aggregator))
        self.aggregator = aggregator
        self.name = name

    def add(self, state: Any, pair: Any) -> Any:
        key = pair[0]
        aggregator = self.aggregator
        accumulator = state[key] = aggregator.apply(state[key] if key in state else aggregator.init(), pair[1])
        return key, aggregator.result(accumulator)

    def results(self, state: dict[Any, Any]) -> Iterator[Any]:
        result = self.aggregator.result
        for key, accumulator in state.items():
            yield key, result(accumulator)

    def bind(self, forward: Forward) -> Forward:
        """:meth:`Fold.bind` in one closure, and a count as a dict increment: the word count's
        hot path."""
        state: dict[Any, Any] = {}
        get = state.get
        if type(self.aggregator) is Count:
            def count(pair: Any) -> None:
                key = pair[0]
                n = state[key] = get(key, 0) + 1
                forward((key, n))
            return count
        init, apply, result = self.aggregator.init, self.aggregator.apply, self.aggregator.result
        missing = object()

        def process(pair: Any) -> None:
            key = pair[0]
            accumulator = get(key, missing)
            accumulator = state[key] = apply(init() if accumulator is missing else accumulator, pair[1])
            forward((key, result(accumulator)))
        return process


class ReduceByKey(Fold):
    """Per key: ``(key, reduction)`` of the key's values (the first is the seed)."""

    name = "reduce_by_key"
    preserves_key = True

    def add(self, state: Any, pair: Any) -> Any:
        key, value = pair
        if key in state:
            value = self.functions[0](state[key], value)
        state[key] = value
        return key, value

    def results(self, state: dict[Any, Any]) -> Iterable[Any]:
        return state.items()


class GroupByKey(Fold):
    """Per key: ``(key, [its values])`` (a copy: what was emitted is never changed later)."""

    name = "group_by_key"
    preserves_key = True

    def add(self, state: Any, pair: Any) -> Any:
        values = state[pair[0]] = [*state.get(pair[0], ()), pair[1]]
        return pair[0], list(values)

    def results(self, state: dict[Any, Any]) -> Iterable[Any]:
        return state.items()


class Join(Operation):
    """The pairs of two windowed streams with equal keys, per window, emitted when the window
    ends: for each key, every left value with every right value (in arrival order), as
    ``(key, joiner(left, right))``. ``kind``: ``inner``; ``left`` / ``right`` / ``full``
    (outer) also emit the values of one side (or either) whose key the other side lacks in
    that window, with None for the missing value; ``co_group``: ``(key, (left values, right
    values))`` once per key of either side. Bound with two inputs (:meth:`bind_join`)."""

    preserves_key = True

    def __init__(self, kind: str, joiner: Callable[[Any, Any], Any] | None = None) -> None:
        super().__init__(*(() if joiner is None else (joiner,)))
        self.kind = kind
        self.name = "co_group_by_key" if kind == "co_group" else "join" if kind == "inner" else f"{kind}_outer_join"

    def bind(self, forward: Forward) -> Forward:
        raise TypeError(f"{self.name} is bound with two inputs")

    def bind_join(self, forward: Forward, close: Close, window: list[Any]) -> tuple[Forward, Forward, Close]:
        """The functions called with the left stream's pairs, the right stream's, and when
        windows end."""
        sides: dict[Any, tuple[dict[Any, list[Any]], dict[Any, list[Any]]]] = {}  # window -> (left, right)

        def adder(side: int) -> Forward:
            def process(pair: Any) -> None:
                w = window[0]
                both = sides.get(w)
                if both is None:
                    both = sides[w] = ({}, {})
                both[side].setdefault(pair[0], []).append(pair[1])
            return process

        def end(last: Any) -> None:
            for w in sorted(w for w in sides if w <= last):
                window[0] = w
                left, right = sides.pop(w)
                for pair in self.rows(left, right):
                    forward(pair)
            close(last)
        return adder(0), adder(1), end

    def rows(self, left: dict[Any, list[Any]], right: dict[Any, list[Any]]) -> Iterator[Any]:
        """What one window's values give: the keys of the left side first, in arrival order."""
        kind = self.kind
        if kind == "co_group":
            for key, values in left.items():
                yield key, (values, right.get(key, []))
            for key, values in right.items():
                if key not in left:
                    yield key, ([], values)
            return
        joiner = self.functions[0] if self.functions else _pair
        keep_left, keep_right = kind in ("left", "full"), kind in ("right", "full")
        none = [None]
        for key, lefts in left.items():
            rights = right.get(key)
            if rights is None and not keep_left:
                continue
            for a in lefts:
                for b in rights or none:
                    yield key, joiner(a, b)
        if keep_right:
            for key, rights in right.items():
                if key not in left:
                    for b in rights:
                        yield key, joiner(None, b)


def _pair(left: Any, right: Any) -> tuple[Any, Any]:
    return left, right


class UpdateStateByKey(Operation):
    """Per key, a state kept in the bolt's checkpointed :class:`~squall.api.state.KeyValueState`:
    ``update(state, value)`` for each pair (the key's state starting from ``initial``, or what a
    function of no argument makes), stored, and ``(key, new state)`` emitted. The state is read
    through ``states``, the task's state holder, set once the task's state is loaded. Its values
    are not windowed, even when its input is."""

    name = "update_state_by_key"
    preserves_key = True

    def __init__(self, initial: Any, update: Callable[[Any, Any], Any]) -> None:
        super().__init__(update)
        self.initial = initial

    def bind(self, forward: Forward) -> Forward:
        raise TypeError("update_state_by_key is bound with the task's state holder")

    def bind_state(self, forward: Forward, states: list[Any], namespace: str | None = None) -> Forward:
        """``namespace`` is ignored: the states are under their keys, where ``state_query``
        reads them."""
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


class StateQuery(Operation):
    """``(value, the state of key value)`` for each value, read from the state an
    ``update_state_by_key`` keeps (it runs in that operation's bolt); nothing for a key
    without a state."""

    name = "state_query"

    def bind(self, forward: Forward) -> Forward:
        raise TypeError("state_query is bound with the task's state holder")

    def bind_state(self, forward: Forward, states: list[Any], namespace: str | None = None) -> Forward:
        missing = object()

        def process(key: Any) -> None:
            state = states[0].get(key, missing)
            if state is not missing:
                forward((key, state))
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
