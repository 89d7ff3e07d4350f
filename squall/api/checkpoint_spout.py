"""The checkpoint spout: paces a checkpointed topology's checkpoints (Storm's ``CheckpointSpout``).

``create_topology`` adds it (component ``$checkpointspout``, one task) to a topology with a
stateful component. It emits barriers on the ``$checkpoint`` stream — fields ``txid``,
``action``, ``id`` — to every spout task; each spout acts on them and passes them on to the
bolts it feeds, and every bolt passes them on to the bolts it feeds once a barrier of the
same ``id`` has arrived from every task upstream of it (see
:mod:`squall.runtime.executor.checkpointing`). A barrier is a tracked tuple: its tree completes once
every task has acted on it, and fails if any task could not. Stateful spouts send markers on
the same stream (action ``MARK``, ``txid`` naming the spout task), which measure what they
have in flight and never hold data back (see :mod:`squall.runtime.executor.inflight`).

A checkpoint is two barriers:

1. ``PREPARE txid``: every stateful task writes its state's delta as ``txid`` (prepared,
   not committed). When the whole tree is acked, this spout records ``txid`` as the
   topology's committed txid in the state provider: that write is the commit point.
2. ``COMMIT txid``: the tasks fold the prepared delta into their committed state (a task
   that misses it folds it when it recovers, since ``txid`` is committed).

If recording the commit fails (the provider unreachable, or it timed out after writing),
nothing is sent until the provider answers which txid is committed: COMMIT if it is
``txid``, else ROLLBACK (the tasks' prepared deltas are never prepared a second time).

``INITSTATE txid`` (when this spout opens) and ``ROLLBACK txid`` (after a failed
checkpoint, or when a restarted worker asks for recovery) return every task to committed
txid ``txid`` and the spouts to the position committed with it. A failed PREPARE is followed
by a ROLLBACK; a failed COMMIT or ROLLBACK is sent again. Each barrier has a fresh, increasing
``id``: a newer ROLLBACK supersedes a barrier still in flight (one lost with a dead worker
would otherwise hold the topology until it timed out).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from squall.api.config import Config
from squall.api.spout import Spout
from squall.api.state.provider import StateProvider, provider_for
from squall.api.system_ids import CHECKPOINT_STREAM

log = logging.getLogger("squall.checkpoint")

CHECKPOINT_FIELDS = ["txid", "action", "id"]

INITSTATE, PREPARE, COMMIT, ROLLBACK = "INITSTATE", "PREPARE", "COMMIT", "ROLLBACK"
#: not a barrier: a stateful spout task's in-flight marker, ``[spout task, MARK, marker id]``
#: (see squall.runtime.executor.inflight), passed on without holding any data back
MARK = "MARK"
#: barriers that return every task to the committed state
RECOVERY_ACTIONS = frozenset({INITSTATE, ROLLBACK})


class CheckpointSpout(Spout):
    """Emits one barrier at a time; see the module's docstring for the protocol."""

    outputs = {CHECKPOINT_STREAM: CHECKPOINT_FIELDS}

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self._collector = collector
        self._interval = conf[Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL] / 1000.0
        self._provider: StateProvider = provider_for(conf, context.topology_name)
        self.committed: int | None = self._provider.committed()
        # the barrier in flight: (id, txid, action), or None
        self._in_flight: tuple[int, int | None, str] | None = None
        self._next: str | None = INITSTATE  # the barrier to send next, when nothing is in flight
        self._next_prepare_at = 0.0
        self._last_id = 0
        self.recovery_requested = False
        self._unsure: int | None = None  # a txid whose commit raised: committed or not?
        self._ask_at = 0.0  # when to ask the provider again

    def close(self) -> None:
        self._provider.close()

    @property
    def barrier_in_flight(self) -> tuple[int | None, str] | None:
        """(txid, action) of the barrier in flight, or None (between checkpoints)."""
        return None if self._in_flight is None else self._in_flight[1:]

    def request_recovery(self, why: str) -> None:
        """A task restarted (or lost tuples): roll every task back to the last commit."""
        log.info("checkpoint spout: recovery requested (%s)", why)
        self.recovery_requested = True

    def next_tuple(self) -> None:
        if self._unsure is not None and not self._resolve():
            return
        if self.recovery_requested:
            self.recovery_requested = False
            self._in_flight = None  # superseded: its ack or fail will be ignored
            self._next = ROLLBACK
        if self._in_flight is not None:
            return
        action = self._next
        if action is None:
            if time.monotonic() < self._next_prepare_at:
                return
            action = PREPARE
        # COMMIT commits what PREPARE just made the committed txid; the others return to it
        txid = self.committed
        if action == PREPARE:
            txid = 0 if txid is None else txid + 1
        barrier_id = self._last_id = max(self._last_id + 1, time.time_ns())
        self._in_flight = (barrier_id, txid, action)
        self._next = None
        self._collector.emit([txid, action, barrier_id], CHECKPOINT_STREAM, barrier_id)

    def ack(self, msg_id: Any) -> None:
        barrier = self._finish(msg_id)
        if barrier is None:
            return
        txid, action = barrier
        if action == PREPARE:
            self._unsure = txid  # until set_committed returns; if it raises, next_tuple asks
            self._provider.set_committed(txid)  # the commit point
            self._unsure = None
            self.committed = txid
            self._next = COMMIT
        else:
            self._next_prepare_at = time.monotonic() + self._interval

    def fail(self, msg_id: Any) -> None:
        barrier = self._finish(msg_id)
        if barrier is None:
            return
        txid, action = barrier
        log.warning("checkpoint spout: %s of txid %s failed; %s", action, txid,
                    "rolling back" if action == PREPARE else "sending it again")
        self._next = ROLLBACK if action in (PREPARE, ROLLBACK) else action

    def _resolve(self) -> bool:
        """Whether the provider said if the commit of ``_unsure`` happened (then the next
        barrier is COMMIT of it, or ROLLBACK to what is committed); asks at most once a second."""
        if time.monotonic() < self._ask_at:
            return False
        try:
            committed = self._provider.committed()
        except Exception as e:  # noqa: BLE001 - asked again in a second
            self._ask_at = time.monotonic() + 1.0
            log.warning("checkpoint spout: whether txid %s is committed is unknown: %s", self._unsure, e)
            return False
        self._next = COMMIT if committed == self._unsure else ROLLBACK
        log.warning("checkpoint spout: txid %s %s", self._unsure,
                    "was committed" if self._next == COMMIT else "was not committed; rolling back")
        self.committed, self._unsure = committed, None
        return True

    def _finish(self, msg_id: Any) -> tuple[int | None, str] | None:
        """(txid, action) of the barrier in flight if ``msg_id`` is its id, which is then in
        flight no more; None for a superseded barrier's (ignored)."""
        barrier = self._in_flight
        if barrier is None or barrier[0] != msg_id:
            return None
        self._in_flight = None
        return barrier[1], barrier[2]
