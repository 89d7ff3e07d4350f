"""``StreamBuilder``: a pipeline of stream operations turned into a topology (Storm's
``org.apache.storm.streams.StreamBuilder``).

:meth:`StreamBuilder.build` cuts the pipeline into bolts the way Storm groups processors: an
operation runs in the bolt of the operation before it (fused: one chain of calls, see
:mod:`squall.streams.processor_bolt`) unless it must start a bolt of its own:

* after the source (the spout is a component of its own): shuffle grouping;
* at ``repartition(n)``: shuffle grouping, ``n`` tasks;
* at a key-based operation on a stream not partitioned by key: fields grouping on ``key``;
* at a global aggregation on more than one task: global grouping, one task;
* at ``update_state_by_key``, always (fields grouping on ``key``): a stateful bolt, one
  ``update_state_by_key`` each, whose state is checkpointed;
* at ``window``: a windowed bolt (behind a shuffle grouping, or a fields grouping on ``key``
  for a stream partitioned by key); a bolt reading a windowed stream also subscribes to its
  punctuations (all grouping);
* at a join or ``co_group_by_key``: a bolt reading both streams (fields grouping on ``key``);
* at ``late()``: a bolt reading the windowed bolt's late tuple stream;
* a key operation or a state query right after ``new_stream`` first gets the spout's values
  into a bolt of their own (a fields grouping needs the ``key`` or ``value`` field);
* ``state_query``: no bolt of its own: it runs in its ``update_state_by_key``'s bolt, behind
  a fields grouping on ``value`` (the same task as the key's state);
* ``to(bolt)``: the bolt itself.

Components are named ``spout1``, ``bolt1``, ... in the order the pipeline made them; each
processor bolt's ``describe_operations()`` names the operations it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import cloudpickle

from squall.api.component import OutputFieldsDeclarer
from squall.api.errors import InvalidTopologyError
from squall.api.spout import Spout
from squall.api.storm_topology import StormTopology
from squall.api.topology import BoltDeclarer, TopologyBuilder
from squall.streams.operations import Fold, PassThrough, UpdateStateByKey
from squall.streams.processor_bolt import (
    FROM_PAIRS, FROM_SPOUT, FROM_VALUES, PUNCTUATION, Input, ProcessorBolt, StatefulProcessorBolt, Step,
    WindowedProcessorBolt, WindowedStreamExecutor,
)
from squall.streams.stream import GLOBAL, KEY, SHUFFLE, VALUE, Node, PairStream, Stream


def first_or_all(values: list[Any]) -> Any:
    """The default value mapper: a spout tuple's only value, or a tuple of its values."""
    return values[0] if len(values) == 1 else tuple(values)


class StreamBuilder:
    """Builds a topology from stream pipelines: :meth:`new_stream` starts one at a spout, the
    streams' methods add operations, :meth:`build` makes the topology (an example is in
    :mod:`squall.streams`; how the bolts are cut, in this module's docstring)."""

    def __init__(self) -> None:
        self._sources: list[tuple[Node, Spout, Callable[[list[Any]], Any]]] = []
        self._sinks: list[tuple[Node, Any, int, str, str | None]] = []
        self._streams = 0

    def new_stream(self, spout: Spout, value_mapper: Callable[[list[Any]], Any] | None = None,
                   parallelism: int = 1, pairs: bool = False) -> Stream[Any]:
        """A stream of the values ``spout`` emits on its ``default`` stream: each tuple's
        ``value_mapper(values)`` (default: its only value, or a tuple of its values). With
        ``pairs``, the mapper returns ``(key, value)`` and the stream is a
        :class:`~squall.streams.PairStream`. ``parallelism``: the spout's tasks, and what the
        operations after it run on until a repartition."""
        if not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"new_stream: parallelism must be an integer >= 1, not {parallelism!r}")
        declarer = OutputFieldsDeclarer(type(spout).__name__)
        spout.declare_output_fields(declarer)
        if "default" not in declarer.streams:
            raise InvalidTopologyError(f"new_stream: spout {type(spout).__name__} declares no 'default' stream "
                                       f"(it declares {sorted(declarer.streams) or 'none'})")
        node = Node(self, None, None, parallelism, None, pairs, False)
        self._sources.append((node, spout, value_mapper or first_or_all))
        return (PairStream if pairs else Stream)(self, node)

    def new_stream_id(self) -> str:
        self._streams += 1
        return f"s{self._streams}"

    def add_sink(self, node: Node, bolt: Any, parallelism: int, grouping: str, name: str | None) -> None:
        """``to(bolt)`` after ``node`` (see :meth:`Stream.to`)."""
        self._sinks.append((node, bolt, parallelism, grouping, name))

    def build(self) -> StormTopology:
        """The topology: a spout per ``new_stream``, the operations fused into processor bolts,
        the ``to`` bolts. Raises :class:`~squall.InvalidTopologyError` naming the operation whose
        function cannot be shipped to worker processes."""
        if not self._sources:
            raise InvalidTopologyError("the stream builder has no stream: call new_stream first")
        builder = TopologyBuilder()
        component: dict[Node, str] = {}  # node -> the component it runs in
        bolts: dict[str, list[Node]] = {}  # processor bolt -> its nodes, a parent before its children
        sources = [source for source, _, _ in self._sources]
        component.update(zip(sources, _ids([source.name for source in sources], "spout")))
        # state queries run in their state's bolt: placed once every other node is
        pending = [child for source, _, _ in self._sources for child in source.children]
        while pending:
            deferred = []
            stack = list(reversed(pending))
            while stack:
                node = stack.pop()
                if node in component:
                    continue  # a join, reached from its second stream
                if node.state is not None and node.state not in component:
                    deferred.append(node)
                    continue
                _check_shippable(node)
                if node.state is not None:
                    component[node] = component[node.state]
                elif _fused(node):
                    component[node] = component[node.parent]
                else:
                    component[node] = f"\0{len(bolts)}"  # its place, until the ids are known (below)
                    bolts[component[node]] = []
                bolts[component[node]].append(node)
                stack.extend(reversed(node.children))
            if len(deferred) == len(pending):
                raise InvalidTopologyError("state_query: its state is not fed by any stream of this builder")
            pending = deferred
        names = [_bolt_name(nodes) for nodes in bolts.values()]
        ids = dict(zip(bolts, _ids(names, "bolt")))  # a bolt's place -> its id
        sink_ids = _ids([name for *_, name in self._sinks], "bolt", first=names.count(None) + 1)
        _check_unique([*(component[source] for source in sources), *ids.values(), *sink_ids])
        component = {node: ids.get(c, c) for node, c in component.items()}
        bolts = {ids[c]: nodes for c, nodes in bolts.items()}
        for source, spout, _ in self._sources:
            builder.set_spout(component[source], spout, source.parallelism)
        mappers = {source: mapper for source, _, mapper in self._sources}
        spouts = {source: spout for source, spout, _ in self._sources}
        leaving = {node for node, *_ in self._sinks}
        for nodes in bolts.values():
            for node in nodes:
                if node.parent is not None and component[node.parent] != component[node] and not _is_late(node):
                    leaving.add(node.parent)
                if node.other is not None:
                    leaving.add(node.other)
        for bolt_id, nodes in bolts.items():
            index = {node: i for i, node in enumerate(nodes)}
            steps = [Step(node.operation, index.get(node.parent, -1), node.stream_id if node in leaving else None,
                          node.pairs, node.window is not None, _stateful(node, spouts)) for node in nodes]
            inputs = [_input(node, index[node], component, mappers) for node in nodes if node.parent not in index]
            inputs += [Input(component[node.other], node.other.stream_id, FROM_PAIRS, index[node], side=1,
                             windowed=True) for node in nodes if node.other is not None]
            bolt = _bolt(nodes, steps, inputs)
            declarer = builder.set_bolt(bolt_id, bolt, nodes[0].parallelism)
            for source in inputs:
                _subscribe(declarer, source.component, source.stream, nodes[source.step].grouping or SHUFFLE)
                if source.windowed:
                    declarer.all_grouping(source.component, source.stream + PUNCTUATION)
        for sink_id, (node, bolt, parallelism, grouping, _) in zip(sink_ids, self._sinks):
            declarer = builder.set_bolt(sink_id, bolt, parallelism)
            _subscribe(declarer, component[node], node.stream_id, grouping)
        return builder.create_topology()


def _ids(names: list[str | None], prefix: str, first: int = 1) -> list[str]:
    """The component ids of ``names`` (None: unnamed): a name as it is, an unnamed one
    ``prefix`` numbered from ``first`` among the unnamed only (so that a named component added
    or removed renumbers no other)."""
    ids, n = [], first
    for name in names:
        if name is None:
            name, n = f"{prefix}{n}", n + 1
        ids.append(name)
    return ids


def _bolt_name(nodes: list[Node]) -> str | None:
    """The name (Stream.name) of the operations fused into one bolt; refused if two differ."""
    names = sorted({node.name for node in nodes if node.name is not None})
    if len(names) > 1:
        operations = " -> ".join(node.operation.name for node in nodes if node.operation is not None)
        raise InvalidTopologyError(f"name: operations named {names} run in one bolt ({operations}): name one of "
                                   "them, or repartition between them")
    return names[0] if names else None


def _check_unique(ids: list[str]) -> None:
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        raise InvalidTopologyError(f"name: component id(s) {twice} given to more than one component of the "
                                   "pipeline (a name, or one like those generated: spout1, bolt1, ...)")


def _stateful(node: Node, spouts: dict[Node, Spout]) -> bool:
    """Whether ``node`` keeps its state in the task's checkpointed state: an
    ``update_state_by_key`` always; an aggregation without a window when its stream's spout
    keeps its position (a restart does not read again what the state holds, so the state is
    effectively once; with another spout it would count the replays on top of it)."""
    if isinstance(node.operation, UpdateStateByKey):
        return True
    if not isinstance(node.operation, Fold) or node.window is not None:
        return False
    while node.parent is not None:
        node = node.parent
    return bool(getattr(spouts[node], "keeps_position", False))


def _is_late(node: Node) -> bool:
    return node.operation is not None and node.operation.name == "late"


def _input(root: Node, step: int, component: dict[Node, str], mappers: dict[Node, Callable[[list[Any]], Any]]) -> Input:
    """How ``root``'s bolt reads its values from the component before it."""
    parent = root.parent
    late = _is_late(root)
    source = parent.parent if late else parent  # a window's late tuples are its input's
    if source.operation is None:
        decoding, mapper = FROM_SPOUT, mappers[source]
    else:
        decoding, mapper = (FROM_PAIRS if source.pairs else FROM_VALUES), None
    windowed = parent.window is not None and root.window is not None
    return Input(component[parent], root.input_stream, decoding, step, late=late, windowed=windowed,
                 value_mapper=mapper)


def _bolt(nodes: list[Node], steps: list[Step], inputs: list[Input]) -> Any:
    """The processor bolt that runs ``nodes``: a windowed one from a window on."""
    root = nodes[0]
    if isinstance(root.operation, PassThrough) and root.operation.name == "window":
        late = [child.input_stream for child in root.children if _is_late(child)]
        window = root.window
        if late:
            window = replace(window, config=replace(window.config, late_tuple_stream=late[0]))
        return WindowedStreamExecutor(WindowedProcessorBolt(ProcessorBolt(steps, inputs), window))
    if any(step.stateful for step in steps):
        return StatefulProcessorBolt(steps, inputs)
    return ProcessorBolt(steps, inputs)


def _fused(node: Node) -> bool:
    """Whether ``node`` runs in its parent's bolt."""
    parent = node.parent
    return parent.operation is not None and node.grouping is None and node.parallelism == parent.parallelism


def _subscribe(declarer: BoltDeclarer, component: str, stream: str, grouping: str) -> None:
    if grouping in (KEY, VALUE):
        declarer.fields_grouping(component, [grouping], stream)
    elif grouping == GLOBAL:
        declarer.global_grouping(component, stream)
    else:
        declarer.shuffle_grouping(component, stream)


def _check_shippable(node: Node) -> None:
    """Every user function of ``node`` pickles (what worker processes receive)."""
    for function in node.operation.functions:
        try:
            cloudpickle.dumps(function)
        except Exception as e:  # noqa: BLE001 - whatever pickling raises, say which operation
            raise InvalidTopologyError(f"{node.operation.describe()}: its function cannot be shipped to worker "
                                       f"processes: {type(e).__name__}: {e}") from None
