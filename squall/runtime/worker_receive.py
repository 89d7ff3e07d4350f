"""A worker's receive path: payloads from other workers onto its executors' queues.

A payload is a list of typed groups (see :mod:`squall.runtime.messaging.tuple_batch`), decoded and
validated in one call: one that does not fit the schemas is dropped whole. Then every group
is checked against this worker's topology before its tuples are made — its source task and
stream exist, each target task is this worker's, each tuple's values fit the stream's fields
(values packed at emit are decoded here, one tuple at a time), system streams carry ints,
ack batches go to acker tasks, completions to spout tasks — so that a forged group cannot
kill the executor (or acker) it would reach; what does not pass is dropped and recorded as
an error. The tuples go straight into one batch per destination queue and payload (a
checkpoint barrier cuts its queue's batch: it travels alone), put on the queues against the
credit this worker granted their sender (:class:`~squall.runtime.messaging.backpressure.CreditGrants`;
a dead run's leftovers are dropped). The receive path never blocks on a full queue (senders
hold credit before they send), so two workers sending to each other cannot deadlock.

Whoever reads the transport calls :meth:`WorkerReceive.deliver`: the worker's cooperative
thread between rounds, or a receive thread of its own when the worker has none.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from squall.api.system_ids import ACK_BATCH, ACKED_BATCH, ACKER_COMPONENT, CHECKPOINT_STREAM
from squall.api.tuple import StreamSource, Tuple, tree_tuple
from squall.runtime.assignment import Assignment
from squall.runtime.messaging.backpressure import CreditGrants, Credits
from squall.runtime.cluster_state import TopologyState
from squall.runtime.messaging import tuple_batch
from squall.runtime.messaging.schema import MalformedMessage
from squall.runtime.messaging.transport import Transport
from squall.runtime.serialization import Serializer
from squall.utils.batch_queue import BatchQueue

log = logging.getLogger("squall.worker")

# How long the receive thread waits for a payload before it looks at its stop flag again.
_POLL_SECS = 0.1


class WorkerReceive:
    def __init__(self, index: int, conf: dict[str, Any], assignment: Assignment,
                 sources: dict[tuple[str, str], StreamSource], task_queues: dict[int, BatchQueue],
                 is_single_task: Callable[[BatchQueue], bool], transport: Transport, state: TopologyState,
                 spout_tasks: frozenset[int], grants: CreditGrants, credits: Credits) -> None:
        self.index = index
        self._grants = grants
        self._credits = credits
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
        component = assignment.task_component
        self._local_ackers = {t for t in task_queues if component[t] == ACKER_COMPONENT}
        self._spout_tasks = spout_tasks  # the topology's
        self._serializer = Serializer.for_config(conf)  # the reading thread's only
        self._peers = frozenset(w.index for w in assignment.workers) - {index}
        self._runs: dict[int, int] = {}  # peer -> its run heard from (the reading thread's)

    def receive_ready(self) -> bool:
        """Deliver every payload that has arrived, without waiting; True if there was one."""
        payloads = self._transport.receive(self.index, 0)
        for sender, run, payload in payloads:
            self.deliver(payload, sender, run)
        return bool(payloads)

    def run(self, stopping: Callable[[], bool]) -> None:
        """The receive thread's loop, for a worker without a cooperative thread."""
        while not stopping():
            for sender, run, payload in self._transport.receive(self.index, _POLL_SECS):
                self.deliver(payload, sender, run)

    def deliver(self, payload: bytes, sender: int, run: int) -> None:
        """Check the groups of ``payload`` (from ``run`` of worker ``sender``) and put their
        tuples on the executors' queues; the credit it grants goes to this worker's credits.
        A new run of ``sender`` is heard of here: granted a window, and its credit from the
        dead run is void (see :mod:`squall.runtime.messaging.backpressure`)."""
        if self._runs.get(sender) != run:
            if sender not in self._peers:
                self._report_malformed(len(payload), [f"a payload from worker {sender}, not a peer"])
                return
            self._runs[sender] = run
            self._grants.heard(sender, run)
            self._credits.update(sender, run, None)
        batches: dict[BatchQueue, list[Any]] = {}
        puts: list[tuple[BatchQueue, list[Any]]] = []  # cut before a barrier, in order
        dropped: dict[BatchQueue, int] = {}  # tuples for this worker's queues that were not put
        malformed: list[str] = []
        try:
            groups = tuple_batch.decode(payload)
        except MalformedMessage as e:
            self._report_malformed(len(payload), [f"unreadable: {e}"])
            return
        for group in groups:
            try:
                if group.__class__ is tuple_batch.TupleGroup:
                    self._deliver_tuples(group, batches, puts, dropped, malformed)
                elif group.__class__ is tuple_batch.CreditGrant:
                    self._credits.update(sender, run, (group.run, group.credit))
                else:
                    self._deliver_acks(group, batches, dropped, malformed)
            except Exception as e:  # noqa: BLE001 - a forged group must not stop the receive path
                malformed.append(f"a group from task {group.source_task}: {e!r}")
        puts.extend(batches.items())
        if not self._grants.deliver(sender, run, puts, dropped):
            # a dead run's leftovers, or a sender never granted anything: lost as with a dead process
            log.debug("worker %d dropped a payload from run %d of worker %d, which is not current", self.index, run,
                      sender)
        if malformed:
            self._report_malformed(len(payload), malformed)

    def _drop(self, dropped: dict[BatchQueue, int], task: int) -> None:
        """A tuple for ``task`` was not put: its sender's credit for it is granted again."""
        target = self._dispatch.get(task)
        if target is not None:
            q = target[0]
            dropped[q] = dropped.get(q, 0) + 1

    def _deliver_tuples(self, group: tuple_batch.TupleGroup, batches: dict[BatchQueue, list[Any]],
                        puts: list[tuple[BatchQueue, list[Any]]], dropped: dict[BatchQueue, int],
                        malformed: list[str]) -> None:
        src, stream, tasks, all_values, tree_ids = (group.source_task, group.stream, group.tasks, group.values,
                                                    group.tree_ids)
        roots, edges = group.roots, group.edges
        stream_info = self._task_streams.get(src, {}).get(stream)
        if stream_info is None:
            malformed.append(f"{len(tasks)} tuple(s) from task {src} on stream {stream!r}, which is not in this "
                             f"worker's topology")
            for task in tasks:
                self._drop(dropped, task)
            return
        n = len(tasks)
        if len(all_values) != n or (tree_ids is not None and len(tree_ids) != n) or (roots is None) != (edges is None) \
                or (roots is not None and (len(roots) != n or len(edges) != n or tree_ids is not None)):
            malformed.append(f"a group from task {src} on stream {stream!r}: columns of different lengths")
            for task in tasks:
                self._drop(dropped, task)
            return
        source, arity, system, barrier = stream_info
        dispatch = self._dispatch
        for i in range(n):
            task, values = tasks[i], all_values[i]
            target = dispatch.get(task)
            if target is None:
                malformed.append(f"task {task} from task {src} on stream {stream!r} is not in this worker")
                continue
            if values.__class__ is bytes:
                values = self._unpack(task, src, stream, values)
                if values is None:
                    self._drop(dropped, task)
                    continue
            if len(values) != arity or (system and not _all_ints(values)):
                malformed.append(f"task {task} from task {src} on stream {stream!r}: values {values!r:.80} do "
                                 f"not fit the stream")
                self._drop(dropped, task)
                continue
            q, single = target
            if roots is not None:
                tup = tree_tuple(values, source, src, roots[i], edges[i])
            else:
                tup = Tuple(values, source, src, None if tree_ids is None else tree_ids[i])
            if barrier:  # in a batch of its own (see squall.runtime.executor.checkpointing)
                if batch := batches.pop(q, None):
                    puts.append((q, batch))
                puts.append((q, [tup if single else (task, tup)]))
                continue
            batch = batches.get(q)
            if batch is None:
                batch = batches[q] = []
            batch.append(tup if single else (task, tup))

    def _unpack(self, task: int, src: int, stream: str, data: bytes) -> list[Any] | None:
        """Values packed at emit, or None (the error recorded): dropped, not delivered
        half-decoded, so a tracked tree times out and is replayed."""
        serializer = self._serializer
        try:
            values = serializer.loads(data)
        except Exception as e:  # noqa: BLE001 - not msgpack at all
            serializer.decode_errors.append(f"{type(e).__name__}: {e}")
            values = None
        if serializer.decode_errors:
            self._report_undecodable(task, src, stream, "; ".join(serializer.decode_errors))
            serializer.decode_errors.clear()
            return None
        return values if values.__class__ is list else []  # [] fits no stream: reported as malformed

    def _deliver_acks(self, group: tuple_batch.AckBatch | tuple_batch.CompletedBatch,
                      batches: dict[BatchQueue, list[Any]], dropped: dict[BatchQueue, int],
                      malformed: list[str]) -> None:
        """An ack batch as the acker's one ``__ack_batch`` tuple, a completion batch as the
        spout's one ``__ack_acked`` tuple: what they get from executors of their own worker."""
        src = group.source_task
        if group.__class__ is tuple_batch.AckBatch:
            task, stream = group.acker_task, ACK_BATCH
            if (task not in self._local_ackers or not len(group.roots) == len(group.vals) == len(group.spout_tasks)
                    or not all(t == -1 or t in self._spout_tasks for t in group.spout_tasks)):
                malformed.append(f"an ack batch from task {src} for task {task} does not fit this worker's ackers")
                self._drop(dropped, task)
                return
            values = [group.roots, group.vals, group.spout_tasks]  # the columns as they came
        else:
            task, stream = group.spout_task, ACKED_BATCH
            if task not in self._dispatch or task not in self._spout_tasks:
                malformed.append(f"a completion batch from task {src} for task {task}, not a spout task of "
                                 f"this worker")
                self._drop(dropped, task)
                return
            values = [group.roots]
        stream_info = self._task_streams.get(src, {}).get(stream)
        if stream_info is None:
            malformed.append(f"a batch on stream {stream!r} from task {src}, which does not send it")
            self._drop(dropped, task)
            return
        q, single = self._dispatch[task]
        tup = Tuple(values, stream_info[0], src)
        batch = batches.get(q)
        if batch is None:
            batch = batches[q] = []
        batch.append(tup if single else (task, tup))

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


def _all_ints(values: list[Any]) -> bool:
    """Whether every value is an int (what system streams carry)."""
    for value in values:
        if value.__class__ is not int:
            return False
    return True


