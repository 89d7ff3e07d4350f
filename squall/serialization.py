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
_EXT_FIRST_REGISTERED = 16

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

    def loads(self, data: bytes) -> Any:
        return msgpack.unpackb(data, ext_hook=self._ext_hook, strict_map_key=False, raw=False)

    def load_records(self, data: bytes) -> Iterator[Any]:
        """The values packed back to back in ``data`` (a payload of concatenated records)."""
        unpacker = msgpack.Unpacker(ext_hook=self._ext_hook, strict_map_key=False, raw=False,
                                    max_buffer_size=max(len(data), 1))
        unpacker.feed(data)
        return unpacker

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
