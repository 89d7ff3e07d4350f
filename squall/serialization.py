"""Serialization of tuple values crossing workers: msgpack, a registry, cloudpickle as fallback.

Common types (None, bool, int within 64 bits, float, str, bytes, list, dict) are msgpack's
own; tuples keep their type; types registered with ``Config.register_serialization``
(Storm's Kryo registrations) use their serializer; anything else travels as cloudpickle,
except ``bytearray`` and ``memoryview``, which msgpack packs natively and which therefore
arrive as ``bytes``. A value that cannot be encoded raises
:class:`~squall.errors.SerializationError` at emit, in the emitting component.
A :class:`Serializer` is not thread-safe: make one per thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import cloudpickle
import msgpack

from squall.errors import SerializationError

_EXT_PICKLE = 0
_EXT_TUPLE = 1
_EXT_PACKED = 2  # a tuple's values, packed at emit
_EXT_FIRST_REGISTERED = 16

# Values of only these types need no checking at emit; they are packed with their batch.
_PLAIN = frozenset({str, int, float, bytes, bool, type(None)})


class Packed:
    """Values packed at emit, decoded by the receiving worker one tuple at a time (so that a
    value it cannot rebuild is blamed on its own tuple)."""

    __slots__ = ("data",)

    def __init__(self, data: bytes) -> None:
        self.data = data

# The config key holding the registrations: a list of (class, serializer) pairs.
REGISTRATIONS_KEY = "topology.kryo.register"


class TypeSerializer(Protocol):
    """Turns instances of one registered class into bytes and back (Storm's Kryo ``Serializer``)."""

    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...


class Serializer:
    """Packs and unpacks values; one instance per thread.

    ``registrations`` are ``(class, serializer)`` pairs, in the same order in every worker
    (they come from the topology's config).
    """

    def __init__(self, registrations: list[tuple[type, TypeSerializer]] | None = None) -> None:
        registrations = list(registrations or [])
        self._by_type = {cls: (_EXT_FIRST_REGISTERED + i, s) for i, (cls, s) in enumerate(registrations)}
        self._by_code = {code: s for code, s in self._by_type.values()}
        self._packer = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True)
        # batches hold plain values and ExtTypes only; its arrays may be tuples (zip's columns)
        self._batch_packer = msgpack.Packer(use_bin_type=True)
        # why values could not be rebuilt since the caller last cleared this (they decode as None)
        self.decode_errors: list[str] = []

    def _default(self, obj: Any) -> msgpack.ExtType:
        if type(obj) is tuple:
            # a fresh packer: this one is in the middle of packing the enclosing value
            return msgpack.ExtType(
                _EXT_TUPLE, msgpack.packb(list(obj), default=self._default, strict_types=True, use_bin_type=True)
            )
        registered = self._by_type.get(type(obj))
        try:
            if registered is not None:
                return msgpack.ExtType(registered[0], registered[1].serialize(obj))
            return msgpack.ExtType(_EXT_PICKLE, cloudpickle.dumps(obj))
        except Exception as e:
            raise SerializationError(f"value of type {type(obj).__name__} cannot be serialized: {e}") from e

    def dumps(self, obj: Any) -> bytes:
        try:
            return self._packer.pack(obj)
        except SerializationError:
            self._packer.reset()
            raise
        except Exception as e:  # e.g. recursion, a default that raised something else
            self._packer.reset()
            raise SerializationError(f"value cannot be serialized: {e}") from e

    def wire_values(self, values: list[Any]) -> Any:
        """``values`` as they go into a batch for another worker: as they are when every
        value is of a plain type (str, int, float, bytes, bool, None), else packed now (raising
        :class:`SerializationError` for a value that cannot be)."""
        for value in values:
            if value.__class__ not in _PLAIN:
                return msgpack.ExtType(_EXT_PACKED, self.dumps(values))
        return values

    def pack_batch(self, records: list[tuple[Any, ...]]) -> bytes:
        """One batch of records ``(task, source task, stream, wire values, anchors-to-ids)``,
        packed column by column in one call."""
        columns = [list(column) for column in zip(*records)]
        try:
            return self._batch_packer.pack(columns)
        except (OverflowError, ValueError, TypeError):
            # a plain value msgpack cannot hold as it is (an int beyond 64 bits): pack those strictly
            self._batch_packer.reset()
            columns[3] = [v if isinstance(v, msgpack.ExtType) else msgpack.ExtType(_EXT_PACKED, self.dumps(v))
                          for v in columns[3]]
            return self._batch_packer.pack(columns)

    def load_batches(self, data: bytes) -> Iterator[tuple[Any, ...]]:
        """The records of every batch packed back to back in ``data``; their values are lists,
        or :class:`Packed`, whose ``data`` :meth:`loads` decodes."""
        unpacker = msgpack.Unpacker(ext_hook=self._batch_ext_hook, strict_map_key=False, raw=False,
                                    max_buffer_size=max(len(data), 1))
        unpacker.feed(data)
        for tasks, sources, streams, values, ids in unpacker:
            yield from zip(tasks, sources, streams, values, ids)

    @staticmethod
    def _batch_ext_hook(code: int, data: bytes) -> Any:
        return Packed(data) if code == _EXT_PACKED else msgpack.ExtType(code, data)

    def loads(self, data: bytes) -> Any:
        return msgpack.unpackb(data, ext_hook=self._ext_hook, strict_map_key=False, raw=False)

    def _ext_hook(self, code: int, data: bytes) -> Any:
        if code == _EXT_TUPLE:
            return tuple(self.loads(data))
        try:
            if code == _EXT_PICKLE:
                return cloudpickle.loads(data)
            serializer = self._by_code.get(code)
            if serializer is not None:
                return serializer.deserialize(data)
        except Exception as e:  # noqa: BLE001 - one bad value must not stop the receiving worker
            self.decode_errors.append(f"{type(e).__name__}: {e}")
            return None
        return msgpack.ExtType(code, data)
