"""Guaranteed processing: Storm's XOR acker, anchoring, fail, timeouts, max spout pending.

Components are defined at module level, so the copies running in the workers (components
are cloudpickled at create_topology) share the recording stores of ``helpers``.

Negative checks ("X was *not* acked") use a barrier instead of sleeping: a marker tuple
fed after the tuple under test goes through the same executors and the single acker, so
once the marker's ack reached the spout, anything the tuple under test would have caused
has reached the spout too.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest

from helpers import (
    STOP, WAIT, HoldBolt, RecordSink, Relay, ScriptBolt, barrier, component_info, errors_of, executors_of,
    feeder_builder, held, logged, record, stays, tasks_of,
)
from squall import BasicBolt, Bolt, Config, FailedException, Spout, TopologyBuilder
from squall.testing import FeederSpout, advance_time, wait_until

# -- components ----------------------------------------------------------------------------


class SentenceSpout(Spout):
    """Emits each sentence once as [msg_id, sentence] with that message id; on ack checks that
    every descendant of the tuple was already processed by the sinks."""

    outputs = ["id", "sentence"]

    def __init__(self, sentences, expected_descendants):
        self.sentences = sentences
        self.expected = expected_descendants  # msg_id -> number of sink executions

    def open(self, conf, context, collector):
        self.collector = collector
        self.todo = list(self.sentences.items())

    def next_tuple(self):
        if self.todo:
            msg_id, sentence = self.todo.pop(0)
            self.collector.emit([msg_id, sentence], msg_id=msg_id)

    def ack(self, msg_id):
        done = sum(1 for root in logged("sinks") if root == msg_id)
        record("acked", (msg_id, done, self.expected[msg_id]))

    def fail(self, msg_id):
        record("failed", msg_id)

    def is_exhausted(self):
        return not self.todo


class SplitBolt(Bolt):
    outputs = ["id", "word"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        for word in tup["sentence"].split():
            self.collector.emit([tup["id"], word], anchors=tup)
        self.collector.ack(tup)


class DirectRelay(Bolt):
    """Re-emits each input on its direct stream to one task of "direct-sink", anchored."""

    def declare_output_fields(self, declarer):
        declarer.declare_stream("direct", ["id", "word"], direct=True)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.targets = context.get_component_tasks("direct-sink")

    def execute(self, tup):
        target = self.targets[len(tup["word"]) % len(self.targets)]
        self.collector.emit_direct(target, list(tup.values), anchors=tup, stream="direct")
        self.collector.ack(tup)


class JoinBolt(Bolt):
    """Pairs inputs two by two and emits their join anchored to both, then acks both.
    Inputs whose value starts with 'marker' are acked at once, unjoined."""

    outputs = ["v"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.waiting = None

    def execute(self, tup):
        value = tup.values[0]
        if value.startswith("marker"):
            self.collector.emit([value], anchors=tup)
            self.collector.ack(tup)
            return
        if self.waiting is None:
            self.waiting = tup
            return
        first, self.waiting = self.waiting, None
        joined = f"{first.values[0]}+{value}"
        record("joined", joined)
        self.collector.emit([joined], anchors=[first, tup])
        self.collector.ack(first)
        self.collector.ack(tup)


class Doubler(BasicBolt):
    """A BasicBolt: emits two outputs (anchored for it); raises for 'fail...' and 'boom...'."""

    outputs = ["v"]

    def execute(self, tup, collector):
        value = tup.values[0]
        record("basic", value)
        if value.startswith("failx"):
            raise FailedException("asked to fail")
        if value.startswith("boom"):
            raise RuntimeError("boom in basic bolt")
        collector.emit([value + ".a"])
        collector.emit([value + ".b"])


class CountingSpout(Spout):
    """Emits distinct values with message ids for as long as the test lets it."""

    outputs = ["v"]

    def __init__(self, key):
        self.key = key

    def open(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()
        self.n = 0

    def next_tuple(self):
        if STOP.is_set():
            return
        msg_id = f"{self.task}-{self.n}"
        self.n += 1
        record(self.key, msg_id)
        self.collector.emit([msg_id], msg_id=msg_id)

    def ack(self, msg_id):
        record(self.key + ".acked", msg_id)

    def fail(self, msg_id):
        record(self.key + ".failed", msg_id)


def _submit(cluster, builder, conf=None, name="t", tracked=False):
    """Submit as ``name``; ``tracked`` for ``cluster.wait_idle`` (every spout then needs ``is_exhausted``)."""
    cluster.submit_topology(name, conf or Config(), builder.create_topology(), tracked=tracked)
    return name


def _submit_to_sink(cluster, conf, sink):
    """Submit (as "t") spout -> "sink" (``sink``); return the feeder."""
    feeder, b = feeder_builder()
    b.set_bolt("sink", sink).shuffle_grouping("spout")
    _submit(cluster, b, conf)
    return feeder


def _submit_via(cluster, cid, bolt, global_grouping=False, sink=True):
    """Submit (as "t") spout -> ``cid`` (``bolt``, by shuffle or global grouping) [-> "sink",
    a ScriptBolt]; return the feeder."""
    feeder, b = feeder_builder()
    declarer = b.set_bolt(cid, bolt)
    if global_grouping:
        declarer.global_grouping("spout")
    else:
        declarer.shuffle_grouping("spout")
    if sink:
        b.set_bolt("sink", ScriptBolt("sink")).shuffle_grouping(cid)
    _submit(cluster, b)
    return feeder


# -- complete trees ------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_tree_acked_exactly_once_after_every_descendant(cluster, workers):
    sentences = {f"s{i}": " ".join(f"w{i}x{j}" for j in range(i % 4 + 1)) for i in range(20)}
    # descendants that reach the sinks: the sentence on both tasks of "spout-audit" (all
    # grouping straight from the spout); each word once on "count" (fields grouping), on
    # both tasks of "audit" (all grouping), once through "echo" and once through "direct"
    expected = {mid: 2 + 5 * len(s.split()) for mid, s in sentences.items()}
    b = TopologyBuilder()
    b.set_spout("spout", SentenceSpout(sentences, expected))
    b.set_bolt("spout-audit", RecordSink("sinks"), 2).all_grouping("spout")
    b.set_bolt("split", SplitBolt(), 2).shuffle_grouping("spout")
    b.set_bolt("echo", Relay(["id", "word"]), 2).shuffle_grouping("split")
    b.set_bolt("count", RecordSink("sinks"), 2).fields_grouping("split", ["word"])
    b.set_bolt("audit", RecordSink("sinks"), 2).all_grouping("split")
    b.set_bolt("echo-sink", RecordSink("sinks"), 1).shuffle_grouping("echo")
    b.set_bolt("direct", DirectRelay()).shuffle_grouping("split")
    b.set_bolt("direct-sink", RecordSink("sinks"), 2).direct_grouping("direct", "direct")
    conf = Config().set_num_workers(workers)
    _submit(cluster, b, conf, tracked=True)
    wait_until(lambda: len(logged("acked")) == len(sentences), WAIT, message="every sentence acked")
    acked = logged("acked")
    assert sorted(mid for mid, _, _ in acked) == sorted(sentences)  # each exactly once
    for mid, done, want in acked:
        assert done == want, f"{mid} acked after {done} of its {want} descendants were processed"
    cluster.wait_idle("t", WAIT)  # nothing queued or being processed: no ack or fail can come any more
    assert len(logged("acked")) == len(sentences) and not logged("failed"), "an extra ack or fail"


def test_tree_not_acked_while_one_anchored_descendant_is_unacked(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("fan", ScriptBolt("fan", copies=3, decide=False), 2).shuffle_grouping("spout")
    b.set_bolt("mid", ScriptBolt("mid", copies=1, decide=False)).shuffle_grouping("fan")
    b.set_bolt("sink", ScriptBolt("sink")).shuffle_grouping("mid")
    _submit(cluster, b)
    # "hold-1" fans out to hold-1.0.0, hold-1.1.0, hold-1.2.0 at the sink: all three are held
    feeder.feed(["hold-1"], msg_id=1)
    wait_until(lambda: len(held("sink")) == 3, WAIT)
    barrier(feeder, "m1")
    assert feeder.acked == ["m1"] and feeder.failed == []
    collectors = held("sink")
    # ack two of the three leaves: still pending
    collectors[0][0].ack(collectors[0][1])
    collectors[1][0].ack(collectors[1][1])
    barrier(feeder, "m2")
    assert feeder.acked == ["m1", "m2"] and feeder.failed == []
    # the last leaf completes the tree
    collectors[2][0].ack(collectors[2][1])
    wait_until(lambda: 1 in feeder.acked, WAIT)
    barrier(feeder, "m3")
    assert feeder.acked == ["m1", "m2", 1, "m3"]
    assert feeder.failed == []


def test_ack_of_intermediate_tuple_does_not_complete_tree_before_leaf(cluster):
    """A bolt that acks its input before its anchored child is processed does not complete
    the tree; the child's ack does."""
    feeder, b = feeder_builder()
    b.set_bolt("a", ScriptBolt("a", copies=1, decide=False)).shuffle_grouping("spout")
    b.set_bolt("b", ScriptBolt("b", copies=1, decide=False)).shuffle_grouping("a")
    b.set_bolt("c", HoldBolt("c")).shuffle_grouping("b")
    _submit(cluster, b, tracked=True)
    feeder.feed(["x"], msg_id="x")
    wait_until(lambda: len(held("c")) == 1, WAIT)
    assert logged("c") == ["x.0.0"]
    # no marker can pass "c" (it holds everything): once nothing is in flight, the acks of "a" and
    # "b" reached the acker and whatever it decided reached the spout
    cluster.wait_idle("t", WAIT)
    assert feeder.acked == [], "acked while the leaf is unacked"
    collector, tup = held("c")[0]
    collector.ack(tup)
    wait_until(lambda: feeder.acked == ["x"], WAIT)
    cluster.wait_idle("t", WAIT)
    assert feeder.acked == ["x"] and feeder.failed == [], "not exactly one ack"


# -- multi-anchoring ------------------------------------------------------------------------------


def test_multi_anchored_join_acks_both_spout_tuples_only_when_joined_tuple_acked(cluster):
    feeder = _submit_via(cluster, "join", JoinBolt(), global_grouping=True)
    feeder.feed(["hold-left"], msg_id="L")
    feeder.feed(["right"], msg_id="R")  # the joined value "hold-left+right" is held by the sink
    wait_until(lambda: len(held("sink")) == 1, WAIT)
    assert logged("joined") == ["hold-left+right"]
    barrier(feeder, "m1")
    assert feeder.acked == ["m1"], "a spout tuple was acked although the joined tuple is unacked"
    collector, tup = held("sink")[0]
    collector.ack(tup)
    wait_until(lambda: set(feeder.acked) == {"m1", "L", "R"}, WAIT)
    barrier(feeder, "m2")
    assert Counter(feeder.acked) == Counter(["m1", "L", "R", "m2"])
    assert feeder.failed == []


def test_multi_anchored_join_failing_joined_tuple_fails_both(cluster):
    feeder = _submit_via(cluster, "join", JoinBolt(), global_grouping=True)
    feeder.feed(["hold-a"], msg_id="A")
    feeder.feed(["b"], msg_id="B")
    wait_until(lambda: len(held("sink")) == 1, WAIT)
    collector, tup = held("sink")[0]
    collector.fail(tup)
    wait_until(lambda: sorted(feeder.failed) == ["A", "B"], WAIT)
    barrier(feeder, "m1")
    assert feeder.acked == ["m1"]
    assert sorted(feeder.failed) == ["A", "B"]
    # acking the failed tuple afterwards changes nothing
    collector.ack(tup)
    barrier(feeder, "m2")
    assert feeder.acked == ["m1", "m2"] and sorted(feeder.failed) == ["A", "B"]


def test_multi_anchoring_across_workers_and_ackers(cluster):
    feeder = FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("spout", feeder, 2)
    b.set_bolt("join", JoinBolt()).global_grouping("spout")
    b.set_bolt("sink", ScriptBolt("sink"), 2).shuffle_grouping("join")
    _submit(cluster, b, Config().set_num_workers(3).set_num_ackers(3), tracked=True)
    # pairs (hold-i, i): each joined tuple is held; then half are acked and half failed
    for i in range(6):
        feeder.feed([f"hold-{i}"], msg_id=f"h{i}")
        wait_until(lambda: len(logged("joined")) == i, WAIT)
        feeder.feed([f"{i}"], msg_id=f"p{i}")
        wait_until(lambda: len(held("sink")) == i + 1, WAIT)
    for collector, tup in held("sink"):
        left, right = tup.values[0].split("+")
        if int(left.split("-")[1]) % 2:
            collector.fail(tup)
        else:
            collector.ack(tup)
    wait_until(lambda: len(feeder.acked) + len(feeder.failed) == 12, WAIT)
    assert sorted(feeder.acked) == sorted(f"{k}{i}" for i in (0, 2, 4) for k in "hp")
    assert sorted(feeder.failed) == sorted(f"{k}{i}" for i in (1, 3, 5) for k in "hp")
    cluster.wait_idle("t", WAIT)  # nothing in flight: no second ack or fail can come
    assert len(feeder.acked) + len(feeder.failed) == 12, "not exactly one ack or fail each"


def test_multi_anchoring_to_two_inputs_of_the_same_tree(cluster):
    """Anchoring one output to two tuples of the same tree keeps the XOR sound."""
    feeder, b = feeder_builder()
    b.set_bolt("fan", ScriptBolt("fan", copies=2, decide=False)).shuffle_grouping("spout")
    b.set_bolt("join", JoinBolt()).global_grouping("fan")
    b.set_bolt("sink", ScriptBolt("sink")).shuffle_grouping("join")
    _submit(cluster, b)
    feeder.feed(["hold"], msg_id="T")  # fan -> hold.0, hold.1 -> join -> "hold.0+hold.1" held
    wait_until(lambda: len(held("sink")) == 1, WAIT)
    barrier(feeder, "m1")
    assert feeder.acked == ["m1"]
    collector, tup = held("sink")[0]
    collector.ack(tup)
    wait_until(lambda: "T" in feeder.acked, WAIT)
    barrier(feeder, "m2")
    assert feeder.acked == ["m1", "T", "m2"] and feeder.failed == []


# -- fail, untracked emits, no ackers ------------------------------------------------------------


def test_explicit_fail_in_a_bolt_fails_the_spout_tuple(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("mid", ScriptBolt("mid", copies=2, decide=False)).shuffle_grouping("spout")
    b.set_bolt("sink", ScriptBolt("sink"), 2).shuffle_grouping("mid")
    _submit(cluster, b)
    feeder.feed(["ok"], msg_id=1)
    feeder.feed(["fail-me"], msg_id=2)  # both children fail at the sink
    feeder.feed(["ok2"], msg_id=3)
    wait_until(lambda: feeder.failed == [2] and sorted(feeder.acked) == [1, 3], WAIT)
    barrier(feeder, "m")
    assert feeder.failed == [2], "a tree with two failed tuples must be failed exactly once"
    assert sorted(feeder.acked, key=str) == sorted([1, 3, "m"], key=str)


def test_fail_of_one_branch_then_ack_of_the_other_gives_only_fail(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("mid", ScriptBolt("mid", copies=2, decide=False)).shuffle_grouping("spout")
    b.set_bolt("sink", HoldBolt("sink")).shuffle_grouping("mid")
    _submit(cluster, b, tracked=True)
    feeder.feed(["x"], msg_id="X")
    wait_until(lambda: len(held("sink")) == 2, WAIT)
    (c0, t0), (c1, t1) = held("sink")
    c0.fail(t0)
    wait_until(lambda: feeder.failed == ["X"], WAIT)
    c1.ack(t1)  # from a thread not the executor's: handed on before it returns, so wait_idle sees it
    c1.fail(t1)
    cluster.wait_idle("t", WAIT)
    assert feeder.failed == ["X"] and feeder.acked == [], "not exactly one fail and no ack"


def test_unanchored_bolt_emits_are_not_tracked(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("mid", ScriptBolt("mid", copies=2, anchored=False, decide=False)).shuffle_grouping("spout")
    b.set_bolt("sink", ScriptBolt("sink")).shuffle_grouping("mid")
    _submit(cluster, b)
    # the sink holds or fails the unanchored children: the spout tuples are acked anyway
    feeder.feed(["hold-a"], msg_id="a")
    feeder.feed(["fail-b"], msg_id="b")
    wait_until(lambda: sorted(feeder.acked) == ["a", "b"], WAIT)
    wait_until(lambda: len(logged("sink")) == 4, WAIT)
    barrier(feeder, "m")
    assert sorted(feeder.acked) == ["a", "b", "m"]
    assert feeder.failed == []
    # failing a held untracked tuple later changes nothing either
    for collector, tup in held("sink"):
        collector.fail(tup)
    barrier(feeder, "m2")
    assert sorted(feeder.acked) == ["a", "b", "m", "m2"] and feeder.failed == []


def test_emits_without_msg_id_get_no_ack_or_fail(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("mid", ScriptBolt("mid", copies=1, decide=False)).shuffle_grouping("spout")
    b.set_bolt("sink", ScriptBolt("sink")).shuffle_grouping("mid")
    _submit(cluster, b)
    feeder.feed(["plain"])
    feeder.feed(["fail-plain"])
    feeder.feed(["hold-plain"])
    wait_until(lambda: len(logged("sink")) == 3, WAIT)
    barrier(feeder, "m")
    assert feeder.acked == ["m"]
    assert feeder.failed == []


def test_with_zero_ackers_msg_ids_are_acked_at_once(cluster):
    feeder = _submit_to_sink(cluster, Config().set_num_ackers(0), HoldBolt("sink"))
    assert executors_of(cluster, "t", "__acker") == []
    for i in range(5):
        feeder.feed([f"v{i}"], msg_id=i)
    # acked although the bolt never acks
    wait_until(lambda: feeder.acked == [0, 1, 2, 3, 4], WAIT)
    wait_until(lambda: len(held("sink")) == 5, WAIT)
    for collector, tup in held("sink"):
        collector.fail(tup)
    feeder.feed(["after"], msg_id="after")
    wait_until(lambda: "after" in feeder.acked, WAIT)
    assert feeder.acked == [0, 1, 2, 3, 4, "after"]
    assert feeder.failed == []


class DirectSpout(Spout):
    """Emits each value of a list with emit_direct to the last task of "hold", tracked."""

    def declare_output_fields(self, declarer):
        declarer.declare(["v"], direct=True)

    def open(self, conf, context, collector):
        self.collector = collector
        self.target = context.get_component_tasks("hold")[-1]
        self.todo = ["d0", "d1"]

    def next_tuple(self):
        if self.todo:
            value = self.todo.pop(0)
            self.collector.emit_direct(self.target, [value], msg_id=value)

    def ack(self, msg_id):
        record("direct.acked", msg_id)

    def fail(self, msg_id):
        record("direct.failed", msg_id)

    def is_exhausted(self):
        return not self.todo


def test_spout_emit_direct_with_msg_id_is_tracked(cluster):
    b = TopologyBuilder()
    b.set_spout("spout", DirectSpout())
    b.set_bolt("hold", HoldBolt("hold"), 3).direct_grouping("spout")
    _submit(cluster, b, tracked=True)
    wait_until(lambda: len(held("hold")) == 2, WAIT)
    assert logged("hold.tasks") == [max(tasks_of(cluster, "t", "hold"))] * 2
    cluster.wait_idle("t", WAIT)
    assert logged("direct.acked") == [], "acked before the bolt acks"
    (c0, t0), (c1, t1) = held("hold")
    c0.ack(t0)
    c1.fail(t1)
    wait_until(lambda: logged("direct.acked") == ["d0"] and logged("direct.failed") == ["d1"], WAIT)


def test_msg_id_with_no_subscriber_is_acked_at_once(cluster):
    feeder, b = feeder_builder()  # nobody subscribes
    _submit(cluster, b)
    feeder.feed(["x"], msg_id="x")
    wait_until(lambda: feeder.acked == ["x"], WAIT)
    assert feeder.failed == []


# -- BasicBolt -----------------------------------------------------------------------------------


def test_basic_bolt_auto_anchors_and_auto_acks(cluster):
    feeder = _submit_via(cluster, "basic", Doubler())
    # the sink holds "hold.a" and "hold.b": the tree stays pending although the basic bolt returned
    feeder.feed(["hold"], msg_id="H")
    feeder.feed(["ok"], msg_id="K")
    wait_until(lambda: "K" in feeder.acked, WAIT)
    wait_until(lambda: len(held("sink")) == 2, WAIT)  # "hold.a" and "hold.b"
    barrier(feeder, "m")
    assert "H" not in feeder.acked, "emits of a BasicBolt must be anchored to its input"
    for collector, tup in held("sink"):
        collector.ack(tup)
    wait_until(lambda: "H" in feeder.acked, WAIT)
    assert sorted(logged("sink")) == sorted(["hold.a", "hold.b", "ok.a", "ok.b", "marker-m.a", "marker-m.b"])
    assert feeder.failed == []


def test_basic_bolt_failed_exception_fails_input_without_error(cluster):
    feeder = _submit_via(cluster, "basic", Doubler())
    feeder.feed(["failx"], msg_id="F")
    wait_until(lambda: feeder.failed == ["F"], WAIT)
    barrier(feeder, "m")
    assert feeder.failed == ["F"] and feeder.acked == ["m"]
    assert errors_of(cluster, "t", "basic") == []


def test_basic_bolt_other_exception_fails_input_and_records_error(cluster):
    feeder = _submit_via(cluster, "basic", Doubler(), sink=False)
    feeder.feed(["boom"], msg_id="B")
    wait_until(lambda: feeder.failed == ["B"], WAIT)
    errors = errors_of(cluster, "t", "basic")
    assert len(errors) == 1
    assert "boom in basic bolt" in errors[0]["error"]
    # the executor keeps running
    barrier(feeder, "m")


def test_rich_bolt_exception_fails_input_and_records_error(cluster):
    feeder = _submit_via(cluster, "bad", RaisingBolt(), sink=False)
    feeder.feed(["raise"], msg_id="R")
    wait_until(lambda: feeder.failed == ["R"], WAIT)
    barrier(feeder, "m")
    assert feeder.failed == ["R"]
    errors = errors_of(cluster, "t", "bad")
    assert len(errors) == 1 and "ValueError" in errors[0]["error"] and "bad value raise" in errors[0]["error"]


class BatchAckingBolt(Bolt):
    """Holds its inputs and acks them in finish_batch, as a sink writing a batch at once does;
    its first finish_batch raises."""

    def prepare(self, conf, context, collector):
        self.collector, self.held, self.calls = collector, [], 0

    def declare_output_fields(self, declarer):
        pass

    def execute(self, tup):
        self.held.append(tup)

    def finish_batch(self):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("first finish_batch fails")
        for tup in self.held:
            self.collector.ack(tup)
        self.held = []


def test_a_bolt_acks_its_inputs_in_finish_batch_and_an_error_there_is_recorded(cluster):
    feeder = _submit_via(cluster, "batch", BatchAckingBolt(), sink=False)
    feeder.feed(["w0"], msg_id=0)
    wait_until(lambda: errors_of(cluster, "t", "batch"), WAIT)
    [error] = errors_of(cluster, "t", "batch")
    assert "first finish_batch fails" in error["error"]
    assert feeder.acked == []  # held by the bolt, which goes on
    for i in range(1, 20):
        feeder.feed([f"w{i}"], msg_id=i)
    wait_until(lambda: sorted(feeder.acked) == list(range(20)), WAIT)
    assert feeder.failed == []


class RaisingBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        if tup.values[0] == "raise":
            raise ValueError("bad value raise")
        self.collector.ack(tup)


# -- timeouts (simulated time) -------------------------------------------------------------------


def _submit_timing_out(cluster, T, workers=1):
    """Submit (as "t") spout -> "sink" (a ScriptBolt) with message timeout ``T``, and one
    acker, so that a marker's ack still follows everything sent before it."""
    conf = Config().set_message_timeout_secs(T).set_num_workers(workers).set_num_ackers(1)
    return _submit_to_sink(cluster, conf, ScriptBolt("sink"))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.simulated_time
def test_timeout_expires_between_t_and_2t(cluster, workers):
    T = 10
    feeder = _submit_timing_out(cluster, T, workers)
    feeder.feed(["hold"], msg_id="H")
    wait_until(lambda: len(held("sink")) == 1, WAIT)
    advance_time(T * 0.9)
    barrier(feeder, "m1")
    assert feeder.failed == [], "timed out before T"
    advance_time(T * 1.1 + 0.5)  # now past 2T
    wait_until(lambda: feeder.failed == ["H"], WAIT, message="fail after 2T")
    barrier(feeder, "m2")
    assert feeder.failed == ["H"]
    assert feeder.acked == ["m1", "m2"]
    # a late ack of the timed-out tuple gives no ack
    collector, tup = held("sink")[0]
    collector.ack(tup)
    barrier(feeder, "m3")
    assert feeder.acked == ["m1", "m2", "m3"] and feeder.failed == ["H"]
    assert component_info(cluster, "t", "spout")["failed"] == 1


@pytest.mark.simulated_time
def test_timeout_of_a_tuple_emitted_mid_period(cluster):
    T = 10
    feeder = _submit_timing_out(cluster, T)
    advance_time(4)
    feeder.feed(["hold"], msg_id="H")  # emitted at t = 4
    wait_until(lambda: len(held("sink")) == 1, WAIT)
    advance_time(T - 0.5)  # t = 13.5, 9.5 after the emit (a rotation happened at 10)
    barrier(feeder, "m1")
    assert feeder.failed == []
    advance_time(T)  # t = 23.5, 19.5 after the emit
    wait_until(lambda: feeder.failed == ["H"], WAIT)
    barrier(feeder, "m2")
    assert feeder.failed == ["H"] and feeder.acked == ["m1", "m2"]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.simulated_time
def test_timeout_in_one_big_advance_fails_once(cluster, workers):
    T = 5
    feeder = _submit_timing_out(cluster, T, workers)
    for i in range(3):
        feeder.feed([f"hold-{i}"], msg_id=i)
    wait_until(lambda: len(held("sink")) == 3, WAIT)
    advance_time(10 * T)
    wait_until(lambda: sorted(feeder.failed) == [0, 1, 2], WAIT)
    for collector, tup in held("sink"):
        collector.fail(tup)
    barrier(feeder, "m")
    assert sorted(feeder.failed) == [0, 1, 2], "a timed-out tuple must not be failed again"
    assert feeder.acked == ["m"]


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.simulated_time
def test_reset_timeout_delays_the_timeout(cluster, workers):
    T = 10
    feeder = _submit_timing_out(cluster, T, workers)
    feeder.feed(["hold-kept"], msg_id="kept")
    feeder.feed(["hold-lost"], msg_id="lost")
    wait_until(lambda: len(held("sink")) == 2, WAIT)
    by_value = {tup.values[0]: (c, tup) for c, tup in held("sink")}
    advance_time(15)  # one rotation (at 10): both are now in the older bucket
    collector, tup = by_value["hold-kept"]
    collector.reset_timeout(tup)
    barrier(feeder, "m1")  # the reset reached the spout before this marker's ack
    assert feeder.failed == []
    advance_time(6)  # t = 21: the rotation at 20 expires "lost" only
    wait_until(lambda: feeder.failed == ["lost"], WAIT)
    barrier(feeder, "m2")
    assert feeder.failed == ["lost"], "reset_timeout did not delay the timeout"
    advance_time(10)  # t = 31: the rotation at 30 expires "kept"
    wait_until(lambda: feeder.failed == ["lost", "kept"], WAIT)
    collector.ack(tup)
    barrier(feeder, "m3")
    assert feeder.acked == ["m1", "m2", "m3"]
    assert feeder.failed == ["lost", "kept"]


@pytest.mark.simulated_time
def test_simulated_clock_stands_still_in_real_time(cluster):
    T = 0.1
    feeder = _submit_to_sink(cluster, Config().set_message_timeout_secs(T), HoldBolt("sink"))
    feeder.feed(["x"], msg_id="x")
    wait_until(lambda: len(held("sink")) == 1, WAIT)
    # the claim is about real time passing: only letting some pass can show it
    stays(lambda: feeder.failed == [], 0.5, "no timeout while simulated time stands still")
    advance_time(2 * T + 0.01)
    wait_until(lambda: feeder.failed == ["x"], WAIT)


def test_timeout_real_clock_not_before_t(cluster):
    T = 0.4
    feeder = _submit_to_sink(cluster, Config().set_message_timeout_secs(T), HoldBolt("sink"))
    start = time.monotonic()  # before the emit: a slow machine can only lengthen what is measured
    feeder.feed(["x"], msg_id="x")
    wait_until(lambda: len(held("sink")) == 1, WAIT)
    wait_until(lambda: feeder.failed == ["x"], WAIT, message="timed out by the real clock alone")
    # the real clock's pace is the claim, which only real time shows (T to 2T exactly, in simulated time:
    # test_timeout_expires_between_t_and_2t)
    elapsed = time.monotonic() - start
    assert elapsed >= T * 0.9 - 0.05, f"failed after {elapsed:.3f}s, before the timeout {T}s"
    assert feeder.acked == []


# -- max spout pending -----------------------------------------------------------------------------


def _pending_topology(spout_parallelism=1, via_declarer=None):
    b = TopologyBuilder()
    d = b.set_spout("spout", CountingSpout("spout"), spout_parallelism)
    if via_declarer is not None:
        d.set_max_spout_pending(via_declarer)
    b.set_bolt("hold", HoldBolt("hold")).shuffle_grouping("spout")
    return b.create_topology()


@pytest.mark.parametrize("via", ["config", "declarer"])
def test_max_spout_pending_throttles_next_tuple(cluster, via):
    if via == "config":
        cluster.submit_topology("t", Config().set_max_spout_pending(3), _pending_topology())
    else:
        cluster.submit_topology("t", Config(), _pending_topology(via_declarer=3))
    wait_until(lambda: len(held("hold")) == 3, WAIT)
    # a throttled spout is never idle (not exhausted) and its skipped calls leave no trace: watch it
    stays(lambda: len(logged("spout")) == 3, 0.3, "no 4th emit while 3 are pending")
    collector, tup = held("hold")[0]
    collector.ack(tup)
    wait_until(lambda: len(logged("spout.acked")) == 1, WAIT)
    wait_until(lambda: len(logged("spout")) == 4, WAIT)
    stays(lambda: len(logged("spout")) == 4, 0.3, "exactly one more emit after one ack")  # throttled: as above
    # failing one frees a slot too
    collector, tup = held("hold")[1]
    collector.fail(tup)
    wait_until(lambda: len(logged("spout")) == 5, WAIT)
    stays(lambda: len(logged("spout")) == 5, 0.2, "exactly one more emit after one fail")  # throttled: as above
    assert logged("spout.failed") == [held("hold")[1][1].values[0]]


@pytest.mark.simulated_time
def test_timeouts_free_max_spout_pending_slots(cluster):
    T = 10
    cluster.submit_topology("t", Config().set_max_spout_pending(2).set_message_timeout_secs(T),
                            _pending_topology())
    wait_until(lambda: len(held("hold")) == 2, WAIT)
    # a throttled spout is never idle (not exhausted) and its skipped calls leave no trace: watch it
    stays(lambda: len(logged("spout")) == 2, 0.2, "throttled at 2 pending")
    advance_time(2 * T + 1)
    wait_until(lambda: len(logged("spout.failed")) == 2, WAIT)
    wait_until(lambda: len(logged("spout")) == 4, WAIT)
    stays(lambda: len(logged("spout")) == 4, 0.2, "throttled again at 2 pending")  # as above
    assert logged("spout.failed") == logged("spout")[:2]


def test_max_spout_pending_is_per_spout_task(cluster):
    cluster.submit_topology("t", Config().set_max_spout_pending(3), _pending_topology(spout_parallelism=2))
    wait_until(lambda: len(held("hold")) == 6, WAIT)
    # a throttled spout is never idle (not exhausted) and its skipped calls leave no trace: watch it
    stays(lambda: len(logged("spout")) == 6, 0.3, "3 pending per task")
    per_task = Counter(v.split("-")[0] for v in logged("spout"))
    assert sorted(per_task.values()) == [3, 3]
