"""Where modules moved when Squall was laid out in layers (api, runtime, cluster, ops), and a
finder that keeps the old paths importable.

Old paths live on outside this repository, and these are the ones kept, each checked by
tests/test_api.py:

* **configs** name classes by module: a state provider (``topology.state.provider``:
  ``"squall.state.sqlite_provider:SqliteStateProvider"``) or a metrics consumer
  (``topology.metrics.consumer.register``: ``"squall.metrics2.consumer.LoggingMetricsConsumer"``);
* **console scripts** installed before the move name ``squall.cli:main``;
* **pickles** written by an earlier version name the module that defined each class, so every
  public class (what ``squall`` exports, and the providers and consumers) stays at its old path
  (state saved through the pickle fallback names ``squall.tuple``).

Importing an old path returns the module at its new path, the same object: it is never loaded
twice, so classes compare equal and ``isinstance`` holds. The longest old prefix wins
(``squall.state.sqlite_provider`` moved to the runtime, the rest of ``squall.state`` to the API).
Modules renamed in the same step (``squall.scheduler``, ``squall.executor.scheduler``) keep their
old names too. Not kept: the run-time internals that left a module whose public half moved
elsewhere (``squall.grouping`` is the API's declarations now; ``make_grouper`` and the groupers
are :mod:`squall.runtime.grouping`, which nothing outside Squall names). New code uses the new
paths.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

#: old module path (and everything under it) -> new module path
MOVED: dict[str, str] = {
    "squall.ack_ledger": "squall.runtime.executor.ack_ledger",
    "squall.acker": "squall.runtime.acker",
    "squall.acker_executor": "squall.runtime.acker_executor",
    "squall.assignment": "squall.runtime.assignment",
    "squall.bolt": "squall.api.bolt",
    "squall.checkpoint_spout": "squall.api.checkpoint_spout",
    "squall.cli": "squall.ops.cli",
    "squall.cluster_state": "squall.runtime.cluster_state",
    "squall.collector": "squall.runtime.executor.collector",
    "squall.command": "squall.ops.command",
    "squall.command.spark_master": "squall.cluster.spark_master_url",
    "squall.component": "squall.api.component",
    "squall.config": "squall.api.config",
    "squall.context": "squall.api.context",
    "squall.control": "squall.ops.control",
    "squall.daemon": "squall.cluster",
    "squall.daemon.worker": "squall.runtime.worker",
    "squall.daemon.worker_receive": "squall.runtime.worker_receive",
    "squall.daemon.worker_transfer": "squall.runtime.worker_transfer",
    "squall.defaults": "squall.api.defaults",
    "squall.dsl": "squall.api.dsl",
    "squall.errors": "squall.api.errors",
    "squall.executor": "squall.runtime.executor",
    "squall.executor.scheduler": "squall.runtime.executor.threads",
    "squall.grouping": "squall.api.grouping",
    "squall.local_cluster": "squall.cluster.local_cluster",
    "squall.messaging": "squall.runtime.messaging",
    "squall.metrics": "squall.runtime.stats",
    "squall.metrics2": "squall.api.metrics2",
    "squall.metrics2.prometheus": "squall.ops.prometheus",
    "squall.registry": "squall.cluster.registry",
    # the collectors (exported) went into the executor's package with the ack ledger, which the
    # runtime's layers import downwards only
    "squall.runtime.collector": "squall.runtime.executor.collector",
    "squall.scheduler": "squall.runtime.assignment",
    "squall.serialization": "squall.runtime.serialization",
    "squall.spark": "squall.cluster.spark",
    "squall.spec": "squall.api.spec",
    "squall.spout": "squall.api.spout",
    "squall.state": "squall.api.state",
    "squall.state.redis_provider": "squall.runtime.state.redis_provider",
    "squall.state.sqlite_provider": "squall.runtime.state.sqlite_provider",
    "squall.stateful": "squall.api.stateful",
    "squall.system_ids": "squall.api.system_ids",
    "squall.topology": "squall.api.topology",
    "squall.tuple": "squall.api.tuple",
    "squall.ui": "squall.ops.ui",
    "squall.windowing": "squall.api.windowing",
}

#: modules made after the layers out of part of another, which still binds what moved (new
#: module -> the module it came from): pickles naming the older path keep loading
SPLIT_FROM: dict[str, str] = {
    "squall.api.storm_topology": "squall.api.topology",
}


def new_path(name: str) -> str | None:
    """The new path of module ``name`` if it (or a package above it) moved, else None."""
    parts = name.split(".")
    for i in range(len(parts), 1, -1):
        new = MOVED.get(".".join(parts[:i]))
        if new is not None:
            return ".".join([new, *parts[i:]])
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old path as the module at its new path, already imported under its new name."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        pass  # executed once, under its new name


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        new = new_path(fullname)
        if new is None:
            return None
        module = importlib.import_module(new)
        return importlib.machinery.ModuleSpec(fullname, _Alias(module), is_package=hasattr(module, "__path__"))


def install_moved_finder() -> None:
    """Called once by ``squall/__init__``, before any of the old paths can be imported."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())
