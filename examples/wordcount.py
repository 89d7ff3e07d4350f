"""Word count: the topology of Storm's storm-starter, with guaranteed processing.

    sentences (spout) --shuffle--> split --fields(word)--> count --global--> report

* ``SentenceSpout`` is reliable: every sentence carries a message id, and a sentence that
  fails or times out is emitted again.
* ``count`` keeps running totals per word (fields grouping: a word always reaches the
  same task) and, on each tick tuple, sends the totals that changed to ``report``.
* ``report`` prints the top words on its own ticks.

Run it:  squall run examples/wordcount.py --duration 10
"""

from __future__ import annotations

import random
import sys
from collections import Counter

from squall import BasicBolt, Bolt, Config, Spout, TopologyBuilder

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
]


class SentenceSpout(Spout):
    """Random sentences, each with a message id; failed ones are replayed.

    ``limit`` stops it after that many sentences (``is_exhausted`` then says so).
    """

    outputs = ["sentence"]

    def __init__(self, sentences: list[str] | None = None, limit: int | None = None, seed: int | None = None):
        self.sentences = sentences or SENTENCES
        self.limit = limit
        self.seed = seed

    def open(self, conf, context, collector):
        self.collector = collector
        self.rng = random.Random(None if self.seed is None else self.seed + context.get_this_task_id())
        tasks = context.get_component_tasks(context.get_this_component_id())
        # share the limit among the spout's tasks
        self.remaining = None if self.limit is None else len(range(context.get_this_task_index(), self.limit,
                                                                     len(tasks)))
        self.next_id = 0
        self.pending: dict[int, str] = {}
        self.replay: list[int] = []

    def next_tuple(self):
        if self.replay:
            msg_id = self.replay.pop()
        elif self.remaining is None or self.remaining > 0:
            if self.remaining is not None:
                self.remaining -= 1
            msg_id, self.next_id = self.next_id, self.next_id + 1
            self.pending[msg_id] = self.rng.choice(self.sentences)
        else:
            return
        self.collector.emit([self.pending[msg_id]], msg_id=msg_id)

    def ack(self, msg_id):
        del self.pending[msg_id]

    def fail(self, msg_id):
        self.replay.append(msg_id)

    def is_exhausted(self):
        return self.remaining == 0 and not self.pending


class SplitSentence(BasicBolt):
    """Emits one tuple per word, anchored to the sentence."""

    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup.values[0].split():
            collector.emit([word])


class WordCount(BasicBolt):
    """Running totals per word; on each tick, emits the totals that changed."""

    outputs = ["word", "count"]

    def __init__(self, report_every_secs: float = 2.0):
        self.report_every_secs = report_every_secs

    def get_component_configuration(self):
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.report_every_secs}

    def prepare(self, conf, context):
        self.counts: Counter[str] = Counter()
        self.changed: set[str] = set()

    def execute(self, tup, collector):
        if tup.is_tick():
            for word in self.changed:
                collector.emit([word, self.counts[word]])
            self.changed.clear()
            return
        word = tup.values[0]
        self.counts[word] += 1
        self.changed.add(word)


class TopWordsReport(Bolt):
    """Merges the counters' totals and prints the top words on each tick."""

    def __init__(self, top: int = 5, every_secs: float = 5.0, out=None):
        self.top = top
        self.every_secs = every_secs
        self.out = out

    def get_component_configuration(self):
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.every_secs}

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.totals: dict[str, int] = {}

    def execute(self, tup):
        if tup.is_tick():
            self.print_top()
        else:
            self.totals[tup["word"]] = tup["count"]
        self.collector.ack(tup)

    def print_top(self):
        top = sorted(self.totals.items(), key=lambda kv: (-kv[1], kv[0]))[: self.top]
        print("top words: " + ", ".join(f"{w}={c}" for w, c in top), file=self.out or sys.stdout, flush=True)

    def cleanup(self):
        self.print_top()


def build(limit: int | None = None, spouts: int = 2, seed: int | None = None):
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(limit=limit, seed=seed), spouts)
    builder.set_bolt("split", SplitSentence(), 2).set_num_tasks(4).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
    builder.set_bolt("report", TopWordsReport()).global_grouping("count")
    return builder.create_topology()


topology = build()
config = Config().set_num_workers(2).set_max_spout_pending(1000)
