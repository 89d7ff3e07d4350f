"""StatefulDirectorySpout: a directory's read position in the topology's checkpoints, so that
files -> split -> a stateful count (examples/stateful_wordcount.py's bolts) counts every word of
every file exactly once, after ``kill -9`` of the spout's worker and of the count's too.

The contract (a file archived only once a committed checkpoint says it ended, a rollback seeks
back) is checked on a spout driven by hand; the counts in a LocalCluster, in process and with
worker processes and SQLite state for the crashes.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter

import pytest

from helpers import KILL_9_CONF, kill_9_spout_worker_mid_stream
from squall import LocalCluster, TopologyBuilder
from squall.connectors.files import StatefulDirectorySpout
from squall.testing import committed_state, wait_until
from directory_spouts import dirs, drain, opened, write
from wordcount_state import counts_of, expected_counts, state_conf

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's bolts; workers import it too

pytestmark = pytest.mark.timeout(60)


class FakeState(dict):
    """What the spout uses of a KeyValueState; a copy of it is a committed checkpoint."""

    def put(self, key, value) -> None:
        self[key] = value


def make_files(src, n: int, lines: int) -> Counter:
    """``n`` files of ``lines`` lines of words in ``src``; the count of every word in them."""
    expected: Counter = Counter()
    for i in range(n):
        expected += expected_counts(swc.make_input(str(src / f"f{i}.txt"), lines, seed=i))
    return expected


def build(src, kw, spout=StatefulDirectorySpout, counters: int = 2, **spout_kw):
    """Two spout tasks sharing ``src`` -> split -> count (component ids as test_state's helpers read)."""
    builder = TopologyBuilder()
    builder.set_spout("lines", spout(str(src), **kw, **spout_kw), 2)
    builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", swc.WordCount(), counters).fields_grouping("split", ["word"])
    return builder.create_topology()


def listing(path) -> list[str]:
    return sorted(os.listdir(path)) if os.path.isdir(path) else []


# -- by hand ------------------------------------------------------------------------------------


def test_a_file_is_archived_at_the_commit_saying_it_ended_and_a_rollback_seeks_back(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", [f"line {i}" for i in range(10)])
    spout, out = opened(StatefulDirectorySpout(str(src), records_per_call=4, **kw))
    state = FakeState()
    spout.init_state(state)
    spout.next_tuple()
    assert [v[0] for v, _ in out.emitted] == [f"line {i}" for i in range(4)]
    assert {m for _, m in out.emitted} == {None}  # untracked: checkpoints, not acks
    assert state == {"file": "a.txt", "offset": 4 * 7}
    spout.pre_prepare(0)
    committed = FakeState(state)
    spout.pre_commit(0)
    drain(spout, 3)
    assert state["file"] is None and state["ended"] == {"a.txt": None}
    assert listing(src) == ["a.txt"] and listing(tmp_path / "locks") == ["a.txt.lock"]  # ended, kept
    state = FakeState(committed)
    spout.init_state(state)  # a rollback to checkpoint 0
    del out.emitted[:]
    drain(spout, 3)
    assert [v[0] for v, _ in out.emitted] == [f"line {i}" for i in range(4, 10)]
    spout.pre_prepare(1)
    assert listing(src) == ["a.txt"]  # prepared, not committed: a rollback may still need it
    spout.pre_commit(1)
    assert listing(tmp_path / "archive") == ["a.txt"] and listing(src) == listing(tmp_path / "locks") == []
    assert state["ended"] == {} and spout.metrics["files_done"] == 1


def test_the_same_task_restarted_takes_its_lock_back_and_resumes_at_the_committed_offset(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", [f"a{i}" for i in range(6)])
    write(src / "b.txt", [f"b{i}" for i in range(6)])
    first, _ = opened(StatefulDirectorySpout(str(src), records_per_call=2, **kw), task=3)
    state = FakeState()
    first.init_state(state)
    first.next_tuple()
    committed = FakeState(state)
    drain(first, 4)  # then "dies" with a.txt ended and b.txt begun: neither in the committed state
    assert state["ended"] == {"a.txt": None} and state["file"] == "b.txt"
    other, out_other = opened(StatefulDirectorySpout(str(src), lock_timeout_secs=0, poll_secs=0, **kw), task=4)
    other.init_state(FakeState())
    drain(other, 2)
    assert out_other.emitted == []  # a stateful spout's locks are not taken over by age
    restarted, out = opened(StatefulDirectorySpout(str(src), **kw), task=3)  # lock_timeout_secs: 60
    restarted.init_state(FakeState(committed))
    drain(restarted, 3)
    assert [v[0] for v, _ in out.emitted] == [f"a{i}" for i in range(2, 6)] + [f"b{i}" for i in range(6)]
    assert restarted.metrics["locks_taken_over"] == 1

def test_an_empty_source_is_said_once_and_a_resumed_file_says_nothing(tmp_path, caplog):
    src, kw = dirs(tmp_path)
    spout, out = opened(StatefulDirectorySpout(str(src), glob="*.log", poll_secs=0, **kw))
    spout.init_state(FakeState())
    drain(spout, 10)
    said = [r.getMessage() for r in caplog.records if "nothing to emit" in r.getMessage()]
    assert said == [f"StatefulDirectorySpout t:files:1: no file matches '*.log' in {src}: "
                    f"nothing to emit until one appears"]
    write(src / "a.log", ["x", "y"])
    drain(spout, 3)
    assert [v for v, _ in out.emitted] == [["x"], ["y"]]
    caplog.clear()
    restarted, _ = opened(StatefulDirectorySpout(str(src), glob="*.log", **kw))
    restarted.init_state(FakeState({"file": "a.log", "offset": 2}))  # resumes its file: no scan, no notice
    drain(restarted, 3)
    assert not [r for r in caplog.records if "nothing to emit" in r.getMessage()]


# -- in a LocalCluster ------------------------------------------------------------------------------


def test_counts_of_several_files_are_exact_and_every_file_is_archived(cluster, tmp_path, key):
    src, kw = dirs(tmp_path)
    expected = make_files(src, 6, 300)
    topology, conf = build(src, kw, records_per_call=17), state_conf()
    cluster.submit_topology(key, conf, topology)
    # a file is unlocked just after it is archived
    wait_until(lambda: len(listing(tmp_path / "archive")) == 6 and not listing(tmp_path / "locks"), timeout=30,
               message="every file archived and unlocked")
    assert counts_of(key, topology, conf) == expected  # archived: its whole file is in a committed checkpoint
    assert listing(src) == listing(tmp_path / "bad") == []
    wait_until(lambda: not any(s.get("ended") for s in committed_state(key, topology, "lines", conf).values()),
               timeout=10, interval=0.05, message="the archiving committed")


def test_a_bad_file_goes_to_the_bad_dir_and_the_others_are_counted_exactly(cluster, tmp_path, key):
    src, kw = dirs(tmp_path)
    expected = make_files(src, 5, 200) - expected_counts(str(src / "f2.txt"))
    (src / "f2.txt").write_bytes(b"the cow jumped\n" * 3 + b"\xff not utf-8\nnever read\n")
    expected += Counter({"the": 3, "cow": 3, "jumped": 3})  # emitted before the bad line, as by DirectorySpout
    topology, conf = build(src, kw), state_conf()
    cluster.submit_topology(key, conf, topology)
    wait_until(lambda: len(listing(tmp_path / "archive")) == 4 and len(listing(tmp_path / "bad")) == 2,
               timeout=30, message="every file archived or moved to the bad dir")
    assert listing(tmp_path / "bad") == ["f2.txt", "f2.txt.error"]
    # the spout's thread creates the .error file, then writes the reason into it
    wait_until(lambda: "UnicodeDecodeError" in (tmp_path / "bad" / "f2.txt.error").read_text(), timeout=10,
               message="the bad file's reason written")
    assert listing(tmp_path / "archive") == ["f0.txt", "f1.txt", "f3.txt", "f4.txt"]
    assert counts_of(key, topology, conf) == expected


# -- kill -9 ----------------------------------------------------------------------------------------


class PacedSpout(StatefulDirectorySpout):
    """At most ``lines_per_sec`` records a second per task (from its start), so that the kills
    land mid-stream."""

    def __init__(self, *args, lines_per_sec: float, **kw) -> None:
        super().__init__(*args, **kw)
        self.lines_per_sec = lines_per_sec

    def open(self, conf, context, collector) -> None:
        super().open(conf, context, collector)
        self.started = time.monotonic()

    def next_tuple(self) -> None:
        allowed = int((time.monotonic() - self.started) * self.lines_per_sec) - self.metrics["records_read"]
        self.records_per_call = min(allowed, 100)
        if allowed > 0:
            super().next_tuple()


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_kill_9_of_the_spout_and_count_workers_leaves_exact_counts_and_every_file_archived(tmp_path):
    src, kw = dirs(tmp_path)
    files = 10
    expected = make_files(src, files, 1200)
    topology = build(src, kw, spout=PacedSpout, counters=1, lines_per_sec=800)
    conf = {**KILL_9_CONF, "topology.workers": 3, "supervisor.worker.start.timeout.secs": 20,
            "topology.state.checkpoint.interval.ms": 200, "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state")}}

    def archived() -> int:
        return len(listing(tmp_path / "archive"))

    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("kill9", conf, topology)
        layout = [{e["component"] for e in w["executors"]} for w in cluster.get_topology_info("kill9")["workers"]]
        # the worker of one spout task (and of the checkpoint spout), then the count's, which runs no
        # spout task: the other spout task goes through both rollbacks in its running worker
        assert [sorted(c & {"lines", "count"}) for c in layout] == [["lines"], ["count"], ["lines"]]
        kill_9_spout_worker_mid_stream(cluster, "kill9", archived, files, spout="lines")
        before = archived()  # then the count's worker, a fifth of what is left later
        kill_9_spout_worker_mid_stream(cluster, "kill9", lambda: archived() - before, files - before, spout="count")
        wait_until(lambda: archived() == files and not listing(tmp_path / "locks"), timeout=60,
                   message="every file archived and unlocked")
        assert counts_of("kill9", topology, conf) == expected
        assert listing(src) == listing(tmp_path / "bad") == []
