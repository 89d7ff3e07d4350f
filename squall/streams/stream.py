"""``Stream`` and ``PairStream`` (Storm's ``org.apache.storm.streams.Stream`` and ``PairStream``).

A stream is a point of a pipeline under construction: each method adds an operation after it
and returns the stream of that operation's values (calling two methods on one stream fans
out). Nothing runs until :meth:`squall.streams.StreamBuilder.build` turns the pipeline into a
topology. Values of a :class:`PairStream` are ``(key, value)`` tuples.

Operations that need every value of a key in one task (``count_by_key`` ...) start a new bolt
behind a fields grouping on the key, unless the stream is already partitioned by key (or runs
one task); ``repartition(n)`` starts one behind a shuffle grouping. ``window`` starts a windowed
bolt, after which the stream is windowed: aggregations and joins work per window (see
:mod:`squall.streams.processor_bolt` for how windows end across bolts). Everything else is
fused into the bolt of the operation before it (see :mod:`squall.streams.builder`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from squall.api.errors import InvalidTopologyError
from squall.streams import operations as ops
from squall.streams.windows import Window

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
#: the grouping a new bolt gets from the bolt before it (VALUE: fields grouping on the value, as
#: a state query reaches the bolt of its state)
SHUFFLE, KEY, VALUE, GLOBAL = "shuffle", "key", "value", "global"


class Pipeline(Protocol):
    """What a stream needs of its :class:`~squall.streams.StreamBuilder`."""

    def new_stream_id(self) -> str:
        """A stream id for a new operation's values (``s1``, ``s2``...)."""

    def add_sink(self, node: Node, bolt: Any, parallelism: int, grouping: str, name: str | None) -> None:
        """``to(bolt)`` after ``node``."""


class Node:
    """An operation of the pipeline (or its source, ``operation`` None) and where it runs."""

    def __init__(self, builder: Pipeline, operation: ops.Operation | None, parent: Node | None,
                 parallelism: int, grouping: str | None, pairs: bool, keyed: bool,
                 window: Window | None = None, other: Node | None = None) -> None:
        self.operation = operation
        self.parent = parent
        #: a join's right stream (``parent`` is its left one)
        self.other = other
        self.children: list[Node] = []
        self.parallelism = parallelism
        #: how this node's values reach it from its parent's bolt when it starts a bolt of its
        #: own; None: in its parent's bolt when it can be
        self.grouping = grouping
        self.pairs = pairs
        self.keyed = keyed  # partitioned by key: every value of a key is in one task
        #: the window its values belong to (None: not windowed)
        self.window = window
        #: the stream its values leave its component on (a spout's: its default stream)
        self.stream_id = "default" if operation is None else builder.new_stream_id()
        #: the stream it reads from its parent's component (a window's late values: their own)
        self.input_stream = parent.stream_id if parent is not None else None
        #: a state query's update_state_by_key, whose bolt it runs in
        self.state: Node | None = None
        #: the id of the component it runs in, given by Stream.name (None: generated)
        self.name: str | None = None
        for node in (parent, other):
            if node is not None:
                node.children.append(self)


def _check_id(where: str, name: Any) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: a component id must be a non-empty string, not {name!r}")


class Stream(Generic[T]):
    """A stream of values (see the module's docstring)."""

    def __init__(self, builder: Pipeline, node: Node, grouping: str | None = None,
                 parallelism: int | None = None) -> None:
        self._builder = builder
        self._node = node
        self._grouping = grouping  # a repartition waiting for the next operation
        self._parallelism = node.parallelism if parallelism is None else parallelism

    # -- operations that keep values apart ---------------------------------------------------

    def filter(self, predicate: Callable[[T], bool]) -> Stream[T]:
        """The values for which ``predicate`` is true."""
        return self._then(ops.Filter(predicate))

    def map(self, function: Callable[[T], Any]) -> Stream[Any]:
        """``function(value)`` for each value."""
        return self._then(ops.Map(function), pairs=False)

    def flat_map(self, function: Callable[[T], Iterable[Any]]) -> Stream[Any]:
        """Each element of ``function(value)``, in order, for each value."""
        return self._then(ops.FlatMap(function), pairs=False)

    def peek(self, action: Callable[[T], Any]) -> Stream[T]:
        """The same values, after calling ``action`` with each (for debugging)."""
        return self._then(ops.Peek(action))

    def for_each(self, action: Callable[[T], Any]) -> None:
        """Call ``action`` with each value; the end of this branch of the pipeline."""
        self._then(ops.ForEach(action))

    def print(self) -> None:
        """Print each value on the worker's standard output; the end of this branch."""
        self._then(ops.Print())

    def map_to_pair(self, function: Callable[[T], tuple[K, V]]) -> PairStream[K, V]:
        """The pair ``function(value)`` returns, for each value."""
        return self._then(ops.MapToPair(function), pairs=True)

    def flat_map_to_pair(self, function: Callable[[T], Iterable[tuple[K, V]]]) -> PairStream[K, V]:
        """Each pair of ``function(value)``, for each value."""
        return self._then(ops.FlatMapToPair(function), pairs=True)

    def branch(self, *predicates: Callable[[T], bool]) -> list[Stream[T]]:
        """One stream per predicate: each value goes to the first whose predicate is true (in
        the order given), or to none."""
        if not predicates:
            raise ValueError("branch needs at least one predicate")
        branch = self._then(ops.Branch(*predicates))
        return [branch._then(_BranchOutput(i)) for i in range(len(predicates))]

    def repartition(self, parallelism: int) -> Stream[T]:
        """The same values spread evenly (shuffle grouping) over ``parallelism`` tasks, where
        what follows runs; the same stream when it already runs that many."""
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"repartition: parallelism must be an integer >= 1, not {parallelism!r}")
        if parallelism == self._parallelism:
            return self
        return type(self)(self._builder, self._node, SHUFFLE, parallelism)

    def window(self, window: Window) -> Stream[T]:
        """The same values, in windows: what follows runs per window (Storm's semantics):
        aggregations and joins emit each window's results when it ends, then forget it;
        operations that keep no state see each value once per window it is in. Starts a bolt
        (a windowed bolt: see the guide's Windows page), behind the pending repartition, a
        fields grouping on the key if the stream is partitioned by key, else a shuffle
        grouping. ``window``: ``TumblingWindows.of(...)`` or ``SlidingWindows.of(...)``."""
        if not isinstance(window, Window):
            raise TypeError(f"window takes TumblingWindows.of(...) or SlidingWindows.of(...), not {window!r}")
        if window.config.length is None:
            raise InvalidTopologyError("window: the window has no length; make it with TumblingWindows.of(length) "
                                       "or SlidingWindows.of(length, sliding)")
        if self._node.window is not None:
            raise InvalidTopologyError(f"window: the stream is windowed already ({self._node.window!r})")
        if window.config.timestamp_field is not None and self._node.operation is not None:
            raise InvalidTopologyError(
                f"window: with_timestamp_field({window.config.timestamp_field!r}) reads a spout's field, so it "
                "is only for a window right after new_stream; use with_timestamp(function of the value)")
        node = self._node
        grouping = self._grouping or (KEY if node.keyed and self._parallelism > 1 else SHUFFLE)
        return self._then(ops.PassThrough("window"), grouping=grouping, window=window)

    def late(self) -> Stream[T]:
        """The values that came too late for their window (event time: timestamp below the
        watermark), as they come; call it on the stream ``window`` returned. Without it, late
        values are logged and dropped, as in Storm."""
        node = self._node
        if node.operation is None or node.operation.name != "window" or node.window is None:
            raise InvalidTopologyError("late: call it on the stream window(...) returned")
        if not node.window.event_time:
            raise InvalidTopologyError(f"late: {node.window!r} is in processing time, where no value is late; "
                                       "give the window with_timestamp(...) for event time")
        if any(child.operation.name == "late" for child in node.children):
            raise InvalidTopologyError("late: called twice on one window; use the stream it returned")
        late = Stream(self._builder, node, SHUFFLE)._then(ops.PassThrough("late"), window=None)
        late._node.input_stream = self._builder.new_stream_id()  # the windowed bolt's late tuple stream
        return late

    def state_query(self, state: PairStream[Any, Any]) -> PairStream[T, Any]:
        """``(value, state)`` for each value whose key has a state in ``state`` (a stream
        ``update_state_by_key`` returned), read when the value arrives; values of a key
        without a state give nothing. Runs in the bolt that keeps the state, behind a fields
        grouping on the value."""
        target = getattr(state, "_node", None)
        if not isinstance(target, Node) or not isinstance(target.operation, ops.UpdateStateByKey):
            raise TypeError(f"state_query takes the stream update_state_by_key returned, not {state!r}")
        if state._builder is not self._builder:
            raise InvalidTopologyError("state_query: the state belongs to another StreamBuilder")
        if self._node.pairs:
            raise TypeError("state_query needs a stream of keys; map the pairs to their keys first")
        query = Stream(self._builder, self._node, VALUE, target.parallelism)._then(
            ops.StateQuery(), pairs=True, window=None)
        query._node.state = target
        return query

    # -- aggregations over the whole stream ---------------------------------------------------

    def aggregate(self, initial: Any = None, accumulator: Callable[[Any, T], Any] | None = None,
                  combiner: Callable[[Any, Any], Any] | None = None, *,
                  aggregator: ops.Aggregator | None = None) -> Stream[Any]:
        """The running aggregate over every value so far, after each value: from ``initial``
        (or a function making it) with ``accumulator(acc, value)``, ``combiner`` merging two
        accumulators; or from an :class:`~squall.streams.Aggregator`. Runs in one task."""
        aggregator = _aggregator("aggregate", initial, accumulator, combiner, aggregator)
        return self._global()._then(ops.Aggregate(aggregator), pairs=False)

    def reduce(self, reducer: Callable[[T, T], T]) -> Stream[T]:
        """The running reduction over every value so far (the first value is the seed), after
        each value. Runs in one task."""
        return self._global()._then(ops.Reduce(reducer), pairs=False)

    def count(self) -> Stream[int]:
        """How many values so far, after each value. Runs in one task."""
        return self._global()._then(ops.Aggregate(ops.Count(), "count"), pairs=False)

    def name(self, name: str) -> Stream[T]:
        """Name the operation that made this stream (right after ``new_stream``: the spout);
        returns this stream. The component it runs in takes ``name`` as its id: the id its state
        is kept under (Flink's ``uid``, Bytewax's step id), so that a later version of the
        pipeline that adds or removes other operations, or bolts, keeps that state. Unnamed
        components are ``spout1``, ``bolt1``, ... in the order the pipeline makes them. Two
        named operations fused into one bolt, or one name given twice, are refused at
        :meth:`~squall.streams.StreamBuilder.build`."""
        _check_id("name", name)
        if self._node.name is not None and self._node.name != name:
            raise ValueError(f"name: this operation is named {self._node.name!r} already, not {name!r}")
        self._node.name = name
        return self

    # -- the end of a pipeline ----------------------------------------------------------------

    def to(self, bolt: Any, parallelism: int = 1, name: str | None = None) -> None:
        """Send the values to ``bolt`` (any bolt), a component of its own with ``parallelism``
        tasks, subscribed with shuffle grouping (or the pending repartition): it receives
        tuples of the field ``value``, or ``key`` and ``value`` from a pair stream. ``name``:
        its component id (as :meth:`name`'s; default ``boltN``, after the pipeline's bolts)."""
        if name is not None:
            _check_id("to", name)
        self._builder.add_sink(self._node, bolt, parallelism, self._grouping or SHUFFLE, name)

    # -- internals ----------------------------------------------------------------------------

    def _then(self, operation: ops.Operation, pairs: bool | None = None, grouping: str | None = None,
              window: Window | None | bool = True, other: Node | None = None) -> Any:
        """The stream of ``operation`` added after this one (a PairStream if it yields pairs);
        ``window``: True for this stream's window, else the window of the new stream."""
        node = self._node
        pairs = node.pairs if pairs is None else pairs
        grouping = grouping or self._grouping
        if node.operation is None and grouping in (KEY, VALUE):
            # a fields grouping needs the fields: the value mapper's values leave a bolt first
            node = Node(self._builder, ops.PassThrough("new_stream"), node, node.parallelism, SHUFFLE, node.pairs,
                        False)
        keyed = (grouping == KEY or grouping is None and node.keyed and operation.preserves_key) and pairs
        child = Node(self._builder, operation, node, self._parallelism, grouping, pairs, keyed,
                     node.window if window is True else window or None, other)
        return (PairStream if pairs else Stream)(self._builder, child)

    def _global(self) -> Stream[T]:
        """This stream, gathered in one task for a global aggregation."""
        if self._parallelism == 1 and self._grouping is None:
            return self
        return type(self)(self._builder, self._node, GLOBAL, 1)

    def __getattr__(self, name: str) -> Any:
        if name in _PAIR_OPERATIONS:
            raise TypeError(f"{name} needs a stream of (key, value) pairs; make one with map_to_pair or "
                            f"flat_map_to_pair")
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class PairStream(Stream[tuple[K, V]]):
    """A stream of ``(key, value)`` pairs."""

    def map_values(self, function: Callable[[V], Any]) -> PairStream[K, Any]:
        """``(key, function(value))`` for each pair."""
        return self._then(ops.MapValues(function), pairs=True)

    def flat_map_values(self, function: Callable[[V], Iterable[Any]]) -> PairStream[K, Any]:
        """``(key, v)`` for each element ``v`` of ``function(value)``, for each pair."""
        return self._then(ops.FlatMapValues(function), pairs=True)

    def aggregate_by_key(self, initial: Any = None, accumulator: Callable[[Any, V], Any] | None = None,
                         combiner: Callable[[Any, Any], Any] | None = None, *,
                         aggregator: ops.Aggregator | None = None) -> PairStream[K, Any]:
        """Per key, the running aggregate of its values so far, ``(key, result)`` after each
        pair: from ``initial`` (or a function making it) with ``accumulator(acc, value)`` and
        ``combiner``, or from an :class:`~squall.streams.Aggregator`."""
        aggregator = _aggregator("aggregate_by_key", initial, accumulator, combiner, aggregator)
        return self._by_key(ops.AggregateByKey(aggregator))

    def reduce_by_key(self, reducer: Callable[[V, V], V]) -> PairStream[K, V]:
        """Per key, the running reduction of its values (the first is the seed), ``(key,
        result)`` after each pair."""
        return self._by_key(ops.ReduceByKey(reducer))

    def count_by_key(self) -> PairStream[K, int]:
        """Per key, how many pairs so far, ``(key, count)`` after each pair."""
        return self._by_key(ops.AggregateByKey(ops.Count(), "count_by_key"))

    def group_by_key(self) -> PairStream[K, list[V]]:
        """Per key, every value so far, ``(key, [values])`` after each pair."""
        return self._by_key(ops.GroupByKey())

    def update_state_by_key(self, initial: Any, update: Callable[[Any, V], Any]) -> PairStream[K, Any]:
        """Per key, a state kept in Squall's checkpointed state: ``update(state, value)`` for
        each pair (a key's state starts as ``initial``, or what a function of no argument
        makes), and ``(key, new state)`` after each pair. Runs in a stateful bolt behind a
        fields grouping on the key; with a stateful spout the states are effectively once across
        failures, with a reliable spout at least once (see the guide's State page). States must
        be values the state serializer can store."""
        return self._then(ops.UpdateStateByKey(initial, update), pairs=True, grouping=KEY, window=None)

    # -- joins of two windowed streams ----------------------------------------------------

    def join(self, other: PairStream[K, Any], joiner: Callable[[V, Any], Any] | None = None) -> PairStream[K, Any]:
        """Per window, ``(key, joiner(v, w))`` for every value ``v`` of this stream and ``w``
        of ``other`` with that key (default joiner: the pair ``(v, w)``), emitted when the
        window ends. The streams must be windowed alike, or one of them windowed (the other
        then gets the same window, as in Storm); runs on this stream's parallelism behind a
        fields grouping on the key."""
        return self._join(ops.Join("inner", joiner), other)

    def left_outer_join(self, other: PairStream[K, Any],
                        joiner: Callable[[V, Any], Any] | None = None) -> PairStream[K, Any]:
        """:meth:`join`, and ``(key, joiner(v, None))`` for the values of this stream whose key
        ``other`` lacks in the window."""
        return self._join(ops.Join("left", joiner), other)

    def right_outer_join(self, other: PairStream[K, Any],
                         joiner: Callable[[V, Any], Any] | None = None) -> PairStream[K, Any]:
        """:meth:`join`, and ``(key, joiner(None, w))`` for the values of ``other`` whose key
        this stream lacks in the window."""
        return self._join(ops.Join("right", joiner), other)

    def full_outer_join(self, other: PairStream[K, Any],
                        joiner: Callable[[V, Any], Any] | None = None) -> PairStream[K, Any]:
        """Both outer joins: every value of either stream, matched where the key allows."""
        return self._join(ops.Join("full", joiner), other)

    def co_group_by_key(self, other: PairStream[K, Any]) -> PairStream[K, tuple[list[V], list[Any]]]:
        """Per window, ``(key, (values of this stream, values of other))`` for each key of
        either stream, emitted when the window ends."""
        return self._join(ops.Join("co_group"), other)

    def _join(self, operation: ops.Join, other: PairStream[K, Any]) -> PairStream[K, Any]:
        name = operation.name
        if not isinstance(other, PairStream):
            raise TypeError(f"{name} needs a stream of (key, value) pairs to join with, not {other!r}")
        if other._builder is not self._builder:
            raise InvalidTopologyError(f"{name}: the other stream belongs to another StreamBuilder")
        mine, theirs = self._node.window, other._node.window
        if mine is None and theirs is None:
            raise InvalidTopologyError(f"{name}: the streams are not windowed: call window(...) on one (or both); "
                                       "a join pairs the values of a window")
        # one side windowed: the other gets the same window (Storm windows every input of the bolt)
        if theirs is None:
            other, theirs = other.window(mine), mine
        elif mine is None:
            return self.window(theirs)._join(operation, other)
        if not mine.alike(theirs):
            raise InvalidTopologyError(f"{name}: the streams have different windows, {mine!r} and {theirs!r}; "
                                       "window both streams alike")
        grouping = KEY if self._parallelism > 1 else SHUFFLE
        return self._then(operation, pairs=True, grouping=grouping, other=other._node)

    def _by_key(self, operation: ops.Operation) -> PairStream[K, Any]:
        """``operation`` where every value of a key meets: behind a fields grouping on the key
        unless the stream is partitioned by key already (or runs in one task)."""
        partitioned = self._grouping is None and (self._node.keyed or self._parallelism == 1)
        return self._then(operation, pairs=True, grouping=None if partitioned else KEY)


class _BranchOutput(ops.Operation):
    """The values a branch sends to its ``index``-th stream (the branch calls it directly)."""

    preserves_key = True

    def __init__(self, index: int) -> None:
        super().__init__()
        self.name = f"branch[{index}]"

    def bind(self, forward: ops.Forward) -> ops.Forward:
        return forward


def _aggregator(operation: str, initial: Any, accumulator: Any, combiner: Any,
                aggregator: ops.Aggregator | None) -> ops.Aggregator:
    if aggregator is not None:
        if accumulator is not None or combiner is not None or initial is not None:
            raise TypeError(f"{operation}: give either an aggregator or initial, accumulator and combiner")
        return aggregator
    if accumulator is None or combiner is None:
        raise TypeError(f"{operation}: needs an accumulator and a combiner (or aggregator=...)")
    return ops.Aggregator.of(initial, accumulator, combiner)


_PAIR_OPERATIONS = frozenset({"map_values", "flat_map_values", "aggregate_by_key", "reduce_by_key",
                              "count_by_key", "group_by_key", "update_state_by_key", "join", "left_outer_join",
                              "right_outer_join", "full_outer_join", "co_group_by_key"})
