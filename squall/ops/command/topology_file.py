"""Topology files: the Python file ``squall run``, ``submit`` and ``plan`` are given, run as a
module of its own, and the topology and config it defines."""

from __future__ import annotations

import importlib.util
import os
import sys
import traceback
from typing import Any

import cloudpickle

from squall.api.dsl import Topology, as_storm_topology
from squall.api.storm_topology import StormTopology
from squall.ops.command import UsageError
from squall.streamparse.project import find_project, project_config


def load_topology_file(path: str) -> tuple[StormTopology, dict[str, Any]]:
    """Run ``path`` and return its topology and config: a module-level ``topology``
    (``TopologyBuilder(...).create_topology()``) and optional ``config``, or, without a
    ``topology``, the one declarative topology class the file defines
    (:func:`declared_topologies`), its ``create_topology()`` and its ``config`` (a module-level
    ``config`` merged over it).

    Raises :class:`UsageError`, its message one line: no such file; the file, or a module next
    to it, has the name of a standard-library module (:func:`_refuse_shadowing`); the file does
    not compile or raised while it ran (:func:`_run_file`); it defines no topology, several, or
    something else under the name."""
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    directories = [os.path.dirname(os.path.abspath(path))]
    project = find_project(path)
    if project is not None:
        directories.append(os.path.join(project, "src"))  # where its components are, as sparse run has it
    for directory in directories:
        _refuse_shadowing(path, directory)
        sys.path.insert(0, directory)
    namespace = _run_file(path)
    config = namespace.get("config") or {}
    if not isinstance(config, dict):
        raise UsageError(f"{path}: 'config' must be a dict or squall.Config, got {type(config).__name__}")
    topology = namespace.get("topology")
    if topology is None:
        declared = declared_topologies(namespace)
        if len(declared) != 1:
            found = (f"it defines {len(declared)}: {', '.join(declared)}; pick one with topology = "
                     f"{next(iter(declared))}.create_topology()" if declared else "it defines none")
            raise UsageError(
                f"{path} must define a module-level 'topology' = TopologyBuilder(...).create_topology() or "
                f"exactly one squall.Topology subclass ({found})"
            )
        [topology] = declared.values()
    if _is_streamparse(topology):
        from squall.streamparse.topology import from_streamparse

        topology, declared_config = from_streamparse(topology, project_config(project))
        config = {**declared_config, **config}
    else:
        topology, config = as_storm_topology(topology, config)
    if not isinstance(topology, StormTopology):
        raise UsageError(
            f"{path}: 'topology' must be TopologyBuilder(...).create_topology() or a squall.Topology subclass "
            f"(found {type(topology).__name__})"
        )
    return topology, dict(config)


def _refuse_shadowing(path: str, directory: str) -> None:
    """UsageError naming the first module of ``directory`` (``NAME.py`` or a package) that has
    the name of a standard-library module this process imported: the workers import from the
    topology's directory first, so Python's own module would be replaced by it there (a
    ``numbers.py`` breaks ``decimal``, and every worker with it)."""
    for entry in sorted(os.listdir(directory)):
        full = os.path.join(directory, entry)
        name = entry[:-3] if entry.endswith(".py") and os.path.isfile(full) else (
            entry if os.path.isfile(os.path.join(full, "__init__.py")) else None)
        if name in sys.stdlib_module_names and name in sys.modules:
            what = path if os.path.samefile(full, path) else f"{full} (next to {path})"
            raise UsageError(f"{what} has the name of the standard library's module {name!r}, which it would "
                             f"replace in the workers: rename it")


def _run_file(path: str) -> dict[str, Any]:
    """Run ``path`` as a module of its own (``squall_topology_<file name>``) and return its
    globals.

    Raises :class:`UsageError` if it does not compile (``PATH:LINE: SyntaxError: msg``) or if
    running it raised (``PATH:LINE: ExceptionType: msg``, LINE being the file's line the
    exception came through: the raise, or the import or call that led to it); the original
    exception is its ``__cause__``, and the module is forgotten."""
    name = "squall_topology_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # the file's components travel by value, as Storm serializes components: workers
    # need not be able to import the file (registered before it runs, as create_topology
    # serializes them)
    cloudpickle.register_pickle_by_value(module)
    try:
        spec.loader.exec_module(module)
    except Exception as e:
        cloudpickle.unregister_pickle_by_value(module)
        del sys.modules[name]
        raise UsageError(_describe(path, e)) from e
    return vars(module)


def _describe(path: str, error: Exception) -> str:
    """``PATH:LINE: ExceptionType: msg`` for an exception out of running the file ``path``: LINE
    is where the file does not compile, or the file's innermost line in the traceback
    (``PATH`` alone if there is neither)."""
    target = os.path.abspath(path)
    kind = type(error).__name__
    if isinstance(error, SyntaxError) and error.filename and os.path.abspath(error.filename) == target:
        # its str() repeats the file and line the prefix gives
        return f"{path}:{error.lineno}: {kind}: {error.msg}" if error.lineno else f"{path}: {kind}: {error.msg}"
    lines = [frame.lineno for frame in traceback.extract_tb(error.__traceback__)
             if os.path.abspath(frame.filename) == target]
    where = f"{path}:{lines[-1]}" if lines else path
    return f"{where}: {kind}: {error}" if str(error) else f"{where}: {kind}"


def declared_topologies(namespace: dict[str, Any]) -> dict[str, type]:
    """The declarative topologies among a topology file's globals, by name: its
    :class:`squall.Topology` and ``streamparse.Topology`` subclasses (defined there or
    imported)."""
    return {name: value for name, value in namespace.items()
            if isinstance(value, type) and (issubclass(value, Topology) and value is not Topology
                                             or _is_streamparse(value))}


def _is_streamparse(value: Any) -> bool:
    """A streamparse topology class (only if the file imported streamparse at all)."""
    if "streamparse" not in sys.modules:
        return False
    from squall.streamparse.topology import is_streamparse_topology

    return is_streamparse_topology(value)
