"""Backpressure across worker processes: a fast spout, a deliberately slow bolt, bounded memory.

An unbounded spout (no message ids, so no max-spout-pending limit helps) in one worker
feeds a bolt in the other worker that spends ``--delay-ms`` per tuple. Without
backpressure the bolt's worker would queue tuples without end; with it, the spout is
throttled to the bolt's pace. Every ``--every`` seconds this prints each worker's resident
memory (VmRSS from /proc) and the tuples emitted and executed so far; the baseline is the
first sample after ``--warmup`` seconds, and the growth after it is the figure that matters.

Reproduce:  python benchmarks/backpressure.py [--seconds 60] [--delay-ms 0.2]
"""

from __future__ import annotations

import argparse
import sys
import time

from squall import Bolt, Config, LocalCluster, Spout, TopologyBuilder


class FloodSpout(Spout):
    outputs = ["n", "payload"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n, "x" * 100])


class SlowBolt(Bolt):
    def __init__(self, delay_secs: float):
        self.delay_secs = delay_secs

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        time.sleep(self.delay_secs)


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--warmup", type=float, default=10)
    parser.add_argument("--every", type=float, default=5)
    parser.add_argument("--delay-ms", type=float, default=0.2)
    args = parser.parse_args()
    builder = TopologyBuilder()
    # ids sort as "flood", "slow": the scheduler puts the spout in worker 0, the bolt in worker 1
    builder.set_spout("flood", FloodSpout())
    builder.set_bolt("slow", SlowBolt(args.delay_ms / 1000)).shuffle_grouping("flood")
    conf = Config().set_num_workers(2).set_num_ackers(0)
    print(f"backpressure: unbounded spout -> bolt taking {args.delay_ms} ms per tuple, 2 worker processes, "
          f"{args.seconds:g} s")
    print(f"  {'t (s)':>6} {'spout worker RSS':>17} {'bolt worker RSS':>16} {'emitted':>10} {'executed':>10}"
          f" {'in flight':>10}")
    samples = []
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("flood", conf, builder.create_topology())
        pids = [w["pid"] for w in cluster.get_topology_info("flood")["workers"]]
        start = time.monotonic()
        next_sample = start + args.every
        while time.monotonic() - start < args.seconds:
            time.sleep(max(0.0, next_sample - time.monotonic()))  # the sampling period
            next_sample += args.every
            info = cluster.get_topology_info("flood")["components"]
            emitted, executed = info["flood"]["emitted"], info["slow"]["executed"]
            t = time.monotonic() - start
            rss = [rss_kib(pid) for pid in pids]
            samples.append((t, rss))
            print(f"  {t:6.0f} {rss[0] / 1024:14.1f} MiB {rss[1] / 1024:13.1f} MiB {emitted:>10,} {executed:>10,}"
                  f" {emitted - executed:>10,}")
    after_warmup = [s for s in samples if s[0] >= args.warmup]
    if len(after_warmup) >= 2:
        first, last = after_warmup[0][1], after_warmup[-1][1]
        growth = [(b - a) / 1024 for a, b in zip(first, last)]
        print(f"  RSS growth after warm-up: spout worker {growth[0]:+.1f} MiB, bolt worker {growth[1]:+.1f} MiB "
              f"(target: none)")
    print("reproduce: python benchmarks/backpressure.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
