"""Multilang framing: how messages travel over a subprocess's stdin and stdout.

Two wire formats, the two pystorm speaks (``pystorm/serializers``):

* ``json`` (Storm's ``JsonSerializer``, the protocol's default): one JSON document, then a
  line ``end``: ``{"command": "next"}\\nend\\n``.
* ``msgpack`` (pystorm's ``MsgpackSerializer``): back-to-back msgpack objects, delimited by
  msgpack itself; strings as str, binaries as bin (``use_bin_type``), as pystorm packs them.

Both sides must agree: the subprocess is told by its own command line (a pystorm
component takes ``serializer="msgpack"``; ``python -m streamparse.run -s msgpack ...``).

A :class:`Decoder` keeps the state of one stream: :meth:`Decoder.feed` takes whatever bytes
the pipe gave and returns the complete messages. A document that is not valid JSON comes
back as a :class:`ProtocolError` in place of its message (JSON framing is line based, so the
next message is still found); garbage in a msgpack stream cannot be skipped, so the msgpack
decoder raises :class:`ProtocolError` and the stream is lost.
"""

from __future__ import annotations

import json
from typing import Any

import msgpack


class ProtocolError(Exception):
    """A message that breaks the multilang protocol (malformed, unknown command, ...)."""


class Decoder:
    """Splits one byte stream into messages."""

    def feed(self, data: bytes) -> list[Any]:
        """The messages (or non-fatal :class:`ProtocolError`) completed by ``data``."""
        raise NotImplementedError


class Serializer:
    """A multilang wire format: ``encode`` one message, ``decoder()`` for a stream."""

    name = ""

    def encode(self, message: Any) -> bytes:
        """The bytes of ``message``; ``TypeError``/``ValueError`` for a value the format
        cannot carry (the caller decides what that means, e.g. a failed tuple)."""
        raise NotImplementedError

    def decoder(self) -> Decoder:
        raise NotImplementedError


class _JsonDecoder(Decoder):
    def __init__(self) -> None:
        self._partial = b""  # the last, incomplete line
        self._lines: list[bytes] = []  # lines of the current document

    def feed(self, data: bytes) -> list[Any]:
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out: list[Any] = []
        for line in lines:
            if line == b"end":
                doc, self._lines = b"\n".join(self._lines), []
                try:
                    out.append(json.loads(doc))
                except ValueError as e:  # UnicodeDecodeError included
                    out.append(ProtocolError(f"malformed JSON message {doc[:200]!r}: {e}"))
            elif line or self._lines:  # blank lines between messages are tolerated, as pystorm does
                self._lines.append(line)
        return out


class JsonSerializer(Serializer):
    name = "json"

    def encode(self, message: Any) -> bytes:
        # ensure_ascii keeps each document on one line whatever the strings hold
        return json.dumps(message, separators=(",", ":")).encode() + b"\nend\n"

    def decoder(self) -> Decoder:
        return _JsonDecoder()


class _MsgpackDecoder(Decoder):
    def __init__(self) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)

    def feed(self, data: bytes) -> list[Any]:
        self._unpacker.feed(data)
        try:
            return list(self._unpacker)
        except (ValueError, msgpack.exceptions.UnpackException) as e:
            raise ProtocolError(f"malformed msgpack stream: {e!r}") from e


class MsgpackSerializer(Serializer):
    name = "msgpack"

    def encode(self, message: Any) -> bytes:
        return msgpack.packb(message, use_bin_type=True)

    def decoder(self) -> Decoder:
        return _MsgpackDecoder()


SERIALIZERS: dict[str, type[Serializer]] = {"json": JsonSerializer, "msgpack": MsgpackSerializer}


def get_serializer(name: str) -> Serializer:
    """The serializer called ``name`` (``"json"`` or ``"msgpack"``); ``ValueError`` otherwise."""
    try:
        return SERIALIZERS[name]()
    except (KeyError, TypeError):
        raise ValueError(f"unknown multilang serializer {name!r}; use one of {sorted(SERIALIZERS)}") from None
