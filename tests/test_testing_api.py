"""squall.testing: complete_topology, read_tuples, multiset_eq, FeederSpout, simulated time,
wait_until."""

from __future__ import annotations

import threading

import pytest

from helpers import WAIT, BasicSink, HoldBolt, ScriptBolt, feeder_builder, held
import squall.testing as testing_module
from squall import (
    BasicBolt, Bolt, Config, InvalidTopologyError, Spout, TopologyBuilder,
)
from squall.testing import (
    FeederSpout, advance_time, complete_topology, multiset_eq, read_tuples, simulated_time, wait_until,
)
from squall.utils import time as clock

# -- components ----------------------------------------------------------------------------


class NumberSpout(Spout):
    """A real spout the tests mock out (its own next_tuple would emit something else)."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        self.collector.emit([-1])


class TwoStreamSpout(Spout):
    outputs = {"nums": ["n"], "words": ["w", "k"]}

    def next_tuple(self):
        pass


class Double(BasicBolt):
    outputs = ["n"]

    def execute(self, tup, collector):
        collector.emit([tup["n"] * 2])


class Square(BasicBolt):
    outputs = ["n", "sq"]

    def execute(self, tup, collector):
        collector.emit([tup[0], tup[0] * tup[0]])


class Upper(BasicBolt):
    outputs = ["w"]

    def execute(self, tup, collector):
        collector.emit([tup["w"].upper()])


class WordSplit(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        for word in tup[0].split():
            collector.emit([word])


class RunningCount(Bolt):
    """Counts words per task; emits (word, running count) anchored to the input."""

    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts = {}

    def execute(self, tup):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)


class Router(Bolt):
    """Emits even numbers on 'even', odd ones on 'odd', and each one direct to the last 'direct' task."""

    def declare_output_fields(self, declarer):
        declarer.declare_stream("even", ["n"])
        declarer.declare_stream("odd", ["n"])
        declarer.declare_stream("direct", ["n"], direct=True)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.target = context.get_component_tasks("direct-sink")[-1]

    def execute(self, tup):
        n = tup[0]
        self.collector.emit([n], anchors=tup, stream="even" if n % 2 == 0 else "odd")
        self.collector.emit_direct(self.target, [n], anchors=tup, stream="direct")
        self.collector.ack(tup)


class FiniteSpout(Spout):
    """An unmocked spout that knows when it is done."""

    outputs = ["n"]

    def __init__(self, count):
        self.count = count

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0

    def next_tuple(self):
        if self.i < self.count:
            self.collector.emit([100 + self.i], msg_id=self.i)
            self.i += 1

    def is_exhausted(self):
        return self.i >= self.count


class EndlessSpout(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        pass

    def is_exhausted(self):
        return False




# -- complete_topology ---------------------------------------------------------------------------


def _numbers_topology(spout_parallelism=1, bolt_parallelism=1):
    b = TopologyBuilder()
    b.set_spout("spout", NumberSpout(), spout_parallelism)
    b.set_bolt("double", Double(), bolt_parallelism).shuffle_grouping("spout")
    b.set_bolt("square", Square(), bolt_parallelism).shuffle_grouping("double")
    b.set_bolt("sink", BasicSink()).shuffle_grouping("square")
    return b.create_topology()


def test_complete_topology_default_stream_mock_captures_every_component():
    results = complete_topology(_numbers_topology(), mocked_sources={"spout": [[1], [2], [3]]})
    assert read_tuples(results, "spout") == [[1], [2], [3]]  # spouts are captured too, in order
    assert multiset_eq(read_tuples(results, "double"), [[2], [4], [6]])
    assert multiset_eq(read_tuples(results, "square"), [[2, 4], [4, 16], [6, 36]])
    assert read_tuples(results, "sink") == []
    assert -1 not in [v[0] for v in read_tuples(results, "spout")], "the mocked spout's own code ran"


def test_complete_topology_accepts_tuples_and_values_as_rows():
    results = complete_topology(_numbers_topology(), mocked_sources={"spout": [(5,), [6]]})
    assert read_tuples(results, "spout") == [[5], [6]]
    assert multiset_eq(read_tuples(results, "double"), [[10], [12]])


def test_complete_topology_parallel_mocked_spout_and_bolts():
    data = [[i] for i in range(50)]
    results = complete_topology(_numbers_topology(spout_parallelism=3, bolt_parallelism=4),
                                mocked_sources={"spout": data})
    assert multiset_eq(read_tuples(results, "spout"), data)
    assert multiset_eq(read_tuples(results, "double"), [[2 * i] for i in range(50)])
    assert multiset_eq(read_tuples(results, "square"), [[2 * i, 4 * i * i] for i in range(50)])


def test_complete_topology_per_stream_mock():
    b = TopologyBuilder()
    b.set_spout("spout", TwoStreamSpout())
    b.set_bolt("double", Double()).shuffle_grouping("spout", "nums")
    b.set_bolt("upper", Upper(), 2).fields_grouping("spout", ["w"], "words")
    results = complete_topology(
        b.create_topology(),
        mocked_sources={"spout": {"nums": [[1], [2]], "words": [["a", 1], ["b", 2], ["c", 3]]}},
    )
    assert read_tuples(results, "spout", "nums") == [[1], [2]]
    assert read_tuples(results, "spout", "words") == [["a", 1], ["b", 2], ["c", 3]]
    assert read_tuples(results, "spout") == []  # nothing on the default stream
    assert multiset_eq(read_tuples(results, "double"), [[2], [4]])
    assert multiset_eq(read_tuples(results, "upper"), [["A"], ["B"], ["C"]])


def test_complete_topology_captures_every_stream_and_direct_emits():
    b = TopologyBuilder()
    b.set_spout("spout", NumberSpout())
    b.set_bolt("router", Router(), 2).shuffle_grouping("spout")
    b.set_bolt("even-sink", BasicSink()).shuffle_grouping("router", "even")
    b.set_bolt("odd-sink", BasicSink()).shuffle_grouping("router", "odd")
    b.set_bolt("direct-sink", BasicSink(), 2).direct_grouping("router", "direct")
    results = complete_topology(b.create_topology(), mocked_sources={"spout": [[i] for i in range(10)]})
    assert multiset_eq(read_tuples(results, "router", "even"), [[i] for i in range(0, 10, 2)])
    assert multiset_eq(read_tuples(results, "router", "odd"), [[i] for i in range(1, 10, 2)])
    assert multiset_eq(read_tuples(results, "router", "direct"), [[i] for i in range(10)])


def test_complete_topology_with_unmocked_spouts_that_implement_is_exhausted():
    feeder = FeederSpout(["n"])
    for i in range(3):
        feeder.feed([i])
    b = TopologyBuilder()
    b.set_spout("finite", FiniteSpout(4))
    b.set_spout("feeder", feeder)
    b.set_spout("mocked", NumberSpout())
    b.set_bolt("double", Double()).shuffle_grouping("finite").shuffle_grouping("feeder").shuffle_grouping("mocked")
    results = complete_topology(b.create_topology(), mocked_sources={"mocked": [[7]]})
    assert read_tuples(results, "finite") == [[100], [101], [102], [103]]
    assert read_tuples(results, "feeder") == [[0], [1], [2]]
    assert read_tuples(results, "mocked") == [[7]]
    assert multiset_eq(read_tuples(results, "double"),
                       [[200], [202], [204], [206], [0], [2], [4], [14]])


def test_complete_topology_same_results_with_two_workers():
    sentences = [["the cow jumped over the moon"], ["an apple a day"], ["the moon the cow"],
                 ["four score and seven"], ["the end"]] * 3

    def topology():
        b = TopologyBuilder()
        b.set_spout("spout", NumberSpout(), 2)
        b.set_bolt("split", WordSplit(), 3).shuffle_grouping("spout")
        b.set_bolt("count", RunningCount(), 3).fields_grouping("split", ["word"])
        return b.create_topology()

    one = complete_topology(topology(), mocked_sources={"spout": sentences})
    two = complete_topology(topology(), mocked_sources={"spout": sentences},
                            conf=Config().set_num_workers(2))
    for component in ("spout", "split", "count"):
        assert multiset_eq(read_tuples(one, component), read_tuples(two, component)), component
    words = [w for (s,) in sentences for w in s.split()]
    assert multiset_eq(read_tuples(two, "split"), [[w] for w in words])
    # fields grouping: every running count of a word 1..n appears exactly once
    expected = []
    for word in set(words):
        expected += [[word, i] for i in range(1, words.count(word) + 1)]
    assert multiset_eq(read_tuples(two, "count"), expected)
    assert multiset_eq(read_tuples(one, "count"), expected)


def test_complete_topology_with_acking_off():
    results = complete_topology(_numbers_topology(), mocked_sources={"spout": [[1], [2]]},
                                conf=Config().set_num_ackers(0))
    assert multiset_eq(read_tuples(results, "square"), [[2, 4], [4, 16]])


def test_unmocked_spout_without_is_exhausted_is_rejected():
    with pytest.raises(InvalidTopologyError, match="'spout'") as info:
        complete_topology(_numbers_topology())
    assert isinstance(info.value, ValueError)


def test_mocked_source_that_is_not_a_spout_is_rejected():
    with pytest.raises(InvalidTopologyError, match="'double'"):
        complete_topology(_numbers_topology(), mocked_sources={"spout": [[1]], "double": [[1]]})
    with pytest.raises(InvalidTopologyError, match="'nosuch'"):
        complete_topology(_numbers_topology(), mocked_sources={"spout": [[1]], "nosuch": [[1]]})


def test_mocked_data_that_does_not_fit_the_declaration_is_rejected():
    with pytest.raises(InvalidTopologyError, match="'spout'"):
        complete_topology(_numbers_topology(), mocked_sources={"spout": [[1, 2]]})
    with pytest.raises(InvalidTopologyError, match="'nostream'"):
        complete_topology(_numbers_topology(), mocked_sources={"spout": {"nostream": [[1]]}})


@pytest.mark.timeout(20)  # stopped once given up on: not after the message timeout (30 s) a kill waits by default
def test_complete_topology_times_out_on_a_spout_that_is_never_exhausted():
    b = TopologyBuilder()
    b.set_spout("endless", EndlessSpout())
    b.set_bolt("sink", BasicSink()).shuffle_grouping("endless")
    with pytest.raises(TimeoutError, match=r"not idle after 0\.5s \(spouts not exhausted: \['endless'\]"):
        complete_topology(b.create_topology(), timeout_secs=0.5)


# -- read_tuples / multiset_eq ----------------------------------------------------------------------


def test_read_tuples():
    results = {"spout": {"default": [[1], [2]], "other": [["x", 1]]}, "bolt": {}}
    assert read_tuples(results, "spout") == [[1], [2]]
    assert read_tuples(results, "spout", "other") == [["x", 1]]
    assert read_tuples(results, "spout", stream_id="other") == [["x", 1]]
    assert read_tuples(results, "spout", "missing") == []
    assert read_tuples(results, "bolt") == []
    with pytest.raises(KeyError, match="nosuch"):
        read_tuples(results, "nosuch")
    # a copy: changing it does not change the results
    read_tuples(results, "spout")[0].append(99)
    assert results["spout"]["default"] == [[1], [2]]


def test_multiset_eq():
    assert multiset_eq([[1], [2], [2]], [[2], [1], [2]])
    assert not multiset_eq([[1], [2], [2]], [[1], [2]])
    assert not multiset_eq([[1], [2]], [[1], [2], [2]])
    assert not multiset_eq([[1], [1], [2]], [[1], [2], [2]])
    assert multiset_eq([], [])
    assert multiset_eq([["a", [1, 2]], ["b", {"k": [3]}]], [["b", {"k": [3]}], ["a", [1, 2]]])
    assert not multiset_eq([["a", [1, 2]]], [["a", [2, 1]]])
    assert multiset_eq(iter([[1], [2]]), ([2], [1]))


# -- FeederSpout -----------------------------------------------------------------------------------


def test_feeder_spout_acked_lists_msg_ids_in_call_order(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("hold", HoldBolt("hold")).shuffle_grouping("spout")
    cluster.submit_topology("t", Config(), b.create_topology())
    for i in range(4):
        feeder.feed([f"v{i}"], msg_id=i)
    wait_until(lambda: len(held("hold")) == 4, WAIT)
    assert feeder.acked == []
    # ack in the reverse order of feeding, one at a time
    for expected, (collector, tup) in zip(([3], [3, 2], [3, 2, 1], [3, 2, 1, 0]), reversed(held("hold"))):
        collector.ack(tup)
        wait_until(lambda: feeder.acked == expected, WAIT)
    assert feeder.failed == []


def test_feeder_spout_failed_list_and_untracked_feeds(cluster):
    feeder, b = feeder_builder(["v", "w"])
    b.set_bolt("prefix", ScriptBolt("prefix"), 2).shuffle_grouping("spout")
    cluster.submit_topology("t", Config(), b.create_topology())
    feeder.feed(["fail-1", 0], msg_id="f1")
    wait_until(lambda: feeder.failed == ["f1"], WAIT)
    feeder.feed(["fail-2", 0], msg_id="f2")
    wait_until(lambda: feeder.failed == ["f1", "f2"], WAIT)
    feeder.feed(["fail-untracked", 0])  # no msg id: neither list
    feeder.feed(["ok", 0], msg_id="ok")
    wait_until(lambda: feeder.acked == ["ok"], WAIT)
    assert feeder.failed == ["f1", "f2"]
    with pytest.raises(ValueError):
        feeder.feed(["only one value"])


def test_two_feeder_spouts_have_separate_channels(cluster):
    f1, f2 = FeederSpout(["v"]), FeederSpout(["v"])
    b = TopologyBuilder()
    b.set_spout("one", f1)
    b.set_spout("two", f2)
    b.set_bolt("prefix", ScriptBolt("prefix")).shuffle_grouping("one").shuffle_grouping("two")
    cluster.submit_topology("t", Config(), b.create_topology())
    f1.feed(["a"], msg_id="a")
    f2.feed(["fail-b"], msg_id="b")
    wait_until(lambda: f1.acked == ["a"] and f2.failed == ["b"], WAIT)
    assert f1.failed == [] and f2.acked == []


# -- simulated time --------------------------------------------------------------------------------


def test_simulated_clock_moves_only_when_advanced():
    with simulated_time():
        assert clock.is_simulating()
        t0 = clock.now()
        assert clock.now() == t0
        advance_time(12.5)
        assert clock.now() == t0 + 12.5
        with pytest.raises(ValueError):
            advance_time(-1)
        with pytest.raises(RuntimeError):
            with simulated_time():
                pass
    assert not clock.is_simulating()
    with pytest.raises(RuntimeError):
        advance_time(1)


def test_complete_topology_inside_simulated_time():
    with simulated_time():
        results = complete_topology(_numbers_topology(), mocked_sources={"spout": [[1], [2]]})
        assert clock.now() == 0
    assert multiset_eq(read_tuples(results, "square"), [[2, 4], [4, 16]])


@pytest.mark.simulated_time
def test_simulated_time_drives_cluster_uptime(cluster):
    _, b = feeder_builder()
    cluster.submit_topology("t", Config(), b.create_topology())
    assert cluster.get_topology_info("t")["uptime_secs"] == 0
    advance_time(100)
    assert cluster.get_topology_info("t")["uptime_secs"] == pytest.approx(100)
    advance_time(0.5)
    assert cluster.get_topology_info("t")["uptime_secs"] == pytest.approx(100.5)


# -- wait_until --------------------------------------------------------------------------------------


def test_wait_until(monkeypatch):
    flag = threading.Event()
    threading.Timer(0.05, flag.set).start()
    wait_until(flag.is_set, 5)
    assert flag.is_set()
    now = [0.0]  # a clock that moves only when wait_until sleeps
    monkeypatch.setattr(testing_module, "time", type("Clock", (), {
        "monotonic": lambda: now[0], "sleep": lambda secs: now.__setitem__(0, now[0] + secs)}))
    with pytest.raises(TimeoutError, match=r"the thing not met within 1\.0s"):
        wait_until(lambda: False, 1.0, interval=0.25, message="the thing")
    assert 1.0 < now[0] <= 1.25  # given up at its first poll after the timeout
