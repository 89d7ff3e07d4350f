"""A tuple's values as they leave for another worker: the list itself when every value is plain
(what a :class:`~squall.runtime.messaging.tuple_batch.TupleGroup` carries as is), else packed
at emit by the topology's serializer. Checked at emit, so that a value that cannot travel fails
the emit, not the payload it would have joined. Compiled (see squall/compiled.py): it runs once
per value of every tuple that crosses workers.
"""

from __future__ import annotations

from typing import Any

from squall.api.errors import SerializationError
from squall.runtime.serialization import Serializer

_PLAIN_TYPES = frozenset({str, int, float, bool, type(None)})  # tuple_batch.Plain
_MIN_INT, _MAX_INT = -(1 << 63), (1 << 64) - 1  # what msgpack's ints hold


def wire_values(values: list[Any], serializer: Serializer) -> list[Any] | bytes:
    """``values`` as a ``TupleGroup`` carries them: the list itself when every value is
    plain, else packed now by ``serializer`` (raising
    :class:`~squall.api.errors.SerializationError` for a value that cannot be, so that the emit
    fails)."""
    for value in values:
        cls = value.__class__
        if cls not in _PLAIN_TYPES or (cls is int and not _MIN_INT <= value <= _MAX_INT):
            return serializer.dumps(values)
        if cls is str and not value.isascii():
            try:  # a lone surrogate would fail the encoding of the whole payload, later
                value.encode()
            except UnicodeEncodeError as e:
                raise SerializationError(f"string {value!r:.40} cannot be encoded as UTF-8: {e.reason}") from None
    return values
