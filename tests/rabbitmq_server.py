"""A real RabbitMQ broker for tests: the ``rabbitmq_server`` fixture (import it into a test
module), a :class:`RabbitMQServer`.

The node is Debian's ``rabbitmq-server`` started as a subprocess of the tests, with a node
name, ports (AMQP, Erlang distribution, epmd), data, logs, configuration and Erlang cookie
of its own, everything on 127.0.0.1. Without ``rabbitmq-server`` (Debian package
``rabbitmq-server``) or without the ``pika`` client, a test using the fixture is skipped,
except under CI (CI=true), where it fails: CI must run them.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import free_ports
from redis_server import require

SERVER_PATHS = ("/usr/lib/rabbitmq/bin/rabbitmq-server", "/usr/sbin/rabbitmq-server")
START_TIMEOUT = 60.0


def pika_module():
    """The ``pika`` client package, or skip (fail under CI)."""
    if importlib.util.find_spec("pika") is None:
        require("the pika client package", "pip install 'squall[rabbitmq]' (or '.[test]')")
    import pika

    return pika


class RabbitMQServer:
    """A RabbitMQ node on 127.0.0.1 with everything under ``directory``; ``start``/``stop``
    (again: a restart on the same ports, with the same data), or use it as a context manager.
    ``port`` is the AMQP port; user ``guest``/``guest``."""

    host = "127.0.0.1"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.node = f"squall-test-{uuid.uuid4().hex[:10]}@localhost"
        self.port, self.dist_port, self.epmd_port = free_ports(3)
        self.process: subprocess.Popen | None = None
        self.epmd_pids: set[int] = set()
        home = self.directory / "home"
        for sub in ("home", "mnesia", "log"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        (self.directory / "rabbitmq.conf").write_text(
            f"listeners.tcp.default = 127.0.0.1:{self.port}\n"
            "loopback_users.guest = true\n"
            "log.console = false\n"
            "log.file.level = info\n"
        )
        (self.directory / "enabled_plugins").write_text("[].\n")
        (self.directory / "rabbitmq-env.conf").write_text("")
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))},
            "HOME": str(home),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_MNESIA_BASE": str(self.directory / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.directory / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.directory / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.directory / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(self.directory / "rabbitmq-env.conf"),
            # every Erlang node's distribution listener on loopback only (it listens on all
            # interfaces otherwise): the broker's, and the short-lived "epmd-starter" node its
            # start-up runs (ERL_AFLAGS reaches every erl started with this environment)
            "ERL_AFLAGS": "-kernel inet_dist_use_interface {127,0,0,1}",
        }

    @staticmethod
    def executable() -> str | None:
        return next((p for p in SERVER_PATHS if os.access(p, os.X_OK)), shutil.which("rabbitmq-server"))

    def url(self) -> str:
        return f"amqp://guest:guest@{self.host}:{self.port}/%2F"

    def connection(self):
        """A pika ``BlockingConnection`` to this node (close it)."""
        pika = pika_module()
        return pika.BlockingConnection(pika.ConnectionParameters(
            self.host, self.port, credentials=pika.PlainCredentials("guest", "guest"),
            connection_attempts=1, socket_timeout=2, blocked_connection_timeout=10))

    def start(self) -> RabbitMQServer:
        executable = self.executable()
        assert executable is not None
        log = open(self.directory / "log" / "stdout.log", "ab")  # noqa: SIM115  (kept for the process)
        self.process = subprocess.Popen([executable], env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                        stdin=subprocess.DEVNULL, start_new_session=True)
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.process.poll() is not None:
                self._find_epmd()
                raise RuntimeError(f"rabbitmq-server exited ({self.process.returncode}): "
                                   f"{self._tail()}")
            try:
                self.connection().close()
                break
            except Exception:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"rabbitmq-server did not accept AMQP connections on "
                                       f"{self.host}:{self.port} within {START_TIMEOUT}s: {self._tail()}") from None
                time.sleep(0.1)
        self._find_epmd()
        return self

    def _tail(self) -> str:
        path = self.directory / "log" / "stdout.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""

    def _find_epmd(self) -> None:
        """The epmd this node started (its own port: no other node uses it)."""
        out = subprocess.run(["pgrep", "-f", f"epmd.*-port {self.epmd_port}"], capture_output=True, text=True)
        self.epmd_pids.update(int(p) for p in out.stdout.split())
        out = subprocess.run(["pgrep", "-x", "epmd"], capture_output=True, text=True)
        for pid in out.stdout.split():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes()
            except OSError:
                continue
            if f"ERL_EPMD_PORT={self.epmd_port}".encode() in environ.split(b"\0"):
                self.epmd_pids.add(int(pid))

    def stop(self) -> None:
        """Stop the node (SIGTERM: a clean shutdown; SIGKILL after 30 s), by its process group."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)

    def close(self) -> None:
        self.stop()
        for pid in self.epmd_pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:  # reaped if it is a child of this process (then a zombie until reaped)
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        self.epmd_pids.clear()

    def __enter__(self) -> RabbitMQServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def rabbitmq_available() -> None:
    """Skip (fail under CI) without pika or rabbitmq-server."""
    pika_module()
    if RabbitMQServer.executable() is None:
        require("a rabbitmq-server", "install the Debian package rabbitmq-server "
                "(apt-get install rabbitmq-server)")


@pytest.fixture(scope="module")
def rabbitmq_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQServer]:
    """A RabbitMQ node on 127.0.0.1 for the module's tests, stopped at the end."""
    rabbitmq_available()
    server = RabbitMQServer(tmp_path_factory.mktemp("rabbitmq"))
    with server:
        yield server
