"""The engine's own cost per tuple, compiled and pure Python, in the same run.

What is measured, each in one in-process worker (a LocalCluster() in a child process):

* the engine floor: a spout emitting integers from memory -> a relay bolt (emits one tuple
  anchored to its input, then acks it) -> a sink bolt (acks), shuffle grouping, acking off and
  on: tuples/s through the sink after the first 10% of the tuples (start-up left out) until
  all are executed (and, acking on, every spout tuple acked). The components do no work of
  their own, so this is what Squall costs per tuple and hop.
* the examples' word count (benchmarks/wordcount.py's topology and input), acking off and on.
* the Python-level calls per tracked tuple (spout -> sink, acked) besides the user callbacks,
  in one worker and crossing between two in-process workers: counted with a profile hook on
  the topology's threads (compiled code's calls among its own functions are C calls and do not
  count), the top functions beside them.

Each is measured with the compiled data path and with ``SQUALL_NO_EXTENSIONS=1`` (pure
Python), alternating child processes so that both meet the same conditions; the best of
--runs counts. The baseline for the floor is the components' own calls as a plain Python loop.
Targets (issue 23): floor acking on >= 570k tuples/s; acking on / off >= 0.7.

Reproduce (quiet machine; needs the extensions built: pip install -e .):
    python benchmarks/engine.py [--tuples 1000000] [--sentences 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from squall import Bolt, Config, LocalCluster, Spout, TopologyBuilder, compiled  # noqa: E402
from squall.testing import wait_until  # noqa: E402
from wordcount import make_sentences, plain_loop, timed_run  # noqa: E402


class RangeSpout(Spout):
    """Emits 0 .. n-1, with the value as message id when ``reliable``."""

    outputs = ["n"]

    def __init__(self, n: int, reliable: bool):
        self.n, self.reliable = n, reliable

    def open(self, conf, context, collector):
        self.i, self.emit = 0, collector.emit

    def next_tuple(self):
        if self.i < self.n:
            self.emit([self.i], msg_id=self.i if self.reliable else None)
            self.i += 1

    def ack(self, msg_id):
        pass  # a user callback of its own, as next_tuple: left out of the calls counted

    def fail(self, msg_id):
        raise RuntimeError(f"tuple {msg_id} failed: the benchmark's figures would be wrong")


class Relay(Bolt):
    outputs = ["n"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit([tup.values[0]], anchors=tup)
        self.collector.ack(tup)


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.ack = collector.ack

    def execute(self, tup):
        self.ack(tup)


def floor_rate(n: int, acking: bool) -> float:
    """Tuples/s through spout -> relay -> sink after the first 10%."""
    builder = TopologyBuilder()
    builder.set_spout("spout", RangeSpout(n, acking))
    builder.set_bolt("relay", Relay()).shuffle_grouping("spout")
    builder.set_bolt("sink", Sink()).shuffle_grouping("relay")
    conf = Config().set_num_workers(1).set_num_ackers(1 if acking else 0)
    conf["worker.heartbeat.frequency.secs"] = 0.05
    if acking:
        conf.set_max_spout_pending(5000)
    with LocalCluster() as cluster:
        cluster.submit_topology("floor", conf, builder.create_topology())
        begun: list[tuple[float, int]] = []

        def done() -> bool:
            components = cluster.get_topology_info("floor")["components"]
            executed = components["sink"]["executed"]
            if executed >= n / 10 and not begun:
                begun.append((time.perf_counter(), executed))
            return executed >= n and (not acking or components["spout"]["acked"] >= n)

        wait_until(done, timeout=600, interval=0.02, message="every tuple executed (and acked)")
        end = time.perf_counter()
        cluster.kill_topology("floor", wait_secs=0)
    t1, counted = begun[0]
    return (n - counted) / (end - t1)


def _run_counted(n: int, workers: int) -> collections.Counter:
    """Python-level calls made by the topology's threads while spout -> sink runs ``n`` tracked
    tuples to completion, by function; the benchmark's own functions (the user callbacks) and
    the polling thread are left out. Compiled code's calls among its own functions are C calls
    and do not show: what shows is what runs as Python."""
    builder = TopologyBuilder()
    builder.set_spout("spout", RangeSpout(n, True))
    builder.set_bolt("sink", Sink()).shuffle_grouping("spout")
    conf = Config().set_num_workers(workers).set_max_spout_pending(5000)
    calls: collections.Counter = collections.Counter()
    here = os.path.abspath(__file__)

    def hook(frame, event, arg):
        if event == "call" and frame.f_code.co_filename != here:
            code = frame.f_code
            calls[f"{os.path.basename(code.co_filename)}:{code.co_name}"] += 1

    with LocalCluster() as cluster:
        threading.setprofile(hook)  # the threads the topology starts from now on
        try:
            cluster.submit_topology("calls", conf, builder.create_topology())
            placement = {e["component"]: i for i, w in enumerate(cluster.get_topology_info("calls")["workers"])
                         for e in w["executors"]}
            if workers > 1 and placement["spout"] == placement["sink"]:
                raise SystemExit(f"the spout and the sink share a worker: {placement}")
            wait_until(lambda: cluster.get_topology_info("calls")["components"]["spout"]["acked"] >= n,
                       timeout=600, interval=0.02, message="every tuple acked")
        finally:
            threading.setprofile(None)
        cluster.kill_topology("calls", wait_secs=0)
    return calls


def calls_per_tuple(workers: int) -> tuple[float, list[tuple[str, float]]]:
    """Python-level calls per tracked tuple (spout -> sink, acked) besides the user callbacks:
    the difference between a long and a short run, so that start-up and shut-down cancel."""
    short, long = 5_000, 25_000
    a, b = _run_counted(short, workers), _run_counted(long, workers)
    per_tuple = {name: (b[name] - a.get(name, 0)) / (long - short) for name in b}
    top = sorted(((name, c) for name, c in per_tuple.items() if c >= 0.05), key=lambda item: -item[1])
    return sum(per_tuple.values()), top[:12]


def floor_loop(n: int) -> float:
    """The components' calls without Squall: next_tuple, the relay's execute, the sink's execute."""
    out: list[int] = []
    start = time.perf_counter()
    for i in range(n):
        value = [i]
        relayed = [value[0]]
        out.append(relayed[0])
    return n / (time.perf_counter() - start)


def child(args: argparse.Namespace) -> None:
    sentences = make_sentences(args.sentences)
    words = plain_loop(sentences)[0]
    figures = {"data path": compiled.describe()}
    for acking in (False, True):
        mode = "on" if acking else "off"
        figures[f"floor/{mode}"] = floor_rate(args.tuples, acking)
        figures[f"wordcount/{mode}"] = timed_run(sentences, words, acking, 1)[1]
    if args.calls:
        for workers, where in ((1, "in-process"), (2, "crossing")):
            figures[f"calls/{where}"] = calls_per_tuple(workers)
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuples", type=int, default=1_000_000, help="spout tuples for the floor (default 1,000,000)")
    parser.add_argument("--sentences", type=int, default=100_000, help="word count sentences (default 100,000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant; the best counts (default 3)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not compiled.compiled_modules():
        raise SystemExit("no extensions built here: pip install -e . (with a C compiler) builds them")
    best: dict[str, dict[str, float]] = {"compiled": {}, "pure": {}}
    calls: dict[str, dict[str, Any]] = {}
    for run in range(args.runs):
        for variant, env in (("compiled", {}), ("pure", {compiled.NO_EXTENSIONS_ENV: "1"})):
            # calls are counted once per variant, in the first run: they do not vary
            extra = ["--calls"] if run == 0 else []
            out = subprocess.run([sys.executable, __file__, "--child", "--tuples", str(args.tuples),
                                  "--sentences", str(args.sentences), *extra], env={**os.environ, **env},
                                 capture_output=True, text=True, check=True).stdout
            figures = json.loads(out.splitlines()[-1])
            print(f"  ({variant}: {figures.pop('data path')})", file=sys.stderr)
            for key in [k for k in figures if k.startswith("calls/")]:
                calls.setdefault(variant, {})[key.split("/")[1]] = figures.pop(key)
            for key, rate in figures.items():
                best[variant][key] = max(best[variant].get(key, 0.0), rate)
    loop = max(floor_loop(args.tuples) for _ in range(args.runs))
    print(f"engine floor ({args.tuples:,} tuples, spout -> relay -> sink) and word count ({args.sentences:,} "
          f"sentences), one in-process worker, best of {args.runs}; figures after the first 10%")
    print(f"  {'':<22}{'compiled':>12}{'pure':>12}  compiled/pure")
    for key in best["compiled"]:
        c, p = best["compiled"][key], best["pure"][key]
        print(f"  {key:<22}{c:>12,.0f}{p:>12,.0f}  {c / p:.2f}x")
    for variant in ("compiled", "pure"):
        figures = best[variant]
        print(f"  {variant}: floor acking on / off {figures['floor/on'] / figures['floor/off']:.2f}, "
              f"word count acking on / off {figures['wordcount/on'] / figures['wordcount/off']:.2f} (target >= 0.7); "
              f"floor acking on {figures['floor/on']:,.0f}/s (target >= 570,000/s)")
    print(f"  plain loop of the floor's component calls: {loop:,.0f} tuples/s "
          f"(compiled floor acking off: {best['compiled']['floor/off'] / loop:.1%} of it)")
    print("Python-level calls per tracked tuple, spout -> sink acked, besides the user callbacks "
          "(target <= 8 crossing, compiled):")
    for variant, by_path in calls.items():
        for where, (total, top) in by_path.items():
            print(f"  {variant:<9}{where:<11}{total:6.1f}   " + ", ".join(f"{name} {c:.1f}" for name, c in top[:8]))
    print("reproduce: python benchmarks/engine.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
