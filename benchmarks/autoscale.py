"""The autoscaler against the target of issue 40: a bolt costing ~100 µs a tuple, input rising
past one worker's capacity.

The topology: a spout of the lines of a file -> a split costing ``--busy-us`` of CPU per line
(4 tasks) -> the stateful word count (4 tasks), on worker processes of this machine; the spout
is ``--spout``:

* ``tracked``: the lines, each a tracked tuple (replayed if it fails): at least once;
* ``stateful``: examples/stateful_wordcount.py's file spout, which keeps its position, so the
  counts are effectively once (its in-flight window, topology.state.spout.inflight.ms, and the
  spout's own work in its worker bound what a second worker can add: see the closing note of
  issue 40).

1. **One worker**, autoscaler off: lines/s over ``--measure`` seconds after a warm-up.
2. **Autoscaled** (max 2 workers, window 5 s, cool-down 30 s), from one worker, input at full
   speed from the start (the rise): when it scaled, how many rebalances, lines/s over
   ``--measure`` seconds from ``--warmup`` seconds after it runs on two workers, and, once the
   input is read, whether every line was acked (tracked) and whether the committed counts are exactly the input's
   (stateful: nothing lost, nothing counted twice; tracked: nothing lost).

3. **Steady input** (tracked spout): once every line is acked, the spout sends the lines again
   (untracked) at a fifth of one worker's rate for ``--steady`` seconds: the autoscaler must
   scale down once, after its cool-down, and make no other change (no flapping).

Target: autoscaled / one worker >= 1.6x within 60 s of the rise, <= 2 rebalances, nothing lost,
state exact; then one scale-down and no flapping over 10 minutes of steady input.

``--tasks 1 --busy-in count --spout stateful`` is issue 49's case: every component submitted with
one task and the work in the stateful count, which only grows past its task through a rebalance
that deals its state to more tasks (key groups).

Reproduce:  python benchmarks/autoscale.py [--spout tracked|stateful] [--lines 400000] [--busy-us 100] [--steady 600]
            python benchmarks/autoscale.py --spout stateful --tasks 1 --busy-in count --lines 60000
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "examples"))
from stateful_wordcount import FileSpout, WordCount, make_input  # noqa: E402 - the example's components

from squall import BasicBolt, LocalCluster, Spout, TopologyBuilder  # noqa: E402
from squall.testing import committed_state, wait_until  # noqa: E402


class BusySplit(BasicBolt):
    """Splits a line after ``secs`` of CPU (a busy loop: real work holds the interpreter lock)."""

    outputs = ["word"]

    def __init__(self, secs: float) -> None:
        self.secs = secs

    def execute(self, tup: Any, collector: Any) -> None:
        end = time.perf_counter() + self.secs
        while time.perf_counter() < end:
            pass
        for word in tup.values[0].split():
            collector.emit([word])


class LineSpout(Spout):
    """The lines of a file, each a tracked tuple (its number the message id), replayed on fail;
    once the file ``mode`` says ``trickle``, the same lines untracked at ``then_rate`` lines a
    second instead (the input falling back; a file, so that a spout a rebalance started anew
    trickles too)."""

    outputs = ["line"]

    def __init__(self, path: str, then_rate: float = 0.0, mode: str = "") -> None:
        self.path, self.then_rate, self.mode = path, then_rate, mode

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        with open(self.path) as f:
            self.lines = [line.rstrip("\n") for line in f]
        self.todo = collections.deque(enumerate(self.lines))
        self.pending: dict[int, str] = {}
        self.steady_since: float | None = None
        self.trickling, self.checked = False, 0.0

    def next_tuple(self) -> None:
        now = time.monotonic()
        if self.mode and now - self.checked > 0.2:
            self.checked = now
            with open(self.mode) as f:
                self.trickling = f.read().strip() == "trickle"
        if self.trickling:
            self._trickle()
            return
        for _ in range(100):
            if not self.todo:
                return
            n, line = self.todo.popleft()
            self.pending[n] = line
            self.collector.emit([line], msg_id=n)

    def _trickle(self) -> None:
        now = time.monotonic()
        if self.steady_since is None:
            self.steady_since, self.sent = now, 0
        while self.sent < (now - self.steady_since) * self.then_rate:
            self.collector.emit([self.lines[self.sent % len(self.lines)]])  # untracked: the first pass is checked
            self.sent += 1

    def ack(self, msg_id: int) -> None:
        del self.pending[msg_id]

    def fail(self, msg_id: int) -> None:
        self.todo.append((msg_id, self.pending.pop(msg_id)))


class MemoryCount(BasicBolt):
    """Counts words in memory (the tracked run: a stateful bolt would hold the acks of a spout
    that keeps no position until each commit)."""

    def prepare(self, conf: dict[str, Any], context: Any) -> None:
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, tup: Any, collector: Any) -> None:
        self.counts[tup.values[0]] += 1


class BusyCount(WordCount):
    """The stateful count after ``secs`` of CPU a word."""

    def __init__(self, secs: float) -> None:
        self.secs = secs

    def execute(self, tup: Any) -> None:
        end = time.perf_counter() + self.secs
        while time.perf_counter() < end:
            pass
        super().execute(tup)


SPOUTS = {"tracked": LineSpout, "stateful": FileSpout}
COUNTS = {"tracked": MemoryCount, "stateful": WordCount}


def topology(path: str, busy_secs: float, spout: str = "stateful", then_rate: float = 0.0,
             mode: str = "", tasks: int = 4, busy_in: str = "split", count_tasks: int | None = None) -> Any:
    """The topology; ``busy_secs`` of CPU a line in the split, or a word in the (stateful) count;
    ``count_tasks``: the count's, if not ``tasks`` (as the autoscaler grew it)."""
    builder = TopologyBuilder()
    builder.set_spout("lines", LineSpout(path, then_rate, mode) if spout == "tracked" else FileSpout(path))
    split = BusySplit(busy_secs if busy_in == "split" else 0.0)
    count = BusyCount(busy_secs) if busy_in == "count" else COUNTS[spout]()
    builder.set_bolt("split", split, 1).set_num_tasks(tasks).shuffle_grouping("lines")
    builder.set_bolt("count", count, 1).set_num_tasks(count_tasks or tasks).fields_grouping("split", ["word"])
    return builder.create_topology()


def conf(state_dir: str, autoscale: bool, pending: int = 2000, loadaware: bool = True) -> dict[str, Any]:
    return {"topology.workers": 1, "supervisor.slots.ports": [], "topology.max.spout.pending": pending,
            "topology.disable.loadaware.messaging": not loadaware,
            "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": state_dir}, "topology.state.checkpoint.interval.ms": 500,
            "topology.autoscale.enabled": autoscale, "topology.autoscale.max.workers": 2,
            "topology.autoscale.window.secs": 5, "topology.autoscale.cooldown.secs": 30,
            "worker.heartbeat.frequency.secs": 0.5}


def executed(cluster: LocalCluster, name: str) -> int:
    return cluster.get_topology_info(name)["components"]["split"]["executed"]


def rate(cluster: LocalCluster, name: str, secs: float) -> float:
    """Lines/s the split executed over the next ``secs``."""
    start, then = executed(cluster, name), time.monotonic()
    time.sleep(secs)
    return (executed(cluster, name) - start) / (time.monotonic() - then)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=400_000)
    parser.add_argument("--busy-us", type=float, default=100.0)
    parser.add_argument("--measure", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds from scaling to measuring")
    parser.add_argument("--spout", choices=sorted(SPOUTS), default="tracked")
    parser.add_argument("--tasks", type=int, default=4, help="tasks of the split and of the count (default 4)")
    parser.add_argument("--busy-in", choices=["split", "count"], default="split",
                        help="the component doing the work: --busy-us a line in the split, or a word in the count "
                             "(--spout stateful)")
    parser.add_argument("--pending", type=int, default=2000, help="topology.max.spout.pending (default: %(default)s)")
    parser.add_argument("--no-loadaware", dest="loadaware", action="store_false",
                        help="topology.disable.loadaware.messaging: plain round-robin shuffle")
    parser.add_argument("--steady", type=float, default=600.0,
                        help="seconds of steady input at a fifth of one worker's rate after the rise (tracked spout; "
                             "0: none; default: %(default)s)")
    args = parser.parse_args()
    if args.busy_in == "count" and args.spout != "stateful":
        parser.error("--busy-in count is for the stateful count: add --spout stateful")
    steady = args.steady if args.spout == "tracked" else 0.0
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="squall-autoscale-", dir=shm) as root:
        measure(args, steady, root)


def measure(args: argparse.Namespace, steady: float, root: str) -> None:
    """The three parts (see the module), with their files under ``root``."""
    path = make_input(os.path.join(root, "lines.txt"), args.lines)
    with open(path) as f:
        expected = collections.Counter(word for line in f for word in line.split())
    busy = args.busy_us / 1e6

    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("one", conf(os.path.join(root, "one"), False, args.pending, args.loadaware),
                                topology(path, busy, args.spout, tasks=args.tasks, busy_in=args.busy_in))
        wait_until(lambda: executed(cluster, "one") > 2000, timeout=60, message="one worker warmed up")
        one = rate(cluster, "one", args.measure)
        cluster.kill_topology("one", 0)
    unit = "word in the count" if args.busy_in == "count" else "line"
    print(f"one worker:  {one:,.0f} lines/s ({args.busy_us:g} us of CPU a {unit}, {args.spout} spout)")

    state = os.path.join(root, "scaled")
    mode = os.path.join(root, "mode")
    with open(mode, "w") as f:
        f.write("fast")
    with LocalCluster(processes=True) as cluster:
        started = time.monotonic()
        cluster.submit_topology("scaled", conf(state, True, args.pending, args.loadaware),
                                topology(path, busy, args.spout, then_rate=one / 5, mode=mode, tasks=args.tasks,
                                         busy_in=args.busy_in))
        wait_until(lambda: len(cluster.get_topology_info("scaled")["workers"]) == 2
                   and cluster.get_topology_info("scaled")["status"] == "ACTIVE", timeout=120,
                   message="scaled to two workers")
        scaled_at = time.monotonic() - started
        time.sleep(args.warmup)  # the new workers start, and the tuples the rebalance failed come back
        two = rate(cluster, "scaled", args.measure)
        reached_at = time.monotonic() - started
        count_tasks = cluster.get_topology_info("scaled")["components"]["count"]["num_tasks"]

        def running() -> Any:  # as it runs now: the count's tasks may have grown
            return topology(path, busy, args.spout, tasks=args.tasks, busy_in=args.busy_in, count_tasks=count_tasks)

        if args.spout == "stateful":
            wait_until(lambda: sum(sum(task.values()) for task in committed_state(
                "scaled", running(), "count", conf(state, True)).values())
                >= sum(expected.values()), timeout=600, interval=1.0, message="every word counted and committed")
        else:
            wait_until(lambda: cluster.get_topology_info("scaled")["components"]["lines"]["acked"] >= args.lines,
                       timeout=600, interval=1.0, message="every line acked")
        acked = cluster.get_topology_info("scaled")["components"]["lines"]["acked"]
        with open(mode, "w") as f:
            f.write("trickle")
        fell_at = time.time()  # the spout trickles from now on
        time.sleep(steady)  # the decisions of a steady input (they are logged; nothing to wait for)
        decisions = cluster.autoscale_decisions("scaled")
        cluster.kill_topology("scaled", 0)
    rebalances = [d for d in decisions if d.action != "hold" and d.time < fell_at]
    steady_rebalances = [d for d in decisions if d.action != "hold" and d.time >= fell_at]
    if args.spout == "stateful":  # effectively once: the committed counts are the input's
        counts: collections.Counter[str] = collections.Counter()
        for task in committed_state("scaled", running(), "count", conf(state, True)).values():
            counts.update(task)
        lost, doubled = sum((expected - counts).values()), sum((counts - expected).values())
    else:  # at least once: every line acked
        lost, doubled = max(0, args.lines - acked), 0
    print(f"autoscaled:  scaled to 2 workers {scaled_at:.0f} s after the rise, {len(rebalances)} rebalance(s); "
          f"then {two:,.0f} lines/s; the count on {count_tasks} task(s) (submitted with {args.tasks})")
    for d in decisions:
        print(f"  decision: {d.action} -> {d.workers} workers {d.executors}: {d.reason}")
    print(f"autoscaled / one worker: {two / one:.2f}x over {reached_at - args.measure:.0f}-{reached_at:.0f} s after "
          f"the rise (target >= 1.6x within 60 s: "
          f"{'met' if two / one >= 1.6 and reached_at <= 60 else 'NOT MET'}); rebalances {len(rebalances)} "
          f"(target <= 2); {'nothing lost' if not lost else f'{lost} LOST'}"
          + (f", state {'exact' if not doubled and not lost else f'NOT exact: {doubled} extra'}"
             if args.spout == "stateful" else " (at least once: every line acked)"))
    if steady:
        down = steady_rebalances[0] if steady_rebalances else None
        met = down is not None and down.action == "scale-down" and len(steady_rebalances) == 1
        print(f"input fell to {one / 5:,.0f} lines/s for {steady:.0f} s: "
              + (f"scaled down to {down.workers} worker(s) {down.time - fell_at:.0f} s after the fall; "
                 if down is not None and down.action == "scale-down" else "no scale-down; ")
              + f"{len(steady_rebalances)} rebalance(s) in all (target: the one scale-down after the cool-down, "
              f"no flapping: {'met' if met else 'NOT MET'})")
    print("reproduce: python benchmarks/autoscale.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
