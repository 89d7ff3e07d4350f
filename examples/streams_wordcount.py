"""The word count that survives a crash (examples/stateful_wordcount.py), written with the
Streams API: a stateful spout and ``update_state_by_key``, effectively once.

    lines (stateful spout) -> flat_map(split) -> map_to_pair((word, 1))     [bolt1: fused]
                           --fields(key)--> update_state_by_key(add)        [bolt2: stateful]

The counts live in Squall's checkpointed state, written in the same checkpoints as the spout's
byte offset: kill a worker with ``kill -9`` while it runs and the final counts are those of a
run without the crash.

    squall run examples/streams_wordcount.py --duration 20
    python examples/streams_wordcount.py          # the committed counts, top 10

The input is $SQUALL_WORDS_FILE, or a file of 200,000 lines made once under /tmp.
"""

from __future__ import annotations

import operator
import os
import sys
import time
from typing import Any

from squall.api.spout import Spout
from squall.api.storm_topology import StormTopology
from squall.streams import StreamBuilder

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stateful_wordcount import FileSpout, default_input  # noqa: E402 - the example beside this one

#: where ``python examples/streams_wordcount.py`` reads the counts: the stateful bolt
COUNTS = "bolt2"


class Add:
    """``update_state_by_key``'s update: a word's count plus one occurrence; ``secs`` of work
    each (the tests slow the count down to keep a backlog in front of it)."""

    def __init__(self, secs: float = 0.0) -> None:
        self.secs = secs

    def __call__(self, count: int, occurrences: int) -> int:
        if self.secs:
            time.sleep(self.secs)  # the component's slowness (a backlog), not a wait
        return count + occurrences


def split(line: str) -> list[str]:
    return line.split()


def one(word: str) -> tuple[str, int]:
    return word, 1


def build(spout: Spout, parallelism: int = 2, secs_per_word: float = 0.0,
          counter: str = "update_state_by_key") -> StormTopology:
    """The word count; ``counter``: ``update_state_by_key``, or ``aggregate_by_key`` (whose
    running counts are checkpointed too, the spout keeping its position)."""
    builder = StreamBuilder()
    pairs = builder.new_stream(spout, parallelism=parallelism).flat_map(split).map_to_pair(one)
    if counter == "aggregate_by_key":
        pairs.aggregate_by_key(0, Add(secs_per_word), operator.add)
    else:
        pairs.update_state_by_key(0, Add(secs_per_word))
    return builder.build()


topology = build(FileSpout(default_input()), parallelism=1)


if __name__ == "__main__":
    from collections import Counter

    from squall.api.config import squall_home
    from squall.testing import committed_state

    name = sys.argv[1] if len(sys.argv) > 1 else "streams_wordcount"
    path = str(squall_home() / "state" / name)  # where squall run keeps it by default
    conf = {"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": path}}
    counts: Counter[Any] = Counter()
    for task in committed_state(name, topology, COUNTS, conf).values():
        counts.update(task)
    print(f"committed: {sum(counts.values())} words; top 10: {counts.most_common(10)}")
