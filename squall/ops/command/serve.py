"""The serve loop of ``squall run`` and ``squall submit``: a topology kept running, with a
live status line, until it is stopped; then its final summary."""

from __future__ import annotations

import secrets
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from squall.api.config import Config, merged_config
from squall.api.errors import error_headline
from squall.api.storm_topology import StormTopology
from squall.cluster.nimbus import FAILED, Nimbus
from squall.cluster.registry import open_registry
from squall.ops.command.report import format_summary, status_line
from squall.ops.control import ControlServer
from squall.ops.ui.server import UiApp, UiServer, ui_token
from squall.runtime.info import TopologyInfo


def serve_topology(cluster: Nimbus, name: str, topology: StormTopology, config: dict[str, Any],
                   duration: float | None, where: str, mode: str | None = None, fail_on_error: bool = False) -> int:
    """Submit ``topology`` to ``cluster`` and keep it running, with a live status line, until
    Ctrl-C, SIGTERM, ``duration`` or ``squall kill`` from another terminal; then kill it and
    print its summary. ``where`` says how it runs (shown after the workers), ``mode`` says it
    in a word for ``squall list`` (default: ``where``).

    The summary is final: taken once every worker has stopped
    (:meth:`~squall.cluster.nimbus.Nimbus.kill_topology_and_get_info`), it counts what the
    executors did up to their close/cleanup, not only what their last heartbeat said.

    While it runs, the topology is registered for ``squall list`` / ``kill`` / ``activate`` /
    ``deactivate`` (:mod:`squall.ops.control`) in the registry its config names (this machine's, or
    ZooKeeper's, where its state is also published every second: :mod:`squall.cluster.registry`);
    registering comes before submitting, so a name another process runs fails with
    ``AlreadyAliveError`` and nothing starts. The entry is removed on every way out, and a
    ``squall kill`` returns once the summary is printed.

    The first error of each kind (exception type) in each component is printed as it is
    reported; the status line counts them all.

    Returns 1 when the topology FAILED (the cluster gave up restarting its workers), when a
    component did no work (a bolt failed every tuple it got, a spout emitted nothing and
    reported errors: :func:`did_no_work`), or, with ``fail_on_error``, when any error was
    reported; else 0."""
    tty = sys.stderr.isatty()
    stop = {"signal": False}

    def on_signal(signum: int, frame: Any) -> None:
        stop["signal"] = True

    merged = merged_config(config)
    registry = open_registry(merged)
    previous = signal.signal(signal.SIGTERM, on_signal)
    try:
        with ControlServer(cluster, name, mode or where, merged[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS], registry,
                           merged[Config.TOPOLOGY_MESSAGING_SECURE], merged[Config.STORM_LOCAL_HOSTNAME]) as server:
            cluster.submit_topology(name, config, topology)
            workers = ", ".join(f"{w.port} (pid {w.pid})" for w in cluster.topology_info(name).workers)
            print(f"squall: topology {name!r} running, workers {where} on ports {workers}; Ctrl-C stops it",
                  file=sys.stderr)
            ui, printed = None, ErrorPrinter()
            started = last_status = last_published = time.monotonic()
            try:
                ui = _start_ui(cluster, server, merged, explicit_port=Config.UI_PORT in config)
                while not stop["signal"] and not server.kill_requested.is_set():
                    if duration is not None and time.monotonic() - started >= duration:
                        break
                    server.kill_requested.wait(0.2)
                    info = cluster.topology_info(name)
                    if info.status == FAILED:
                        break
                    printed.new_kinds(info, tty)
                    if time.monotonic() - last_published >= 1.0:
                        last_published = time.monotonic()
                        registry.publish_state(name, info)
                    if time.monotonic() - last_status >= (1.0 if tty else 10.0):
                        last_status = time.monotonic()
                        line = status_line(info)
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
            print(f"squall: stopping {name!r}", file=sys.stderr)
            if ui is not None:
                ui.stop()
            info = cluster.kill_topology_and_info(name, wait_secs=0)
            printed.new_kinds(info, tty=False)  # those reported since the last look
            print(format_summary(info), file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, previous)
        registry.close()
    return _exit_status(name, info, fail_on_error)


def _exit_status(name: str, info: TopologyInfo, fail_on_error: bool) -> int:
    """1, with the reason on stderr, for a topology that FAILED, a component that did no work
    (:func:`did_no_work`), or any error with ``fail_on_error``; else 0."""
    errors = sum(c.error_count for c in info.components.values())
    idle = did_no_work(info)
    if info.status == FAILED:
        why = "FAILED; see the last error above"
    elif idle:
        why = f"did no work: {', '.join(idle)}; see the errors above"
    elif fail_on_error and errors:
        why = f"reported {errors:,} error(s) (--fail-on-error); see above"
    else:
        return 0
    print(f"squall: topology {name!r} {why}", file=sys.stderr)
    return 1


def did_no_work(info: TopologyInfo) -> list[str]:
    """A phrase for each component of ``info`` that did no work at all, naming it and saying
    what it did instead, in the topology's order: one that failed every tuple it got (some
    failed, none acked), and a user spout that emitted nothing and reported errors (its
    ``next_tuple`` raised on every call, say, or never returned). A spout that emitted nothing
    and reported nothing is not in it: an empty source is no error. [] when none."""
    idle = []
    for cid, c in info.components.items():
        if c.failed > 0 and c.acked == 0:
            idle.append(f"{cid!r} failed every tuple it got")
        elif c.type == "spout" and not cid.startswith("__") and c.emitted == 0 and c.error_count > 0:
            idle.append(f"{cid!r} emitted nothing and reported {c.error_count:,} error(s)")
    return idle


class ErrorPrinter:
    """Prints each component's first error of each kind (its exception type) once, as soon as
    the topology's info shows it: the rest are counted in the status line and the summary."""

    def __init__(self) -> None:
        self._seen: set[tuple[str, str]] = set()

    def new_kinds(self, info: TopologyInfo, tty: bool) -> None:
        for cid, component in info.components.items():
            for error in component.errors:
                kind = _kind(error.error)
                if (cid, kind) not in self._seen:
                    self._seen.add((cid, kind))
                    print(("\r\x1b[K" if tty else "") + f"squall: error in {cid!r} (task {error.task}); "
                          f"further ones of this kind are counted:\n{error.error.rstrip()}", file=sys.stderr)


def _kind(text: str) -> str:
    """An error's kind: the exception type of its headline."""
    return error_headline(text).split(":", 1)[0]


def _start_ui(cluster: Nimbus, control: ControlServer, conf: dict[str, Any], explicit_port: bool) -> UiApp | None:
    """Serve Storm UI's REST API for the topology (``ui.host``, ``ui.port``; when the port is
    taken, a free one, said only if the config asked for that port) and print its URL with the
    token; None if it cannot be served."""
    keys = control.keys
    token = ui_token(keys.secret) if keys is not None else secrets.token_hex(32)
    ui = serve_ui(lambda port: UiServer(cluster, token, host=conf[Config.UI_HOST], port=port,
                                        kill=lambda _name, wait: control.request_kill(wait)),
                  conf[Config.UI_HOST], conf[Config.UI_PORT], explicit_port)
    if ui is not None:
        control.publish_ui(ui.url, token)  # for squall ui
        print(f"squall: UI and REST API at {ui.url}/?token={token}", file=sys.stderr)
    return ui


def serve_ui(make: Callable[[int], UiApp], host: str, port: int, explicit: bool) -> UiApp | None:
    """``make(port).start()``, on ``port`` or, when it is taken, on a free one; a line on stderr
    when the UI cannot have a port it was given explicitly (``explicit``), or cannot listen at
    all (then None)."""
    for attempt in dict.fromkeys((port, 0)):
        try:
            return make(attempt).start()
        except OSError as e:
            if explicit or attempt == 0:
                print(f"squall: the UI cannot listen on {host}:{attempt} ({e.strerror})", file=sys.stderr)
    return None


def _wait_killed(cluster: Nimbus, name: str, wait_secs: float, stop: dict[str, bool]) -> None:
    """The first half of ``storm kill -w``: deactivate the spouts and give the pending tuple
    trees ``wait_secs`` to complete. Done here rather than by ``kill_topology(name, wait_secs)``
    so that Ctrl-C or SIGTERM can cut the wait short: ``kill_topology`` sleeps it through."""
    waiting = f"; spouts deactivated, waiting {wait_secs:g}s for pending tuples" if wait_secs > 0 else ""
    print(f"squall: {name!r} killed by squall kill{waiting}", file=sys.stderr)
    cluster.deactivate(name)
    deadline = time.monotonic() + wait_secs
    while not stop["signal"] and time.monotonic() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.monotonic())))

