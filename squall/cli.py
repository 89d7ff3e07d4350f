"""The ``squall`` command: ``run``, ``submit``, ``plan``, ``list``, ``kill``, ``activate``,
``deactivate`` and ``--version``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import signal
import sys
import time
from typing import Any

import cloudpickle

import squall
from squall import control
from squall.config import Config, merged_config
from squall.control import ControlError, ControlServer
from squall.dsl import Topology, as_storm_topology
from squall.errors import NotAliveError, TopologySetupError
from squall.local_cluster import LocalCluster
from squall.scheduler import assign
from squall.streamparse.project import find_project, project_config
from squall.topology import StormTopology


class UsageError(Exception):
    pass


def load_topology_file(path: str) -> tuple[StormTopology, dict[str, Any]]:
    """Run ``path`` and return its topology and config: a module-level ``topology``
    (``TopologyBuilder(...).create_topology()``) and optional ``config``, or, without a
    ``topology``, the one declarative topology class the file defines
    (:func:`declared_topologies`), its ``create_topology()`` and its ``config`` (a module-level
    ``config`` merged over it)."""
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    project = find_project(path)
    if project is not None:
        sys.path.insert(0, os.path.join(project, "src"))  # where its components are, as sparse run has it
    name = "squall_topology_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # the file's components travel by value, as Storm serializes components: workers
    # need not be able to import the file
    cloudpickle.register_pickle_by_value(module)
    spec.loader.exec_module(module)
    namespace = vars(module)
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




def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are read as JSON when they parse (numbers, lists, null)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"-c expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _totals(info: dict[str, Any]) -> str:
    comps = info["components"].values()
    emitted = sum(c["emitted"] for c in comps)
    acked = sum(c["acked"] for c in comps if c["type"] == "spout")
    failed = sum(c["failed"] for c in comps if c["type"] == "spout")
    errors = sum(len(c["errors"]) for c in comps)
    return (f"{info['name']} {info['status']} {info['uptime_secs']:.0f}s | emitted {emitted:,} | "
            f"spout acked {acked:,} failed {failed:,} | errors {errors}")


def format_summary(info: dict[str, Any]) -> str:
    """A per-component table of the topology's statistics, and the last error of each."""
    header = (f"{'component':<20} {'type':<5} {'tasks':>5} {'emitted':>10} {'transferred':>11} {'acked':>10} "
              f"{'failed':>7} {'exec ms':>8} {'proc ms':>8} {'compl ms':>8} {'capacity':>8}")
    lines = [header, "-" * len(header)]
    for cid, c in info["components"].items():
        complete = f"{c['complete_latency_ms']:.3f}" if c["type"] == "spout" else ""
        capacity = f"{c['capacity']:.3f}" if c["type"] == "bolt" else ""
        lines.append(
            f"{cid:<20} {c['type']:<5} {c['num_tasks']:>5} {c['emitted']:>10,} {c['transferred']:>11,} "
            f"{c['acked']:>10,} {c['failed']:>7,} {c['execute_latency_ms']:>8.3f} {c['process_latency_ms']:>8.3f} "
            f"{complete:>8} {capacity:>8}"
        )
    for cid, c in info["components"].items():
        if c["errors"]:
            last = c["errors"][-1]
            lines.append(f"\n{len(c['errors'])} error(s) in {cid!r}; the last (task {last['task']}):\n"
                         f"{last['error'].rstrip()}")
    return "\n".join(lines)


def serve_topology(cluster: Any, name: str, topology: StormTopology, config: dict[str, Any],
                   duration: float | None, where: str, mode: str | None = None) -> int:
    """Submit ``topology`` to ``cluster`` and keep it running, with a live status line, until
    Ctrl-C, SIGTERM, ``duration`` or ``squall kill`` from another terminal; then kill it and
    print its summary. ``where`` says how it runs (shown after the workers), ``mode`` says it
    in a word for ``squall list`` (default: ``where``). Shared by ``squall run`` and
    ``squall submit``.

    While it runs, the topology is registered for ``squall list`` / ``kill`` / ``activate`` /
    ``deactivate`` (:mod:`squall.control`); registering comes before submitting, so a name
    another process runs fails with ``AlreadyAliveError`` and nothing starts. The entry is
    removed on every way out, and a ``squall kill`` returns once the summary is printed.

    Returns 0, or 1 when the topology FAILED (the cluster gave up restarting its workers)."""
    tty = sys.stderr.isatty()
    stop = {"signal": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["signal"] = True

    message_timeout_secs = merged_config(config)[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        with ControlServer(cluster, name, mode or where, message_timeout_secs) as server:
            cluster.submit_topology(name, config, topology)
            workers = ", ".join(f"{w['port']} (pid {w['pid']})" for w in cluster.get_topology_info(name)["workers"])
            print(f"squall: topology {name!r} running, workers {where} on ports {workers}; Ctrl-C stops it",
                  file=sys.stderr)
            started = last_status = time.monotonic()
            try:
                while not stop["signal"] and not server.kill_requested.is_set():
                    if duration is not None and time.monotonic() - started >= duration:
                        break
                    server.kill_requested.wait(0.2)
                    info = cluster.get_topology_info(name)
                    if info["status"] == "FAILED":
                        break
                    if time.monotonic() - last_status >= (1.0 if tty else 10.0):
                        last_status = time.monotonic()
                        line = _totals(info)
                        print(("\r" + line + "\x1b[K") if tty else line, end="" if tty else "\n",
                              file=sys.stderr, flush=True)
            except KeyboardInterrupt:
                pass
            if tty:
                print(file=sys.stderr)
            if server.kill_requested.is_set():
                try:
                    _wait_killed(cluster, name, server.kill_wait_secs, stop)
                except KeyboardInterrupt:
                    pass
            info = cluster.get_topology_info(name)
            print(f"squall: stopping {name!r}", file=sys.stderr)
            cluster.kill_topology(name, wait_secs=0)
            print(format_summary(info), file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if info["status"] == "FAILED":
        print(f"squall: topology {name!r} FAILED; see the last error above", file=sys.stderr)
        return 1
    return 0


def _wait_killed(cluster: Any, name: str, wait_secs: float, stop: dict[str, bool]) -> None:
    """The first half of ``storm kill -w``: deactivate the spouts and give the pending tuple
    trees ``wait_secs`` to complete (Ctrl-C or SIGTERM cuts the wait short). Done here rather
    than by ``kill_topology(name, wait_secs)`` so that the summary, taken after the wait,
    counts the trees that completed during it."""
    waiting = f"; spouts deactivated, waiting {wait_secs:g}s for pending tuples" if wait_secs > 0 else ""
    print(f"squall: {name!r} killed by squall kill{waiting}", file=sys.stderr)
    cluster.deactivate(name)
    deadline = time.monotonic() + wait_secs
    while not stop["signal"] and time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def _file_topology(args: argparse.Namespace) -> tuple[str, StormTopology, dict[str, Any]]:
    topology, config = load_topology_file(args.file)
    config.update(parse_overrides(args.conf))
    return args.name or os.path.splitext(os.path.basename(args.file))[0], topology, config


def cmd_run(args: argparse.Namespace) -> int:
    name, topology, config = _file_topology(args)
    with LocalCluster(processes=not args.in_process) as cluster:
        if args.in_process:
            return serve_topology(cluster, name, topology, config, args.duration, "in this process", "in-process")
        return serve_topology(cluster, name, topology, config, args.duration, "as processes", "processes")


def cmd_submit(args: argparse.Namespace) -> int:
    name, topology, config = _file_topology(args)
    spark_conf = {}
    for pair in args.spark_conf:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("spark."):
            raise UsageError(f"--conf expects spark.key=value, got {pair!r}")
        spark_conf[key] = value
    try:
        from squall.spark import JavaNotFoundError, SparkCluster, SparkSetupError
    except ImportError as e:
        raise UsageError(str(e)) from None
    try:
        cluster = SparkCluster(args.master, spark_conf=spark_conf)
    except (JavaNotFoundError, SparkSetupError) as e:
        raise UsageError(str(e)) from None
    with cluster:
        for path in args.py_files.split(",") if args.py_files else []:
            if not os.path.exists(path):
                raise UsageError(f"--py-files: no such file: {path}")
            cluster.spark.sparkContext.addPyFile(path)
        return serve_topology(cluster, name, topology, config, args.duration, f"as Spark tasks ({cluster.master})",
                              mode=f"spark {cluster.master}")


def cmd_plan(args: argparse.Namespace) -> int:
    _, topology, config = _file_topology(args)
    assignment = assign(topology, merged_config(config))
    for worker in assignment.workers:
        print(f"worker {worker.index} (port {worker.port}): {len(worker.executors)} executors")
        for executor in worker.executors:
            print(f"  executor {executor.component:<20} tasks {list(executor.tasks)}")
    return 0


def _uptime(secs: float) -> str:
    """``1d 2h 3m 4s``, from the first unit that is not zero (Storm UI's format)."""
    left = int(secs)
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if left >= size or parts:
            parts.append(f"{left // size}{unit}")
            left %= size
    return " ".join([*parts, f"{left}s"])


def cmd_list(args: argparse.Namespace) -> int:
    entries = control.running_topologies()
    if not entries:
        print("no topologies running")
        return 0
    rows = [("name", "status", "mode", "uptime", "pid")]
    for entry in entries:
        try:
            info = control.request(entry.name, {"op": "info"})["info"]
            status, uptime = info["status"], info["uptime_secs"]
        except NotAliveError:  # it stopped since the registry was read
            continue
        except ControlError:  # being submitted or stopped, or not answering: the registry still knows
            status, uptime = "?", time.time() - entry.started
        rows.append((entry.name, status, entry.mode, _uptime(uptime), str(entry.pid)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    control.lookup(args.name)  # an unknown name fails before the message below
    wait = "the topology's topology.message.timeout.secs" if args.wait is None else f"{args.wait:g}s"
    print(f"squall: killing {args.name!r}: deactivating its spouts, waiting {wait}, then stopping it",
          file=sys.stderr)
    control.kill(args.name, args.wait)
    print(f"squall: killed topology {args.name!r}", file=sys.stderr)
    return 0


def cmd_activate(args: argparse.Namespace) -> int:
    control.request(args.name, {"op": "activate"})
    print(f"squall: activated topology {args.name!r}", file=sys.stderr)
    return 0


def cmd_deactivate(args: argparse.Namespace) -> int:
    control.request(args.name, {"op": "deactivate"})
    print(f"squall: deactivated topology {args.name!r}", file=sys.stderr)
    return 0


def _seconds(text: str) -> float:
    try:
        secs = float(text)
    except ValueError:
        secs = math.nan
    if not (math.isfinite(secs) and secs >= 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return secs


FILE_HELP = ("a Python file defining a module-level 'topology' (and optional 'config'), or one squall.Topology "
             "subclass")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="squall", description="Storm topologies in Python.")
    parser.add_argument("--version", action="version", version=f"squall {squall.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a topology on this machine")
    run.add_argument("file", help=FILE_HELP)
    run.add_argument("--name", help="topology name (default: the file's name)")
    run.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    run.add_argument("--in-process", action="store_true",
                     help="run every worker in this process (threads only; for debugging) instead of one "
                          "process per worker")
    run.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key (value read as JSON if it parses)")
    run.set_defaults(func=cmd_run)
    submit = sub.add_parser("submit", help="run a topology on Spark (the driver is this process)")
    submit.add_argument("file", help=FILE_HELP)
    submit.add_argument("--master", help="Spark master URL (default: local[*], Spark embedded in this process)")
    submit.add_argument("--name", help="topology name (default: the file's name)")
    submit.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    submit.add_argument("--py-files", metavar="FILES",
                        help="comma-separated .py/.zip/.egg files the executors' Python needs (as spark-submit's)")
    submit.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="spark.KEY=VALUE",
                        help="a Spark setting")
    submit.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="override a topology config key (value read as JSON if it parses)")
    submit.set_defaults(func=cmd_submit)
    plan = sub.add_parser("plan", help="print the workers, executors and tasks a topology gets")
    plan.add_argument("file", help=FILE_HELP)
    plan.set_defaults(name=None)
    plan.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE")
    plan.set_defaults(func=cmd_plan)
    sub.add_parser("list", help="list the topologies running on this machine").set_defaults(func=cmd_list)
    kill = sub.add_parser("kill", help="kill a running topology (deactivate its spouts, wait, stop it)")
    kill.add_argument("name")
    kill.add_argument("-w", "--wait", type=_seconds, metavar="SECS",
                      help="seconds between deactivating the spouts and stopping the workers, for pending "
                           "tuples to complete (default: the topology's topology.message.timeout.secs)")
    kill.set_defaults(func=cmd_kill)
    activate = sub.add_parser("activate", help="activate a running topology's spouts")
    activate.add_argument("name")
    activate.set_defaults(func=cmd_activate)
    deactivate = sub.add_parser("deactivate", help="deactivate a running topology's spouts (next_tuple is "
                                                   "no longer called; pending tuples still complete)")
    deactivate.add_argument("name")
    deactivate.set_defaults(func=cmd_deactivate)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ValueError, NotAliveError, ControlError) as e:
        print(f"squall: error: {e}", file=sys.stderr)
        return 2
    except TopologySetupError as e:
        print(f"squall: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
