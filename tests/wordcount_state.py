"""What the state tests share: examples/stateful_wordcount.py (``swc``: a stateful file spout,
split, a stateful count), its input (the ``words`` fixture) and the counts it should give, the
counts and offsets a run committed (read with ``squall.testing.committed_state``), and the config
of the crash tests (``crash_conf``).

(Test modules import this, not each other.)"""

from __future__ import annotations

import os
import sys
from collections import Counter

import pytest

from squall import Config
from squall.testing import committed_state, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's components (workers import it too)

__all__ = ["committed_offset", "counts_of", "crash_conf", "expected_counts", "spout_done", "state_conf", "swc",
           "wait_for_commit_of_all", "wait_for_offset", "words"]

LINES = 24_000  # the lines of the ``words`` fixture's file


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


def committed_offset(name, topology, conf) -> int:
    return sum(s.get("offset", 0) for s in committed_state(name, topology, "lines", conf).values())


def wait_for_offset(name, topology, conf, fraction: float, size: int, timeout: float = 60) -> None:
    wait_until(lambda: committed_offset(name, topology, conf) >= fraction * size, timeout=timeout, interval=0.05,
               message=f"{fraction:.0%} of the file committed")


@pytest.fixture
def words(tmp_path):
    """The input of a crash test: (its path, its size, its word counts)."""
    path = swc.make_input(str(tmp_path / "words.txt"), LINES)
    return path, os.path.getsize(path), expected_counts(path)


def crash_conf(state_dir, **extra) -> Config:
    """SQLite state in ``state_dir``, or (None) the provider that ``extra`` names."""
    conf = Config()
    if state_dir is not None:
        conf.update({"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(state_dir)}})
    conf.update({
        "topology.workers": 3,
        "topology.state.checkpoint.interval.ms": 200,
        "topology.message.timeout.secs": 5,
        "worker.heartbeat.frequency.secs": 0.2,
        "supervisor.worker.timeout.secs": 5,
        "supervisor.worker.start.timeout.secs": 20,
    })
    conf.update(extra)
    return conf
