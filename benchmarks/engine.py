"""The engine's own cost per tuple, compiled and pure Python, in the same run.

What is measured, each in one in-process worker (a LocalCluster() in a child process):

* the engine floor: a spout emitting integers from memory -> a relay bolt (emits one tuple
  anchored to its input, then acks it) -> a sink bolt (acks), shuffle grouping, acking off and
  on: tuples/s through the sink after the first 10% of the tuples (start-up left out) until
  all are executed (and, acking on, every spout tuple acked). The components do no work of
  their own, so this is what Squall costs per tuple and hop.
* the examples' word count (benchmarks/wordcount.py's topology and input), acking off and on.

Each is measured with the compiled data path and with ``SQUALL_NO_EXTENSIONS=1`` (pure
Python), alternating child processes so that both meet the same conditions; the best of
--runs counts. The baseline for the floor is the components' own calls as a plain Python loop.
Targets (issue 23): floor acking on >= 570k tuples/s; acking on / off >= 0.7.

Reproduce (quiet machine; needs the extensions built: pip install -e .):
    python benchmarks/engine.py [--tuples 1000000] [--sentences 100000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

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
    print(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuples", type=int, default=1_000_000, help="spout tuples for the floor (default 1,000,000)")
    parser.add_argument("--sentences", type=int, default=100_000, help="word count sentences (default 100,000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant; the best counts (default 3)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if not compiled.compiled_modules():
        raise SystemExit("no extensions built here: pip install -e . (with a C compiler) builds them")
    best: dict[str, dict[str, float]] = {"compiled": {}, "pure": {}}
    for _ in range(args.runs):
        for variant, env in (("compiled", {}), ("pure", {compiled.NO_EXTENSIONS_ENV: "1"})):
            out = subprocess.run([sys.executable, __file__, "--child", "--tuples", str(args.tuples),
                                  "--sentences", str(args.sentences)], env={**os.environ, **env},
                                 capture_output=True, text=True, check=True).stdout
            figures = json.loads(out.splitlines()[-1])
            print(f"  ({variant}: {figures.pop('data path')})", file=sys.stderr)
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
    print("reproduce: python benchmarks/engine.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
