"""The Streams API's word count against the same written as bolts, and against Bytewax.

Three word counts over the same sentences (benchmarks/wordcount.py's input), one worker in this
process, acking off, running totals per word (each word's new count is produced as it is
counted), alternating so that all meet the same conditions; the best of --runs counts:

* **streams**: ``StreamBuilder().new_stream(ListSpout).flat_map(str.split).map_to_pair((w, 1))
  .count_by_key()``: one task, so the whole pipeline is fused into one bolt; words/s from the
  moment 10% of the sentences were executed until all were;
* **bolts**: the examples' word count (split bolt -> count bolt, local-or-shuffle), the same
  measurement as benchmarks/vs_bytewax.py's (words counted after the first 10%);
* **bytewax**: ``flat_map`` -> ``key_on`` -> ``stateful_map`` with a running total, batches of
  --batch sentences (benchmarks/vs_bytewax.py's reference), whole run.

Targets (issue 38): streams / bytewax >= 1.5x; streams / bolts >= 1.0 (fusion).

Reproduce:  python benchmarks/streams.py [--sentences 100000] [--runs 3] [--batch 1000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vs_bytewax import bytewax_rate  # noqa: E402 - benchmarks/ is not a package
from wordcount import ListSpout, make_sentences, plain_loop, timed_run  # noqa: E402

from squall import Config, LocalCluster  # noqa: E402
from squall.streams import StreamBuilder  # noqa: E402
from squall.testing import wait_until  # noqa: E402


def streams_rate(sentences: list[str], words: int) -> float:
    """Words/s of the Streams API word count after the first 10% of the sentences."""
    builder = StreamBuilder()
    (builder.new_stream(ListSpout(sentences, reliable=False))
        .flat_map(str.split)
        .map_to_pair(lambda word: (word, 1))
        .count_by_key())
    conf = Config().set_num_workers(1).set_num_ackers(0)
    conf["worker.heartbeat.frequency.secs"] = 0.05
    with LocalCluster() as cluster:
        cluster.submit_topology("streams", conf, builder.build())
        begun: list[tuple[float, int]] = []

        def done() -> bool:
            executed = cluster.get_topology_info("streams")["components"]["bolt1"]["executed"]
            if executed >= len(sentences) / 10 and not begun:
                begun.append((time.perf_counter(), executed))
            return executed >= len(sentences)

        wait_until(done, timeout=600, interval=0.02, message="every sentence executed")
        end = time.perf_counter()
        cluster.kill_topology("streams", wait_secs=0)
    t1, executed = begun[0]
    return words * (len(sentences) - executed) / len(sentences) / (end - t1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1000, help="Bytewax's input batch size (default 1000)")
    args = parser.parse_args()
    sentences = make_sentences(args.sentences)
    words = plain_loop(sentences)[0]
    measures = {
        "streams": lambda: streams_rate(sentences, words),
        "bolts": lambda: timed_run(sentences, words, False, 1)[1],
        "bytewax": lambda: bytewax_rate(sentences, words, args.batch, final=False),
    }
    best = dict.fromkeys(measures, 0.0)
    for _ in range(args.runs):
        for name, measure in measures.items():
            best[name] = max(best[name], measure())
    print(f"word count, {len(sentences):,} sentences ({words:,} words), one worker in this process, acking off, "
          f"best of {args.runs} alternating runs")
    for name, rate in best.items():
        print(f"  {name:<8} {rate:>12,.0f} words/s")
    ratio_bytewax, ratio_bolts = best["streams"] / best["bytewax"], best["streams"] / best["bolts"]
    print(f"  streams / bytewax {ratio_bytewax:.2f}x (target >= 1.5x: {'met' if ratio_bytewax >= 1.5 else 'NOT MET'}); "
          f"streams / bolts {ratio_bolts:.2f} (target >= 1.0: {'met' if ratio_bolts >= 1.0 else 'NOT MET'})")
    print(f"reproduce: python benchmarks/streams.py --sentences {args.sentences} --runs {args.runs} "
          f"--batch {args.batch}")


if __name__ == "__main__":
    main()
