"""A chaos run (issue 40): Kafka -> stateful count -> exactly-once Kafka sink, for a given time,
with faults drawn at random, then checks that nothing was lost or duplicated.

The pipeline is benchmarks/chaos_topology.py (read its docstring), run by ``squall run`` (the
driver: its own process, whose workers are processes of their own) on a Kafka-protocol broker
with real transactions (:class:`squall.testing.KafkaBroker`). A producer writes ``--rate`` lines
a second, five words each, into the input topic for the whole run; a ``read_committed`` reader
follows the output topic, as a downstream consumer would. The faults, one every ``--gap``
seconds (drawn uniformly) once the last one recovered:

* ``kill-worker``: ``kill -9`` of one worker process;
* ``kill-workers``: ``kill -9`` of every worker at once (what a lost host does to its workers,
  on one machine);
* ``freeze-worker``: SIGSTOP of a worker until the driver declares it silent and replaces it
  (what a cut link looks like to the driver);
* ``kill-driver``: ``kill -9`` of the driver (its workers end with it), then the same command
  again, which resumes from the last commit;
* ``broker-restart``: the broker stopped and started again on the same port and data;
* ``rebalance``: ``squall rebalance`` to another number of workers (1 to 3);
* and the autoscaler's own decisions (it is on, 1 to 3 workers), counted as faults when they come.

With ``--bed`` (root) it runs on the multi-host test bed (tests/netbed.py): three hosts, each a
network namespace; host 0 runs a Spark standalone master, the broker, this harness and the
driver (``squall submit``), hosts 1 and 2 a Spark worker each, so the workers are Spark tasks
reaching the broker and the driver over the bed's bridge. ``kill-workers`` gives way to:

* ``kill-host``: ``kill -9`` of everything on a worker host (its Spark worker, executors and
  workers), whose Spark worker then starts again: the topology goes on on the host left and
  grows back;
* ``cut-link``: a worker host's link to the bridge down for 8 s (past the worker timeout), then
  up again: its workers, cut off, are replaced, and come back as zombies the sink must fence.

**Recovery time** of a fault: from the fault to the first two seconds after it in which the
count executed at least 90% of the input's words a second. **At the end** the producer stops;
once the output holds as many records as the input has words, the topology is killed and:

* every ``(word, n)`` for n = 1 .. (occurrences of ``word`` in the input) is in the output
  exactly once: a missing one is lost, one seen twice is duplicated, any other is unexpected;
* the committed state (``squall state chaos --component count --json``) is the input's counts;
* the workers' memory (their mean RSS) grew by at most 10% from ``--rss-after`` seconds
  (default: 5 minutes, or a quarter of a shorter run) to the end. Faults restart the workers
  every few seconds to minutes, so this shows what restarts leave behind; ``--faults none``
  injects nothing, so that the workers live the whole run and show what their life does.

It prints the faults, each one's recovery time, p50 and max, and the checks; exit status 1 when
a check fails (or a recovery took more than 30 s).

Reproduce:
    pip install -e ".[test]"                     # confluent-kafka, noida-db (the broker)
    python benchmarks/chaos.py --duration 1800   # on worker processes; --duration 120: CI's
    python benchmarks/chaos.py --bed --duration 1800   # on the multi-host test bed (root, Java)
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from squall.api.errors import NotAliveError
from squall.cluster.registry.local import LocalRegistry
from squall.ops import control
from squall.testing import KafkaBroker, wait_until
from squall.utils.processes import process_alive

NAME = "chaos"
TOPOLOGY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "chaos_topology.py")
PARTITIONS = 4
WORDS_PER_LINE = 5
VOCABULARY = [f"w{i:03d}" for i in range(300)]
FAULTS = ("kill-worker", "kill-workers", "freeze-worker", "kill-driver", "broker-restart", "rebalance")
#: on the multi-host test bed (--bed): a lost host and a cut link in place of every worker killed
BED_FAULTS = ("kill-worker", "kill-host", "cut-link", "freeze-worker", "kill-driver", "broker-restart", "rebalance")
#: how long a cut link stays cut: past the driver's worker timeout (the topology's 4 s)
CUT_SECS = 8.0
TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests")
#: the most a fault may take to recover from (the issue's target)
MAX_RECOVERY_SECS = 30.0
#: the most the workers' memory may grow after the warm-up
MAX_RSS_GROWTH = 0.10
LOG = logging.getLogger("chaos")


# -- the checks (pure: tests/test_chaos.py plants a duplicate and a loss) -----------------------


@dataclass
class OutputCheck:
    """What the output holds against the input: (word, n) records lost, duplicated (with how
    many copies too many) and unexpected (n beyond the word's count, or a word not in the input)."""

    records: int
    lost: list[tuple[str, int]]
    duplicated: list[tuple[str, int]]
    unexpected: list[tuple[str, int]]

    @property
    def exact(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)

    def describe(self) -> str:
        def some(records: list[tuple[str, int]], what: str) -> str:
            return f"{len(records):,} {what}" + (f" (e.g. {records[:3]})" if records else "")
        return (f"{self.records:,} records: {some(self.lost, 'lost')}, {some(self.duplicated, 'duplicated')}, "
                f"{some(self.unexpected, 'unexpected')}")


class OutputTally:
    """How many times each ``(word, n)`` was seen, compactly: a byte per n (saturating at 255);
    and where the first copies seen twice were (for the report: which fault let them through)."""

    #: the second copies kept with where they were read
    KEPT = 20

    def __init__(self) -> None:
        self.seen: dict[str, bytearray] = {}
        self.records = 0
        self.malformed: list[Any] = []
        self.seconds: list[tuple[tuple[str, int], Any]] = []

    def add(self, word: str, n: int, where: Any = None) -> None:
        """Count ``(word, n)``, read at ``where`` (anything: partition, offset, time)."""
        self.records += 1
        if n < 1:
            self.malformed.append((word, n))
            return
        counts = self.seen.setdefault(word, bytearray())
        if n > len(counts):
            counts.extend(bytes(n - len(counts)))
        counts[n - 1] = min(255, counts[n - 1] + 1)
        if counts[n - 1] == 2 and len(self.seconds) < self.KEPT:
            self.seconds.append(((word, n), where))


def check_output(words: collections.Counter[str], tally: OutputTally) -> OutputCheck:
    """Each ``(word, n)``, n = 1 .. ``words[word]``, seen exactly once in ``tally``."""
    lost, duplicated, unexpected = [], [], list(tally.malformed)
    for word, total in words.items():
        counts = tally.seen.get(word, bytearray())
        for n in range(1, total + 1):
            seen = counts[n - 1] if n <= len(counts) else 0
            if seen == 0:
                lost.append((word, n))
            elif seen > 1:
                duplicated.append((word, n))
    for word, counts in tally.seen.items():
        unexpected.extend((word, n) for n in range(words.get(word, 0) + 1, len(counts) + 1) if counts[n - 1])
    return OutputCheck(tally.records, lost, duplicated, unexpected)


def check_state(words: collections.Counter[str], committed: dict[str, int]) -> list[str]:
    """The words whose committed count is not the input's, each as ``word: committed != input``."""
    return [f"{w}: {committed.get(w, 0)} != {words.get(w, 0)}" for w in sorted(set(words) | set(committed))
            if committed.get(w, 0) != words.get(w, 0)]


def rss_growth(samples: list[tuple[float, float]], after: float, span: float = 60.0) -> float | None:
    """How much the RSS grew, as a fraction: the median of ``samples`` ((seconds into the run,
    RSS)) in the ``span`` seconds from ``after`` against that of the last ``span`` seconds; None
    when the run is too short to tell."""
    if not samples:
        return None
    end = samples[-1][0]
    early = [r for t, r in samples if after <= t < min(after + span, end - span)]
    late = [r for t, r in samples if t >= end - span]
    if not early or not late:
        return None
    return statistics.median(late) / statistics.median(early) - 1


def recovery_secs(samples: list[Sample], at: float, rate: float, window: float = 2.0) -> float | None:
    """Seconds from a fault at ``at`` to the end of the first ``window`` after it in which the
    count executed at least 90% of ``rate`` words a second (samples of one driver only); None:
    not yet."""
    after = [s for s in samples if s.time >= at]
    for i, start in enumerate(after):
        for end in after[i + 1:]:
            if end.driver != start.driver or end.executed < start.executed:
                break
            if end.time - start.time >= window:
                if (end.executed - start.executed) / (end.time - start.time) >= 0.9 * rate:
                    return end.time - at
                break
    return None


def percentile(values: Iterable[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# -- the run --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """The topology at ``time`` (seconds into the run): the count's executed total, which
    driver process reported it, and the workers' pids and mean RSS (bytes)."""

    time: float
    driver: int
    executed: int
    pids: tuple[int, ...]
    rss: float


@dataclass
class Fault:
    kind: str
    at: float
    detail: str = ""
    recovery: float | None = None


@dataclass
class Report:
    duration: float
    lines: int = 0
    words: int = 0
    faults: list[Fault] = field(default_factory=list)
    output: OutputCheck | None = None
    state: list[str] = field(default_factory=list)
    state_read: bool = False
    rss_growth: float | None = None
    rss_mib: tuple[float, float] = (0.0, 0.0)
    #: the first records read a second time, with (partition, offset, seconds into the run)
    second_copies: list[tuple[tuple[str, int], Any]] = field(default_factory=list)

    def recoveries(self) -> list[float]:
        return [f.recovery for f in self.faults if f.recovery is not None]

    def failures(self) -> list[str]:
        """What failed, one line each (empty: the run passed)."""
        failed = []
        if self.output is None or not self.output.exact:
            failed.append(f"output: {self.output.describe() if self.output else 'not read'}")
        if not self.state_read or self.state:
            failed.append(f"state: {len(self.state)} words not exact (e.g. {self.state[:3]})" if self.state_read
                          else "state: not read")
        slow = [f for f in self.faults if f.recovery is None or f.recovery > MAX_RECOVERY_SECS]
        if slow:
            failed.append("recovery over 30 s: " + ", ".join(
                f"{f.kind} at {f.at:.0f}s ({f'{f.recovery:.1f}s' if f.recovery is not None else 'never'})"
                for f in slow))
        if self.rss_growth is not None and self.rss_growth > MAX_RSS_GROWTH:
            failed.append(f"memory: the workers' RSS grew {self.rss_growth:.0%} (at most {MAX_RSS_GROWTH:.0%})")
        return failed


class Producer(threading.Thread):
    """Writes ``rate`` lines a second into ``topic`` until stopped; :attr:`lines` were delivered.
    Not idempotent (the test broker forgets its producers' sequence numbers when it restarts): a
    retry may write a line twice, so the input is what the topic holds (:func:`read_input`)."""

    def __init__(self, servers: str, topic: str, rate: float, seed: int) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        from confluent_kafka import Producer as KafkaProducer

        self._producer = KafkaProducer({"bootstrap.servers": servers, "message.timeout.ms": 300_000, "linger.ms": 20,
                                        "logger": logging.getLogger("chaos.kafka")})
        self._topic, self._rate, self._random = topic, rate, random.Random(seed)
        self._stopping = threading.Event()
        self.lines = 0
        self.errors: list[str] = []

    def _delivered(self, error: Any, message: Any) -> None:
        if error is None:
            self.lines += 1
        else:
            self.errors.append(str(error))

    def run(self) -> None:
        start, sent = time.monotonic(), 0
        while not self._stopping.is_set():
            due = int((time.monotonic() - start) * self._rate)
            while sent < due:
                line = " ".join(self._random.choice(VOCABULARY) for _ in range(WORDS_PER_LINE))
                try:
                    self._producer.produce(self._topic, value=line, partition=sent % PARTITIONS,
                                           on_delivery=self._delivered)
                except BufferError:
                    break  # full while the broker is away: the rest when it is back
                sent += 1
            self._producer.poll(0.05)

    def stop(self) -> None:
        self._stopping.set()
        self.join()
        left = self._producer.flush(300)
        if left:
            self.errors.append(f"{left} lines not delivered in 300 s")


class OutputReader(threading.Thread):
    """Follows ``topic`` as a ``read_committed`` consumer, tallying its ``(word, n)`` records."""

    def __init__(self, servers: str, topic: str, now: Callable[[], float]) -> None:
        super().__init__(name="chaos-reader", daemon=True)
        self._servers, self._topic, self.now = servers, topic, now
        self.tally = OutputTally()
        self._stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self._servers, "group.id": f"chaos-reader-{uuid.uuid4().hex[:8]}",
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "logger": logging.getLogger("chaos.kafka")})
        consumer.assign([TopicPartition(self._topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        try:
            while not self._stopping.is_set():
                for message in consumer.consume(5000, timeout=0.2):
                    if message.error() is None:
                        value = message.value().decode()
                        self.tally.add(message.key().decode(), int(value) if value.isdigit() else 0,
                                       (message.partition(), message.offset(), round(self.now(), 1)))
        finally:
            consumer.close()

    def stop(self) -> None:
        self._stopping.set()
        self.join()


def read_output(servers: str, topic: str, isolation: str) -> OutputTally:
    """The records of ``topic`` as a fresh consumer of ``isolation`` (``read_committed`` or
    ``read_uncommitted``) sees them, read from the start to the end of each partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"chaos-check-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": isolation,
                         "logger": logging.getLogger("chaos.kafka")})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    tally, ended, deadline = OutputTally(), set(), time.monotonic() + 120
    try:
        while len(ended) < PARTITIONS:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{topic} not read to its end in 120 s ({isolation})")
            for message in consumer.consume(5000, timeout=0.5):
                error = message.error()
                if error is None:
                    value = message.value().decode()
                    tally.add(message.key().decode(), int(value) if value.isdigit() else 0)
                elif error.code() == KafkaError._PARTITION_EOF:
                    ended.add(message.partition())
    finally:
        consumer.close()
    return tally


def read_input(servers: str, topic: str) -> tuple[int, collections.Counter[str]]:
    """The lines of ``topic`` (to the end of each partition, once the producer stopped) and their words."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"chaos-input-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "logger": logging.getLogger("chaos.kafka")})
    places = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
    ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in places}
    consumer.assign(places)
    words: collections.Counter[str] = collections.Counter()
    read, deadline = 0, time.monotonic() + 120
    try:
        while read < sum(ends.values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the input topic gave {read:,} of its {sum(ends.values()):,} lines in 120 s")
            for message in consumer.consume(5000, timeout=0.5):
                if message.error() is None:
                    words.update(message.value().decode().split())
                    read += 1
    finally:
        consumer.close()
    return read, words


class Driver:
    """The chaos topology's driver, as a user would start it (and start it again): ``squall
    run``, or ``squall submit`` to the bed's Spark master (``bed``); :meth:`kill9` kills its
    process group (a submit's JVM too)."""

    def __init__(self, root: str, env: dict[str, str], bed: BedCluster | None = None) -> None:
        self._root, self._env = root, env
        self._how = ["run"] if bed is None else bed.submit_args()
        self.command = self._how[0]
        self.process: subprocess.Popen[bytes] | None = None
        self.started = 0

    def start(self) -> None:
        with open(os.path.join(self._root, "driver.log"), "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "squall", *self._how, TOPOLOGY, "--name", NAME,
                 "--checkpoint-dir", os.path.join(self._root, "state")],
                env=self._env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        self.started += 1

    def kill9(self) -> None:
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


class BedCluster:
    """The multi-host test bed (tests/netbed.py): ``hosts`` network namespaces on a bridge of
    their own. Host 0 runs a Spark standalone master, the broker, the driver and this harness
    (moved into host 0's namespace, so its producer and reader reach the broker there as the
    workers do); every other host a Spark worker of ``cores`` cores. The state is SQLite in a
    directory all hosts share (the bed's hosts share one file system). :meth:`close` stops
    everything and deletes the namespaces."""

    def __init__(self, root: str, hosts: int = 3, cores: int = 2) -> None:
        sys.path.insert(0, TESTS)
        from netbed import Bed, SparkBed, bed_unavailable
        from spark_standalone import spark_unavailable_reason

        why = bed_unavailable() or spark_unavailable_reason()
        if why is not None:
            raise RuntimeError(f"no multi-host test bed here: {why}")
        self.bed = Bed(hosts)
        try:
            self.spark = SparkBed(self.bed, os.path.join(root, "spark"), cores=cores)
            self.spark.wait_for_workers({Bed.address(h) for h in range(1, hosts)})
            self.bed.enter(0)
        except BaseException:
            self.bed.close()
            raise
        self.address = Bed.address(0)

    @property
    def worker_hosts(self) -> list[int]:
        return list(range(1, len(self.bed.hosts)))

    def submit_args(self) -> list[str]:
        # the JVMs' compiler kept to its quick tier: a driver or executor JVM does little but start
        # (the workers are Python), and at full tiers its JIT takes this machine's two cores for seconds
        quick = "-XX:TieredStopAtLevel=1"
        return ["submit", "--master", self.spark.master_url, "--conf", f"spark.driver.host={self.address}",
                "--conf", f"spark.driver.extraJavaOptions={quick}",
                "--conf", f"spark.executor.extraJavaOptions={quick}"]

    def driver_env(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` as a user's shell on host 0 has it (see ``SparkBed.driver_env``)."""
        return {**self.spark.driver_env(), **{k: v for k, v in env.items() if k.startswith(("CHAOS_", "SQUALL_"))}}

    def close(self) -> None:
        self.bed.close()


def rss_of(pid: int) -> int:
    """The resident memory of process ``pid`` in bytes (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class Chaos:
    """One run (see the module): :meth:`run` returns its :class:`Report`."""

    def __init__(self, root: str, duration: float, rate: float, gap: tuple[float, float], seed: int,
                 faults: tuple[str, ...] = FAULTS, rss_after: float | None = None,
                 say: Callable[[str], None] = print, broker: KafkaBroker | None = None,
                 bed: BedCluster | None = None) -> None:
        self.root, self.duration, self.rate, self.gap, self.broker, self.bed = root, duration, rate, gap, broker, bed
        self.random = random.Random(seed)
        self.seed, self.kinds, self.say = seed, faults, say
        self.rss_after = rss_after if rss_after is not None else min(300.0, duration / 4)
        self.samples: list[Sample] = []
        self.registry = LocalRegistry()
        self.report = Report(duration)
        self._t0 = time.monotonic()
        self._driver_killed = False  # by a kill-driver fault, until it runs again
        self._decisions_seen: set[tuple[int, float]] = set()  # (driver, time) of the autoscaler's decisions

    def now(self) -> float:
        return time.monotonic() - self._t0

    def run(self) -> Report:
        """The run, on the broker given (which it restarts), else on one of its own."""
        if self.broker is None:
            host = self.bed.address if self.bed is not None else "127.0.0.1"
            with KafkaBroker(os.path.join(self.root, "broker"), host=host) as self.broker:
                return self._run()
        return self._run()

    def _run(self) -> Report:
        broker = self.broker
        home = os.environ.get("SQUALL_HOME")
        os.environ["SQUALL_HOME"] = os.path.join(self.root, "home")  # the registry this run's commands read
        suffix = uuid.uuid4().hex[:6]
        source, sink = f"chaos-in-{suffix}", f"chaos-out-{suffix}"
        broker.create_topics(source, sink, partitions=PARTITIONS)
        env = {**os.environ, "CHAOS_KAFKA": broker.bootstrap_servers, "CHAOS_IN": source, "CHAOS_OUT": sink}
        self.driver = Driver(self.root, env if self.bed is None else self.bed.driver_env(env), self.bed)
        producer = Producer(broker.bootstrap_servers, source, self.rate, self.seed)
        reader = OutputReader(broker.bootstrap_servers, sink, self.now)
        try:
            self.driver.start()
            self._wait_running(60)
            producer.start()
            reader.start()
            self._t0 = time.monotonic()
            self._inject_until(self.duration)
            producer.stop()
            if producer.errors:
                raise RuntimeError(f"the producer failed: {producer.errors[:3]}")
            self.report.lines, words = read_input(broker.bootstrap_servers, source)
            self.report.words = sum(words.values())
            self.say(f"{self.now():6.0f}s  input ended: {self.report.lines:,} lines, {self.report.words:,} words; "
                     "waiting for the whole output")
            try:
                wait_until(lambda: reader.tally.records >= self.report.words, timeout=120, interval=0.5)
            except TimeoutError:
                self.say(f"the whole output not there in 120 s: {reader.tally.records:,} of {self.report.words:,}")
                self._read_again(broker.bootstrap_servers, sink, words)
            time.sleep(3)  # some more commits: a duplicate published late would show
            control.kill(self.registry, NAME, wait_secs=1)
            self.driver.process.wait(60)
            self._read_state(words)
        finally:
            if reader.is_alive():
                reader.stop()
            if self.driver.process is not None and self.driver.process.poll() is None:
                self.driver.kill9()
            if producer.is_alive():
                producer.stop()
            if home is None:
                del os.environ["SQUALL_HOME"]
            else:
                os.environ["SQUALL_HOME"] = home
        self.report.output = check_output(words, reader.tally)
        self.report.second_copies = reader.tally.seconds
        rss = [(s.time, s.rss) for s in self.samples if s.rss]
        self.report.rss_growth = rss_growth(rss, self.rss_after)
        if rss:
            self.report.rss_mib = (rss[0][1] / 2**20, rss[-1][1] / 2**20)
        return self.report

    def _read_again(self, servers: str, topic: str, words: collections.Counter[str]) -> None:
        """Where a loss is: missed by the following reader, in transactions still open, or not in
        the topic (never produced, or aborted): the topic read afresh, committed and not."""
        for isolation in ("read_committed", "read_uncommitted"):
            check = check_output(words, read_output(servers, topic, isolation))
            self.say(f"  the output read afresh ({isolation}): {check.describe()}")

    def _info(self) -> Any:
        """The topology's info; None while it is away (between a fault and its recovery).
        ``RuntimeError`` with the tail of its log if ``squall run`` ended by itself."""
        try:
            return control.info(self.registry, NAME)
        except (NotAliveError, control.ControlError):
            code = self.driver.process.poll() if self.driver.process is not None else None
            if code is not None and not self._driver_killed:
                with open(os.path.join(self.root, "driver.log"), errors="replace") as f:
                    tail = "".join(line for line in f.readlines()[-30:] if not line.startswith("%"))
                raise RuntimeError(f"squall run ended by itself (exit status {code}); its output ends:\n{tail}") \
                    from None
            return None

    def _wait_running(self, timeout: float) -> None:
        wait_until(lambda: (info := self._info()) is not None and info.status == "ACTIVE"
                   and all(w.pid for w in info.workers) and len(info.workers) > 0, timeout=timeout,
                   interval=0.2, message="the topology running")

    def _sample(self) -> Any:
        info = self._info()
        if info is None:
            return None
        pids = tuple(w.pid for w in info.workers if w.pid)
        rss = [r for r in map(rss_of, pids) if r]
        self.samples.append(Sample(self.now(), self.driver.started, info.components["count"].executed, pids,
                                   sum(rss) / len(rss) if rss else 0.0))
        for decision in info.autoscale or []:
            seen = (self.driver.started, decision.time)
            if seen not in self._decisions_seen and decision.action != "hold":
                self._decisions_seen.add(seen)
                self._fault("autoscale", f"{decision.action} to {decision.workers} worker(s): {decision.reason}")
        return info

    def _fault(self, kind: str, detail: str) -> Fault:
        fault = Fault(kind, self.now(), detail)
        self.report.faults.append(fault)
        self.say(f"{fault.at:6.0f}s  {kind}: {detail}")
        return fault

    def _sleep(self, secs: float) -> None:
        """Sample for ``secs`` seconds, twice a second."""
        end = time.monotonic() + secs
        while time.monotonic() < end:
            self._sample()
            time.sleep(max(0.0, min(0.5, end - time.monotonic())))

    def _inject_until(self, duration: float) -> None:
        self._sleep(min(10.0, duration / 6))  # a steady start
        while self.now() < duration:
            self._sleep(self.random.uniform(*self.gap))
            if self.now() >= duration or not self.kinds:  # none: the input alone (memory over a worker's life)
                continue
            fault = self._inject(self.random.choice(self.kinds))
            self._settle()
            self.say(f"{self.now():6.0f}s    recovered in {fault.recovery:.1f}s" if fault.recovery is not None
                     else f"{self.now():6.0f}s    NOT recovered in 60 s")
        self._settle()  # an autoscaler's decision near the end

    def _settle(self, timeout: float = 60.0) -> None:
        """Sample until every fault so far has recovered, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pending = [f for f in self.report.faults if f.recovery is None]
            for f in pending:
                f.recovery = recovery_secs(self.samples, f.at, self.rate * WORDS_PER_LINE)
            if all(f.recovery is not None for f in pending):
                return
            self._sleep(0.5)

    def _inject(self, kind: str) -> Fault:
        info = self._info()
        deadline = time.monotonic() + 60
        while info is None or info.status != "ACTIVE" or not info.workers or not all(w.pid for w in info.workers):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the topology not running 60 s before the fault {kind!r}")
            self._sleep(0.5)  # between a fault and the restart
            info = self._info()
        pids = [w.pid for w in info.workers]
        if kind == "kill-worker":
            pid = self.random.choice(pids)
            fault = self._fault(kind, f"pid {pid} of {len(pids)} workers")
            os.kill(pid, signal.SIGKILL)
        elif kind == "kill-workers":
            fault = self._fault(kind, f"pids {pids}")
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
        elif kind == "freeze-worker":
            pid = self.random.choice(pids)
            fault = self._fault(kind, f"pid {pid} stopped until replaced")
            os.kill(pid, signal.SIGSTOP)
            wait_until(lambda: (i := self._sample()) is not None and pid not in [w.pid for w in i.workers],
                       timeout=30, interval=0.5, message=f"frozen worker {pid} replaced")
            if process_alive(pid):
                os.kill(pid, signal.SIGKILL)
        elif kind == "kill-driver":
            fault = self._fault(kind, f"squall {self.driver.command} (pid {self.driver.process.pid}), then again")
            self._driver_killed = True
            self.driver.kill9()
            if self.bed is None:  # (on Spark, its executors end as the master hears the driver is gone)
                wait_until(lambda: not any(process_alive(p) for p in pids), timeout=30,
                           message="the driver's workers ended")
            self.driver.start()
            self._driver_killed = False
        elif kind == "kill-host":
            host = self.random.choice(self.bed.worker_hosts)
            fault = self._fault(kind, f"host {host} ({self.bed.bed.address(host)}), its Spark worker started again")
            self.bed.bed.kill_host(host)
            self.bed.spark.start_worker(host)  # the machine back at once: the topology grows back onto it
        elif kind == "cut-link":
            host = self.random.choice(self.bed.worker_hosts)
            fault = self._fault(kind, f"host {host} ({self.bed.bed.address(host)}) cut off for {CUT_SECS:g} s")
            self.bed.bed.cut(host)
            try:
                self._sleep(CUT_SECS)
            finally:
                self.bed.bed.mend(host)
        elif kind == "broker-restart":
            fault = self._fault(kind, self.broker.bootstrap_servers)
            self.broker.restart()
        elif kind == "rebalance":
            workers = self.random.choice([n for n in (1, 2, 3) if n != len(pids)])
            fault = self._fault(kind, f"{len(pids)} -> {workers} workers")
            deadline = time.monotonic() + 30
            while True:
                try:
                    control.rebalance(self.registry, NAME, wait_secs=2, num_workers=workers)
                    break
                except control.ControlError as e:  # the autoscaler's rebalance began meanwhile: refused
                    if "REBALANCING" not in str(e) or time.monotonic() > deadline:
                        raise
                    self._sleep(1.0)
        else:
            raise ValueError(f"unknown fault {kind!r}; known: {', '.join(FAULTS if self.bed is None else BED_FAULTS)}")
        return fault

    def _read_state(self, words: collections.Counter[str]) -> None:
        text = subprocess.run([sys.executable, "-m", "squall", "state", NAME, "--component", "count", "--json"],
                              capture_output=True, text=True, check=True, env=os.environ).stdout
        committed: dict[str, int] = collections.Counter()
        for task in json.loads(text)["tasks"]:
            for entry in task["entries"]:
                committed[entry["key"]] += entry["value"]
        self.report.state = check_state(words, committed)
        self.report.state_read = True


def print_report(report: Report) -> None:
    print(f"\nchaos run of {report.duration:.0f}s: {report.lines:,} lines, {report.words:,} words in; "
          f"{len(report.faults)} faults")
    kinds = collections.Counter(f.kind for f in report.faults)
    print("  faults: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    for f in report.faults:
        recovery = f"{f.recovery:5.1f}s" if f.recovery is not None else "never"
        print(f"  {f.at:7.0f}s  {f.kind:15} recovered in {recovery}  {f.detail}")
    recoveries = report.recoveries()
    if recoveries:
        print(f"  recovery time: p50 {statistics.median(recoveries):.1f}s, max {max(recoveries):.1f}s "
              f"(target max <= {MAX_RECOVERY_SECS:g}s)")
    if report.output is not None:
        print(f"  output (exactly once): {report.output.describe()}")
    for record, (partition, offset, at) in report.second_copies:
        print(f"    {record} read again at {at}s: partition {partition}, offset {offset}")
    print(f"  committed state: {'exact' if report.state_read and not report.state else report.state[:3]}")
    if report.rss_growth is not None:
        print(f"  workers' mean RSS: {report.rss_mib[0]:.0f} MiB at the start, {report.rss_mib[1]:.0f} MiB at the "
              f"end; growth after the warm-up {report.rss_growth:+.1%} (target <= {MAX_RSS_GROWTH:.0%})")
    failures = report.failures()
    print("  result: " + ("PASSED" if not failures else "FAILED: " + "; ".join(failures)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=120.0, help="seconds of faults (default: %(default)s)")
    parser.add_argument("--rate", type=float, default=300.0, help="input lines a second (default: %(default)s)")
    parser.add_argument("--gap", type=float, nargs=2, default=(5.0, 20.0), metavar=("MIN", "MAX"),
                        help="seconds between a recovery and the next fault (default: 5 20)")
    parser.add_argument("--bed", action="store_true",
                        help="on the multi-host test bed (root; Spark standalone across network namespaces)")
    parser.add_argument("--faults", help="the kinds to draw from, comma-separated (default: all of the mode's: "
                                         f"{', '.join(FAULTS)}; with --bed: {', '.join(BED_FAULTS)}); none: "
                                         "the input alone, for the memory of workers that live the whole run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rss-after", type=float, help="the warm-up before memory counts (default: 300 s, or a "
                                                        "quarter of a shorter run)")
    args = parser.parse_args(argv)
    known = BED_FAULTS if args.bed else FAULTS
    kinds = () if args.faults == "none" else tuple(args.faults.split(",")) if args.faults else known
    if not set(kinds) <= set(known):
        parser.error(f"--faults: {', '.join(sorted(set(kinds) - set(known)))} not among {', '.join(known)}")
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="squall-chaos-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) \
            as root:
        bed = BedCluster(root) if args.bed else None
        try:
            report = Chaos(root, args.duration, args.rate, tuple(args.gap), args.seed, kinds, args.rss_after,
                           bed=bed).run()
        finally:
            if bed is not None:
                bed.close()
    print_report(report)
    print("reproduce: python benchmarks/chaos.py " + " ".join(sys.argv[1:]))
    return 1 if report.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
