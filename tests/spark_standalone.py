"""A real Spark standalone cluster (one master, one worker) for tests, on loopback only.

``standalone_cluster()`` starts the master and the worker JVMs with
``$SPARK_HOME/bin/spark-class`` from the pip-installed ``pyspark`` package (no separate
Spark download), each in its own process group, waits until the master's web UI reports
the worker ALIVE with the requested cores and memory, yields a ``StandaloneCluster`` and
finally stops both process groups by pid (SIGTERM, then SIGKILL after a grace period),
including the executor JVMs and Python workers the worker started for applications.

Everything binds to 127.0.0.1.  ``--host 127.0.0.1`` only covers the RPC endpoints: the
master and worker web UIs bind to ``$SPARK_LOCAL_IP``, falling back to 0.0.0.0, so it is
set in the daemons' environment; executors inherit it from the worker.  The master's REST
submission server (on by default, fixed port 6066) is switched off.  A driver must bind
to loopback too: ``StandaloneCluster.session_conf()`` has the settings (its UI, which
would bind 0.0.0.0 unless SPARK_LOCAL_IP was set when the driver JVM started, is off),
and makes ``getOrCreate()`` return only once the executor has registered, e.g.::

    from pyspark.sql import SparkSession
    from spark_standalone import standalone_cluster

    with standalone_cluster(cores=2) as cluster:
        builder = SparkSession.builder.appName("test")
        for key, value in cluster.session_conf().items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        try:
            ...
        finally:
            spark.stop()

PySpark keeps one SparkContext per process: stop any other session first, or
``getOrCreate()`` returns it, whatever its master.  In a pytest module, import the
module-scoped fixture: ``from spark_standalone import spark_standalone  # noqa: F401``.
It skips the module's tests when pyspark or Java is missing.  pytest-timeout charges
fixture setup to the first test using it: about 5 s for the cluster and 7-8 s for a
driver session on an idle 2-core machine, several times that under load, so give that
test a ``@pytest.mark.timeout`` well above the project-wide 60 s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest

from helpers import free_ports

LOOPBACK = "127.0.0.1"
STARTUP_TIMEOUT_S = 60.0
STOP_GRACE_S = 15.0
_POLL_INTERVAL_S = 0.2
_LOG_TAIL_LINES = 40
_START_ATTEMPTS = 3  # fresh ports each time, in case another process grabbed one

# Proxy settings in the environment must not reroute requests to the local web UI.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class SparkClusterError(RuntimeError):
    """The standalone cluster did not come up (the message carries the log tails)."""


@dataclasses.dataclass(frozen=True)
class StandaloneCluster:
    """A running cluster, as yielded by ``standalone_cluster()``."""

    master_url: str  # spark://127.0.0.1:PORT
    master_webui_url: str  # http://127.0.0.1:PORT, /json/ gives the cluster state
    worker_webui_url: str
    cores: int
    memory_mb: int
    pids: tuple[int, ...]  # master and worker JVM pids (each also its process group id)
    log_dir: Path

    def session_conf(self) -> dict[str, str]:
        """SparkSession settings for a driver on this cluster that binds only to loopback."""
        return {
            "spark.master": self.master_url,
            "spark.driver.host": LOOPBACK,
            "spark.driver.bindAddress": LOOPBACK,
            # The driver UI binds to $SPARK_LOCAL_IP, else 0.0.0.0, and tests don't need it.
            "spark.ui.enabled": "false",
            "spark.pyspark.python": sys.executable,
            # One executor taking the whole worker (the default, 1g, would not fit below 1g).
            "spark.executor.memory": f"{self.memory_mb}m",
            # Executors register asynchronously; with the expected cores known, getOrCreate()
            # waits (up to spark.scheduler.maxRegisteredResourcesWaitingTime, 30 s) for all.
            "spark.cores.max": str(self.cores),
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        }

    def state(self) -> dict[str, Any]:
        """The master's view of the cluster (workers, apps), from its web UI."""
        return _get_json(f"{self.master_webui_url}/json/")


def spark_home() -> str:
    """The pip-installed pyspark package directory, which is a complete SPARK_HOME."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise SparkClusterError("pyspark is not installed")
    return os.path.dirname(spec.origin)


def spark_unavailable_reason() -> str | None:
    """Why a standalone cluster can't be started here, or None if it can."""
    if importlib.util.find_spec("pyspark") is None:
        return "pyspark is not installed"
    if java_executable() is None:
        return "no Java runtime (spark-class runs $JAVA_HOME/bin/java, else java on PATH)"
    return None


def java_executable() -> str | None:
    """$JAVA_HOME/bin/java, else java on PATH, as spark-class and Debian's scripts pick it; None if neither runs."""
    java_home = os.environ.get("JAVA_HOME")
    java = os.path.join(java_home, "bin", "java") if java_home else shutil.which("java")
    return java if java is not None and os.access(java, os.X_OK) else None


@contextlib.contextmanager
def standalone_cluster(
    cores: int = 2,
    memory_mb: int = 1024,
    *,
    work_dir: str | os.PathLike[str] | None = None,
    startup_timeout: float = STARTUP_TIMEOUT_S,
) -> Iterator[StandaloneCluster]:
    """Run a one-master, one-worker Spark standalone cluster on 127.0.0.1.

    The worker offers ``cores`` cores and ``memory_mb`` MiB to applications.  Logs (and
    the worker's work directory) go under ``work_dir`` if given, kept afterwards, else
    under a temporary directory removed on exit.  Raises SparkClusterError, with the log
    tails, if the worker isn't registered and ALIVE within ``startup_timeout`` seconds.
    """
    with contextlib.ExitStack() as stack:
        if work_dir is None:
            base = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="spark-standalone-")))
        else:
            base = Path(work_dir)
            base.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _START_ATTEMPTS + 1):
            attempt_dir = base / f"attempt-{attempt}"
            procs: list[subprocess.Popen[bytes]] = []
            try:
                cluster = _start(attempt_dir, cores, memory_mb, startup_timeout, procs)
            except _PortTakenError:
                _stop(procs)
                if attempt == _START_ATTEMPTS:
                    raise SparkClusterError(f"ports kept being taken; logs in {attempt_dir}") from None
                continue
            except BaseException:
                _stop(procs)
                raise
            try:
                yield cluster
            finally:
                _stop(procs)
            return


@pytest.fixture(scope="module")
def spark_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    """Module-scoped standalone cluster with 2 cores and 1 GiB; logs kept in pytest's tmp dir."""
    reason = spark_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    with standalone_cluster(work_dir=tmp_path_factory.mktemp("spark-standalone")) as cluster:
        yield cluster


def listening_addresses(pids: Iterable[int]) -> dict[int, list[tuple[str, int]]]:
    """TCP (address, port) pairs each process listens on, read from /proc (Linux only).

    Lets a test assert that nothing binds beyond loopback, like ``ss -ltnp`` would show.
    """
    listeners: dict[int, tuple[str, int]] = {}  # socket inode -> address
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as lines:
            next(lines)  # header
            for line in lines:
                fields = line.split()
                if fields[3] == "0A":  # TCP_LISTEN
                    listeners[int(fields[9])] = _decode_proc_address(fields[1])
    result: dict[int, list[tuple[str, int]]] = {}
    for pid in pids:
        found = []
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if target.startswith("socket:["):
                        inode = int(target[len("socket:[") : -1])
                        if inode in listeners:
                            found.append(listeners[inode])
        result[pid] = sorted(found)
    return result


def is_loopback(address: str) -> bool:
    """True for 127.0.0.0/8, ::1 and IPv4-mapped loopback (the JVM's dual-stack sockets)."""
    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or (mapped is not None and mapped.is_loopback)


def descendants(pid: int) -> list[int]:
    """All live descendant pids of ``pid`` (e.g. executor JVMs and Python workers)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read_stat(int(entry))
            if stat is not None:
                children.setdefault(stat[1], []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


# --- internals ---------------------------------------------------------------------------


class _PortTakenError(Exception):
    """A chosen port was bound by someone else between choosing and use."""


def _start(
    base: Path,
    cores: int,
    memory_mb: int,
    timeout: float,
    procs: list[subprocess.Popen[bytes]],
) -> StandaloneCluster:
    """Start master and worker, appending each Popen to ``procs`` as soon as it exists."""
    home = spark_home()
    conf_dir, worker_dir = base / "conf", base / "work"
    for directory in (conf_dir, worker_dir):
        directory.mkdir(parents=True)
    master_port, master_ui_port, worker_ui_port = free_ports(3)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SPARK_")}
    env.update(
        SPARK_HOME=home,
        # An empty conf dir: no stray spark-env.sh or spark-defaults.conf gets picked up.
        SPARK_CONF_DIR=str(conf_dir),
        # The web UIs (and executors' endpoints) bind here; unset means 0.0.0.0.
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_MASTER_HOST=LOOPBACK,
        # Fail on a taken port instead of silently moving to the next one (then we retry).
        SPARK_DAEMON_JAVA_OPTS="-Dspark.port.maxRetries=0",
        # The REST submission server is on by default, on fixed port 6066; not needed.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    spark_class = os.path.join(home, "bin", "spark-class")
    master_url = f"spark://{LOOPBACK}:{master_port}"
    master_args = ["--host", LOOPBACK, "--port", str(master_port), "--webui-port", str(master_ui_port)]
    master = _spawn([spark_class, "org.apache.spark.deploy.master.Master", *master_args], env, base / "master.log")
    procs.append(master)
    worker_args = [
        *(master_url, "--host", LOOPBACK, "--cores", str(cores), "--memory", f"{memory_mb}m"),
        *("--webui-port", str(worker_ui_port), "--work-dir", str(worker_dir)),
    ]
    worker = _spawn([spark_class, "org.apache.spark.deploy.worker.Worker", *worker_args], env, base / "worker.log")
    procs.append(worker)
    cluster = StandaloneCluster(
        master_url=master_url,
        master_webui_url=f"http://{LOOPBACK}:{master_ui_port}",
        worker_webui_url=f"http://{LOOPBACK}:{worker_ui_port}",
        cores=cores,
        memory_mb=memory_mb,
        pids=(master.pid, worker.pid),
        log_dir=base,
    )
    _wait_until_ready(cluster, procs, timeout)
    return cluster


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    # spark-class execs the JVM, so the Popen pid is the JVM's pid; a new session makes it
    # a process group leader, so killpg() also reaches the executors the worker forks.
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_until_ready(cluster: StandaloneCluster, procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    """Poll the master's /json/ until it lists our worker ALIVE with all its resources."""
    deadline = time.monotonic() + timeout
    state: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.poll() is not None:
                # The stack trace naming the port clash is far above the log tail.
                if any("java.net.BindException" in _read(log) for log in _logs(cluster)):
                    raise _PortTakenError()
                _fail(cluster, f"pid {proc.pid} exited with status {proc.returncode} during startup")
        with contextlib.suppress(OSError, ValueError):  # UI not up yet / partial reply
            state = cluster.state()
            if state.get("status") == "ALIVE" and state.get("url") == cluster.master_url:
                wanted = {"state": "ALIVE", "host": LOOPBACK, "cores": cluster.cores, "memory": cluster.memory_mb}
                if any(wanted.items() <= worker.items() for worker in state.get("workers", [])):
                    return
        time.sleep(_POLL_INTERVAL_S)
    _fail(cluster, f"no ALIVE worker after {timeout:.0f} s; last master state: {state}")


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each process group, SIGKILL what is left after the grace period, then
    make sure no descendant (executor JVM, Python daemon in its own group) survives."""
    if not procs:
        return
    # Snapshot descendants first: once a parent dies they are reparented and untraceable.
    # (pid, start time) pairs so that a recycled pid is never signalled.
    family = {pid: _start_time(pid) for proc in procs for pid in descendants(proc.pid)}
    for proc in procs:
        _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
    procs.clear()
    # The worker's shutdown hook kills its executors, and PySpark's daemon exits when its
    # executor does; this catches anything that did not.
    if _wait_gone(family, STOP_GRACE_S):
        return
    for pid in _alive(family):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not _wait_gone(family, STOP_GRACE_S):
        raise RuntimeError(f"Spark standalone cluster processes survived SIGKILL: {_alive(family)}")


def _alive(family: dict[int, int | None]) -> list[int]:
    """The pids in ``family`` still running as the same process (same start time)."""
    return [pid for pid, started in family.items() if started is not None and _start_time(pid) == started]


def _wait_gone(family: dict[int, int | None], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while _alive(family):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def _read_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time) from /proc/<pid>/stat, or None if the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    return fields[0], int(fields[1]), int(fields[19])


def _start_time(pid: int) -> int | None:
    """Start time of a live (non-zombie) process, None if it is gone."""
    stat = _read_stat(pid)
    return None if stat is None or stat[0] in ("Z", "X") else stat[2]


def _decode_proc_address(field: str) -> tuple[str, int]:
    """Decode /proc/net/tcp{,6} "ADDR:PORT": hex, the address in 32-bit host-order words."""
    address, port = field.split(":")
    raw = b"".join(int(address[i : i + 8], 16).to_bytes(4, sys.byteorder) for i in range(0, len(address), 8))
    return str(ipaddress.ip_address(raw)), int(port, 16)


def _get_json(url: str) -> dict[str, Any]:
    with _HTTP.open(url, timeout=2) as response:
        state: dict[str, Any] = json.load(response)
        return state


def _logs(cluster: StandaloneCluster) -> list[Path]:
    return [cluster.log_dir / "master.log", cluster.log_dir / "worker.log"]


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return "(no log)"


def _tail(log: Path) -> str:
    return "\n".join(_read(log).splitlines()[-_LOG_TAIL_LINES:])


def _fail(cluster: StandaloneCluster, why: str) -> NoReturn:
    tails = "\n".join(f"--- {log} (last {_LOG_TAIL_LINES} lines) ---\n{_tail(log)}" for log in _logs(cluster))
    raise SparkClusterError(f"Spark standalone cluster did not start: {why}\n{tails}")
