"""Cluster state in ZooKeeper (squall/cluster/registry/zookeeper.py), on a real ZooKeeper (Debian's
package) on 127.0.0.1: entries found by other clients and gone with their session, digest ACLs
that refuse other credentials, the state a running topology publishes, and the commands reaching
a topology through it. The multi-host case (the commands on another host) is in test_hosts.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from command_line import Run, user_home
from helpers import squall_cli
from squall.api.config import merged_config
from squall.api.errors import AlreadyAliveError, NotAliveError
from squall.runtime.messaging.security import LinkKeys
from squall.cluster.registry import Registration, RegistryError, open_registry
from squall.testing import wait_until
from squall.runtime.info import TopologyInfo, WorkerInfo
from zookeeper_server import CREDENTIALS, write_credentials, zookeeper  # noqa: F401 - a fixture

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def zk_conf(zookeeper, tmp_path, request):  # noqa: F811
    """A config for this test's own root on the server, with the credentials in a 0600 file."""
    root = "/" + re.sub(r"\W", "_", request.node.name)[:60]
    return {"storm.zookeeper.servers": [zookeeper.servers], "storm.zookeeper.root": root,
            "storm.zookeeper.auth.file": str(write_credentials(tmp_path / "zk.auth")),
            "storm.zookeeper.session.timeout": 4000}


def registry(conf: dict, **overrides):
    return open_registry(merged_config(conf, overrides))


def entry(name: str, pid: int | None = None) -> Registration:
    keys = LinkKeys.generate()
    return Registration(name, pid or os.getpid(), "tcp://127.0.0.1:5555", "processes", time.time(), keys.public,
                        keys.secret)


def test_an_entry_is_found_by_another_client_and_goes_with_its_session(zk_conf):
    serving, other = registry(zk_conf), registry(zk_conf)
    try:
        mine = entry("wordcount")
        serving.register(mine)
        [found] = other.running()
        assert found.name == "wordcount" and found.pid == os.getpid() and found.host == socket.gethostname()
        assert found.keys == mine.keys and found.address == mine.address
        serving.publish_ui("wordcount", "http://127.0.0.1:8080", "token")
        assert (other.lookup("wordcount").ui, other.lookup("wordcount").ui_token) == ("http://127.0.0.1:8080", "token")
        with pytest.raises(AlreadyAliveError, match=rf"'wordcount' is already running on host {socket.gethostname()} "
                                                    rf"\(pid {os.getpid()}\), registered in ZooKeeper"):
            other.register(entry("wordcount"))
    finally:
        serving.close()  # its session ends: its ephemeral entry with it
    try:
        with pytest.raises(NotAliveError, match=rf"no topology named 'wordcount' is running in ZooKeeper "
                                                rf"{zk_conf['storm.zookeeper.servers'][0]}/"):
            other.lookup("wordcount")
        assert other.running() == []
    finally:
        other.close()


def test_the_entry_of_a_killed_process_of_this_host_is_taken_over_before_its_session_expires(zk_conf, tmp_path):
    script = (f"import sys, time\nfrom squall.api.config import merged_config\nfrom squall.cluster.registry import "
              f"Registration, open_registry\nr = open_registry(merged_config({zk_conf!r}))\n"
              f"r.register(Registration('t', __import__('os').getpid(), 'tcp://127.0.0.1:1', 'p', time.time()))\n"
              f"print('registered', flush=True)\ntime.sleep(60)\n")
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "registered\n"
    finally:
        process.kill()
        process.wait()
    mine = registry(zk_conf)
    try:
        assert mine.lookup("t").pid == process.pid  # its session (4 s) outlives it
        mine.register(entry("t"))
        assert mine.lookup("t").pid == os.getpid()
    finally:
        mine.close()


def test_an_entry_lost_with_its_session_is_registered_again_but_a_name_taken_meanwhile_is_given_up(zk_conf):
    serving, other = registry(zk_conf), registry(zk_conf)
    try:
        serving.register(entry("t"))
        path = f"{zk_conf['storm.zookeeper.root']}/storms/t"
        other._zk.delete(path)  # as an expired session would
        serving.publish_state("t", TopologyInfo(name="t", status="ACTIVE", uptime_secs=0.0, workers=[], components={}))
        assert other.lookup("t").pid == os.getpid()
        other._zk.delete(path)
        other.register(entry("t", pid=1))  # another driver took the name meanwhile
        worker = WorkerInfo(host="h", port=1, pid=2, executors=[])
        serving.publish_state("t", TopologyInfo(name="t", status="ACTIVE", uptime_secs=0.0, workers=[worker],
                                                components={}))
        assert other.lookup("t").pid == 1
        assert not other._zk.exists(f"{zk_conf['storm.zookeeper.root']}/assignments/t")
    finally:
        serving.close()
        other.close()


@pytest.mark.parametrize("change, error", [
    ({"storm.zookeeper.auth.file": None}, r"storm.zookeeper.auth.file must name a file of mode 0600"),
    ({"credentials": "squall:wrong"}, r"refuses access to /\w+ with the credentials of .*zk.auth "
                                      r"\(storm.zookeeper.auth.file\)"),
    ({"mode": 0o644}, r"zk.auth is open to other users \(mode 0644, owner uid \d+\): make it yours and "
                      r"'chmod 600 .*zk.auth'"),
    ({"credentials": "squall"}, r"zk.auth must hold one line 'user:password'"),
    ({"storm.zookeeper.auth.file": "/nonexistent/zk.auth"}, r"cannot read /nonexistent/zk.auth: No such file"),
])
def test_a_client_without_the_credentials_is_refused_naming_the_fix(zk_conf, tmp_path, change, error):
    registry(zk_conf).close()  # the root exists, guarded by the right credentials
    conf = dict(zk_conf)
    if "credentials" in change or "mode" in change:
        write_credentials(tmp_path / "zk.auth", change.get("credentials", CREDENTIALS), change.get("mode", 0o600))
    conf.update({k: v for k, v in change.items() if k.startswith("storm.")})
    with pytest.raises(RegistryError, match=error):
        registry(conf)


def test_zookeeper_out_of_reach_fails_within_the_connection_timeout(zk_conf):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        # the timeout the client was given and gave up after: the 1 s set here, not kazoo's default (15 s)
        with pytest.raises(RegistryError, match=rf"cannot reach ZooKeeper at 127.0.0.1:{port} "
                                                rf"\(storm.zookeeper.servers\) within 1s"):
            registry(zk_conf, **{"storm.zookeeper.servers": [f"127.0.0.1:{port}"],
                                 "storm.zookeeper.connection.timeout": 1000})


def test_a_root_open_to_anyone_is_not_written_to(zk_conf, zookeeper):  # noqa: F811
    from kazoo.client import KazooClient

    anyone = KazooClient(zookeeper.servers)
    anyone.start(timeout=10)
    try:
        anyone.create(zk_conf["storm.zookeeper.root"])  # world-open, as a squatter would leave it
    finally:
        anyone.stop()
        anyone.close()
    with pytest.raises(RegistryError, match=r"exists with an ACL other than these credentials' \(world:anyone\)"):
        registry(zk_conf)


# -- a running topology, through the commands -----------------------------------------------------

TOPOLOGY_FILE = """
import time
from squall import BasicBolt, Config, Spout, TopologyBuilder


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)
        time.sleep(0.002)


class Picky(BasicBolt):
    def execute(self, tup, collector):
        if tup.values[0] == 10:
            collector.report_error(ValueError("ten is not welcome"))


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("picky", Picky(), 2).shuffle_grouping("numbers")
topology = builder.create_topology()
config = Config().set_num_workers(2).set_max_spout_pending(100)
"""


def user_env(home: str) -> dict[str, str]:
    return {**os.environ, "SQUALL_HOME": home}


@pytest.mark.processes
def test_the_commands_reach_a_topology_through_zookeeper_and_it_publishes_its_state(zk_conf, tmp_path,
                                                                                   monkeypatch):
    # the topology's process and the commands read their user's squall.yaml, each its own
    serving_env = user_env(user_home(tmp_path, "serving", zk_conf))
    other_env = user_env(user_home(tmp_path, "other", zk_conf))
    stranger_env = user_env(user_home(tmp_path, "stranger", {**zk_conf, "storm.zookeeper.auth.file": str(
        write_credentials(tmp_path / "stranger.auth", "squall:guess"))}))
    (tmp_path / "picky.py").write_text(TOPOLOGY_FILE)
    monkeypatch.setenv("SQUALL_HOME", serving_env["SQUALL_HOME"])
    run = Run(tmp_path, [str(tmp_path / "picky.py"), "-c", "worker.heartbeat.frequency.secs=0.3"])
    try:
        run.wait_running()
        listed = squall_cli("list", env=other_env)
        assert listed.returncode == 0, listed.stderr
        [row] = listed.stdout.splitlines()[1:]
        assert row.split()[0] == "picky" and row.split()[-1] == f"{run.pid}@{socket.gethostname()}", listed.stdout
        assert not (tmp_path / "serving" / "run").exists() or not list((tmp_path / "serving" / "run").glob("*.json"))

        state = registry(zk_conf)
        try:
            zk, root = state._zk, zk_conf["storm.zookeeper.root"]

            def node(path: str):
                return json.loads(zk.get(f"{root}/{path}")[0])

            wait_until(lambda: zk.exists(f"{root}/errors/picky/picky"), timeout=20, message="the error published")
            [error] = node("errors/picky/picky")
            assert "ten is not welcome" in error["error"]
            assignment = node("assignments/picky")
            assert sorted(e["component"] for w in assignment for e in w["executors"]) == ["__acker", "__acker",
                                                                                         "numbers", "picky", "picky"]
            assert sorted(zk.get_children(f"{root}/workerbeats/picky")) == ["0", "1"]
            beat = node("workerbeats/picky/0")
            wait_until(lambda: node("workerbeats/picky/0")["time"] > beat["time"], timeout=10,
                       message="a newer heartbeat")
            assert {b["pid"] for b in (node("workerbeats/picky/0"), node("workerbeats/picky/1"))} == \
                {w["pid"] for w in assignment}
        finally:
            state.close()

        refused = squall_cli("deactivate", "picky", env=stranger_env)
        assert refused.returncode == 2
        assert re.search(r"^squall: error: ZooKeeper \S+ refuses access to /\w+ with the credentials of "
                         r".*stranger.auth", refused.stderr), refused.stderr
        assert squall_cli("deactivate", "picky", env=other_env).returncode == 0
        assert "INACTIVE" in squall_cli("list", env=other_env).stdout
        killed = squall_cli("kill", "picky", "-w", "0", env=other_env)
        assert killed.returncode == 0, killed.stderr
        assert run.proc.wait(timeout=30) == 0, run.stderr()
        assert squall_cli("list", env=other_env).stdout.startswith("no topologies running in ZooKeeper")
        state = registry(zk_conf)
        try:
            assert [state._zk.get_children(f"{root}/{kind}") for kind in
                    ("storms", "assignments", "workerbeats", "errors")] == [[], [], [], []]
        finally:
            state.close()
    finally:
        if run.proc.poll() is None:
            os.kill(run.pid, signal.SIGKILL)
            run.proc.wait()
