"""The in-process transport: workers are objects in one process.

Payloads are still serialized bytes, so an in-process run catches what a multi-process
run would (a value that cannot be serialized fails the same way).
"""

from __future__ import annotations

from squall.runtime.messaging.transport import FullTasksFn, Transport
from squall.utils.batch_queue import BatchQueue, Bell


class LocalTransport(Transport):
    def __init__(self) -> None:
        self._full_tasks: dict[int, FullTasksFn] = {}
        # never bounded: the receiving worker always drains it; senders bound it with full_tasks
        self._inboxes: dict[int, BatchQueue] = {}

    def register(self, worker: int, full_tasks: FullTasksFn, bell: Bell) -> None:
        self._full_tasks[worker] = full_tasks
        self._inboxes[worker] = BatchQueue(1, f"worker-{worker}-inbox", bell)

    def send(self, dest_worker: int, payload: bytes) -> None:
        self._inboxes[dest_worker].force_put(payload)

    def receive(self, worker: int, timeout: float) -> list[bytes]:
        return self._inboxes[worker].take_all(timeout)

    def wait(self, worker: int, bell: Bell, timeout: float) -> None:
        if self._inboxes[worker].is_empty():
            bell.wait(timeout)  # the inbox rings it
        else:
            bell.disarm()

    def full_tasks(self, dest_worker: int) -> frozenset[int] | None:
        if not self._inboxes[dest_worker].is_empty():
            return None  # it has not taken what was sent yet: one payload in flight at a time
        return self._full_tasks[dest_worker]()
