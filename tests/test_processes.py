"""Workers as processes (``LocalCluster(processes=True)`` and ``squall run``): the same
topology in several OS processes joined by ZeroMQ, at-least-once across ``kill -9``,
backpressure across processes, lifecycle (no worker process left behind), workers that
cannot start, errors and metrics from every worker, heartbeat timeouts and registered
serializers.

Bolts and spouts run in other processes here: what they do is recorded in files under the
test's ``tmp_path`` (one ``os.write`` per line on an ``O_APPEND`` descriptor, so lines from
processes killed with ``kill -9`` are whole) or read from ``get_topology_info``, whose
figures come with the workers' heartbeats (every 0.2 s in these tests).

Components are classes of this module and of ``process_topologies`` (the word count and the
at-least-once pipeline, shared with the Spark and host tests): they are pickled by reference,
and the workers import those modules (the supervisor hands them this process's ``sys.path``).
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections import Counter

import pytest

from helpers import CountingSpout, free_ports, squall_cli, stays
from process_topologies import (
    LineLog, LogBolt, append_line, at_least_once_topology, component, gone, pconf, put_messages, read_file_lines,
    read_lines, sentences, wordcount,
)
from squall import BasicBolt, Bolt, LocalCluster, Spout, TopologyBuilder, TopologySetupError
from squall.testing import complete_topology, read_tuples, wait_until

pytestmark = pytest.mark.processes

WORKER_MODULE = b"squall.cluster.worker_process"


# -- helpers ---------------------------------------------------------------------------------------


def running_worker(pid: int) -> bool:
    """True when ``pid`` is a live (not zombie) squall worker process."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return WORKER_MODULE in f.read()
    except (FileNotFoundError, ProcessLookupError):
        return False


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of ``pid`` from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[1])


def worker_children() -> list[int]:
    """This process's child processes that are (or were: zombies) squall workers."""
    me, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _stat(int(entry))
        if stat is None or stat[1] != me:
            continue
        if stat[0] == "Z" or running_worker(int(entry)):
            found.append(int(entry))
    return found


def supervisor_kills(caplog) -> list[str]:
    """The supervisor's warnings that it killed a worker: one silent past its (start) timeout, or
    one still running at the end of a stop's grace."""
    return [r.getMessage() for r in caplog.records if r.name == "squall.supervisor" and "killing it" in r.getMessage()]


SEEN_PIDS: set[int] = set()


def workers(cluster: LocalCluster, name: str) -> list[dict]:
    """get_topology_info's workers (their pids are remembered for the clean-up)."""
    ws = cluster.get_topology_info(name)["workers"]
    SEEN_PIDS.update(w["pid"] for w in ws if w["pid"])
    return ws


def worker_index(cluster: LocalCluster, name: str, component: str) -> int:
    """The one worker hosting ``component``'s executors."""
    found = {i for i, w in enumerate(workers(cluster, name)) for e in w["executors"] if e["component"] == component}
    assert len(found) == 1, f"{component!r} runs in workers {sorted(found)}"
    return found.pop()


@pytest.fixture
def pcluster():
    SEEN_PIDS.clear()
    stopped: list[int] = []
    cluster = LocalCluster(processes=True)
    cluster.stopped_pids = stopped  # pids a test SIGSTOPped: continued at the end whatever happened
    try:
        yield cluster
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        cluster.shutdown()
        leftovers = [pid for pid in SEEN_PIDS if not gone(pid)] + worker_children()
        for pid in set(leftovers):  # never leave a worker of ours behind for the next test
            stat = _stat(pid)
            if stat is not None and stat[1] == os.getpid() and stat[0] != "Z":
                os.kill(pid, signal.SIGKILL)
        assert not leftovers, f"worker processes left after shutdown: {sorted(set(leftovers))}"


# -- components --------------------------------------------------------------------------------------


class FileCounter:
    """A number kept in a file (rewritten in place), readable by the test at any time."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def set(self, n):
        os.pwrite(self.fd, b"%20d\n" % n, 0)


def read_counter(path) -> int:
    try:
        with open(path) as f:
            return int(f.read().strip() or 0)
    except FileNotFoundError:
        return 0


class FastSpout(Spout):
    """From ``start_after`` seconds after open, emits 0, 1, 2, ... as fast as it is let,
    without message ids; keeps the number emitted (to the last 50) in ``root/emitted``."""

    outputs = ["n"]

    def __init__(self, root, start_after=0.0):
        self.root = str(root)
        self.start_after = start_after

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.counter = FileCounter(os.path.join(self.root, "emitted"))
        self.start_at = time.monotonic() + self.start_after

    def next_tuple(self):
        if self.start_at is not None:
            if time.monotonic() < self.start_at:
                return
            self.start_at = None
        self.collector.emit([self.n])
        self.n += 1
        if self.n % 50 == 0:
            self.counter.set(self.n)


class SlowBolt(BasicBolt):
    """Sleeps 2 ms per tuple until a file ``root/fast`` exists (looked for every 10 tuples);
    keeps the number executed (to the last 10) in ``root/executed``."""

    def __init__(self, root):
        self.root = str(root)

    def prepare(self, conf, context):
        self.n = 0
        self.counter = FileCounter(os.path.join(self.root, "executed"))
        self.fast = False

    def execute(self, tup, collector):
        if not self.fast:
            time.sleep(0.002)
        self.n += 1
        if self.n % 10 == 0:
            self.counter.set(self.n)
            self.fast = self.fast or os.path.exists(os.path.join(self.root, "fast"))


class Fanout(BasicBolt):
    """Emits ``copies`` tuples per input (anchored: a basic bolt)."""

    outputs = ["v"]

    def __init__(self, copies):
        self.copies = copies

    def execute(self, tup, collector):
        for c in range(self.copies):
            collector.emit([tup.values[0] * 10 + c])


class Discard(BasicBolt):
    def execute(self, tup, collector):
        pass


class EventSpout(Spout):
    """Appends its lifecycle calls (open, activate, deactivate, close) with its pid and the
    number of tuples it emitted so far to ``root/events-<task>.log``; emits a tuple every
    10 ms without message id."""

    outputs = ["n"]

    def __init__(self, root):
        self.root = str(root)

    def _event(self, what):
        append_line(os.path.join(self.root, f"events-{self.task}.log"), f"{what} {os.getpid()} {self.n}")

    def open(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()
        self.n = 0
        self.next_at = 0.0
        self._event("open")

    def next_tuple(self):
        now = time.monotonic()
        if now >= self.next_at:
            self.next_at = now + 0.01
            self.collector.emit([self.n])
            self.n += 1

    def activate(self):
        self._event("activate")

    def deactivate(self):
        self._event("deactivate")

    def close(self):
        self._event("close")


class CleanupBolt(BasicBolt):
    """Appends ``"prepare <pid>"`` and ``"cleanup <pid>"`` to ``root/bolt-<task>.log``."""

    def __init__(self, root):
        self.root = str(root)

    def prepare(self, conf, context):
        self.path = os.path.join(self.root, f"bolt-{context.get_this_task_id()}.log")
        append_line(self.path, f"prepare {os.getpid()}")

    def execute(self, tup, collector):
        pass

    def cleanup(self):
        append_line(self.path, f"cleanup {os.getpid()}")


class PidSpout(Spout):
    """Records its pid in ``root/pid-<component>-<task>`` at open; emits nothing."""

    outputs = ["v"]

    def __init__(self, root):
        self.root = str(root)

    def open(self, conf, context, collector):
        path = os.path.join(self.root, f"pid-{context.get_this_component_id()}-{context.get_this_task_id()}")
        append_line(path, str(os.getpid()))


class BadPrepareBolt(BasicBolt):
    """Records its pid in ``root/pid-bad``, then raises in prepare."""

    def __init__(self, root, token):
        self.root = str(root)
        self.token = token

    def prepare(self, conf, context):
        append_line(os.path.join(self.root, "pid-bad"), str(os.getpid()))
        raise RuntimeError(f"cannot prepare: {self.token}")

    def execute(self, tup, collector):
        pass


class SlowFirstPrepareBolt(BasicBolt):
    """Its first prepare records its pid in ``root/preparing`` and takes a minute (the test
    kills it meanwhile); a later one returns at once."""

    def __init__(self, root):
        self.root = str(root)

    def prepare(self, conf, context):
        path = os.path.join(self.root, "preparing")
        if not os.path.exists(path):
            append_line(path, str(os.getpid()))
            time.sleep(60)

    def execute(self, tup, collector):
        pass


class PoisonableBolt(BasicBolt):
    """Prepares fine until ``root/poison`` exists; from then on raises in prepare."""

    def __init__(self, root, token):
        self.root = str(root)
        self.token = token

    def prepare(self, conf, context):
        append_line(os.path.join(self.root, "prepares.log"), str(os.getpid()))
        if os.path.exists(os.path.join(self.root, "poison")):
            raise RuntimeError(f"poisoned: {self.token}")

    def execute(self, tup, collector):
        pass


class TrickleSpout(Spout):
    """Emits 0, 1, 2, ... every 20 ms without message ids."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0
        self.next_at = 0.0

    def next_tuple(self):
        now = time.monotonic()
        if now >= self.next_at:
            self.next_at = now + 0.02
            self.collector.emit([self.n])
            self.n += 1


class TaggedSpout(Spout):
    """Emits ``n`` values ``"<task>-<i>"`` with message ids; every value whose i is in ``bad``
    is prefixed "bad-". Appends "ack <id>" / "fail <id>" to ``root/outcomes-<task>.log``."""

    outputs = ["v"]

    def __init__(self, root, n, bad):
        self.root = str(root)
        self.n = n
        self.bad = set(bad)

    def open(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()
        self.i = 0
        self.log = LineLog(os.path.join(self.root, f"outcomes-{self.task}.log"))

    def next_tuple(self):
        if self.i < self.n:
            value = f"{'bad-' if self.i in self.bad else ''}{self.task}-{self.i}"
            self.collector.emit([value], msg_id=value)
            self.i += 1

    def ack(self, msg_id):
        self.log.write(f"ack {msg_id}")

    def fail(self, msg_id):
        self.log.write(f"fail {msg_id}")


class Boom(Bolt):
    """Raises ValueError in execute for values starting with "bad", acks the others."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        value = tup.values[0]
        if value.startswith("bad"):
            raise ValueError(f"boom {value}")
        self.collector.ack(tup)


class Point:
    """A user type that must cross workers through its registered serializer: pickling it
    raises (so a cloudpickle fallback could not carry it)."""

    def __init__(self, x, y, via="constructor"):
        self.x = x
        self.y = y
        self.via = via

    def __reduce__(self):
        raise TypeError("a Point must not be pickled")


class PointSerializer:
    def serialize(self, point):
        return f"{point.x},{point.y}".encode()

    def deserialize(self, data):
        x, y = (int(v) for v in data.decode().split(","))
        return Point(x, y, via=f"registered serializer in pid {os.getpid()}")


class FragilePointSerializer(PointSerializer):
    """Serializes every Point, but cannot rebuild Point(3, 9) (as when a value's class
    cannot be loaded where it arrives)."""

    def deserialize(self, data):
        point = super().deserialize(data)
        if point.x == 3:
            raise ValueError("cannot rebuild point 3")
        return point


class PacedPointSpout(Spout):
    """Emits Point(i, i*i) with message id i for i < n, one every 10 ms; replays what
    fails. Appends "ack <i>" / "fail <i>" to ``root/points-spout.log``."""

    outputs = ["p"]

    def __init__(self, root, n):
        self.root = str(root)
        self.n = n

    def open(self, conf, context, collector):
        self.collector = collector
        self.todo = collections.deque(range(self.n))
        self.next_at = 0.0
        self.log = LineLog(os.path.join(self.root, "points-spout.log"))

    def next_tuple(self):
        now = time.monotonic()
        if self.todo and now >= self.next_at:
            self.next_at = now + 0.01
            i = self.todo.popleft()
            self.collector.emit([Point(i, i * i)], msg_id=i)

    def ack(self, msg_id):
        self.log.write(f"ack {msg_id}")

    def fail(self, msg_id):
        self.log.write(f"fail {msg_id}")
        if msg_id != 3:
            self.todo.append(msg_id)


class PointSpout(Spout):
    """Emits Point(i, i*i) with message id i, for i < n; records acks and fails in
    ``root/points-spout.log`` (with its pid)."""

    outputs = ["p"]

    def __init__(self, root, n):
        self.root = str(root)
        self.n = n

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0
        self.log = LineLog(os.path.join(self.root, "points-spout.log"))
        self.log.write(f"open {os.getpid()}")

    def next_tuple(self):
        if self.i < self.n:
            i, self.i = self.i, self.i + 1
            self.collector.emit([Point(i, i * i)], msg_id=i)

    def ack(self, msg_id):
        self.log.write(f"ack {msg_id}")

    def fail(self, msg_id):
        self.log.write(f"fail {msg_id}")


class PointBolt(Bolt):
    def __init__(self, root):
        self.root = str(root)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.log = LineLog(os.path.join(self.root, "points-bolt.log"))

    def execute(self, tup):
        p = tup.values[0]
        self.log.write(json.dumps({"type": type(p).__qualname__, "x": p.x, "y": p.y, "via": p.via,
                                   "pid": os.getpid()}))
        self.collector.ack(tup)


# -- 1. word count --------------------------------------------------------------------------------


def test_wordcount_in_two_worker_processes_counts_like_complete_topology(pcluster, tmp_path):
    lines = sentences(400)
    expected = Counter(word for line in lines for word in line.split())

    # the reference: complete_topology (in-process workers)
    results = complete_topology(wordcount(lines), conf={"topology.workers": 2})
    reference: dict[str, int] = {}
    for word, count in read_tuples(results, "count"):
        reference[word] = max(reference.get(word, 0), count)
    assert reference == expected

    pcluster.submit_topology("wc", pconf(), wordcount(lines, str(tmp_path)))
    ws = workers(pcluster, "wc")
    pids = [w["pid"] for w in ws]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    for cid in ("sentences", "split", "count"):  # every component spans both processes
        assert {i for i, w in enumerate(ws) for e in w["executors"] if e["component"] == cid} == {0, 1}
    wait_until(lambda: component(pcluster, "wc", "sentences")["acked"] == len(lines), timeout=10,
               message="every sentence acked")
    pcluster.kill_topology("wc", wait_secs=0)  # the count tasks write their totals at cleanup

    written = [json.loads((tmp_path / name).read_text()) for name in sorted(os.listdir(tmp_path))
               if name.startswith("count-") and name.endswith(".json")]
    assert len(written) == 2
    assert sorted(w["pid"] for w in written) == sorted(pids)  # one count task per worker process
    first, second = (Counter(w["counts"]) for w in written)
    assert not set(first) & set(second), "fields grouping sent a word to both count tasks"
    assert dict(first + second) == reference


# -- 2, 3. at-least-once across kill -9 -------------------------------------------------------------


@pytest.mark.parametrize("victim", ["b_work", "a_src"])
def test_kill_9_of_a_worker_loses_no_message(pcluster, tmp_path, victim):
    first = [f"m{i:04d}" for i in range(300)]
    topology, settings = at_least_once_topology(tmp_path, first)
    pcluster.submit_topology("alo", pconf(settings), topology)

    spout_worker = worker_index(pcluster, "alo", "a_src")
    bolt_worker = worker_index(pcluster, "alo", "b_work")
    assert spout_worker != bolt_worker
    v = spout_worker if victim == "a_src" else bolt_worker
    before = workers(pcluster, "alo")
    victim_pid, other_pid = before[v]["pid"], before[1 - v]["pid"]

    def sunk() -> set[str]:
        return {line.split()[0] for line in read_lines(tmp_path, "sink-")}

    wait_until(lambda: len(sunk()) >= 150, timeout=15, interval=0.01, message="150 messages through the sink")
    done_before_kill = len(os.listdir(tmp_path / "done"))
    os.kill(victim_pid, signal.SIGKILL)
    assert done_before_kill < len(first), "the kill was not mid-stream"

    def restarted() -> bool:
        w = workers(pcluster, "alo")[v]
        return w["pid"] != victim_pid and w["restarts"] == 1

    wait_until(restarted, timeout=10, interval=0.02, message=f"worker {v} restarted")
    wait_until(lambda: gone(victim_pid), timeout=5, message="the killed worker reaped")
    new_pid = workers(pcluster, "alo")[v]["pid"]
    assert not gone(new_pid)

    # the topology goes on: messages that arrive after the restart are processed too
    second = [f"n{i:04d}" for i in range(20)]
    put_messages(tmp_path, second)
    wanted = set(first) | set(second)
    wait_until(lambda: set(os.listdir(tmp_path / "done")) == wanted, timeout=15, interval=0.05,
               message="every message acked (moved to done/)")
    assert os.listdir(tmp_path / "inbox") == []
    assert sunk() == wanted  # every message reached the sink at least once
    # the figures count over the victim's runs: its first run's (as of its last heartbeat, at
    # most 0.2 s and 20 pending tuples before the kill) with the new run's
    figure = "acked" if victim == "a_src" else "executed"
    victim_figures = pcluster.get_topology_info("alo")["components"][victim]
    counted = victim_figures[figure]
    assert counted >= len(wanted) - 40, (figure, counted)
    assert 0 < victim_figures["current"][figure] < counted  # the new run's alone

    after = workers(pcluster, "alo")
    assert after[v]["restarts"] == 1 and after[v]["pid"] == new_pid
    assert after[1 - v]["restarts"] == 0 and after[1 - v]["pid"] == other_pid
    bolt_pids = {line.split()[1] for line in read_lines(tmp_path, "work-")}
    opens = read_file_lines(tmp_path / "spout-opens.log")
    if victim == "b_work":
        assert bolt_pids == {str(victim_pid), str(new_pid)}
        assert opens == [str(other_pid)]
    else:
        assert bolt_pids == {str(other_pid)}
        assert opens == [str(victim_pid), str(new_pid)]  # the restarted spout re-read its source


# -- 4. backpressure across processes ---------------------------------------------------------------


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_slow_bolt_in_one_worker_throttles_fast_spout_in_the_other(pcluster, tmp_path):
    """Credit-based flow control, counted: the spout's worker sends the slow bolt's only what
    the bolt's worker granted, from the first tuple on, and throughput recovers with the bolt."""
    builder = TopologyBuilder()
    builder.set_spout("a_fast", FastSpout(tmp_path))
    builder.set_bolt("b_slow", SlowBolt(tmp_path)).shuffle_grouping("a_fast")
    window = 32
    conf = pconf({"topology.acker.executors": 0, "topology.executor.receive.buffer.size": 64,
                  "topology.receiver.credit.size": window, "topology.transfer.buffer.size": 64})
    pcluster.submit_topology("bp", conf, builder.create_topology())
    assert worker_index(pcluster, "bp", "a_fast") != worker_index(pcluster, "bp", "b_slow")
    slow_pid = workers(pcluster, "bp")[worker_index(pcluster, "bp", "b_slow")]["pid"]

    # the figures are read from files the components keep up to date: get_topology_info's
    # "executed" of a bolt is updated per drained batch, which can take seconds here
    def figures() -> tuple[int, int]:
        return read_counter(tmp_path / "emitted"), read_counter(tmp_path / "executed")

    wait_until(lambda: figures()[1] > 0, timeout=5, message="the slow bolt executing")
    samples = []
    rss_start = rss_kb(slow_pid)
    t_end = time.monotonic() + 3
    while time.monotonic() < t_end:
        time.sleep(0.05)  # the sampling period of a 3 s measurement, not a wait
        samples.append(figures())
    rss_end = rss_kb(slow_pid)
    backlog = [emitted - executed for emitted, executed in samples]
    slow_rate = (samples[-1][1] - samples[0][1]) / 3
    assert slow_rate * 3 > 500, f"the slow bolt hardly ran: {samples}"
    # Tuples emitted and not executed, at any time: the window the bolt's worker granted the
    # spout's (what waits in the bolt's queue or is on the way), what the bolt took and executes
    # (credit comes back as it takes: at most a window), and on the spout's side one batch
    # waiting for credit and one in the overflow (then the spout is not called). Batches are no
    # larger than the window. The executed counter lags by up to 9; the emitted one only runs behind.
    assert max(backlog) <= 2 * window + 2 * window + 9, f"emitted - executed: {backlog}"
    assert rss_end - rss_start < 30_000, f"the slow worker's RSS grew from {rss_start} to {rss_end} kB"
    # the bolt recovers: so does the throughput
    (tmp_path / "fast").touch()
    executed = figures()[1]
    wait_until(lambda: figures()[1] - executed > 20 * slow_rate, timeout=10,
               message=f"the bolt executing 20 s of its slow rate ({slow_rate:.0f} tuples/s) within 10 s")
    # and the figures reach get_topology_info
    done = figures()[1]
    wait_until(lambda: component(pcluster, "bp", "b_slow")["executed"] >= done, timeout=10,
               message="the bolt's figures in get_topology_info")


def test_no_deadlock_when_two_workers_send_to_each_other(pcluster):
    n = 3000
    builder = TopologyBuilder()
    builder.set_spout("a_spout", CountingSpout(n))  # worker 0
    builder.set_bolt("b", Fanout(3)).shuffle_grouping("a_spout")  # worker 1
    builder.set_bolt("c", Fanout(2)).shuffle_grouping("b")  # worker 0
    builder.set_bolt("d", Discard()).shuffle_grouping("c")  # worker 1
    conf = pconf({"topology.message.timeout.secs": 30, "topology.executor.receive.buffer.size": 16,
                  "topology.receiver.credit.size": 16,
                  "topology.transfer.buffer.size": 16, "topology.producer.batch.size": 8})
    pcluster.submit_topology("two-way", conf, builder.create_topology())
    placement = [worker_index(pcluster, "two-way", cid) for cid in ("a_spout", "b", "c", "d")]
    assert placement[0] == placement[2] != placement[1] == placement[3]

    expected = {"acked": n, "failed": 0, "executed": (n, 3 * n, 6 * n)}

    def figures() -> dict:
        info = pcluster.get_topology_info("two-way")["components"]
        return {"acked": info["a_spout"]["acked"], "failed": info["a_spout"]["failed"],
                "executed": tuple(info[cid]["executed"] for cid in ("b", "c", "d"))}

    try:  # the workers' heartbeats come at different moments: wait for both to tell
        wait_until(lambda: figures() == expected, timeout=15, interval=0.05)
    except TimeoutError:
        pytest.fail(f"figures {figures()}, expected {expected}")


# -- 5. lifecycle -------------------------------------------------------------------------------------


def events(root, task) -> list[str]:
    return read_file_lines(os.path.join(root, f"events-{task}.log"))


def test_deactivate_activate_and_kill_reach_every_worker(pcluster, tmp_path):
    builder = TopologyBuilder()
    builder.set_spout("a_ev", EventSpout(tmp_path), 2)
    builder.set_bolt("b_sink", CleanupBolt(tmp_path), 2).shuffle_grouping("a_ev")
    pcluster.submit_topology("life", pconf(), builder.create_topology())
    ws = workers(pcluster, "life")
    pids = {str(w["pid"]) for w in ws}
    spout_tasks = sorted(t for w in ws for e in w["executors"] if e["component"] == "a_ev" for t in e["tasks"])
    assert {i for i, w in enumerate(ws) for e in w["executors"] if e["component"] == "a_ev"} == {0, 1}

    def kinds(task) -> list[str]:
        return [line.split()[0] for line in events(tmp_path, task)]

    wait_until(lambda: all(kinds(t) == ["open", "activate"] for t in spout_tasks), timeout=5,
               message="both spout tasks opened and activated")
    assert {events(tmp_path, t)[0].split()[1] for t in spout_tasks} == pids  # one per worker process

    def emitted() -> int:
        return component(pcluster, "life", "a_ev")["emitted"]

    def counts(kind) -> list[int]:  # per spout task: tuples emitted at its last `kind` call
        return [int([line for line in events(tmp_path, t) if line.startswith(kind)][-1].split()[2])
                for t in spout_tasks]

    wait_until(lambda: emitted() > 0, timeout=5)
    pcluster.deactivate("life")
    wait_until(lambda: all(kinds(t)[-1] == "deactivate" for t in spout_tasks), timeout=5,
               message="deactivate reached both spout tasks")
    frozen = sum(counts("deactivate"))
    assert all(c > 0 for c in counts("deactivate"))  # both spout tasks had been emitting
    wait_until(lambda: emitted() == frozen, timeout=5, message="the heartbeats' figures at deactivation")
    # no next_tuple while inactive, in either worker: from here only the workers' heartbeats show
    # that nothing is emitted, so nothing can mark the end of a wait for it
    stays(lambda: emitted() == frozen, secs=0.6, what="no emit while inactive")

    pcluster.activate("life")
    wait_until(lambda: all(kinds(t)[-1] == "activate" for t in spout_tasks), timeout=5,
               message="activate reached both spout tasks")
    assert counts("activate") == counts("deactivate")  # nothing emitted while inactive
    wait_until(lambda: emitted() > frozen, timeout=5, message="emitting again")

    pcluster.kill_topology("life", wait_secs=0)
    assert pcluster.get_topologies() == []
    for pid in pids:  # kill_topology returns once every worker process is gone (and reaped)
        assert gone(int(pid)), f"worker {pid} still exists after kill_topology"
    for t in spout_tasks:
        assert kinds(t) == ["open", "activate", "deactivate", "activate", "deactivate", "close"]
    cleanups = [line for line in read_lines(tmp_path, "bolt-") if line.startswith("cleanup")]
    assert {line.split()[1] for line in cleanups} == pids


def test_shutdown_leaves_no_worker_process(pcluster, tmp_path):
    pids = []
    for name in ("one", "two"):
        builder = TopologyBuilder()
        builder.set_spout("a", TrickleSpout())
        builder.set_bolt("b", Discard()).shuffle_grouping("a")
        pcluster.submit_topology(name, pconf(), builder.create_topology())
        pids += [w["pid"] for w in workers(pcluster, name)]
    assert len(set(pids)) == 4 and all(not gone(pid) for pid in pids)
    assert sorted(worker_children()) == sorted(pids)
    pcluster.shutdown()
    assert pcluster.get_topologies() == []
    assert [pid for pid in pids if not gone(pid)] == []
    assert worker_children() == []


RUN_FILE = """
import os
from squall import BasicBolt, Config, Spout, TopologyBuilder

OUT = {out!r}

class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0

    def next_tuple(self):
        if self.n < 500:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1

class Touch(BasicBolt):
    def prepare(self, conf, context):
        open(os.path.join(OUT, "bolt-%d" % os.getpid()), "w").close()

    def execute(self, tup, collector):
        pass

builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("touch", Touch(), 2).shuffle_grouping("numbers")
topology = builder.create_topology()
config = Config().set_num_workers(2)
config["supervisor.slots.ports"] = {ports!r}
"""


def write_run_file(tmp_path) -> str:
    out = tmp_path / "out"
    out.mkdir()
    path = tmp_path / "topo.py"
    path.write_text(RUN_FILE.format(out=str(out), ports=free_ports(2)))
    return str(path)


def pids_in(text: str) -> list[int]:
    match = re.search(r"running, workers as processes on ports (.*); Ctrl-C", text)
    assert match, f"no 'running ... as processes' line in:\n{text}"
    return [int(p) for p in re.findall(r"\(pid (\d+)\)", match.group(1))]


def test_squall_run_with_duration_runs_worker_processes_and_leaves_none(tmp_path):
    assert "--in-process" in squall_cli("run", "--help").stdout
    path = write_run_file(tmp_path)
    proc = squall_cli("run", path, "--duration", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    pids = pids_in(proc.stderr)
    assert len(set(pids)) == 2
    assert {f"bolt-{pid}" for pid in pids} == set(os.listdir(tmp_path / "out"))  # the bolts ran in them
    assert [pid for pid in pids if running_worker(pid)] == []
    assert re.search(r"numbers\s+spout\s+1\s+500\s", proc.stderr), proc.stderr  # all 500 emitted


def test_ctrl_c_on_squall_run_stops_it_cleanly(tmp_path):
    path = write_run_file(tmp_path)
    # its own session and process group: Ctrl-C reaches the group, workers included
    proc = subprocess.Popen([sys.executable, "-m", "squall", "run", path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, start_new_session=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
    reader.start()
    try:
        wait_until(lambda: any("running, workers as processes" in line for line in lines), timeout=20,
                   message="squall run started")
        pids = pids_in("".join(lines))
        wait_until(lambda: len(os.listdir(tmp_path / "out")) == 2, timeout=5, message="the bolts prepared")
        os.killpg(proc.pid, signal.SIGINT)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pytest.fail("squall run did not stop within 20 s of Ctrl-C; it printed:\n" + "".join(lines))
        assert code == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    text = "".join(lines)
    assert "squall: stopping" in text, text
    assert "Traceback" not in text, text
    assert [pid for pid in pids if running_worker(pid)] == []


# -- 6. workers that cannot start --------------------------------------------------------------------


def test_prepare_raising_in_a_worker_fails_submission_with_the_cause(pcluster, tmp_path, caplog):
    token = uuid.uuid4().hex
    builder = TopologyBuilder()
    builder.set_spout("a_ok", PidSpout(tmp_path))
    builder.set_bolt("b_bad", BadPrepareBolt(tmp_path, token)).shuffle_grouping("a_ok")
    with pytest.raises(TopologySetupError) as raised:
        pcluster.submit_topology("bad", pconf(), builder.create_topology())
    text = str(raised.value)
    assert "b_bad" in text and "RuntimeError" in text and token in text, text
    assert supervisor_kills(caplog) == []  # failed on the worker's report, not on a timeout
    assert pcluster.get_topologies() == []
    bad_pids = [int(p) for p in read_file_lines(tmp_path / "pid-bad")]
    assert len(bad_pids) == 1 and bad_pids[0] != os.getpid()  # it ran in a worker process, once
    ok_pids = [int(p) for p in read_lines(tmp_path, "pid-a_ok-")]  # if worker 0 got as far as open
    assert [pid for pid in bad_pids + ok_pids if not gone(pid)] == []
    assert worker_children() == []


def test_import_error_in_a_worker_fails_submission_with_the_cause(pcluster, tmp_path, caplog):
    module = f"ghost_{uuid.uuid4().hex[:12]}"
    where = tmp_path / "mods"
    where.mkdir()
    (where / f"{module}.py").write_text(textwrap.dedent("""
        from squall import BasicBolt

        class GhostBolt(BasicBolt):
            def execute(self, tup, collector):
                pass
    """))
    sys.path.insert(0, str(where))
    try:
        ghost = importlib.import_module(module)
        builder = TopologyBuilder()
        builder.set_spout("a_ok", PidSpout(tmp_path))
        builder.set_bolt("b_ghost", ghost.GhostBolt()).shuffle_grouping("a_ok")
        topology = builder.create_topology()  # the bolt is pickled by reference to its module
    finally:
        sys.path.remove(str(where))  # ...which the worker processes cannot import
    try:
        with pytest.raises(TopologySetupError) as raised:
            pcluster.submit_topology("ghost", pconf(), topology)
    finally:
        sys.modules.pop(module, None)
    text = str(raised.value)
    assert "b_ghost" in text and "ModuleNotFoundError" in text and module in text, text
    assert supervisor_kills(caplog) == []  # failed on the worker's report, not on a timeout
    assert pcluster.get_topologies() == []
    assert worker_children() == []


def test_a_worker_killed_while_the_topology_starts_is_restarted_and_the_submission_succeeds(pcluster, tmp_path):
    builder = TopologyBuilder()
    builder.set_spout("a_ok", PidSpout(tmp_path))
    builder.set_bolt("b_slow", SlowFirstPrepareBolt(tmp_path)).shuffle_grouping("a_ok")
    outcome = []

    def submit():
        try:
            pcluster.submit_topology("slowstart", pconf({"supervisor.worker.start.timeout.secs": 30}),
                                     builder.create_topology())
            outcome.append("submitted")
        except Exception as e:  # noqa: BLE001 - the test reports it
            outcome.append(e)

    submitting = threading.Thread(target=submit)
    submitting.start()
    wait_until(lambda: read_file_lines(tmp_path / "preparing"), timeout=20, message="the first prepare under way")
    os.kill(int(read_file_lines(tmp_path / "preparing")[0]), signal.SIGKILL)
    submitting.join(30)
    assert outcome == ["submitted"]
    v = worker_index(pcluster, "slowstart", "b_slow")
    assert workers(pcluster, "slowstart")[v]["restarts"] == 1
    errors = [e["error"] for e in component(pcluster, "slowstart", "b_slow")["errors"]]
    assert any("failed to start; restarting it: exited with code -9" in e for e in errors), errors
    pcluster.kill_topology("slowstart", wait_secs=0)
    assert worker_children() == []


def test_worker_that_cannot_restart_is_given_up_with_the_cause(pcluster, tmp_path):
    token = uuid.uuid4().hex
    builder = TopologyBuilder()
    builder.set_spout("a_trickle", TrickleSpout())
    builder.set_bolt("b_fragile", PoisonableBolt(tmp_path, token)).shuffle_grouping("a_trickle")
    pcluster.submit_topology("fragile", pconf(), builder.create_topology())
    v = worker_index(pcluster, "fragile", "b_fragile")
    before = workers(pcluster, "fragile")
    (tmp_path / "poison").touch()
    os.kill(before[v]["pid"], signal.SIGKILL)

    def given_up() -> list[dict]:
        return [e for e in component(pcluster, "fragile", "b_fragile")["errors"]
                if "not restarting" in e["error"]]

    wait_until(given_up, timeout=15, interval=0.05, message="the worker given up")
    assert token in given_up()[-1]["error"] and "RuntimeError" in given_up()[-1]["error"]
    after = workers(pcluster, "fragile")
    assert after[v]["restarts"] == 3  # the restart after the kill, then 2 more failed starts
    prepares = read_file_lines(tmp_path / "prepares.log")
    assert len(prepares) == 4 and len(set(prepares)) == 4  # the first start, then 3 failed ones
    # not retried forever: a retry would come from the supervisor's loop at any later time, and no
    # event of its marks that none will
    stays(lambda: workers(pcluster, "fragile")[v] == after[v] and len(read_file_lines(tmp_path / "prepares.log")) == 4,
          secs=1.0, what="the worker given up, not started again")
    assert all(gone(int(pid)) for pid in prepares)
    assert after[1 - v]["pid"] == before[1 - v]["pid"] and not gone(after[1 - v]["pid"])
    pcluster.kill_topology("fragile", wait_secs=0)
    assert worker_children() == []


# -- port taken / empty --------------------------------------------------------------------------------


def test_a_taken_worker_port_falls_back_to_an_ephemeral_one(pcluster, tmp_path):
    taken, free = free_ports(2)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", taken))
    blocker.listen()
    try:
        builder = TopologyBuilder()
        builder.set_spout("a", CountingSpout(100))
        builder.set_bolt("b", Discard()).shuffle_grouping("a")
        pcluster.submit_topology("port", pconf({"supervisor.slots.ports": [taken, free]}),
                                 builder.create_topology())
        ports = [w["port"] for w in workers(pcluster, "port")]
        assert ports[0] != taken and ports[0] > 0 and ports[1] == free
        assert worker_index(pcluster, "port", "a") != worker_index(pcluster, "port", "b")
        wait_until(lambda: component(pcluster, "port", "a")["acked"] == 100, timeout=10,
                   message="tuples crossing to and from the worker on the ephemeral port")
    finally:
        blocker.close()


def test_empty_slot_ports_means_ephemeral_worker_ports(pcluster):
    for port in (6700, 6701):  # Storm's default slots; if another program holds one, this cannot tell
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as ZeroMQ binds: TIME_WAIT is no obstacle
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            pytest.skip(f"port {port} is in use")
        finally:
            s.close()
    builder = TopologyBuilder()
    builder.set_spout("a", CountingSpout(10))
    builder.set_bolt("b", Discard()).shuffle_grouping("a")
    pcluster.submit_topology("eph", pconf({"supervisor.slots.ports": []}), builder.create_topology())
    ports = [w["port"] for w in workers(pcluster, "eph")]
    assert not set(ports) & {6700, 6701, 6702, 6703}, f"workers on {ports} with supervisor.slots.ports = []"


# -- 7. errors and metrics from every worker -----------------------------------------------------------


def test_errors_and_figures_of_every_worker_reach_get_topology_info(pcluster, tmp_path):
    n, bad = 40, [5, 17]
    builder = TopologyBuilder()
    builder.set_spout("a_sp", TaggedSpout(tmp_path, n, bad), 2)
    builder.set_bolt("b_boom", Boom(), 2).all_grouping("a_sp")
    pcluster.submit_topology("err", pconf(), builder.create_topology())
    ws = workers(pcluster, "err")
    for cid in ("a_sp", "b_boom"):  # one executor of each in each worker
        assert sorted(i for i, w in enumerate(ws) for e in w["executors"] if e["component"] == cid) == [0, 1]
    boom_tasks = {t for w in ws for e in w["executors"] if e["component"] == "b_boom" for t in e["tasks"]}

    wait_until(lambda: len(read_lines(tmp_path, "outcomes-")) == 2 * n, timeout=10, interval=0.02,
               message="every spout tuple acked or failed")
    spout_tasks = {t for w in ws for e in w["executors"] if e["component"] == "a_sp" for t in e["tasks"]}
    outcomes = read_lines(tmp_path, "outcomes-")
    assert sorted(o.split()[1] for o in outcomes if o.startswith("fail")) == sorted(
        f"bad-{t}-{i}" for t in spout_tasks for i in bad)

    expected = {
        "a_sp": {"emitted": 2 * n, "acked": 2 * n - 4, "failed": 4},
        "b_boom": {"executed": 4 * n, "acked": 4 * n - 8, "failed": 8},
    }

    def figures():
        info = pcluster.get_topology_info("err")["components"]
        return {cid: {k: info[cid][k] for k in want} for cid, want in expected.items()}

    wait_until(lambda: figures() == expected, timeout=5, message=f"figures {expected}")
    errors = component(pcluster, "err", "b_boom")["errors"]
    # each bad tuple raised in both tasks, one in each worker process: 8, though the same text from the
    # two workers, arriving one right after the other, is one entry counted twice
    assert sum(e["count"] for e in errors) == 8
    assert {e["task"] for e in errors} <= boom_tasks
    for e in errors:
        assert "Traceback" in e["error"] and "in execute" in e["error"], e["error"]
        assert re.search(r"ValueError: boom bad-\d+-(5|17)", e["error"]), e["error"]
    assert component(pcluster, "err", "a_sp")["errors"] == []


# -- 8. a worker that stops heartbeating ----------------------------------------------------------------


def test_silent_worker_is_killed_and_restarted_after_the_worker_timeout(pcluster, tmp_path, caplog):
    builder = TopologyBuilder()
    builder.set_spout("a_trickle", TrickleSpout())
    builder.set_bolt("b_rec", LogBolt(tmp_path, "rec")).shuffle_grouping("a_trickle")
    pcluster.submit_topology("silent", pconf({"supervisor.worker.timeout.secs": 2}), builder.create_topology())
    v = worker_index(pcluster, "silent", "b_rec")
    assert v != worker_index(pcluster, "silent", "a_trickle")
    old_pid = workers(pcluster, "silent")[v]["pid"]
    wait_until(lambda: read_lines(tmp_path, "rec-"), timeout=5, message="records from the bolt")

    pcluster.stopped_pids.append(old_pid)
    os.kill(old_pid, signal.SIGSTOP)
    wait_until(lambda: workers(pcluster, "silent")[v]["pid"] != old_pid, timeout=10, interval=0.02,
               message="the silent worker replaced")
    # not before supervisor.worker.timeout.secs, by the silence the supervisor counted from the last heartbeat
    # (the test sees no heartbeat: its own clock would start late, at the SIGSTOP)
    killed = re.compile(rf"worker {v} \(pid {old_pid}\) silent for (\d+)s; killing it")
    [silence] = [int(m.group(1)) for m in map(killed.fullmatch, supervisor_kills(caplog)) if m]
    assert silence >= 2
    wait_until(lambda: gone(old_pid), timeout=5, message="the silent worker killed and reaped")
    w = workers(pcluster, "silent")[v]
    assert w["restarts"] == 1
    new_pid = str(w["pid"])
    wait_until(lambda: any(line.split()[1] == new_pid for line in read_lines(tmp_path, "rec-")), timeout=10,
               interval=0.02, message="the restarted worker receiving tuples")
    errors = component(pcluster, "silent", "b_rec")["errors"]
    assert any(str(old_pid) in e["error"] for e in errors), errors


# -- 9. registered serialization across processes ---------------------------------------------------------


def point_topology(root, n):
    builder = TopologyBuilder()
    builder.set_spout("a_points", PointSpout(root, n))
    builder.set_bolt("b_points", PointBolt(root)).shuffle_grouping("a_points")
    return builder.create_topology()


def test_registered_serializer_carries_user_types_between_processes(pcluster, tmp_path):
    n = 50
    conf = pconf().register_serialization(Point, PointSerializer)
    pcluster.submit_topology("points", conf, point_topology(tmp_path, n))
    assert worker_index(pcluster, "points", "a_points") != worker_index(pcluster, "points", "b_points")
    wait_until(lambda: len([x for x in read_file_lines(tmp_path / "points-spout.log") if x.startswith("ack")]) == n,
               timeout=10, interval=0.02, message="every point acked")
    spout_pid = read_file_lines(tmp_path / "points-spout.log")[0].split()[1]
    received = [json.loads(line) for line in read_file_lines(tmp_path / "points-bolt.log")]
    assert sorted((r["x"], r["y"]) for r in received) == [(i, i * i) for i in range(n)]
    for r in received:
        assert r["type"] == "Point"
        assert r["via"] == f"registered serializer in pid {r['pid']}" and str(r["pid"]) != spout_pid
    assert component(pcluster, "points", "a_points")["errors"] == []


def test_unserializable_value_fails_the_tuple_and_keeps_the_worker(pcluster, tmp_path):
    n = 5  # no registration: a Point cannot cross workers
    pcluster.submit_topology("nopoints", pconf(), point_topology(tmp_path, n))
    v = worker_index(pcluster, "nopoints", "a_points")
    before = workers(pcluster, "nopoints")
    wait_until(lambda: len(read_file_lines(tmp_path / "points-spout.log")) == n + 1, timeout=10, interval=0.02,
               message="every point failed")
    assert sorted(read_file_lines(tmp_path / "points-spout.log")[1:]) == sorted(f"fail {i}" for i in range(n))
    assert read_file_lines(tmp_path / "points-bolt.log") == []
    wait_until(lambda: component(pcluster, "nopoints", "a_points")["error_count"] == n, timeout=5,
               message="an error per point")
    for e in component(pcluster, "nopoints", "a_points")["errors"]:
        assert "cannot be serialized" in e["error"] and "Point" in e["error"], e["error"]
    # the worker lives on: a crash would show at any later time, and no event marks that none comes
    stays(lambda: [(w["pid"], w["restarts"]) for w in workers(pcluster, "nopoints")]
          == [(w["pid"], w["restarts"]) for w in before], secs=0.5, what="every worker as it was")
    after = workers(pcluster, "nopoints")
    assert not gone(after[v]["pid"])


def test_value_that_cannot_be_deserialized_does_not_stop_the_receiving_worker(pcluster, tmp_path):
    n = 20
    builder = TopologyBuilder()
    builder.set_spout("a_points", PacedPointSpout(tmp_path, n))
    builder.set_bolt("b_points", PointBolt(tmp_path)).shuffle_grouping("a_points")
    conf = pconf({"topology.message.timeout.secs": 2}).register_serialization(Point, FragilePointSerializer)
    pcluster.submit_topology("fragile-points", conf, builder.create_topology())
    v = worker_index(pcluster, "fragile-points", "b_points")
    assert v != worker_index(pcluster, "fragile-points", "a_points")
    before = workers(pcluster, "fragile-points")

    def outcomes(kind) -> set[int]:
        return {int(line.split()[1]) for line in read_file_lines(tmp_path / "points-spout.log")
                if line.startswith(kind)}

    try:
        wait_until(lambda: outcomes("ack") == set(range(n)) - {3} and 3 in outcomes("fail"), timeout=12,
                   interval=0.05)
    except TimeoutError:
        pytest.fail(f"acked {sorted(outcomes('ack'))}, failed {sorted(outcomes('fail'))}; "
                    f"the bolt received {len(read_file_lines(tmp_path / 'points-bolt.log'))} points")
    received = {json.loads(line)["x"] for line in read_file_lines(tmp_path / "points-bolt.log")}
    assert received == set(range(n)) - {3}
    info = pcluster.get_topology_info("fragile-points")
    errors = [e["error"] for c in info["components"].values() for e in c["errors"]]
    assert any("cannot rebuild point 3" in e for e in errors), errors
    assert [(w["pid"], w["restarts"]) for w in info["workers"]] == [(w["pid"], w["restarts"]) for w in before]


class Chatty(BasicBolt):
    """Prints one line as it starts."""

    def prepare(self, conf, context):
        print(f"chatty task {context.get_this_task_id()} ready", flush=True)

    def execute(self, tup, collector):
        pass


def test_worker_logs_that_stayed_empty_are_removed_and_the_others_kept(pcluster):
    pcluster.submit_topology("quiet", pconf(), wordcount(sentences(50)))
    quiet = pcluster.runner("quiet").log_dir
    builder = TopologyBuilder()
    builder.set_spout("numbers", CountingSpout(10))
    builder.set_bolt("chatty", Chatty()).shuffle_grouping("numbers")
    pcluster.submit_topology("chatty", pconf(), builder.create_topology())
    chatty = pcluster.runner("chatty").log_dir
    pcluster.kill_topology("quiet", wait_secs=0)
    pcluster.kill_topology("chatty", wait_secs=0)
    assert not os.path.exists(quiet)  # nothing left behind by a run that printed nothing
    logs = {name: open(os.path.join(chatty, name)).read() for name in os.listdir(chatty)}
    [text] = logs.values()  # the chatty worker's log only
    assert re.fullmatch(r"chatty task \d+ ready\n", text), logs
