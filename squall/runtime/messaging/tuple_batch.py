"""The wire format of tuples between workers: typed batches, encoded and decoded in one call.

A payload is a list of groups, in the order they were made, encoded as msgpack by msgspec
(``array_like`` Structs, so no field names travel) and decoded against these schemas in C:
a payload that does not fit (truncated, a wrong type anywhere, an unknown group tag) is
rejected whole with :class:`~squall.runtime.messaging.schema.MalformedMessage`. Four kinds of group:

* :class:`TupleGroup`: consecutive tuples of one source task on one stream, column by
  column: the target task, the values and (for tracked tuples) the tree ids of each. A
  tuple's values are a list of plain values (None, bool, int within 64 bits, float, str),
  checked at emit (:mod:`squall.runtime.messaging.wire_values`); any other value list was packed
  at emit by the topology's
  :class:`~squall.runtime.serialization.Serializer` and travels as bytes, decoded by the receiver one
  tuple at a time (so a value it cannot rebuild is blamed on its own tuple);
* :class:`AckBatch`: an executor's inits and acks for one acker task since its last flush
  (what a local acker gets as one ``__ack_batch`` tuple);
* :class:`CompletedBatch`: an acker's completed trees for one spout task (a local spout
  gets them as one ``__ack_acked`` tuple);
* :class:`CreditGrant`: the credit the sending worker grants the receiving one (see
  :mod:`squall.runtime.messaging.backpressure`), riding with the tuples going back.

Nothing here is pickled: a peer's payload can only ever decode to these types.
"""

from __future__ import annotations

from typing import Annotated, Any, Union

import msgspec

from squall.runtime.messaging.schema import MalformedMessage

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
U64 = NonNegative  # msgpack ints stop at 2**64 - 1
#: what a tuple's values may hold without being packed at emit
Plain = Union[None, bool, int, float, str]
_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})
_MIN_INT, _MAX_INT = -(1 << 63), (1 << 64) - 1


class TupleGroup(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag=0):
    """Tuples of ``source_task`` on ``stream``, in emit order, of one kind: untracked (the
    three tree columns None), each in one tree (its root and edge ids in ``roots`` and
    ``edges``: nearly every tracked tuple), or in several (``tree_ids``, root -> edge each)."""

    source_task: NonNegative
    stream: str
    tasks: list[NonNegative]
    values: list[Union[list[Plain], bytes]]
    tree_ids: Union[list[dict[U64, U64]], None]
    roots: Union[list[U64], None] = None
    edges: Union[list[U64], None] = None


class AckBatch(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag=1):
    """Inits and acks from ``source_task``'s executor for acker task ``acker_task``:
    ``roots[i]`` gets ``vals[i]`` XOR-ed in; ``spout_tasks[i]`` is the spout task of an init,
    -1 for an ack."""

    source_task: NonNegative
    acker_task: NonNegative
    roots: list[U64]
    vals: list[U64]
    spout_tasks: list[Annotated[int, msgspec.Meta(ge=-1)]]


class CompletedBatch(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag=2):
    """Trees of ``spout_task`` that acker task ``source_task`` saw complete."""

    source_task: NonNegative
    spout_task: NonNegative
    roots: list[U64]


class CreditGrant(msgspec.Struct, array_like=True, forbid_unknown_fields=True, tag=3):
    """What the sending worker has granted run ``run`` of the receiving one so far: queue key
    -> tuples."""

    run: NonNegative
    credit: dict[NonNegative, NonNegative]


Group = Union[TupleGroup, AckBatch, CompletedBatch, CreditGrant]
_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(list[Group])


def encode(groups: list[Any]) -> bytes:
    """One payload of ``groups`` (made by this module's users, of these types), in one call."""
    return _encoder.encode(groups)


def decode(payload: bytes) -> list[Group]:
    """The groups of ``payload``; :class:`MalformedMessage` saying what does not fit."""
    try:
        return _decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise MalformedMessage(f"{e} ({len(payload)} bytes)") from None

