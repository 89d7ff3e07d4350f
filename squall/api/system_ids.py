"""Squall's own component and stream ids (Storm's system ids), in one place.

Ids starting with ``__`` (Storm's ``Utils.isSystemId``) or ``$`` are reserved: a user's
component or stream may not take them (:func:`squall.api.component.check_id`), and figures meant
for the user (the live line, the UI's topology totals) leave them out unless asked
(:func:`is_system_id`).

* ``__system`` sends the tick stream ``__tick`` (field ``rate_secs``).
* ``__acker`` tasks (:mod:`squall.runtime.acker`) receive ``__ack_batch`` (inits and acks),
  ``__ack_fail`` and ``__ack_reset_timeout``, and send ``__ack_acked`` (completed trees),
  ``__ack_fail`` and ``__ack_reset_timeout``; what executors send there, and how they combine it
  first, is :mod:`squall.runtime.executor.ack_ledger`.
* ``$checkpointspout`` (:mod:`squall.api.checkpoint_spout`) sends barriers on ``$checkpoint``; a
  restarted task asks it for a rollback on ``__checkpoint_recover``
  (:mod:`squall.runtime.executor.checkpointing`), a system stream so that every component may send it.
"""

from __future__ import annotations

SYSTEM_COMPONENT = "__system"
TICK_STREAM = "__tick"

ACKER_COMPONENT = "__acker"
# One tree each (Storm's streams of the same names):
ACK_FAIL = "__ack_fail"
ACK_RESET_TIMEOUT = "__ack_reset_timeout"
# Many trees in one tuple, as columns (between workers the same columns travel as the typed
# AckBatch and CompletedBatch of squall.runtime.messaging.tuple_batch); Storm's __ack_init and
# __ack_ack, one tree a tuple, are rows of these:
# to an acker, [roots], [vals], [spout task of an init, -1 for an ack] (see squall.runtime.acker);
ACK_BATCH = "__ack_batch"
# to a spout task, [root, ...]: the trees that completed.
ACKED_BATCH = "__ack_acked"

CHECKPOINT_COMPONENT = "$checkpointspout"
CHECKPOINT_STREAM = "$checkpoint"
CHECKPOINT_RECOVER = "__checkpoint_recover"

#: the fields of the system streams every executor may send on (see squall.api.tuple.system_sources)
SYSTEM_STREAM_FIELDS: dict[str, tuple[str, ...]] = {
    ACK_FAIL: ("id",),
    ACK_RESET_TIMEOUT: ("id",),
    CHECKPOINT_RECOVER: ("task",),
    ACK_BATCH: ("roots", "vals", "spout-tasks"),
    ACKED_BATCH: ("ids",),
}


def is_system_id(name: str) -> bool:
    """A component or stream of Squall's own, not the user's: ``__`` (the ackers, the tick
    stream...) or ``$`` (the checkpoint spout and stream)."""
    return name.startswith(("__", "$"))
