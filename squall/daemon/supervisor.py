"""The topology master and local supervisor: Nimbus and the Supervisor on one machine.

For one topology, :class:`ProcessSupervisor` runs in the submitting process and

* starts one worker process per worker slot (:mod:`squall.daemon.worker_process`), hands
  each the pickled topology and its assignment, and tells every worker where the others
  listen;
* collects heartbeats (with figures and errors) every ``worker.heartbeat.frequency.secs``;
* restarts, with the same assignment, a worker that exits (``kill -9`` included) or stays
  silent for ``supervisor.worker.timeout.secs``; the other workers reconnect to it;
* gives up on a worker that cannot start (at submission: at once, raising the cause;
  later: after 3 failed starts in a row, recording the cause as an error);
* relays activate/deactivate/kill, and on kill waits for every worker process to exit
  (killing it after a grace period), so that none is left behind;
* copies each worker's output to ``<log dir>/worker-N.log`` and to its own stdout.

All ZeroMQ traffic with the workers goes through one ROUTER socket owned by the master
thread; API calls reach that thread through a command queue.
"""

from __future__ import annotations

import collections
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import cloudpickle
import msgpack
import zmq

from squall.cluster_state import TopologyState
from squall.errors import TopologySetupError
from squall.messaging.zmq_transport import HOST
from squall.scheduler import Assignment
from squall.topology import Topology

log = logging.getLogger("squall.supervisor")

MAX_FAILED_STARTS = 3
_POLL_SECS = 0.02
_KILL_GRACE_SECS = 10.0


def _relay_output(stream: Any, log_path: str) -> None:
    """Copy a worker's output to its log file and to this process's stdout, line by line
    (what components print shows where the user ran the topology, as with threads)."""
    with stream, open(log_path, "ab") as log_file:
        for line in iter(stream.readline, b""):
            log_file.write(line)
            log_file.flush()
            try:
                sys.stdout.write(line.decode(errors="replace"))
                sys.stdout.flush()
            except Exception:  # noqa: BLE001 - stdout closed: keep draining, or the worker would block
                pass


class WorkerStartError(TopologySetupError):
    """A worker process could not start; the message holds the cause."""


class _Slot:
    """One worker slot and the process currently filling it."""

    def __init__(self, index: int, assigned_port: int, log_path: str) -> None:
        self.index = index
        self.assigned_port = assigned_port
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.bp_port = 0
        self.ready = False
        self.given_up = False
        self.failed_starts = 0
        self.started_at = 0.0
        self.last_heartbeat = 0.0
        self.snapshots: list[dict[str, Any]] = []
        self.setup_error: str | None = None
        self.restarts = 0

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""


class ProcessSupervisor:
    def __init__(self, name: str, topology: Topology, conf: dict[str, Any], assignment: Assignment,
                 state: TopologyState, active: bool = True) -> None:
        self.name = name
        self._topology = topology
        self._conf = conf
        self._assignment = assignment
        self._state = state
        self._active = active
        self._context = zmq.Context()
        self._router = self._context.socket(zmq.ROUTER)
        self._router.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a restarted worker takes over its identity
        self._router.setsockopt(zmq.LINGER, 0)
        self.address = f"tcp://{HOST}:{self._router.bind_to_random_port(f'tcp://{HOST}')}"
        self.log_dir = tempfile.mkdtemp(prefix=f"squall-{name}-")
        self._slots = [
            _Slot(w.index, w.port, os.path.join(self.log_dir, f"worker-{w.index}.log")) for w in assignment.workers
        ]
        self._commands: collections.deque[tuple[int | None, dict[str, Any]]] = collections.deque()
        self._stopping = False
        self._starting = True
        self._thread = threading.Thread(target=self._loop, name=f"master-{name}", daemon=True)

    # -- API (any thread) -------------------------------------------------------------------

    def start(self) -> None:
        """Start every worker process; return once all are ready. Raises WorkerStartError
        with the cause (after stopping everything) if one cannot start."""
        for slot in self._slots:
            self._spawn(slot)
        self._thread.start()
        deadline = time.monotonic() + self._conf["supervisor.worker.start.timeout.secs"] + 5
        while not all(s.ready for s in self._slots):
            failed = next((s for s in self._slots if s.given_up), None)
            if failed is not None or time.monotonic() > deadline:
                cause = failed.setup_error if failed is not None else "timed out"
                self.stop()
                raise WorkerStartError(f"topology {self.name!r}: worker {(failed or self._slots[0]).index} "
                                       f"could not start: {cause}")
            time.sleep(0.01)
        self._starting = False

    def set_active(self, active: bool) -> None:
        self._active = active
        self._commands.append((None, {"type": "activate" if active else "deactivate"}))

    def stop(self) -> None:
        """Tell every worker to stop, wait for the processes (killing stragglers), stop the master."""
        self._stopping = True
        self._commands.append((None, {"type": "kill"}))
        deadline = time.monotonic() + _KILL_GRACE_SECS
        for slot in self._slots:
            if slot.proc is None:
                continue
            try:
                slot.proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %d (pid %d) did not stop; killing it", slot.index, slot.proc.pid)
                slot.proc.kill()
                slot.proc.wait()
        if self._thread.is_alive():
            self._thread.join()
        self._router.close(linger=0)
        self._context.term()

    def workers_info(self) -> list[dict[str, Any]]:
        return [
            {
                "port": slot.port or slot.assigned_port,
                "pid": slot.proc.pid if slot.proc is not None else None,
                "restarts": slot.restarts,
                "executors": [{"component": e.component, "tasks": list(e.tasks)}
                              for e in self._assignment.workers[slot.index].executors],
            }
            for slot in self._slots
        ]

    def executor_snapshots(self) -> list[tuple[str, dict[str, Any]]]:
        return [(e["component"], e["stats"]) for slot in self._slots for e in slot.snapshots]

    # -- the master thread -------------------------------------------------------------------

    def _spawn(self, slot: _Slot) -> None:
        env = dict(os.environ)
        # the worker must import what this process imported (squall, the user's modules)
        paths = [os.path.abspath(p or os.curdir) for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        slot.proc = subprocess.Popen(
            [sys.executable, "-m", "squall.daemon.worker_process", "--master", self.address,
             "--worker", str(slot.index)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
        )
        threading.Thread(target=_relay_output, args=(slot.proc.stdout, slot.log_path),
                         name=f"worker-{slot.index}-output", daemon=True).start()
        slot.ready, slot.port, slot.bp_port = False, 0, 0
        slot.started_at = time.monotonic()
        slot.setup_error = None

    def _send(self, index: int, message: dict[str, Any]) -> None:
        self._router.send_multipart([str(index).encode(), msgpack.packb(message, use_bin_type=True)])

    def _loop(self) -> None:
        while True:
            if self._router.poll(_POLL_SECS * 1000):
                while True:
                    try:
                        identity, data = self._router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._handle(self._slots[int(identity)], msgpack.unpackb(data, raw=False))
            while self._commands:
                target, message = self._commands.popleft()
                for slot in self._slots if target is None else [self._slots[target]]:
                    self._send(slot.index, message)
            if self._stopping:
                if all(s.proc is None or s.proc.poll() is not None for s in self._slots):
                    return
                continue
            self._supervise()

    def _handle(self, slot: _Slot, message: dict[str, Any]) -> None:
        kind = message["type"]
        if kind == "hello":
            payload = cloudpickle.dumps((self.name, self._topology, self._conf, self._assignment, self._active))
            self._send(slot.index, {"type": "bootstrap", "payload": payload})
        elif kind == "bound":
            slot.port, slot.bp_port = message["port"], message["bp_port"]
            if all(s.port for s in self._slots):
                peers = {str(s.index): [s.port, s.bp_port] for s in self._slots}
                for s in self._slots:
                    self._send(s.index, {"type": "peers", "peers": peers})
        elif kind == "ready":
            slot.ready, slot.failed_starts = True, 0
            slot.last_heartbeat = time.monotonic()
        elif kind == "heartbeat":
            slot.last_heartbeat = time.monotonic()
            slot.snapshots = message["executors"]
            for error in message["errors"]:
                self._state.report_error(error["component"], error["task"], error["error"], error["time"])
        elif kind == "setup_error":
            slot.setup_error = message["error"]

    def _supervise(self) -> None:
        now = time.monotonic()
        for slot in self._slots:
            if slot.given_up or slot.proc is None:
                continue
            code = slot.proc.poll()
            if code is None:
                silent_for = now - (slot.last_heartbeat if slot.ready else slot.started_at)
                limit = self._conf["supervisor.worker.timeout.secs" if slot.ready
                                   else "supervisor.worker.start.timeout.secs"]
                if silent_for > limit:
                    log.warning("worker %d (pid %d) silent for %.0fs; killing it", slot.index, slot.proc.pid, silent_for)
                    slot.setup_error = slot.setup_error or f"no heartbeat for {silent_for:.0f}s"
                    slot.proc.kill()
                continue
            self._restart(slot, code)

    def _restart(self, slot: _Slot, code: int) -> None:
        pid = slot.proc.pid
        if not slot.ready:
            slot.failed_starts += 1
            cause = slot.setup_error or f"exited with code {code} before it was ready; its output:\n{slot.log_tail()}"
            if self._starting or slot.failed_starts >= MAX_FAILED_STARTS:
                slot.setup_error, slot.given_up = cause, True
                self._report(slot, f"worker {slot.index} (pid {pid}) cannot start; not restarting it: {cause}")
                return
            self._report(slot, f"worker {slot.index} (pid {pid}) failed to start; restarting it: {cause}")
        else:
            self._report(slot, f"worker {slot.index} (pid {pid}, port {slot.port}) died with exit code {code}; "
                               "restarting it with the same assignment")
        slot.restarts += 1
        slot.snapshots = []
        self._spawn(slot)

    def _report(self, slot: _Slot, text: str) -> None:
        log.warning("topology %r: %s", self.name, text)
        for executor in self._assignment.workers[slot.index].executors:
            if not executor.component.startswith("__"):
                self._state.report_error(executor.component, executor.tasks[0], text)
