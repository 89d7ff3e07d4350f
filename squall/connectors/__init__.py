"""Connectors: spouts that read from brokers and files, bolts that write to them.

One module per broker; each broker's client library is an optional extra of its own, imported
only when a connector of that module is made (``require`` names the extra to install).
"""

from __future__ import annotations

import importlib
from types import ModuleType


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
