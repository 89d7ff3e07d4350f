"""FileBolt in exactly-once mode (``FileBolt(..., exactly_once=True)``): pending parts renamed
into place when their checkpoint commits, at each failure point of the two-phase protocol, in
each format; then end to end under ``kill -9`` of worker processes.

The harness tests drive the bolt's task with :class:`~squall.testing.BoltHarness` standing in
for the checkpoint barriers, on real files. A "crash" abandons the harness (no cleanup) and
starts another under the same topology name: the in-memory state provider keeps the committed
state, as a durable one does across processes; every start is followed by the recovery barrier
(``rollback``), as in a topology.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import exactly_once_run as eo
from helpers import free_ports
from squall import TwoPhaseCommitSink
from squall.api.two_phase_commit import PENDING_KEY
from squall.connectors.files import FileBolt, SizeRotation, TimeRotation
from squall.testing import BoltHarness
from test_checkpoint_kill9 import DirectorySource, make_lines

pytestmark = pytest.mark.timeout(30)

FORMATS = ["jsonl", "csv", "parquet"]


# -- the harness ------------------------------------------------------------------------------------


class Sink:
    """The output directory of one exactly-once FileBolt, and a way to (re)start its task."""

    def __init__(self, out: Path, fmt: str, **options: Any) -> None:
        self.out, self.fmt, self.options = out, fmt, options
        self.name = f"files-eo-{uuid.uuid4().hex[:8]}"  # the topology: its committed state outlives a harness

    def start(self) -> BoltHarness:
        """The task started as after a (re)start: its committed state loaded, then the recovery
        barrier every start is followed by."""
        bolt = FileBolt(str(self.out), format=self.fmt, exactly_once=True, **self.options)
        h = BoltHarness(bolt, {"source": ["word", "n"]}, name=self.name)
        h.rollback()
        return h

    def finals(self) -> list[str]:
        return sorted(n for n in os.listdir(self.out) if not n.startswith("."))

    def pending(self) -> list[str]:
        return sorted(n for n in os.listdir(self.out) if n.startswith("."))

    def visible(self) -> list[tuple[str, int]]:
        """The records of the committed parts, in the order of their names."""
        return [record for name in self.finals() for record in read_part(self.out / name, self.fmt)]


def read_part(path: Path, fmt: str) -> list[tuple[str, int]]:
    if fmt == "jsonl":
        return [(r["word"], r["n"]) for r in map(json.loads, path.read_text().splitlines())]
    if fmt == "csv":
        with open(path, newline="") as f:
            return [(r["word"], int(r["n"])) for r in csv.DictReader(f)]
    import pyarrow.parquet as pq

    return [(r["word"], r["n"]) for r in pq.read_table(path).to_pylist()]


def record(word: str) -> tuple[str, int]:
    return word, ord(word) - ord("a") + 1


def feed(h: BoltHarness, *words: str) -> None:
    for word in words:
        h.feed(list(record(word)), tracked=False)


@pytest.fixture(params=FORMATS)
def sink(request, tmp_path) -> Iterator[Sink]:
    if request.param == "parquet":
        pytest.importorskip("pyarrow")
    yield Sink(tmp_path / "out", request.param)


# -- the protocol, at each failure point --------------------------------------------------------------


def test_nothing_is_visible_before_the_checkpoint_commits_and_each_epoch_after(sink):
    h = sink.start()
    feed(h, "a", "b")
    assert sink.visible() == []
    txid = h.prepare_checkpoint()
    assert sink.visible() == [] and len(sink.pending()) == 1  # durable, invisible
    h.commit_checkpoint(txid)
    assert sink.visible() == [record("a"), record("b")] and sink.pending() == []
    feed(h, "c")
    h.checkpoint()
    h.checkpoint()  # an epoch without input makes no part
    assert sink.visible() == [record(w) for w in "abc"] and sink.pending() == []
    first, second = sink.finals()
    assert first.startswith(f"bolt-{txid:012d}-") and second.startswith(f"bolt-{txid + 1:012d}-")  # by epoch
    assert len(h.acked) == 3 and h.failed == [] and h.errors == []
    assert h.bolt.metrics == {"records_written": 3, "files_done": 2, "syncs": 2, "errors": 0}


def test_a_crash_with_an_open_part_removes_it_at_recovery(tmp_path):
    pytest.importorskip("pyarrow")
    for fmt in FORMATS:  # sync_every=1: a Parquet part has a file (a row group) before its PREPARE
        sink = Sink(tmp_path / fmt, fmt, sync_every=1)
        h = sink.start()
        feed(h, "a")
        h.checkpoint()
        feed(h, "b")
        assert len(sink.pending()) == 1
        h = sink.start()  # crash and restart
        assert sink.pending() == [] and sink.visible() == [record("a")]
        feed(h, "b")  # the stateful spout replays from its committed position
        h.checkpoint()
        assert sink.visible() == [record("a"), record("b")], fmt


def test_a_crash_after_prepare_removes_the_prepared_part_and_the_replay_is_written_once(sink):
    h = sink.start()
    feed(h, "a", "b")
    h.prepare_checkpoint()  # durable, invisible; the checkpoint never commits
    assert len(sink.pending()) == 1
    h = sink.start()
    assert sink.pending() == [] and sink.visible() == []
    feed(h, "a", "b")
    h.checkpoint()
    assert sink.visible() == [record("a"), record("b")] and sink.pending() == []


def test_a_crash_between_the_checkpoints_commit_and_the_bolts_renames_the_part_at_recovery_once(sink):
    h = sink.start()
    feed(h, "a", "b")
    txid = h.prepare_checkpoint()
    h.commit_checkpoint(txid, barrier=False)  # committed; the COMMIT never reached the bolt
    assert sink.visible() == []
    h = sink.start()
    assert sink.visible() == [record("a"), record("b")] and sink.pending() == []
    feed(h, "c")  # the spout resumes after what the checkpoint committed
    h.checkpoint()
    h = sink.start()  # the commit is recorded now: nothing is done again
    assert sink.visible() == [record(w) for w in "abc"] and sink.pending() == [] and len(sink.finals()) == 2


def test_a_repeated_commit_changes_nothing(sink):
    h = sink.start()
    feed(h, "a")
    txid = h.prepare_checkpoint()
    [[_, handle]] = h.state.get(PENDING_KEY)
    h.commit_checkpoint(txid)
    finals = sink.finals()
    h.bolt.commit_transaction(handle, txid)  # a COMMIT sent again
    handle = pickle.loads(pickle.dumps(list(handle)))  # as read back from the checkpoint elsewhere
    sink.start().bolt.commit_transaction(handle, txid)  # ... or by another run of the task
    assert sink.finals() == finals and sink.visible() == [record("a")] and sink.pending() == []


def test_a_rollback_without_crash_removes_the_open_and_the_prepared_uncommitted_parts(sink):
    h = sink.start()
    feed(h, "a")
    h.checkpoint()
    feed(h, "b")
    h.prepare_checkpoint()  # prepared; then another task fails the checkpoint
    feed(h, "c")  # the next epoch is open
    h.rollback()
    assert sink.pending() == [] and sink.visible() == [record("a")]
    feed(h, "b", "c")
    h.checkpoint()
    assert sink.visible() == [record(w) for w in "abc"] and sink.pending() == []


REFUSED = {"jsonl": "not JSON-serializable", "csv": "not CSV values", "parquet": "does not fit the Parquet schema"}


def test_a_record_that_cannot_be_written_fails_its_tuple_naming_the_component(sink):
    h = sink.start()
    feed(h, "a")  # the Parquet schema is the first record's
    bad = h.feed(["b", {1, 2}], tracked=False)
    feed(h, "c")
    assert h.failed == [bad] and len(h.acked) == 2
    [error] = h.errors
    assert "cannot write ['b', {1, 2}]" in str(error) and "FileBolt 'bolt'" in str(error)
    assert REFUSED[sink.fmt] in str(error)
    h.checkpoint()
    assert sink.visible() == [record("a"), record("c")] and h.bolt.metrics["errors"] == 1


def test_a_record_lacking_a_field_fails_and_an_epoch_of_refused_records_makes_no_part(tmp_path):
    sink = Sink(tmp_path / "out", "jsonl", fields=["word", "count"])
    h = sink.start()
    bad = h.feed(["a", 1], tracked=False)
    assert h.failed == [bad] and "lacks a field of ['word', 'count']" in str(h.errors[0])
    h.checkpoint()
    assert os.listdir(sink.out) == []


def test_an_io_error_fails_the_checkpoint_and_the_rollback_writes_the_epoch_again(sink, monkeypatch):
    h = sink.start()
    feed(h, "a")

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as m:
        m.setattr(os, "fsync", broken)
        with pytest.raises(OSError, match="FileBolt 'bolt': cannot complete .* for checkpoint 1"):
            h.prepare_checkpoint()
    h.rollback()  # the checkpoint failed: the topology rolls back
    assert os.listdir(sink.out) == []
    feed(h, "a")
    h.checkpoint()
    assert sink.visible() == [record("a")] and sink.pending() == []


def test_recovery_removes_this_tasks_pending_parts_only(tmp_path):
    sink = Sink(tmp_path / "out", "jsonl")
    h = sink.start()
    feed(h, "a")
    h.prepare_checkpoint()
    [ours] = sink.pending()
    task = ours.split("-")[1]
    others = sorted([
        f".bolt-{int(task) + 1}-0123456789ab.jsonl.pending",  # another task of this component
        f".bolt-{task}-x-0123456789ab.jsonl.pending",  # component "bolt-<task>"'s
        f".bolt-{task}-0123456789ab.csv.pending",  # another format's
        ".other-file",
    ])
    for name in others:
        (sink.out / name).write_text("{}\n")
    sink.start()
    assert sink.pending() == others


def test_the_option_makes_the_exactly_once_form(tmp_path):
    plain = FileBolt(str(tmp_path))
    assert isinstance(plain, FileBolt) and not isinstance(plain, TwoPhaseCommitSink)
    bolt = FileBolt(str(tmp_path), format="csv", exactly_once=True)
    assert isinstance(bolt, FileBolt) and isinstance(bolt, TwoPhaseCommitSink) and bolt.exactly_once
    assert bolt.format == "csv" and bolt.get_component_configuration() is None  # no ticks: checkpoints sync
    copy = cloudpickle.loads(cloudpickle.dumps(bolt))  # as the topology ships it to the workers
    assert type(copy) is type(bolt) and copy.format == "csv"
    for rotation in (SizeRotation(1000), TimeRotation(1)):
        with pytest.raises(ValueError, match=r"FileBolt\(exactly_once=True\): rotation="):
            FileBolt(str(tmp_path), rotation=rotation, exactly_once=True)


# -- end to end: kill -9 of worker processes ------------------------------------------------------------


class Committed:
    """``read()`` for :func:`exactly_once_run.run`: the ``[word, count]`` records of the
    committed parts of ``out``; a committed part never changes, so each is parsed once."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.parts: dict[str, list[list[Any]]] = {}

    def __call__(self) -> list[list[Any]]:
        if self.out.is_dir():
            for name in os.listdir(self.out):
                if not name.startswith(".") and name not in self.parts:
                    lines = (self.out / name).read_text().splitlines()
                    self.parts[name] = [[r["word"], r["count"]] for r in map(json.loads, lines)]
        return [r for records in self.parts.values() for r in records]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_kill_9_and_a_rerun_under_the_same_name_leave_every_record_once(tmp_path):
    # each worker kind dies (the even scheduler's layout on 3 workers): a count's worker with a
    # sink task, then a sink task with its open and prepared parts beside the checkpoint spout,
    # then the checkpoint spout between a commit and its COMMIT; then the topology is stopped
    # and submitted again, its state (the parts to commit) read back from SQLite
    kills = ["count", "sink", "checkpoint"]
    source = DirectorySource(tmp_path / "files", make_lines(1500, seed=37),
                             parts=eo.parts(kills, stop_and_rerun=True))
    out = tmp_path / "out"
    sink = FileBolt(str(out), format="jsonl", fields=["word", "count"], exactly_once=True)
    conf = eo.conf({"path": str(tmp_path / "state")}, free_ports(3))
    read = Committed(out)
    started = time.monotonic()
    report = eo.run(eo.build(source.spout(), sink), conf, read, source, kills, stop_and_rerun=True)
    print(f"exactly-once FileBolt: {time.monotonic() - started:.1f} s, {len(read.parts)} parts, {report}")
    assert [k["component"] for k in report["kills"]] == kills
    assert not [n for n in os.listdir(out) if n.endswith(".pending")]
