"""The ``squall`` command: ``run``, ``plan`` and ``--version``."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
import time
from typing import Any

import cloudpickle

import squall
from squall.config import merged_config
from squall.local_cluster import LocalCluster
from squall.scheduler import assign
from squall.topology import Topology


class UsageError(Exception):
    pass


def load_topology_file(path: str) -> tuple[Topology, dict[str, Any]]:
    """Run ``path`` and return its module-level ``topology`` and ``config`` (optional)."""
    if not os.path.isfile(path):
        raise UsageError(f"no such file: {path}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
    name = "squall_topology_" + "".join(c if c.isalnum() else "_" for c in os.path.splitext(os.path.basename(path))[0])
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # the file's components travel by value, as Storm serializes components: workers
    # need not be able to import the file
    cloudpickle.register_pickle_by_value(module)
    spec.loader.exec_module(module)
    namespace = vars(module)
    topology = namespace.get("topology")
    if not isinstance(topology, Topology):
        raise UsageError(
            f"{path} must define a module-level 'topology' = TopologyBuilder(...).create_topology() "
            f"(found {type(topology).__name__})"
        )
    config = namespace.get("config") or {}
    if not isinstance(config, dict):
        raise UsageError(f"{path}: 'config' must be a dict or squall.Config, got {type(config).__name__}")
    return topology, dict(config)


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


def serve_topology(cluster: Any, name: str, topology: Topology, config: dict[str, Any],
                   duration: float | None, where: str) -> int:
    """Submit ``topology`` to ``cluster`` and keep it running, with a live status line, until
    Ctrl-C, SIGTERM or ``duration``; then kill it and print its summary. ``where`` says how
    it runs (shown after the workers). Shared by ``squall run`` and ``squall submit``."""
    tty = sys.stderr.isatty()
    stop = {"signal": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["signal"] = True

    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        cluster.submit_topology(name, config, topology)
        workers = ", ".join(f"{w['port']} (pid {w['pid']})" for w in cluster.get_topology_info(name)["workers"])
        print(f"squall: topology {name!r} running, workers {where} on ports {workers}; Ctrl-C stops it",
              file=sys.stderr)
        started = last_status = time.monotonic()
        try:
            while not stop["signal"]:
                if duration is not None and time.monotonic() - started >= duration:
                    break
                time.sleep(0.2)
                if time.monotonic() - last_status >= (1.0 if tty else 10.0):
                    last_status = time.monotonic()
                    line = _totals(cluster.get_topology_info(name))
                    print(("\r" + line + "\x1b[K") if tty else line, end="" if tty else "\n",
                          file=sys.stderr, flush=True)
        except KeyboardInterrupt:
            pass
        info = cluster.get_topology_info(name)
        if tty:
            print(file=sys.stderr)
        print(f"squall: stopping {name!r}", file=sys.stderr)
        cluster.kill_topology(name, wait_secs=0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    print(format_summary(info), file=sys.stderr)
    return 0


def _file_topology(args: argparse.Namespace) -> tuple[str, Topology, dict[str, Any]]:
    topology, config = load_topology_file(args.file)
    config.update(parse_overrides(args.conf))
    return args.name or os.path.splitext(os.path.basename(args.file))[0], topology, config


def cmd_run(args: argparse.Namespace) -> int:
    name, topology, config = _file_topology(args)
    with LocalCluster(processes=not args.in_process) as cluster:
        where = "in this process" if args.in_process else "as processes"
        return serve_topology(cluster, name, topology, config, args.duration, where)


def cmd_plan(args: argparse.Namespace) -> int:
    _, topology, config = _file_topology(args)
    assignment = assign(topology, merged_config(config))
    for worker in assignment.workers:
        print(f"worker {worker.index} (port {worker.port}): {len(worker.executors)} executors")
        for executor in worker.executors:
            print(f"  executor {executor.component:<20} tasks {list(executor.tasks)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="squall", description="Storm topologies in Python.")
    parser.add_argument("--version", action="version", version=f"squall {squall.__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a topology on this machine")
    run.add_argument("file", help="a Python file defining a module-level 'topology' (and optional 'config')")
    run.add_argument("--name", help="topology name (default: the file's name)")
    run.add_argument("--duration", type=float, help="stop after this many seconds (default: until Ctrl-C)")
    run.add_argument("--in-process", action="store_true",
                     help="run every worker in this process (threads only; for debugging) instead of one "
                          "process per worker")
    run.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key (value read as JSON if it parses)")
    run.set_defaults(func=cmd_run)
    plan = sub.add_parser("plan", help="print the workers, executors and tasks a topology gets")
    plan.add_argument("file")
    plan.set_defaults(name=None)
    plan.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE")
    plan.set_defaults(func=cmd_plan)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ValueError) as e:
        print(f"squall: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
