"""The database sink example (examples/exactly_once_sqlite.py), the template for users' own
exactly-once sinks: each recovery case on its own, then ``kill -9`` of worker processes."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

import exactly_once_run as eo
from helpers import free_ports
from squall.testing import BoltHarness
from test_checkpoint_kill9 import DirectorySource, make_lines

from exactly_once_sqlite import SQLiteSink  # examples/, on the path through exactly_once_run

pytestmark = pytest.mark.timeout(120)


def rows(path) -> list[tuple]:
    with sqlite3.connect(path) as db:
        try:
            return db.execute("SELECT word, count FROM counts").fetchall()
        except sqlite3.OperationalError:  # no table yet
            return []


def sink(path, name: str) -> BoltHarness:
    h = BoltHarness(SQLiteSink(str(path), "counts", ["word", "count"]), {"count": ["word", "count"]}, name=name)
    h.rollback()  # the recovery barrier every start is followed by
    return h


def test_an_epoch_is_inserted_once_its_checkpoint_commits_and_once_only(tmp_path):
    db, name = tmp_path / "out.sqlite", f"sqlite-{uuid.uuid4().hex[:8]}"
    h = sink(db, name)
    h.feed(["a", 1], tracked=False)
    h.feed(["b", 1], tracked=False)
    txid = h.prepare_checkpoint()
    assert rows(db) == []
    h.commit_checkpoint(txid, barrier=False)  # committed; the worker dies before the sink's commit
    h = sink(db, name)
    assert rows(db) == [("a", 1), ("b", 1)]
    h.bolt.commit_transaction([["a", 1], ["b", 1]], txid)  # a COMMIT repeated: skipped by the marker
    h.feed(["a", 2], tracked=False)
    h.checkpoint()
    h = sink(db, name)  # a restart after everything was inserted inserts nothing
    assert rows(db) == [("a", 1), ("b", 1), ("a", 2)]
    h.close()


def test_a_crash_after_prepare_inserts_nothing_and_the_replay_once(tmp_path):
    db, name = tmp_path / "out.sqlite", f"sqlite-{uuid.uuid4().hex[:8]}"
    h = sink(db, name)
    h.feed(["a", 1], tracked=False)
    h.prepare_checkpoint()
    h = sink(db, name)
    assert rows(db) == []
    h.feed(["a", 1], tracked=False)
    h.checkpoint()
    assert rows(db) == [("a", 1)]
    h.close()


@pytest.mark.processes
def test_kill_9_of_each_worker_kind_leaves_each_row_once(tmp_path):
    kills = ["count", "sink", "checkpoint"]
    source = DirectorySource(tmp_path / "files", make_lines(1500, seed=1), parts=eo.parts(kills))
    db = tmp_path / "out.sqlite"
    topology = eo.build(source.spout(), SQLiteSink(str(db), "counts", ["word", "count"]))
    conf = eo.conf({"path": str(tmp_path / "state")}, free_ports(3))
    report = eo.run(topology, conf, lambda: rows(db), source, kills)
    assert [k["component"] for k in report["kills"]] == kills
