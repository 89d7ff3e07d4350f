"""A worker: the executors of one worker slot plus its receive and transfer paths.

* **Executors** consume their incoming queues; one cooperative thread runs them all,
  except blocking ones, which have a thread each (see :mod:`squall.runtime.executor.threads`).
* **Transfer path** (:mod:`squall.runtime.worker_transfer`): batches bound for other
  workers, packed and handed to the transport.
* **Receive path** (:mod:`squall.runtime.worker_receive`): payloads from other workers,
  checked and put on the executors' queues by task id.
* The cooperative thread runs both paths between its rounds; a worker without one (every
  executor blocking, or ``topology.worker.cooperative`` false) has a transfer thread and a
  receive thread.
* **Timer**: tick tuples for bolts and the timeout rotation of spouts and ackers.

Fail-fast, as Storm's workers: a thread of the worker (an executor, the receive, transfer or
timer thread) that dies sets :attr:`Worker.failure` with the cause, recorded as an error of
the component; whoever runs the worker then stops it — a worker process exits so that its
supervisor restarts it, an in-process topology is FAILED. A worker never goes on half alive.
"""

from __future__ import annotations

import collections
import logging
import threading
import traceback
from collections.abc import Callable, Iterable
from typing import Any

from squall.api.config import Config
from squall.api.system_ids import ACKER_COMPONENT
from squall.api.storm_topology import StormTopology
from squall.api.tuple import StreamSource, system_sources
from squall.runtime.executor.ack_ledger import RoundAcks
from squall.runtime.acker_executor import AckerExecutor
from squall.runtime.assignment import Assignment, ExecutorAssignment
from squall.runtime.messaging.schema import TupleSample
from squall.runtime.sampling import SAMPLES_KEPT, SAMPLING_CHECK_SECS, TupleSampler
from squall.runtime.messaging.backpressure import CreditGrants, Credits, credit_window, queue_keys, send_batch_size
from squall.runtime.cluster_state import TopologyState
from squall.runtime.executor.bolt_executor import BoltExecutor
from squall.runtime.executor.executor import Control, Executor
from squall.runtime.executor.spout_executor import SpoutExecutor
from squall.runtime.executor.threads import CooperativeThread, ExecutorThread, Watchdog
from squall.runtime.executor.worker_context import WorkerContext
from squall.runtime.messaging.transport import Transport
from squall.runtime.worker_receive import WorkerReceive
from squall.runtime.worker_transfer import WorkerTransfer
from squall.utils import gc_tuning
from squall.utils.batch_queue import BatchQueue, Bell
from squall.utils.time import Timer, now

log = logging.getLogger("squall.worker")


class Worker:
    def __init__(
        self,
        topology_name: str,
        topology: StormTopology,
        conf: dict[str, Any],
        assignment: Assignment,
        index: int,
        transport: Transport,
        state: TopologyState,
        active: bool = True,
        restarted: bool = False,
    ) -> None:
        self.topology_name = topology_name
        self.topology = topology
        self.conf = conf
        self.assignment = assignment
        self.index = index
        self.port = assignment.workers[index].port
        self.transport = transport
        self.state = state
        self.active = active
        self.stopping = False
        self._started = False
        #: why the worker cannot go on (a thread of it died), or None; set once
        self.failure: str | None = None
        self.on_failure: Callable[[], None] | None = None  # called (once) by the thread that failed
        self.sources = _stream_sources(topology, assignment)
        bell = Bell()  # the cooperative thread's: its executors' queues ring it
        self._flush_secs = conf[Config.TOPOLOGY_BATCH_FLUSH_INTERVAL_MILLIS] / 1000
        assigned = assignment.workers[index].executors
        blocking = {ea: self._is_blocking(ea.component) for ea in assigned}
        cooperative = not all(blocking.values())
        single_task_queues = self._make_queues(assigned, blocking, bell)
        keys, window = queue_keys(assignment), credit_window(conf)
        #: what this worker lets the others send it, and what it may send them
        self.grants = CreditGrants({keys[t]: q for t, q in self.task_queues.items()}, window,
                                   lambda: self.transfer.queue.wake(), not transport.credit_based)
        self.credits = Credits(index, transport.run, keys, assignment.task_worker, self.task_queues,
                               send_batch_size(conf), window, conf[Config.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE],
                               not transport.credit_based)
        self.transfer = WorkerTransfer(index, conf, transport, self.grants, self.credits,
                                       bell if cooperative else None)
        self.context = WorkerContext(topology_name, topology, conf, assignment, index, self.task_queues,
                                     single_task_queues, self.sources, state, self.transfer.transfer,
                                     restarted, self.credits)
        spout_tasks = frozenset(t for c in topology.spouts for t in assignment.component_tasks[c.id])
        self.receive = WorkerReceive(index, conf, assignment, self.sources, self.task_queues,
                                     self.context.is_single_task, transport, state, spout_tasks, self.grants,
                                     self.credits)
        # topology order: a batch a spout emits is executed by the next bolts in the same round
        order = {cid: i for i, cid in enumerate(topology.components)}
        assigned = sorted(assigned, key=lambda ea: order.get(ea.component, len(order)))
        self.executors: list[Executor] = [self._make_executor(ea, not blocking[ea]) for ea in assigned]
        if not cooperative:
            bell = Bell()  # the receive thread's
        self._make_runners(cooperative, bell)
        self._bell = bell
        # a grant wakes the senders that do not wait for it on the credits themselves
        if cooperative:
            self.credits.watch(bell.ring)
        for executor in self.executors:
            if not executor.cooperative and not executor.blocks_on_full_queues():
                self.credits.watch(executor.queue.wake)
        transport.register(index, self.grants, self.credits, bell)
        self._timer = Timer(f"worker-{index}-timer", on_death=lambda e: self.fail(None, "timer thread", e))
        #: the one watch over the runners' calls: stalls and hand-offs (squall.runtime.executor.threads)
        self._watchdog = Watchdog(self._runners, self.conf[Config.TOPOLOGY_WORKER_HANDOFF_SECS], self._hand_off)
        #: the tuples sampled (squall.runtime.sampling) and not yet taken; component -> its sampler
        self.samples: collections.deque[TupleSample] = collections.deque(maxlen=SAMPLES_KEPT)
        self._samplers: dict[str, TupleSampler] = {}

    def _make_queues(self, assigned: Iterable[ExecutorAssignment], blocking: dict[ExecutorAssignment, bool],
                     bell: Bell) -> frozenset[int]:
        """Every executor's incoming queue (``task_queues``: task -> its executor's queue; a
        cooperative executor's rings ``bell``); returns the ids of the queues of one task."""
        self.task_queues: dict[int, BatchQueue] = {}
        single_task_queues: set[int] = set()
        receive_size = self.conf[Config.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE]
        for ea in assigned:
            q = BatchQueue(receive_size, f"{ea.component}{list(ea.tasks)}", None if blocking[ea] else bell)
            for task in ea.tasks:
                self.task_queues[task] = q
            if len(ea.tasks) == 1:
                single_task_queues.add(id(q))
        return frozenset(single_task_queues)

    def _make_runners(self, cooperative: bool, bell: Bell) -> None:
        """Who runs the executors: a thread per blocking executor, and one cooperative thread for
        the others (their acks combined per round), which also moves tuples in and out of the
        worker; without it, a transfer thread and a receive thread do."""
        cooperative_executors = [e for e in self.executors if e.cooperative]
        round_acks = RoundAcks() if self.assignment.acker_tasks and cooperative_executors else None
        if round_acks is not None:
            for executor in cooperative_executors:
                executor.acks.share_round(round_acks)
        self._runners = [ExecutorThread(e, self._executor_died) for e in self.executors if not e.cooperative]
        self._threads: list[threading.Thread] = []
        if cooperative:
            self._runners.append(CooperativeThread(cooperative_executors, bell,
                                                   _DataPath(self, _ack_sender(cooperative_executors), round_acks),
                                                   f"worker-{self.index}-executors", self._executor_died,
                                                   flush_secs=self._flush_secs, round_acks=round_acks))
        else:
            self._threads = [
                threading.Thread(target=self.guarded(lambda: self.transfer.run(self._is_stopping), "transfer thread"),
                                 name=f"worker-{self.index}-transfer", daemon=True),
                threading.Thread(target=self.guarded(lambda: self.receive.run(self._is_stopping), "receive thread"),
                                 name=f"worker-{self.index}-receive", daemon=True),
            ]

    def guarded(self, loop: Callable[[], None], what: str) -> Callable[[], None]:
        """``loop`` as a thread target that fails the worker if it raises."""
        def run() -> None:
            try:
                loop()
            except BaseException as e:  # noqa: BLE001 - a dead thread takes its worker down
                self.fail(None, what, e)
        return run

    def fail(self, executor: Executor | None, what: str, error: BaseException) -> None:
        """A thread of this worker died of ``error``: record it (for ``executor``'s component,
        or every user component of the worker), set :attr:`failure` and call
        :attr:`on_failure`. Only the first failure counts; later ones are logged."""
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        text = f"worker {self.index}: {what} died, so the worker stops: {type(error).__name__}: {error}"
        log.error("%s\n%s", text, trace)
        if self.failure is not None:
            return
        self.failure = text
        executors = [executor] if executor is not None else [
            e for e in self.executors if not e.component.startswith("__")] or self.executors
        for e in executors:
            self.state.report_error(e.component, e.task_ids[0], f"{text}\n{trace}")
        if self.on_failure is not None:
            self.on_failure()

    def _is_stopping(self) -> bool:
        return self.stopping

    def _executor_died(self, executor: Executor, error: BaseException) -> None:
        self.fail(executor, f"executor {executor.component}{executor.task_ids}", error)

    def _is_blocking(self, component: str) -> bool:
        """Whether ``component``'s executors get a thread of their own (see
        :mod:`squall.runtime.executor.threads`)."""
        if not self.conf[Config.TOPOLOGY_WORKER_COOPERATIVE]:
            return True
        spec = self.topology.components.get(component)
        return spec is not None and bool(spec.conf.get(Config.TOPOLOGY_COMPONENT_BLOCKING, False))

    def _make_executor(self, ea, cooperative: bool) -> Executor:
        if ea.component == ACKER_COMPONENT:
            return AckerExecutor(self.context, ea, cooperative)
        if self.topology.components[ea.component].is_spout:
            return SpoutExecutor(self.context, ea, cooperative, self.active)
        return BoltExecutor(self.context, ea, cooperative)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads; every worker must be registered with the transport first."""
        gc_tuning.hold(self.conf[Config.TOPOLOGY_WORKER_GC_THRESHOLDS])
        self._started = True
        for t in self._threads:
            t.start()
        for runner in self._runners:
            runner.start()
        self._schedule_timers()
        self._timer.start()

    def _schedule_timers(self) -> None:
        self._timer.schedule_recurring(SAMPLING_CHECK_SECS, self._end_samplings)
        self._timer.schedule_recurring(self._watchdog.period(), self._watchdog.look)
        for executor in self.executors:
            for secs, call in executor.timers():
                self._timer.schedule_recurring(secs, call)

    def _hand_off(self, runner: CooperativeThread, stuck: Executor) -> None:
        """The watchdog's (timer thread): ``runner`` keeps ``stuck``, whose call made no progress
        for ``topology.worker.handoff.secs``; its other executors, and the data path, go to a new
        cooperative thread (see squall.runtime.executor.threads)."""
        others = runner.hand_off(stuck)
        if not others:
            return  # the call returned meanwhile
        # a stuck executor sharing the round keeps it (and sends what it holds when its call
        # returns): the others join a new one, in their new thread; else they keep theirs
        round_acks = RoundAcks() if stuck.acks.round is not None else runner.round_acks
        stuck.queue.set_bell(Bell())
        successor = CooperativeThread(others, self._bell, _DataPath(self, _ack_sender(others), round_acks),
                                      f"worker-{self.index}-executors-{len(self._runners)}", self._executor_died,
                                      started=True, flush_secs=self._flush_secs, round_acks=round_acks)
        self._runners.append(successor)
        successor.start()
        text = (f"a call into {stuck.component}{stuck.task_ids} has made no progress for over "
                f"{self.conf[Config.TOPOLOGY_WORKER_HANDOFF_SECS]:g}s: the worker's other executors moved to a new "
                f"thread and {stuck.component!r} keeps its own (declare it blocking, set_blocking(True), if it "
                f"blocks by design)")
        # a warning, not an error of the component: it may only be slow on one tuple (a spout
        # stuck for topology.spout.stall.secs is an error)
        log.warning("worker %d: %s", self.index, text)

    def wait_ready(self, timeout: float) -> list[tuple[Executor, BaseException]]:
        """Wait for every executor's open/prepare; return the ones that raised."""
        for executor in self.executors:
            executor.ready.wait(timeout)
        return [(e, e.setup_error) for e in self.executors if e.setup_error is not None]

    def executor_snapshots(self) -> list[dict[str, Any]]:
        """Every executor's figures (see :mod:`squall.runtime.stats`), with its component and tasks."""
        return [{"component": e.component, "tasks": list(e.task_ids), "stats": e.stats_snapshot()}
                for e in self.executors]

    def set_sampling(self, component: str, percent: float, secs: float) -> None:
        """Sample ``percent`` of ``component``'s emits (in this worker) for ``secs`` seconds;
        ``percent`` 0 stops. Replaces a sampling of that component under way."""
        sampler = TupleSampler(component, percent, now() + secs, self.samples) if percent > 0 else None
        if sampler is None:
            self._samplers.pop(component, None)
        else:
            self._samplers[component] = sampler
        # the executors' own threads apply it between batches (a message on each one's queue):
        # the control and timer threads calling this never wait for an executor's lock
        for executor in self.executors:
            if executor.component == component:
                executor.post(Control.SAMPLE, sampler)()

    def _end_samplings(self) -> None:
        """The timer's: stop the samplings whose time is up."""
        for component, sampler in list(self._samplers.items()):
            if now() >= sampler.until:
                self.set_sampling(component, 0, 0)

    def take_samples(self) -> list[TupleSample]:
        """The tuples sampled since the last call, oldest first."""
        taken = []
        while self.samples:
            taken.append(self.samples.popleft())
        return taken

    def set_active(self, active: bool) -> None:
        self.active = active
        for executor in self.executors:
            executor.set_active(active)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every executor (close/cleanup run in their threads), then the worker's threads."""
        self._timer.stop()
        for runner in self._runners:
            runner.request_stop()
        for runner in self._runners:
            runner.join(timeout)
            if runner.is_alive():
                log.warning("executors %s did not stop within %ss",
                            [f"{e.component}{e.task_ids}" for e in runner.executors], timeout)
        self.stopping = True
        self.transfer.queue.wake()
        for t in self._threads:
            t.join(timeout)
        self._bell.close()
        self.transfer.queue.bell.close()  # the transfer thread's own, if it had one
        if self._started:
            self._started = False
            gc_tuning.release()


def _ack_sender(executors: list[Executor]) -> Executor:
    """Whose send path carries the round's combined acks (see _DataPath): one sharing them,
    the acker's when it is among them, since its destinations (spouts, ackers) drain whatever
    else is stuck; another executor's send path may wait long behind a full queue."""
    sharing = [e for e in executors if e.acks.round is not None]
    return next((e for e in sharing if e.kind == "acker"), (sharing or executors)[0])


class _DataPath:
    """The worker's transfer and receive paths as its cooperative thread runs them (see
    :class:`squall.runtime.executor.threads.WorkerIO`)."""

    def __init__(self, worker: Worker, ack_sender: Executor, round_acks: RoundAcks | None) -> None:
        self._ack_sender = ack_sender  # whose send path the round's combined acks take
        self._round_acks = round_acks  # the round's, sent at its end
        self._transfer = worker.transfer
        self._receive = worker.receive
        self._transport = worker.transport
        self._index = worker.index

    def exchange(self) -> bool:
        sent = self._transfer.send_queued()
        return self._receive.receive_ready() or sent

    def idle(self) -> bool:
        return self._transfer.queue.is_empty()

    def wait(self, bell: Bell, timeout: float) -> None:
        self._transport.wait(self._index, bell, timeout, self._transfer.backlog)

    def end_round(self) -> None:
        if self._round_acks is not None and self._round_acks.acks:
            self._ack_sender.flush_round_acks()


def _stream_sources(topology: StormTopology, assignment: Assignment) -> dict[tuple[str, str], StreamSource]:
    """(component, stream) -> what its tuples share, for every declared and system stream."""
    sources: dict[tuple[str, str], StreamSource] = {}
    for cid, spec in topology.components.items():
        for stream, stream_spec in spec.outputs.items():
            sources[(cid, stream)] = StreamSource(cid, stream, stream_spec.fields)
    for cid in assignment.component_tasks:
        for stream, source in system_sources(cid).items():
            sources[(cid, stream)] = source
    return sources
