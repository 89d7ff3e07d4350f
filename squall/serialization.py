"""Serialization of tuple values crossing workers: msgpack, with cloudpickle as fallback.

Common types (None, bool, int within 64 bits, float, str, bytes, list, dict) are msgpack's
own; tuples keep their type; anything else travels as cloudpickle, except ``bytearray`` and
``memoryview``, which msgpack packs natively and which therefore arrive as ``bytes``. A value that neither
can encode raises :class:`~squall.errors.SerializationError` at emit, in the emitting
component. A :class:`Serializer` is not thread-safe: make one per thread.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import cloudpickle
import msgpack

from squall.errors import SerializationError

_EXT_PICKLE = 0
_EXT_TUPLE = 1


class Serializer:
    """Packs and unpacks values; one instance per thread."""

    def __init__(self) -> None:
        self._packer = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True)

    def _default(self, obj: Any) -> msgpack.ExtType:
        if type(obj) is tuple:
            # a fresh packer: this one is in the middle of packing the enclosing value
            return msgpack.ExtType(
                _EXT_TUPLE, msgpack.packb(list(obj), default=self._default, strict_types=True, use_bin_type=True)
            )
        try:
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

    @staticmethod
    def loads(data: bytes) -> Any:
        return msgpack.unpackb(data, ext_hook=_ext_hook, strict_map_key=False, raw=False)

    @staticmethod
    def load_records(data: bytes) -> Iterator[Any]:
        """The values packed back to back in ``data`` (a payload of concatenated records)."""
        unpacker = msgpack.Unpacker(ext_hook=_ext_hook, strict_map_key=False, raw=False,
                                    max_buffer_size=max(len(data), 1))
        unpacker.feed(data)
        return unpacker


def _ext_hook(code: int, data: bytes) -> Any:
    if code == _EXT_TUPLE:
        return tuple(Serializer.loads(data))
    if code == _EXT_PICKLE:
        return cloudpickle.loads(data)
    return msgpack.ExtType(code, data)
