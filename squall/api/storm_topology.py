"""The immutable topology (Storm's generated ``StormTopology``): its components and their streams,
as :class:`~squall.api.topology.TopologyBuilder` made and checked them.

Plain data, below everything that reads a topology (the context a task is handed, the checks of
windows, the runtime), so that none of them depends on the builder.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import TYPE_CHECKING

import cloudpickle

from squall.api.system_ids import CHECKPOINT_COMPONENT
from squall.api.tuple import Fields

if TYPE_CHECKING:
    from squall.api.component import Component


@dataclass(frozen=True)
class StreamSpec:
    fields: Fields
    direct: bool


@dataclass(frozen=True)
class ComponentSpec:
    """One spout or bolt of a topology, its object serialized as Storm serializes components."""

    id: str
    kind: str  # "spout" | "bolt" | "basic_bolt"
    serialized: bytes
    parallelism: int
    num_tasks: int
    conf: types.MappingProxyType
    inputs: types.MappingProxyType  # (source component, stream) -> GroupingSpec
    outputs: types.MappingProxyType  # stream id -> StreamSpec
    stateful: bool = False  # a StatefulComponent: its tasks have state in each checkpoint
    keeps_position: bool = False  # a spout that resumes where its input was committed (Spout.keeps_position)
    exactly_once: bool = False  # a sink whose output commits with the checkpoints (TwoPhaseCommitSink)
    #: what a Streams API bolt runs (its ``describe_operations()``: "flat_map -> map_to_pair"), for
    #: ``squall plan`` and the UI; None for other components
    operations: str | None = None

    @property
    def is_spout(self) -> bool:
        return self.kind == "spout"

    def most_executors(self, key_groups: int | None) -> int:
        """The most executors a rebalance may give it: its tasks, or for a stateful bolt whose
        state location keeps ``key_groups`` (None: none) that many, its tasks growing with them."""
        return key_groups if key_groups is not None and self.stateful and not self.is_spout else self.num_tasks

    def instantiate(self) -> Component:
        """A fresh copy of the component, for one task."""
        return cloudpickle.loads(self.serialized)


@dataclass(frozen=True)
class StormTopology:
    """An immutable, validated topology; made by :meth:`TopologyBuilder.create_topology`."""

    components: types.MappingProxyType  # id -> ComponentSpec, in declaration order

    @property
    def spouts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if c.is_spout]

    @property
    def bolts(self) -> list[ComponentSpec]:
        return [c for c in self.components.values() if not c.is_spout]

    @property
    def checkpointed(self) -> bool:
        """Whether the topology has stateful components, hence checkpoints."""
        return CHECKPOINT_COMPONENT in self.components

    @property
    def state_layout(self) -> dict[str, int]:
        """Stateful component id -> number of tasks (what a state location holds)."""
        return {c.id: c.num_tasks for c in self.components.values() if c.stateful}
