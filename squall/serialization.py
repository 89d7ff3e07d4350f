"""Serialization of tuple values crossing workers: msgpack, registered serializers, and —
only when asked for — cloudpickle.

Values that travel natively: None, bool, int (of any size), float, str, bytes, and lists,
tuples, dicts, sets and frozensets of them (each keeps its type; ``bytearray`` and
``memoryview`` arrive as ``bytes``). Instances of classes registered with ``Config.register_serialization`` (Storm's
Kryo registrations) travel with their serializer. Any other type needs the pickle fallback,
``topology.fall.back.on.java.serialization`` (Storm's key; off by default, as in Storm 2):

* off, such a value raises :class:`~squall.errors.SerializationError` at emit, in the
  emitting component, naming its type; a pickled value arriving from the wire is never
  unpickled (dropped, with an error recorded);
* on, it travels as cloudpickle — unpickling runs code, so the topology must run on
  authenticated links (``topology.messaging.secure``, checked when it is submitted).

A value that cannot be encoded raises :class:`SerializationError` at emit.
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
_EXT_BIG_INT = 3  # beyond msgpack's 64 bits: two's complement, big-endian
_EXT_SET = 4
_EXT_FROZENSET = 5
_EXT_FIRST_REGISTERED = 16

# Values of only these types need no checking at emit; they are packed with their batch.
PLAIN_TYPES = frozenset({str, int, float, bytes, bool, type(None)})


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


# The config key that lets other types travel pickled (Storm's name).
PICKLE_FALLBACK_KEY = "topology.fall.back.on.java.serialization"


class Serializer:
    """Packs and unpacks values; one instance per thread.

    ``registrations`` are ``(class, serializer)`` pairs, in the same order in every worker
    (they come from the topology's config); ``pickle_fallback`` lets other types travel as
    cloudpickle (see the module's docstring).
    """

    @classmethod
    def for_config(cls, conf: dict[str, Any]) -> Serializer:
        """The serializer a topology's config asks for."""
        return cls(conf[REGISTRATIONS_KEY], conf[PICKLE_FALLBACK_KEY])

    def __init__(self, registrations: list[tuple[type, TypeSerializer]] | None = None,
                 pickle_fallback: bool = False) -> None:
        self._pickle_fallback = pickle_fallback
        registrations = list(registrations or [])
        self._by_type = {cls: (_EXT_FIRST_REGISTERED + i, s) for i, (cls, s) in enumerate(registrations)}
        self._by_code = {code: s for code, s in self._by_type.values()}
        self._packer = msgpack.Packer(default=self._default, strict_types=True, use_bin_type=True)
        # batches hold plain values and ExtTypes only; its arrays may be tuples (zip's columns)
        self._batch_packer = msgpack.Packer(use_bin_type=True)
        # why values could not be rebuilt since the caller last cleared this (they decode as None)
        self.decode_errors: list[str] = []
        #: Packed values load_batches has decoded (the caller resets it): while 0, every
        #: value list it yielded holds msgpack's plain types only
        self.packed_decoded = 0

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
                f"{PICKLE_FALLBACK_KEY}=true to send it pickled"
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

    def wire_values(self, values: list[Any]) -> Any:
        """``values`` as they go into a batch for another worker: as they are when every
        value is of a plain type (str, int, float, bytes, bool, None), else packed now (raising
        :class:`SerializationError` for a value that cannot be)."""
        for value in values:
            if value.__class__ not in PLAIN_TYPES:
                return msgpack.ExtType(_EXT_PACKED, self.dumps(values))
            if value.__class__ is str and not value.isascii():
                try:  # a lone surrogate would fail the packing of the whole batch, later
                    value.encode()
                except UnicodeEncodeError as e:
                    raise SerializationError(f"string {value!r:.40} cannot be encoded as UTF-8: {e.reason}") from None
        return values

    def pack_batch(self, records: list[tuple[Any, ...]]) -> bytes:
        """One batch of records ``(task, source task, stream, wire values, anchors-to-ids)``,
        packed column by column in one call."""
        columns = [list(column) for column in zip(*records)] or [[], [], [], [], []]
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

    def _batch_ext_hook(self, code: int, data: bytes) -> Any:
        # a batch's only extension type is values packed at emit: anything else is forged
        if code != _EXT_PACKED:
            raise ValueError(f"a batch holds an extension type {code} where only packed values go")
        self.packed_decoded += 1
        return Packed(data)

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
                    raise SerializationError(f"a pickled value arrived but {PICKLE_FALLBACK_KEY} is off: "
                                             "not unpickled")
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
