"""What the tests of topologies in other processes share (worker processes, Spark, hosts): a
config for them, whole-line files that survive ``kill -9`` and their readers, and two topologies
with their components: a word count (``wordcount``) and an at-least-once pipeline over the files
of an inbox (``at_least_once_topology``).

Components are pickled by reference: the workers import this module (the supervisor hands them
this process's ``sys.path``; Spark gets it shipped). (Test modules import this, not each other.)
"""

from __future__ import annotations

import collections
import json
import os
import random
import time
from collections import Counter

from helpers import free_ports
from squall import BasicBolt, Bolt, Config, LocalCluster, Spout, TopologyBuilder


# -- files and processes ---------------------------------------------------------------------------


def pconf(extra: dict | None = None, workers: int = 2) -> Config:
    """A config for a process-mode test: frequent heartbeats, short timeouts, private ports."""
    conf = Config()
    conf.update({
        "topology.workers": workers,
        "worker.heartbeat.frequency.secs": 0.2,
        "topology.message.timeout.secs": 3,
        "supervisor.worker.timeout.secs": 5,
        "supervisor.worker.start.timeout.secs": 10,
        "supervisor.slots.ports": free_ports(workers),
    })
    conf.update(extra or {})
    return conf


def append_line(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


class LineLog:
    """An append-only file written one whole line per ``os.write`` (safe across processes
    and across ``kill -9``)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())


def read_lines(directory, prefix: str) -> list[str]:
    """Every line of the files in ``directory`` whose names start with ``prefix``."""
    lines: list[str] = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(prefix):
            with open(os.path.join(directory, name)) as f:
                lines.extend(line.rstrip("\n") for line in f if line.endswith("\n"))
    return lines


def read_file_lines(path) -> list[str]:
    try:
        with open(path) as f:
            return [line.rstrip("\n") for line in f if line.endswith("\n")]
    except FileNotFoundError:
        return []


def gone(pid: int) -> bool:
    """True when no process (not even a zombie) has ``pid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def component(cluster: LocalCluster, name: str, cid: str) -> dict:
    return cluster.get_topology_info(name)["components"][cid]


# -- components ------------------------------------------------------------------------------------


class SentenceSpout(Spout):
    """Emits its share of ``sentences`` (task index modulo the number of tasks), each with a
    message id (its index); replays what fails."""

    outputs = ["sentence"]

    def __init__(self, sentences):
        self.sentences = list(sentences)

    def open(self, conf, context, collector):
        self.collector = collector
        tasks = len(context.get_component_tasks(context.get_this_component_id()))
        index = context.get_this_task_index()
        self.todo = collections.deque((i, s) for i, s in enumerate(self.sentences) if i % tasks == index)
        self.pending = {}

    def next_tuple(self):
        if self.todo:
            i, sentence = self.todo.popleft()
            self.pending[i] = sentence
            self.collector.emit([sentence], msg_id=i)

    def ack(self, msg_id):
        del self.pending[msg_id]

    def fail(self, msg_id):
        self.todo.append((msg_id, self.pending.pop(msg_id)))

    def is_exhausted(self):
        return not self.todo and not self.pending


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup.values[0].split():
            collector.emit([word])


class Count(BasicBolt):
    """Running counts per word, emitted on every input; with ``out_dir``, writes its final
    counts (and pid) to ``out_dir/count-<task>.json`` at cleanup."""

    outputs = ["word", "count"]

    def __init__(self, out_dir=None):
        self.out_dir = out_dir

    def prepare(self, conf, context):
        self.task = context.get_this_task_id()
        self.counts = Counter()

    def execute(self, tup, collector):
        word = tup.values[0]
        self.counts[word] += 1
        collector.emit([word, self.counts[word]])

    def cleanup(self):
        if self.out_dir is not None:
            path = os.path.join(self.out_dir, f"count-{self.task}.json")
            with open(path + ".tmp", "w") as f:
                json.dump({"pid": os.getpid(), "counts": self.counts}, f)
            os.replace(path + ".tmp", path)


class DirSpout(Spout):
    """A reliable spout whose source survives any worker: the files of ``root/inbox``.

    Emits each file's name with the name as message id; on ack moves the file to
    ``root/done``; on fail emits it again. On open (a restart included) and whenever it has
    nothing queued, it scans the inbox for files it has not emitted (or queued) yet. Each
    open appends this process's pid to ``root/spout-opens.log``."""

    outputs = ["name"]

    def __init__(self, root):
        self.root = str(root)

    def open(self, conf, context, collector):
        self.collector = collector
        self.inbox = os.path.join(self.root, "inbox")
        self.done = os.path.join(self.root, "done")
        self.queue = collections.deque()
        self.queued = set()
        self.pending = set()
        self.next_scan = 0.0
        append_line(os.path.join(self.root, "spout-opens.log"), str(os.getpid()))

    def _enqueue(self, name):
        if name not in self.queued:
            self.queue.append(name)
            self.queued.add(name)

    def next_tuple(self):
        now = time.monotonic()
        if not self.queue and now >= self.next_scan:
            self.next_scan = now + 0.05
            for name in sorted(os.listdir(self.inbox)):
                if name not in self.pending:
                    self._enqueue(name)
        if self.queue:
            name = self.queue.popleft()
            self.queued.discard(name)
            self.pending.add(name)
            self.collector.emit([name], msg_id=name)

    def ack(self, name):
        self.pending.discard(name)
        try:
            os.replace(os.path.join(self.inbox, name), os.path.join(self.done, name))
        except FileNotFoundError:
            pass  # acked before (a replay of an already acked message)

    def fail(self, name):
        self.pending.discard(name)
        self._enqueue(name)


class LogBolt(Bolt):
    """Appends ``"<first value> <pid>"`` to ``root/<prefix>-<task>.log`` for every input,
    sleeps ``delay`` seconds, re-emits the input anchored to it (``emits`` copies) and acks it."""

    outputs = ["v"]

    def __init__(self, root, prefix, delay=0.0, emits=0):
        self.root = str(root)
        self.prefix = prefix
        self.delay = delay
        self.emits = emits

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.pid = os.getpid()
        self.log = LineLog(os.path.join(self.root, f"{self.prefix}-{context.get_this_task_id()}.log"))

    def execute(self, tup):
        if self.delay:
            time.sleep(self.delay)
        self.log.write(f"{tup.values[0]} {self.pid}")
        for _ in range(self.emits):
            self.collector.emit([tup.values[0]], anchors=[tup])
        self.collector.ack(tup)


class StuckBolt(Bolt):
    """Its first input waits in a function of a known name until the file ``release`` exists
    (a bolt stuck where a stack dump must find it)."""

    outputs = ["v"]

    def __init__(self, release: str) -> None:
        self.release = release

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        stuck_in_a_known_function(self.release)
        self.collector.ack(tup)


def stuck_in_a_known_function(release: str) -> None:
    while not os.path.exists(release):
        time.sleep(0.02)  # the user's code the test looks for; released by the test


class PacedSpout(Spout):
    """Emits tracked numbers as fast as it may while the file ``rate`` says ``fast``, a few a
    second otherwise (input rising and falling, for the autoscaler)."""

    outputs = ["n"]

    def __init__(self, rate: str) -> None:
        self.rate = rate

    def open(self, conf, context, collector):
        self.collector, self.n, self.checked, self.fast = collector, 0, 0.0, False

    def next_tuple(self):
        now = time.monotonic()
        if now - self.checked > 0.2:
            self.checked = now
            with open(self.rate) as f:
                self.fast = f.read().strip() == "fast"
        if self.fast or now - getattr(self, "last", 0.0) > 0.1:
            self.last = now
            self.n += 1
            self.collector.emit([self.n], msg_id=self.n)


class BusyBolt(Bolt):
    """Costs ``secs`` of CPU a tuple (a busy loop: the interpreter's lock held, as real work)."""

    outputs = ["n"]

    def __init__(self, secs: float = 0.0001) -> None:
        self.secs = secs

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        end = time.perf_counter() + self.secs
        while time.perf_counter() < end:
            pass
        self.collector.ack(tup)


# -- word count ------------------------------------------------------------------------------------


WORDS = "the cow jumped over moon an apple a day keeps doctor away four score and seven years ago".split()


def sentences(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(n)]


def wordcount(lines: list[str], out_dir=None):
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(lines), 2)
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(out_dir), 2).fields_grouping("split", ["word"])
    return builder.create_topology()


# -- at least once, over the files of an inbox -----------------------------------------------------


def put_messages(root, names) -> None:
    for name in names:
        tmp = os.path.join(root, "tmp", name)
        with open(tmp, "w") as f:
            f.write(name)
        os.replace(tmp, os.path.join(root, "inbox", name))


def at_least_once_topology(root, first: list[str]):
    """The inbox of ``root`` with messages ``first``, read by a DirSpout (a_src) -> b_work ->
    c_sink (logging what they see under ``root``), and the settings for a kill -9 test."""
    for d in ("inbox", "done", "tmp"):
        (root / d).mkdir()
    put_messages(root, first)
    builder = TopologyBuilder()
    builder.set_spout("a_src", DirSpout(root))
    builder.set_bolt("b_work", LogBolt(root, "work", delay=0.01, emits=1)).shuffle_grouping("a_src")
    builder.set_bolt("c_sink", LogBolt(root, "sink")).shuffle_grouping("b_work")
    return builder.create_topology(), {"topology.message.timeout.secs": 2, "topology.max.spout.pending": 20}
