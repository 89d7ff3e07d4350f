"""Executors: the threads that run tasks (Storm's ``SpoutExecutor`` / ``BoltExecutor``).

An executor owns one incoming :class:`~squall.utils.batch_queue.BatchQueue` whose
elements are batches of ``(task id, Tuple)`` pairs or control messages, and a send path
that gathers emitted tuples per destination into batches:

* a destination executor in the same worker gets the batch on its incoming queue
  directly (no serialization);
* a task in another worker gets records with serialized values, handed to the worker's
  transfer queue.

A batch is handed on when it reaches ``topology.producer.batch.size`` and whenever the
executor has drained its input, so a trickle is never held back. Bolt executors block
when a destination is full (backpressure); spout executors never block: what cannot be
handed on waits in an overflow list and ``next_tuple`` is not called until it drains,
while acks and fails keep being processed (so ackers, which only send to spouts, never
wait forever).
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall.acker import ACK_ACK, ACK_FAIL, ACK_RESET_TIMEOUT, Acker, acker_for, system_sources
from squall.bolt import BasicBolt
from squall.collector import BasicOutputCollector, OutputCollector, SpoutOutputCollector, combine_ack
from squall.context import TopologyContext
from squall.errors import EmitError, FailedException, SerializationError
from squall.grouping import DIRECT, GlobalStreamId, make_grouper
from squall.metrics import ExecutorStats
from squall.scheduler import ExecutorAssignment
from squall.serialization import Serializer
from squall.tuple import TICK_SOURCE, StreamSource, Tuple
from squall.utils.rotating_map import RotatingMap

if TYPE_CHECKING:
    from squall.daemon.worker import Worker

log = logging.getLogger("squall.executor")

# How long a blocked executor waits before it looks at its stop flag again.
_POLL_SECS = 0.1


class Control:
    """A control message on an executor's incoming queue (never a tuple)."""

    ACTIVATE, DEACTIVATE, STOP, ROTATE, TICK = "activate", "deactivate", "stop", "rotate", "tick"
    __slots__ = ("kind", "arg")

    def __init__(self, kind: str, arg: Any = None) -> None:
        self.kind = kind
        self.arg = arg


_NO_TASKS: list[int] = []


class StreamRoute:
    """One emitting task's view of one of its streams: fields, groupers and counters.

    ``choose(values)`` returns the target tasks of a regular emit, ``choose_direct`` those
    of an ``emit_direct``; both report every emit to the ``observers`` (the testing API's
    capture, ``topology.debug`` logging), which cost nothing when there are none.
    ``transferred`` is ``emitted * fanout`` when every emit reaches the same number of
    tasks, so the hot path counts only ``emitted``.
    """

    __slots__ = ("source", "arity", "choose", "direct", "direct_targets", "emitted", "fanout", "counted_transfers",
                 "observers")

    def __init__(self, source: StreamSource, direct: bool, groupers: list[Any], direct_targets: set[int],
                 observers: list[Callable[[list[Any], list[int]], None]]) -> None:
        self.source = source
        self.arity = len(source.fields)
        self.direct = direct
        self.direct_targets = direct_targets
        self.emitted = 0
        self.counted_transfers = 0
        self.observers = observers
        fanouts = [g.fanout for g in groupers]
        self.fanout = None if direct or None in fanouts else sum(fanouts)
        if direct:
            choose = self._regular_emit_on_direct_stream
        elif not groupers:
            choose = lambda values: _NO_TASKS  # noqa: E731 - nobody subscribes
        elif len(groupers) == 1 and self.fanout is not None:
            choose = groupers[0].choose
        else:
            choose = self._chooser(groupers)
        self.choose = self._observed(choose) if observers else choose

    def choose_direct(self, task: int, values: list[Any]) -> list[int]:
        tasks = [task]
        self.counted_transfers += 1
        for observe in self.observers:
            observe(values, tasks)
        return tasks

    def _observed(self, inner: Callable[[list[Any]], list[int]]) -> Callable[[list[Any]], list[int]]:
        def choose(values: list[Any]) -> list[int]:
            tasks = inner(values)
            for observe in self.observers:
                observe(values, tasks)
            return tasks
        return choose

    def _chooser(self, groupers: list[Any]):
        def choose(values: list[Any]) -> list[int]:
            tasks = [t for g in groupers for t in g.choose(values)]
            self.counted_transfers += len(tasks)
            return tasks
        return choose

    def _regular_emit_on_direct_stream(self, values: list[Any]) -> list[int]:
        raise EmitError(
            f"component {self.source.component!r}: regular emit on direct stream {self.source.stream!r}; "
            "use emit_direct"
        )

    @property
    def transferred(self) -> int:
        return self.counted_transfers if self.fanout is None else self.emitted * self.fanout


class _Outbox:
    """Tuples gathered for one destination: a local executor's queue or a remote worker.

    Batches for a local executor hold ``(task id, Tuple)`` pairs, or bare tuples when that
    executor runs a single task; batches for a remote worker hold records
    ``(task, source task, stream, wire values, anchors-to-ids)``.
    """

    __slots__ = ("items", "queue", "worker_index", "single_task")

    def __init__(self, queue: Any, worker_index: int, single_task: bool) -> None:
        self.items: list[Any] = []
        self.queue = queue  # None for a remote worker
        self.worker_index = worker_index
        self.single_task = single_task


class Executor:
    """A thread running the tasks of one component."""

    kind = "bolt"

    def __init__(self, worker: Worker, assignment: ExecutorAssignment) -> None:
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
        self.lock = threading.Lock()
        # root id -> XOR of this executor's acks for that tree not sent yet
        self.pending_acks: dict[int, int] = {}
        self.acker_tasks = worker.assignment.acker_tasks
        self.system_sources = system_sources(self.component)
        self._tracker = worker.state.tracker
        self.stats = ExecutorStats()
        self.stopping = False
        self.ready = threading.Event()
        self.setup_error: BaseException | None = None
        # the outgoing side: a destination's batch is handed on at this many tuples
        self._batch_size = min(self.conf["topology.producer.batch.size"], self.conf["topology.executor.send.buffer.size"])
        self._serializer = Serializer.for_config(self.conf)
        self._outboxes: dict[int, _Outbox] = {}
        self._routes: dict[int, dict[str, StreamRoute]] = {}
        self._sample_tup: Tuple | None = None
        self._sample_t0 = 0.0
        self._thread = threading.Thread(target=self._run, name=f"executor-{self.component}-{self.task_ids}",
                                        daemon=True)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        self.stopping = True
        self.queue.force_put(Control(Control.STOP))

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        try:
            self._build_outboxes()
            with self.lock:  # threads a component starts in open/prepare may emit at once
                self.setup()
        except BaseException as e:  # noqa: BLE001 - reported to whoever submitted the topology
            self.setup_error = e
            self.report_error(self.task_ids[0], e)
            self.ready.set()
            return
        self.ready.set()
        try:
            self.loop()
        except BaseException as e:  # noqa: BLE001 - an executor must never die silently
            self.worker.fail(self, f"executor {self.component}{self.task_ids}", e)
        finally:
            self.teardown()

    def setup(self) -> None:
        """Create the tasks' objects and call open/prepare (executor thread)."""

    def loop(self) -> None:
        raise NotImplementedError

    def teardown(self) -> None:
        """Call close/cleanup (executor thread)."""

    def context(self, task_id: int) -> TopologyContext:
        w = self.worker
        return TopologyContext(w.topology, w.assignment, task_id, w.index, w.topology_name)

    def pairs(self, batch: list[Any]) -> Any:
        """``(task id, Tuple)`` pairs of an incoming batch (a single task's batches hold
        bare tuples; zip reuses its pair, so this costs no allocation per tuple)."""
        return zip(self._repeat_task, batch) if self.single_task else batch

    # -- routing and the send path -------------------------------------------------

    def _build_outboxes(self) -> None:
        w = self.worker
        by_queue: dict[int, _Outbox] = {}
        by_worker: dict[int, _Outbox] = {}
        for task, worker_index in w.assignment.task_worker.items():
            if worker_index == w.index:
                q = w.task_queues[task]
                ob = by_queue.setdefault(id(q), _Outbox(q, worker_index, w.single_task_queue(q)))
            else:
                ob = by_worker.setdefault(worker_index, _Outbox(None, worker_index, False))
            self._outboxes[task] = ob
        self._outbox_list = [*by_queue.values(), *by_worker.values()]
        self._has_remote = bool(by_worker)

    def routes_for(self, task_id: int, context: TopologyContext) -> dict[str, StreamRoute]:
        """Build the stream routes (groupers included) of one emitting task."""
        w = self.worker
        routes: dict[str, StreamRoute] = {}
        rng = random.Random()
        local = set(w.assignment.workers[w.index].tasks)
        outputs = self.spec.outputs if self.spec is not None else {}
        for stream, stream_spec in outputs.items():
            groupers, direct_targets = [], set()
            for cid, comp in w.topology.components.items():
                grouping = comp.inputs.get((self.component, stream))
                if grouping is None:
                    continue
                targets = w.assignment.component_tasks[cid]
                if grouping.type == DIRECT:
                    direct_targets.update(targets)
                    continue
                groupers.append(make_grouper(
                    grouping, context=context, stream=GlobalStreamId(self.component, stream), targets=targets,
                    output_fields=stream_spec.fields, local_tasks=local, rng=rng,
                ))
            routes[stream] = StreamRoute(w.sources[(self.component, stream)], stream_spec.direct, groupers,
                                         direct_targets, self._observers(task_id, stream))
        self._routes[task_id] = routes
        return routes

    def _observers(self, task_id: int, stream: str) -> list[Callable[[list[Any], list[int]], None]]:
        """What every emit of ``task_id`` on ``stream`` is reported to (see StreamRoute)."""
        observers = []
        capture, component = self.worker.state.capture, self.component
        if capture is not None:
            observers.append(lambda values, tasks: capture(component, stream, values))
        if self.conf["topology.debug"]:
            observers.append(lambda values, tasks: log.info("%s:%s emitted on %r to tasks %s: %r",
                                                            component, task_id, stream, tasks, values))
        return observers

    def send(self, tasks: list[int] | tuple[int, ...], tup: Tuple) -> None:
        """Queue ``tup`` for each of ``tasks`` (from the executor thread, or holding ``self.lock``).

        All or nothing: a value that cannot be serialized for another worker raises
        :class:`SerializationError` before any task gets the tuple.
        """
        outboxes = self._outboxes
        wire_values = None
        if self._has_remote and (outboxes[tasks[0]].queue is None if len(tasks) == 1
                                 else any(outboxes[t].queue is None for t in tasks)):
            wire_values = self._wire_values(tasks, tup)
        for task in tasks:
            ob = outboxes[task]
            items = ob.items
            if ob.single_task:
                items.append(tup)
            elif ob.queue is not None:
                items.append((task, tup))
            else:
                items.append((task, tup.source_task, tup._source.stream, wire_values, tup._anchors_to_ids))
            if len(items) >= self._batch_size:
                self._flush(ob)

    def _wire_values(self, tasks: list[int] | tuple[int, ...], tup: Tuple) -> Any:
        """``tup``'s values as they travel to other workers (see :mod:`squall.serialization`):
        checked now, so that a value that cannot be serialized fails the emit."""
        try:
            return self._serializer.wire_values(tup.values)
        except SerializationError as e:
            remote = [t for t in tasks if self._outboxes[t].queue is None]
            raise SerializationError(
                f"component {self.component!r}, stream {tup._source.stream!r}: the tuple for task(s) {remote} "
                f"in another worker cannot be serialized: {e}"
            ) from e

    def _hand_off(self, ob: _Outbox, items: list[Any], block: bool) -> bool:
        if ob.queue is not None:
            if not block:
                if not ob.queue.has_room():
                    return False
                ob.queue.force_put(items, len(items))
                return True
            while not ob.queue.put(items, len(items), _POLL_SECS):
                if self.stopping:
                    return True  # the topology is going away: nothing waits for these
            return True
        return self.worker.transfer(ob.worker_index, items, block, self)

    def _flush(self, ob: _Outbox) -> None:
        items = ob.items
        ob.items = []
        if self._tracker is not None:
            self._tracker.add(len(items))
        self._hand_off(ob, items, True)

    def flush_all(self) -> None:
        """Send the combined acks, then hand on every gathered batch (from the executor
        thread, or holding ``self.lock``)."""
        if self.pending_acks:
            self._send_acks()
        for ob in self._outbox_list:
            if ob.items:
                self._flush(ob)

    def _send_acks(self) -> None:
        source, me, ackers = self.system_sources[ACK_ACK], self.task_ids[0], self.acker_tasks
        for root, val in self.pending_acks.items():
            if val:  # acks that cancel out would not change the acker's value
                self.send((acker_for(root, ackers),), Tuple([root, val], source, me))
        self.pending_acks.clear()

    # -- bookkeeping ---------------------------------------------------------------

    def report_error(self, task_id: int, error: BaseException) -> None:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        self.worker.state.report_error(self.component, task_id, text)

    def stats_snapshot(self) -> dict[str, Any]:
        """The executor's figures (see :mod:`squall.metrics`); emitted and transferred count
        the user's streams, from the routes."""
        routes = [r for task_routes in self._routes.values() for r in task_routes.values()]
        return self.stats.snapshot(sum(r.emitted for r in routes), sum(r.transferred for r in routes))

    def _sample(self, tup: Tuple) -> None:
        self._sample_tup = tup
        self._sample_t0 = time.perf_counter()

    def record_ack(self, tup: Tuple) -> None:
        self.stats.acked += 1
        if tup is self._sample_tup:
            self.stats.process_secs += time.perf_counter() - self._sample_t0
            self.stats.process_count += 1
            self._sample_tup = None

    def record_fail(self, tup: Tuple) -> None:
        self.stats.failed += 1
        if tup is self._sample_tup:
            self._sample_tup = None


class BoltExecutor(Executor):
    """Runs the tasks of a bolt (``Bolt`` or ``BasicBolt``)."""

    def setup(self) -> None:
        self.bolts: dict[int, Any] = {}
        self.collectors: dict[int, OutputCollector] = {}
        self.basic_collectors: dict[int, BasicOutputCollector] = {}
        for task in self.task_ids:
            context = self.context(task)
            bolt = self.spec.instantiate()
            collector = OutputCollector(self, task, self.routes_for(task, context))
            collector._owner = threading.get_ident()
            self.bolts[task] = bolt
            self.collectors[task] = collector
            if isinstance(bolt, BasicBolt):
                self.basic_collectors[task] = BasicOutputCollector(collector)
                bolt.prepare(dict(self.conf), context)
            else:
                bolt.prepare(dict(self.conf), context, collector)
        self.is_basic = bool(self.basic_collectors)
        self.stats.process_is_execute = self.is_basic
        self.process_batch = self._process_basic if self.is_basic else self._process_rich

    def teardown(self) -> None:
        for task, bolt in getattr(self, "bolts", {}).items():
            try:
                bolt.cleanup()
            except Exception as e:
                self.report_error(task, e)

    def loop(self) -> None:
        queue, stats, tracker = self.queue, self.stats, self._tracker
        perf_counter = time.perf_counter
        while not self.stopping:
            items = queue.take_all(_POLL_SECS)
            if not items:
                continue
            executed = 0
            with self.lock:  # user code runs under the lock: the bolt's own threads wait for it
                for item in items:
                    if item.__class__ is list:
                        t0 = perf_counter()
                        self.process_batch(item)
                        stats.record_execute(len(item), perf_counter() - t0)  # figures stay current
                        executed += len(item)
                    else:
                        self.control(item)
                    if self.stopping:
                        break
                self.flush_all()
            if tracker is not None:
                tracker.done(executed)

    def control(self, msg: Control) -> None:
        if msg.kind == Control.TICK:
            tick = Tuple([msg.arg], TICK_SOURCE, -1)
            self.process_batch([tick] if self.single_task else [(task, tick) for task in self.task_ids])
        elif msg.kind == Control.STOP:
            self.stopping = True

    def _execute_failed(self, task: int, tup: Tuple, error: Exception) -> None:
        if not isinstance(error, FailedException):
            self.report_error(task, error)
        self.collectors[task].fail(tup)

    def _process_rich(self, batch: list[Any]) -> None:
        self._sample(batch[0] if self.single_task else batch[0][1])
        bolts = self.bolts
        for task, tup in self.pairs(batch):
            try:
                bolts[task].execute(tup)
            except Exception as e:
                self._execute_failed(task, tup, e)

    def _process_basic(self, batch: list[Any]) -> None:
        # no sampling: a basic bolt's input is acked as execute returns, so its process
        # latency is its execute latency (see ExecutorStats.process_is_execute)
        bolts, basic = self.bolts, self.basic_collectors
        pending_acks = self.pending_acks if self.acker_tasks else None
        acked = 0
        for task, tup in self.pairs(batch):
            bc = basic[task]
            bc.input = tup
            try:
                bolts[task].execute(tup, bc)
            except Exception as e:
                self._execute_failed(task, tup, e)
            else:
                acked += 1
                if tup._anchors_to_ids and pending_acks is not None:
                    combine_ack(pending_acks, tup)  # the auto-ack, inlined
        self.stats.acked += acked


class AckerExecutor(BoltExecutor):
    """Runs acker tasks (component ``__acker``)."""

    kind = "acker"

    def setup(self) -> None:
        self.ackers = {task: Acker(self._sender(task)) for task in self.task_ids}

    def _sender(self, task: int):
        sources = self.system_sources

        def send(target: int, stream: str, values: list[Any]) -> None:
            self.send((target,), Tuple(values, sources[stream], task))

        return send

    def teardown(self) -> None:
        pass

    def control(self, msg: Control) -> None:
        if msg.kind == Control.ROTATE:
            for acker in self.ackers.values():
                acker.rotate()
        elif msg.kind == Control.STOP:
            self.stopping = True

    def process_batch(self, batch: list[Any]) -> None:
        ackers = self.ackers
        for task, tup in self.pairs(batch):
            ackers[task].execute(tup._source.stream, tup.values)


class SpoutExecutor(Executor):
    """Runs the tasks of a spout; never blocks on a full destination."""

    kind = "spout"

    def __init__(self, worker: Worker, assignment: ExecutorAssignment) -> None:
        super().__init__(worker, assignment)
        self.active = worker.active
        self.exhausted = False
        self._pending = {task: RotatingMap(2) for task in self.task_ids}
        self._overflow: list[tuple[_Outbox, list[Any]]] = []
        self._settle_now: list[tuple[int, str, Any]] = []  # (task, "ack" | "fail", msg_id)
        self._max_pending = self.conf["topology.max.spout.pending"]
        self._max_batch = self.conf["topology.spout.max.batch.size"]
        # (monotonic time, task) since which a spout task's next_tuple calls run, or None:
        # written once per task and batch, read by the worker's timer (check_stall)
        self.calling: tuple[float, int] | None = None
        self._stall_reported: tuple[float, int] | None = None

    def check_stall(self, limit: float) -> None:
        """Timer thread: record an error, once per stall, for a spout task whose next_tuple
        has not returned for more than ``limit`` seconds (next_tuple must never block)."""
        calling = self.calling
        if calling is None or calling == self._stall_reported:
            return
        stuck_for = time.monotonic() - calling[0]
        if stuck_for > limit:
            self._stall_reported = calling
            text = (f"spout {self.component!r} task {calling[1]}: next_tuple has not returned to its executor for "
                    f"{stuck_for:.1f}s (topology.spout.stall.secs = {limit:g}); next_tuple must not block")
            log.warning(text)
            self.worker.state.report_error(self.component, calling[1], text)

    def pending_for(self, task_id: int) -> RotatingMap:
        return self._pending[task_id]

    def settle_now(self, task_id: int, method: str, msg_id: Any) -> None:
        """Call the spout's ``ack`` or ``fail`` for ``msg_id`` as soon as the current spout
        call returns: ack when there is nothing to track (no ackers, no targets), fail when
        the emit raised."""
        self._settle_now.append((task_id, method, msg_id))

    def setup(self) -> None:
        self.spouts: dict[int, Any] = {}
        self.collectors: dict[int, SpoutOutputCollector] = {}
        for task in self.task_ids:
            context = self.context(task)
            spout = self.spec.instantiate()
            collector = SpoutOutputCollector(self, task, self.routes_for(task, context))
            self.spouts[task] = spout
            self.collectors[task] = collector
            spout.open(dict(self.conf), context, collector)
        if self.active:
            self._call_all("activate")

    def teardown(self) -> None:
        self._call_all("close")

    def _call_all(self, method: str) -> None:
        for task, spout in getattr(self, "spouts", {}).items():
            try:
                getattr(spout, method)()
            except Exception as e:
                self.report_error(task, e)

    def _flush(self, ob: _Outbox) -> None:
        items = ob.items
        ob.items = []
        if self._tracker is not None:
            self._tracker.add(len(items))
        if self._overflow or not self._hand_off(ob, items, False):
            self._overflow.append((ob, items))

    def _retry_overflow(self) -> None:
        while self._overflow:
            ob, items = self._overflow[0]
            if not self._hand_off(ob, items, False):
                return
            self._overflow.pop(0)

    def loop(self) -> None:
        queue = self.queue
        while not self.stopping:
            items = queue.take_all(0)
            if items:
                self._handle(items)
            if self._overflow:
                self._retry_overflow()
            emitted = False
            if self.active and not self._overflow:
                emitted = self._next_tuples()
            if not emitted and not self.stopping:
                # idle, throttled or inactive: wait for acks (Storm's sleep wait strategy)
                items = queue.take_all(0.001 if self.active else _POLL_SECS)
                if items:
                    self._handle(items)

    def _next_tuples(self) -> bool:
        emitted = False
        exhausted = True
        max_pending = self._max_pending
        for task, spout in self.spouts.items():
            collector, pending = self.collectors[task], self._pending[task]
            self.calling = (time.monotonic(), task)
            for _ in range(self._max_batch):
                if max_pending is not None and len(pending) >= max_pending:
                    exhausted = False
                    break
                before = collector.emitted_count
                try:
                    spout.next_tuple()
                except Exception as e:
                    self.report_error(task, e)
                if collector.emitted_count == before:
                    if self._tracker is not None and not self._is_exhausted(task, spout):
                        exhausted = False
                    break
                emitted = True
                if self._overflow:
                    break
        self.calling = None
        self.flush_all()
        self._run_settle_now()
        if self._tracker is not None:
            self.exhausted = exhausted and not emitted and not self._overflow
        return emitted

    def _is_exhausted(self, task: int, spout: Any) -> bool:
        try:
            return bool(spout.is_exhausted())
        except Exception as e:
            self.report_error(task, e)
            return True

    def _run_settle_now(self) -> None:
        while self._settle_now:
            task, method, msg_id = self._settle_now.pop(0)
            if method == "ack":
                self.stats.acked += 1
            else:
                self.stats.failed += 1
            self._call(task, method, msg_id)

    def _handle(self, items: list[Any]) -> None:
        done = 0
        for item in items:
            if item.__class__ is not list:
                self._control(item)
                continue
            done += len(item)
            for task, tup in self.pairs(item):
                stream = tup._source.stream
                root = tup.values[0]
                pending = self._pending[task]
                if stream == ACK_RESET_TIMEOUT:
                    pending.touch(root)
                    continue
                entry = pending.pop(root)
                if entry is None:
                    continue  # already timed out and failed
                if stream == ACK_ACK:
                    self.stats.acked += 1
                    self.stats.complete_secs += time.perf_counter() - entry[1]
                    self.stats.complete_count += 1
                    self._call(task, "ack", entry[0])
                elif stream == ACK_FAIL:
                    self.stats.failed += 1
                    self._call(task, "fail", entry[0])
        self._run_settle_now()
        self.flush_all()  # replays emitted from fail()
        if self._tracker is not None and done:
            self._tracker.done(done)

    def _call(self, task: int, method: str, msg_id: Any) -> None:
        try:
            getattr(self.spouts[task], method)(msg_id)
        except Exception as e:
            self.report_error(task, e)

    def _control(self, msg: Control) -> None:
        kind = msg.kind
        if kind == Control.ROTATE:
            for task, pending in self._pending.items():
                for entry in pending.rotate().values():
                    self.stats.failed += 1
                    self._call(task, "fail", entry[0])
        elif kind == Control.ACTIVATE and not self.active:
            self.active = True
            self._call_all("activate")
        elif kind == Control.DEACTIVATE and self.active:
            self.active = False
            self._call_all("deactivate")
        elif kind == Control.STOP:
            self.stopping = True
