"""A multi-host test bed on one machine: hosts are Linux network namespaces.

Each host is a namespace with one interface (``eth0``) holding a private address,
10.77.0.(i+1)/24; the hosts' interfaces are the ends of veth pairs whose other ends sit on a
bridge in a namespace of its own. Nothing is created in the root namespace (each pair is
made inside the bridge's namespace, its host end moved straight to the host), so the bed's
addresses exist only inside it and nothing can leave the machine. :meth:`Bed.close` kills
every process the bed started (by process group), then deletes the namespaces.

Needs root (``ip netns``, from iproute2). :func:`require_bed` skips a test without it, and
fails instead under ``CI=true``: CI runs as root and must never skip these tests.

A fault: :meth:`Bed.kill_host` kills -9 everything running in a host's namespace (as if the
machine died).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence

import pytest

SUBNET = "10.77.0"
CLONE_NEWNET = 0x40000000  # setns(2): the network namespace


def bed_unavailable() -> str | None:
    """Why a bed cannot be built here, or None."""
    if shutil.which("ip") is None:
        return "the bed needs iproute2's ip (Debian package iproute2)"
    if os.geteuid() != 0:
        return "the bed needs root (ip netns add)"
    return None


def require_bed() -> None:
    """Skip the calling test when no bed can be built; under CI=true, fail instead."""
    why = bed_unavailable()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI must run the multi-host tests, but {why}")
        pytest.skip(why)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Bed:
    """``hosts`` hosts on one bridge; host ``i`` has address :meth:`address` (i)."""

    def __init__(self, hosts: int) -> None:
        tag = uuid.uuid4().hex[:6]
        self.bridge = f"sqbed-{tag}-br"
        self.hosts = [f"sqbed-{tag}-h{i}" for i in range(hosts)]
        self._processes: list[subprocess.Popen] = []
        self._made: list[str] = []
        try:
            self._build()
        except BaseException:
            self.close()
            raise

    def _build(self) -> None:
        _ip("netns", "add", self.bridge)
        self._made.append(self.bridge)
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts):
            _ip("netns", "add", host)
            self._made.append(host)
            _ip("-n", host, "link", "set", "lo", "up")
            port = f"p{i}"
            _ip("-n", self.bridge, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", host)
            _ip("-n", self.bridge, "link", "set", port, "master", "br0", "up")
            _ip("-n", host, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
            _ip("-n", host, "link", "set", "eth0", "up")

    @staticmethod
    def address(i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def start(self, host: int, argv: Sequence[str], env: dict[str, str] | None = None,
              **popen_args) -> subprocess.Popen:
        """Start ``argv`` on host ``host`` in a process group of its own (killed by :meth:`close`)."""
        process = subprocess.Popen(["ip", "netns", "exec", self.hosts[host], *argv],
                                   env={**os.environ, **(env or {})}, start_new_session=True, **popen_args)
        self._processes.append(process)
        return process

    def run(self, host: int, argv: Sequence[str], timeout: float = 30) -> subprocess.CompletedProcess:
        """Run ``argv`` on host ``host`` to its end; its output as text."""
        return subprocess.run(["ip", "netns", "exec", self.hosts[host], *argv], capture_output=True, text=True,
                              timeout=timeout)

    def enter(self, host: int) -> None:
        """Move the calling thread into host ``host``'s namespace: what it starts from now on
        (threads, processes, sockets) runs there. Call it from the main thread before starting
        others (a harness that must reach the bed's addresses)."""
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(f"/var/run/netns/{self.hosts[host]}", os.O_RDONLY)
        try:
            if libc.setns(fd, CLONE_NEWNET) != 0:
                errno = ctypes.get_errno()
                raise OSError(errno, f"setns into {self.hosts[host]}: {os.strerror(errno)}")
        finally:
            os.close(fd)

    def pids(self, host: int) -> list[int]:
        """Every process running in host ``host``'s namespace."""
        out = subprocess.run(["ip", "netns", "pids", self.hosts[host]], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def kill_host(self, host: int) -> None:
        """kill -9 everything on host ``host`` (its network stays: the machine died, not the link)."""
        for _ in range(10):  # a dying process's children may show up once
            pids = [p for p in self.pids(host) if p != os.getpid()]  # not a caller that entered the host
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.1)

    def cut(self, host: int) -> None:
        """Cut host ``host``'s link to the bridge: its processes run on, unreachable."""
        _ip("-n", self.bridge, "link", "set", f"p{host}", "down")

    def mend(self, host: int) -> None:
        """Restore the link :meth:`cut` cut."""
        _ip("-n", self.bridge, "link", "set", f"p{host}", "up")

    def close(self) -> None:
        """Stop everything the bed started, then delete its namespaces."""
        for process in self._processes:
            if process.poll() is None:
                try:
                    os.killpg(process.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for process in self._processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for i in range(len(self.hosts)):
            if self.hosts[i] in self._made:
                self.kill_host(i)  # what was left, and what escaped its process group
        for process in self._processes:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        for name in reversed(self._made):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        self._made.clear()


# -- Spark standalone on the bed ----------------------------------------------------------------

MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT = 7077, 8080, 8081  # each host has ports of its own


class SparkBed:
    """A Spark standalone cluster on a :class:`Bed`: the master on host 0 (where drivers run
    too), a worker of ``cores`` cores on each other host. Logs and work directories go under
    ``base``. Each daemon listens on its host's address only (``SPARK_LOCAL_IP``)."""

    def __init__(self, bed: Bed, base: str, cores: int = 1, memory_mb: int = 1024) -> None:
        from spark_standalone import spark_home

        self.bed = bed
        self.base = base
        self.cores = cores
        self.memory_mb = memory_mb
        self.home = spark_home()
        self.master_url = f"spark://{bed.address(0)}:{MASTER_PORT}"
        self.conf_dir = os.path.join(base, "conf")  # empty: no stray spark-defaults.conf
        os.makedirs(self.conf_dir, exist_ok=True)
        self.daemons: dict[int, subprocess.Popen] = {}
        self._spark_class = os.path.join(self.home, "bin", "spark-class")
        self.start_master()
        for host in range(1, len(bed.hosts)):
            self.start_worker(host)

    def daemon_env(self, host: int) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(SPARK_HOME=self.home, SPARK_CONF_DIR=self.conf_dir, SPARK_LOCAL_IP=self.bed.address(host),
                   SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false")
        return env

    def _start(self, host: int, name: str, args: list[str], **env: str) -> None:
        with open(os.path.join(self.base, f"{name}-h{host}.log"), "ab") as log:
            self.daemons[host] = self.bed.start(host, [self._spark_class, *args], env={**self.daemon_env(host), **env},
                                                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)

    def start_master(self) -> None:
        self._start(0, "master", ["org.apache.spark.deploy.master.Master", "--host", self.bed.address(0),
                                  "--port", str(MASTER_PORT), "--webui-port", str(MASTER_UI_PORT)])

    def start_worker(self, host: int, java_home: str | None = None) -> None:
        """Start (or, after :meth:`Bed.kill_host`, restart) host ``host``'s worker; ``java_home``:
        the ``JAVA_HOME`` it runs from, and so the executors it launches."""
        work = os.path.join(self.base, f"work-h{host}")
        os.makedirs(work, exist_ok=True)
        self._start(host, "worker", ["org.apache.spark.deploy.worker.Worker", self.master_url,
                                     "--host", self.bed.address(host), "--cores", str(self.cores),
                                     "--memory", f"{self.memory_mb}m", "--webui-port", str(WORKER_UI_PORT),
                                     "--work-dir", work], **({"JAVA_HOME": java_home} if java_home else {}))

    def restart_workers(self, java_home: str | None = None) -> None:
        """Kill every worker host, and once the master has seen its worker go, start the worker
        again (from ``java_home``: see :meth:`start_worker`); return when all are ALIVE."""
        hosts = range(1, len(self.bed.hosts))
        for host in hosts:
            self.bed.kill_host(host)
        deadline = time.monotonic() + 60
        while self.alive_workers() & {self.bed.address(host) for host in hosts}:
            if time.monotonic() > deadline:
                raise AssertionError(f"the master still holds killed workers ALIVE: {self.state()}")
            time.sleep(0.3)
        for host in hosts:
            self.start_worker(host, java_home)
        self.wait_for_workers({self.bed.address(host) for host in hosts})

    def state(self) -> dict:
        """The master's view of the cluster, read from its web UI on host 0."""
        url = f"http://{self.bed.address(0)}:{MASTER_UI_PORT}/json/"
        out = self.bed.run(0, [sys.executable, "-c", f"import urllib.request; print(urllib.request.urlopen("
                                                     f"{url!r}, timeout=2).read().decode())"], timeout=10)
        try:
            return json.loads(out.stdout) if out.returncode == 0 else {}
        except ValueError:  # a master still starting answers /json/ with its HTML page
            return {}

    def alive_workers(self) -> set[str]:
        """The hosts (addresses) of the workers the master holds ALIVE."""
        return {w["host"] for w in self.state().get("workers", []) if w.get("state") == "ALIVE"}

    def wait_for_workers(self, hosts: set[str], timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not hosts <= self.alive_workers():
            if time.monotonic() > deadline:
                logs = {name: _tail(os.path.join(self.base, name)) for name in sorted(os.listdir(self.base))
                        if name.endswith(".log")}
                raise AssertionError(f"workers on {sorted(hosts)} not ALIVE after {timeout:.0f}s; "
                                     f"master sees {self.state()}; logs: {logs}")
            time.sleep(0.3)

    def wait_for_no_application(self, timeout: float = 60) -> None:
        """Until the master runs no application (a killed driver's executors gone)."""
        deadline = time.monotonic() + timeout
        while self.state().get("activeapps", [None]):
            if time.monotonic() > deadline:
                raise AssertionError(f"applications still active after {timeout:.0f}s: {self.state()}")
            time.sleep(0.3)

    def driver_env(self, **extra: str) -> dict[str, str]:
        """What a user's shell on host 0 has: no Spark or PySpark variables (Squall sets what it
        needs), and a PATH whose ``python3`` is not this virtualenv's (executors must be told)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_", "VIRTUAL_ENV"))}
        venv_bin = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p != venv_bin)
        env.update({"SPARK_CONF_DIR": self.conf_dir, **extra})
        return env


def slow_executor_java(directory: str, delay_secs: float, java: str) -> str:
    """A ``JAVA_HOME`` under ``directory`` whose ``bin/java`` runs ``java``, but only after
    ``delay_secs`` for an executor's JVM (Spark's ``CoarseGrainedExecutorBackend``): a Spark worker
    started from it launches executors that register that much later, as a container being
    scheduled or a loaded host would."""
    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir, exist_ok=True)
    wrapper = os.path.join(bin_dir, "java")
    with open(wrapper, "w") as f:
        f.write(f'#!/bin/sh\ncase "$*" in *CoarseGrainedExecutorBackend*) sleep {delay_secs:g} ;; esac\n'
                f'exec {java} "$@"\n')
    os.chmod(wrapper, 0o755)
    return directory


def _tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def listeners(bed: Bed, host: int) -> list[tuple[str, str]]:
    """(local address:port, process name) of every TCP listener on host ``host`` (``ss``)."""
    out = bed.run(host, ["ss", "-ltnpH"]).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        process = re.search(r'\(\("([^"]+)"', line)
        found.append((fields[3], process.group(1) if process else "?"))
    return found
