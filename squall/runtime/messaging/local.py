"""The in-process transport: workers are objects in one process.

Payloads are still serialized bytes, so an in-process run catches what a multi-process
run would (a value that cannot be serialized fails the same way). Grants are handed to the
peers' credits directly, in the thread that changed them (no payload carries them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from squall.runtime.messaging.transport import Received, Transport
from squall.utils.batch_queue import BatchQueue, Bell

if TYPE_CHECKING:
    from squall.runtime.messaging.backpressure import CreditGrants, Credits


class LocalTransport(Transport):
    def __init__(self) -> None:
        self._flows: dict[int, tuple[CreditGrants, Credits]] = {}
        # never bounded: the receiving worker always drains it; senders bound it with credit
        self._inboxes: dict[int, BatchQueue] = {}

    def register(self, worker: int, grants: CreditGrants, credits: Credits, bell: Bell) -> None:
        self._inboxes[worker] = BatchQueue(1, f"worker-{worker}-inbox", bell)
        self._flows[worker] = (grants, credits)
        grants.on_change = lambda: self._announce(worker)
        for peer, (peer_grants, _) in self._flows.items():
            if peer != worker:  # in one process, every worker has one run
                peer_grants.heard(worker, 0)
                grants.heard(peer, 0)

    def _announce(self, worker: int) -> None:
        state = self._flows[worker][0].state()
        for peer, (_, credits) in self._flows.items():
            if peer != worker:
                credits.update(worker, 0, state.get(peer))

    def send(self, dest_worker: int, payload: bytes, source_worker: int) -> None:
        self._inboxes[dest_worker].force_put((source_worker, 0, payload))

    def receive(self, worker: int, timeout: float) -> list[Received]:
        return self._inboxes[worker].take_all(timeout)

    def wait(self, worker: int, bell: Bell, timeout: float) -> None:
        if self._inboxes[worker].is_empty():
            bell.wait(timeout)  # the inbox rings it
        else:
            bell.disarm()
