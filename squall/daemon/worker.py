"""A worker: the executors of one worker slot plus its receive and transfer paths.

* **Executors** consume their incoming queues; one cooperative thread runs them all,
  except blocking ones, which have a thread each (see :mod:`squall.executor.scheduler`).
* **Transfer path**: executors hand batches of records ``(task, source task, stream,
  values, anchors-to-ids)`` bound for other workers to the worker's bounded transfer queue
  (``topology.transfer.buffer.size``); values of plain types are checked at emit and the
  rest packed there, so a value that cannot be serialized fails the emit. The transfer
  thread packs each destination's records column by column, in one msgpack call, and gives
  the payload to the transport.
* **Receive path**: the receive thread takes payloads from the transport, rebuilds the
  tuples and puts them on the destination executors' incoming queues by task id. It never
  blocks on a full executor queue (senders wait for room before sending instead), so two
  workers sending to each other cannot deadlock.
* **Timer**: tick tuples for bolts and the timeout rotation of spouts and ackers.

Fail-fast, as Storm's workers: a thread of the worker (an executor, the receive, transfer or
timer thread) that dies sets :attr:`Worker.failure` with the cause, recorded as an error of
the component; whoever runs the worker then stops it — a worker process exits so that its
supervisor restarts it, an in-process topology is FAILED. A worker never goes on half alive.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from squall.acker import ACKER_COMPONENT, system_sources
from squall.acker_executor import AckerExecutor
from squall.cluster_state import TopologyState
from squall.executor.bolt_executor import BoltExecutor
from squall.executor.executor import Control, Executor
from squall.executor.scheduler import CooperativeThread, ExecutorThread
from squall.executor.spout_executor import SpoutExecutor
from squall.executor.worker_context import WorkerContext
from squall.messaging.transport import Transport
from squall.scheduler import Assignment
from squall.serialization import PLAIN_TYPES, Packed, Serializer
from squall.topology import StormTopology
from squall.tuple import StreamSource, Tuple
from squall.utils import gc_tuning
from squall.utils.batch_queue import BatchQueue, Bell
from squall.utils.time import Timer

log = logging.getLogger("squall.worker")

_POLL_SECS = 0.1


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
        self.sources: dict[tuple[str, str], StreamSource] = {}
        for cid, spec in topology.components.items():
            for stream, stream_spec in spec.outputs.items():
                self.sources[(cid, stream)] = StreamSource(cid, stream, stream_spec.fields)
        for cid in assignment.component_tasks:
            for stream, source in system_sources(cid).items():
                self.sources[(cid, stream)] = source
        self.task_queues: dict[int, BatchQueue] = {}
        single_task_queues: set[int] = set()
        receive_size = conf["topology.executor.receive.buffer.size"]
        bell = Bell()  # the cooperative thread's: its executors' queues ring it
        assigned = assignment.workers[index].executors
        blocking = {ea: self._is_blocking(ea.component) for ea in assigned}
        for ea in assigned:
            q = BatchQueue(receive_size, f"{ea.component}{list(ea.tasks)}", None if blocking[ea] else bell)
            for task in ea.tasks:
                self.task_queues[task] = q
            if len(ea.tasks) == 1:
                single_task_queues.add(id(q))
        self.context = WorkerContext(topology_name, topology, conf, assignment, index, self.task_queues,
                                     frozenset(single_task_queues), self.sources, state, self.transfer)
        # topology order: a batch a spout emits is executed by the next bolts in the same round
        order = {cid: i for i, cid in enumerate(topology.components)}
        assigned = sorted(assigned, key=lambda ea: order.get(ea.component, len(order)))
        self.executors: list[Executor] = [self._make_executor(ea, not blocking[ea]) for ea in assigned]
        cooperative = [e for e in self.executors if e.cooperative]
        self._runners = [ExecutorThread(e, self._executor_died) for e in self.executors if not e.cooperative]
        if cooperative:
            self._runners.append(CooperativeThread(cooperative, bell, f"worker-{index}-executors",
                                                   self._executor_died))
        self.transfer_queue = BatchQueue(conf["topology.transfer.buffer.size"], f"worker-{index}-transfer")
        self._threads = [
            threading.Thread(target=self.guarded(self._transfer_loop, "transfer thread"),
                             name=f"worker-{index}-transfer", daemon=True),
            threading.Thread(target=self.guarded(self._receive_loop, "receive thread"),
                             name=f"worker-{index}-receive", daemon=True),
        ]
        self._timer = Timer(f"worker-{index}-timer", on_death=lambda e: self.fail(None, "timer thread", e))

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

    def _executor_died(self, executor: Executor, error: BaseException) -> None:
        self.fail(executor, f"executor {executor.component}{executor.task_ids}", error)

    def _is_blocking(self, component: str) -> bool:
        """Whether ``component``'s executors get a thread of their own (see
        :mod:`squall.executor.scheduler`)."""
        if not self.conf["topology.worker.cooperative"]:
            return True
        spec = self.topology.components.get(component)
        return spec is not None and bool(spec.conf.get("topology.component.blocking", False))

    def _make_executor(self, ea, cooperative: bool) -> Executor:
        if ea.component == ACKER_COMPONENT:
            return AckerExecutor(self.context, ea, cooperative)
        if self.topology.components[ea.component].is_spout:
            return SpoutExecutor(self.context, ea, cooperative, self.active)
        return BoltExecutor(self.context, ea, cooperative)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads; every worker must be registered with the transport first."""
        gc_tuning.hold(self.conf["topology.worker.gc.thresholds"])
        self._started = True
        for t in self._threads:
            t.start()
        for runner in self._runners:
            runner.start()
        self._schedule_timers()
        self._timer.start()

    def _schedule_timers(self) -> None:
        timeout = self.conf["topology.message.timeout.secs"]
        for executor in self.executors:
            if executor.kind == "spout":
                stall = executor.conf["topology.spout.stall.secs"]
                self._timer.schedule_recurring(min(1.0, stall / 2), functools.partial(executor.check_stall, stall))
            if executor.kind in ("spout", "acker"):
                self._timer.schedule_recurring(timeout, self._control_sender(executor, Control.ROTATE))
            elif executor.conf.get("topology.tick.tuple.freq.secs"):
                freq = executor.conf["topology.tick.tuple.freq.secs"]
                self._timer.schedule_recurring(freq, self._control_sender(executor, Control.TICK, freq))

    @staticmethod
    def _control_sender(executor: Executor, kind: str, arg: Any = None):
        return lambda: executor.queue.force_put(Control(kind, arg))

    def wait_ready(self, timeout: float) -> list[tuple[Executor, BaseException]]:
        """Wait for every executor's open/prepare; return the ones that raised."""
        for executor in self.executors:
            executor.ready.wait(timeout)
        return [(e, e.setup_error) for e in self.executors if e.setup_error is not None]

    def backpressured_tasks(self) -> frozenset[int]:
        """This worker's tasks whose incoming queues are full."""
        return frozenset(t for t, q in self.task_queues.items() if not q.has_room())

    def executor_snapshots(self) -> list[dict[str, Any]]:
        """Every executor's figures (see :mod:`squall.metrics`), with its component and tasks."""
        return [{"component": e.component, "tasks": list(e.task_ids), "stats": e.stats_snapshot()}
                for e in self.executors]

    def set_active(self, active: bool) -> None:
        self.active = active
        kind = Control.ACTIVATE if active else Control.DEACTIVATE
        for executor in self.executors:
            if executor.kind == "spout":
                executor.queue.force_put(Control(kind))

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
        self.transfer_queue.wake()
        for t in self._threads:
            t.join(timeout)
        if self._started:
            self._started = False
            gc_tuning.release()

    # -- transfer path --------------------------------------------------------------

    def transfer(self, dest_worker: int, records: list[tuple[Any, ...]], block: bool,
                 stopping: Callable[[], bool]) -> bool:
        """Queue records (see :mod:`squall.executor.transfer`) for another worker; with
        ``block``, wait for room (backpressure) unless ``stopping()``."""
        if not block:
            if not (self.transfer_queue.has_room() and self._peer_has_room(dest_worker, records)):
                return False
            self.transfer_queue.force_put((dest_worker, records), len(records))
            return True
        while not self._peer_has_room(dest_worker, records):
            if stopping():
                return True
            time.sleep(0.001)  # the transport has no "room" event to wait on
        while not self.transfer_queue.put((dest_worker, records), len(records), _POLL_SECS):
            if stopping():
                return True
        return True

    def _peer_has_room(self, dest_worker: int, records: list[tuple[Any, ...]]) -> bool:
        full = self.transport.full_tasks(dest_worker)
        return full is not None and (not full or full.isdisjoint([record[0] for record in records]))

    def _transfer_loop(self) -> None:
        serializer = Serializer.for_config(self.conf)
        backlog = False
        while not self.stopping:
            # with a backlog (a peer that cannot take more yet), come back soon to retry it
            items = self.transfer_queue.take_all(0.001 if backlog else _POLL_SECS)
            backlog = self.transport.send_backlog() if backlog else False
            by_dest: dict[int, list[bytes]] = {}
            for dest, records in items:
                by_dest.setdefault(dest, []).extend(records)
            for dest, records in by_dest.items():
                try:
                    self.transport.send(dest, serializer.pack_batch(records))
                except Exception:  # a transport fault must not kill the worker's sender
                    log.exception("worker %s could not send %d tuples to worker %s", self.index, len(records), dest)
            if by_dest:
                backlog = self.transport.send_backlog()

    # -- receive path ---------------------------------------------------------------

    def _receive_loop(self) -> None:
        # emitting task -> stream id -> (source, number of fields, whether the values must be ints)
        task_streams = {
            task: {stream: (source, len(source.fields), stream.startswith("__"))
                   for (cid, stream), source in self.sources.items() if cid == component}
            for task, component in self.assignment.task_component.items()
        }
        # task -> (its executor's queue, whether that executor runs this task alone)
        dispatch = {t: (q, self.context.is_single_task(q)) for t, q in self.task_queues.items()}
        serializer = Serializer.for_config(self.conf)
        while not self.stopping:
            for payload in self.transport.receive(self.index, _POLL_SECS):
                batches: dict[BatchQueue, list[Any]] = {}
                malformed: list[str] = []
                serializer.packed_decoded = 0
                try:
                    for task, src, stream, values, ids in serializer.load_batches(payload):
                        try:
                            source, arity, system = task_streams[src][stream]
                            q, single = dispatch[task]
                        except (KeyError, TypeError):
                            malformed.append(f"task {task!r} from task {src!r} on stream {stream!r} is not "
                                             f"in this worker's topology")
                            continue
                        if values.__class__ is Packed:
                            values = serializer.loads(values.data)
                            if serializer.decode_errors:
                                # dropped, not delivered half-decoded: a tracked tree times out and is replayed
                                self._report_undecodable(task, src, stream, "; ".join(serializer.decode_errors))
                                serializer.decode_errors.clear()
                                continue
                        elif (serializer.packed_decoded and values.__class__ is list
                              and not all(v.__class__ in PLAIN_TYPES for v in values)):
                            values = None  # unpacked values are plain (a Packed nested in them is forged)
                        # checked here, so that a forged tuple cannot kill the executor (or acker) it reaches
                        if (values.__class__ is not list or len(values) != arity
                                or (system and not all(v.__class__ is int for v in values))
                                or (ids and not _is_anchors(ids))):
                            malformed.append(f"task {task} from task {src} on stream {stream!r}: values "
                                             f"{values!r:.80} / anchors {ids!r:.80} do not fit the stream")
                            continue
                        tup = Tuple(values, source, src, ids)
                        batch = batches.get(q)
                        if batch is None:
                            batch = batches[q] = []
                        batch.append(tup if single else (task, tup))
                except Exception as e:  # noqa: BLE001 - a corrupt payload must not stop the receive path
                    malformed.append(f"unreadable: {e!r}")
                for q, batch in batches.items():
                    q.force_put(batch, len(batch))
                if malformed:
                    self._report_malformed(len(payload), malformed)

    def _report_malformed(self, size: int, malformed: list[str]) -> None:
        text = (f"worker {self.index} dropped {len(malformed)} malformed tuple record(s) of a payload of {size} "
                f"bytes; the first: {malformed[0]}")
        log.warning(text)
        for ea in self.assignment.workers[self.index].executors:
            if not ea.component.startswith("__"):
                self.state.report_error(ea.component, ea.tasks[0], text)

    def _report_undecodable(self, task: int, src: int, stream: str, why: str) -> None:
        component = self.assignment.task_component
        self.state.report_error(
            component[task], task,
            f"a tuple for task {task} from {component[src]!r} (task {src}), stream "
            f"{stream!r}, could not be deserialized and was dropped: {why}",
        )


def _is_anchors(ids: Any) -> bool:
    """Whether ``ids`` is a tuple's anchors-to-ids map as senders make it: ints to ints."""
    return ids.__class__ is dict and all(k.__class__ is int and v.__class__ is int for k, v in ids.items())
