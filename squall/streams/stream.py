"""``Stream`` and ``PairStream`` (Storm's ``org.apache.storm.streams.Stream`` and ``PairStream``).

A stream is a point of a pipeline under construction: each method adds an operation after it
and returns the stream of that operation's values (calling two methods on one stream fans
out). Nothing runs until :meth:`squall.streams.StreamBuilder.build` turns the pipeline into a
topology. Values of a :class:`PairStream` are ``(key, value)`` tuples.

Operations that need every value of a key in one task (``count_by_key`` ...) start a new bolt
behind a fields grouping on the key, unless the stream is already partitioned by key (or runs
one task); ``repartition(n)`` starts one behind a shuffle grouping. Everything else is fused
into the bolt of the operation before it (see :mod:`squall.streams.builder`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

from squall.streams import operations as ops

T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
#: the grouping a new bolt gets from the bolt before it
SHUFFLE, KEY, GLOBAL = "shuffle", "key", "global"


class Pipeline(Protocol):
    """What a stream needs of its :class:`~squall.streams.StreamBuilder`."""

    def new_stream_id(self) -> str:
        """A stream id for a new operation's values (``s1``, ``s2``...)."""

    def add_sink(self, node: Node, bolt: Any, parallelism: int, grouping: str) -> None:
        """``to(bolt)`` after ``node``."""


class Node:
    """An operation of the pipeline (or its source, ``operation`` None) and where it runs."""

    def __init__(self, builder: Pipeline, operation: ops.Operation | None, parent: Node | None,
                 parallelism: int, grouping: str | None, pairs: bool, keyed: bool) -> None:
        self.operation = operation
        self.parent = parent
        self.children: list[Node] = []
        self.parallelism = parallelism
        #: how this node's values reach it from its parent's bolt when it starts a bolt of its
        #: own; None: in its parent's bolt when it can be
        self.grouping = grouping
        self.pairs = pairs
        self.keyed = keyed  # partitioned by key: every value of a key is in one task
        #: the stream its values leave its component on (a spout's: its default stream)
        self.stream_id = "default" if operation is None else builder.new_stream_id()
        if parent is not None:
            parent.children.append(self)


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

    # -- the end of a pipeline ----------------------------------------------------------------

    def to(self, bolt: Any, parallelism: int = 1) -> None:
        """Send the values to ``bolt`` (any bolt), a component of its own with ``parallelism``
        tasks, subscribed with shuffle grouping (or the pending repartition): it receives
        tuples of the field ``value``, or ``key`` and ``value`` from a pair stream."""
        self._builder.add_sink(self._node, bolt, parallelism, self._grouping or SHUFFLE)

    # -- internals ----------------------------------------------------------------------------

    def _then(self, operation: ops.Operation, pairs: bool | None = None, grouping: str | None = None) -> Any:
        """The stream of ``operation`` added after this one (a PairStream if it yields pairs)."""
        node = self._node
        pairs = node.pairs if pairs is None else pairs
        grouping = grouping or self._grouping
        keyed = (grouping == KEY or grouping is None and node.keyed and operation.preserves_key) and pairs
        child = Node(self._builder, operation, node, self._parallelism, grouping, pairs, keyed)
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
        return self._then(ops.UpdateStateByKey(initial, update), pairs=True, grouping=KEY)

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
                              "count_by_key", "group_by_key", "update_state_by_key"})
