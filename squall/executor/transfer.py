"""The send path of an executor (Storm's ``ExecutorTransfer``).

Emitted tuples are gathered per destination into batches (outboxes):

* a destination executor in the same worker gets the batch on its incoming queue
  directly (no serialization); batches for an executor of one task hold bare tuples,
  others ``(task id, Tuple)`` pairs;
* a task in another worker gets records ``(task, source task, stream, wire values,
  anchors-to-ids)``, handed to the worker's transfer queue (values are checked at emit, so
  that a value that cannot be serialized fails the emit).

A batch is handed on when it reaches ``topology.producer.batch.size`` and whenever the
executor has drained its input (:meth:`ExecutorTransfer.flush_all`), so a trickle is never
held back.

Backpressure: a *blocking* send path (a bolt on a thread of its own) waits while a
destination is full. A non-blocking one (spouts, and executors that share the worker's
cooperative thread, which must never wait on a queue that thread itself drains) keeps what
cannot be handed on in an overflow list, in order; its executor takes no new input until
:meth:`ExecutorTransfer.retry_overflow` has handed it all on.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from squall.errors import SerializationError
from squall.executor.worker_context import WorkerContext
from squall.serialization import Serializer
from squall.tuple import Tuple

# How long a blocked send path waits before it looks at its stop flag again.
POLL_SECS = 0.1


class _Outbox:
    """Tuples gathered for one destination: a local executor's queue or a remote worker."""

    __slots__ = ("items", "queue", "worker_index", "single_task")

    def __init__(self, queue: Any, worker_index: int, single_task: bool) -> None:
        self.items: list[Any] = []
        self.queue = queue  # None for a remote worker
        self.worker_index = worker_index
        self.single_task = single_task


class ExecutorTransfer:
    """One executor's outboxes and their hand-off.

    Used from the executor's thread, or by a thread holding the executor's lock.
    ``stopping()`` tells a blocked hand-off to give up (the topology is going away).
    """

    def __init__(self, worker: WorkerContext, component: str, conf: dict[str, Any], blocking: bool,
                 stopping: Callable[[], bool]) -> None:
        self.component = component
        self.blocking = blocking
        self._transfer = worker.transfer
        self._stopping = stopping
        self._tracker = worker.state.tracker
        #: a destination's batch is handed on at this many tuples
        self.batch_size = min(conf["topology.producer.batch.size"], conf["topology.executor.send.buffer.size"])
        self._serializer = Serializer.for_config(conf)
        #: batches that could not be handed on yet (non-blocking send paths), oldest first
        self.overflow: list[tuple[_Outbox, list[Any]]] = []
        #: set while the overflow is empty: threads of a component's own wait on it
        self.room = threading.Event()
        self.room.set()
        self._outboxes: dict[int, _Outbox] = {}
        by_queue: dict[int, _Outbox] = {}
        by_worker: dict[int, _Outbox] = {}
        for task, worker_index in worker.assignment.task_worker.items():
            if worker_index == worker.index:
                q = worker.task_queues[task]
                ob = by_queue.setdefault(id(q), _Outbox(q, worker_index, worker.is_single_task(q)))
            else:
                ob = by_worker.setdefault(worker_index, _Outbox(None, worker_index, False))
            self._outboxes[task] = ob
        self._outbox_list = [*by_queue.values(), *by_worker.values()]
        #: the tasks of this worker (whose tuples are never serialized)
        self.local_tasks = frozenset(t for t, ob in self._outboxes.items() if ob.queue is not None)
        self._has_remote = bool(by_worker)

    def send(self, tasks: list[int] | tuple[int, ...], tup: Tuple) -> None:
        """Queue ``tup`` for each of ``tasks``.

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
            if len(items) >= self.batch_size:
                self.flush(ob)

    def one_task_outboxes(self) -> dict[int, _Outbox | None]:
        """Task id -> its outbox when the task is the only one of an executor of this worker
        (its batches hold bare tuples), else None: an emitter may append a tuple for such a
        task to ``items`` itself (the lean path of :meth:`send`), and must then :meth:`flush`
        the outbox once it holds :attr:`batch_size` tuples."""
        return {task: ob if ob.single_task else None for task, ob in self._outboxes.items()}

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

    def flush_all(self) -> None:
        """Hand on every gathered batch."""
        for ob in self._outbox_list:
            if ob.items:
                self.flush(ob)

    def flush(self, ob: _Outbox) -> None:
        items = ob.items
        ob.items = []
        if self._tracker is not None:
            self._tracker.add(len(items))
        if self.blocking:
            self._hand_off(ob, items, True)
        elif self.overflow or not self._hand_off(ob, items, False):
            if not self.overflow:
                self.room.clear()
            self.overflow.append((ob, items))

    def retry_overflow(self) -> bool:
        """Hand on what waits in the overflow, in order; True once it is empty."""
        overflow = self.overflow
        while overflow:
            ob, items = overflow[0]
            if not self._hand_off(ob, items, False):
                return False
            overflow.pop(0)
        self.room.set()
        return True

    def _hand_off(self, ob: _Outbox, items: list[Any], block: bool) -> bool:
        q = ob.queue
        if q is None:
            return self._transfer(ob.worker_index, items, block, self._stopping)
        if not block:
            return q.offer(items, len(items))
        while not q.put(items, len(items), POLL_SECS):
            if self._stopping():
                break  # the topology is going away: nothing waits for these
        return True
