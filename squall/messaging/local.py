"""The in-process transport: workers are objects in one process.

Payloads are still serialized bytes, so an in-process run catches what a multi-process
run would (a value that cannot be serialized fails the same way).
"""

from __future__ import annotations

from collections.abc import Iterable

from squall.messaging.transport import RoomFn, Transport
from squall.utils.batch_queue import BatchQueue


class LocalTransport(Transport):
    def __init__(self) -> None:
        self._has_room: dict[int, RoomFn] = {}
        # never bounded: the receiving worker always drains it; senders bound it with has_room
        self._inboxes: dict[int, BatchQueue] = {}

    def register(self, worker: int, has_room: RoomFn) -> None:
        self._has_room[worker] = has_room
        self._inboxes[worker] = BatchQueue(1, f"worker-{worker}-inbox")

    def send(self, dest_worker: int, payload: bytes) -> None:
        self._inboxes[dest_worker].force_put(payload)

    def receive(self, worker: int, timeout: float) -> list[bytes]:
        return self._inboxes[worker].take_all(timeout)

    def has_room(self, dest_worker: int, tasks: Iterable[int]) -> bool:
        return self._has_room[dest_worker](tasks)
