"""Connectors: spouts that read from brokers and files, bolts that write to them.

One module per broker; each broker's client library is an optional extra of its own, imported
only when a connector of that module is made (``require`` names the extra to install).
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from squall.api.component import OutputFieldsDeclarer


class MissingExtraError(ImportError):
    """A connector's client library is not installed; the message names the extra."""


def require(module: str, extra: str, connector: str) -> ModuleType:
    """Import ``module`` for ``connector``, or raise :class:`MissingExtraError` saying which
    extra of Squall installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingExtraError(
            f"{connector} needs the {module!r} package: pip install \"squall[{extra}]\" ({e})"
        ) from e


class Route(NamedTuple):
    """What a spout's translator returns to emit a record on ``stream`` rather than ``default``."""

    stream: str
    values: list[Any]


class SpoutStreams:
    """The streams of a connector spout: those its translator emits on (``output_fields``: a
    list, the ``default`` stream's fields, or a dict stream -> fields; ``None``:
    ``default_fields``), and ``error_stream`` (fields ``error_fields``) for the records the
    translator rejects.

    :meth:`route` checks what the translator returned before anything is emitted, so a
    record whose values do not fit a declared stream is a rejected record (to the error
    stream, settled once), never an emit the collector fails behind the spout's back.
    """

    def __init__(self, connector: str, output_fields: list[str] | dict[str, list[str]] | None,
                 default_fields: list[str], error_stream: str, error_fields: list[str]) -> None:
        fields = default_fields if output_fields is None else output_fields
        self.fields = {s: list(f) for s, f in fields.items()} if isinstance(fields, dict) else {"default": list(fields)}
        if error_stream in self.fields:
            raise ValueError(f"{connector}: error stream {error_stream!r} is also in output_fields")
        self.error_stream, self.error_fields = error_stream, list(error_fields)

    def declare(self, declarer: OutputFieldsDeclarer) -> None:
        for stream, fields in self.fields.items():
            declarer.declare_stream(stream, fields)
        declarer.declare_stream(self.error_stream, self.error_fields)

    def route(self, out: Any) -> tuple[str, list[Any]]:
        """``(stream, values)`` for a translator's ``out`` (values for ``default``, or a
        :class:`Route`); raises ValueError naming the stream when it is not one of the
        translator's streams or the values do not match its fields."""
        stream, values = (out.stream, out.values) if isinstance(out, Route) else ("default", out)
        values = list(values)
        fields = self.fields.get(stream)
        if fields is None:
            raise ValueError(f"stream {stream!r} is not declared (output_fields: {sorted(self.fields)})")
        if len(values) != len(fields):
            raise ValueError(f"stream {stream!r} declares {len(fields)} fields {fields}, the translator gave "
                             f"{len(values)} values {values!r}")
        return stream, values


class Backoff:
    """Reconnection delays while a broker is down: ``start`` ms, doubling up to ``limit`` ms."""

    def __init__(self, start: float, limit: float) -> None:
        self.start, self.limit = start, limit
        self.delay = 0.0
        self.until = 0.0

    @property
    def down(self) -> bool:
        return self.delay > 0

    def waiting(self) -> bool:
        return time.monotonic() < self.until

    def went_down(self) -> bool:
        """Note a failure; True for the first one of an outage."""
        first = not self.down
        self.delay = self.start if first else min(self.delay * 2, self.limit)
        self.until = time.monotonic() + self.delay / 1000
        return first

    def came_back(self) -> bool:
        """Note a success; True when it ends an outage."""
        was = self.down
        self.delay = self.until = 0.0
        return was


class ExactlyOnceOption:
    """Gives a sink bolt an exactly-once mode: ``Sink(..., exactly_once=True)`` makes its
    ``exactly_once_form``, a subclass that is a
    :class:`~squall.api.two_phase_commit.TwoPhaseCommitSink` (a stateful bolt: the topology is
    checkpointed, and its output commits with the checkpoints). Both forms' ``__init__`` take the
    ``exactly_once`` keyword."""

    exactly_once_form: type | None = None  # set once the subclass is defined

    def __new__(cls, *args: Any, exactly_once: bool = False, **kwargs: Any) -> Any:
        form = cls.exactly_once_form
        if exactly_once and form is not None and not issubclass(cls, form):
            if not issubclass(form, cls):  # a user's subclass: made as the form, it would lose its overrides
                raise TypeError(f"{cls.__name__}(exactly_once=True): {cls.__name__} has no exactly-once form; "
                                f"derive it from {form.__name__} instead")
            cls = form
        return super().__new__(cls)
