"""Complete latency (spout emit -> tree acked) at a fixed rate, across two worker processes.

A spout emits ``--rate`` tuples per second, each with a message id, through three bolts
(each anchoring and acking); the components are placed so that every hop crosses between
the two workers: spout (worker 1) -> bolt1 (worker 0) -> bolt2 (worker 1) -> bolt3 (worker 0).
The spout measures each tuple's complete latency: from its emit to its ``ack``, which
comes after the acker has seen the whole tree. The same topology with in-process workers
is measured in the same run, as the baseline.

Reproduce:  python benchmarks/latency.py [--rate 5000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time

from squall import BasicBolt, Config, LocalCluster, Spout, TopologyBuilder
from scratch import SHM


class PacedSpout(Spout):
    """Emits ``rate`` tuples per second (catching up on its schedule, never bursting ahead):
    its sequence number, or the next of ``payloads`` (in turn) if given. Writes every
    complete latency, in seconds, to ``out_path`` when closed."""

    outputs = ["n"]

    def __init__(self, rate: float, out_path: str, payloads: list | None = None):
        self.rate = rate
        self.out_path = out_path
        self.payloads = payloads

    def open(self, conf, context, collector):
        self.collector = collector
        self.sent: dict[int, float] = {}
        self.latencies: list[float] = []
        self.n = 0
        self.start = time.perf_counter()

    def next_tuple(self):
        due = int((time.perf_counter() - self.start) * self.rate)
        while self.n < due:
            self.sent[self.n] = time.perf_counter()
            value = self.n if self.payloads is None else self.payloads[self.n % len(self.payloads)]
            self.collector.emit([value], msg_id=self.n)
            self.n += 1

    def ack(self, msg_id):
        self.latencies.append(time.perf_counter() - self.sent.pop(msg_id))

    def fail(self, msg_id):
        self.sent.pop(msg_id, None)

    def close(self):
        with open(self.out_path, "w") as f:
            f.write("\n".join(map(repr, self.latencies)))


class Forward(BasicBolt):
    outputs = ["n"]

    def execute(self, tup, collector):
        collector.emit(tup.values)


def chain(spout: PacedSpout) -> TopologyBuilder:
    """spout -> bolt1 -> bolt2 -> bolt3; with 2 workers every hop crosses between them."""
    builder = TopologyBuilder()
    # component ids sort as bolt1, bolt2, bolt3, spout: the scheduler deals them to workers 0, 1, 0, 1
    builder.set_spout("spout", spout)
    builder.set_bolt("bolt1", Forward()).shuffle_grouping("spout")
    builder.set_bolt("bolt2", Forward()).shuffle_grouping("bolt1")
    builder.set_bolt("bolt3", Forward()).shuffle_grouping("bolt2")
    return builder


def measure(rate: float, seconds: float, processes: bool, warmup: float, cluster=None, build=chain,
            payloads: list | None = None, overrides: dict | None = None) -> list[float]:
    """Complete latencies (seconds) after ``warmup`` of the topology ``build(spout)`` makes
    around a PacedSpout, with the config ``overrides``; on ``cluster`` if given (left
    running), else on a LocalCluster of its own."""
    conf = Config().set_num_workers(2).set_num_ackers(2)
    conf.update(overrides or {})
    # the spout's file is the harness, not the measurement: in memory where there is /dev/shm, and removed
    with tempfile.TemporaryDirectory(prefix="squall-latency-", dir=SHM) as directory:
        out_path = os.path.join(directory, "latencies")
        builder = build(PacedSpout(rate, out_path, payloads))
        with contextlib.nullcontext(cluster) if cluster is not None else LocalCluster(processes=processes) as running:
            running.submit_topology("latency", conf, builder.create_topology())
            time.sleep(seconds)  # the measurement itself: the spout runs at its fixed rate
            running.kill_topology("latency", wait_secs=1)
        with open(out_path) as f:
            latencies = [float(line) for line in f if line.strip()]
    return latencies[int(rate * warmup):]


def describe(label: str, latencies: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(latencies, n=100)
    p50, p99 = cuts[49] * 1000, cuts[98] * 1000
    print(f"  {label:<26} {len(latencies):>7,} tuples   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms   "
          f"max {max(latencies) * 1000:7.2f} ms")
    return p50, p99


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=5000)
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--warmup", type=float, default=1, help="seconds of tuples left out of the figures")
    args = parser.parse_args()
    print(f"complete latency, {args.rate:,.0f} tuples/s through 3 bolts, every hop between 2 workers, "
          f"{args.seconds:g} s each")
    _, p99 = describe("2 worker processes", measure(args.rate, args.seconds, True, args.warmup))
    _, in_process_p99 = describe("2 in-process workers", measure(args.rate, args.seconds, False, args.warmup))
    print(f"  p99: worker processes {p99:.2f} ms (target <= 1 ms), in-process workers {in_process_p99:.2f} ms "
          f"(target <= 0.5 ms)")
    print("reproduce: python benchmarks/latency.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
