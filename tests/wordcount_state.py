"""What the state tests share: examples/stateful_wordcount.py (``swc``: a stateful file spout,
split, a stateful count), the counts a file should give, and the counts and offsets a run
committed (read with ``squall.testing.committed_state``).

(Test modules import this, not each other.)"""

from __future__ import annotations

import os
import sys
from collections import Counter

from squall import Config
from squall.testing import committed_state, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's components (workers import it too)

__all__ = ["counts_of", "expected_counts", "spout_done", "state_conf", "swc", "wait_for_commit_of_all"]


def expected_counts(path: str) -> Counter:
    with open(path) as f:
        return Counter(w for line in f for w in line.split())


def counts_of(name: str, topology, conf) -> Counter:
    counts: Counter = Counter()
    for task_counts in committed_state(name, topology, "count", conf).values():
        counts.update(task_counts)
    return counts


def spout_done(name: str, topology, conf, path: str) -> bool:
    """Whether the spout's committed offset is the end of the file."""
    states = committed_state(name, topology, "lines", conf)
    return sum(s.get("offset", 0) for s in states.values()) == os.path.getsize(path)


def wait_for_commit_of_all(name, topology, conf, path, timeout=30.0):
    wait_until(lambda: spout_done(name, topology, conf, path), timeout=timeout, interval=0.05,
               message="the whole file committed")


def state_conf(**extra) -> Config:
    """A checkpoint every 100 ms, tuples timed out after 5 s, and ``extra``."""
    c = Config()
    c.update({"topology.state.checkpoint.interval.ms": 100, "topology.message.timeout.secs": 5})
    c.update(extra)
    return c
