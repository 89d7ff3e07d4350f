"""``TopologyContext``: what a task knows about the topology and its place in it."""

from __future__ import annotations

from typing import Any

from squall.scheduler import Assignment
from squall.topology import StormTopology
from squall.tuple import Fields


class TopologyContext:
    """Handed to ``open``/``prepare``; read-only."""

    def __init__(self, topology: StormTopology, assignment: Assignment, task_id: int, worker_index: int,
                 topology_name: str = "") -> None:
        self._topology = topology
        self._assignment = assignment
        self._task_id = task_id
        self._worker = assignment.workers[worker_index]
        self.topology_name = topology_name

    def get_this_task_id(self) -> int:
        return self._task_id

    def get_this_component_id(self) -> str:
        return self._assignment.task_component[self._task_id]

    def get_component_tasks(self, component_id: str) -> list[int]:
        """Sorted task ids of ``component_id`` ([] for an unknown component)."""
        return list(self._assignment.component_tasks.get(component_id, []))

    def get_component_id(self, task_id: int) -> str | None:
        return self._assignment.task_component.get(task_id)

    def get_component_ids(self) -> list[str]:
        return [c for c in self._assignment.component_tasks if not c.startswith("__")]

    def get_this_worker_tasks(self) -> list[int]:
        return self._worker.tasks

    def get_this_worker_port(self) -> int:
        return self._worker.port

    def get_this_task_index(self) -> int:
        """Position of this task among its component's tasks (0-based)."""
        return self.get_component_tasks(self.get_this_component_id()).index(self._task_id)

    def get_this_output_fields(self, stream: str = "default") -> Fields:
        return self.get_component_output_fields(self.get_this_component_id(), stream)

    def get_this_streams(self) -> list[str]:
        spec = self._topology.components.get(self.get_this_component_id())
        return list(spec.outputs) if spec else []

    def get_component_output_fields(self, component_id: str, stream: str = "default") -> Fields:
        try:
            return self._topology.components[component_id].outputs[stream].fields
        except KeyError:
            raise KeyError(f"component {component_id!r} declares no stream {stream!r}") from None

    def get_this_sources(self) -> dict[tuple[str, str], Any]:
        """(component, stream) -> grouping for every stream this component subscribes to."""
        spec = self._topology.components.get(self.get_this_component_id())
        return dict(spec.inputs) if spec else {}

    def get_this_targets(self, stream: str = "default") -> dict[str, Any]:
        """component -> grouping for every subscriber of this component's ``stream``."""
        me = self.get_this_component_id()
        return {
            cid: c.inputs[(me, stream)]
            for cid, c in self._topology.components.items()
            if (me, stream) in c.inputs
        }
