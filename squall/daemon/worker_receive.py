"""A worker's receive path: payloads from other workers onto its executors' queues.

Each payload holds batches of records ``(task, source task, stream, values,
anchors-to-ids)`` (see :mod:`squall.daemon.worker_transfer`). Every record is checked
before it becomes a tuple — its task and stream belong to this worker's topology, its values
fit the stream's fields and are of msgpack's plain types (or were packed at emit and decode),
anchors map ints to ints, system streams carry ints — so that a forged record cannot kill
the executor (or acker) it would reach; what does not pass is dropped and recorded as an
error. The tuples go onto the destination executors' queues by task id, one batch per
queue and payload (a checkpoint barrier cuts its queue's batch: it travels alone). The receive path never blocks on a full queue (senders wait for room
before sending instead), so two workers sending to each other cannot deadlock.

Whoever reads the transport calls :meth:`WorkerReceive.deliver`: the worker's cooperative
thread between rounds, or a receive thread of its own when the worker has none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from squall.checkpoint_spout import CHECKPOINT_STREAM
from squall.cluster_state import TopologyState
from squall.messaging.transport import Transport
from squall.scheduler import Assignment
from squall.serialization import PLAIN_TYPES, Packed, Serializer
from squall.tuple import StreamSource, Tuple
from squall.utils.batch_queue import BatchQueue

log = logging.getLogger("squall.worker")

# How long the receive thread waits for a payload before it looks at its stop flag again.
_POLL_SECS = 0.1


class WorkerReceive:
    def __init__(self, index: int, conf: dict[str, Any], assignment: Assignment,
                 sources: dict[tuple[str, str], StreamSource], task_queues: dict[int, BatchQueue],
                 is_single_task: Callable[[BatchQueue], bool], transport: Transport, state: TopologyState) -> None:
        self.index = index
        self._assignment = assignment
        self._transport = transport
        self._state = state
        # emitting task -> stream id -> (source, number of fields, whether the values must be
        # ints, whether it is the checkpoint barriers' stream)
        self._task_streams = {
            task: {stream: (source, len(source.fields), stream.startswith("__"), stream == CHECKPOINT_STREAM)
                   for (cid, stream), source in sources.items() if cid == component}
            for task, component in assignment.task_component.items()
        }
        # task -> (its executor's queue, whether that executor runs this task alone)
        self._dispatch = {t: (q, is_single_task(q)) for t, q in task_queues.items()}
        self._serializer = Serializer.for_config(conf)  # the reading thread's only

    def receive_ready(self) -> bool:
        """Deliver every payload that has arrived, without waiting; True if there was one."""
        payloads = self._transport.receive(self.index, 0)
        for payload in payloads:
            self.deliver(payload)
        return bool(payloads)

    def run(self, stopping: Callable[[], bool]) -> None:
        """The receive thread's loop, for a worker without a cooperative thread."""
        while not stopping():
            for payload in self._transport.receive(self.index, _POLL_SECS):
                self.deliver(payload)

    def deliver(self, payload: bytes) -> None:
        """Check the records of ``payload`` and put their tuples on the executors' queues."""
        task_streams, dispatch, serializer = self._task_streams, self._dispatch, self._serializer
        batches: dict[BatchQueue, list[Any]] = {}
        malformed: list[str] = []
        serializer.packed_decoded = 0
        try:
            for task, src, stream, values, ids in serializer.load_batches(payload):
                try:
                    source, arity, system, barrier = task_streams[src][stream]
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
                if (values.__class__ is not list or len(values) != arity
                        or (system and not all(v.__class__ is int for v in values))
                        or (ids and not _is_anchors(ids))):
                    malformed.append(f"task {task} from task {src} on stream {stream!r}: values "
                                     f"{values!r:.80} / anchors {ids!r:.80} do not fit the stream")
                    continue
                tup = Tuple(values, source, src, ids)
                if barrier:  # in a batch of its own (see squall.executor.checkpointing)
                    if batch := batches.pop(q, None):
                        q.force_put(batch, len(batch))
                    q.force_put([tup if single else (task, tup)], 1)
                    continue
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
        for ea in self._assignment.workers[self.index].executors:
            if not ea.component.startswith("__"):
                self._state.report_error(ea.component, ea.tasks[0], text)

    def _report_undecodable(self, task: int, src: int, stream: str, why: str) -> None:
        component = self._assignment.task_component
        self._state.report_error(
            component[task], task,
            f"a tuple for task {task} from {component[src]!r} (task {src}), stream "
            f"{stream!r}, could not be deserialized and was dropped: {why}",
        )


def _is_anchors(ids: Any) -> bool:
    """Whether ``ids`` is a tuple's anchors-to-ids map as senders make it: ints to ints."""
    return ids.__class__ is dict and all(k.__class__ is int and v.__class__ is int for k, v in ids.items())
