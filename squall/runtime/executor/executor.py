"""The executor: the tasks of one component and their incoming queue (Storm's ``Executor``).

An executor owns one incoming :class:`~squall.utils.batch_queue.BatchQueue` whose elements
are batches of tuples or :class:`Control` messages, and a send path
(:class:`~squall.runtime.executor.transfer.ExecutorTransfer`). It does not own a thread: a runner
(:mod:`squall.runtime.executor.threads`) calls, from one thread,

1. :meth:`Executor.start_up` once: the tasks' objects are made and ``open``/``prepare``
   called;
2. :meth:`Executor.run_once` over and over: it processes what is queued (and, for a spout,
   calls ``next_tuple``), waiting up to the given timeout for work if there is none; it
   returns whether it did anything;
3. :meth:`Executor.shut_down` once, after :meth:`Executor.request_stop`: ``close``/``cleanup``.

User code always runs holding :attr:`Executor.lock`, so that threads of a component's own
(which take it to emit, ack or fail) never run beside it.
"""

from __future__ import annotations

import itertools
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from squall.api.config import Config
from squall.api.context import TopologyContext
from squall.api.metrics2.registry import MetricRegistry
from squall.api.system_ids import CHECKPOINT_STREAM
from squall.api.tuple import system_sources
from squall.runtime.executor.ack_ledger import AckLedger, RoundAcks
from squall.runtime.assignment import ExecutorAssignment
from squall.runtime.executor.route import StreamRoute, build_routes
from squall.runtime.executor.transfer import ExecutorTransfer
from squall.runtime.executor.worker_context import WorkerContext
from squall.runtime.executor.executor_stats import ExecutorStats
from squall.runtime.executor.checkpointing import Checkpointing
from squall.runtime.state.task_states import KeyedInputs, TaskStates
from squall.runtime.stats import component_metrics


class Control:
    """A control message on an executor's incoming queue (never a tuple): what another thread
    (the worker's control or timer thread) asks of the executor, handled by the executor's own
    thread between batches, so that nobody else takes its lock. ``SAMPLE``'s ``arg`` is the
    component's :class:`~squall.runtime.sampling.TupleSampler`, or None to stop sampling."""

    ACTIVATE, DEACTIVATE, STOP, ROTATE, TICK, SAMPLE = "activate", "deactivate", "stop", "rotate", "tick", "sample"
    __slots__ = ("kind", "arg")

    def __init__(self, kind: str, arg: Any = None) -> None:
        self.kind = kind
        self.arg = arg


class Executor:
    """The tasks of one component in one worker.

    ``cooperative``: the executor shares the worker's cooperative thread with others, so its
    send path never waits on a full queue (see :mod:`squall.runtime.executor.transfer`).
    """

    kind = "bolt"

    def __init__(self, worker: WorkerContext, assignment: ExecutorAssignment, cooperative: bool) -> None:
        self.worker = worker
        self.component = assignment.component
        self.task_ids = list(assignment.tasks)
        self.single_task = len(self.task_ids) == 1
        self._repeat_task = itertools.repeat(self.task_ids[0])
        self.queue = worker.task_queues[self.task_ids[0]]
        self.spec = worker.topology.components.get(self.component)
        self.conf = dict(worker.conf)
        if self.spec is not None:
            self.conf.update(self.spec.conf)
        self.cooperative = cooperative
        self.lock = threading.Lock()
        self.acker_tasks = worker.assignment.acker_tasks
        self.system_sources = system_sources(self.component)
        self._tracker = worker.state.tracker
        self.stats = ExecutorStats()
        self.stopping = False
        self.ready = threading.Event()
        self.setup_error: BaseException | None = None
        self.transfer = ExecutorTransfer(worker, self.component, self.conf, self.blocks_on_full_queues(),
                                         lambda: self.stopping, self.queue.wake)
        self.send = getattr(self.transfer, "send")  # the bound method (.send, typed, would be the C one)
        #: the longest turn: what it emitted is handed on at least this often (see run_once)
        self.flush_secs = self.conf[Config.TOPOLOGY_BATCH_FLUSH_INTERVAL_MILLIS] / 1000
        #: every init, ack, fail and reset this executor sends to the ackers
        self.acks = AckLedger(self.acker_tasks, self.transfer, self.system_sources, self.task_ids[0],
                              held=self.kind == "bolt" and self.spec is not None and self.spec.stateful)
        self._routes: dict[int, dict[str, StreamRoute]] = {}
        self._instances: list[Any] = []  # the tasks' components, whose ``metrics`` the figures carry
        self._user_metrics = {task: MetricRegistry(self.component, task) for task in self.task_ids}

    def timers(self) -> list[tuple[float, Callable[[], None]]]:
        """What the worker's timer thread calls for this executor, every so many seconds: each
        call only posts a message on the executor's queue (or reads what is safe to read from
        another thread). None by default."""
        return []

    def set_active(self, active: bool) -> None:
        """The topology was activated or deactivated (the worker's control thread; posts a
        message at most). Only spouts care."""

    def post(self, kind: str, arg: Any = None) -> Callable[[], None]:
        """A call that posts ``Control(kind, arg)`` on this executor's queue (for :meth:`timers`)."""
        return lambda: self.queue.force_put(Control(kind, arg))

    def set_sampler(self, sampler: Any) -> None:
        """Sample this executor's emits with ``sampler`` (a TupleSampler), or stop (None); in
        the executor's thread (a ``Control.SAMPLE`` message)."""
        for task, collector in getattr(self, "collectors", {}).items():
            collector.set_sampler(None if sampler is None else sampler.for_task(task))

    def blocks_on_full_queues(self) -> bool:
        """Whether the send path waits for room (else: an overflow, see ExecutorTransfer)."""
        return not self.cooperative

    @property
    def idle_poll_secs(self) -> float | None:
        """How soon :meth:`run_once` wants to be called again when it did nothing, though
        nothing arrives (None: only when something arrives)."""
        return self.transfer.retry_secs()

    # -- lifecycle (the runner's thread) ---------------------------------------------

    def start_up(self) -> bool:
        """Make the tasks and call open/prepare; False (error recorded) if that raised."""
        self.queue.consumer = threading.get_ident()
        try:
            with self.lock:  # threads a component starts in open/prepare may emit at once
                self.setup()
        except BaseException as e:  # noqa: BLE001 - reported to whoever submitted the topology
            self.setup_error = e
            self.report_error(self.task_ids[0], e)
            return False
        finally:
            self.ready.set()
        return True

    def progress(self) -> int:
        """A count that grows while the executor gets work done (tuples executed; a spout's
        emits): the worker's watchdog reads it from another thread (see
        squall.runtime.executor.threads)."""
        return self.stats.executed

    def move_to_this_thread(self, round_acks: RoundAcks | None) -> None:
        """The calling thread runs this started executor from now on (a runner that took it
        over from another; see squall.runtime.executor.threads): its inits and acks join
        ``round_acks`` if they joined a round before."""
        self.queue.consumer = threading.get_ident()
        if round_acks is not None and self.acks.round is not None:
            self.acks.share_round(round_acks)

    #: how long one call into the executor may last before :meth:`stalled` (seconds; None: no limit)
    stall_secs = None

    def stalled(self, secs: float) -> None:
        """The watchdog's thread: the executor's current call has lasted ``secs`` seconds, over
        :attr:`stall_secs` (told once per call)."""

    def request_stop(self) -> None:
        self.stopping = True
        self.queue.force_put(Control(Control.STOP))

    def run_once(self, timeout: float) -> bool:
        """Process what is queued, waiting up to ``timeout`` for something if there is nothing;
        True if anything was done."""
        raise NotImplementedError

    def shut_down(self) -> None:
        """Call close/cleanup (the runner's thread)."""
        self.teardown()

    def setup(self) -> None:
        """Create the tasks' objects and call open/prepare."""

    def finish_batches(self) -> None:
        """Let the components write what they buffered from the inputs executed so far (see
        :meth:`squall.api.bolt.Bolt.finish_batch`); holding ``self.lock``."""

    def teardown(self) -> None:
        """Call close/cleanup."""

    def make_checkpointing(self, stateful: dict[int, Any]) -> Checkpointing:
        """Barrier handling for this executor of a checkpointed topology, ``stateful`` (task ->
        its component) loaded from the last commit; a restarted worker's asks for a rollback.
        The executor is its :class:`~squall.runtime.executor.checkpointing.CheckpointHost`; teardown
        closes the states."""
        indexes = {task: i for i, task in enumerate(self.worker.assignment.component_tasks[self.component])}
        states = (TaskStates(self.conf, self.worker.topology_name, self.component, stateful, indexes,
                             self.report_error, KeyedInputs.of(self, self.worker.topology, self.component, self.conf))
                  if stateful else None)
        checkpointing = Checkpointing(self, self.acks, self.transfer, self.worker.topology, self.worker.assignment,
                                      states)
        if states is not None:
            states.init()
        if self.worker.restarted:
            checkpointing.request_recovery()
        return checkpointing

    def context(self, task_id: int) -> TopologyContext:
        w = self.worker
        return TopologyContext(w.topology, w.assignment, task_id, w.index, w.topology_name,
                               self._user_metrics[task_id])

    def make_task(self, task_id: int, collector_class: type) -> tuple[Any, TopologyContext, Any]:
        """A fresh copy of the component for ``task_id``, its context, and its collector (of
        ``collector_class``) with the task's stream routes (groupers included)."""
        context = self.context(task_id)
        routes = self._routes[task_id] = build_routes(self.worker, self.component, self.conf, context)
        instance = self.spec.instantiate()
        self._instances.append(instance)
        return instance, context, collector_class(self, task_id, routes)

    def pairs(self, batch: list[Any]) -> Any:
        """``(task id, Tuple)`` pairs of an incoming batch (a single task's batches hold
        bare tuples; zip reuses its pair, so this costs no allocation per tuple)."""
        return zip(self._repeat_task, batch) if self.single_task else batch

    # -- the send path ----------------------------------------------------------------

    def flush_all(self) -> None:
        """Send the combined acks (but those combined for the round), then hand on every
        gathered batch (from the executor's thread, or holding ``self.lock``)."""
        self.acks.flush()
        self.transfer.flush_all()

    def flush_round_acks(self) -> None:
        """The end of the cooperative thread's round: send its combined acks, and tell the
        spouts of the trees that completed (see :class:`~squall.runtime.executor.ack_ledger.RoundAcks`)."""
        with self.lock:
            self.acks.flush_round()
            self.transfer.flush_all()

    def wait_for_room(self) -> None:
        """Called by a thread of the component's own after it emitted (not holding the
        lock): wait while the send path's overflow is not handed on, so that such a thread
        is held back as a blocking send path would hold it."""
        while self.transfer.overflow and not self.stopping:
            self.transfer.room.wait(0.1)

    # -- bookkeeping ------------------------------------------------------------------

    def report_error(self, task_id: int, error: BaseException) -> None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.worker.state.report_error(self.component, task_id, text)

    def stats_snapshot(self) -> dict[str, Any]:
        """The executor's figures (see :mod:`squall.runtime.stats`); emitted and transferred count
        the user's streams, from the routes, and ``streams`` gives them per stream."""
        streams: dict[str, list[int]] = {}  # the user's streams: [emitted, transferred] over the tasks
        for task_routes in self._routes.values():
            for stream, route in task_routes.items():
                if stream != CHECKPOINT_STREAM:
                    counts = streams.setdefault(stream, [0, 0])
                    counts[0] += route.emitted
                    counts[1] += route.transferred
        snapshot = self.stats.snapshot(sum(c[0] for c in streams.values()), sum(c[1] for c in streams.values()))
        snapshot["streams"] = streams
        snapshot["metrics"] = component_metrics(self._instances)
        # per task, the user metrics of the tasks that registered some (see squall.api.metrics2)
        snapshot["user_metrics"] = {task: registry.snapshot() for task, registry in self._user_metrics.items()
                                    if registry}
        return snapshot


class InputExecutor(Executor):
    """An executor driven by its incoming queue (bolts, ackers): each batch taken is processed
    under the executor's lock (:meth:`process_batch`, execute latency measured per batch),
    then the combined acks and every gathered output batch are handed on."""

    #: task -> its component's finish_batch, for those that buffer work until the end of a batch
    _finishers = {}
    # A turn (run_once) ends once it has spent flush_secs (topology.batch.flush.interval.millis)
    # on what it took, keeping the rest for the next: what it emitted is handed on, and however
    # slow a bolt is on a queueful, its cooperative thread runs the other executors (the spout
    # feeding it, the acker) and moves the worker's tuples to and from the other workers at least
    # this often (the queue still counts the rest as held: backpressure is unchanged).
    _rest = []  # what the last run_once took and left (its slice ended)

    def process_batch(self, batch: list[Any]) -> None:
        """Process one incoming batch (bare tuples for a one-task executor, else ``(task,
        tuple)`` pairs); holding the lock."""
        raise NotImplementedError

    def control(self, msg: Control) -> None:
        """A control message from the queue; holding the lock."""
        if msg.kind == Control.STOP:
            self.stopping = True
        elif msg.kind == Control.SAMPLE:
            self.set_sampler(msg.arg)

    def run_once(self, timeout: float) -> bool:
        transfer = self.transfer
        if transfer.pending:
            with self.lock:
                if not transfer.retry_overflow():
                    return False  # no new input until the output is handed on (backpressure)
        items, self._rest = self._rest, []
        if not items:
            items = self.queue.take_all(timeout)
            if not items:
                return False
        stats = self.stats
        perf_counter = time.perf_counter
        executed = 0
        end = perf_counter() + self.flush_secs
        with self.lock:  # user code runs under the lock: the bolt's own threads wait for it
            for i, item in enumerate(items):
                if item.__class__ is list:
                    t0 = perf_counter()
                    self.process_batch(item)
                    t1 = perf_counter()
                    stats.record_execute(len(item), t1 - t0)  # figures stay current
                    executed += len(item)
                    if t1 >= end and i + 1 < len(items) and not self.stopping:
                        self._rest = items[i + 1:]
                        break
                else:
                    self.control(item)
                if self.stopping:
                    break
            if self._finishers:
                self.finish_batches()
            self.flush_all()
        if not self._rest:
            self.queue.done()
        if self._tracker is not None:
            self._tracker.done(executed)
        return True
