"""Which of Squall's modules run compiled, and the switch that keeps them pure Python.

The data path (``DATA_PATH_MODULES``: tuples, queues, collectors, executors, transfer, receive,
groupings, the acker) is compiled by Cython from the same ``.py`` files when ``pip install``
finds a C compiler (``setup.py``). Each extension sits next to its source, and Python's import
system prefers an extension to a source file, so nothing else in Squall knows which one runs.
Without a C compiler the install warns once and everything stays pure Python, which is always
complete and always tested.

Two things make a module load from its source although its extension is there, through a finder
that ``squall/__init__`` installs before any other squall module is imported:

* ``SQUALL_NO_EXTENSIONS=1`` in the environment (read once, at ``import squall``; worker
  processes inherit it). At build time the same variable skips building extensions at all.
* An extension built from other source than the module's ``.py`` (and ``.pxd``) now (an edited
  checkout that was not rebuilt): the build records each source's SHA-256 in
  ``_compiled_sources.json``; when a module's source no longer matches, the whole data path
  loads from source, with one warning naming what changed, so an edit always takes effect.
  The whole of it, because the compiled modules share their classes at the C level (the
  ``.pxd`` declarations): one module from source among compiled ones would not fit.
  ``pip install -e .`` rebuilds.

This module imports only the standard library: ``setup.py`` reads ``DATA_PATH_MODULES`` from it
before anything is installed.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import json
import logging
import os
import sys
from collections.abc import Sequence
from types import ModuleType

# Module names, compiled in this order. Modules that define msgspec Structs (their fields are
# read from annotations) and everything outside the per-tuple path stay pure Python.
DATA_PATH_MODULES: tuple[str, ...] = (
    "squall.utils.rand",
    "squall.utils.u64_map",
    "squall.api.tuple",
    "squall.utils.batch_queue",
    "squall.utils.rotating_map",
    "squall.runtime.grouping",
    "squall.runtime.acker",
    "squall.runtime.executor.ack_ledger",
    "squall.runtime.acker_executor",
    "squall.runtime.executor.executor_stats",
    "squall.runtime.executor.pending_trees",
    "squall.runtime.executor.collector",
    "squall.runtime.executor.route",
    "squall.runtime.messaging.wire_values",
    "squall.runtime.executor.inflight",
    "squall.runtime.executor.transfer",
    "squall.runtime.executor.executor",
    "squall.runtime.executor.bolt_executor",
    "squall.runtime.executor.spout_executor",
    "squall.runtime.executor.threads",
    "squall.runtime.worker_receive",
)
NO_EXTENSIONS_ENV = "SQUALL_NO_EXTENSIONS"
# written by setup.py next to squall/__init__.py: {module name: SHA-256 of the source it was built from}
SOURCES_FILE = "_compiled_sources.json"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
log = logging.getLogger(__name__)


def source_path(module: str, package_dir: str = _PACKAGE_DIR) -> str:
    """The ``.py`` file of ``module`` (one of squall's) under ``package_dir``."""
    return os.path.join(package_dir, *module.split(".")[1:]) + ".py"


def source_digest(path: str) -> str:
    """SHA-256 of the ``.py`` file at ``path`` and of the ``.pxd`` declarations beside it, if any."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        digest.update(f.read())
    pxd = path[: -len(".py")] + ".pxd"
    if os.path.exists(pxd):
        with open(pxd, "rb") as f:
            digest.update(b"\0pxd\0" + f.read())
    return digest.hexdigest()


def extensions_disabled() -> bool:
    """True when ``SQUALL_NO_EXTENSIONS`` asks for pure Python (any value but empty, ``0``, ``false``, ``no``)."""
    return os.environ.get(NO_EXTENSIONS_ENV, "").strip().lower() not in ("", "0", "false", "no")


def _built_digests(package_dir: str) -> dict[str, str]:
    try:
        with open(os.path.join(package_dir, SOURCES_FILE), encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return {}
    return recorded if isinstance(recorded, dict) else {}


def _has_extension(module: str, package_dir: str) -> bool:
    stem = source_path(module, package_dir)[: -len(".py")]
    return any(os.path.exists(stem + suffix) for suffix in importlib.machinery.EXTENSION_SUFFIXES)


def stale_modules(package_dir: str = _PACKAGE_DIR) -> list[str]:
    """The data-path modules whose extension was built from other source than their ``.py`` now."""
    built = _built_digests(package_dir)
    stale = []
    for module in DATA_PATH_MODULES:
        if not _has_extension(module, package_dir):
            continue
        try:
            current = source_digest(source_path(module, package_dir))
        except OSError:  # an install without sources: the extension is all there is
            continue
        if built.get(module) != current:
            stale.append(module)
    return stale


class _SourceFinder(importlib.abc.MetaPathFinder):
    """Finds ``modules`` as source files, ahead of the extension the path finder would pick."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules or path is None:
            return None
        loaders = [(importlib.machinery.SourceFileLoader, importlib.machinery.SOURCE_SUFFIXES)]
        for entry in path:
            spec = importlib.machinery.FileFinder(entry, *loaders).find_spec(fullname)
            if spec is not None:
                return spec
        return None


def pure_python_reason(package_dir: str = _PACKAGE_DIR) -> str | None:
    """Why the data path runs as pure Python, or None when it runs compiled: all of it or none,
    since the compiled modules share their classes at the C level."""
    if extensions_disabled():
        return f"{NO_EXTENSIONS_ENV} is set"
    missing = [m for m in DATA_PATH_MODULES if not _has_extension(m, package_dir)]
    if len(missing) == len(DATA_PATH_MODULES):
        return "no extensions built: pip install needs a C compiler"
    if missing:
        return f"{', '.join(missing)} not built"
    stale = stale_modules(package_dir)
    if stale:
        return f"{', '.join(stale)} changed since built"
    return None


def install_source_finder() -> None:
    """Called once by ``squall/__init__`` before any other squall module is imported."""
    if any(isinstance(finder, _SourceFinder) for finder in sys.meta_path):
        return
    reason = pure_python_reason()
    if reason is None:
        return
    if not extensions_disabled() and any(_has_extension(m, _PACKAGE_DIR) for m in DATA_PATH_MODULES):
        log.warning("squall: %s; running the data path as pure Python (pip install -e . rebuilds the extensions)",
                    reason)
    sys.meta_path.insert(0, _SourceFinder(DATA_PATH_MODULES))


def compiled_modules() -> list[str]:
    """The data-path modules that are loaded (or will load) from an extension."""
    compiled = pure_python_reason() is None
    loaded = {m: sys.modules.get(m) for m in DATA_PATH_MODULES}
    return [m for m, module in loaded.items()
            if (isinstance(getattr(module, "__loader__", None), importlib.machinery.ExtensionFileLoader)
                if module is not None else compiled)]


def describe() -> str:
    """One line for ``squall --version`` and ``squall plan``: which data path runs, and why."""
    reason = pure_python_reason()
    if reason is None:
        return f"data path: compiled (Cython, {len(DATA_PATH_MODULES)} modules)"
    return f"data path: pure Python ({reason})"
