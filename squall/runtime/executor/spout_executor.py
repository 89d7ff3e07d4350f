"""Runs the tasks of a spout (Storm's ``SpoutExecutor``); never blocks on a full destination.

What a full destination cannot take waits in the send path (see
:mod:`squall.runtime.executor.transfer`); once that holds the executor back, ``next_tuple`` is not
called until it drains, while acks and fails keep being processed (so ackers, which only send to
spouts, never wait forever). ``next_tuple`` is called up to ``topology.spout.max.batch.size``
times per task and round, and not while ``topology.max.spout.pending`` trees of that task
are pending, nor, for a stateful spout task, while more records than its limit are in flight
(see :mod:`squall.runtime.executor.inflight`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from squall.api.checkpoint_spout import MARK
from squall.api.config import Config
from squall.api.stateful import StatefulComponent
from squall.api.system_ids import (
    ACK_FAIL, ACK_RESET_TIMEOUT, ACKED_BATCH, CHECKPOINT_COMPONENT, CHECKPOINT_RECOVER, CHECKPOINT_STREAM,
)
from squall.runtime.executor.ack_ledger import UNHELD_ROOT_BIT, RoundAcks
from squall.runtime.assignment import ExecutorAssignment
from squall.runtime.executor.collector import SpoutOutputCollector
from squall.runtime.executor.executor import Control, Executor
from squall.runtime.executor.inflight import InFlight
from squall.runtime.executor.pending_trees import PendingTrees
from squall.runtime.executor.worker_context import WorkerContext
from squall.runtime.executor.checkpointing import Checkpointing

log = logging.getLogger("squall.executor")

# An active spout that emitted nothing is called again this soon (Storm's sleep wait strategy).
_IDLE_SPOUT_SECS = 0.001
_ACKER_STREAMS = frozenset({ACK_FAIL, ACK_RESET_TIMEOUT})


class SpoutExecutor(Executor):
    kind = "spout"

    def __init__(self, worker: WorkerContext, assignment: ExecutorAssignment, cooperative: bool,
                 active: bool) -> None:
        super().__init__(worker, assignment, cooperative)
        self.active = active
        #: tracked topologies (see LocalCluster.wait_idle): whether the last round of next_tuple
        #: calls emitted nothing and every spout said is_exhausted(), and how many rounds ran
        self.exhausted = False
        self.rounds = 0
        self._pending = {task: PendingTrees(task, self.stats, self.report_error) for task in self.task_ids}
        self._settle_now: list[tuple[int, str, Any]] = []  # (task, "ack" | "fail", msg_id)
        # the checkpoint spout has one barrier in flight, but a superseded one may still hold a
        # slot until it times out: the next barrier must not wait for that
        self._max_pending = (None if self.component == CHECKPOINT_COMPONENT
                             else self.conf[Config.TOPOLOGY_MAX_SPOUT_PENDING])
        self._max_batch = self.conf[Config.TOPOLOGY_SPOUT_MAX_BATCH_SIZE]
        # a spout on a thread of its own combines its inits until it flushes, as the cooperative
        # thread does for its spouts (one message per acker and flush, not one per tuple)
        self._own_round_acks = not cooperative and bool(self.acker_tasks)
        if self._own_round_acks:
            self.acks.share_round(RoundAcks())
        self.stall_secs = self.conf[Config.TOPOLOGY_SPOUT_STALL_SECS]
        #: the task whose next_tuple calls run (None: none), read by the watchdog's thread
        self.calling_task: int | None = None

    def blocks_on_full_queues(self) -> bool:
        return False

    def progress(self) -> int:
        return sum(c.emitted_count for c in getattr(self, "collectors", {}).values())

    @property
    def idle_poll_secs(self) -> float | None:
        return _IDLE_SPOUT_SECS if self.active or self.transfer.pending else None

    def timers(self) -> list[tuple[float, Any]]:
        return [(self.conf[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS], self.post(Control.ROTATE))]

    def stalled(self, secs: float) -> None:
        """An error for the task whose ``next_tuple`` has not returned (``next_tuple`` must never
        block); nothing for a long ack or fail."""
        task = self.calling_task
        if task is None:
            return
        text = (f"spout {self.component!r} task {task}: next_tuple has not returned to its executor for "
                f"{secs:.1f}s (topology.spout.stall.secs = {self.stall_secs:g}); next_tuple must not block")
        log.warning(text)
        self.worker.state.report_error(self.component, task, text)

    def set_active(self, active: bool) -> None:
        self.queue.force_put(Control(Control.ACTIVATE if active else Control.DEACTIVATE))

    def flush_all(self) -> None:
        if self._own_round_acks and self.acks.round_waiting:
            self.acks.flush_round()
        super().flush_all()

    def pending_for(self, task_id: int) -> PendingTrees:
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
            spout, context, collector = self.make_task(task, SpoutOutputCollector)
            self.spouts[task] = spout
            self.collectors[task] = collector
            spout.open(dict(self.conf), context, collector)
            self._pending[task].bind(spout)  # after open, which may set the spout's ack and fail
        self.checkpointing: Checkpointing | None = None
        self._unrecovered: frozenset[int] = frozenset()
        #: stateful tasks whose markers reach bolts: their records in flight are bounded
        self._in_flight: dict[int, InFlight] = {}
        self._last_marker = 0
        if self.worker.topology.checkpointed and self.component != CHECKPOINT_COMPONENT:
            stateful = {task: spout for task, spout in self.spouts.items() if isinstance(spout, StatefulComponent)}
            budget = self.conf[Config.TOPOLOGY_STATE_SPOUT_INFLIGHT_MS] / 1000
            for task in stateful:
                self.collectors[task].root_ids.high_bit = UNHELD_ROOT_BIT
                if self.collectors[task].marker_targets(CHECKPOINT_STREAM):
                    in_flight = self._in_flight[task] = InFlight(budget, self.conf[Config.TOPOLOGY_MAX_SPOUT_PENDING])
                    self._pending[task].untracked = in_flight.completed  # a marker's completion, or nothing
            self.checkpointing = self.make_checkpointing(stateful)
            # every task waits for the first INITSTATE or ROLLBACK (Storm buffers the bolts' tuples
            # until then instead): what it emitted before would be rolled back, failed and replayed
            self._unrecovered = frozenset(self.spouts)
        if self.active:
            self._call_all("activate")

    def emit_barrier(self, task: int, values: list[Any], anchors: list[Any]) -> None:
        self.collectors[task].plan(CHECKPOINT_STREAM, values).emit(values, anchors[0])

    def shut_down(self) -> None:
        # an activate/deactivate queued before the stop still reaches the spout before its close
        # (a kill deactivates first); the runner may have stopped before taking it
        for item in self.queue.take_all(0):
            if item.__class__ is Control and item.kind in (Control.ACTIVATE, Control.DEACTIVATE):
                self._control(item)
        super().shut_down()

    def teardown(self) -> None:
        self._call_all("close")
        checkpointing = getattr(self, "checkpointing", None)
        if checkpointing is not None and checkpointing.states is not None:
            checkpointing.states.close()

    def _call_all(self, method: str) -> None:
        for task, spout in getattr(self, "spouts", {}).items():
            try:
                getattr(spout, method)()
            except Exception as e:
                self.report_error(task, e)

    def run_once(self, timeout: float) -> bool:
        queue = self.queue
        with self.lock:
            started = time.thread_time()
            items = queue.take_all(0)
            if items:
                self._handle(items)
                queue.done()
            if self.transfer.pending:
                self.transfer.retry_overflow()
            emitted = False
            if self.active and not self.transfer.overflow and not self.stopping:
                emitted = self._next_tuples()
            if emitted or items:
                # a spout's busy time (next_tuple, ack, fail), for its capacity and the autoscaler:
                # this thread's CPU, not the clock's, as a spout may wait in next_tuple (a poll)
                self.stats.record_execute(0, time.thread_time() - started)
        if emitted or items or not timeout or self.stopping:
            return emitted or bool(items)
        # idle, throttled or inactive: wait for acks (Storm's sleep wait strategy)
        items = queue.take_all(min(timeout, _IDLE_SPOUT_SECS) if self.active else timeout)
        if items:
            with self.lock:
                self._handle(items)
            queue.done()
        return bool(items)

    def _next_tuples(self) -> bool:
        emitted = False
        exhausted = True
        max_pending = self._max_pending
        unrecovered = self._unrecovered
        if unrecovered and self.checkpointing.recovered:
            unrecovered = self._unrecovered = frozenset()
        transfer = self.transfer
        perf_counter = time.perf_counter
        flush_at = perf_counter() + self.flush_secs  # a slow next_tuple's emits wait no longer
        for task, spout in self.spouts.items():
            if task in unrecovered:
                exhausted = False
                continue
            collector, pending = self.collectors[task], self._pending[task]
            in_flight = self._in_flight.get(task)
            # a stateful task stops once it emitted what its in-flight limit leaves room for
            stop_at = None if in_flight is None else collector.emitted_count + in_flight.room(collector.emitted_count)
            next_tuple = spout.next_tuple  # looked up once per task and round, not per call
            self.calling_task = task
            for _ in range(self._max_batch):
                if (max_pending is not None and len(pending) >= max_pending
                        or stop_at is not None and collector.emitted_count >= stop_at):
                    exhausted = False
                    break
                before = collector.emitted_count
                try:
                    next_tuple()
                except Exception as e:
                    self.report_error(task, e)
                if collector.emitted_count == before:
                    if self._tracker is not None and not self._is_exhausted(task, spout):
                        exhausted = False
                    break
                emitted = True
                if transfer.overflow:
                    break
                if perf_counter() >= flush_at:
                    exhausted = False
                    break
        self.calling_task = None
        self.flush_all()
        if self._in_flight:
            self._send_markers()
        self._run_settle_now()
        if self._tracker is not None:
            self.exhausted = exhausted and not emitted and not self.transfer.pending
            self.rounds += 1
        return emitted

    def _send_markers(self) -> None:
        """A marker behind the records of each stateful task that wants one (see
        :mod:`squall.runtime.executor.inflight`), in a batch of its own, as a barrier: ``[spout task,
        MARK, marker id]`` on the ``$checkpoint`` stream."""
        now = time.monotonic()
        sent = False
        for task, in_flight in self._in_flight.items():
            emitted = self.collectors[task].emitted_count
            if in_flight.wants_marker(emitted, now):
                self._last_marker = max(self._last_marker + 1, time.time_ns())  # grows across restarts
                root = self.collectors[task].emit_marker([task, MARK, self._last_marker], CHECKPOINT_STREAM)
                in_flight.sent(root, emitted, now)
                sent = True
        if sent:
            self.flush_all()

    def _is_exhausted(self, task: int, spout: Any) -> bool:
        """Whether a spout that just emitted nothing is done (its ``is_exhausted()``; a spout
        without one is done whenever it emits nothing)."""
        is_exhausted = getattr(spout, "is_exhausted", None)
        if is_exhausted is None:
            return True
        try:
            return bool(is_exhausted())
        except Exception as e:
            self.report_error(task, e)
            return True

    def _run_settle_now(self) -> None:
        while self._settle_now:
            task, method, msg_id = self._settle_now.pop(0)
            self._pending[task].settle_untracked(msg_id, method == "ack")

    def _handle(self, items: list[Any]) -> None:
        done = 0
        for item in items:
            if item.__class__ is not list:
                self._control(item)
                continue
            done += len(item)
            for task, tup in self.pairs(item):
                stream = tup.stream_source.stream
                if stream == ACKED_BATCH:
                    self._pending[task].completed(tup.values[0])
                elif stream not in _ACKER_STREAMS:
                    self._checkpoint_input(task, tup)
                elif stream == ACK_RESET_TIMEOUT:
                    self._pending[task].touch(tup.values[0])
                else:  # ACK_FAIL
                    self._pending[task].settle(tup.values[0], False)
        self._run_settle_now()
        self.flush_all()  # replays emitted from fail()
        if self._tracker is not None and done:
            self._tracker.done(done)

    def _checkpoint_input(self, task: int, tup: Any) -> None:
        """A barrier from the checkpoint spout, or (for the checkpoint spout) a restarted task's
        request for a rollback."""
        if tup.stream_source.stream == CHECKPOINT_RECOVER:
            self.spouts[task].request_recovery(f"task {tup.values[0]} restarted")
        elif self.checkpointing is not None:
            self.checkpointing.barrier(task, tup)

    def _control(self, msg: Control) -> None:
        kind = msg.kind
        if kind == Control.ROTATE:
            for pending in self._pending.values():
                pending.expire()
        elif kind == Control.ACTIVATE and not self.active:
            self.active = True
            self._call_all("activate")
        elif kind == Control.DEACTIVATE and self.active:
            self.active = False
            self._call_all("deactivate")
        elif kind == Control.STOP:
            self.stopping = True
        elif kind == Control.SAMPLE:
            self.set_sampler(msg.arg)
