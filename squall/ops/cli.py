"""The ``squall`` command: ``run``, ``submit``, ``plan``, ``list``, ``kill``, ``rebalance``,
``monitor``, ``ui``, ``activate``, ``deactivate``, ``stacks``, ``state`` and ``--version``. Its
arguments, and one ``cmd_*`` per subcommand calling the jobs of :mod:`squall.ops.command`.

Bad input — a topology file that does not compile or raises, a bad argument or setting —
ends the command with one line on stderr (``squall: error: ...``, a file's errors naming
``FILE:LINE``) and exit status 2; a topology whose open/prepare raised, with status 1.
``--verbose`` adds the traceback."""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import squall
from squall import compiled
from squall.ops import control
from squall.api.config import Config, checked_config, merged_config, run_log_dir, squall_home, user_config
from squall.api.defaults import DEFAULTS
from squall.api.errors import NotAliveError, TopologySetupError
from squall.api.state.provider import StateProviderError
from squall.api.storm_topology import StormTopology
from squall.cluster.local_cluster import LocalCluster
from squall.cluster.registry import Registry, RegistryError, open_registry
from squall.cluster.spark_master_url import check_spark_master, local_task_slots
from squall.ops.command import UsageError
from squall.ops.command.overrides import parse_overrides, parse_spark_conf
from squall.ops.command.plan import format_plan
from squall.ops.command.serve import serve_topology, serve_ui
from squall.ops.command.state import announce_state, record_rescaled, recorded_settings, settings_of
from squall.ops.command.state_report import state_report
from squall.ops.command.topology_file import load_topology_file
from squall.ops.control import ControlError
from squall.ops.ui.machine import MachineUi
from squall.runtime.assignment import assign
from squall.runtime.info import TopologyInfo
from squall.utils.time import format_duration, parse_seconds


def _file_topology(args: argparse.Namespace) -> tuple[str, StormTopology, dict[str, Any]]:
    """The topology name, topology and config ``args`` give: the user's config
    (:func:`~squall.api.config.user_config`), the file's over it, ``-c`` over both; a checkpointed
    topology's state goes to ``--checkpoint-dir`` (see :func:`_state_location`);
    ``--allow-dropped-state`` sets topology.state.allow.dropped."""
    topology, file_config = load_topology_file(args.file)
    config = {**user_config(), **file_config, **parse_overrides(args.conf)}
    name = args.name or os.path.splitext(os.path.basename(args.file))[0]
    if topology.checkpointed:
        _state_location(name, config, args.checkpoint_dir)
    if getattr(args, "allow_dropped_state", False):
        config[Config.TOPOLOGY_STATE_ALLOW_DROPPED] = True
    return name, topology, config


def _state_location(name: str, config: dict[str, Any], checkpoint_dir: str | None) -> None:
    """Unless the config names a state provider, the state goes to SQLite files under
    ``checkpoint_dir`` (default ``state/NAME`` in :func:`~squall.api.config.squall_home`), so that it
    survives a crash and a topology submitted again under the same name resumes from its last
    commit."""
    if config.get(Config.TOPOLOGY_STATE_PROVIDER) is not None:
        if checkpoint_dir is not None:
            raise UsageError(f"--checkpoint-dir is for the default state provider, but the config sets "
                             f"topology.state.provider={config[Config.TOPOLOGY_STATE_PROVIDER]!r}")
        return
    path = checkpoint_dir or squall_home() / "state" / name
    config[Config.TOPOLOGY_STATE_PROVIDER] = "sqlite"
    config[Config.TOPOLOGY_STATE_PROVIDER_CONFIG] = {"path": os.path.abspath(os.path.expanduser(path))}


def cmd_run(args: argparse.Namespace) -> int:
    name, topology, config = _file_topology(args)
    announce_state(name, topology, config, args.fresh)
    with LocalCluster(processes=not args.in_process) as cluster:
        cluster.on_state_rescaled = record_rescaled
        if args.in_process:
            return serve_topology(cluster, name, topology, config, args.duration, "in this process", "in-process",
                                  args.fail_on_error)
        return serve_topology(cluster, name, topology, config, args.duration, "as processes", "processes",
                              args.fail_on_error)


def cmd_submit(args: argparse.Namespace) -> int:
    name, topology, config = _file_topology(args)
    merged = merged_config(config)
    _check_local_slots(name, args.master, merged[Config.TOPOLOGY_WORKERS])
    announce_state(name, topology, config, args.fresh)
    spark_conf = parse_spark_conf(args.spark_conf)
    py_files = _existing_files("--py-files", args.py_files, lambda f: f)
    if args.archives:
        _existing_files("--archives", args.archives, lambda a: a.split("#", 1)[0])  # FILE#DIR
        spark_conf["spark.archives"] = ",".join(filter(None, (spark_conf.get("spark.archives"), args.archives)))
    try:
        from squall.cluster.spark import JavaNotFoundError, SparkCluster, SparkSetupError
    except ImportError as e:
        raise UsageError(str(e)) from e
    # the JVM's start-up notices and Spark's log: in a file, unless -v (Squall says what fails, in a line)
    logs = run_log_dir(name, merged[Config.TOPOLOGY_LOGS_RETAINED])
    driver_log = None if args.verbose else str(logs / "spark-driver.log")
    if driver_log is not None:
        print(f"squall: Spark's own log goes to {driver_log} (-v shows it here)", file=sys.stderr)
    try:
        cluster = SparkCluster(args.master, spark_conf=spark_conf, driver_log=driver_log)
    except (JavaNotFoundError, SparkSetupError) as e:
        raise UsageError(str(e)) from e
    with cluster:
        cluster.on_state_rescaled = record_rescaled
        if not args.verbose:  # Squall reports what fails itself, in one line; Spark's warnings repeat it at length
            cluster.spark.sparkContext.setLogLevel("ERROR")
        for path in py_files:
            cluster.spark.sparkContext.addPyFile(path)
        return serve_topology(cluster, name, topology, config, args.duration, f"as Spark tasks ({cluster.master})",
                              f"spark {cluster.master}", args.fail_on_error)


def _check_local_slots(name: str, master: str, workers: int) -> None:
    """UsageError, before Spark starts, when a master of this machine has fewer task slots than
    the topology has workers (one slot each: a barrier stage runs all its tasks at once)."""
    slots = local_task_slots(master)
    if slots is not None and slots < workers:
        raise UsageError(f"topology {name!r} needs {workers} Spark task slots (one per worker: topology.workers="
                         f"{workers}) but --master {master} has {slots}; lower topology.workers or give "
                         f"the master more (local[{workers}])")


def _existing_files(option: str, value: str | None, path_of: Callable[[str], str]) -> list[str]:
    """The comma-separated entries of ``option``; UsageError, before Spark starts, naming the
    first whose file (``path_of(entry)``) does not exist."""
    entries = value.split(",") if value else []
    for entry in entries:
        if not os.path.exists(path_of(entry)):
            raise UsageError(f"{option}: no such file: {path_of(entry)}")
    return entries


def cmd_plan(args: argparse.Namespace) -> int:
    name, topology, config = _file_topology(args)
    merged = checked_config(name, config, {cid: spec.conf for cid, spec in topology.components.items()})
    print(format_plan(assign(topology, merged), merged, topology))
    return 0


@contextlib.contextmanager
def _registry(args: argparse.Namespace) -> Iterator[Registry]:
    """The registry of the user's config with ``-c`` over it (:func:`~squall.cluster.registry.open_registry`),
    closed when the command is done."""
    registry = open_registry(merged_config(user_config(), parse_overrides(args.conf)))
    try:
        yield registry
    finally:
        registry.close()


def cmd_list(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        return _list(registry)


def _list(registry: Registry) -> int:
    entries = registry.running()
    if not entries:
        print(f"no topologies running {registry.where}")
        return 0
    rows = [("name", "status", "mode", "uptime", "pid")]
    for entry in entries:
        try:
            info = control.info(registry, entry.name)
            status, uptime = info.status, info.uptime_secs
        except NotAliveError:  # it stopped since the registry was read
            continue
        except ControlError:  # being submitted or stopped, or not answering: the registry still knows
            status, uptime = "?", time.time() - entry.started
        pid = str(entry.pid) if entry.host is None else f"{entry.pid}@{entry.host}"
        rows.append((entry.name, status, entry.mode, format_duration(uptime), pid))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def cmd_kill(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        registry.lookup(args.name)  # an unknown name fails before the message below
        wait = "the topology's topology.message.timeout.secs" if args.wait is None else f"{args.wait:g}s"
        print(f"squall: killing {args.name!r}: deactivating its spouts, waiting {wait}, then stopping it",
              file=sys.stderr)
        control.kill(registry, args.name, args.wait)
    print(f"squall: killed topology {args.name!r}", file=sys.stderr)
    return 0


def cmd_rebalance(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        control.rebalance(registry, args.name, args.wait, args.workers, dict(args.executors) or None)
    print(f"squall: rebalancing topology {args.name!r} (its status is REBALANCING until its workers run again)",
          file=sys.stderr)
    return 0


def cmd_monitor(args: argparse.Namespace) -> int:
    """Storm's ``monitor``: every interval, what a component emitted (or transferred) on a
    stream since the last one, until Ctrl-C or the topology is gone."""
    with _registry(args) as registry:
        return _monitor(args, registry)


def _monitor(args: argparse.Namespace, registry: Registry) -> int:
    info = control.info(registry, args.name)
    components = info.components
    component = args.component or next((c for c, v in components.items() if v.type == "spout"), None)
    if component not in components:
        raise UsageError(f"topology {args.name!r} has no component {component!r} (components: {sorted(components)})")

    def reading(now: TopologyInfo) -> int:
        streams = now.components[component].streams
        if args.stream not in streams:
            raise UsageError(f"component {component!r} of topology {args.name!r} emits on no stream "
                             f"{args.stream!r} (streams: {sorted(streams)})")
        return getattr(streams[args.stream], args.watch)

    parallelism = components[component].parallelism
    print(f"{'topology':<16}{'component':<16}{'parallelism':<13}{'stream':<12}{'time-diff ms':>14}"
          f"{args.watch:>14}{'throughput (Kt/s)':>20}")
    last, then = reading(info), time.monotonic()
    decided = _autoscale_lines(info, 0.0)
    try:
        while True:
            time.sleep(args.interval)
            try:
                latest = control.info(registry, args.name)
                current = reading(latest)
            except (ControlError, NotAliveError):
                print(f"squall: topology {args.name!r} is gone", file=sys.stderr)
                return 0
            decided = _autoscale_lines(latest, decided)
            now = time.monotonic()
            diff = current - last
            print(f"{args.name:<16}{component:<16}{parallelism:<13}{args.stream:<12}{1000 * (now - then):>14.0f}"
                  f"{diff:>14}{diff / (now - then) / 1000:>20.3f}", flush=True)
            last, then = current, now
    except KeyboardInterrupt:
        return 0


def _autoscale_lines(info: TopologyInfo, since: float) -> float:
    """Print the autoscaler's decisions made after ``since`` (epoch seconds); the time of the
    last one printed (``since`` when none is new)."""
    for decision in info.autoscale or []:
        if decision.time > since:
            executors = ", ".join(f"{c}={n}" for c, n in decision.executors.items())
            print(f"autoscaler {time.strftime('%H:%M:%S', time.localtime(decision.time))} {decision.action} to "
                  f"{decision.workers} workers{f' ({executors})' if executors else ''}: {decision.reason}", flush=True)
            since = decision.time
    return since


def cmd_ui(args: argparse.Namespace) -> int:
    """Storm's ``ui``: serve the UI of every topology of the registry until Ctrl-C."""
    token = secrets.token_hex(32)
    port = DEFAULTS[Config.UI_PORT] if args.port is None else args.port
    with _registry(args) as registry:
        ui = serve_ui(lambda p: MachineUi(token, args.host, p, registry), args.host, port, args.port is not None)
        if ui is None:
            raise UsageError(f"the UI cannot listen on {args.host}")
        print(f"squall: UI of the topologies running {registry.where} at {ui.url}/?token={token}; Ctrl-C stops it",
              file=sys.stderr)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass
        finally:
            ui.stop()
    return 0


def cmd_activate(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        control.activate(registry, args.name)
    print(f"squall: activated topology {args.name!r}", file=sys.stderr)
    return 0


def cmd_stacks(args: argparse.Namespace) -> int:
    """Every thread's Python stack in the topology's workers (or one), taken now."""
    port = None
    if args.worker is not None:
        text = args.worker.rsplit(":", 1)[-1]
        if not text.isdigit():
            raise UsageError(f"a worker is its port or host:port, not {args.worker!r}")
        port = int(text)
    with _registry(args) as registry:
        dumps = control.stacks(registry, args.name, port)
    for worker, text in dumps.items():
        print(f"== worker {worker} of topology {args.name!r}\n{text}")
    return 0


def cmd_state(args: argparse.Namespace) -> int:
    """What a stateful topology committed, read with the state settings its last ``run`` /
    ``submit`` recorded, or with a topology file's (``--topology FILE``, its config layered as
    ``squall run`` layers it)."""
    if args.file is None:
        if args.conf or args.checkpoint_dir is not None:
            raise UsageError("-c and --checkpoint-dir go with --topology FILE: without it, the settings "
                             f"the last run of {args.name!r} recorded are used")
        settings = recorded_settings(args.name)
    else:
        settings = settings_of(*_file_topology(args))
    print(state_report(settings, args.component, args.key, args.json))
    return 0


def cmd_deactivate(args: argparse.Namespace) -> int:
    with _registry(args) as registry:
        control.deactivate(registry, args.name)
    print(f"squall: deactivated topology {args.name!r}", file=sys.stderr)
    return 0


# -- arguments ---------------------------------------------------------------------------------


def _positive_seconds(text: str) -> float:
    secs = _seconds(text)
    if secs == 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds > 0, got {text!r}")
    return secs


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"not an integer >= 1: {value!r}")
    return number


def _component_parallelism(value: str) -> tuple[str, int]:
    component, sep, parallelism = value.partition("=")
    if not sep or not component:
        raise argparse.ArgumentTypeError(f"not COMPONENT=PARALLELISM: {value!r}")
    return component, _positive_int(parallelism)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors on one line (``squall run: error: ...``, exit status 2)
    without the usage above it: ``--help`` shows that."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


class _Version(argparse.Action):
    """``--version``: the version and which data path runs (squall.compiled), on one line
    (argparse's own version action wraps it), worked out only when asked."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and which data path runs, and exit")

    def __call__(self, parser: argparse.ArgumentParser, *args: Any) -> NoReturn:
        print(f"squall {squall.__version__}; {compiled.describe()}")
        parser.exit()


def _seconds(text: str) -> float:
    """A number of seconds >= 0 (not NaN nor infinite), for argparse."""
    try:
        return parse_seconds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _spark_master(text: str) -> str:
    """A Spark master URL Spark can run on (:func:`check_spark_master`), for argparse."""
    try:
        return check_spark_master(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


FILE_HELP = ("a Python file defining a module-level 'topology' (and optional 'config'), or one squall.Topology "
             "subclass")
VERBOSE_HELP = "on an error, print its traceback too"
DURATION_HELP = "stop after this many seconds (default: until Ctrl-C)"


FAIL_ON_ERROR_HELP = ("exit 1 if any component reported an error (without it: only if the topology failed, or "
                      "a component did no work: a bolt failed every tuple it got, a spout emitted nothing but "
                      "errors)")
FRESH_HELP = "drop the state a stateful topology of this name committed before (saying what), and start empty"
ALLOW_DROPPED_HELP = ("delete the state of stateful components this version of the topology no longer has "
                      "(refused without it, naming them); the others keep theirs")
CHECKPOINT_DIR_HELP = ("where a topology with stateful components keeps its state (SQLite files; default "
                       "$SQUALL_HOME/state/NAME, else ~/.squall/state/NAME): the same NAME and PATH resume from "
                       "the last commit")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="squall", description="Storm topologies in Python.")
    parser.add_argument("--version", action=_Version)
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    # also after the subcommand (squall run FILE -v); SUPPRESS keeps a subcommand without it
    # from resetting the one given before
    common = _Parser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP)
    sub = parser.add_subparsers(dest="command", required=True)

    # the commands that reach running topologies read the registry of the user's config
    registry = _Parser(add_help=False)
    registry.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                          help="override a key of the user's config (squall.yaml), e.g. storm.zookeeper.servers")

    def subcommand(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, parents=[common])

    def control_command(name: str, summary: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=summary, parents=[common, registry])

    run = subcommand("run", "run a topology on this machine")
    run.add_argument("file", help=FILE_HELP)
    run.add_argument("--name", help="topology name (default: the file's name)")
    run.add_argument("--duration", type=_seconds, metavar="SECS", help=DURATION_HELP)
    run.add_argument("--in-process", action="store_true",
                     help="run every worker in this process (threads only; for debugging) instead of one "
                          "process per worker")
    run.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                     help="override a config key (value read as JSON if it parses)")
    run.add_argument("--checkpoint-dir", metavar="PATH", help=CHECKPOINT_DIR_HELP)
    run.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    run.add_argument("--allow-dropped-state", action="store_true", help=ALLOW_DROPPED_HELP)
    run.add_argument("--fail-on-error", action="store_true", help=FAIL_ON_ERROR_HELP)
    run.set_defaults(func=cmd_run)
    submit = subcommand("submit", "run a topology on Spark (the driver is this process)")
    submit.add_argument("file", help=FILE_HELP)
    submit.add_argument("--master", type=_spark_master, metavar="URL", default="local[*]",
                        help="Spark master URL (default: %(default)s, Spark embedded in this process)")
    submit.add_argument("--name", help="topology name (default: the file's name)")
    submit.add_argument("--duration", type=_seconds, metavar="SECS", help=DURATION_HELP)
    submit.add_argument("--py-files", metavar="FILES",
                        help="comma-separated .py/.zip/.egg files the executors' Python needs (as spark-submit's)")
    submit.add_argument("--archives", metavar="ARCHIVES",
                        help="comma-separated archives (FILE#DIR) unpacked in each executor's working directory, "
                             "as spark-submit's (spark.archives): e.g. a packed virtualenv env.tar.gz#env with "
                             "--conf spark.pyspark.python=./env/bin/python")
    submit.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="spark.KEY=VALUE",
                        help="a Spark setting")
    submit.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                        help="override a topology config key (value read as JSON if it parses)")
    submit.add_argument("--checkpoint-dir", metavar="PATH",
                        help=CHECKPOINT_DIR_HELP + "; on a cluster, a path every executor can reach")
    submit.add_argument("--fresh", action="store_true", help=FRESH_HELP)
    submit.add_argument("--allow-dropped-state", action="store_true", help=ALLOW_DROPPED_HELP)
    submit.add_argument("--fail-on-error", action="store_true", help=FAIL_ON_ERROR_HELP)
    submit.set_defaults(func=cmd_submit)
    plan = subcommand("plan", "print the workers, executors and tasks a topology gets, how its links "
                              "and values are secured, and its configuration with each key's doc")
    plan.add_argument("file", help=FILE_HELP)
    plan.set_defaults(name=None, checkpoint_dir=None)
    plan.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE")
    plan.set_defaults(func=cmd_plan)
    listing = control_command("list", "list the running topologies (of this machine, or of the cluster in ZooKeeper)")
    listing.set_defaults(func=cmd_list)
    kill = control_command("kill", "kill a running topology (deactivate its spouts, wait, stop it)")
    kill.add_argument("name")
    kill.add_argument("-w", "--wait", type=_seconds, metavar="SECS",
                      help="seconds between deactivating the spouts and stopping the workers, for pending "
                           "tuples to complete (default: the topology's topology.message.timeout.secs)")
    kill.set_defaults(func=cmd_kill)
    rebalance = control_command("rebalance", "change a running topology's workers and executors (deactivate its "
                                             "spouts, wait, restart its workers with the new assignment, reactivate)")
    rebalance.add_argument("name")
    rebalance.add_argument("-w", "--wait", type=_seconds, metavar="SECS",
                           help="seconds between deactivating the spouts and stopping the workers (default: the "
                                "topology's topology.message.timeout.secs)")
    rebalance.add_argument("-n", "--num-workers", dest="workers", type=_positive_int, metavar="WORKERS",
                           help="the number of workers")
    rebalance.add_argument("-e", "--executors", action="append", type=_component_parallelism, default=[],
                           metavar="COMPONENT=PARALLELISM",
                           help="a component's executors (at most its tasks, but a stateful bolt's grow its tasks); "
                                "repeatable")
    rebalance.set_defaults(func=cmd_rebalance)
    monitor = control_command("monitor",
                              "print a component's throughput on a stream every interval (Storm's monitor)")
    monitor.add_argument("name")
    monitor.add_argument("-i", "--interval", type=_positive_seconds, default=4.0, metavar="SECS",
                         help="seconds between two lines (default 4, as Storm's)")
    monitor.add_argument("-m", "--component", help="the component to watch (default: the first spout)")
    monitor.add_argument("-s", "--stream", default="default", help="its stream (default: default)")
    monitor.add_argument("-w", "--watch", choices=("emitted", "transferred"), default="emitted",
                         help="what to count (default: emitted)")
    monitor.set_defaults(func=cmd_monitor)
    ui = control_command("ui", "serve Storm UI and its REST API for the running topologies (of this machine, or "
                               "of the cluster in ZooKeeper)")
    ui.add_argument("--host", default=DEFAULTS[Config.UI_HOST], help="address to listen on (default: %(default)s)")
    ui.add_argument("--port", type=int, help=f"port (default: {DEFAULTS['ui.port']}, Storm UI's, else a free one)")
    ui.set_defaults(func=cmd_ui)
    activate = control_command("activate", "activate a running topology's spouts")
    activate.add_argument("name")
    activate.set_defaults(func=cmd_activate)
    deactivate = control_command("deactivate", "deactivate a running topology's spouts (next_tuple is no longer "
                                               "called; pending tuples still complete)")
    deactivate.add_argument("name")
    deactivate.set_defaults(func=cmd_deactivate)
    stacks = control_command("stacks", "print the Python stack of every thread of a running topology's workers "
                                       "(Storm UI's JStack)")
    stacks.add_argument("name")
    stacks.add_argument("worker", nargs="?", help="one worker, as its port or host:port (default: every worker)")
    stacks.set_defaults(func=cmd_stacks)
    state = subcommand("state", "print what a stateful topology committed: its last checkpoint, its stateful "
                                "components' tasks and keys, or a component's values (running or stopped)")
    state.add_argument("name", help="the topology's name, as run or submitted")
    state.add_argument("--component", metavar="C", help="print the keys and values of this stateful component, "
                                                         "task by task")
    state.add_argument("--key", metavar="K", help="with --component: just this key (read as JSON if it parses, "
                                                  "else as a string)")
    state.add_argument("--json", action="store_true", help="print JSON, for scripts")
    state.add_argument("--topology", dest="file", metavar="FILE",
                       help="read the state with this topology file's settings (as squall run takes it) instead "
                            "of those its last run recorded")
    state.add_argument("-c", dest="conf", action="append", default=[], metavar="KEY=VALUE",
                       help="with --topology: override a config key, as the run did")
    state.add_argument("--checkpoint-dir", metavar="PATH", help="with --topology: the run's --checkpoint-dir")
    state.set_defaults(func=cmd_state)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command ``argv`` (default: ``sys.argv[1:]``) and return its exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (UsageError, ValueError, NotAliveError, ControlError, RegistryError) as e:
        return _fail(e, 2, args.verbose)
    except (TopologySetupError, StateProviderError) as e:  # the topology could not start: its state, its open
        return _fail(e, 1, args.verbose)


def _fail(error: Exception, status: int, verbose: bool) -> int:
    """Print ``error`` on one line (after its traceback if ``verbose``) and return ``status``."""
    if verbose:
        traceback.print_exception(error)
        if getattr(error, "details", ""):  # a worker's own traceback
            print(error.details.rstrip(), file=sys.stderr)
    print(f"squall: error: {error}", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
