"""Trust and fail-fast: every link of a topology authenticated and encrypted (ZeroMQ CURVE),
no code from the wire, messages checked before they are trusted, threads that die take
their worker down.

Real sockets on 127.0.0.1 and real worker processes. The attacker is a separate process
(:data:`ATTACKER`) that knows only the ports: it sends a crafted pickle whose ``__reduce__``
would create a canary file, random bytes, a truncated frame, well-formed messages with wrong
types, a fake ``hello`` and a fake ``kill`` to a worker port, the master
and the control socket. Afterwards: no canary, nothing of the topology received, the topology
still running with exact results, and each refused connection logged.

Components are classes of this module (the workers import it; results are lines in files).
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import signal
import stat
import subprocess
import sys
import textwrap

import msgpack
import pytest
import zmq
from process_topologies import LineLog, gone, pconf, read_lines

from squall import BasicBolt, Bolt, Config, LocalCluster, Spout, TopologyBuilder
from squall.ops.control import ControlServer
from squall.cluster.registry.local import LocalRegistry, registry_dir
from squall.runtime.messaging.security import LinkSecurity
from squall.runtime.messaging.zmq_transport import PAYLOAD_HEADER
from squall.testing import wait_until

N = 300


class Numbers(Spout):
    """Emits 1..limit, each with its number as message id; replays what fails; records acks."""

    outputs = ["n"]

    def __init__(self, directory: str, limit: int = N) -> None:
        self.directory, self.limit = directory, limit

    def open(self, conf, context, collector) -> None:
        self.collector, self.next, self.replay = collector, 1, []
        self.acks = LineLog(os.path.join(self.directory, f"acked-{os.getpid()}"))

    def next_tuple(self) -> None:
        if self.replay:
            n = self.replay.pop()
        elif self.next <= self.limit:
            n, self.next = self.next, self.next + 1
        else:
            return
        self.collector.emit([n], msg_id=n)

    def ack(self, msg_id) -> None:
        self.acks.write(str(msg_id))

    def fail(self, msg_id) -> None:
        self.replay.append(msg_id)


class Relay(BasicBolt):
    outputs = ["n"]

    def execute(self, tup, collector) -> None:
        collector.emit([tup[0]])


class Sink(BasicBolt):
    """Records every number it receives, and the type of anything that is not an int."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def prepare(self, conf, context) -> None:
        self.log = LineLog(os.path.join(self.directory, f"sink-{os.getpid()}"))

    def execute(self, tup, collector) -> None:
        value = tup[0]
        self.log.write(str(value) if type(value) is int else f"{type(value).__name__}:{value!r}")


class DieOnce(BaseException):
    """Not an Exception: escapes the executor's handling of user errors, so its thread dies."""


class DiesOnce(Bolt):
    """Acks what it gets; the first process to run it kills its executor thread on the first
    tuple (a marker file says it happened)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, tup) -> None:
        if not os.path.exists(self.marker):
            open(self.marker, "w").close()
            raise DieOnce("forced: the executor thread dies")
        self.collector.ack(tup)


def numbers_topology(directory: str, limit: int = N, middle: Bolt | None = None):
    """numbers -> relay (or ``middle``) -> sink, every hop shuffled over two workers."""
    b = TopologyBuilder()
    b.set_spout("numbers", Numbers(directory, limit))
    b.set_bolt("relay", middle or Relay(), 2).shuffle_grouping("numbers")
    if middle is None:
        b.set_bolt("sink", Sink(directory), 2).shuffle_grouping("relay")
    return b.create_topology()


def acked(directory) -> list[int]:
    return sorted(int(line) for line in read_lines(directory, "acked-"))


def all_acked(directory, n: int = N) -> bool:
    """Every message id acked at least once (a restarted spout starts counting again)."""
    return set(acked(directory)) == set(range(1, n + 1))


def sunk(directory) -> list[str]:
    return read_lines(directory, "sink-")


def worker_logs(cluster: LocalCluster, name: str) -> str:
    log_dir = cluster.runner(name).log_dir
    text = ""
    for entry in sorted(os.listdir(log_dir)):
        with open(os.path.join(log_dir, entry), errors="replace") as f:
            text += f.read()
    return text


@pytest.fixture
def cluster():
    with LocalCluster(processes=True) as c:
        yield c


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SQUALL_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


# The attacker: a process with no keys, given only where to knock. Prints, as JSON, what it
# received from each endpoint (it must be nothing).
ATTACKER = textwrap.dedent('''
    import json, os, pickle, socket, sys, time
    import msgpack, zmq

    canary, endpoints = sys.argv[1], json.loads(sys.argv[2])

    class Canary:
        def __reduce__(self):
            return (open, (canary, "w"))

    evil = pickle.dumps(Canary())
    batch = msgpack.packb([[1], [1], ["default"], [[msgpack.ExtType(0, evil)]], [{}]])  # a worker batch
    hello = msgpack.packb({"type": "hello", "pid": os.getpid()})
    messages = [
        msgpack.packb(msgpack.ExtType(0, evil)),                  # a bare pickled value
        batch,                                                    # a tuple batch carrying it
        hello,                                                    # a fake hello
        msgpack.packb({"type": "hello", "pid": "not a pid"}),     # wrong types
        msgpack.packb({"type": "kill"}),                          # a fake kill
        msgpack.packb({"op": "kill", "wait_secs": 0}),
        msgpack.packb({"op": "info"}),
        os.urandom(512),
    ]
    received = {}
    ctx = zmq.Context()
    for what, (port, kind) in endpoints.items():
        address = f"tcp://127.0.0.1:{port}"
        got = []
        # a ZeroMQ peer without CURVE, then one with CURVE keys of its own and a guessed server key
        for curve in (False, True):
            sock = ctx.socket(getattr(zmq, kind))
            sock.linger = 0
            if kind == "DEALER":
                sock.identity = b"0/0"  # claims to be worker 0
            if curve:
                public, secret = zmq.curve_keypair()
                sock.curve_serverkey, sock.curve_publickey, sock.curve_secretkey = zmq.curve_keypair()[0], public, secret
            sock.connect(address)
            for message in messages:
                try:
                    if kind == "REQ":
                        sock.send(message, zmq.NOBLOCK)
                        break  # a REQ socket sends one request before a reply
                    sock.send(message, zmq.NOBLOCK)
                except zmq.Again:
                    pass
            # give the connection time to be tried (and a reply time to come)
            if kind in ("DEALER", "REQ") and sock.poll(1000):
                got.append(sock.recv())
            elif kind not in ("DEALER", "REQ"):
                sock.poll(500, zmq.POLLOUT)
            sock.close()
        # raw TCP: random bytes, a truncated ZMTP greeting, a greeting then garbage
        for raw in (os.urandom(4096), b"\\xff\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x01\\x7f\\x03",
                    b"\\xff" + b"\\x00" * 8 + b"\\x7f\\x03\\x00NULL" + b"\\x00" * 16 + os.urandom(64)):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(raw)
            s.settimeout(0.5)
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            # a ZMTP server sends its own greeting (mechanism CURVE); anything past it would be data
            if len(data) > 64:
                got.append(data)
            s.close()
        received[what] = sum(len(g) for g in got)
    print(json.dumps(received))
''')


def attack(canary, endpoints: dict[str, tuple[int, str]]) -> dict[str, int]:
    proc = subprocess.run([sys.executable, "-c", ATTACKER, str(canary), json.dumps(endpoints)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def refusals(text: str, where: str) -> int:
    return len(re.findall(rf"refused a connection on its {where}", text))


@pytest.mark.processes
def test_a_process_without_the_keys_gets_nothing_in_and_nothing_out(cluster, home, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="squall")
    canary = tmp_path / "canary"
    with ControlServer(cluster, "guarded", "processes", 3, LocalRegistry()) as control:
        cluster.submit_topology("guarded", pconf(), numbers_topology(str(tmp_path), limit=N))
        runner = cluster.runner("guarded")
        workers = cluster.get_topology_info("guarded")["workers"]
        endpoints = {
            "worker port": (workers[1]["port"], "PUSH"),
            "master port": (int(runner.address.rsplit(":", 1)[1]), "DEALER"),
            "control port": (int(json.loads(next(registry_dir().glob("*.json")).read_text())["address"]
                                 .rsplit(":", 1)[1]), "REQ"),
        }
        received = attack(canary, endpoints)

        assert received == {what: 0 for what in endpoints}  # no topology, conf, figures or reply
        wait_until(lambda: acked(tmp_path) == list(range(1, N + 1)), timeout=30)
        assert sorted(map(int, sunk(tmp_path))) == list(range(1, N + 1))  # exactly, nothing injected
        assert cluster.get_topology_info("guarded")["status"] == "ACTIVE"
        assert not control.kill_requested.is_set()
        # each endpoint logged the refused connections: the 2 ZeroMQ peers and the 2 raw ones that
        # speak ZMTP (bytes that are not ZMTP at all are dropped by libzmq without an event)
        wait_until(lambda: refusals(worker_logs(cluster, "guarded"), "worker port") >= 4, timeout=10)
        wait_until(lambda: refusals(caplog.text, "master port") >= 4, timeout=10)
        wait_until(lambda: refusals(caplog.text, "control port") >= 4, timeout=10)
    assert not canary.exists()


def send_payload(sock: zmq.Socket, payload: bytes, sender: int = 0) -> None:
    """Send ``payload`` as a worker sends a batch: after a header naming worker ``sender``'s
    first run (a worker takes tuples from its peers' current runs only)."""
    sock.send_multipart([PAYLOAD_HEADER.pack(sender, 0), payload])


def keyed_push(keys, port: int) -> tuple[zmq.Context, LinkSecurity, zmq.Socket]:
    context = zmq.Context()
    security = LinkSecurity(context, keys, "test")
    sock = context.socket(zmq.PUSH)
    sock.linger = 1000
    security.client(sock)
    sock.connect(f"tcp://127.0.0.1:{port}")
    return context, security, sock


class Canary:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.mark.processes
def test_a_peer_with_the_keys_cannot_run_code_or_kill_an_executor_with_forged_tuples(cluster, tmp_path):
    """Even over an authenticated link, pickles are not unpickled while the fallback is off,
    and records that do not fit the topology are logged and dropped."""
    canary = tmp_path / "canary"
    cluster.submit_topology("forged", pconf(), numbers_topology(str(tmp_path), limit=N))
    info = cluster.get_topology_info("forged")
    sink_worker = next(w for w in info["workers"] if any(e["component"] == "sink" for e in w["executors"]))
    sink_task = next(e["tasks"][0] for e in sink_worker["executors"] if e["component"] == "sink")
    relay_task = next(t for w in info["workers"] for e in w["executors"] if e["component"] == "relay"
                      for t in e["tasks"])
    acker_task = next(e["tasks"][0] for e in sink_worker["executors"] if e["component"] == "__acker")
    peer = next(i for i, w in enumerate(info["workers"]) if w is not sink_worker)  # the forger poses as it
    evil = msgpack.ExtType(0, pickle.dumps(Canary(str(canary))))
    # payloads as a forger writes them: msgpack of [group], a tuple group being
    # [0, source task, stream, [task], [values], tree ids or None(, roots, edges)]
    # (squall.runtime.messaging.tuple_batch)
    groups = [
        [0, relay_task, "default", [sink_task], [msgpack.packb([evil])], None],  # a pickle packed at emit
        [0, relay_task, "default", [sink_task], [[evil]], None],       # a pickle where plain values go
        [0, relay_task, "default", [sink_task], ["not a list"], None],  # wrong types...
        [0, relay_task, "default", [sink_task], [[1, 2]], None],        # wrong arity
        [0, relay_task, "default", [sink_task], [[7]], None, [1, 2], [3]],  # root and edge columns too long
        [0, relay_task, "__ack_fail", [acker_task], [["id"]], None],   # an acker fed strings
        [0, relay_task, "no-such-stream", [sink_task], [[7]], None],
        [0, relay_task, "default", [9999], [[7]], None],                # no such task
        [0, relay_task, "default", [sink_task], [[1]], None, [1], [2], 0],  # a field too many
        [0, relay_task, "default", [sink_task], [[-42]], None],         # the one well-formed tuple
    ]
    context, security, sock = keyed_push(cluster.runner("forged").keys, sink_worker["port"])
    try:
        for group in groups:
            send_payload(sock, msgpack.packb([group]), peer)
        send_payload(sock, b"\x93random", peer)  # not even a batch
    finally:
        sock.close()
        security.close()
        context.term()

    wait_until(lambda: "-42" in sunk(tmp_path), timeout=10)
    wait_until(lambda: acked(tmp_path) == list(range(1, N + 1)), timeout=30)
    assert sorted(sunk(tmp_path), key=int) == [str(n) for n in [-42, *range(1, N + 1)]]
    assert not canary.exists()
    sink_errors = lambda: [e["error"] for e in cluster.get_topology_info("forged")["components"]["sink"]["errors"]]  # noqa: E731
    wait_until(lambda: len(sink_errors()) == 10, timeout=10)  # they come with the next heartbeat
    errors = sink_errors()
    # the packed pickle is refused by the serializer; everything else as malformed, the bare
    # extension type and the random bytes included
    assert sum("could not be deserialized" in e and "topology.fall.back.on.java.serialization" in e
               for e in errors) == 1, errors
    assert sum("malformed tuple record" in e for e in errors) == len(groups) - 2 + 1
    assert all(w["restarts"] == 0 for w in cluster.get_topology_info("forged")["workers"])


@pytest.mark.processes
def test_forged_ack_batches_from_another_worker_are_dropped(cluster, tmp_path):
    """Ack batches (many inits or acks in one message) and completion batches travel between
    workers, but only to the tasks they are for: one for a task that is not an acker (or
    not a spout), naming a spout task that does not exist, or that does not fit its schema,
    is dropped, so a peer cannot kill an executor with it."""
    cluster.submit_topology("forged", pconf(), numbers_topology(str(tmp_path), limit=N))
    info = cluster.get_topology_info("forged")
    tasks = {e["component"]: (w["port"], e["tasks"][0]) for w in info["workers"] for e in w["executors"]}
    acker_port, acker_task = tasks["__acker"]
    spout_port, spout_task = tasks["numbers"]
    relay_port, relay_task = tasks["relay"]
    runner_keys = cluster.runner("forged").keys
    # [1, source, acker task, roots, vals, spout tasks] and [2, source, spout task, roots]
    for port, group in ((acker_port, [1, relay_task, relay_task, [1], [3], [spout_task]]),  # not an acker
                        (acker_port, [1, relay_task, acker_task, [1], [3], [9999]]),  # no such spout task
                        (acker_port, [1, relay_task, acker_task, ["1"], [3], [-1]]),  # a root that is a string
                        (relay_port, [2, acker_task, relay_task, [1, 2, 3]])):  # completions for a bolt
        context, security, sock = keyed_push(runner_keys, port)
        try:
            send_payload(sock, msgpack.packb([group]))
        finally:
            sock.close()
            security.close()
            context.term()
    wait_until(lambda: all_acked(tmp_path), timeout=30)
    assert acked(tmp_path) == list(range(1, N + 1))  # none acked by the forgery, none twice
    def dropped() -> set[str]:  # each is reported for every component of the worker that dropped it
        return {e["error"] for c in cluster.get_topology_info("forged")["components"].values() for e in c["errors"]
                if "malformed" in e["error"]}

    wait_until(lambda: len(dropped()) == 4, timeout=10)
    assert sum("does not fit this worker's ackers" in e for e in dropped()) == 2
    assert sum("not a spout task" in e for e in dropped()) == 1
    assert sum("unreadable" in e and "Expected `int`" in e for e in dropped()) == 1
    assert all(w["restarts"] == 0 for w in cluster.get_topology_info("forged")["workers"])


@pytest.mark.processes
def test_random_bytes_from_a_peer_with_the_keys_leave_the_master_supervising(cluster, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="squall.master")
    cluster.submit_topology("noisy", pconf(), numbers_topology(str(tmp_path), limit=N))
    runner = cluster.runner("noisy")
    context = zmq.Context()
    security = LinkSecurity(context, runner.keys, "test")
    dealer = context.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.identity = b"0/0"
    security.client(dealer)
    dealer.connect(runner.address)
    try:
        dealer.send(os.urandom(4096))
        dealer.send(msgpack.packb({"type": "heartbeat", "executors": "lots", "errors": []}))
        dealer.send(msgpack.packb({"type": "bound", "host": "127.0.0.1", "port": 70000}))
        wait_until(lambda: caplog.text.count("dropped a malformed message") >= 3, timeout=10)
    finally:
        dealer.close()
        security.close()
        context.term()
    assert "port" in caplog.text and "70000" not in str(cluster.get_topology_info("noisy")["workers"])
    # the master still supervises: a killed worker is restarted and every message is acked
    victim = cluster.get_topology_info("noisy")["workers"][1]["pid"]
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: cluster.get_topology_info("noisy")["workers"][1]["restarts"] == 1, timeout=20)
    wait_until(lambda: gone(victim), timeout=10)
    wait_until(lambda: all_acked(tmp_path), timeout=40)


@pytest.mark.processes
def test_an_executor_thread_that_dies_takes_its_worker_down_and_it_is_restarted(cluster, tmp_path):
    marker = tmp_path / "died"
    cluster.submit_topology("dies", pconf(), numbers_topology(str(tmp_path), limit=50, middle=DiesOnce(str(marker))))
    wait_until(lambda: all_acked(tmp_path, 50), timeout=40)
    assert marker.exists()
    info = cluster.get_topology_info("dies")
    assert sum(w["restarts"] for w in info["workers"]) == 1
    errors = [e["error"] for e in info["components"]["relay"]["errors"]]
    assert any("executor relay" in e and "died, so the worker stops" in e and "DieOnce" in e for e in errors), errors


def test_an_executor_thread_that_dies_in_process_fails_the_topology(tmp_path):
    marker = tmp_path / "died"
    with LocalCluster() as cluster:
        cluster.submit_topology("dies", Config(), numbers_topology(str(tmp_path), limit=5, middle=DiesOnce(str(marker))))
        wait_until(lambda: cluster.get_topology_info("dies")["status"] == "FAILED", timeout=10)
        errors = [e["error"] for e in cluster.get_topology_info("dies")["components"]["relay"]["errors"]]
        assert any("died, so the worker stops" in e for e in errors)


@pytest.mark.processes
def test_the_registry_keeps_control_keys_private(cluster, home, tmp_path):
    with ControlServer(cluster, "private", "processes", 3, LocalRegistry()):
        [entry] = registry_dir().glob("*.json")
        assert stat.S_IMODE(entry.stat().st_mode) == 0o600
        assert stat.S_IMODE(registry_dir().stat().st_mode) == 0o700
        keys = json.loads(entry.read_text())["keys"]
        assert len(keys["public"]) == 40 and len(keys["secret"]) == 40


def as_nobody(action) -> str:
    """Run ``action()`` in a child process switched to user nobody; return what it returned
    (or the exception it raised) as text."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nothing of the parent's sockets is used
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            try:
                result = repr(action())
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                result = f"{type(e).__name__}: {e}"
            os.write(write, result.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        result = f.read()
    os.waitpid(pid, 0)
    return result


@pytest.mark.processes
@pytest.mark.skipif(os.geteuid() != 0, reason="switching to another user (nobody) needs root")
def test_another_user_cannot_list_read_or_kill_a_topology(cluster, home, tmp_path):
    from squall.ops import control as ctl

    os.chmod(tmp_path, 0o755)  # let the other user reach SQUALL_HOME: the registry's own modes must hold
    with ControlServer(cluster, "mine", "processes", 3, LocalRegistry()) as control:
        cluster.submit_topology("mine", pconf(), numbers_topology(str(tmp_path), limit=N))
        [entry] = registry_dir().glob("*.json")
        address = json.loads(entry.read_text())["address"]
        assert as_nobody(lambda: [e.name for e in LocalRegistry().running()]) == "[]"
        for action in (lambda: ctl.kill(LocalRegistry(), "mine", 0), lambda: ctl.deactivate(LocalRegistry(), "mine"),
                       lambda: ctl.info(LocalRegistry(), "mine")):
            assert as_nobody(action).startswith("NotAliveError: no topology named 'mine'")

        def knock() -> str:  # straight at the control socket, with no keys
            sock = zmq.Context().socket(zmq.REQ)
            sock.linger = 0
            sock.connect(address)
            sock.send(msgpack.packb({"op": "kill", "wait_secs": 0}))
            return "answered" if sock.poll(1000) else "no answer"

        assert as_nobody(knock) == "'no answer'"
        wait_until(lambda: acked(tmp_path) == list(range(1, N + 1)), timeout=30)
        assert not control.kill_requested.is_set()
        assert cluster.get_topology_info("mine")["status"] == "ACTIVE"


@pytest.mark.processes
def test_links_are_plain_when_asked_and_the_topology_still_runs(cluster, tmp_path):
    conf = pconf(Config().set_messaging_secure(False))
    cluster.submit_topology("plain", conf, numbers_topology(str(tmp_path), limit=N))
    assert cluster.runner("plain").keys is None
    wait_until(lambda: acked(tmp_path) == list(range(1, N + 1)), timeout=30)


@pytest.mark.processes
def test_a_topology_refuses_another_topologys_traffic(cluster, tmp_path):
    """Each topology has its own keys: a well-formed batch for a real task of "b", sent with
    "a"'s keys (as a worker of "a" whose peer's port "b" re-used would), never arrives."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cluster.submit_topology("a", pconf(), numbers_topology(str(tmp_path / "a")))
    cluster.submit_topology("b", pconf(), numbers_topology(str(tmp_path / "b")))
    info = cluster.get_topology_info("b")
    worker = next(w for w in info["workers"] if any(e["component"] == "sink" for e in w["executors"]))
    sink_task = next(e["tasks"][0] for e in worker["executors"] if e["component"] == "sink")
    relay_task = next(t for w in info["workers"] for e in w["executors"] if e["component"] == "relay"
                      for t in e["tasks"])
    context, security, sock = keyed_push(cluster.runner("a").keys, worker["port"])
    try:
        send_payload(sock, msgpack.packb([[sink_task], [relay_task], ["default"], [[-1]], [{}]]))
        wait_until(lambda: refusals(worker_logs(cluster, "b"), "worker port") >= 1, timeout=10)
    finally:
        sock.close()
        security.close()
        context.term()
    wait_until(lambda: acked(tmp_path / "b") == list(range(1, N + 1)), timeout=30)
    assert sorted(map(int, sunk(tmp_path / "b"))) == list(range(1, N + 1))  # no -1
    wait_until(lambda: acked(tmp_path / "a") == list(range(1, N + 1)), timeout=30)
