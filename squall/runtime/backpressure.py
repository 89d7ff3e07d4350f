"""Backpressure: how a worker holds senders back while its executors' queues are full, instead
of growing them or dropping tuples (Storm 2's backpressure: ``WorkerState.backpressure`` and the
``BackPressureTracker``).

What a worker does, from the queue up:

1. Every executor's incoming queue is bounded (``topology.executor.receive.buffer.size``;
   :class:`~squall.utils.batch_queue.BatchQueue`): ``has_room()``, ``load()``, and callbacks when
   it fills or drains.
2. :class:`WorkerBackpressure` (here) says which of the worker's tasks are full — what the worker
   announces to its peers — and how full any task looks to a sender, its own tasks' measured and
   other workers' as they last announced (load-aware shuffle reads it). In a worker process it
   also wakes the announcer at once when a queue that was announced full drains, or when the
   receive path fills one (:meth:`WorkerBackpressure.announce_changes`).
3. The transport carries the announcements: :meth:`ZmqTransport.publish_backpressure` /
   ``read_backpressure`` between worker processes (a ``Backpressure`` message of
   :mod:`squall.runtime.messaging.schema`), a direct call in process
   (:class:`~squall.runtime.messaging.local.LocalTransport`); ``full_tasks(worker)`` is what a
   sender reads.
4. Senders wait: an executor's send path keeps a full destination's batch and waits for room
   without holding back the rest (:mod:`squall.runtime.executor.transfer`), and the worker's
   transfer path sends nothing to a task its worker announced full
   (:mod:`squall.runtime.worker_transfer`); a spout stops being asked for tuples meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from squall.runtime.messaging.transport import Transport
from squall.utils.batch_queue import BatchQueue


class WorkerBackpressure:
    """One worker's side of backpressure: ``task_queues`` are its tasks' incoming queues,
    ``task_worker`` says which worker runs any task, ``transport`` what the others announced.
    Its methods may be called from any thread; what they read is advisory (a queue may fill or
    drain right after)."""

    def __init__(self, task_queues: Mapping[int, BatchQueue], task_worker: Mapping[int, int],
                 transport: Transport) -> None:
        self._queues = task_queues
        self._task_worker = task_worker
        self._transport = transport

    def full_tasks(self) -> frozenset[int]:
        """This worker's tasks whose incoming queues are full: what it announces."""
        return frozenset(t for t, q in self._queues.items() if not q.has_room())

    def task_load(self, task: int) -> float:
        """How full ``task``'s incoming queue is, 0 to 1: measured for this worker's tasks; a
        task of another worker counts as full while that worker announces it full or must be
        sent nothing (not heard from yet), else as empty."""
        q = self._queues.get(task)
        if q is not None:
            return q.load()
        full = self._transport.full_tasks(self._task_worker[task])
        return 1.0 if full is None or task in full else 0.0

    def announce_changes(self, published: Callable[[], frozenset[int]],
                         wake: Callable[[], None]) -> Callable[[frozenset[int]], None]:
        """Call ``wake()`` (the announcer's wake-up) as soon as a queue whose tasks were announced
        full (``published()``) has room again; returns the callback for the receive path to call
        with the tasks of a queue it filled, which wakes the announcer unless they were announced.
        A queue drains in milliseconds and senders elsewhere wait for the news, so neither waits
        for the announcer's next round."""
        tasks_by_queue: dict[Any, set[int]] = {}
        for task, queue in self._queues.items():
            tasks_by_queue.setdefault(queue, set()).add(task)
        for queue, tasks in tasks_by_queue.items():
            queue.on_room = _on_room(frozenset(tasks), published, wake)

        def on_full(tasks: frozenset[int]) -> None:
            if not tasks <= published():
                wake()
        return on_full


def _on_room(tasks: frozenset[int], published: Callable[[], frozenset[int]],
             wake: Callable[[], None]) -> Callable[[], None]:
    def on_room() -> None:
        if not published().isdisjoint(tasks):  # somebody was told it is full
            wake()
    return on_room
