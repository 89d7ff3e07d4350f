"""``TopologyContext``: what a task knows about the topology and its place in it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from squall.api.metrics2.metrics import Counter, Gauge, Histogram, Meter, Metric, Timer
from squall.api.metrics2.registry import MetricRegistry
from squall.api.storm_topology import StormTopology
from squall.api.tuple import Fields


class WorkerSlotView(Protocol):
    """A worker of the assignment, as a context reads it."""

    @property
    def tasks(self) -> Sequence[int]: ...

    @property
    def port(self) -> int: ...


class AssignmentView(Protocol):
    """What a context reads of the assignment (:class:`squall.runtime.assignment.Assignment`)."""

    @property
    def task_component(self) -> Mapping[int, str]: ...

    @property
    def component_tasks(self) -> Mapping[str, Sequence[int]]: ...

    @property
    def workers(self) -> Sequence[WorkerSlotView]: ...


class TopologyContext:
    """Handed to ``open``/``prepare``: the topology, read-only, and the task's user metrics
    (``register_counter`` ...: Storm's metrics v2, see :mod:`squall.api.metrics2`).

    ``metrics``: the task's registry, which the executor reports (a context made without one
    has a registry of its own that nobody reports)."""

    def __init__(self, topology: StormTopology, assignment: AssignmentView, task_id: int, worker_index: int,
                 topology_name: str = "", metrics: MetricRegistry | None = None) -> None:
        self._topology = topology
        self._assignment = assignment
        self._task_id = task_id
        self._worker = assignment.workers[worker_index]
        self.topology_name = topology_name
        self._metrics = metrics if metrics is not None else MetricRegistry(
            assignment.task_component.get(task_id, ""), task_id)

    # -- user metrics (Storm's metrics v2) ------------------------------------------------
    #
    # Each returns the metric registered under ``name`` on this task if it has the same type
    # (so a task's prepare may run again), a new one otherwise; ValueError naming the component,
    # the task and the metric for a name registered with another type, a name that is not a
    # string of 1 to 256 characters, or more than 1000 metrics on one task. A task's metrics
    # are in get_topology_info per task and aggregated per component, go to the metrics
    # consumers and to Prometheus.

    def register_counter(self, name: str) -> Counter:
        """A :class:`~squall.api.metrics2.Counter`: ``inc(n=1)``, ``dec(n=1)``, ``count``."""
        return self._metrics.register(name, Counter)

    def register_gauge(self, name: str, gauge: Callable[[], Any] | None = None) -> Gauge:
        """A :class:`~squall.api.metrics2.Gauge` whose value is what ``gauge()`` returns when the
        figures are read (from another thread: it must be safe to call there), or, without
        ``gauge``, what was last ``set``. A gauge whose value is not a number is left out of the
        reports. Registered again, the first gauge is returned (its callable kept)."""
        return self._metrics.register(name, Gauge, lambda: Gauge(gauge))

    def register_histogram(self, name: str) -> Histogram:
        """A :class:`~squall.api.metrics2.Histogram`: ``update(value)``; count, min, max, mean,
        percentiles over a sliding window of its last 1028 values."""
        return self._metrics.register(name, Histogram)

    def register_meter(self, name: str) -> Meter:
        """A :class:`~squall.api.metrics2.Meter`: ``mark(n=1)``; count, mean and 1/5/15-minute rates."""
        return self._metrics.register(name, Meter)

    def register_timer(self, name: str) -> Timer:
        """A :class:`~squall.api.metrics2.Timer`: ``update(secs)`` or ``with timer.time(): ...``; a
        histogram of durations in seconds and a meter's rates."""
        return self._metrics.register(name, Timer)

    def get_registered_metric_by_name(self, name: str) -> Metric | None:
        """The metric this task registered as ``name``, or None (Storm's method of that name)."""
        return self._metrics.get(name)

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
        return list(self._worker.tasks)

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
