"""Word counts that survive a crash: a stateful spout and a stateful bolt, effectively once.

    lines (stateful spout) --shuffle--> split --fields(word)--> count (stateful bolt)

* ``lines`` reads a text file and keeps its byte offset in its state;
* ``count`` keeps the running count of each word in its state.

Both states are written in the same checkpoints (every second). Kill a worker with
``kill -9`` while it runs: the supervisor restarts it, every component returns to the last
checkpoint, the spout seeks back to the offset committed with the counts, and the final counts
are exactly those of a run without the crash. Stop it and run it again under the same name:
it resumes from the last commit.

Run it (the state goes to $SQUALL_HOME/state/stateful_wordcount, SQUALL_HOME defaulting to
~/.squall, unless --checkpoint-dir says):

    squall run examples/stateful_wordcount.py --duration 20
    python examples/stateful_wordcount.py          # the committed counts, top 10

The input is $SQUALL_WORDS_FILE, or a file of 200,000 lines made once under /tmp.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from typing import Any

from squall import BasicBolt, Config, TopologyBuilder
from squall.api.stateful import StatefulBolt, StatefulSpout

WORDS = ("the cow jumped over the moon an apple a day keeps the doctor away four score and seven years ago "
         "snow white and the seven dwarfs i am at two with nature").split()


def make_input(path: str, lines: int, seed: int = 7) -> str:
    """Write ``lines`` lines of random words to ``path`` (same seed, same file)."""
    rng = random.Random(seed)
    temp = f"{path}.{os.getpid()}.tmp"  # processes making the same file at once (tests two at a time) each write their own
    with open(temp, "w") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + "\n")
    os.replace(temp, path)
    return path


def default_input() -> str:
    path = os.environ.get("SQUALL_WORDS_FILE") or os.path.join(tempfile.gettempdir(), "squall-words-200k.txt")
    return path if os.path.exists(path) else make_input(path, 200_000)


class FileSpout(StatefulSpout):
    """The lines of a file, from the byte offset its state holds; untracked tuples (its
    checkpoints, not replays, make it reliable). ``lines_per_sec`` paces it (for demos)."""

    outputs = ["line"]

    def __init__(self, path: str, lines_per_sec: float | None = None) -> None:
        self.path = path
        self.lines_per_sec = lines_per_sec

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.file = open(self.path, "rb")  # binary: an offset is a byte count
        self.started, self.sent = time.monotonic(), 0

    def init_state(self, state: Any) -> None:
        self.state = state
        self.offset = state.get("offset", 0)
        self.file.seek(self.offset)

    def next_tuple(self) -> None:
        budget = 100
        if self.lines_per_sec is not None:
            budget = min(budget, int((time.monotonic() - self.started) * self.lines_per_sec) - self.sent)
        self.sent += max(budget, 0)
        for _ in range(budget):
            line = self.file.readline()
            if not line:
                return
            self.offset += len(line)
            self.state.put("offset", self.offset)
            self.collector.emit([line.decode().rstrip("\n")])

    def is_exhausted(self) -> bool:
        return self.file.tell() >= os.fstat(self.file.fileno()).st_size

    def close(self) -> None:
        self.file.close()


class SplitLine(BasicBolt):
    outputs = ["word"]

    def execute(self, tup: Any, collector: Any) -> None:
        for word in tup.values[0].split():
            collector.emit([word])


class WordCount(StatefulBolt):
    """Running counts in the state; each input acked (acks reach a stateful spout's trees at once)."""

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.counts = state

    def execute(self, tup: Any) -> None:
        word = tup.values[0]
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tup)


class RunningCount(WordCount):
    """:class:`WordCount` emitting ``(word, count)`` at each change, anchored to the input (a
    sink downstream sees ``(word, n)`` for the n-th occurrence of ``word``)."""

    outputs = ["word", "count"]

    def execute(self, tup: Any) -> None:
        word = tup.values[0]
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        self.collector.emit([word, count], anchors=tup)
        self.collector.ack(tup)


def build(path: str, splitters: int = 2, counters: int = 2, lines_per_sec: float | None = None) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("lines", FileSpout(path, lines_per_sec))
    builder.set_bolt("split", SplitLine(), splitters).shuffle_grouping("lines")
    builder.set_bolt("count", WordCount(), counters).fields_grouping("split", ["word"])
    return builder.create_topology()


topology = build(default_input())
config = Config().set_num_workers(2)

if __name__ == "__main__":
    from collections import Counter

    from squall.api.config import squall_home
    from squall.testing import committed_state

    name = sys.argv[1] if len(sys.argv) > 1 else "stateful_wordcount"
    path = str(squall_home() / "state" / name)  # where squall run keeps it by default
    conf = {**config, "topology.state.provider": "sqlite", "topology.state.provider.config": {"path": path}}
    counts: Counter = Counter()
    for task_counts in committed_state(name, topology, "count", conf).values():
        counts.update(task_counts)
    offset = sum(s.get("offset", 0) for s in committed_state(name, topology, "lines", conf).values())
    print(f"committed: {sum(counts.values())} words, input offset {offset}; top 10: {counts.most_common(10)}")
