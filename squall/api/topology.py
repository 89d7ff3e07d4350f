"""Building topologies: ``TopologyBuilder`` and its declarers, which make the immutable
:class:`~squall.api.storm_topology.StormTopology`."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

from squall.api.bolt import BasicBolt, Bolt
from squall.api.checkpoint_spout import CHECKPOINT_FIELDS, CheckpointSpout
from squall.api.component import Component, OutputFieldsDeclarer, check_id
from squall.api.config import Config
from squall.api.defaults import POSITIVE
from squall.api.errors import InvalidTopologyError
from squall.api.grouping import (
    ALL, CUSTOM, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, NONE, PARTIAL_KEY, SHUFFLE, CustomStreamGrouping,
    GroupingSpec,
)
from squall.api.spout import Spout
from squall.api.storm_topology import ComponentSpec, StormTopology, StreamSpec
from squall.api.stateful import StatefulComponent
from squall.api.system_ids import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM
from squall.api.tuple import Fields
from squall.api.windowing.bolt import BaseWindowedBolt
from squall.api.windowing.checks import check_windowed_bolt
from squall.api.windowing.executor import WindowedBoltExecutor, windowed_executor
from squall.utils import pickling


class _ComponentDeclarer:
    def __init__(self, builder: TopologyBuilder, component_id: str) -> None:
        self._builder = builder
        self._id = component_id

    def set_num_tasks(self, n: int) -> _ComponentDeclarer:
        self._builder._num_tasks[self._id] = n
        return self

    def add_configuration(self, key: str, value: Any) -> _ComponentDeclarer:
        self._builder._confs[self._id][key] = value
        return self

    def add_configurations(self, conf: dict[str, Any]) -> _ComponentDeclarer:
        self._builder._confs[self._id].update(conf)
        return self

    def set_cpu_load(self, percent: float) -> _ComponentDeclarer:
        """Storm's ``setCPULoad``: the CPU each executor of the component needs, in percent of a
        core (``topology.component.cpu.pcore.percent``). Once any component has one, executors
        are placed by load (the largest first, each on the worker with the least so far) instead
        of dealt round-robin; the others count the topology's default (10)."""
        return self.add_configuration(Config.TOPOLOGY_COMPONENT_CPU_PCORE_PERCENT, percent)

    def set_blocking(self, blocking: bool = True) -> _ComponentDeclarer:
        """Whether the component's methods may block (I/O, sleeps, waiting on a lock): its
        executors then get a thread of their own instead of sharing the worker's cooperative
        thread, so they never stall the other components (``topology.component.blocking``;
        the default is the component's ``blocking`` attribute)."""
        return self.add_configuration(Config.TOPOLOGY_COMPONENT_BLOCKING, blocking)


class SpoutDeclarer(_ComponentDeclarer):
    def set_max_spout_pending(self, n: int | None) -> SpoutDeclarer:
        return self.add_configuration(Config.TOPOLOGY_MAX_SPOUT_PENDING, n)  # type: ignore[return-value]


class BoltDeclarer(_ComponentDeclarer):
    """Subscribes a bolt to streams. Each method returns the declarer, for chaining."""

    def _subscribe(self, component: str, stream: str, spec: GroupingSpec) -> BoltDeclarer:
        inputs = self._builder._inputs[self._id]
        key = (component, stream)
        if key in inputs:
            raise InvalidTopologyError(
                f"bolt {self._id!r} already subscribes to stream {stream!r} of {component!r}"
            )
        inputs[key] = spec
        return self

    def shuffle_grouping(self, component: str, stream: str = "default") -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(SHUFFLE))

    def fields_grouping(self, component: str, fields: Fields | list[str], stream: str = "default") -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(FIELDS, self._fields(fields, component, stream)))

    def partial_key_grouping(
        self, component: str, fields: Fields | list[str], stream: str = "default"
    ) -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(PARTIAL_KEY, self._fields(fields, component, stream)))

    def all_grouping(self, component: str, stream: str = "default") -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(ALL))

    def global_grouping(self, component: str, stream: str = "default") -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(GLOBAL))

    def none_grouping(self, component: str, stream: str = "default") -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(NONE))

    def direct_grouping(self, component: str, stream: str = "default") -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(DIRECT))

    def local_or_shuffle_grouping(self, component: str, stream: str = "default") -> BoltDeclarer:
        return self._subscribe(component, stream, GroupingSpec(LOCAL_OR_SHUFFLE))

    def custom_grouping(
        self, component: str, grouping: CustomStreamGrouping, stream: str = "default"
    ) -> BoltDeclarer:
        where = f"bolt {self._id!r}, custom grouping on {component!r}:{stream!r}"
        if not callable(getattr(grouping, "choose_tasks", None)):
            raise InvalidTopologyError(f"{where}: {grouping!r} has no choose_tasks(task_id, values)")
        try:
            blob = pickling.dumps(grouping)
        except Exception as e:
            raise InvalidTopologyError(f"{where}: grouping cannot be serialized: {e}") from e
        return self._subscribe(component, stream, GroupingSpec(CUSTOM, custom=blob))

    def _fields(self, fields: Any, component: str, stream: str) -> Fields:
        try:
            selected = Fields.of(fields)
        except (TypeError, ValueError) as e:
            raise InvalidTopologyError(f"bolt {self._id!r}, grouping on {component!r}:{stream!r}: {e}") from None
        if not selected:
            raise InvalidTopologyError(
                f"bolt {self._id!r}: fields grouping on {component!r}:{stream!r} selects no field"
            )
        return selected


@dataclass
class _Entry:
    obj: Component
    kind: str
    parallelism: Any


class TopologyBuilder:
    """Assembles spouts and bolts into a :class:`StormTopology` (Storm's ``TopologyBuilder``)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}
        self._num_tasks: dict[str, Any] = {}
        self._confs: dict[str, dict[str, Any]] = {}
        self._inputs: dict[str, dict[tuple[str, str], GroupingSpec]] = {}

    def set_spout(self, component_id: str, spout: Spout, parallelism: int = 1) -> SpoutDeclarer:
        if not isinstance(spout, Spout):
            raise InvalidTopologyError(
                f"spout {component_id!r}: {type(spout).__name__} is not a squall.Spout"
            )
        self._add(component_id, spout, "spout", parallelism)
        return SpoutDeclarer(self, component_id)

    def set_bolt(self, component_id: str, bolt: Bolt | BasicBolt | BaseWindowedBolt,
                 parallelism: int = 1) -> BoltDeclarer:
        """A bolt, basic bolt or windowed bolt (run through the
        :class:`~squall.api.windowing.executor.WindowedBoltExecutor` this wraps it in, as Storm's
        ``TopologyBuilder`` does)."""
        if isinstance(bolt, BaseWindowedBolt):
            bolt = windowed_executor(bolt)
        if isinstance(bolt, Bolt):
            kind = "bolt"
        elif isinstance(bolt, BasicBolt):
            kind = "basic_bolt"
        else:
            raise InvalidTopologyError(
                f"bolt {component_id!r}: {type(bolt).__name__} is neither a squall.Bolt, a squall.BasicBolt nor a "
                "windowed bolt"
            )
        self._add(component_id, bolt, kind, parallelism)
        self._inputs[component_id] = {}
        return BoltDeclarer(self, component_id)

    def _add(self, component_id: str, obj: Component, kind: str, parallelism: Any) -> None:
        check_id("component id", component_id)
        if component_id in self._entries:
            raise InvalidTopologyError(f"component id {component_id!r} is already used")
        self._entries[component_id] = _Entry(obj, kind, parallelism)
        self._confs[component_id] = {}

    def create_topology(self) -> StormTopology:
        """Validate and freeze the topology; components are serialized now.

        Raises :class:`InvalidTopologyError` naming the component, stream or field at fault.
        """
        if not self._entries:
            raise InvalidTopologyError("the topology has no components")
        entries, inputs_of = self._entries, self._inputs
        outputs = {cid: self._declared_outputs(cid, e.obj) for cid, e in entries.items()}
        if any(isinstance(e.obj, StatefulComponent) for e in entries.values()):
            entries, inputs_of = _with_checkpoints(entries, inputs_of, outputs)
        specs = {}
        for cid, entry in entries.items():
            parallelism = check_count(f"component {cid!r}: parallelism", entry.parallelism)
            num_tasks = check_count(f"component {cid!r}: number of tasks", self._num_tasks.get(cid, parallelism))
            inputs = inputs_of.get(cid, {})
            for (source, stream), grouping in inputs.items():
                _check_subscription(cid, source, stream, grouping, outputs)
            conf = {Config.TOPOLOGY_COMPONENT_BLOCKING: True} if entry.obj.blocking else {}
            try:
                conf.update(entry.obj.get_component_configuration() or {})
            except Exception as e:
                raise InvalidTopologyError(f"component {cid!r}: get_component_configuration failed: {e}") from e
            conf.update(self._confs.get(cid, {}))
            if isinstance(entry.obj, WindowedBoltExecutor):
                check_windowed_bolt(cid, conf, entry.obj.bolt.get_timestamp_extractor(), inputs, outputs,
                                    isinstance(entry.obj, StatefulComponent))
            cpu = conf.get(Config.TOPOLOGY_COMPONENT_CPU_PCORE_PERCENT, 1.0)
            if not POSITIVE.accepts(cpu):
                raise InvalidTopologyError(f"component {cid!r}: 'topology.component.cpu.pcore.percent' (set_cpu_load) "
                                           f"must be a number > 0, got {cpu!r}")
            if not isinstance(conf.get(Config.TOPOLOGY_COMPONENT_BLOCKING, False), bool):
                raise InvalidTopologyError(f"component {cid!r}: 'topology.component.blocking' must be true or false, "
                                           f"got {conf[Config.TOPOLOGY_COMPONENT_BLOCKING]!r}")
            try:
                serialized = pickling.dumps(entry.obj)
            except Exception as e:
                raise InvalidTopologyError(
                    f"component {cid!r} ({type(entry.obj).__name__}) cannot be serialized: {e}"
                ) from e
            specs[cid] = ComponentSpec(
                id=cid,
                kind=entry.kind,
                serialized=serialized,
                parallelism=parallelism,
                num_tasks=num_tasks,
                conf=types.MappingProxyType(conf),
                inputs=types.MappingProxyType(dict(inputs)),
                outputs=types.MappingProxyType(outputs[cid]),
                stateful=isinstance(entry.obj, StatefulComponent),
                keeps_position=bool(getattr(entry.obj, "keeps_position", False)),
                exactly_once=bool(getattr(entry.obj, "exactly_once", False)),
                operations=_operations(entry.obj),
            )
        return StormTopology(types.MappingProxyType(specs))

    @staticmethod
    def _declared_outputs(cid: str, obj: Component) -> dict[str, StreamSpec]:
        declarer = OutputFieldsDeclarer(cid)
        try:
            obj.declare_output_fields(declarer)
        except InvalidTopologyError:
            raise
        except Exception as e:
            raise InvalidTopologyError(f"component {cid!r}: declare_output_fields failed: {e}") from e
        return {s: StreamSpec(f, d) for s, (f, d) in declarer.streams.items()}


def _cycle(inputs_of: dict[str, dict[tuple[str, str], GroupingSpec]]) -> list[str]:
    """A cycle of subscriptions (its components, the first repeated last), or [] if none."""
    done: set[str] = set()
    path: list[str] = []

    def visit(cid: str) -> list[str]:
        if cid in path:
            return [*path[path.index(cid):], cid]
        if cid in done:
            return []
        path.append(cid)
        for source, _ in inputs_of.get(cid, {}):
            found = visit(source)
            if found:
                return found
        path.pop()
        done.add(cid)
        return []

    for cid in inputs_of:
        found = visit(cid)
        if found:
            return found[::-1]  # in the direction tuples flow
    return []

def _with_checkpoints(
    entries: dict[str, _Entry], inputs_of: dict[str, dict[tuple[str, str], GroupingSpec]],
    outputs: dict[str, dict[str, StreamSpec]],
) -> tuple[dict[str, _Entry], dict[str, dict[tuple[str, str], GroupingSpec]]]:
    """The components and subscriptions of a checkpointed topology (Storm's
    ``TopologyBuilder`` for stateful bolts): the checkpoint spout comes first; every spout
    subscribes to its barriers and every bolt to the barriers of each component it reads,
    so that barriers follow the tuples. ``outputs`` gets the ``$checkpoint`` stream of each."""
    for cid, streams in outputs.items():
        if cid == CHECKPOINT_COMPONENT:
            raise InvalidTopologyError(f"component id {cid!r} is reserved for the checkpoint spout")
        if CHECKPOINT_STREAM in streams:
            raise InvalidTopologyError(f"component {cid!r}: stream id {CHECKPOINT_STREAM!r} is reserved for "
                                       "checkpoints (the topology has stateful components)")
    cycle = _cycle(inputs_of)
    if cycle:
        raise InvalidTopologyError(
            f"components {' -> '.join(repr(c) for c in cycle)} form a cycle, which a checkpointed topology (it has stateful "
            "components) cannot have: a bolt passes a checkpoint barrier on once it came from all its inputs, which "
            "in a cycle never happens"
        )
    barrier = StreamSpec(Fields(CHECKPOINT_FIELDS), False)
    for streams in outputs.values():
        streams[CHECKPOINT_STREAM] = barrier
    outputs[CHECKPOINT_COMPONENT] = {CHECKPOINT_STREAM: barrier}
    all_grouping = GroupingSpec(ALL)
    new_inputs = {}
    for cid, entry in entries.items():
        inputs = dict(inputs_of.get(cid, {}))
        sources = [CHECKPOINT_COMPONENT] if entry.kind == "spout" else dict.fromkeys(s for s, _ in inputs)
        for source in sources:
            inputs[(source, CHECKPOINT_STREAM)] = all_grouping
        new_inputs[cid] = inputs
    return {CHECKPOINT_COMPONENT: _Entry(CheckpointSpout(), "spout", 1), **entries}, new_inputs


def check_count(what: str, value: Any) -> int:
    """``value`` if it is an integer >= 1 (a parallelism or a number of tasks), else
    :class:`InvalidTopologyError` saying ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidTopologyError(f"{what} must be an integer >= 1, got {value!r}")
    return value


def _check_subscription(
    bolt: str, source: str, stream: str, grouping: GroupingSpec, outputs: dict[str, dict[str, StreamSpec]]
) -> None:
    where = f"bolt {bolt!r} subscribes to"
    if source not in outputs:
        raise InvalidTopologyError(f"{where} unknown component {source!r}")
    declared = outputs[source]
    if stream not in declared:
        raise InvalidTopologyError(
            f"{where} stream {stream!r} of {source!r}, which declares {sorted(declared) or 'no streams'}"
        )
    spec = declared[stream]
    if grouping.type == DIRECT and not spec.direct:
        raise InvalidTopologyError(
            f"{where} {source!r}:{stream!r} with direct grouping, but that stream is not declared direct"
        )
    if grouping.type != DIRECT and spec.direct:
        raise InvalidTopologyError(
            f"{where} direct stream {source!r}:{stream!r} with {grouping.type} grouping; use direct_grouping"
        )
    if grouping.fields is not None:
        missing = [f for f in grouping.fields if f not in spec.fields]
        if missing:
            raise InvalidTopologyError(
                f"{where} {source!r}:{stream!r} grouping on field(s) {missing} that the stream does not "
                f"declare (it declares {spec.fields.to_list()})"
            )


def _operations(component: Component) -> str | None:
    """What a component runs, when it says (a Streams API bolt's ``describe_operations()``)."""
    describe = getattr(component, "describe_operations", None)
    return describe() if callable(describe) else None
