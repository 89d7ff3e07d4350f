"""``LocalCluster``: runs topologies on this machine (Nimbus and the supervisor in-process)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from squall.api.dsl import Topology
from squall.api.errors import TopologySetupError
from squall.api.storm_topology import StormTopology
from squall.cluster.nimbus import ACTIVE, Nimbus
from squall.cluster.supervisor import ProcessSupervisor
from squall.runtime.assignment import Assignment
from squall.runtime.cluster_state import TopologyState, Tracker
from squall.runtime.executor.executor import Executor
from squall.runtime.executor.spout_executor import SpoutExecutor
from squall.runtime.info import ExecutorPlace, WorkerInfo
from squall.runtime.messaging.local import LocalTransport
from squall.runtime.messaging.schema import TupleSample
from squall.runtime.sampling import thread_stacks
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
        # the windows each worker granted the others as it heard of them, handed over before any
        # thread runs (as Storm's worker waits for its connections): no spout finds a peer's
        # tasks without credit, and sends only to its own, at the start
        for worker in self.workers:
            worker.transfer.send_queued()
        for worker in self.workers:
            worker.receive.receive_ready()
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

    def workers_info(self) -> list[WorkerInfo]:
        return [WorkerInfo(port=w.port, pid=os.getpid(), executors=[
                    ExecutorPlace(component=e.component, tasks=list(e.task_ids)) for e in w.executors])
                for w in self.workers]

    def executor_snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        return [(e.component, {"tasks": list(e.task_ids), **e.stats_snapshot()})
                for w in self.workers for e in w.executors]

    def set_sampling(self, component: str, percent: float, secs: float) -> None:
        for worker in self.workers:
            worker.set_sampling(component, percent, secs)

    def take_samples(self) -> list[TupleSample]:
        return [sample for worker in self.workers for sample in worker.take_samples()]

    def dump_stacks(self, port: int) -> str:
        """This process's threads: every in-process worker runs in it."""
        if not any(w.port == port for w in self.workers):
            raise ValueError(f"topology {self._name!r} has no worker on port {port} "
                             f"(workers: {sorted(w.port for w in self.workers)})")
        return thread_stacks()


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

    def submit_topology(self, name: str, conf: dict[str, Any] | None, topology: StormTopology | type[Topology], *,
                        tracked: bool = False, capture: Callable[[str, str, list[Any]], None] | None = None) -> None:
        """As :meth:`Nimbus.submit_topology`, with two test hooks for in-process workers:

        * ``tracked``: count every tuple queued or being processed, for :meth:`wait_idle`
          (Storm's tracked topologies);
        * ``capture(component, stream, values)``: called with every tuple every component emits,
          from the emitting executor's thread (it must not block).

        ``ValueError`` for either with worker processes (``LocalCluster(processes=True)``)."""
        if (tracked or capture is not None) and self.processes:
            raise ValueError(f"topology {name!r}: tracked and capture need in-process workers (LocalCluster())")
        self._submit(name, conf, topology, TopologyState(Tracker() if tracked else None, capture))

    def executors(self, name: str) -> list[Executor]:
        """Every executor of topology ``name``'s in-process workers, for tests that watch them;
        ``NotAliveError`` if it does not run, ``TypeError`` with worker processes."""
        runner = self.runner(name)
        if not isinstance(runner, _InProcessRunner):
            raise TypeError(f"topology {name!r} runs in worker processes: its executors are not in this process")
        return [e for w in runner.workers for e in w.executors]

    def wait_idle(self, name: str, timeout: float = 30.0) -> None:
        """Return once topology ``name`` (submitted with ``tracked=True``) is idle: every spout
        emitted nothing in its last round of ``next_tuple`` calls and, if it has
        ``is_exhausted()`` (a ``FeederSpout`` fed from the test, say), says so; and no tuple is
        queued or being processed anywhere. ``TimeoutError`` after ``timeout`` seconds, naming the
        spouts not exhausted and the tuples in flight; ``ValueError`` if it is not tracked or is
        inactive (its spouts are not asked for tuples, so they cannot say they are done)."""
        running = self._get(name)
        tracker = running.state.tracker
        if tracker is None:
            raise ValueError(f"topology {name!r} is not tracked: submit it with submit_topology(..., tracked=True)")
        if running.status != ACTIVE:
            raise ValueError(f"topology {name!r} is {running.status}: wait_idle needs it ACTIVE")
        spouts = [e for e in self.executors(name) if isinstance(e, SpoutExecutor)]
        # what a spout says counts from its second round after this call: the first may have
        # asked is_exhausted() before the test fed it
        since = {e: e.rounds + 2 for e in spouts}
        deadline = time.monotonic() + timeout
        while not (all(e.rounds >= since[e] and e.exhausted for e in spouts) and tracker.in_flight == 0):
            if time.monotonic() > deadline:
                busy = sorted({e.component for e in spouts if not e.exhausted})
                raise TimeoutError(f"topology {name!r} not idle after {timeout}s (spouts not exhausted: {busy}; "
                                   f"tuples in flight: {tracker.in_flight})")
            time.sleep(0.002)
