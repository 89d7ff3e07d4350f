"""The in-process transport: workers are objects in one process.

Payloads are still serialized bytes, so an in-process run catches what a multi-process
run would (a value that cannot be serialized fails the same way).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from squall.messaging.transport import Transport
from squall.utils.batch_queue import BatchQueue

if TYPE_CHECKING:
    from squall.daemon.worker import Worker


class LocalTransport(Transport):
    def __init__(self) -> None:
        self._workers: dict[int, Worker] = {}
        # never bounded: the receiving worker always drains it; senders bound it with has_room
        self._inboxes: dict[int, BatchQueue] = {}

    def register(self, worker: Worker) -> None:
        self._workers[worker.index] = worker
        self._inboxes[worker.index] = BatchQueue(1, f"worker-{worker.index}-inbox")

    def send(self, dest_worker: int, payload: bytes) -> None:
        self._inboxes[dest_worker].force_put(payload)

    def receive(self, worker: int, timeout: float) -> list[bytes]:
        return self._inboxes[worker].take_all(timeout)

    def has_room(self, dest_worker: int, tasks: Iterable[int]) -> bool:
        queues = self._workers[dest_worker].task_queues
        return all(queues[t].has_room() for t in tasks)
