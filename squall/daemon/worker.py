"""A worker: the executors of one worker slot plus its receive and transfer paths.

* **Executors** (one thread each) consume their incoming queues; see
  :mod:`squall.executor`.
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
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from squall.acker import ACKER_COMPONENT, system_sources
from squall.cluster_state import TopologyState
from squall.executor import AckerExecutor, BoltExecutor, Control, Executor, SpoutExecutor
from squall.messaging.transport import Transport
from squall.scheduler import Assignment
from squall.serialization import Packed, Serializer
from squall.topology import StormTopology
from squall.tuple import StreamSource, Tuple
from squall.utils.batch_queue import BatchQueue
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
        self.sources: dict[tuple[str, str], StreamSource] = {}
        for cid, spec in topology.components.items():
            for stream, stream_spec in spec.outputs.items():
                self.sources[(cid, stream)] = StreamSource(cid, stream, stream_spec.fields)
        for cid in assignment.component_tasks:
            for stream, source in system_sources(cid).items():
                self.sources[(cid, stream)] = source
        self.task_queues: dict[int, BatchQueue] = {}
        self._single_task_queues: set[int] = set()
        receive_size = conf["topology.executor.receive.buffer.size"]
        for ea in assignment.workers[index].executors:
            q = BatchQueue(receive_size, f"{ea.component}{list(ea.tasks)}")
            for task in ea.tasks:
                self.task_queues[task] = q
            if len(ea.tasks) == 1:
                self._single_task_queues.add(id(q))
        self.executors: list[Executor] = [self._make_executor(ea) for ea in assignment.workers[index].executors]
        self.transfer_queue = BatchQueue(conf["topology.transfer.buffer.size"], f"worker-{index}-transfer")
        self._threads = [
            threading.Thread(target=self._transfer_loop, name=f"worker-{index}-transfer", daemon=True),
            threading.Thread(target=self._receive_loop, name=f"worker-{index}-receive", daemon=True),
        ]
        self._timer = Timer(f"worker-{index}-timer")

    def single_task_queue(self, queue: BatchQueue) -> bool:
        """Whether ``queue`` feeds an executor of one task (its batches hold bare tuples)."""
        return id(queue) in self._single_task_queues

    def _make_executor(self, ea) -> Executor:
        if ea.component == ACKER_COMPONENT:
            return AckerExecutor(self, ea)
        if self.topology.components[ea.component].is_spout:
            return SpoutExecutor(self, ea)
        return BoltExecutor(self, ea)

    # -- lifecycle ------------------------------------------------------------------

    def start(self) -> None:
        """Start the threads; every worker must be registered with the transport first."""
        for t in self._threads:
            t.start()
        for executor in self.executors:
            executor.start()
        self._schedule_timers()
        self._timer.start()

    def _schedule_timers(self) -> None:
        timeout = self.conf["topology.message.timeout.secs"]
        for executor in self.executors:
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
        for executor in self.executors:
            executor.request_stop()
        for executor in self.executors:
            executor.join(timeout)
            if executor.is_alive():
                log.warning("executor %s%s did not stop within %ss", executor.component, executor.task_ids, timeout)
        self.stopping = True
        self.transfer_queue.wake()
        for t in self._threads:
            t.join(timeout)

    # -- transfer path --------------------------------------------------------------

    def transfer(self, dest_worker: int, records: list[tuple[Any, ...]], block: bool, executor: Executor) -> bool:
        """Queue records (see :mod:`squall.executor`) for another worker; with ``block``, wait
        for room (backpressure)."""
        tasks = {record[0] for record in records}
        if not block:
            if not (self.transfer_queue.has_room() and self.transport.has_room(dest_worker, tasks)):
                return False
            self.transfer_queue.force_put((dest_worker, records), len(records))
            return True
        while not self.transport.has_room(dest_worker, tasks):
            if executor.stopping:
                return True
            time.sleep(0.001)  # the transport has no "room" event to wait on
        while not self.transfer_queue.put((dest_worker, records), len(records), _POLL_SECS):
            if executor.stopping:
                return True
        return True

    def _transfer_loop(self) -> None:
        serializer = Serializer(self.conf["topology.kryo.register"])
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
        # stream sources by emitting task, then stream id
        task_sources = {
            task: {stream: source for (cid, stream), source in self.sources.items() if cid == component}
            for task, component in self.assignment.task_component.items()
        }
        # task -> (its executor's queue, whether that executor runs this task alone)
        dispatch = {t: (q, id(q) in self._single_task_queues) for t, q in self.task_queues.items()}
        serializer = Serializer(self.conf["topology.kryo.register"])
        task_component = self.assignment.task_component
        while not self.stopping:
            for payload in self.transport.receive(self.index, _POLL_SECS):
                batches: dict[BatchQueue, list[Any]] = {}
                try:
                    for task, src, stream, values, ids in serializer.load_batches(payload):
                        if values.__class__ is Packed:
                            values = serializer.loads(values.data)
                            if serializer.decode_errors:
                                # dropped, not delivered half-decoded: a tracked tree times out and is replayed
                                self._report_undecodable(task_component[task], task, src, stream,
                                                         "; ".join(serializer.decode_errors))
                                serializer.decode_errors.clear()
                                continue
                        tup = Tuple(values, task_sources[src][stream], src, ids)
                        q, single = dispatch[task]
                        batch = batches.get(q)
                        if batch is None:
                            batch = batches[q] = []
                        batch.append(tup if single else (task, tup))
                except Exception as e:  # noqa: BLE001 - a corrupt payload must not stop the receive path
                    text = f"worker {self.index} received a payload it cannot read ({len(payload)} bytes): {e!r}"
                    log.warning(text)
                    for ea in self.assignment.workers[self.index].executors:
                        if not ea.component.startswith("__"):
                            self.state.report_error(ea.component, ea.tasks[0], text)
                for q, batch in batches.items():
                    q.force_put(batch, len(batch))

    def _report_undecodable(self, component: str, task: int, src: int, stream: str, why: str) -> None:
        self.state.report_error(
            component, task,
            f"a tuple for task {task} from {self.assignment.task_component[src]!r} (task {src}), stream "
            f"{stream!r}, could not be deserialized and was dropped: {why}",
        )
