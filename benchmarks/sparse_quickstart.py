"""The streamparse quickstart word count, natively, over Storm's multilang protocol, and in Squall's API.

``sparse quickstart wordcount`` makes the project (in a temporary directory); its topology,
unchanged, runs three ways in the same run, each on worker processes
(``LocalCluster(processes=True)``, as ``squall run``):

* natively: the pystorm components run in the workers (squall.streamparse);
* over multilang with JSON, and with msgpack: each component task is a
  ``python -m streamparse.run`` subprocess, as on Storm (squall.multilang).

A fourth variant, the baseline of the native one, is the same topology written in Squall's
API (``squall.Spout``/``squall.BasicBolt``/``TopologyBuilder``, below): the same components,
ids, parallelism, grouping and config, doing the same work per tuple (the spout cycles over
the quickstart's words; the bolt increments its ``Counter`` and total, logs every 1,000 words
at INFO, emits the word and its count). Targets: native / multilang JSON >= 50x; native /
Squall's API >= 0.8.

The quickstart's spout never ends: each variant runs ``--warmup`` seconds, then the words its
count bolt executed in the next ``--seconds`` give its tuples/s. The best of ``--runs``, the
variants alternating.

Reproduce:  python benchmarks/sparse_quickstart.py [--seconds 5] [--runs 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from itertools import cycle

from squall import (
    BasicBolt, BasicOutputCollector, LocalCluster, Spout, SpoutOutputCollector, StormTopology, TopologyBuilder,
    TopologyContext, Tuple,
)
from squall.streamparse.project import project_config
from squall.streamparse.topology import from_streamparse

# what the quickstart's WordSpout cycles over (its src/spouts/words.py; checked in measure)
WORDS = ["dog", "cat", "zebra", "elephant"]
API = "Squall's API"  # the variant's label


class WordSpout(Spout):
    """The quickstart's WordSpout in Squall's API: the words, over and over, without message
    ids."""

    outputs = ["word"]

    def open(self, conf: dict, context: TopologyContext, collector: SpoutOutputCollector) -> None:
        self.collector = collector
        self.words = cycle(WORDS)

    def next_tuple(self) -> None:
        self.collector.emit([next(self.words)])


class WordCountBolt(BasicBolt):
    """The quickstart's WordCountBolt in Squall's API: a BasicBolt anchors its emits to the
    input and acks it, as pystorm's ``auto_anchor``/``auto_ack`` do; the logger is set up as
    pystorm sets up a component's (its own name, level INFO)."""

    outputs = ["word", "count"]

    def prepare(self, conf: dict, context: TopologyContext) -> None:
        self.counter: Counter[str] = Counter()
        self.pid = os.getpid()
        self.total = 0
        self.logger = logging.getLogger(f"{__name__}.{context.get_this_component_id()}")
        self.logger.setLevel(logging.INFO)

    def _increment(self, word: str, inc_by: int) -> None:
        self.counter[word] += inc_by
        self.total += inc_by

    def execute(self, tup: Tuple, collector: BasicOutputCollector) -> None:
        word = tup.values[0]
        self._increment(word, 10 if word == "dog" else 1)
        if self.total % 1000 == 0:
            self.logger.info(f"counted [{self.total:,}] words [pid={self.pid}]")
        collector.emit([word, self.counter[word]])


def squall_api_topology() -> StormTopology:
    """The quickstart topology (``word_spout`` -> ``count_bolt`` x2 on fields grouping) built
    with TopologyBuilder."""
    builder = TopologyBuilder()
    builder.set_spout("word_spout", WordSpout(), 1)
    builder.set_bolt("count_bolt", WordCountBolt(), 2).fields_grouping("word_spout", ["word"])
    return builder.create_topology()


def quickstart(directory: str) -> str:
    sparse = os.path.join(os.path.dirname(sys.executable), "sparse")
    subprocess.run([sparse, "quickstart", "wordcount"], cwd=directory, check=True, capture_output=True,
                   env={**os.environ, "LEIN_ROOT": "1"})
    return os.path.join(directory, "wordcount")


def words_per_second(topology, config: dict, warmup: float, seconds: float) -> float:
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("wordcount", {**config, "worker.heartbeat.frequency.secs": 0.1,
                                              "supervisor.slots.ports": []}, topology)
        executed = lambda: cluster.get_topology_info("wordcount")["components"]["count_bolt"]["executed"]  # noqa: E731
        time.sleep(warmup)
        start, t0 = executed(), time.monotonic()
        time.sleep(seconds)
        return (executed() - start) / (time.monotonic() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5, help="measured seconds of each variant")
    parser.add_argument("--warmup", type=float, default=2, help="seconds before measuring")
    parser.add_argument("--runs", type=int, default=2, help="runs of each variant; the best counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="squall-sparse-") as directory:
        measure(quickstart(directory), args)
    print("reproduce: python benchmarks/sparse_quickstart.py " + " ".join(sys.argv[1:]))


def measure(project: str, args: argparse.Namespace) -> None:
    sys.path.insert(0, os.path.join(project, "src"))  # as sparse run (and squall run) have it
    spec = importlib.util.spec_from_file_location("quickstart_topology", os.path.join(project, "topologies",
                                                                                       "wordcount.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with open(os.path.join(project, "src", "spouts", "words.py")) as f:
        if json.dumps(WORDS) not in f.read():
            raise SystemExit(f"the quickstart's WordSpout no longer cycles over {WORDS}: update WordSpout")
    native = from_streamparse(module.WordCount, project_config(project))
    variants = {
        "native": native,
        API: (squall_api_topology(), native[1]),
        "multilang, JSON": from_streamparse(module.WordCount, {"serializer": "json"}, multilang=True),
        "multilang, msgpack": from_streamparse(module.WordCount, {"serializer": "msgpack"}, multilang=True),
    }
    best = dict.fromkeys(variants, 0.0)
    for _ in range(args.runs):  # alternate, so that all meet the same conditions on this shared machine
        for label, (topology, config) in variants.items():
            best[label] = max(best[label], words_per_second(topology, config, args.warmup, args.seconds))
    print(f"streamparse quickstart word count (spout -> count bolt x2, fields grouping), worker processes, "
          f"best of {args.runs} x {args.seconds:g} s; load average {os.getloadavg()[0]:.1f}")
    for label, rate in best.items():
        print(f"  {label:<20} {rate:>10,.0f} words/s   native / this: {best['native'] / rate:6.1f}x")
    print(f"  native / multilang JSON: {best['native'] / best['multilang, JSON']:.1f}x (target >= 50x)")
    print(f"  native / {API}: {best['native'] / best[API]:.2f}x (target >= 0.8x)")


if __name__ == "__main__":
    main()
