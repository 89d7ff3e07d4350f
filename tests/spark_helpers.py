"""What the Spark tests share (test_spark, test_spark_clusters, test_hosts): a config for
topologies on Spark, their workers, a word count run to its end, and the word count module of a
user's project (``WORDLIB``) for ``squall submit``.

(Test modules import this, not each other.)"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import TYPE_CHECKING

from process_topologies import component, wordcount
from squall import Config
from squall.testing import wait_until

if TYPE_CHECKING:
    from squall.cluster.spark import SparkCluster


def sconf(extra: dict | None = None, workers: int = 2) -> Config:
    """Frequent heartbeats, short timeouts and restart backoffs for tests."""
    conf = Config()
    conf.update({
        "topology.workers": workers,
        "worker.heartbeat.frequency.secs": 0.2,
        "topology.message.timeout.secs": 3,
        "supervisor.worker.timeout.secs": 10,
        "supervisor.worker.start.timeout.secs": 20,
        "topology.spark.restart.backoff.secs": 0.2,
    })
    conf.update(extra or {})
    return conf


def spark_workers(cluster: SparkCluster, name: str) -> list[dict]:
    return cluster.get_topology_info(name)["workers"]


def run_wordcount(cluster, lines, out_dir, conf) -> Counter:
    cluster.submit_topology("wc", conf, wordcount(lines, str(out_dir)))
    wait_until(lambda: component(cluster, "wc", "sentences")["acked"] == len(lines), timeout=20,
               message="every sentence acked")
    cluster.kill_topology("wc", wait_secs=0)  # the count tasks write their totals at cleanup
    written = [json.loads((out_dir / name).read_text()) for name in sorted(os.listdir(out_dir))
               if name.startswith("count-")]
    assert len(written) == 2
    first, second = (Counter(w["counts"]) for w in written)
    assert not set(first) & set(second), "fields grouping sent a word to both count tasks"
    return first + second


# the module of a user's project next to its topology file, shipped to the executors by `squall submit`
WORDLIB = """
import collections, json, os
from squall import BasicBolt, Spout

class Lines(Spout):
    outputs = ["line"]

    def __init__(self, lines):
        self.lines = lines

    def open(self, conf, context, collector):
        self.collector, self.todo, self.pending = collector, dict(enumerate(self.lines)), {}

    def next_tuple(self):
        if self.todo:
            i, line = self.todo.popitem()
            self.pending[i] = line
            self.collector.emit([line], msg_id=i)

    def ack(self, i):
        del self.pending[i]

    def fail(self, i):
        self.todo[i] = self.pending.pop(i)

class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup.values[0].split():
            collector.emit([word])

class Count(BasicBolt):
    def __init__(self, out):
        self.out = out

    def prepare(self, conf, context):
        import shipped_with_py_files  # imported in the workers only: it travels with --py-files
        self.counts = shipped_with_py_files.new_counter()
        self.task = context.get_this_task_id()

    def execute(self, tup, collector):
        self.counts[tup.values[0]] += 1

    def cleanup(self):
        with open(os.path.join(self.out, f"counts-{self.task}.json"), "w") as f:
            json.dump(self.counts, f)
"""
