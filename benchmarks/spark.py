"""Squall on Spark next to worker processes, and Spark's own streaming on the same input.

All in one run, on a Spark master (default ``local-cluster[2,1,1024]``: two executor JVMs
of one core each, so each of the topology's 2 workers is a task in an executor of its own):

1. start-up: from ``SparkCluster(master)`` (what ``squall submit`` does first: JVMs, the
   driver) to the topology submitted and to its first acked tuple;
2. word count throughput (benchmarks/wordcount.py's topology, 2 workers, acking off),
   on Spark and as 2 worker processes, alternating, best of ``--runs``: words/s after the
   first 10% of the words (start-ups are in 1.) and from submit to the last word;
3. complete latency at ``--rate`` tuples/s through 3 bolts, every hop between the 2
   workers (benchmarks/latency.py's topology), on Spark and as worker processes;
4. word count latency, sentence emitted -> its words counted (the tree acked), at
   ``--sentence-rate`` sentences/s, on Spark and as worker processes, next to the same word
   count as a Spark Structured Streaming query on the same Spark (benchmarks/
   structured_streaming.py: sentence made available -> its counts visible), with the
   default trigger and a 100 ms one.

Needs ``pip install ".[spark]"``; the machine's 2 cores run the driver, the executors and
the Python workers, so run it alone.

Reproduce:  python benchmarks/spark.py [--master local-cluster[2,1,1024]] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cloudpickle  # noqa: E402
import latency  # noqa: E402 - benchmarks/ is not a package
import structured_streaming  # noqa: E402
import wordcount  # noqa: E402
from squall import Config, TopologyBuilder  # noqa: E402
from squall.cluster.spark import SparkCluster  # noqa: E402
from squall.testing import wait_until  # noqa: E402


# the benchmarks' components travel by value: the executors cannot import these files (wordcount
# loads examples/wordcount.py by a path relative to itself)
cloudpickle.register_pickle_by_value(latency)
cloudpickle.register_pickle_by_value(wordcount)


def startup(master: str) -> tuple[SparkCluster, dict[str, float]]:
    """A new SparkCluster, and how long until a word count's first tuple is acked."""
    t0 = time.perf_counter()
    cluster = SparkCluster(master, spark_conf={"spark.sql.shuffle.partitions": "2"})  # for Structured Streaming
    t1 = time.perf_counter()
    builder = TopologyBuilder()
    builder.set_spout("sentences", wordcount.ListSpout(wordcount.make_sentences(100_000), reliable=True), 2)
    builder.set_bolt("split", wordcount.SplitSentence(), 2).local_or_shuffle_grouping("sentences")
    builder.set_bolt("count", wordcount.WordCount(report_every_secs=3600), 2).fields_grouping("split", ["word"])
    conf = Config().set_num_workers(2).set_max_spout_pending(1000)
    conf["worker.heartbeat.frequency.secs"] = 0.01  # the first ack is seen when it happens
    cluster.submit_topology("startup", conf, builder.create_topology())
    t2 = time.perf_counter()
    wait_until(lambda: cluster.get_topology_info("startup")["components"]["sentences"]["acked"] > 0,
               timeout=120, interval=0.005, message="a first acked tuple")
    t3 = time.perf_counter()
    cluster.kill_topology("startup", wait_secs=0)
    return cluster, {"session": t1 - t0, "submit": t2 - t1, "first_ack": t3 - t1}


def wordcount_topology(spout: latency.PacedSpout) -> TopologyBuilder:
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout)
    builder.set_bolt("split", wordcount.SplitSentence(), 2).local_or_shuffle_grouping("sentences")
    builder.set_bolt("count", wordcount.WordCount(report_every_secs=3600), 2).fields_grouping("split", ["word"])
    return builder


def quantiles(latencies: list[float]) -> tuple[float, float, float]:
    cuts = statistics.quantiles(latencies, n=100)
    return cuts[49] * 1000, cuts[98] * 1000, max(latencies) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--master", default="local-cluster[2,1,1024]")
    parser.add_argument("--sentences", type=int, default=400_000, help="word count input (default 400,000)")
    parser.add_argument("--runs", type=int, default=3, help="word count runs of each variant; the best counts")
    parser.add_argument("--rate", type=float, default=5000, help="tuples/s of the latency topology")
    parser.add_argument("--sentence-rate", type=float, default=5000, help="sentences/s of the word count latency")
    parser.add_argument("--seconds", type=float, default=10, help="length of each latency run")
    parser.add_argument("--warmup", type=float, default=2, help="seconds of tuples left out of latency figures")
    args = parser.parse_args()

    cluster, started = startup(args.master)
    print(f"Squall on Spark ({cluster.master}) next to 2 worker processes; load average {os.getloadavg()[0]:.1f}")
    print(f"start-up: SparkCluster() {started['session']:.2f} s (the JVMs), then submit_topology "
          f"{started['submit']:.2f} s, first acked tuple {started['first_ack']:.2f} s after submitting: "
          f"{started['session'] + started['first_ack']:.2f} s from the start (as for squall submit)")

    sentences = wordcount.make_sentences(args.sentences)
    words = wordcount.plain_loop(sentences)[0]
    best = {"processes": (0.0, 0.0), "spark": (0.0, 0.0)}
    for _ in range(args.runs):  # alternate, so that both meet the same conditions on this shared machine
        for mode, on in (("processes", None), ("spark", cluster)):
            total, steady = wordcount.timed_run(sentences, words, False, 2, processes=True, cluster=on)
            best[mode] = (max(best[mode][0], steady), max(best[mode][1], words / total))
    print(f"word count, {len(sentences):,} sentences ({words:,} words), 2 workers, acking off, best of {args.runs}")
    for mode, (steady, overall) in best.items():
        print(f"  {mode:<10} {steady:>10,.0f} words/s past 10%   {overall:>10,.0f} words/s from submit")
    ratio = best["spark"][0] / best["processes"][0]
    print(f"  Spark / worker processes: {ratio:.2f}x (target >= 0.9x)")

    print(f"complete latency, {args.rate:,.0f} tuples/s through 3 bolts, every hop between the 2 workers, "
          f"{args.seconds:g} s")
    p99s = {}
    for mode, on in (("processes", None), ("spark", cluster)):
        p50, p99, top = quantiles(latency.measure(args.rate, args.seconds, True, args.warmup, cluster=on))
        p99s[mode] = p99
        print(f"  {mode:<10} p50 {p50:7.2f} ms   p99 {p99:7.2f} ms   max {top:8.2f} ms")
    print(f"  Spark p99 / worker processes p99: {p99s['spark'] / p99s['processes']:.2f}x (target <= 2x)")

    print(f"word count latency, {args.sentence_rate:,.0f} sentences/s, {args.seconds:g} s: Squall's complete "
          "latency (emit -> counted and acked) and Structured Streaming's (available -> counts visible)")
    for mode, on in (("processes", None), ("spark", cluster)):
        measured = latency.measure(args.sentence_rate, args.seconds, True, args.warmup, cluster=on,
                                   build=wordcount_topology, payloads=sentences[:10_000])
        p50, p99, top = quantiles(measured)
        print(f"  {'squall, ' + mode:<38} p50 {p50:8.2f} ms   p99 {p99:8.2f} ms   max {top:8.2f} ms")
    for label, trigger in (("default trigger", None), ("100 ms trigger", 100)):
        figures = structured_streaming.measure_structured_streaming(
            cluster.spark, sentences[:10_000], args.sentence_rate, args.seconds, trigger_ms=trigger,
            warmup=args.warmup)
        print(f"  {'structured streaming, ' + label:<38} p50 {figures['p50_ms']:8.2f} ms   "
              f"p99 {figures['p99_ms']:8.2f} ms   max {figures['max_ms']:8.2f} ms")
    cluster.shutdown()
    print("reproduce: python benchmarks/spark.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
