"""A worker's transfer path (Storm's ``WorkerTransfer``): batches bound for other workers.

Executors hand groups of :mod:`squall.runtime.messaging.tuple_batch` (tuples by source task and
stream, column by column, their values checked or packed at emit; ack and completion
batches) to :meth:`WorkerTransfer.transfer`. They wait in the bounded transfer queue
(``topology.transfer.buffer.size``) until :meth:`WorkerTransfer.send_queued` encodes each
destination's groups, in one call, and gives the payload to the transport. Whoever consumes the queue calls ``send_queued``: the worker's cooperative thread
between rounds, or a transfer thread of its own when the worker has none.

Backpressure: groups are queued only against the credit their worker granted (see
:mod:`squall.runtime.messaging.backpressure`); a worker not heard from yet has granted none (no burst
into a starting worker). The grants this worker changed go to their peers with what is sent
(a :class:`~squall.runtime.messaging.tuple_batch.CreditGrant` group), or alone once they are
worth it; a peer to greet gets a payload at once (its grants, or nothing yet).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from squall.api.config import Config
from squall.runtime.messaging.backpressure import CreditGrants, Credits
from squall.runtime.messaging import tuple_batch
from squall.runtime.messaging.transport import Transport
from squall.utils.batch_queue import BatchQueue, Bell

log = logging.getLogger("squall.worker")

# How long a blocked hand-off, or an idle transfer thread, waits before it looks again.
_POLL_SECS = 0.1


class WorkerTransfer:
    """The transfer queue and what sends it; ``bell`` wakes the queue's consumer."""

    def __init__(self, index: int, conf: dict[str, Any], transport: Transport, grants: CreditGrants,
                 credits: Credits, bell: Bell | None = None) -> None:
        self.index = index
        self.transport = transport
        self.grants = grants
        self.credits = credits
        self.queue = BatchQueue(conf[Config.TOPOLOGY_TRANSFER_BUFFER_SIZE], f"worker-{index}-transfer", bell)
        #: whether a peer could not take everything sent to it yet (retry soon)
        self.backlog = False

    def transfer(self, dest_worker: int, groups: list[Any], count: int, block: bool,
                 stopping: Callable[[], bool]) -> bool:
        """Queue groups for another worker (an executor's send path; see
        :data:`squall.runtime.executor.worker_context.TransferFn`)."""
        credits = self.credits
        if not block:
            if not (self.queue.has_room() and credits.spend(groups)):
                return False
            self.queue.force_put((dest_worker, groups), count)
            return True
        version = credits.version
        while not credits.spend(groups):
            if stopping():
                return True
            credits.wait(version, _POLL_SECS)
            version = credits.version
        while not self.queue.put((dest_worker, groups), count, _POLL_SECS):
            if stopping():
                return True
        return True

    def send_queued(self, timeout: float = 0) -> bool:
        """Pack and send what is queued, waiting up to ``timeout`` for something (the
        consumer's thread); True if anything was sent or retried."""
        items = self.queue.take_all(timeout)
        if self.backlog:
            self.backlog = self.transport.send_backlog()
        by_dest: dict[int, list[Any]] = {peer: [] for peer in self.grants.take_greetings()}
        for dest, groups in items:
            by_dest.setdefault(dest, []).extend(groups)
        for peer, run, credit in self.grants.take_changes(by_dest):
            by_dest.setdefault(peer, []).append(tuple_batch.CreditGrant(run, credit))
        for dest, groups in by_dest.items():
            try:
                self.transport.send(dest, tuple_batch.encode(groups), self.index)
            except Exception:  # a transport fault must not kill the worker's sender
                log.exception("worker %s could not send %d groups to worker %s", self.index, len(groups), dest)
        if by_dest:
            self.backlog = self.transport.send_backlog()
        return bool(by_dest)

    def run(self, stopping: Callable[[], bool]) -> None:
        """The transfer thread's loop, for a worker without a cooperative thread."""
        bell = self.queue.bell
        bell.fileno()  # its pipe made before any wait: a ring never misses it
        while not stopping():
            if self.backlog:  # a peer cannot take more yet: wait for it, or for new batches
                bell.arm()
                if self.queue.is_empty():
                    self.transport.wait_sendable(bell, _POLL_SECS)
                else:
                    bell.disarm()
                self.send_queued(0)
            else:
                self.send_queued(_POLL_SECS)
