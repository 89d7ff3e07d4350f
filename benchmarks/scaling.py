"""Scale-out: does a second worker process add throughput?

The shape Storm users write: sentence spout x2 -> split x2 on **shuffle** grouping -> count
x2 on **fields** grouping ("word"), the same executors whether they run in one worker
process or are spread over two (benchmarks/wordcount.py's topology and input). Measured in
steady state (words/s after the first 10% of the words were counted), acking off and on, the
variants alternating so that all meet the same conditions on a shared machine; the best of
--runs counts.

Besides throughput, the CPU the worker processes spend per word, from their own CPU times
(user + system, read with psutil over the steady-state interval): in one worker process every
hand-off is local; in two, half the sentences and half the words cross to the other worker
(shuffle and fields grouping over 2 tasks each). The difference, divided by the crossings
per word, is what a crossing tuple costs above a local one.

Reproduce (quiet machine, nothing else running):
    python benchmarks/scaling.py [--sentences 400000] [--runs 2] [--acking off|on|both]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from wordcount import make_sentences, plain_loop, timed_run  # noqa: E402

PARALLELISM = 2


def worker_cpu_secs() -> float:
    """CPU seconds (user + system) of this process's descendants: the worker processes."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:
            continue
        total += times.user + times.system
    return total


def measure(sentences: list[str], words: int, workers: int, acking: bool) -> tuple[float, float]:
    """(words/s in steady state, worker CPU microseconds per word over the same interval)."""
    samples: list[tuple[int, float, float]] = []  # (words counted, time, worker CPU)

    def watch(components: dict) -> None:
        samples.append((components["count"]["executed"], time.perf_counter(), worker_cpu_secs()))

    _, rate = timed_run(sentences, words, acking, workers, processes=True, shuffle_split=True,
                        parallelism=PARALLELISM, watch=watch)
    first = next(s for s in samples if s[0] >= words / 10)
    last = samples[-1]
    return rate, (last[2] - first[2]) / max(last[0] - first[0], 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=2, help="runs of each variant; the best counts (default 2)")
    parser.add_argument("--acking", choices=["off", "on", "both"], default="both")
    args = parser.parse_args()
    sentences = make_sentences(args.sentences)
    words = plain_loop(sentences)[0]
    words_per_sentence = words / len(sentences)
    # shuffle over 2 tasks: half the sentences cross; fields over 2 tasks: half the words do
    crossings_per_word = 0.5 + 0.5 / words_per_sentence
    print(f"scaling: spout x{PARALLELISM} -> split x{PARALLELISM} (shuffle) -> count x{PARALLELISM} (fields), "
          f"{len(sentences):,} sentences ({words:,} words), best of {args.runs}; words/s after the first 10%")
    for acking in ([False, True] if args.acking == "both" else [args.acking == "on"]):
        best: dict[int, tuple[float, float]] = {}
        for _ in range(args.runs):
            for workers in (1, 2):
                rate, cpu = measure(sentences, words, workers, acking)
                if rate > best.get(workers, (0.0, 0.0))[0]:
                    best[workers] = (rate, cpu)
        label = "on " if acking else "off"
        for workers, (rate, cpu) in best.items():
            print(f"  acking {label} {workers} worker process(es) {rate:>10,.0f} words/s  "
                  f"{cpu:5.2f} us CPU per word")
        target = 1.4 if acking else 1.5
        print(f"  acking {label} 2 processes / 1: {best[2][0] / best[1][0]:.2f}x (target >= {target}x); "
              f"a crossing tuple costs {(best[2][1] - best[1][1]) / crossings_per_word:.2f} us CPU above a "
              f"local one (target <= 1)")
    print("reproduce: python benchmarks/scaling.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
