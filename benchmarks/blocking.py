"""A blocking bolt beside a fast chain in the same worker: what it costs the fast chain.

The fast chain is benchmarks/wordcount.py's word count (a spout over generated sentences ->
split -> count, acking off, ``timed_run``); the sleeper branch is a second spout emitting
numbers as fast as backpressure lets it -> a bolt that sleeps 1 ms every 100 tuples. Both
run in one in-process worker (``LocalCluster()``, ``set_num_workers(1)``), where one
cooperative thread runs every executor but those of components declared blocking.

Measured: the fast chain's words/s after the first 10% of its words, with the sleeper
declared blocking (``set_blocking(True)``: a thread of its own). The baseline is the same
chain without the sleeper branch; the two alternate in the same run, the best of ``--runs``
each. Target: with / without >= 0.8. For comparison, the same with the sleeper not declared
blocking (it shares the cooperative thread, which its sleeps stall), and with
``topology.worker.cooperative`` False (a thread per executor, Storm's model), with and
without the sleeper. Each line also gives the sleeper's tuples/s over the run: on a thread
of its own, the sleeper waits for the GIL after each sleep up to the switch interval (in this
process Python's 5 ms; worker processes set 0.5 ms, topology.worker.gil.switch.interval.secs),
so it executes fewer tuples/s than on the cooperative thread.

Also measured: the fast chain beside a spout whose next_tuple blocks (StuckSpout), not declared
blocking: the worker's watchdog hands the other executors to a new cooperative thread after
``topology.worker.handoff.secs``. Target: with / without >= 0.8.

Reproduce:  python benchmarks/blocking.py [--sentences 400000] [--runs 3]
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field

from squall import BasicBolt, BasicOutputCollector, Spout, SpoutOutputCollector, TopologyBuilder, TopologyContext, Tuple
from wordcount import make_sentences, timed_run

SLEEP_EVERY = 100  # tuples
SLEEP_SECS = 0.001
THREAD_PER_EXECUTOR = {"topology.worker.cooperative": False}


class NumberSpout(Spout):
    """1, 2, 3, ... for as long as the topology runs (no message ids: backpressure alone
    paces it)."""

    outputs = ["n"]

    def open(self, conf: dict, context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.emit = collector.emit
        self.n = 0

    def next_tuple(self) -> None:
        self.n += 1
        self.emit([self.n])


# set once a run's fast chain has counted every word: releases StuckSpout's next_tuple. Reached
# through sys.modules, by name, since the components are cloudpickled by value (this file runs
# as __main__) and an Event cannot be pickled; the workers run in this process.
RELEASE_MODULE = "squall_benchmark_blocking"
sys.modules[RELEASE_MODULE] = types.SimpleNamespace(release=threading.Event())


class StuckSpout(Spout):
    """Its first next_tuple blocks until the run is over, as a spout waiting on a socket with
    no timeout would; not declared blocking, it is on the worker's cooperative thread."""

    outputs = ["n"]

    def next_tuple(self) -> None:
        sys.modules[RELEASE_MODULE].release.wait(600)


class SleeperBolt(BasicBolt):
    """Sleeps ``secs`` every ``every`` tuples: a stand-in for a bolt waiting on I/O."""

    def __init__(self, every: int = SLEEP_EVERY, secs: float = SLEEP_SECS):
        self.every = every
        self.secs = secs

    def prepare(self, conf: dict, context: TopologyContext) -> None:
        self.executed = 0

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        self.executed += 1
        if self.executed % self.every == 0:
            time.sleep(self.secs)


def add_stuck_spout(builder: TopologyBuilder) -> None:
    """``timed_run``'s ``extend``: a StuckSpout."""
    builder.set_spout("stuck", StuckSpout())


def sleeper_branch(blocking: bool) -> Callable[[TopologyBuilder], None]:
    """``timed_run``'s ``extend``: the numbers spout -> the sleeper, declared blocking or not."""

    def extend(builder: TopologyBuilder) -> None:
        builder.set_spout("numbers", NumberSpout())
        builder.set_bolt("sleeper", SleeperBolt()).shuffle_grouping("numbers").set_blocking(blocking)

    return extend


@dataclass
class SleeperRate:
    """``timed_run``'s ``watch``: the sleeper's tuples/s between the first and last poll."""

    polls: list[tuple[float, int]] = field(default_factory=list)

    def __call__(self, components: dict) -> None:
        self.polls.append((time.perf_counter(), components["sleeper"]["executed"]))

    def rate(self) -> float:
        (t0, n0), (t1, n1) = self.polls[0], self.polls[-1]
        return (n1 - n0) / (t1 - t0) if t1 > t0 else 0.0


@dataclass
class Variant:
    """One line: the fast chain's best words/s, and the sleeper's tuples/s in that run."""

    label: str
    blocking: bool | None  # None: no sleeper branch
    overrides: dict = field(default_factory=dict)
    words_per_sec: float = 0.0
    sleeper_per_sec: float | None = None
    stuck: bool = False  # a StuckSpout instead of the sleeper branch

    def run(self, sentences: list[str], words: int) -> None:
        watch = SleeperRate() if self.blocking is not None else None
        extend = sleeper_branch(self.blocking) if self.blocking is not None else None
        if self.stuck:
            release = sys.modules[RELEASE_MODULE].release
            release.clear()
            extend = add_stuck_spout
            watch = lambda components: components["count"]["executed"] >= words and release.set()  # noqa: E731
        rate = timed_run(sentences, words, False, 1, overrides=self.overrides, extend=extend, watch=watch)[1]
        if rate > self.words_per_sec:
            self.words_per_sec = rate
            self.sleeper_per_sec = watch.rate() if isinstance(watch, SleeperRate) else None

    def line(self, baseline: float) -> str:
        sleeper = "" if self.sleeper_per_sec is None else f"   sleeper {self.sleeper_per_sec:>8,.0f} tuples/s"
        ratio = self.words_per_sec / baseline
        return f"  {self.label:<48}{self.words_per_sec:>10,.0f} words/s  {ratio:5.2f}x{sleeper}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=400_000,
                        help="sentences of the fast chain per run (default 400,000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant; the best counts (default 3)")
    args = parser.parse_args()
    sentences = make_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)

    without = Variant("without the sleeper", None)
    declared = Variant("with the sleeper, declared blocking", True)
    shared = Variant("with the sleeper, not declared blocking", False)
    threads_without = Variant("thread per executor, without the sleeper", None, THREAD_PER_EXECUTOR)
    threads = Variant("thread per executor, with the sleeper", True, THREAD_PER_EXECUTOR)
    stuck = Variant("with a spout stuck in next_tuple, not declared", None, stuck=True)
    variants = [without, declared, shared, threads_without, threads, stuck]
    for _ in range(args.runs):  # alternate, so that all meet the same conditions on this shared machine
        for variant in variants:
            variant.run(sentences, words)

    print(f"word count (spout -> split -> count) beside a bolt sleeping {SLEEP_SECS * 1000:g} ms every "
          f"{SLEEP_EVERY} tuples, one in-process worker, acking off, {len(sentences):,} sentences "
          f"({words:,} words), best of {args.runs} alternating runs (words/s after the first 10%)")
    print(f"  {'':<48}{'':>18}  / without the sleeper")
    for variant in variants:
        print(variant.line(without.words_per_sec))
    print(f"  declared blocking / without the sleeper: {declared.words_per_sec / without.words_per_sec:.2f}x "
          f"(target >= 0.8)")
    print(f"  not declared blocking / without the sleeper: {shared.words_per_sec / without.words_per_sec:.2f}x")
    print(f"  beside a spout stuck in next_tuple (handed off, topology.worker.handoff.secs) / without it: "
          f"{stuck.words_per_sec / without.words_per_sec:.2f}x (target >= 0.8)")
    print("reproduce: python benchmarks/blocking.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
