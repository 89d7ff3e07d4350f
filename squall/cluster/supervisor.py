"""The local supervisor: launches a topology's workers as OS processes of this machine.

:class:`ProcessSupervisor` is the :class:`~squall.cluster.master.TopologyMaster` of
``LocalCluster(processes=True)`` and ``squall run``. It

* starts one worker process per worker slot (``python -m squall.cluster.worker_process``),
  writing the topology's link keys to its stdin (not its environment or command line, which
  other processes and the worker's children could see);
* restarts, with the same assignment, a worker that exits (``kill -9`` included) or stays
  silent for ``supervisor.worker.timeout.secs``; the other workers reconnect to it;
* gives up on a worker that cannot start (at submission: at once, raising the cause;
  later: after 3 failed starts in a row, recording the cause as an error);
* on kill, waits for every worker process to exit (killing it after a grace period), so
  that none is left behind;
* copies each worker's output to ``<log dir>/worker-N.log`` and to its own stdout.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from squall.api.config import Config, run_log_dir
from squall.api.storm_topology import StormTopology
from squall.cluster.master import TopologyMaster, WorkerSlot
from squall.runtime.assignment import Assignment
from squall.runtime.cluster_state import TopologyState
from squall.runtime.messaging.security import keys_json

log = logging.getLogger("squall.supervisor")

MAX_FAILED_STARTS = 3


# How long a stopped worker's output may take to reach its log.
_RELAY_JOIN_SECS = 2.0


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


def _log_tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            return b"".join(f.readlines()[-lines:]).decode(errors="replace")
    except OSError:
        return ""


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a worker process and every process it started (its process group)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # gone already


class ProcessSupervisor(TopologyMaster):
    def __init__(self, name: str, topology: StormTopology, conf: dict[str, Any], assignment: Assignment,
                 state: TopologyState) -> None:
        super().__init__(name, topology, conf, assignment, state)
        self.log_dir = str(run_log_dir(name, conf[Config.TOPOLOGY_LOGS_RETAINED]))
        self._relays: list[threading.Thread] = []  # copying the workers' output to the logs
        self._procs: dict[int, subprocess.Popen] = {}
        self._failed_starts = [0] * len(self.slots)
        self._given_up: set[int] = set()

    def _log_path(self, slot: WorkerSlot) -> str:
        return os.path.join(self.log_dir, f"worker-{slot.index}.log")

    def _launch(self, slots: list[WorkerSlot]) -> None:
        env = dict(os.environ)
        # the worker must import what this process imported (squall, the user's modules)
        paths = [os.path.abspath(p or os.curdir) for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        for slot in slots:
            # a process group of its own: killing a worker kills what it started too (a hung
            # multilang subprocess would outlive it otherwise)
            proc = subprocess.Popen(
                [sys.executable, "-m", "squall.cluster.worker_process", "--master", self.address,
                 "--worker", str(slot.index)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                start_new_session=True,
            )
            try:
                proc.stdin.write(f"{keys_json(self.keys)}\n".encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass  # it died at once: supervised like any worker that exits
            self._procs[slot.index] = proc
            self.renew(slot, proc.pid)
            relay = threading.Thread(target=_relay_output, args=(proc.stdout, self._log_path(slot)),
                                     name=f"worker-{slot.index}-output", daemon=True)
            relay.start()
            self._relays.append(relay)

    def _gone(self) -> bool:
        return all(p.poll() is not None for p in self._procs.values())

    def _wait_stopped(self, deadline: float) -> None:
        for index, proc in self._procs.items():
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("worker %d (pid %d) did not stop; killing it", index, proc.pid)
                _kill_group(proc)
                proc.wait()
        until = time.monotonic() + _RELAY_JOIN_SECS
        for relay in self._relays:  # the workers' last output, into their logs
            relay.join(max(0.0, until - time.monotonic()))
        # the logs that stayed empty go (with their directory, if all did): no litter per run
        for entry in os.listdir(self.log_dir):
            path = os.path.join(self.log_dir, entry)
            if os.path.getsize(path) == 0:
                os.remove(path)
        try:
            os.rmdir(self.log_dir)
        except OSError:
            pass  # a log with output stays for the user to read

    def _supervise(self, now: float) -> None:
        for slot in self.slots:
            if slot.index in self._given_up:
                continue
            proc = self._procs[slot.index]
            code = proc.poll()
            if code is None:
                silent_for = slot.silent_for(now)
                if silent_for > self.silence_limit(slot):
                    log.warning("worker %d (pid %d) silent for %.0fs; killing it", slot.index, proc.pid, silent_for)
                    slot.setup_error = slot.setup_error or f"no heartbeat for {silent_for:.0f}s"
                    _kill_group(proc)
                continue
            self._restart(slot, code)

    def _restart(self, slot: WorkerSlot, code: int) -> None:
        pid = slot.pid
        if not slot.ready:
            self._failed_starts[slot.index] += 1
            cause = (slot.setup_error
                     or f"exited with code {code} before it was ready; its output:\n{_log_tail(self._log_path(slot))}")
            # killed by a signal (kill -9, the OOM killer) and silent about why: not the topology's
            # fault, so restarted even while the topology starts (a rebalance's new workers too)
            killed = code < 0 and not slot.setup_error
            if self.starting and not killed or self._failed_starts[slot.index] >= MAX_FAILED_STARTS:
                self._given_up.add(slot.index)
                if self.starting:  # the submission fails with it: said once, there
                    self.failure = f"worker {slot.index} could not start: {cause}"
                else:
                    self.report(slot, f"worker {slot.index} (pid {pid}) cannot start; not restarting it: {cause}",
                                slot.setup_trace)
                return
            self.report(slot, f"worker {slot.index} (pid {pid}) failed to start; restarting it: {cause}",
                        slot.setup_trace)
        else:
            self._failed_starts[slot.index] = 0
            self.report(slot, f"worker {slot.index} (pid {pid}, port {slot.port}) died with exit code {code}; "
                              "restarting it with the same assignment")
        slot.restarts += 1
        self._launch([slot])
