"""What the test modules share: recording stores, waiting helpers, topology-info accessors
and the small components many tests run.

Components are cloudpickled at ``create_topology``. Classes defined at module level in an
importable module (this one, or a test module) are pickled by reference, so the copies
running in the (in-process) workers use this module's stores. The stores are reset before
every test by the autouse fixture in ``conftest.py``.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict

from squall import BasicBolt, Bolt, Spout, TopologyBuilder
from squall.testing import FeederSpout, wait_until

WAIT = 5.0
#: a port of 127.0.0.1 where nothing listens (tcpmux): "unreachable" without the race of a port
#: found free a moment ago
CLOSED_PORT = 1
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports of 127.0.0.1 free now, for servers that must be told their port
    before they start (a restarted worker or broker binds the same one again). Chosen below the
    kernel's ephemeral range, so no outgoing connection is given one meanwhile (a client
    reconnecting to a stopped server could otherwise connect to itself there), and outside
    Storm's default slots 6700-6703."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        ephemeral_low = int(f.read().split()[0])
    rng, socks, ports = random.Random(), [], []
    try:
        while len(ports) < n and len(socks) < 200 * n:
            port = rng.randrange(10_000, ephemeral_low)
            if 6700 <= port <= 6703 or port in ports:
                continue
            s = socket.socket()
            socks.append(s)  # held until all are chosen: distinct
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            ports.append(port)
        if len(ports) == n:
            return ports
        raise RuntimeError(f"fewer than {n} free ports between 10000 and {ephemeral_low}")
    finally:
        for s in socks:
            s.close()


def connects(monkeypatch) -> list:
    """The addresses this process's sockets connect to from now on (Python's sockets: a client
    library's, not ZeroMQ's), in order."""
    addresses = []
    connect = socket.socket.connect

    def counted(sock, address):
        addresses.append(address)
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", counted)
    return addresses


def squall_cli(*args: str, cwd=REPO, env: dict[str, str] | None = None,
               timeout: float = 60) -> subprocess.CompletedProcess:
    """``python -m squall ARGS`` run to its end in ``cwd`` (default: the repository), with
    ``env`` (default: this process's environment); its output as text."""
    return subprocess.run([sys.executable, "-m", "squall", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def summary_row(stderr: str, component: str) -> list[str]:
    """The row of ``component`` in the summary ``squall run`` / ``submit`` prints, split into its
    columns: component type tasks emitted transferred acked failed ..."""
    return next(line.split() for line in stderr.splitlines() if line.startswith(component + " "))

# -- recording stores ------------------------------------------------------------------------

_lock = threading.Lock()
LOG: dict[object, list] = defaultdict(list)  # key -> what components recorded, in order
HELD: dict[str, list] = defaultdict(list)  # key -> [(collector, tuple)] a bolt did not ack
COUNTERS: dict[object, dict] = defaultdict(dict)  # key -> counters components keep up to date
STOP = threading.Event()  # free-running spouts stop emitting once set
SLOW = threading.Event()  # slow sinks sleep per tuple while set


def reset() -> None:
    with _lock:
        LOG.clear()
        HELD.clear()
        COUNTERS.clear()
    STOP.clear()
    SLOW.clear()


def record(key, item) -> None:
    with _lock:
        LOG[key].append(item)


def logged(key) -> list:
    with _lock:
        return list(LOG[key])


def hold(key, collector, tup) -> None:
    """Keep (collector, tup) for the test to ack or fail later (see ``held``)."""
    with _lock:
        HELD[key].append((collector, tup))


def held(key) -> list:
    with _lock:
        return list(HELD[key])


def record_received(entry: dict) -> None:
    record(("received", entry["component"]), entry)


def received(component: str) -> list[dict]:
    """What the tasks of ``component`` recorded executing (a Recorder: see its ``keep``), in order."""
    return logged(("received", component))


def record_prepared(entry: dict) -> None:
    record(("prepared", entry["component"]), entry)


def prepared(component: str) -> list[dict]:
    """What the tasks of ``component`` recorded when prepared or opened (a Recorder: ``where``)."""
    return logged(("prepared", component))


def where(context) -> dict:
    return {
        "component": context.get_this_component_id(),
        "task": context.get_this_task_id(),
        "port": context.get_this_worker_port(),
        "worker_tasks": list(context.get_this_worker_tasks()),
    }


# -- waiting -------------------------------------------------------------------------------------


def stays(condition, secs=0.3, what="condition") -> None:
    """Assert ``condition()`` holds during the whole of ``secs``: 'nothing more happens' where no
    event can mark it (worker processes, an inactive or throttled spout). In-process, prefer a
    tracked topology and ``cluster.wait_idle``, or a barrier."""
    deadline = time.monotonic() + secs
    while time.monotonic() < deadline:
        assert condition(), f"{what} stopped holding"
        time.sleep(0.01)
    assert condition(), f"{what} stopped holding"


def settled(read, what: str, interval: float = 0.2, timeout: float = 5.0) -> int:
    """``read()`` once two readings ``interval`` seconds apart agree: for figures of another
    process (they come with its heartbeats), where no event says they stopped changing."""
    readings: list[int] = []

    def agree() -> bool:
        readings.append(read())
        return len(readings) > 1 and readings[-1] == readings[-2]

    wait_until(agree, timeout=timeout, interval=interval, message=f"{what} settled")
    return readings[-1]


def wait_for(feeder: FeederSpout, msg_id, outcome: str = "acked", timeout: float = WAIT) -> None:
    """Wait until ``msg_id`` is in the feeder's ``acked`` (or ``failed``) list."""
    ids = feeder.acked if outcome == "acked" else feeder.failed
    wait_until(lambda: msg_id in ids, timeout=timeout, message=f"message {msg_id!r} {outcome}")


def feed_and_wait(feeder: FeederSpout, values, msg_id, outcome: str = "acked") -> None:
    feeder.feed(values, msg_id=msg_id)
    wait_for(feeder, msg_id, outcome)


def barrier(feeder: FeederSpout, marker) -> None:
    """Feed a marker the topology acks, and wait for its ack. With one acker, once the
    marker's ack reached the spout, so did everything the tuples fed before it caused."""
    feed_and_wait(feeder, [f"marker-{marker}"], marker)


def feeder_builder(fields=("v",), spout_id="spout") -> tuple[FeederSpout, TopologyBuilder]:
    """A FeederSpout and a builder with it set as ``spout_id``."""
    feeder = FeederSpout(list(fields))
    builder = TopologyBuilder()
    builder.set_spout(spout_id, feeder)
    return feeder, builder


# -- topology info -------------------------------------------------------------------------------


def component_info(cluster, name: str, component: str) -> dict:
    return cluster.get_topology_info(name)["components"][component]


def errors_of(cluster, name: str, component: str) -> list[dict]:
    return component_info(cluster, name, component)["errors"]


def executors_of(cluster, name: str, component: str | None = None) -> list[dict]:
    info = cluster.get_topology_info(name)
    return [e for w in info["workers"] for e in w["executors"] if component is None or e["component"] == component]


def tasks_of(cluster, name: str, component: str) -> list[int]:
    return sorted(t for e in executors_of(cluster, name, component) for t in e["tasks"])


# -- components ----------------------------------------------------------------------------------


KILL_9_CONF = {"topology.workers": 2, "topology.max.spout.pending": 100, "topology.message.timeout.secs": 10,
               "worker.heartbeat.frequency.secs": 0.2, "supervisor.worker.timeout.secs": 5}


def kill_9_spout_worker_mid_stream(cluster, name: str, progress, total: int, spout: str = "spout") -> None:
    """Once ``progress()`` (what reached the sink) is a fifth of ``total``, ``kill -9`` the worker
    process running ``spout`` and wait until it restarted; then check the kill was mid-stream."""
    workers = cluster.get_topology_info(name)["workers"]
    index = next(i for i, w in enumerate(workers) if spout in {e["component"] for e in w["executors"]})
    wait_until(lambda: progress() >= total // 5, timeout=60, message="a fifth of the input through")
    pid = workers[index]["pid"]
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: cluster.get_topology_info(name)["workers"][index]["pid"] not in (pid, None), timeout=20,
               message=f"{spout}'s worker restarted")
    assert progress() < total, "the kill was not mid-stream"

class CountingSpout(Spout):
    """Emits ``n`` tuples with message ids 0..n-1 (no replay)."""

    outputs = ["v"]

    def __init__(self, n):
        self.n = n

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0

    def next_tuple(self):
        if self.i < self.n:
            self.collector.emit([self.i], msg_id=self.i)
            self.i += 1


class Sink(Bolt):
    """Acks every input; subclasses keep something of it first."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.keep(tup)
        self.collector.ack(tup)

    def keep(self, tup):
        pass


class BasicSink(BasicBolt):
    def execute(self, tup, collector):
        pass


class RecordSink(Sink):
    """Records the first value of every input under ``key``."""

    def __init__(self, key):
        self.key = key

    def keep(self, tup):
        record(self.key, self.item(tup))

    def item(self, tup):
        return tup.values[0]


class TupleRecorder(RecordSink):
    """Records every tuple it receives (the Tuple objects themselves) under ``key``."""

    def item(self, tup):
        return tup


class SlowSink(RecordSink):
    """A RecordSink that sleeps 2 ms per tuple while SLOW is set."""

    def keep(self, tup):
        if SLOW.is_set():
            time.sleep(0.002)
        super().keep(tup)


class Recorder(Sink):
    """Records where it runs (``prepared``) and every input with where it ran (``received``)."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.where = where(context)
        record_prepared(self.where)

    def keep(self, tup) -> None:
        w = self.where
        record_received({
            "component": w["component"],
            "task": w["task"],
            "port": w["port"],
            "worker_tasks": w["worker_tasks"],
            "source_component": tup.source_component,
            "source_task": tup.source_task,
            "stream": tup.source_stream_id,
            "fields": list(tup.fields),
            "values": list(tup.values),
        })


class HoldBolt(Bolt):
    """Never acks: keeps (collector, tuple) for the test to ack or fail later (``held``),
    and records each input's first value under ``key``, its task under ``key + ".tasks"``."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()

    def execute(self, tup):
        # recorded before it is held: a test that saw it held sees the records too
        record(self.key, tup.values[0])
        record(self.key + ".tasks", self.task)
        hold(self.key, self.collector, tup)


def _action(value):
    """What a ScriptBolt does with its input, from the value's prefix."""
    text = str(value)
    for prefix in ("hold", "fail"):
        if text.startswith(prefix):
            return prefix
    return "ack"


class ScriptBolt(Bolt):
    """Records every input; emits ``copies`` outputs (anchored or not); then acks, fails or
    holds the input according to its first value's prefix ("hold..." / "fail..." / else ack).

    With ``copies`` = 0 it is a sink.
    """

    def __init__(self, key, copies=0, anchored=True, decide=True):
        self.key = key
        self.copies = copies
        self.anchored = anchored
        self.decide = decide  # False: always ack (the prefix only matters downstream)

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        record(self.key, tup.values[0])
        for i in range(self.copies):
            self.collector.emit([f"{tup.values[0]}.{i}"], anchors=tup if self.anchored else None)
        action = _action(tup.values[0]) if self.decide else "ack"
        if action == "ack":
            self.collector.ack(tup)
        elif action == "fail":
            self.collector.fail(tup)
        else:
            hold(self.key, self.collector, tup)


class Relay(Bolt):
    """Re-emits its input's values anchored to it (as a list of anchors), then acks it."""

    def __init__(self, fields=("v",)):
        self.fields = list(fields)

    def declare_output_fields(self, declarer):
        declarer.declare(self.fields)

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit(list(tup.values), anchors=[tup])
        self.collector.ack(tup)


# -- a connector's spout into a recording sink ----------------------------------------------------


def spout_to_sink(spout, sink) -> object:
    """A topology of ``spout`` (id "spout") shuffled into ``sink`` (id "sink")."""
    builder = TopologyBuilder()
    builder.set_spout("spout", spout)
    builder.set_bolt("sink", sink).shuffle_grouping("spout")
    return builder.create_topology()


class KeyedBolt(Bolt):
    """A bolt recording under ``key``, with ``limit`` or ``targets`` saying what it acks."""

    def __init__(self, key, limit=None, targets=()):
        self.key, self.limit, self.targets = key, limit, set(targets)

    def prepare(self, conf, context, collector):
        self.collector = collector


class FailFirstBolt(KeyedBolt):
    """Records the entry id of every input; fails each of ``targets`` the first time, acks the rest."""

    def execute(self, tup):
        entry_id = tup.values[0]
        seen = entry_id in logged(self.key)
        record(self.key, entry_id)
        if entry_id in self.targets and not seen:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def tree_maps(group) -> list[dict[int, int] | None]:
    """Each tuple's trees in a TupleGroup as one map (root -> edge; None untracked), whatever
    the group's kind (root and edge columns, or tree maps)."""
    if group.roots is not None:
        return [{root: edge} for root, edge in zip(group.roots, group.edges)]
    return list(group.tree_ids) if group.tree_ids is not None else [None] * len(group.tasks)
