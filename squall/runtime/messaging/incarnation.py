"""Which run of each peer worker is current: what a dead run sent is stale and dropped.

A worker slot's process is replaced when it dies (``kill -9`` included). Payloads the dead
process sent may still wait, unread, in the receiver's ZeroMQ pipe for its connection; the
new process connects anew, and ZeroMQ takes turns between the two pipes, so the dead run's
leftovers can be read *after* the new run's first payloads. Between two tasks, tuples must
arrive in the order they were sent: a checkpoint barrier splits each channel into the
tuples before it and after it (see :mod:`squall.runtime.executor.checkpointing`). A leftover read
after the new run's ROLLBACK barrier would be counted after the rollback, and again when
its record is replayed.

So every payload names its sender's *incarnation*, a number that grows with each run of a
slot (:func:`incarnation`), and a receiver drops a payload from an incarnation older than
the newest it has heard from that worker: what it carried is lost with the dead process, as
what the process had not sent yet is.
"""

from __future__ import annotations

import logging

log = logging.getLogger("squall.transport")

#: restarts of one slot within one generation fit in this many bits
_RESTART_BITS = 32


def incarnation(generation: int, restarts: int) -> int:
    """The incarnation of a worker process: its master's ``generation`` (every worker
    relaunched at once, e.g. a resubmitted Spark job), then the slot's ``restarts``."""
    return (generation << _RESTART_BITS) | restarts


class Incarnations:
    """The newest incarnation heard from each peer worker (one receiving thread's)."""

    def __init__(self, receiver: int) -> None:
        self._receiver = receiver
        self._newest: dict[int, int] = {}
        self._dropped: dict[tuple[int, int], int] = {}  # (worker, stale incarnation) -> payloads

    def admit(self, worker: int, incarnation: int) -> bool:
        """Whether a payload from ``incarnation`` of ``worker`` is current (False: stale, drop it)."""
        newest = self._newest.get(worker)
        if newest is None or incarnation > newest:
            self._newest[worker] = incarnation
            return True
        if incarnation == newest:
            return True
        key = (worker, incarnation)
        dropped = self._dropped[key] = self._dropped.get(key, 0) + 1
        if dropped == 1:
            log.info("worker %d: dropping what the previous run of worker %d sent (incarnation %d; it now runs as %d)",
                     self._receiver, worker, incarnation, newest)
        return False

    def dropped(self) -> int:
        """How many stale payloads were dropped."""
        return sum(self._dropped.values())
