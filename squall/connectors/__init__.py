"""Connectors: spouts that read from brokers and files, bolts that write to them.

One module per broker; each broker's client library is an optional extra of its own, imported
only when a connector of that module is made (``require`` names the extra to install).
"""

from __future__ import annotations

import importlib
import time
from types import ModuleType
from typing import Any, NamedTuple


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
