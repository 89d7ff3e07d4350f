"""The in-process transport: workers are objects in one process.

Payloads are still serialized bytes, so an in-process run catches what a multi-process
run would (a value that cannot be serialized fails the same way), and grants travel in them as
between processes. Every worker has one run, heard of as it registers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from squall.runtime.messaging.transport import Received, Transport
from squall.utils.batch_queue import BatchQueue, Bell

if TYPE_CHECKING:
    from squall.runtime.messaging.backpressure import CreditGrants, Credits


class LocalTransport(Transport):
    def __init__(self) -> None:
        self._grants: dict[int, CreditGrants] = {}
        # never bounded: the receiving worker always drains it; senders bound it with credit
        self._inboxes: dict[int, BatchQueue] = {}

    def register(self, worker: int, grants: CreditGrants, credits: Credits, bell: Bell) -> None:
        self._inboxes[worker] = BatchQueue(1, f"worker-{worker}-inbox", bell)
        self._grants[worker] = grants
        for peer, peer_grants in self._grants.items():
            if peer != worker:  # in one process, every worker has one run
                peer_grants.heard(worker, 0)
                grants.heard(peer, 0)

    def send(self, dest_worker: int, payload: bytes, source_worker: int) -> None:
        self._inboxes[dest_worker].force_put((source_worker, 0, payload))

    def receive(self, worker: int, timeout: float) -> list[Received]:
        return self._inboxes[worker].take_all(timeout)

    def wait(self, worker: int, bell: Bell, timeout: float, backlog: bool = False) -> None:
        if self._inboxes[worker].is_empty():
            bell.wait(timeout)  # the inbox rings it
        else:
            bell.disarm()
