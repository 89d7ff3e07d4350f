"""squall.testing's BoltHarness and SpoutHarness: one component, no topology — plain, basic,
stateful and windowed bolts, spouts and stateful spouts, a ShellBolt and a pystorm bolt; what
they emit (with anchors), ack, fail and report; the errors a topology would raise."""

from __future__ import annotations

import sys
import textwrap
from collections import Counter

import pystorm
import pytest

from squall import BaseWindowedBolt, BasicBolt, Bolt, Count, Duration, EmitError, FailedException, Spout
from squall.api.errors import InvalidTopologyError
from squall.api.stateful import StatefulBolt, StatefulSpout
from squall.multilang import ShellBolt
from squall.streamparse.pystorm_adapter import PystormBolt
from squall.testing import BoltHarness, SpoutHarness, advance_time, simulated_time, wait_until


class Split(BasicBolt):
    outputs = ["word"]

    def execute(self, tup, collector):
        if tup["sentence"] == "fail":
            raise FailedException("not this one")
        if tup["sentence"] == "boom":
            raise RuntimeError("boom")
        for word in tup["sentence"].split():
            collector.emit([word])


def test_a_basic_bolt_emits_anchored_to_its_input_and_acks_it():
    with BoltHarness(Split(), inputs={"sentences": ["sentence"]}) as h:
        first = h.feed(["the cow"])
        second = h.feed(["jumped"])
        assert h.emitted() == [["the"], ["cow"], ["jumped"]]
        assert [e.anchors for e in h.emits] == [(first,), (first,), (second,)]
        assert h.acked == [first, second] and h.failed == [] and h.errors == []


def test_failed_exception_fails_the_input_and_other_errors_are_recorded_too():
    h = BoltHarness(Split(), inputs={"sentences": ["sentence"]})
    failed = h.feed(["fail"])
    boom = h.feed(["boom"])
    assert h.failed == [failed, boom] and h.acked == []
    assert [str(e) for e in h.errors] == ["boom"]  # a FailedException is not an error


class Router(Bolt):
    """A rich bolt: words to "words", numbers to "numbers", each anchored; acks what it routes."""

    outputs = {"words": ["word"], "numbers": ["n"]}

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.component = context.get_this_component_id()
        self.ticks = 0

    def execute(self, tup):
        if tup.is_tick():
            self.ticks += 1
            return
        value = tup["value"]
        self.collector.emit([value], tup, stream="numbers" if isinstance(value, int) else "words")
        if tup.source_stream_id == "other":
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def test_named_streams_ticks_and_the_context():
    h = BoltHarness(Router(), inputs={"feed": ["value"], "feed:other": ["value"]}, component_id="router")
    assert h.bolt.component == "router"
    a = h.feed(["a"])
    one = h.feed([1], stream="other")
    h.tick()
    assert h.emitted("words") == [["a"]] and h.emitted("numbers") == [[1]]
    assert h.emits[1].anchors == (one,) and one.source_stream_id == "other"
    assert h.acked == [a] and h.failed == [one] and h.bolt.ticks == 1


def test_bad_input_is_named():
    h = BoltHarness(Router(), inputs={"feed": ["value"]})
    with pytest.raises(ValueError, match=r"does not subscribe to feed:missing \(inputs: \['feed:default'\]\)"):
        h.feed(["a"], stream="missing")
    with pytest.raises(ValueError, match=r"feed:default declares 1 fields \['value'\], got 2 values"):
        h.feed(["a", "b"])

    class Undeclared(BasicBolt):
        outputs = ["word"]

        def execute(self, tup, collector):
            collector.emit(["x"], stream="nowhere")

    h = BoltHarness(Undeclared())
    h.feed(["a"])  # the EmitError escapes execute: recorded, the input failed, as in a topology
    assert isinstance(h.errors[0], EmitError)
    assert str(h.errors[0]) == "component 'bolt' emitted on undeclared stream 'nowhere' (declared: ['default'])"
    with pytest.raises(InvalidTopologyError, match="'late'"):  # as create_topology says it
        BoltHarness(Window().with_tumbling_window(Count(2)).with_late_tuple_stream("late"))


class WordCount(StatefulBolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.inits = 0

    def init_state(self, state):
        self.state = state
        self.inits += 1

    def execute(self, tup):
        word = tup["word"]
        count = self.state.get(word, 0) + 1
        self.state.put(word, count)
        self.collector.emit([word, count], tup)
        self.collector.ack(tup)


def test_a_stateful_bolt_checkpoints_and_rolls_back():
    with BoltHarness(WordCount(), inputs={"words": ["word"]}) as h:
        assert h.bolt.inits == 1 and dict(h.state.items()) == {}
        h.feed(["cow"])
        h.feed(["cow"])
        assert h.checkpoint() == 1
        h.feed(["moon"])
        assert dict(h.state.items()) == {"cow": 2, "moon": 1}
        h.rollback()
        assert h.bolt.inits == 2 and dict(h.bolt.state.items()) == {"cow": 2}
        h.feed(["cow"])
        assert h.emitted()[-1] == ["cow", 3]
    with pytest.raises(TypeError, match="'bolt' is not stateful"):
        BoltHarness(Router()).checkpoint()


def test_two_harnesses_do_not_share_state():
    a, b = BoltHarness(WordCount(), inputs={"words": ["word"]}), BoltHarness(WordCount(), inputs={"words": ["word"]})
    a.feed(["cow"])
    a.checkpoint()
    assert dict(b.state.items()) == {}
    a.close()
    b.close()


class Window(BaseWindowedBolt):
    outputs = ["words"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        self.collector.emit([sorted(t["value"] for t in window.get())])


def test_a_count_window_fires_and_acks_its_tuples_when_they_expire():
    h = BoltHarness(Window().with_tumbling_window(Count(2)))
    first = [h.feed([w]) for w in ("b", "a")]
    assert h.emitted() == [[["a", "b"]]]
    h.feed(["c"])
    h.feed(["d"])
    assert h.emitted() == [[["a", "b"]], [["c", "d"]]]
    assert set(map(id, first)) <= set(map(id, h.acked))


def test_a_time_window_fires_on_ticks_in_simulated_time():
    with simulated_time():
        h = BoltHarness(Window().with_tumbling_window(Duration(2)))
        h.feed(["a"])
        h.feed(["b"])
        h.tick()
        assert h.emitted() == []
        advance_time(2.5)
        h.tick()
        assert h.emitted() == [[["a", "b"]]]


class Numbers(Spout):
    """Emits 0, 1, 2 ... with themselves as message ids; replays what fails."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.next, self.replay = collector, 0, []
        self.active = None

    def activate(self):
        self.active = True

    def deactivate(self):
        self.active = False

    def next_tuple(self):
        n = self.replay.pop(0) if self.replay else self.next
        if n == self.next:
            self.next += 1
        self.collector.emit([n], msg_id=n)

    def fail(self, msg_id):
        self.replay.append(msg_id)


def test_a_spout_emits_with_message_ids_and_replays_what_fails():
    h = SpoutHarness(Numbers())
    assert h.spout.active is True
    assert [e.msg_id for e in h.next_tuple(3)] == [0, 1, 2]
    h.ack(0)
    h.fail(1)
    assert h.pending == [2]
    assert h.next_tuple()[0].values == [1]
    spout = h.spout
    h.close()
    assert spout.active is False


class Offsets(StatefulSpout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state
        self.position = state.get("offset", 0)

    def next_tuple(self):
        self.collector.emit([self.position])
        self.position += 1
        self.state.put("offset", self.position)


def test_a_stateful_spout_resumes_from_its_committed_position_after_a_rollback():
    h = SpoutHarness(Offsets())
    h.next_tuple(2)
    h.checkpoint()
    h.next_tuple(3)
    h.rollback()
    assert [e.values[0] for e in h.next_tuple(2)] == [2, 3]
    assert h.emitted() == [[0], [1], [2], [3], [4], [2], [3]]


UPPER = textwrap.dedent('''
    from pystorm import Bolt

    class Upper(Bolt):
        def process(self, tup):
            self.emit([tup.values[0].upper()])

    Upper().run()
''')


def test_a_shell_bolt_runs_its_subprocess_and_its_emits_are_anchored(tmp_path):
    script = tmp_path / "upper.py"
    script.write_text(UPPER)
    with BoltHarness(ShellBolt(sys.executable, str(script), outputs=["word"]), inputs={"words": ["word"]}) as h:
        cow = h.feed(["cow"])
        wait_until(lambda: h.acked, 10, message="the shell bolt never acked")
        assert h.emitted() == [["COW"]] and h.emits[0].anchors == (cow,) and h.acked == [cow]


class Lengths(pystorm.Bolt):
    def process(self, tup):
        self.emit([len(tup.values[0])])


def test_a_pystorm_bolt_runs_natively():
    h = BoltHarness(PystormBolt(Lengths, {"default": (["length"], False)}), inputs={"words": ["word"]})
    moon = h.feed(["moon"])
    assert h.emitted() == [[4]] and h.acked == [moon]
    h.close()


def test_word_counts_in_ten_lines():
    """The README's example."""

    class Count(BasicBolt):
        outputs = ["word", "count"]

        def prepare(self, conf, context):
            self.counts = Counter()

        def execute(self, tup, collector):
            self.counts[tup["word"]] += 1
            collector.emit([tup["word"], self.counts[tup["word"]]])

    h = BoltHarness(Count(), inputs={"split": ["word"]})
    for word in ["cow", "moon", "cow"]:
        h.feed([word])
    assert h.emitted() == [["cow", 1], ["moon", 1], ["cow", 2]]
    assert len(h.acked) == 3 and h.failed == []
