"""The topology master: Nimbus's part for one running topology whose workers are processes.

:class:`TopologyMaster` runs in the submitting process (the driver, under Spark). Every
worker process (:mod:`squall.cluster.worker_process`) connects to its ROUTER socket and

* says ``hello`` and gets the pickled topology, config and assignment (``bootstrap``);
* says where it listens (``bound``); when :attr:`TopologyMaster.peers_from_master` is set,
  the master answers every worker with every worker's address (``peers``), otherwise the
  workers exchange addresses themselves (a Spark barrier stage's ``allGather``);
* says ``ready`` once its executors are open/prepared, or ``setup_error`` with the cause;
* sends a ``heartbeat`` every ``worker.heartbeat.frequency.secs`` with its executors'
  figures and new errors, and obeys ``activate``, ``deactivate`` and ``kill``.

Who launches the workers, and how a dead or silent one is replaced, is the subclass's
business: :class:`~squall.cluster.supervisor.ProcessSupervisor` restarts one OS process at
a time; :class:`~squall.cluster.spark.master.SparkTopologyMaster` resubmits a Spark barrier job.
A worker names itself ``index/generation``: a subclass that relaunches every worker at once
bumps :attr:`generation`, and the master tells a worker of an older generation to stop.

All ZeroMQ traffic with the workers goes through the ROUTER socket, owned by the master
thread; API calls reach that thread through a command queue. The socket is a CURVE server
(:mod:`squall.runtime.messaging.security`) that admits only holders of the topology's keys
(:attr:`TopologyMaster.keys`, generated here and handed to the workers by whoever launches them),
so the topology and its config go to the topology's own workers only. Messages are the
schemas of :mod:`squall.runtime.messaging.schema`: one that does not fit, or comes from an identity that
is not a worker of this topology, is logged and dropped, and the master thread goes on — no
single message can stop it.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from abc import ABC, abstractmethod
from typing import Any

import cloudpickle
import zmq

from squall.api.config import Config
from squall.api.errors import TopologySetupError
from squall.api.storm_topology import StormTopology
from squall.runtime.assignment import Assignment
from squall.runtime.cluster_state import TopologyState
from squall.runtime.info import ExecutorPlace, WorkerInfo
from squall.runtime.messaging import schema
from squall.runtime.messaging.incarnation import incarnation
from squall.runtime.messaging.security import LinkKeys, LinkSecurity
from squall.runtime.messaging.zmq_transport import LOOPBACK
from squall.runtime.sampling import SAMPLES_KEPT
from squall.runtime.stats import carry_over, current_run

log = logging.getLogger("squall.master")

_POLL_SECS = 0.02
#: how long the master waits for a worker's stacks
STACKS_TIMEOUT_SECS = 5.0
# How long stop() waits for the workers to close their executors before killing them.
KILL_GRACE_SECS = 10.0
# How long, once every worker process is gone, the master still waits for their final figures.
_STOPPED_GRACE_SECS = 1.0


class WorkerStartError(TopologySetupError):
    """A worker could not start; the message holds the cause in a line, ``details`` the
    worker's traceback when it sent one (what ``--verbose`` prints)."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class WorkerSlot:
    """One worker of the topology and what the master knows of its current process."""

    def __init__(self, index: int, assigned_port: int) -> None:
        self.index = index
        self.assigned_port = assigned_port
        self.restarts = 0
        self.reset()

    def reset(self, pid: int | None = None) -> None:
        """Forget the previous process: a new one is being launched (``pid``, if known yet;
        set in the same step, so that nobody sees a slot without a pid after its launch)."""
        self.pid: int | None = pid
        self.host = ""
        self.port = 0
        self.ready = False
        self.stopped = False  # said ``stopped``: its snapshots are final
        self.started_at = time.monotonic()
        self.last_heartbeat = 0.0
        self.snapshots: list[schema.ExecutorReport] = []
        self.setup_error: str | None = None  # one line
        self.setup_trace = ""  # its traceback, if the worker sent one

    def silent_for(self, now: float) -> float:
        """Seconds since the last sign of life (heartbeat, or launch while not ready)."""
        return now - (self.last_heartbeat if self.ready else self.started_at)


class TopologyMaster(ABC):
    """The master of one topology's worker processes (see the module's docstring).

    :meth:`start` launches the workers and returns once all are ready; :meth:`set_active`
    and :meth:`stop` may be called from any thread; :meth:`workers_info` and
    :meth:`executor_snapshots` read what the last heartbeats said. Launching, supervising
    and stopping hold one lock, so that no worker is launched once :meth:`stop` began."""

    #: the master sends every worker the others' addresses (False: the workers exchange them)
    peers_from_master = True

    def __init__(self, name: str, topology: StormTopology, conf: dict[str, Any], assignment: Assignment,
                 state: TopologyState, host: str = LOOPBACK, bind_host: str | None = None) -> None:
        """Listens on ``bind_host`` (default ``host``); workers connect to ``host``."""
        self.name = name
        self._topology = topology
        self._conf = conf
        self._assignment = assignment
        self._state = state
        self._active = True
        #: the topology's link keys (None when topology.messaging.secure is off): hand them to
        #: each worker through what launches it, never over a socket
        self.keys = LinkKeys.for_topology(conf)
        self._context = zmq.Context()
        self._security = LinkSecurity(self._context, self.keys, f"the master of topology {name!r}")
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted worker takes over its identity
        self._router.setsockopt(zmq.LINGER, 0)
        self._security.server(self._router, "master port")
        self.address = f"tcp://{host}:{self._router.bind_to_random_port(f'tcp://{bind_host or host}')}"
        self.slots = [WorkerSlot(w.index, w.port) for w in assignment.workers]
        #: (component, tasks) -> what the executor's runs before the current one did
        self._earlier: dict[tuple[str, tuple[int, ...]], dict[str, Any]] = {}
        self.generation = 0
        #: set when the topology cannot run (any more); the message says why
        self.failure: str | None = None
        self._commands: collections.deque[tuple[int | None, schema.MasterMessage]] = collections.deque()
        #: what the workers sampled (squall.runtime.sampling), and the stacks they sent, by worker index
        self._samples: collections.deque[schema.TupleSample] = collections.deque(maxlen=SAMPLES_KEPT)
        self._stacks: dict[int, str] = {}
        self._stacks_ready = threading.Condition()
        self.stopping = False
        self.starting = True
        self._lifecycle = threading.Lock()
        self._stopped = False
        self._gone_at: float | None = None
        self._thread = threading.Thread(target=self._loop, name=f"master-{name}", daemon=True)

    # -- API (any thread) -------------------------------------------------------------------

    def start(self) -> None:
        """Launch every worker; return once all are ready. Raises :class:`WorkerStartError`
        with the cause (after stopping everything) if they cannot start."""
        self._launch(self.slots)
        self._thread.start()
        limit = self._conf[Config.SUPERVISOR_WORKER_START_TIMEOUT_SECS]
        deadline = time.monotonic() + limit + 5
        try:
            while True:
                with self._lifecycle:
                    if self.failure is None and (not self.starting or all(s.ready for s in self.slots)):
                        self.starting = False
                        return
                    if self.failure is None and time.monotonic() > deadline:
                        waiting = [s.index for s in self.slots if not s.ready]
                        self.failure = (f"workers {waiting} not ready within {limit}s "
                                        "(supervisor.worker.start.timeout.secs)")
                    failure = self.failure
                if failure is not None:
                    trace = next((s.setup_trace for s in self.slots if s.setup_trace), "")
                    raise WorkerStartError(f"topology {self.name!r}: {failure}", trace)
                time.sleep(0.01)
        except BaseException:
            self.stop()  # Ctrl-C included: nothing of this topology is left running
            raise

    def set_active(self, active: bool) -> None:
        """Activate or deactivate every worker's spouts (also those launched later)."""
        self._active = active
        self._commands.append((None, schema.Activate() if active else schema.Deactivate()))

    def set_sampling(self, component: str, percent: float, secs: float) -> None:
        """Sample ``percent`` of ``component``'s emits for ``secs`` in every worker (0: stop);
        the samples come with the heartbeats (:meth:`take_samples`)."""
        self._commands.append((None, schema.Sample(component, percent, secs)))

    def take_samples(self) -> list[schema.TupleSample]:
        """The tuples the workers sampled since the last call, oldest first."""
        taken = []
        while self._samples:
            taken.append(self._samples.popleft())
        return taken

    def dump_stacks(self, port: int, timeout: float = STACKS_TIMEOUT_SECS) -> str:
        """Every thread's Python stack in the worker listening on ``port``, asked over the
        worker's authenticated link. ``ValueError`` for a port of no worker, ``TimeoutError``
        when the worker does not answer within ``timeout`` (its control thread is stuck)."""
        slot = next((s for s in self.slots if s.port == port and s.ready), None)
        if slot is None:
            raise ValueError(f"topology {self.name!r} has no running worker on port {port} "
                             f"(workers: {sorted(s.port for s in self.slots if s.port)})")
        with self._stacks_ready:
            self._stacks.pop(slot.index, None)
            self._commands.append((slot.index, schema.DumpStacks()))
            if not self._stacks_ready.wait_for(lambda: slot.index in self._stacks, timeout):
                raise TimeoutError(f"worker on port {port} did not send its stacks within {timeout:g}s")
            return self._stacks.pop(slot.index)

    def stop(self) -> None:
        """Tell every worker to stop, wait for their processes (killing stragglers after
        :data:`KILL_GRACE_SECS`) and for their final figures, then stop the master. Calling it
        again does nothing."""
        with self._lifecycle:
            if self._stopped:
                return
            self._stopped = self.stopping = True
        self._commands.append((None, schema.Kill()))
        self._wait_stopped(time.monotonic() + KILL_GRACE_SECS)
        if self._thread.is_alive():
            self._thread.join()
        self._router.close(linger=0)
        self._security.close()
        self._context.term()

    def workers_info(self) -> list[WorkerInfo]:
        """Per worker: host, port, pid, restarts and its executors."""
        return [
            WorkerInfo(host=slot.host or None, port=slot.port or slot.assigned_port,
                       pid=slot.pid, restarts=slot.restarts,
                       executors=[ExecutorPlace(component=e.component, tasks=list(e.tasks))
                                  for e in self._assignment.workers[slot.index].executors])
            for slot in self.slots
        ]

    def executor_snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        """(component, figures) of every executor, as of its worker's last heartbeat — or its
        final ``stopped`` message, once :meth:`stop` returned; the figures with the executor's
        ``tasks``. Counted over the executor's runs: what its workers did before a restart (as
        of their last heartbeat) adds up with its current run (see
        :func:`squall.runtime.stats.carry_over`); the current run's alone under ``run``."""
        current = {(e.component, tuple(e.tasks)): schema.to_dict(e.stats) for slot in self.slots
                   for e in slot.snapshots}
        earlier = dict(self._earlier)  # a copy: the master thread may add to it meanwhile
        return [(component, {"tasks": list(tasks), **carry_over(earlier.get((component, tasks)),
                                                                 current.get((component, tasks))),
                             "run": current_run(current.get((component, tasks)))})
                for component, tasks in dict.fromkeys([*current, *earlier])]

    # -- for subclasses ------------------------------------------------------------------------

    @abstractmethod
    def _launch(self, slots: list[WorkerSlot]) -> None:
        """Start a worker process for each of ``slots``, resetting each
        (:meth:`WorkerSlot.reset`) as its process starts, each calling
        :func:`squall.cluster.worker_process.run` with this master's address, its index and
        :attr:`generation`. Must not block until they are up."""

    @abstractmethod
    def _supervise(self, now: float) -> None:
        """Called by the master thread every few milliseconds while the topology runs:
        notice dead or silent workers (:meth:`WorkerSlot.silent_for` against
        :meth:`silence_limit`) and replace them, or set :attr:`failure`."""

    @abstractmethod
    def _gone(self) -> bool:
        """True once no worker process of this topology is left (the master thread ends)."""

    @abstractmethod
    def _wait_stopped(self, deadline: float) -> None:
        """Wait (in the caller's thread) until every worker process has exited after ``kill``,
        forcing those still there at ``deadline``."""

    def renew(self, slot: WorkerSlot, pid: int | None = None) -> None:
        """Before ``slot`` gets a new process (``pid``, if known yet): keep what its executors
        did so far, then :meth:`WorkerSlot.reset` it. Launchers call this, not ``reset``."""
        for report in slot.snapshots:
            key = (report.component, tuple(report.tasks))
            self._earlier[key] = carry_over(self._earlier.get(key), schema.to_dict(report.stats))
        slot.reset(pid)

    def silence_limit(self, slot: WorkerSlot) -> float:
        """How long ``slot`` may stay silent: the start timeout until ready, then the worker timeout."""
        key = Config.SUPERVISOR_WORKER_TIMEOUT_SECS if slot.ready else Config.SUPERVISOR_WORKER_START_TIMEOUT_SECS
        return self._conf[key]

    def report(self, slot: WorkerSlot | None, text: str, details: str = "") -> None:
        """Log ``text`` (one line) and record it, with ``details`` (a traceback) under it, as an
        error of the user components of ``slot`` (of every worker when None), where
        get_topology_info shows it."""
        log.warning("topology %r: %s", self.name, text)
        recorded = f"{text}\n{details}".rstrip()
        for worker in self._assignment.workers if slot is None else [self._assignment.workers[slot.index]]:
            for executor in worker.executors:
                if not executor.component.startswith("__"):
                    self._state.report_error(executor.component, executor.tasks[0], recorded)

    # -- the master thread -------------------------------------------------------------------

    def _send(self, identity: bytes, message: schema.MasterMessage) -> None:
        self._router.send_multipart([identity, schema.encode(message)])

    def _identity(self, slot: WorkerSlot) -> bytes:
        return f"{slot.index}/{self.generation}".encode()

    def _loop(self) -> None:
        poller = zmq.Poller()
        poller.register(self._router, zmq.POLLIN)
        for monitor in self._security.monitors:
            poller.register(monitor, zmq.POLLIN)
        while True:
            events = dict(poller.poll(_POLL_SECS * 1000))
            for monitor in self._security.monitors:
                if monitor in events:
                    self._security.log_refusals(monitor)
            if self._router in events:
                self._receive_all()
            while self._commands:
                target, message = self._commands.popleft()
                for slot in self.slots if target is None else [self.slots[target]]:
                    self._send(self._identity(slot), message)
            with self._lifecycle:
                if self.stopping:
                    if self._all_stopped():
                        return
                    continue
                try:
                    self._supervise(time.monotonic())
                except Exception:  # noqa: BLE001 - the master must go on supervising the others
                    log.exception("topology %r: supervising its workers failed", self.name)

    def _all_stopped(self) -> bool:
        """Whether every worker process is gone and has said ``stopped`` (or had time to)."""
        if not self._gone():
            return False
        now = time.monotonic()
        if self._gone_at is None:
            self._gone_at = now
        return all(s.stopped or not s.ready for s in self.slots) or now - self._gone_at > _STOPPED_GRACE_SECS

    def _receive_all(self) -> None:
        while True:
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                if len(frames) != 2:
                    raise schema.MalformedMessage(f"{len(frames)} frames, expected 2")
                identity, data = frames
                index, generation = self._worker_of(identity)
                message = schema.decode(data, schema.WorkerMessage)
            except schema.MalformedMessage as e:
                log.warning("topology %r: the master dropped a malformed message from %r: %s",
                            self.name, frames[0][:64], e)
                continue
            if generation != self.generation:
                if not isinstance(message, schema.Stopped):
                    # left over from a relaunched generation (which may have had more workers)
                    self._send(identity, schema.Kill())
                continue
            try:
                self._handle(identity, self.slots[index], message)
            except Exception:  # noqa: BLE001 - one message must not stop the master thread
                log.exception("topology %r: the master could not handle %r from worker %d", self.name,
                              type(message).__name__, index)

    def _worker_of(self, identity: bytes) -> tuple[int, int]:
        """The worker index and generation an identity ``index/generation`` names: a worker of
        the current generation, or of an earlier one."""
        try:
            index, generation = (int(part) for part in identity.decode("ascii").split("/"))
        except ValueError:
            raise schema.MalformedMessage("not a worker's identity") from None
        if index < 0 or (generation == self.generation and index >= len(self.slots)):
            raise schema.MalformedMessage(f"no worker {index} in this topology")
        return index, generation

    def _handle(self, identity: bytes, slot: WorkerSlot, message: schema.WorkerMessage) -> None:
        match message:
            case schema.Hello() if self.stopping:
                self._send(identity, schema.Kill())  # launched just before stop(): missed the broadcast
            case schema.Hello(pid=pid):
                slot.pid = pid
                payload = cloudpickle.dumps((self.name, self._topology, self._conf, self._assignment, self._active,
                                             slot.restarts))
                self._send(identity, schema.Bootstrap(payload))
            case schema.Bound(host=host, port=port):
                slot.host, slot.port = host, port
                if self.peers_from_master and all(s.port for s in self.slots):
                    peers = schema.Peers({s.index: (s.host, s.port, incarnation(self.generation, s.restarts))
                                          for s in self.slots})
                    for s in self.slots:
                        self._send(self._identity(s), peers)
            case schema.Ready():
                slot.ready = True
                slot.last_heartbeat = time.monotonic()
            case schema.Heartbeat():  # or Stopped, the last one
                slot.last_heartbeat = time.monotonic()
                # errors before figures: a reader who sees a failure counted sees its error (the
                # worker took its figures before its errors)
                for error in message.errors:
                    self._state.report_error(error.component, error.task, error.error, error.time, error.count)
                slot.snapshots = message.executors
                slot.stopped = isinstance(message, schema.Stopped)
                self._samples.extend(message.samples)
            case schema.Stacks(text=text):
                with self._stacks_ready:
                    self._stacks[slot.index] = text
                    self._stacks_ready.notify_all()
            case schema.SetupFailed(error=error, trace=trace):
                slot.setup_error, slot.setup_trace = error, trace
