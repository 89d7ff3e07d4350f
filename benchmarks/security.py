"""What authenticated, encrypted links cost: word count and complete latency across two
worker processes with ``topology.messaging.secure`` on (ZeroMQ CURVE, the default) and off,
in the same run, alternating.

Targets (the security issue): throughput with security >= 0.9x without; p99 complete
latency with security within +0.5 ms of without.

Reproduce:
    python benchmarks/security.py [--sentences 400000] [--runs 3] [--rate 5000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import sys

from latency import describe, measure
from wordcount import make_sentences, timed_run

SECURE, PLAIN = {"topology.messaging.secure": True}, {"topology.messaging.secure": False}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant; the best counts (default 3)")
    parser.add_argument("--rate", type=float, default=5000, help="tuples/s for the latency part")
    parser.add_argument("--seconds", type=float, default=10, help="seconds of each latency measurement")
    args = parser.parse_args()

    sentences = make_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    print(f"word count, 2 worker processes, acking off, {len(sentences):,} sentences ({words:,} words), "
          f"best of {args.runs} alternating runs (words/s after the first 10%)")
    best = {"secure": 0.0, "plain": 0.0}
    for _ in range(args.runs):
        for label, overrides in (("secure", SECURE), ("plain", PLAIN)):
            best[label] = max(best[label], timed_run(sentences, words, False, 2, True, overrides)[1])
    for label in best:
        print(f"  links {label:<7} {best[label]:>12,.0f} words/s")
    print(f"  secure / plain: {best['secure'] / best['plain']:.2f}x (target >= 0.9x)")

    print(f"complete latency, {args.rate:,.0f} tuples/s through 3 bolts, every hop between 2 worker processes, "
          f"{args.seconds:g} s each")
    _, p99_secure = describe("links secure", measure(args.rate, args.seconds, True, 1, overrides=SECURE))
    _, p99_plain = describe("links plain", measure(args.rate, args.seconds, True, 1, overrides=PLAIN))
    print(f"  p99 secure - plain: {p99_secure - p99_plain:+.2f} ms (target <= +0.5 ms)")
    print("reproduce: python benchmarks/security.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
