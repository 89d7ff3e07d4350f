"""Serialization of tuple values crossing workers: msgpack, registered serializers, and —
only when asked for — cloudpickle.

Values that travel natively: None, bool, int (of any size), float, str, bytes, and lists,
tuples, dicts, sets and frozensets of them (each keeps its type; ``bytearray`` and
``memoryview`` arrive as ``bytes``). Instances of classes registered with ``Config.register_serialization`` (Storm's
Kryo registrations) travel with their serializer. Any other type needs the pickle fallback,
``topology.fall.back.on.java.serialization`` (Storm's key; off by default, as in Storm 2):

* off, such a value raises :class:`~squall.api.errors.SerializationError` at emit, in the
  emitting component, naming its type; a pickled value arriving from the wire is never
  unpickled (dropped, with an error recorded);
* on, it travels as cloudpickle — unpickling runs code, so the topology must run on
  authenticated links (``topology.messaging.secure``, checked when it is submitted).

A tuple whose values are all plain (None, bool, int within 64 bits, float, str) travels as
it is, typed (:mod:`squall.runtime.messaging.tuple_batch`); the values of any other tuple are packed
here, at emit, and a value that cannot be encoded raises :class:`SerializationError` there.
A :class:`Serializer` is not thread-safe: make one per thread.
"""

from __future__ import annotations

from typing import Any, Protocol

import cloudpickle
import msgpack

from squall.api.config import Config
from squall.api.errors import SerializationError

_EXT_PICKLE = 0
_EXT_TUPLE = 1
_EXT_BIG_INT = 3  # beyond msgpack's 64 bits: two's complement, big-endian
_EXT_SET = 4
_EXT_FROZENSET = 5
_EXT_FIRST_REGISTERED = 16

# The config key holding the registrations: a list of (class, serializer) pairs.


class TypeSerializer(Protocol):
    """Turns instances of one registered class into bytes and back (Storm's Kryo ``Serializer``)."""

    def serialize(self, obj: Any) -> bytes: ...

    def deserialize(self, data: bytes) -> Any: ...


# The config key that lets other types travel pickled (Storm's name).


class Serializer:
    """Packs and unpacks values; one instance per thread.

    ``registrations`` are ``(class, serializer)`` pairs, in the same order in every worker
    (they come from the topology's config); ``pickle_fallback`` lets other types travel as
    cloudpickle (see the module's docstring).
    """

    @classmethod
    def for_config(cls, conf: dict[str, Any]) -> Serializer:
        """The serializer a topology's config asks for."""
        return cls(conf[Config.TOPOLOGY_KRYO_REGISTER], conf[Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION])

    def __init__(self, registrations: list[tuple[type, TypeSerializer]] | None = None,
                 pickle_fallback: bool = False) -> None:
        self._pickle_fallback = pickle_fallback
        registrations = list(registrations or [])
        self._by_type = {cls: (_EXT_FIRST_REGISTERED + i, s) for i, (cls, s) in enumerate(registrations)}
        self._by_code = {code: s for code, s in self._by_type.values()}
        self._packer = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True)
        # why values could not be rebuilt since the caller last cleared this (they decode as None)
        self.decode_errors: list[str] = []

    def _default(self, obj: Any) -> msgpack.ExtType:
        cls = type(obj)
        if cls is int:
            return msgpack.ExtType(_EXT_BIG_INT, obj.to_bytes(obj.bit_length() // 8 + 1, "big", signed=True))
        container = _CONTAINER_CODES.get(cls)
        if container is not None:
            # a fresh packer: this one is in the middle of packing the enclosing value
            return msgpack.ExtType(
                container, msgpack.packb(list(obj), default=self._default, strict_types=True, use_bin_type=True)
            )
        registered = self._by_type.get(type(obj))
        if registered is None and not self._pickle_fallback:
            raise SerializationError(
                f"value of type {_type_name(obj)} cannot travel to another worker: it is not a native type "
                f"(None, bool, int, float, str, bytes, list, tuple, dict, set, frozenset) and has no registered "
                f"serializer; "
                f"register one with Config.register_serialization({type(obj).__name__}, serializer), or set "
                f"topology.fall.back.on.java.serialization=true to send it pickled"
            )
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

    def _ext_hook(self, code: int, data: bytes) -> Any:
        try:
            container = _CONTAINERS.get(code)
            if container is not None:
                return container(self.loads(data))
            if code == _EXT_BIG_INT:
                return int.from_bytes(data, "big", signed=True)
            if code == _EXT_PICKLE:
                if not self._pickle_fallback:
                    raise SerializationError("a pickled value arrived but topology.fall.back.on.java.serialization "
                                             "is off: not unpickled")
                return cloudpickle.loads(data)
            serializer = self._by_code.get(code)
            if serializer is not None:
                return serializer.deserialize(data)
        except Exception as e:  # noqa: BLE001 - one bad value must not stop the receiving worker
            self.decode_errors.append(f"{type(e).__name__}: {e}")
            return None
        return msgpack.ExtType(code, data)


_CONTAINERS: dict[int, type] = {_EXT_TUPLE: tuple, _EXT_SET: set, _EXT_FROZENSET: frozenset}
_CONTAINER_CODES = {cls: code for code, cls in _CONTAINERS.items()}


def _type_name(obj: Any) -> str:
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
