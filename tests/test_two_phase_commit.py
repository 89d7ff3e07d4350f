"""The two-phase sink contract (squall.api.two_phase_commit) at each failure point of the
protocol, with the harness standing in for the checkpoint barriers. A "crash" abandons the
harness (no cleanup) and starts another under the same topology name: the in-memory state
provider keeps the committed state, as a durable one would across processes."""

from __future__ import annotations

import itertools
import uuid

import pytest

from squall import (
    BasicBolt, InvalidTopologyError, LocalCluster, Spout, StatefulSpout, TopologyBuilder, TwoPhaseCommitSink,
    WriteAheadSink,
)
from squall.api.two_phase_commit import PENDING_KEY
from squall.testing import BoltHarness

pytestmark = pytest.mark.timeout(30)

_ids = itertools.count()


class Store:
    """An outside store with a pending area, as a directory of part files is."""

    def __init__(self) -> None:
        self.visible: list[str] = []
        self.down = False  # unreachable: commits raise
        self.pending: dict[str, list[str]] = {}  # part name -> its records
        self.calls: list[str] = []


STORES: dict[str, Store] = {}


class PartSink(TwoPhaseCommitSink):
    """Writes each epoch into a pending part, made visible at commit; ``crash_in_commit``: the
    commit makes the part visible, then raises before it returns (a crash inside the commit)."""

    def __init__(self, store: str, crash_in_commit: bool = False) -> None:
        self.store_name, self.crash_in_commit = store, crash_in_commit

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.store = STORES[self.store_name]
        self.prefix = f"task{context.get_this_task_id()}-"

    def begin_transaction(self):
        return {"part": f"{self.prefix}{next(_ids)}", "records": []}

    def write(self, transaction, tup):
        if tup.values[0] == "bad":
            raise ValueError("'bad' is not a record")
        transaction["records"].append(tup.values[0])

    def prepare_transaction(self, transaction, txid):
        self.store.pending[transaction["part"]] = transaction["records"]
        self.store.calls.append(f"prepare {txid}")
        return transaction["part"]

    def commit_transaction(self, handle, txid):
        if self.store.down:
            raise ConnectionError("the store is unreachable")
        self.store.calls.append(f"commit {handle}")
        records = self.store.pending.pop(handle, None)
        if records is not None:  # idempotent: a part already made visible is not there any more
            self.store.visible.extend(records)
            if self.crash_in_commit:
                raise RuntimeError("crashed inside the commit")

    def abort_transaction(self, transaction):
        self.store.calls.append("abort open")

    def abort_prepared(self, handle):
        self.store.calls.append(f"abort {handle}")
        self.store.pending.pop(handle, None)

    def recover(self, pending):
        super().recover(pending)
        for part in [p for p in self.store.pending if p.startswith(self.prefix)]:
            self.store.calls.append(f"leftover {part}")
            del self.store.pending[part]


@pytest.fixture
def store():
    name = f"eo-{uuid.uuid4().hex[:8]}"
    STORES[name] = Store()
    yield name, STORES[name]
    del STORES[name]


def sink(name: str, **options) -> BoltHarness:
    """The sink's task started as after a (re)start: its state loaded, then the recovery barrier
    every start is followed by."""
    h = BoltHarness(PartSink(name, **options), {"source": ["word"]}, name=name)
    h.rollback()
    return h


def feed(h: BoltHarness, *words: str) -> None:
    for word in words:
        h.feed([word], tracked=False)


def test_records_become_visible_when_their_checkpoint_commits_and_not_before(store):
    name, s = store
    h = sink(name)
    feed(h, "a", "b")
    assert s.visible == [] and s.pending == {}
    txid = h.prepare_checkpoint()
    assert s.visible == [] and list(s.pending.values()) == [["a", "b"]]
    h.commit_checkpoint(txid)
    feed(h, "c")
    h.checkpoint()
    h.checkpoint()  # an epoch without records makes no transaction
    assert s.visible == ["a", "b", "c"] and s.pending == {}
    assert len(h.acked) == 3 and h.errors == []


def test_a_crash_before_prepare_loses_the_open_epoch_which_the_spout_replays(store):
    name, s = store
    h = sink(name)
    feed(h, "a")
    h.checkpoint()
    feed(h, "b")  # open: nothing durable
    h = sink(name)  # crash and restart
    feed(h, "b")  # the stateful spout replays from its committed position
    h.checkpoint()
    assert s.visible == ["a", "b"] and s.pending == {}


def test_a_crash_after_prepare_aborts_the_prepared_epoch_at_recovery(store):
    name, s = store
    h = sink(name)
    feed(h, "a", "b")
    h.prepare_checkpoint()  # durable, invisible; the checkpoint never commits
    part = next(iter(s.pending))
    h = sink(name)
    assert s.pending == {} and f"leftover {part}" in s.calls
    feed(h, "a", "b")
    h.checkpoint()
    assert s.visible == ["a", "b"]


def test_a_crash_between_the_checkpoints_commit_and_the_sinks_commits_it_at_recovery(store):
    name, s = store
    h = sink(name)
    feed(h, "a", "b")
    txid = h.prepare_checkpoint()
    h.commit_checkpoint(txid, barrier=False)  # committed; the COMMIT never reached the sink
    assert s.visible == []
    h = sink(name)
    assert s.visible == ["a", "b"] and s.pending == {}
    feed(h, "c")  # the spout resumes after what the checkpoint committed
    h.checkpoint()
    assert s.visible == ["a", "b", "c"]


def test_a_crash_inside_the_sinks_commit_is_finished_by_the_recovery_once(store):
    name, s = store
    h = sink(name, crash_in_commit=True)
    feed(h, "a", "b")
    with pytest.raises(RuntimeError, match="crashed inside the commit"):
        h.checkpoint()
    assert s.visible == ["a", "b"]
    h = sink(name)  # the handle is still in the committed state: committed again, idempotently
    commits = [c for c in s.calls if c.startswith("commit")]
    assert len(commits) == 2 and len(set(commits)) == 1
    assert s.visible == ["a", "b"]
    h.checkpoint()
    h = sink(name)  # its commit is recorded now: a later recovery does not repeat it
    assert len([c for c in s.calls if c.startswith("commit")]) == 2


def test_a_commit_that_fails_is_done_at_the_next_one_in_order(store):
    name, s = store
    h = sink(name)
    feed(h, "a")
    s.down = True
    with pytest.raises(ConnectionError, match="unreachable"):
        h.checkpoint()
    assert s.visible == [] and "the store is unreachable" in str(h.errors[-1])
    s.down = False
    feed(h, "b")
    h.checkpoint()
    assert s.visible == ["a", "b"] and s.pending == {}


def test_a_rollback_without_crash_aborts_the_open_and_the_uncommitted_prepared_epochs(store):
    name, s = store
    h = sink(name)
    feed(h, "a")
    h.checkpoint()
    feed(h, "b")
    h.prepare_checkpoint()  # prepared; then another task fails the checkpoint
    feed(h, "c")  # the next epoch is open
    h.rollback()
    assert "abort open" in s.calls and any(c.startswith("abort task") for c in s.calls)
    assert s.pending == {} and s.visible == ["a"]
    feed(h, "b", "c")
    h.checkpoint()
    assert s.visible == ["a", "b", "c"]


def test_a_record_that_cannot_be_written_fails_its_tuple_and_is_reported(store):
    name, s = store
    h = sink(name)
    bad = h.feed(["bad"], tracked=False)
    feed(h, "a")
    assert h.failed == [bad]
    assert "cannot write ['bad'] from component 'source'" in str(h.errors[0])
    h.checkpoint()
    assert s.visible == ["a"]


PUBLISHED: dict[str, dict] = {}


class MarkerSink(WriteAheadSink):
    """Publishes to a dict with the task's last txid beside it, as Redis and Kafka sinks do."""

    def __init__(self, name: str) -> None:
        self.name = name

    def record(self, tup):
        return tup.values[0].upper()

    def publish(self, txid, records):
        out = PUBLISHED[self.name]
        if out["marker"] >= txid:
            out["skipped"].append(txid)
            return
        out["records"] += records
        out["marker"] = txid


def test_a_write_ahead_sink_keeps_the_epochs_records_in_the_checkpoint_and_skips_a_published_epoch():
    name = f"wal-{uuid.uuid4().hex[:8]}"
    PUBLISHED[name] = {"records": [], "marker": 0, "skipped": []}
    h = BoltHarness(MarkerSink(name), {"source": ["word"]}, name=name)
    h.rollback()
    feed(h, "a", "b")
    txid = h.prepare_checkpoint()
    assert h.state.get(PENDING_KEY) == [[txid, ["A", "B"]]]
    h.commit_checkpoint(txid)
    assert PUBLISHED[name]["records"] == ["A", "B"]
    feed(h, "c")
    txid = h.prepare_checkpoint()
    h.commit_checkpoint(txid, barrier=False)
    PUBLISHED[name]["records"].append("C")  # published, then the crash before the state said so
    PUBLISHED[name]["marker"] = txid
    h = BoltHarness(MarkerSink(name), {"source": ["word"]}, name=name)
    h.rollback()
    assert PUBLISHED[name]["records"] == ["A", "B", "C"] and PUBLISHED[name]["skipped"] == [txid]
    del PUBLISHED[name]


class Words(Spout):
    outputs = ["word"]

    def next_tuple(self):
        pass


class Upper(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        collector.emit([tup.values[0].upper()])


class StatefulWords(StatefulSpout):
    outputs = ["word"]

    def next_tuple(self):
        pass


def test_an_exactly_once_sink_fed_by_a_spout_whose_position_is_not_checkpointed_is_refused_at_submit(store):
    name, _ = store
    builder = TopologyBuilder()
    builder.set_spout("kept", StatefulWords())
    builder.set_spout("words", Words())
    builder.set_bolt("upper", Upper()).shuffle_grouping("words")
    builder.set_bolt("out", PartSink(name)).shuffle_grouping("upper").shuffle_grouping("kept")
    with LocalCluster() as cluster, pytest.raises(InvalidTopologyError) as refused:
        cluster.submit_topology("t", {}, builder.create_topology())
    message = str(refused.value)
    assert "exactly-once sink 'out' is fed by spout 'words'" in message and "make it a StatefulSpout" in message
    assert "'kept'" not in message
