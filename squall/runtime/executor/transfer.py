"""The send path of an executor (Storm's ``ExecutorTransfer``).

Emitted tuples are gathered per destination into batches (outboxes):

* a destination executor in the same worker gets the batch on its incoming queue
  directly (no serialization); batches for an executor of one task hold bare tuples,
  others ``(task id, Tuple)`` pairs;
* another worker gets groups of :mod:`squall.runtime.messaging.tuple_batch`: no ``Tuple`` is made
  for it, the values go into the group's columns as they were emitted (checked, or packed,
  at emit, so that a value that cannot be serialized fails the emit), and the worker's
  transfer encodes them in one call.

The append-and-flush rule lives here only: a batch is handed on when it reaches
``topology.producer.batch.size`` tuples and whenever the executor has drained its input
(:meth:`ExecutorTransfer.flush_all`), so a trickle is never held back.

Backpressure: a *blocking* send path (a bolt on a thread of its own) waits while a
destination is full. A non-blocking one (spouts, and executors that share the worker's
cooperative thread, which must never wait on a queue that thread itself drains) keeps the
batch a full destination cannot take yet as that destination's *waiting* batch and goes on:
other destinations are not held back by it (and load-aware shuffle sends the full one
nothing more). Later batches for that destination wait behind it, each as it is (a
checkpoint barrier's batch stays a batch of its own), up to ``topology.producer.batch.size``
tuples in all; past that they go to the overflow list, and then the executor takes no new
input until :meth:`ExecutorTransfer.retry_overflow` has handed the overflow on, in order.
Per destination, batches are handed on in order. Another worker takes a batch only against
its credit (see :mod:`squall.runtime.messaging.backpressure`): a grant wakes the executor, which
retries then (:meth:`ExecutorTransfer.retry_secs`); a full queue of this worker wakes it when
its consumer makes room. Nothing polls.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from squall.api.errors import SerializationError
from squall.api.tuple import StreamSource, Tuple, tree_tuple
from squall.runtime.messaging.backpressure import send_batch_size
from squall.runtime.executor.worker_context import WorkerContext
from squall.runtime.messaging.tuple_batch import TupleGroup
from squall.runtime.messaging.wire_values import wire_values
from squall.runtime.serialization import Serializer

# How long a blocked send path waits before it looks at its stop flag again.
POLL_SECS = 0.1


class Outbox:
    """Tuples gathered for a local executor's queue: bare tuples for an executor of one
    task (``single_task``), ``(task, Tuple)`` pairs otherwise."""

    __slots__ = ("items", "queue", "single_task")

    def __init__(self, queue: Any, single_task: bool) -> None:
        self.items: list[Any] = []
        self.queue = queue
        self.single_task = single_task


#: the kinds of tuple group (see squall.runtime.messaging.tuple_batch.TupleGroup)
_UNTRACKED, _ONE_TREE, _TREES = 0, 1, 2


class RemoteOutbox:
    """Groups gathered for another worker (see :mod:`squall.runtime.messaging.tuple_batch`);
    ``count`` tuples or batches in all. The open group's columns are kept here, so that a tuple
    joining it costs a few list appends."""

    __slots__ = ("worker_index", "items", "count", "_stream", "_source_task", "_kind", "_tasks", "_values",
                 "_tree_ids", "_roots", "_edges")
    queue = None

    def __init__(self, worker_index: int) -> None:
        self.worker_index = worker_index
        self.items: list[Any] = []
        self.count = 0
        self._stream: str | None = None  # the open group's stream; None: no group is open
        self._source_task = -1
        self._kind = _UNTRACKED
        self._tasks: list[int] = []
        self._values: list[Any] = []
        self._tree_ids: list[dict[int, int]] | None = None
        self._roots: list[int] | None = None
        self._edges: list[int] | None = None

    def append(self, task: int, stream: str, source_task: int, values: list[Any] | bytes,
               tree_ids: dict[int, int] | None) -> None:
        """A tuple untracked (``tree_ids`` None) or in the trees of ``tree_ids`` (root -> edge)."""
        if tree_ids is not None and len(tree_ids) == 1:  # one tree travels as its root and edge
            for root, edge in tree_ids.items():
                self.append_tree(task, stream, source_task, values, root, edge)
            return
        self._column(task, stream, source_task, values, _UNTRACKED if tree_ids is None else _TREES)
        if tree_ids is not None:
            self._tree_ids.append(tree_ids)

    def append_tree(self, task: int, stream: str, source_task: int, values: list[Any] | bytes, root: int,
                    edge: int) -> None:
        """A tuple in the one tree ``root``, as edge ``edge``."""
        self._column(task, stream, source_task, values, _ONE_TREE)
        self._roots.append(root)
        self._edges.append(edge)

    def _column(self, task: int, stream: str, source_task: int, values: list[Any] | bytes, kind: int) -> None:
        """The task and values of a tuple of ``kind`` into the open group (a new one if it
        cannot take it)."""
        if self._stream is None or self._stream != stream or self._source_task != source_task or self._kind != kind:
            self._stream, self._source_task, self._kind = stream, source_task, kind
            self._tasks, self._values = [], []
            self._tree_ids = [] if kind == _TREES else None
            self._roots = [] if kind == _ONE_TREE else None
            self._edges = [] if kind == _ONE_TREE else None
            self.items.append(TupleGroup(source_task, stream, self._tasks, self._values, self._tree_ids,
                                         self._roots, self._edges))
        self._tasks.append(task)
        self._values.append(values)
        self.count += 1

    def append_group(self, group: Any) -> None:
        """A ready group (an ack or completion batch); the tuples after it start a new one."""
        self.items.append(group)
        self._stream = None
        self.count += 1

    def take(self) -> tuple[list[Any], int]:
        items, count = self.items, self.count
        self.items, self.count, self._stream = [], 0, None
        return items, count


class ExecutorTransfer:
    """One executor's outboxes and their hand-off.

    Used from the executor's thread, or by a thread holding the executor's lock.
    ``stopping()`` tells a blocked hand-off to give up (the topology is going away).
    """

    def __init__(self, worker: WorkerContext, component: str, conf: dict[str, Any], blocking: bool,
                 stopping: Callable[[], bool], wake: Callable[[], None] | None = None) -> None:
        self.component = component
        self.blocking = blocking
        self._wake = wake  # wakes the executor's thread (its queue's bell)
        # a full queue of this worker made room since retry_overflow last ran: retry at once (the
        # flag outlives a ring that came before the executor's thread armed its bell)
        self._room_made = False
        self._transfer = worker.transfer
        self._stopping = stopping
        self._tracker = worker.state.tracker
        self._credits = worker.credits
        self._credit_version = -1  # the credits' version when a hand-off to another worker last failed
        #: a destination's batch is handed on at this many tuples
        self.batch_size = send_batch_size(conf)
        self._serializer = Serializer.for_config(conf)
        #: per destination (by id), the batches it could not take yet (non-blocking send paths):
        #: [outbox, [(items, count), ...] oldest first, tuples in all]
        self.waiting: dict[int, list[Any]] = {}
        #: batches behind a waiting one (non-blocking send paths), oldest first: while there
        #: are any, the executor takes no new input
        self.overflow: list[tuple[Outbox | RemoteOutbox, list[Any], int]] = []
        #: set while the overflow is empty: threads of a component's own wait on it
        self.room = threading.Event()
        self.room.set()
        self._outboxes: dict[int, Outbox | RemoteOutbox] = {}
        by_queue: dict[int, Outbox] = {}
        by_worker: dict[int, RemoteOutbox] = {}
        for task, worker_index in worker.assignment.task_worker.items():
            if worker_index == worker.index:
                q = worker.task_queues[task]
                ob = by_queue.setdefault(id(q), Outbox(q, worker.is_single_task(q)))
            else:
                ob = by_worker.setdefault(worker_index, RemoteOutbox(worker_index))
            self._outboxes[task] = ob
        self._outbox_list = [*by_queue.values(), *by_worker.values()]
        #: the tasks of this worker (whose tuples are never serialized)
        self.local_tasks = frozenset(t for t, ob in self._outboxes.items() if ob.queue is not None)
        self._remote_tasks = frozenset(self._outboxes).difference(self.local_tasks)

    def send(self, tasks: list[int] | tuple[int, ...], source: StreamSource, source_task: int, values: list[Any],
             tree_ids: dict[int, int] | None = None) -> None:
        """Queue a tuple of ``values`` (from ``source_task`` on ``source``'s stream) for each
        of ``tasks``; the local ones share one :class:`Tuple`.

        All or nothing: a value that cannot be serialized for another worker raises
        :class:`SerializationError` before any task gets the tuple.
        """
        wire = None
        remote_tasks = self._remote_tasks
        if remote_tasks and (tasks[0] in remote_tasks if len(tasks) == 1 else not remote_tasks.isdisjoint(tasks)):
            wire = self._wire(tasks, source.stream, values)
        tup = None
        for task in tasks:
            ob = self._outboxes[task]
            if ob.__class__ is RemoteOutbox:
                remote = ob
                remote.append(task, source.stream, source_task, wire, tree_ids)
                if remote.count >= self.batch_size:
                    self.flush(remote)
                continue
            if tup is None:
                tup = Tuple(values, source, source_task, tree_ids)
            self._to_local(ob, task, tup)

    def send_tree(self, task: int, source: StreamSource, source_task: int, values: list[Any], root: int,
                  edge: int) -> None:
        """Queue a tuple of ``values`` for ``task`` in the one tree ``root``, as edge ``edge``
        (see :meth:`send`; no tree map is made, here or on the wire)."""
        ob = self._outboxes[task]
        if ob.__class__ is RemoteOutbox:
            remote = ob
            remote.append_tree(task, source.stream, source_task, self._wire((task,), source.stream, values), root,
                               edge)
            if remote.count >= self.batch_size:
                self.flush(remote)
        else:
            self._to_local(ob, task, tree_tuple(values, source, source_task, root, edge))

    def _to_local(self, local: Outbox, task: int, tup: Tuple) -> None:
        """``tup`` into a local executor's outbox, handed on at a batch."""
        items = local.items
        items.append(tup if local.single_task else (task, tup))
        if len(items) >= self.batch_size:
            self.flush(local)

    def send_group(self, task: int, group: Any) -> None:
        """Queue a ready group of :mod:`squall.runtime.messaging.tuple_batch` for ``task``, a task of
        another worker."""
        ob = self._outboxes[task]
        ob.append_group(group)
        if ob.count >= self.batch_size:
            self.flush(ob)

    def outboxes(self) -> dict[int, Outbox | RemoteOutbox]:
        """Task id -> its outbox, for an emit plan (see squall.runtime.executor.collector) that appends to an
        outbox itself: it must then :meth:`flush` the outbox once it holds :attr:`batch_size`
        tuples, as :meth:`send` does."""
        return dict(self._outboxes)

    def _wire(self, tasks: list[int] | tuple[int, ...], stream: str, values: list[Any]) -> list[Any] | bytes:
        """``values`` as they travel to other workers (see :mod:`squall.runtime.messaging.tuple_batch`):
        checked now, so that a value that cannot be serialized fails the emit."""
        try:
            return wire_values(values, self._serializer)
        except SerializationError as e:
            remote = [t for t in tasks if t in self._remote_tasks]
            raise SerializationError(
                f"component {self.component!r}, stream {stream!r}: the tuple for task(s) {remote} "
                f"in another worker cannot be serialized: {e}"
            ) from e

    def flush_all(self) -> None:
        """Hand on every gathered batch."""
        for ob in self._outbox_list:
            if ob.items:
                self.flush(ob)

    def flush(self, ob: Outbox | RemoteOutbox) -> None:
        if ob.queue is None:
            items, count = ob.take()
        else:
            items = ob.items
            ob.items = []
            count = len(items)
        if self._tracker is not None:
            self._tracker.add(count)
        if self.blocking:
            self._hand_off(ob, items, count, True)
            return
        waiting = self.waiting.get(id(ob))
        if self.overflow or (waiting is not None and waiting[2] + count > self.batch_size):
            if not self.overflow:
                self.room.clear()
            self.overflow.append((ob, items, count))
        elif waiting is not None:  # behind the batches waiting for the same destination
            waiting[1].append((items, count))
            waiting[2] += count
        elif not self._hand_off(ob, items, count, False):
            self.waiting[id(ob)] = [ob, [(items, count)], count]

    @property
    def pending(self) -> bool:
        """Something waits to be handed on: call :meth:`retry_overflow` soon."""
        return bool(self.waiting or self.overflow)

    def retry_secs(self) -> float | None:
        """How soon :meth:`retry_overflow` is due though nothing arrives: at once if only the
        overflow waits, or if credit was granted since a hand-off to another worker failed;
        else None: the grant's wake-up, or the consumer of a full queue of this worker making
        room (``BatchQueue.offer``'s ``wake``), brings the executor back."""
        if not self.waiting:
            return 0.0 if self.overflow else None
        if self._room_made:
            return 0.0
        if any(entry[0].queue is None for entry in self.waiting.values()) and (
                self._credits is None or self._credits.version != self._credit_version):
            return 0.0
        return None

    def retry_overflow(self) -> bool:
        """Hand on the waiting batches, then the overflow in order (a batch whose destination
        still cannot take it becomes that destination's waiting batch); True once the overflow
        is empty."""
        self._room_made = False
        waiting = self.waiting
        for key, entry in list(waiting.items()):
            ob, batches = entry[0], entry[1]
            while batches and self._hand_off(ob, *batches[0], False):
                entry[2] -= batches.pop(0)[1]
            if not batches:
                del waiting[key]
        overflow = self.overflow
        while overflow:
            ob, items, count = overflow[0]
            if id(ob) in waiting:
                return False
            if not self._hand_off(ob, items, count, False):
                waiting[id(ob)] = [ob, [(items, count)], count]
            overflow.pop(0)
        self.room.set()
        return True

    def _room(self) -> None:
        """A full queue of this worker this send path waits for has room (its consumer's thread)."""
        self._room_made = True
        if self._wake is not None:
            self._wake()

    def _hand_off(self, ob: Outbox | RemoteOutbox, items: list[Any], count: int, block: bool) -> bool:
        q = ob.queue
        if q is None:
            if self._credits is not None:
                self._credit_version = self._credits.version  # before the attempt: a grant after it counts
            return self._transfer(ob.worker_index, items, count, block, self._stopping)
        if not block:
            return q.offer(items, count, self._room)
        while not q.put(items, count, POLL_SECS):
            if self._stopping():
                break  # the topology is going away: nothing waits for these
        return True
