"""What Nimbus asks of the runner that owns one topology's workers (:class:`TopologyRunner`).

Three runners implement it: in-process workers (``LocalCluster()``), worker processes of this
machine (``LocalCluster(processes=True)``, :class:`~squall.cluster.supervisor.ProcessSupervisor`)
and tasks of a Spark barrier job (:class:`~squall.cluster.spark.master.SparkTopologyMaster`).
Nimbus calls them under its per-topology lock, never two calls at once for one runner.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from squall.runtime.info import WorkerInfo
from squall.runtime.messaging.schema import TupleSample


@runtime_checkable
class TopologyRunner(Protocol):
    """The workers of one topology, started, steered and stopped as one."""

    @property
    def failure(self) -> str | None:
        """Why the topology can no longer run (a worker gave up, restarts ran out), or None.
        Once set it stays set; Nimbus then reports the topology FAILED."""

    def start(self) -> None:
        """Start every worker; return once every ``open``/``prepare`` has run. Raises
        :class:`~squall.api.errors.TopologySetupError` naming the component and the cause if
        one raised or a worker could not start, after stopping what did start."""

    def set_active(self, active: bool) -> None:
        """Activate or deactivate the spouts (``activate``/``deactivate`` reach them through
        their executors' queues, so this returns before they have run). Never blocks on a
        worker that is busy."""

    def stop(self) -> None:
        """Stop every worker; return once all are gone. After it, :meth:`executor_snapshots`
        gives the figures the workers had when they stopped."""

    def workers_info(self) -> list[WorkerInfo]:
        """One entry per worker: its port, pid and executors (and a worker process's host)."""

    def executor_snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        """(component, figures) for every executor, the figures with the executor's ``tasks``
        (see :func:`squall.runtime.stats.component_summary`). Never blocks on a busy worker."""

    def set_sampling(self, component: str, percent: float, secs: float) -> None:
        """Sample ``percent`` of ``component``'s emits in every worker for ``secs`` seconds
        (squall.runtime.sampling); 0 stops. Returns at once."""

    def take_samples(self) -> list[TupleSample]:
        """The tuples sampled since the last call (of the workers that reported them)."""

    def dump_stacks(self, port: int) -> str:
        """Every thread's Python stack in the worker on ``port``, as text. ``ValueError`` for
        a port of no worker; ``TimeoutError`` if the worker does not answer in time."""
