"""A running topology as its readers see it: :class:`TopologyInfo` and what it holds (Storm's
``TopologyInfo``, ``ComponentAggregateStats``, ``ExecutorSummary`` and ``WorkerSummary``).

The runtime builds them (:func:`squall.runtime.stats.component_summary`, the runners'
``workers_info``), Nimbus returns them (``topology_info``), the control socket carries them, and
the REST API, Prometheus, the command line and the testing API read their fields.
``Nimbus.get_topology_info`` is the same as plain dicts (:func:`msgspec.to_builtins`): the
fields' names are its keys, and a field left :data:`~msgspec.UNSET` is not there (a spout has no
``executed``, a bolt no ``complete_latency_ms``).

Counts are since the topology started (what rebalances replaced included); latencies are means
in milliseconds; ``capacity`` is the busiest executor's (see :mod:`squall.runtime.stats`).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, UnsetType


class Figures(msgspec.Struct, kw_only=True):
    """The built-in figures of a component, one of its executors, or its current run."""

    emitted: int
    transferred: int
    acked: int
    failed: int
    execute_latency_ms: float
    process_latency_ms: float
    complete_latency_ms: float | UnsetType = UNSET  # spouts
    executed: int | UnsetType = UNSET  # bolts
    capacity: float | UnsetType = UNSET  # bolts: 0 to 1, near 1 wants more parallelism


class ExecutorInfo(Figures, kw_only=True):
    """One executor's figures, and the tasks it runs."""

    tasks: list[int]


class StreamCounts(msgspec.Struct, kw_only=True):
    """What a component emitted on one stream, and how many tuples that sent on."""

    emitted: int
    transferred: int


class TaskMetrics(msgspec.Struct, kw_only=True):
    """One task's user metrics (:mod:`squall.api.metrics2`): name -> its figures."""

    user_metrics: dict[str, dict[str, Any]]


class ErrorInfo(msgspec.Struct, kw_only=True):
    """One of a component's last errors (identical ones in a row folded, with their ``count``)."""

    error: str  # the text reported: a traceback, or a message
    task: int
    time: float  # epoch seconds of the last occurrence
    count: int = 1


class ComponentInfo(Figures, kw_only=True):
    """One component: its figures (:class:`Figures`) and what they are made of."""

    type: str  # "spout" or "bolt"
    parallelism: int
    num_tasks: int
    current: Figures  # since the last worker restart or rebalance
    metrics: dict[str, float] | UnsetType = UNSET  # connectors' counters, when the component has some
    streams: dict[str, StreamCounts]
    user_metrics: dict[str, dict[str, Any]]  # aggregated over the tasks
    tasks: dict[int, TaskMetrics]
    executors: list[ExecutorInfo]
    errors: list[ErrorInfo] = msgspec.field(default_factory=list)  # oldest first, at most 10 kept
    error_count: int = 0  # all of them


class ExecutorPlace(msgspec.Struct, kw_only=True):
    """An executor of a worker: its component and tasks."""

    component: str
    tasks: list[int]


class WorkerInfo(msgspec.Struct, kw_only=True):
    """One worker. ``host`` and ``restarts`` are those of a worker process
    (in-process workers leave them out)."""

    port: int
    pid: int | None
    executors: list[ExecutorPlace]
    host: str | None | UnsetType = UNSET
    restarts: int | UnsetType = UNSET


class AutoscaleDecision(msgspec.Struct, kw_only=True):
    """A decision of the autoscaler (squall.cluster.autoscale_controller): when (epoch
    seconds), what (scale-up, scale-down, or hold when limited), to what, and why."""

    time: float
    action: str
    workers: int
    executors: dict[str, int]
    reason: str


class TopologyInfo(msgspec.Struct, kw_only=True):
    """A running topology: status, workers and components; its autoscaler's last decisions,
    oldest first, when it has one."""

    name: str
    status: str  # ACTIVE, INACTIVE, REBALANCING, KILLED or FAILED
    uptime_secs: float
    workers: list[WorkerInfo]
    components: dict[str, ComponentInfo]
    autoscale: list[AutoscaleDecision] | UnsetType = UNSET


def to_dict(info: TopologyInfo) -> dict[str, Any]:
    """``info`` as plain dicts and lists (``get_topology_info``'s value)."""
    return msgspec.to_builtins(info)
