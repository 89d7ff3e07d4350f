"""``LocalCluster``: runs topologies on this machine (Nimbus and the supervisor in-process)."""

from __future__ import annotations

import os
from typing import Any

from squall.api.errors import TopologySetupError
from squall.api.topology import StormTopology
from squall.cluster.nimbus import Nimbus
from squall.cluster.supervisor import ProcessSupervisor
from squall.runtime.assignment import Assignment
from squall.runtime.cluster_state import TopologyState
from squall.runtime.messaging.local import LocalTransport
from squall.runtime.worker import Worker

# How long submit_topology waits for every open/prepare to return (in-process workers).
_SETUP_TIMEOUT_SECS = 60.0


class _InProcessRunner:
    """Every worker as objects in this process, joined by the in-process transport.

    There is no process to restart: when a thread of a worker dies (see
    :attr:`Worker.failure`), the topology is FAILED with that cause."""

    def __init__(self, name: str, topology: StormTopology, conf: dict[str, Any], assignment: Assignment,
                 state: TopologyState) -> None:
        transport = LocalTransport()
        self.workers = [Worker(name, topology, conf, assignment, w.index, transport, state)
                        for w in assignment.workers]
        self._name = name

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        failures = [f for worker in self.workers for f in worker.wait_ready(_SETUP_TIMEOUT_SECS)]
        if failures:
            self.stop()
            executor, error = failures[0]
            raise TopologySetupError(
                f"topology {self._name!r}: component {executor.component!r} (task {executor.task_ids[0]}) "
                f"failed to start: {type(error).__name__}: {error}"
            ) from error

    @property
    def failure(self) -> str | None:
        return next((w.failure for w in self.workers if w.failure is not None), None)

    def set_active(self, active: bool) -> None:
        for worker in self.workers:
            worker.set_active(active)

    def stop(self) -> None:
        for worker in self.workers:
            worker.stop()

    def workers_info(self) -> list[dict[str, Any]]:
        return [{"port": w.port, "pid": os.getpid(),
                 "executors": [{"component": e.component, "tasks": list(e.task_ids)} for e in w.executors]}
                for w in self.workers]

    def executor_snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        return [(e.component, {"tasks": list(e.task_ids), **e.stats_snapshot()})
                for w in self.workers for e in w.executors]


class LocalCluster(Nimbus):
    """Runs topologies on this machine (Storm's Nimbus and supervisor roles included).

    With ``processes=False`` (the default) every worker runs in this process: executors
    are threads, and tuples between workers are still serialized. With ``processes=True``
    each worker is an OS process of its own, talking to the others over ZeroMQ on
    127.0.0.1, started, watched and restarted by a supervisor in this process (see
    :mod:`squall.cluster.supervisor`).

    Use it as a context manager: leaving the block kills every topology.
    """

    def __init__(self, processes: bool = False) -> None:
        super().__init__()
        self.processes = processes
        self.in_process = not processes

    def _make_runner(self, name: str, topology: StormTopology, conf: dict[str, Any], assignment: Assignment,
                     state: TopologyState) -> _InProcessRunner | ProcessSupervisor:
        if self.processes:
            return ProcessSupervisor(name, topology, conf, assignment, state)
        return _InProcessRunner(name, topology, conf, assignment, state)
