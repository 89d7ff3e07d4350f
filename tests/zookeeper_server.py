"""A real ZooKeeper for tests: Debian's ``zookeeper`` package, one standalone server started
as a subprocess with its data, config and port of its own (:class:`ZooKeeperServer`), and the
``zookeeper`` fixture serving on 127.0.0.1.

Its client port listens on the one address it is given, and its admin server (a wildcard
listener on 8080 by default) is off. Without the package, Java or kazoo a test using it is
skipped, except under CI (CI=true), where it fails: CI must run them.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import free_ports
from spark_standalone import java_executable
from redis_server import require
from squall.testing import wait_until

JAR = "/usr/share/java/zookeeper.jar"  # Debian's zookeeper: its dependencies are on its manifest's class path
MAIN = "org.apache.zookeeper.server.ZooKeeperServerMain"
CREDENTIALS = "squall:test-secret"


def require_zookeeper() -> str:
    """The java to run ZooKeeper with, or skip (fail under CI) naming what is missing."""
    if not os.path.exists(JAR):
        require("Debian's zookeeper package", "apt-get install zookeeper")
    if importlib.util.find_spec("kazoo") is None:
        require("the kazoo client package", "pip install 'squall[zookeeper]' (or '.[test]')")
    java = java_executable()
    if java is None:
        require("a Java runtime", "apt-get install default-jre-headless")
    return java


class ZooKeeperServer:
    """A standalone ZooKeeper on ``host``:``port`` with its data under ``directory``.

    :meth:`argv` is its command line, for a caller that starts it elsewhere (a host of the test
    bed); :meth:`start` runs it here and waits until it accepts connections."""

    def __init__(self, directory: Path, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.java = require_zookeeper()
        self.directory = Path(directory)
        self.host, self.port = host, port or free_ports(1)[0]
        (self.directory / "data").mkdir(parents=True, exist_ok=True)
        self.config = self.directory / "zoo.cfg"
        self.config.write_text(f"tickTime=500\ndataDir={self.directory / 'data'}\nclientPort={self.port}\n"
                               f"clientPortAddress={host}\nadmin.enableServer=false\n"
                               "minSessionTimeout=1000\nmaxSessionTimeout=60000\n")
        self.process: subprocess.Popen | None = None

    @property
    def servers(self) -> str:
        return f"{self.host}:{self.port}"

    def argv(self) -> list[str]:
        return [self.java, "-Xmx128m", "-cp", JAR, MAIN, str(self.config)]

    def start(self) -> ZooKeeperServer:
        with open(self.directory / "zookeeper.log", "w") as log:
            self.process = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT)
        self.wait_ready(self._accepts)
        return self

    def wait_ready(self, accepts: Callable[[], bool]) -> None:
        wait_until(lambda: accepts() or (self.process is not None and self.process.poll() is not None),
                   timeout=30, interval=0.1, message=f"ZooKeeper listening on {self.servers}")
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"ZooKeeper exited: {(self.directory / 'zookeeper.log').read_text()[-2000:]}")

    def _accepts(self) -> bool:
        try:
            socket.create_connection((self.host, self.port), timeout=1).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def write_credentials(path: Path, credentials: str = CREDENTIALS, mode: int = 0o600) -> Path:
    """A credentials file as ``storm.zookeeper.auth.file`` names it."""
    path.write_text(credentials + "\n")
    path.chmod(mode)
    return path


@pytest.fixture(scope="module")
def zookeeper(tmp_path_factory) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    try:
        yield server
    finally:
        server.stop()
