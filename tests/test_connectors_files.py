"""The file connectors: DirectorySpout (Storm's HdfsSpout on a local directory) and FileBolt
(Storm's HdfsBolt).

The spout's fine-grained contract (what is committed, when a file is archived, lock takeover)
is checked on a spout driven by hand with a recording collector; delivery, sharing a directory
between tasks, replays and kill -9 run in a LocalCluster. Components live at module level so
the copies in the workers share the recording stores of ``helpers``.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import sys
from collections import Counter

import pytest

from directory_spouts import FakeCollector, FakeContext, dirs, drain, opened, write
from helpers import free_ports, logged, record, stays
from squall import Bolt, Config, LocalCluster, TopologyBuilder
from squall.connectors import MissingExtraError
from squall.connectors.files import DirectorySpout, FileBolt, SizeRotation, TimeRotation
from squall.api.errors import TopologySetupError
from squall.testing import FeederSpout, wait_until

pytestmark = pytest.mark.timeout(60)


# -- fakes for driving components by hand ------------------------------------------------------------


class FakeTuple:
    def __init__(self, fields, values, tick=False):
        self.fields, self.values, self._tick = list(fields), list(values), tick

    def is_tick(self):
        return self._tick

    def get_value_by_field(self, name):
        return self.values[self.fields.index(name)]

    def __repr__(self):
        return f"FakeTuple({self.values})"


def last_lock_entry(tmp_path, name):
    with open(tmp_path / "locks" / f"{name}.lock") as f:
        return json.loads(f.read().splitlines()[-1])


# -- DirectorySpout, by hand ------------------------------------------------------------------------


def test_file_archived_only_when_every_tuple_is_acked_and_commit_never_passes_an_unacked_record(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", [f"line {i}" for i in range(10)])
    spout, out = opened(DirectorySpout(str(src), commit_frequency_count=1, **kw))
    drain(spout, 3)
    assert [v[0] for v, _ in out.emitted] == [f"line {i}" for i in range(10)]
    assert [m for _, m in out.emitted] == [("a.txt", 7 * i) for i in range(10)]  # (file, byte offset)
    for _, msg_id in out.emitted[1:]:
        spout.ack(msg_id)
    drain(spout, 3)
    assert os.listdir(src) == ["a.txt"] and not os.path.exists(tmp_path / "archive" / "a.txt")
    assert last_lock_entry(tmp_path, "a.txt")["offset"] == 0  # line 0 is not acked: nothing beyond it
    spout.ack(out.emitted[0][1])
    drain(spout, 1)
    assert os.listdir(tmp_path / "archive") == ["a.txt"] and os.listdir(src) == []
    assert os.listdir(tmp_path / "locks") == []
    assert spout.metrics["records_read"] == 10 and spout.metrics["files_done"] == 1


def test_commit_records_the_lowest_unacked_offset(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", [f"line {i}" for i in range(10)])
    spout, out = opened(DirectorySpout(str(src), commit_frequency_count=1, **kw))
    drain(spout, 1)
    for _, msg_id in out.emitted[:4] + out.emitted[5:]:
        spout.ack(msg_id)
    drain(spout, 1)
    assert last_lock_entry(tmp_path, "a.txt")["offset"] == out.emitted[4][1][1] == 28


def test_failed_tuple_is_re_emitted_with_its_message_id(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.jsonl", [json.dumps({"n": i}) for i in range(3)])
    spout, out = opened(DirectorySpout(str(src), reader="jsonl", **kw))
    drain(spout, 1)
    assert [v for v, _ in out.emitted] == [[{"n": 0}], [{"n": 1}], [{"n": 2}]]
    spout.fail(out.emitted[1][1])
    spout.ack(out.emitted[0][1])
    spout.ack(out.emitted[2][1])
    drain(spout, 1)
    assert out.emitted[3] == ([{"n": 1}], ("a.jsonl", out.emitted[1][1][1]))
    assert os.listdir(src) == ["a.jsonl"]
    spout.ack(out.emitted[3][1])
    drain(spout, 1)
    assert os.listdir(tmp_path / "archive") == ["a.jsonl"]
    assert spout.metrics["replayed"] == 1


def test_two_spouts_never_claim_the_same_file(tmp_path):
    src, kw = dirs(tmp_path)
    for n in range(4):
        write(src / f"f{n}.txt", [f"{n}-{i}" for i in range(5)])
    a, out_a = opened(DirectorySpout(str(src), poll_secs=0, **kw), task=1)
    b, out_b = opened(DirectorySpout(str(src), poll_secs=0, **kw), task=2)
    for _ in range(20):
        for spout, out in ((a, out_a), (b, out_b)):
            spout.next_tuple()
            for _, msg_id in out.emitted:
                spout.ack(msg_id)
    lines = [v[0] for v, _ in out_a.emitted + out_b.emitted]
    assert sorted(lines) == sorted(f"{n}-{i}" for n in range(4) for i in range(5))  # each once
    assert {m[0] for _, m in out_a.emitted}.isdisjoint({m[0] for _, m in out_b.emitted})
    assert sorted(os.listdir(tmp_path / "archive")) == [f"f{n}.txt" for n in range(4)]


def test_abandoned_lock_is_taken_over_from_the_committed_offset(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", [f"line {i}" for i in range(10)])
    dead, out = opened(DirectorySpout(str(src), commit_frequency_count=1, lock_timeout_secs=0.3, **kw), task=1)
    drain(dead, 1)
    for _, msg_id in out.emitted[:3]:
        dead.ack(msg_id)
    drain(dead, 1)  # commits offset of line 3, then "dies" (is never called again)
    assert last_lock_entry(tmp_path, "a.txt")["offset"] == 21
    other, out2 = opened(DirectorySpout(str(src), lock_timeout_secs=0.3, poll_secs=0, **kw), task=2)
    other.next_tuple()
    assert out2.emitted == []  # the lock is fresh: not taken over
    wait_until(lambda: (other.next_tuple(), out2.emitted)[1], timeout=5, message="lock taken over")
    assert [v[0] for v, _ in out2.emitted] == [f"line {i}" for i in range(3, 10)]
    assert other.metrics["locks_taken_over"] == 1
    for _, msg_id in out2.emitted:
        other.ack(msg_id)
    drain(other, 1)
    assert os.listdir(tmp_path / "archive") == ["a.txt"]
    # the dead owner, were it only slow, finds its lock lost and leaves the file alone
    dead.ack(out.emitted[3][1])
    dead.commit_frequency_count = 0
    drain(dead, 2)
    assert dead.metrics["locks_lost"] == 1 and not os.path.exists(tmp_path / "archive" / "a.txt.1")


def test_a_live_owner_heartbeats_its_lock_and_keeps_it(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", ["only"])
    owner, out = opened(DirectorySpout(str(src), lock_timeout_secs=0.3, **kw), task=1)
    other, out2 = opened(DirectorySpout(str(src), lock_timeout_secs=0.3, poll_secs=0, **kw), task=2)

    def both_polled():
        owner.next_tuple()  # its tuple stays un-acked: it holds the file, heartbeating
        other.next_tuple()
        return out2.emitted == []

    # a heartbeat against a lock timeout, both in wall-clock time (the lock file's age): only time shows it
    stays(both_polled, secs=1.0, what="the lock kept by its live owner")
    assert len(out.emitted) == 1 and other.metrics["locks_taken_over"] == 0


def test_the_same_task_restarted_resumes_its_own_lock_at_once(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", [f"line {i}" for i in range(6)])
    first, out = opened(DirectorySpout(str(src), commit_frequency_count=1, **kw), task=7)
    drain(first, 1)
    first.ack(out.emitted[0][1])
    drain(first, 1)
    restarted, out2 = opened(DirectorySpout(str(src), **kw), task=7)  # lock_timeout_secs: 60
    restarted.next_tuple()
    assert [v[0] for v, _ in out2.emitted] == [f"line {i}" for i in range(1, 6)]


@pytest.mark.parametrize("reader,content,reason", [
    ("jsonl", b'{"a": 1}\n{"a": \n{"a": 3}\n', "bad JSON at byte 9"),
    ("text", b"fine\n\xff\xfe not utf-8\n", "UnicodeDecodeError"),
    ("csv", b"x,y\n1,2\n1,2,3\n", "has 3 values, the header 2"),
])
def test_bad_file_goes_to_the_bad_dir_with_its_reason(tmp_path, reader, content, reason, caplog):
    src, kw = dirs(tmp_path)
    (src / "bad.in").write_bytes(content)
    write(src / "good.in", ["x,y", "5,6"] if reader == "csv" else ['{"b": 2}'])
    spout, out = opened(DirectorySpout(str(src), reader=reader, poll_secs=0, **kw))
    for _ in range(5):
        spout.next_tuple()
        for _, msg_id in out.emitted:
            spout.ack(msg_id)
    assert sorted(os.listdir(tmp_path / "bad")) == ["bad.in", "bad.in.error"]
    assert reason in (tmp_path / "bad" / "bad.in.error").read_text()
    assert (tmp_path / "bad" / "bad.in").read_bytes() == content  # the whole file, untouched
    assert os.listdir(tmp_path / "archive") == ["good.in"]
    assert any("bad.in" in str(e) and reason in str(e) for e in out.errors)
    assert any("bad.in" in r.getMessage() for r in caplog.records)
    assert spout.metrics["bad_files"] == 1


def test_csv_emits_the_declared_fields_from_the_header(tmp_path):
    src, kw = dirs(tmp_path)
    (src / "a.csv").write_text('name,age,note\nann,31,"two\nlines"\nbob,42,x\n')
    spout, out = opened(DirectorySpout(str(src), reader="csv", fields=["age", "name"], **kw))
    drain(spout, 1)
    assert [v for v, _ in out.emitted] == [["31", "ann"], ["42", "bob"]]
    as_dicts, out2 = opened(DirectorySpout(str(src), reader="csv", lock_dir=str(tmp_path / "l2"),
                                           archive_dir=kw["archive_dir"], bad_dir=kw["bad_dir"]))
    drain(as_dicts, 1)
    assert out2.emitted[0][0] == [{"name": "ann", "age": "31", "note": "two\nlines"}]
    assert DirectorySpout(str(src), reader="csv", fields=["age"], **kw).outputs == ["age"]


def test_missing_source_dir_is_a_clear_error_at_open(tmp_path):
    _, kw = dirs(tmp_path)
    missing = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        opened(DirectorySpout(missing, **kw))


def test_max_outstanding_bounds_the_pending_records(tmp_path):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", [str(i) for i in range(20)])
    spout, out = opened(DirectorySpout(str(src), max_outstanding=5, **kw))
    drain(spout, 3)
    assert len(out.emitted) == 5
    spout.ack(out.emitted[0][1])
    drain(spout, 1)
    assert [v[0] for v, _ in out.emitted] == [str(i) for i in range(6)]


def notices(caplog) -> list[str]:
    """The empty-source notices logged so far."""
    return [r.getMessage() for r in caplog.records if "nothing to emit until one appears" in r.getMessage()]


class IndexedContext(FakeContext):
    """A context that knows the task's index among its component's tasks, as the real one does."""

    def __init__(self, task: int, index: int) -> None:
        super().__init__(task)
        self.index = index

    def get_this_task_index(self) -> int:
        return self.index


def test_an_empty_source_is_said_once_by_the_first_task_naming_the_directory_and_glob(tmp_path, caplog):
    src, kw = dirs(tmp_path)
    (src / "notes.csv").write_text("x\n")  # there, but not what glob asks for
    (src / "b.txt.ignore").write_text("being written\n")  # ignored, and not said
    first, out = DirectorySpout(str(src), glob="*.txt", poll_secs=0, **kw), FakeCollector()
    first.open({}, IndexedContext(1, 0), out)
    second = DirectorySpout(str(src), glob="*.txt", poll_secs=0, lock_dir=str(tmp_path / "locks2"),
                            archive_dir=kw["archive_dir"], bad_dir=kw["bad_dir"])
    second.open({}, IndexedContext(2, 1), FakeCollector())
    drain(first, 20)
    drain(second, 20)
    assert notices(caplog) == [f"DirectorySpout t:files:1: no file matches '*.txt' in {src} (1 other file(s) "
                               f"there, such as 'notes.csv', do not match glob=): nothing to emit until one appears"]
    assert [r.levelname for r in caplog.records if r.getMessage() in notices(caplog)] == ["WARNING"]
    write(src / "a.txt", ["one", "two"])  # then a file comes: read without a word
    drain(first, 3)
    assert [v for v, _ in out.emitted] == [["one"], ["two"]]
    assert len(notices(caplog)) == 1


def test_a_source_with_files_to_read_says_nothing(tmp_path, caplog):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", ["one"])
    spout, out = opened(DirectorySpout(str(src), **kw))
    taken = DirectorySpout(str(src), **kw)  # the other task: a.txt is the first's, none left for it
    taken.open({}, FakeContext(2), FakeCollector())
    drain(spout, 3)
    drain(taken, 3)
    assert [v for v, _ in out.emitted] == [["one"]] and notices(caplog) == []



# -- DirectorySpout in a LocalCluster -------------------------------------------------------------


def test_missing_source_dir_fails_the_submission_naming_the_path(cluster, tmp_path):
    _, kw = dirs(tmp_path)
    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(str(tmp_path / "nowhere"), **kw))
    builder.set_bolt("sink", LineSink("k")).shuffle_grouping("files")
    with pytest.raises(TopologySetupError, match="nowhere"):
        cluster.submit_topology("files", Config(), builder.create_topology())



def test_an_empty_source_in_a_running_topology_is_said_once_for_its_two_tasks(cluster, tmp_path, key, caplog):
    src, kw = dirs(tmp_path)
    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(str(src), glob="*.txt", **kw), 2)
    builder.set_bolt("sink", LineSink(key)).shuffle_grouping("files")
    cluster.submit_topology("files", Config(), builder.create_topology())
    wait_until(lambda: notices(caplog), timeout=10, message="the empty-source notice")
    write(src / "a.txt", ["late", "lines"])
    wait_until(lambda: sorted(logged(key)) == ["late", "lines"], timeout=20, message="the late file read")
    said = notices(caplog)
    assert len(said) == 1, said  # by the first of the two tasks only
    first = cluster.get_topology_info("files")["components"]["files"]["executors"][0]["tasks"][0]
    assert said[0] == (f"DirectorySpout files:files:{first}: no file matches '*.txt' in {src}: "
                       f"nothing to emit until one appears")


class LineSink(Bolt):
    """Records (key, line) per input; fails the first delivery of lines starting with "fail"."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        line = tup.values[0]
        first = line not in logged((self.key, "seen"))
        record((self.key, "seen"), line)
        if line.startswith("fail") and first:
            self.collector.fail(tup)
        else:
            record(self.key, line)
            self.collector.ack(tup)


def test_every_line_of_several_files_delivered_once_by_two_spout_tasks(cluster, tmp_path, key):
    src, kw = dirs(tmp_path)
    expected = []
    for n in range(6):
        lines = [f"file{n} line{i}" for i in range(40)]
        expected += lines
        write(src / f"f{n}.txt", lines)
    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(str(src), records_per_call=7, **kw), 2)
    builder.set_bolt("sink", LineSink(key), 2).shuffle_grouping("files")
    cluster.submit_topology("files", Config(), builder.create_topology())
    wait_until(lambda: len(os.listdir(tmp_path / "archive")) == 6, timeout=20, message="every file archived")
    assert Counter(logged(key)) == Counter(expected)  # every line once: acked before archiving
    assert os.listdir(src) == []
    # a file is unlocked just after it is archived, on the spout's thread
    wait_until(lambda: os.listdir(tmp_path / "locks") == [], timeout=10, message="every file unlocked")
    # the two tasks' counters, summed, reach get_topology_info with the next heartbeat
    wait_until(lambda: cluster.get_topology_info("files")["components"]["files"].get("metrics", {}).get(
        "files_done") == 6, timeout=10, message="the spout's metrics reported")
    metrics = cluster.get_topology_info("files")["components"]["files"]["metrics"]
    assert metrics["records_read"] == 240 and metrics["bad_files"] == 0


def test_failed_tuple_is_redelivered_and_its_file_archived_after(cluster, tmp_path, key):
    src, kw = dirs(tmp_path)
    write(src / "a.txt", ["one", "fail two", "three"])
    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(str(src), **kw))
    builder.set_bolt("sink", LineSink(key)).shuffle_grouping("files")
    cluster.submit_topology("files", Config(), builder.create_topology())
    wait_until(lambda: os.listdir(tmp_path / "archive") == ["a.txt"], timeout=20, message="file archived")
    assert Counter(logged((key, "seen"))) == {"one": 1, "fail two": 2, "three": 1}
    assert sorted(logged(key)) == ["fail two", "one", "three"]


# -- kill -9 of the spout's worker ------------------------------------------------------------------


class LoggingSink(Bolt):
    """Appends each line to ``path`` (one os.write per line: whole lines across kill -9)."""

    def __init__(self, path):
        self.path = path

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def execute(self, tup):
        os.write(self.fd, (tup.values[0] + "\n").encode())
        self.collector.ack(tup)


@pytest.mark.processes
def test_kill_9_of_the_spout_worker_mid_file_loses_nothing(tmp_path):
    src, kw = dirs(tmp_path)
    lines = [f"line {i:05d}" for i in range(3000)]
    write(src / "big.txt", lines)
    sunk = tmp_path / "sunk.log"
    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(str(src), records_per_call=5, commit_frequency_count=20,
                                              commit_frequency_secs=0.2, **kw))
    builder.set_bolt("sink", LoggingSink(str(sunk))).shuffle_grouping("files")
    conf = Config()
    conf.update({
        "topology.workers": 2, "worker.heartbeat.frequency.secs": 0.2, "topology.message.timeout.secs": 3,
        "supervisor.worker.timeout.secs": 5, "supervisor.worker.start.timeout.secs": 10,
        "supervisor.slots.ports": free_ports(2), "topology.max.spout.pending": 50,
    })

    def seen():
        try:
            return sunk.read_text().splitlines()
        except FileNotFoundError:
            return []

    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("kill9", conf, builder.create_topology())
        info = cluster.get_topology_info("kill9")["workers"]
        victim = [w for w in info if any(e["component"] == "files" for e in w["executors"])]
        assert len(victim) == 1
        pid = victim[0]["pid"]
        wait_until(lambda: len(seen()) >= 300, timeout=20, message="300 lines through the sink")
        os.kill(pid, signal.SIGKILL)
        at_kill = len(set(seen()))
        assert at_kill < len(lines), "the kill was not mid-file"
        wait_until(lambda: os.listdir(tmp_path / "archive") == ["big.txt"], timeout=40,
                   message="the file archived after the restart")
        assert set(seen()) == set(lines)  # at least once: nothing lost
        assert len(seen()) - len(lines) < at_kill  # resumed from the committed offset, not from 0
        after = [w for w in cluster.get_topology_info("kill9")["workers"]
                 if any(e["component"] == "files" for e in w["executors"])]
        assert after[0]["restarts"] == 1 and after[0]["pid"] != pid  # the spout ran again elsewhere
        assert os.listdir(src) == []
        # a file is unlocked just after it is archived, in the spout's worker
        wait_until(lambda: os.listdir(tmp_path / "locks") == [], timeout=10, message="the file unlocked")


# -- FileBolt ---------------------------------------------------------------------------------------


def bolt(tmp_path, **kw):
    b = FileBolt(str(tmp_path / "out"), **kw)
    out = FakeCollector()
    b.prepare({}, FakeContext(3, "writer"), out)  # task 3: its files name its index, 2
    return b, out


def out_files(tmp_path):
    return sorted(os.listdir(tmp_path / "out"))


def test_filebolt_acks_only_at_its_sync_point(tmp_path):
    b, out = bolt(tmp_path, sync_every=3, sync_secs=None)
    tups = [FakeTuple(["word", "n"], [f"w{i}", i]) for i in range(4)]
    b.execute(tups[0])
    b.execute(tups[1])
    assert out.acked == []
    b.execute(tups[2])
    assert out.acked == tups[:3]
    tmp = out_files(tmp_path)
    assert len(tmp) == 1 and tmp[0].endswith(".jsonl.tmp")  # synced, not complete yet
    assert len((tmp_path / "out" / tmp[0]).read_text().splitlines()) == 3
    b.execute(tups[3])
    assert out.acked == tups[:3]
    b.execute(FakeTuple([], [], tick=True))  # a tick syncs what waits (sync_secs)
    assert out.acked == tups[:3]  # ... only with sync_secs set
    b.cleanup()
    assert out.acked == tups
    [name] = out_files(tmp_path)
    assert name.startswith("writer-2-1-") and name.endswith(".jsonl")


def test_filebolt_tick_syncs_buffered_tuples(tmp_path):
    b, out = bolt(tmp_path, sync_every=100, sync_secs=0.1)
    assert b.get_component_configuration() == {"topology.tick.tuple.freq.secs": 0.1}
    t = FakeTuple(["x"], [1])
    b.execute(t)
    assert out.acked == []
    b.execute(FakeTuple([], [], tick=True))
    assert out.acked == [t]


@pytest.mark.parametrize("sync_on_idle", [True, False])
def test_filebolt_syncs_at_the_end_of_a_batch_unless_told_not_to(tmp_path, sync_on_idle):
    b, out = bolt(tmp_path, sync_every=100, sync_secs=None, sync_on_idle=sync_on_idle)
    tups = [FakeTuple(["x"], [i]) for i in range(3)]
    for t in tups:
        b.execute(t)
    b.finish_batch()
    assert out.acked == (tups if sync_on_idle else [])
    assert b.metrics["syncs"] == (1 if sync_on_idle else 0)


def test_filebolt_with_a_sync_count_above_max_spout_pending_does_not_stall(cluster, tmp_path):
    # 5 trees in flight, a sync every 1000 and no ticks: only the sync at the end of each
    # batch acks anything, so without it the spout would wait forever
    feeder = FeederSpout(["x"])
    builder = TopologyBuilder()
    builder.set_spout("feed", feeder)
    builder.set_bolt("writer", FileBolt(str(tmp_path / "out"), sync_every=1000, sync_secs=None)
                     ).shuffle_grouping("feed")
    conf = Config()
    conf["topology.max.spout.pending"] = 5
    cluster.submit_topology("writer", conf, builder.create_topology())
    for i in range(50):
        feeder.feed([i], msg_id=i)
    wait_until(lambda: len(feeder.acked) == 50, timeout=20, message="every row written and acked")
    [name] = out_files(tmp_path)
    assert sorted(json.loads(line)["x"] for line in (tmp_path / "out" / name).read_text().splitlines()) == \
        list(range(50))


@pytest.mark.parametrize("fmt,value,reason", [
    ("jsonl", object(), "not JSON-serializable"),
    ("csv", {"a": 1}, "not CSV values"),
])
def test_filebolt_fails_an_unwritable_tuple_with_the_reason(tmp_path, fmt, value, reason):
    b, out = bolt(tmp_path, format=fmt, sync_every=1)
    good, bad = FakeTuple(["x"], [1]), FakeTuple(["x"], [value])
    b.execute(bad)
    b.execute(good)
    assert out.failed == [bad] and out.acked == [good]
    [error] = out.errors
    assert "'writer'" in str(error) and reason in str(error)
    assert b.metrics["errors"] == 1 and b.metrics["records_written"] == 1


def test_filebolt_jsonl_lines_are_what_json_dumps_writes_also_after_a_refused_record(tmp_path):
    # the encoder is made once per file: a record it refused half-way (a value JSON has not, a
    # circular one) must leave nothing behind that changes how the next records are written,
    # such as the containers it had open taken for circular references
    b, out = bolt(tmp_path, sync_every=1)
    box = [["é", 1.5, None, True, {"k": -1e300}], float("nan")]
    circular: dict = {}
    circular["self"] = circular
    refused = [FakeTuple(["x"], [box]), FakeTuple(["x"], [[1, object()]]), FakeTuple(["x"], [circular])]
    for t in refused:
        b.execute(t)
    box[1] = 2  # writable now
    written = [FakeTuple(["x"], [box]), FakeTuple(["x"], [{"in": box}]), FakeTuple(["x"], ["ascii"])]
    for t in written:
        b.execute(t)
    b.cleanup()
    assert out.failed == refused and out.acked == written
    reasons = [str(e) for e in out.errors]
    assert "Out of range float" in reasons[0] and "not JSON serializable" in reasons[1] and "Circular" in reasons[2]
    [name] = out_files(tmp_path)
    assert (tmp_path / "out" / name).read_text().splitlines() == \
        [json.dumps({"x": t.values[0]}, allow_nan=False) for t in written]


def test_filebolt_fails_a_tuple_missing_a_field(tmp_path):
    b, out = bolt(tmp_path, fields=["a", "b"], sync_every=1)
    t = FakeTuple(["a"], [1])
    b.execute(t)
    assert out.failed == [t] and "lacks a field" in str(out.errors[0])


def test_filebolt_recovers_a_tmp_file_left_by_a_crash(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "writer-2-1-5.jsonl.tmp").write_text('{"x": 1}\n{"x": 2}\n{"x"')
    (tmp_path / "out" / "other-1-1-5.jsonl.tmp").write_text("not ours")
    bolt(tmp_path)
    assert out_files(tmp_path) == ["other-1-1-5.jsonl.tmp", "writer-2-1-5.jsonl"]
    assert (tmp_path / "out" / "writer-2-1-5.jsonl").read_text() == '{"x": 1}\n{"x": 2}\n'


def run_writer(cluster, tmp_path, rows, fields, **kw):
    feeder = FeederSpout(fields)
    builder = TopologyBuilder()
    builder.set_spout("feed", feeder)
    builder.set_bolt("writer", FileBolt(str(tmp_path / "out"), **kw)).shuffle_grouping("feed")
    cluster.submit_topology("writer", Config(), builder.create_topology())
    for i, row in enumerate(rows):
        feeder.feed(row, msg_id=i)
    wait_until(lambda: len(feeder.acked) == len(rows), timeout=20, message="every row written and acked")
    assert feeder.failed == []
    cluster.kill_topology("writer", wait_secs=0)  # cleanup: the last file is closed and renamed
    wait_until(lambda: not any(n.endswith(".tmp") for n in out_files(tmp_path)), timeout=10,
               message="no .tmp file left")
    return out_files(tmp_path)


ROWS = [[f"w{i}", i, i / 2] for i in range(300)]


def test_filebolt_jsonl_rotated_by_size_equals_the_input(cluster, tmp_path):
    names = run_writer(cluster, tmp_path, ROWS, ["word", "n", "half"], rotation=SizeRotation(2000),
                       sync_every=10, sync_secs=0.1)
    assert len(names) > 3 and all(n.endswith(".jsonl") for n in names)
    got = [json.loads(line) for n in names for line in (tmp_path / "out" / n).read_text().splitlines()]
    assert sorted(got, key=lambda r: r["n"]) == [{"word": w, "n": n, "half": h} for w, n, h in ROWS]


def test_filebolt_csv_rotated_by_time_has_a_header_per_file(cluster, tmp_path):
    feeder = FeederSpout(["word", "n"])
    builder = TopologyBuilder()
    builder.set_spout("feed", feeder)
    builder.set_bolt("writer", FileBolt(str(tmp_path / "out"), format="csv", rotation=TimeRotation(0.2),
                                        sync_every=5, sync_secs=0.1)).shuffle_grouping("feed")
    cluster.submit_topology("writer", Config(), builder.create_topology())
    rows = [[f"w{i}", i] for i in range(30)]
    for i, row in enumerate(rows[:15]):
        feeder.feed(row, msg_id=i)
    wait_until(lambda: len(feeder.acked) == 15 and any(n.endswith(".csv") for n in out_files(tmp_path)),
               timeout=20, message="a first file rotated")
    for i, row in enumerate(rows[15:], 15):
        feeder.feed(row, msg_id=i)
    wait_until(lambda: len(feeder.acked) == 30, timeout=20, message="every row acked")
    cluster.kill_topology("writer", wait_secs=0)
    wait_until(lambda: not any(n.endswith(".tmp") for n in out_files(tmp_path)), timeout=10)
    names = out_files(tmp_path)
    assert len(names) >= 2
    got = []
    for n in names:
        with open(tmp_path / "out" / n, newline="") as f:
            file_rows = list(csv.reader(f))
        assert file_rows[0] == ["word", "n"]
        got += file_rows[1:]
    assert sorted(got, key=lambda r: int(r[1])) == [[w, str(n)] for w, n in rows]


def test_filebolt_parquet_equals_the_input(cluster, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    names = run_writer(cluster, tmp_path, ROWS, ["word", "n", "half"], format="parquet",
                       rotation=SizeRotation(1), sync_every=100, sync_secs=0.1)
    assert len(names) >= 2 and all(n.endswith(".parquet") for n in names)
    got = [row for n in names for row in pq.read_table(tmp_path / "out" / n).to_pylist()]
    assert sorted(got, key=lambda r: r["n"]) == [{"word": w, "n": n, "half": h} for w, n, h in ROWS]


def test_filebolt_parquet_without_pyarrow_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(MissingExtraError, match=r"squall\[parquet\]"):
        FileBolt(str(tmp_path), format="parquet")


def test_filebolt_parquet_acks_when_the_file_is_complete(tmp_path):
    pytest.importorskip("pyarrow")
    b, out = bolt(tmp_path, format="parquet", sync_every=2, sync_secs=None)
    tups = [FakeTuple(["n"], [i]) for i in range(3)]
    for t in tups:
        b.execute(t)
    assert out.acked == []  # a row group is written, but the file has no footer yet
    bad = FakeTuple(["n"], ["not an int"])
    b.execute(bad)
    assert out.failed == [bad] and "Parquet schema" in str(out.errors[0])
    b.cleanup()
    assert out.acked == tups
    [name] = out_files(tmp_path)
    assert name.endswith(".parquet")
