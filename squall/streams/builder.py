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
* ``to(bolt)``: the bolt itself.

Components are named ``spout1``, ``bolt1``, ... in the order the pipeline made them; each
processor bolt's ``describe_operations()`` names the operations it runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cloudpickle

from squall.api.component import OutputFieldsDeclarer
from squall.api.errors import InvalidTopologyError
from squall.api.spout import Spout
from squall.api.storm_topology import StormTopology
from squall.api.topology import BoltDeclarer, TopologyBuilder
from squall.streams.operations import UpdateStateByKey
from squall.streams.processor_bolt import (
    FROM_PAIRS, FROM_SPOUT, FROM_VALUES, ProcessorBolt, StatefulProcessorBolt, Step,
)
from squall.streams.stream import GLOBAL, KEY, SHUFFLE, Node, PairStream, Stream


def first_or_all(values: list[Any]) -> Any:
    """The default value mapper: a spout tuple's only value, or a tuple of its values."""
    return values[0] if len(values) == 1 else tuple(values)


class StreamBuilder:
    """Builds a topology from stream pipelines: :meth:`new_stream` starts one at a spout, the
    streams' methods add operations, :meth:`build` makes the topology (an example is in
    :mod:`squall.streams`; how the bolts are cut, in this module's docstring)."""

    def __init__(self) -> None:
        self._sources: list[tuple[Node, Spout, Callable[[list[Any]], Any]]] = []
        self._sinks: list[tuple[Node, Any, int, str]] = []
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

    def add_sink(self, node: Node, bolt: Any, parallelism: int, grouping: str) -> None:
        """``to(bolt)`` after ``node`` (see :meth:`Stream.to`)."""
        self._sinks.append((node, bolt, parallelism, grouping))

    def build(self) -> StormTopology:
        """The topology: a spout per ``new_stream``, the operations fused into processor bolts,
        the ``to`` bolts. Raises :class:`~squall.InvalidTopologyError` naming the operation whose
        function cannot be shipped to worker processes."""
        if not self._sources:
            raise InvalidTopologyError("the stream builder has no stream: call new_stream first")
        builder = TopologyBuilder()
        component: dict[Node, str] = {}  # node -> the component it runs in
        bolts: dict[str, list[Node]] = {}  # processor bolt -> its nodes, a parent before its children
        for i, (source, spout, _) in enumerate(self._sources, 1):
            component[source] = f"spout{i}"
            builder.set_spout(component[source], spout, source.parallelism)
        for source, _, _ in self._sources:
            stack = list(reversed(source.children))
            while stack:
                node = stack.pop()
                _check_shippable(node)
                if _fused(node):
                    component[node] = component[node.parent]
                else:
                    component[node] = f"bolt{len(bolts) + 1}"
                    bolts[component[node]] = []
                bolts[component[node]].append(node)
                stack.extend(reversed(node.children))
        mappers = {source: mapper for source, _, mapper in self._sources}
        leaving = {node for node, *_ in self._sinks}
        leaving.update(child.parent for nodes in bolts.values() for child in nodes
                       if component[child] != component[child.parent])
        for bolt_id, nodes in bolts.items():
            root = nodes[0]
            index = {node: i for i, node in enumerate(nodes)}
            steps = [Step(node.operation, index.get(node.parent, -1), node.stream_id if node in leaving else None,
                          node.pairs) for node in nodes]
            parent = root.parent
            kind = StatefulProcessorBolt if isinstance(root.operation, UpdateStateByKey) else ProcessorBolt
            if parent.operation is None:
                bolt = kind(steps, FROM_SPOUT, mappers[parent])
            else:
                bolt = kind(steps, FROM_PAIRS if parent.pairs else FROM_VALUES)
            declarer = builder.set_bolt(bolt_id, bolt, root.parallelism)
            _subscribe(declarer, component[parent], parent.stream_id, root.grouping or SHUFFLE)
        for i, (node, bolt, parallelism, grouping) in enumerate(self._sinks, len(bolts) + 1):
            declarer = builder.set_bolt(f"bolt{i}", bolt, parallelism)
            _subscribe(declarer, component[node], node.stream_id, grouping)
        return builder.create_topology()


def _fused(node: Node) -> bool:
    """Whether ``node`` runs in its parent's bolt."""
    parent = node.parent
    return parent.operation is not None and node.grouping is None and node.parallelism == parent.parallelism


def _subscribe(declarer: BoltDeclarer, component: str, stream: str, grouping: str) -> None:
    if grouping == KEY:
        declarer.fields_grouping(component, ["key"], stream)
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
