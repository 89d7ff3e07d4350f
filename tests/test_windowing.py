"""Windowed bolts (squall.api.windowing): the window manager on its own (which tuples form each
window, when they fire and leave, snapshots), then in-process topologies: count windows,
processing-time durations under simulated time, event time with out-of-order input against
windows computed by hand, late tuples, acks as tuples leave a window, the checks at
create_topology and at submission, runtime errors, stateful windowed bolts restored after a
rollback and after a topology is submitted again, and examples/sliding_window.py.
"""

from __future__ import annotations

import logging
import os
import sys

import pytest

from helpers import HoldBolt, RecordSink, errors_of, held, logged, record, wait_for
from squall import (
    BaseWindowedBolt, Config, Count, Duration, InvalidTopologyError, LocalCluster, StatefulWindowedBolt,
    TopologyBuilder, TupleWindow,
)
from squall.api.config import merged_config
from squall.runtime.serialization import Serializer
from squall.testing import FeederSpout, advance_time, committed_state, wait_until
from squall.api.windowing import WindowConfig
from squall.api.windowing.executor import WINDOW_STATE_KEY
from squall.api.windowing.manager import WindowManager

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import sliding_window  # noqa: E402 - the example's components

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0


# -- the window manager, on its own ------------------------------------------------------------------


class Listener:
    """Records what a WindowManager calls back; raises from on_activation for a window holding "boom"."""

    def __init__(self) -> None:
        self.windows: list[dict] = []
        self.expired: list = []
        self.failed: list = []

    def on_expiry(self, items):
        self.expired.extend(items)

    def on_activation(self, items, new, expired, start_ts, end_ts):
        if "boom" in items:
            raise RuntimeError("boom")
        self.windows.append({"get": list(items), "new": list(new), "expired": list(expired), "start": start_ts,
                             "end": end_ts})

    def on_failure(self, items, error):
        self.failed.append((list(items), str(error)))


def manager(length, sliding, event_time=False, lag=Duration(0), streams=("s",)):
    listener = Listener()
    config = WindowConfig(length=length, sliding=sliding, lag=lag)
    return WindowManager(config, listener, event_time=event_time, streams=streams, now_ms=0), listener


def gets(listener):
    return [w["get"] for w in listener.windows]


def test_count_window_sliding_fires_every_n_tuples_and_expires_what_the_next_cannot_hold():
    m, seen = manager(Count(3), Count(2))
    for ts, item in enumerate("abcdef", 1):
        m.add(item, ts)
    assert seen.windows == [
        {"get": ["a", "b"], "new": ["a", "b"], "expired": [], "start": None, "end": 2},
        {"get": ["b", "c", "d"], "new": ["c", "d"], "expired": ["a"], "start": None, "end": 4},
        {"get": ["d", "e", "f"], "new": ["e", "f"], "expired": ["b", "c"], "start": None, "end": 6},
    ]
    assert seen.expired == ["a", "b", "c", "d", "e"] and len(m) == 1  # "f" is in the next window


def test_count_tumbling_window_acks_each_window_as_soon_as_it_fired():
    m, seen = manager(Count(3), Count(3))
    for ts, item in enumerate("abcdefg", 1):
        m.add(item, ts)
    assert gets(seen) == [["a", "b", "c"], ["d", "e", "f"]]
    assert seen.expired == list("abcdef") and len(m) == 1


def test_processing_time_durations_fire_on_ticks_past_their_end():
    m, seen = manager(Duration(1), Duration(0.5))
    for item, ts in [("a", 100), ("b", 400), ("c", 700), ("d", 1200)]:
        m.add(item, ts)
    m.tick(500)
    assert seen.windows == []  # the window ending at 500 is not over before 500
    m.tick(600)
    m.tick(1300)
    assert gets(seen) == [["a", "b"], ["a", "b", "c"]]
    assert seen.expired == ["a", "b"]  # the window ending at 1500 holds (500, 1500]
    m.tick(3000)
    assert gets(seen) == [["a", "b"], ["a", "b", "c"], ["c", "d"], ["d"]]  # the empty (1500, 2500] does not fire
    assert [(w["start"], w["end"]) for w in seen.windows] == [(-500, 500), (0, 1000), (500, 1500), (1000, 2000)]
    assert seen.expired == ["a", "b", "c", "d"] and len(m) == 0


def test_an_item_added_in_the_managers_first_millisecond_is_in_a_tumbling_window():
    """Windows are (end - length, end]: the first ends at the manager's start, so an item of that
    millisecond (simulated time) is windowed, not expired unseen."""
    m, seen = manager(Duration(0.5), Duration(0.5))
    m.add("a", 0)
    m.add("b", 300)
    m.tick(600)
    assert [(w["get"], w["start"], w["end"]) for w in seen.windows] == [(["a"], -500, 0), (["b"], 0, 500)]


def test_processing_time_duration_length_counted_sliding_expires_old_items_on_ticks():
    m, seen = manager(Duration(1), Count(2))
    m.add("a", 100)
    m.add("b", 200)
    assert gets(seen) == [["a", "b"]]
    m.tick(1150)
    assert seen.expired == ["a"]  # older than 1150 - 1000
    m.add("c", 1300)
    m.add("d", 1400)  # the window (400, 1400]: "b" left as it fired
    assert seen.windows[-1] == {"get": ["c", "d"], "new": ["c", "d"], "expired": ["a", "b"], "start": 400,
                                "end": 1400}
    assert seen.expired == ["a", "b"]


# Event time, by hand: Duration(1 s) windows sliding by 500 ms (ends at multiples of 500), lag
# 300 ms; the input is out of order, but no tuple is older than the newest before it minus
# the lag, so none is late whenever the watermark is computed. Window E holds (E - 1000, E].
EVENTS = [("a", 100), ("b", 350), ("c", 250), ("d", 700), ("e", 600), ("f", 1200), ("g", 1000), ("h", 1600),
          ("i", 1450), ("j", 2400)]
# the watermark ends at 2400 - 300 = 2100: the windows ending before it fire
EXPECTED_EVENT_WINDOWS = [
    {"get": ["a", "c", "b"], "new": ["a", "c", "b"], "expired": [], "start": -500, "end": 500},
    {"get": ["a", "c", "b", "e", "d", "g"], "new": ["e", "d", "g"], "expired": [], "start": 0, "end": 1000},
    {"get": ["e", "d", "g", "f", "i"], "new": ["f", "i"], "expired": ["a", "c", "b"], "start": 500, "end": 1500},
    {"get": ["f", "i", "h"], "new": ["h"], "expired": ["e", "d", "g"], "start": 1000, "end": 2000},
]


def test_event_time_windows_follow_the_watermark():
    m, seen = manager(Duration(1), Duration(0.5), event_time=True, lag=Duration(0.3))
    for item, ts in EVENTS:
        assert m.add(item, ts, "s")
    m.tick(0)
    assert m.watermark == 2100
    assert seen.windows == EXPECTED_EVENT_WINDOWS
    assert m.add("late", 2099, "s") is False and m.add("on time", 2100, "s") is True


def test_watermark_is_the_slowest_stream_minus_the_lag():
    m, seen = manager(Count(2), Count(2), event_time=True, lag=Duration(0.1), streams=("fast", "slow"))
    for ts in (100, 200, 900, 1000):
        m.add(f"fast{ts}", ts, "fast")
    m.tick(0)
    assert m.watermark is None and seen.windows == []  # "slow" delivered nothing yet
    m.add("slow400", 400, "slow")
    m.tick(0)
    assert m.watermark == 300  # min(1000, 400) - 100: fast100 and fast200 passed, a window at the 2nd
    assert gets(seen) == [["fast100", "fast200"]]
    m.add("slow2000", 2000, "slow")
    m.tick(0)
    assert m.watermark == 900  # min(1000, 2000) - 100: slow400 passed, fast900 not yet
    assert gets(seen) == [["fast100", "fast200"]]
    m.add("fast1200", 1200, "fast")
    m.tick(0)
    assert m.watermark == 1100
    assert gets(seen) == [["fast100", "fast200"], ["slow400", "fast900"]]


def test_event_time_count_sliding_counts_in_timestamp_order():
    m, seen = manager(Count(3), Count(2), event_time=True)
    for ts in (10, 30, 20, 50, 40):
        m.add(ts, ts, "s")
    m.tick(0)  # watermark 50: 10, 20, 30, 40 passed; windows at the 2nd and the 4th
    assert gets(seen) == [[10, 20], [20, 30, 40]]
    assert [w["end"] for w in seen.windows] == [20, 40]


def test_a_failed_window_leaves_and_the_next_one_is_all_new():
    m, seen = manager(Count(2), Count(2))
    for ts, item in enumerate(["a", "boom", "c", "d"], 1):
        m.add(item, ts)
    assert seen.failed == [(["a", "boom"], "boom")]
    assert seen.windows == [{"get": ["c", "d"], "new": ["c", "d"], "expired": [], "start": None, "end": 4}]


@pytest.mark.parametrize("length,sliding,event_time", [
    (Count(3), Count(2), False), (Duration(1), Duration(0.5), True), (Count(4), Duration(0.5), True),
])
def test_a_restored_snapshot_fires_the_windows_the_manager_would_have(length, sliding, event_time):
    serializer = Serializer.for_config(merged_config({}))
    items = [(f"x{i}", ts) for i, ts in enumerate((100, 400, 300, 900, 1300, 1100, 1700, 2600, 2500, 3400))]
    whole, seen_whole = manager(length, sliding, event_time, lag=Duration(0.2))
    half, seen_half = manager(length, sliding, event_time, lag=Duration(0.2))
    before = 0
    for i, (item, ts) in enumerate(items):
        if i == 5:  # half-way, through the state's serializer, into a new manager
            data = serializer.loads(serializer.dumps(half.snapshot(lambda x: [x])))
            before = len(seen_whole.windows)
            half, seen_half = manager(length, sliding, event_time, lag=Duration(0.2))
            half.restore(data, lambda x: x[0])
        for m in (whole, half):
            m.add(item, ts, "s")
            m.tick(ts)
    assert seen_half.windows and seen_whole.windows[before:] == seen_half.windows
    assert len(half) == len(whole)


# -- bolts for the topologies -------------------------------------------------------------------------


def window_record(window: TupleWindow) -> dict:
    first = lambda tuples: [t.values[0] for t in tuples]  # noqa: E731
    return {"get": first(window.get()), "new": first(window.get_new()), "expired": first(window.get_expired()),
            "start": window.start_timestamp, "end": window.end_timestamp}


class Collect(BaseWindowedBolt):
    """Records each window under ``key``; emits its first values (anchored to the window, by
    default) when ``emits``; raises for a window holding "boom"."""

    outputs = ["words"]

    def __init__(self, key, emits=False):
        self.key = key
        self.emits = emits

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, window):
        entry = window_record(window)
        if "boom" in entry["get"]:
            raise RuntimeError("boom in the window")
        record(self.key, entry)
        if self.emits:
            self.collector.emit([" ".join(entry["get"])])


def windows(key, *fields):
    return [{f: w[f] for f in fields} if fields else w for w in logged(key)]


def submit_window(cluster, name, bolt, fields=("word",), conf=None, downstream=None, tracked=False):
    """feeder -> "w" (``bolt``) [-> ``downstream`` as "down"], ``tracked`` for
    ``cluster.wait_idle``; returns the feeder."""
    feeder = FeederSpout(list(fields))
    builder = TopologyBuilder()
    builder.set_spout("feed", feeder)
    builder.set_bolt("w", bolt).shuffle_grouping("feed")
    if downstream is not None:
        builder.set_bolt("down", downstream).shuffle_grouping("w")
    cluster.submit_topology(name, conf or Config(), builder.create_topology(), tracked=tracked)
    return feeder


def executed(cluster, name, component="w") -> int:
    return cluster.get_topology_info(name)["components"][component]["executed"]


def feed_all(feeder, values):
    for v in values:
        feeder.feed([v], msg_id=v)


# -- count windows ------------------------------------------------------------------------------------


def test_count_sliding_window_in_a_topology(cluster, key):
    feeder = submit_window(cluster, "count", Collect(key).with_window(Count(3), Count(2)), tracked=True)
    feed_all(feeder, "abcdef")
    wait_until(lambda: len(logged(key)) == 3, WAIT, message="three windows")
    assert windows(key, "get", "new", "expired") == [
        {"get": ["a", "b"], "new": ["a", "b"], "expired": []},
        {"get": ["b", "c", "d"], "new": ["c", "d"], "expired": ["a"]},
        {"get": ["d", "e", "f"], "new": ["e", "f"], "expired": ["b", "c"]},
    ]
    assert all(w["start"] is None and isinstance(w["end"], int) for w in logged(key))
    # tuples are acked as they leave: "f" is in the next window, so it stays pending
    wait_until(lambda: sorted(feeder.acked) == list("abcde"), WAIT, message="a..e acked")
    # count windows fire on arrivals only: once nothing is in flight, nothing more is acked
    cluster.wait_idle("count", WAIT)
    assert "f" not in feeder.acked
    feed_all(feeder, "gh")
    wait_until(lambda: len(logged(key)) == 4, WAIT, message="a fourth window")
    assert windows(key, "get")[-1] == {"get": ["f", "g", "h"]}
    wait_until(lambda: sorted(feeder.acked) == list("abcdefg"), WAIT, message="f, g acked")
    assert feeder.failed == []


def test_count_tumbling_window_acks_every_tuple_once_its_window_fired(cluster, key):
    feeder = submit_window(cluster, "tumbling", Collect(key).with_tumbling_window(Count(3)), tracked=True)
    feed_all(feeder, "abcdefg")
    wait_until(lambda: len(logged(key)) == 2, WAIT, message="two windows")
    assert windows(key, "get") == [{"get": ["a", "b", "c"]}, {"get": ["d", "e", "f"]}]
    wait_until(lambda: sorted(feeder.acked) == list("abcdef"), WAIT, message="a..f acked")
    cluster.wait_idle("tumbling", WAIT)  # count windows fire on arrivals only: nothing more comes
    assert "g" not in feeder.acked and feeder.failed == []


def test_emits_are_anchored_to_the_whole_window(cluster, key):
    feeder = submit_window(cluster, "anchored", Collect(key, emits=True).with_tumbling_window(Count(3)),
                           downstream=HoldBolt("down"), tracked=True)
    feed_all(feeder, "abc")
    wait_until(lambda: len(held("down")) == 1, WAIT, message="the window's output held downstream")
    assert logged("down") == ["a b c"]
    # the window's tuples left it (and were acked by "w"), but their trees wait for the output:
    # once nothing is in flight, every ack of "w" reached the acker, and none completed a tree
    cluster.wait_idle("anchored", WAIT)
    assert feeder.acked == []
    collector, tup = held("down")[0]
    collector.ack(tup)
    wait_until(lambda: sorted(feeder.acked) == ["a", "b", "c"], WAIT, message="a, b, c acked")


def test_a_window_whose_execute_raises_is_failed_and_the_bolt_goes_on(cluster, key):
    feeder = submit_window(cluster, "raises", Collect(key).with_tumbling_window(Count(2)))
    feed_all(feeder, ["a", "boom"])
    wait_until(lambda: sorted(feeder.failed) == ["a", "boom"], WAIT, message="the window failed")
    errors = errors_of(cluster, "raises", "w")
    assert len(errors) == 1 and "boom in the window" in errors[0]["error"]
    feed_all(feeder, "cd")
    wait_until(lambda: sorted(feeder.acked) == ["c", "d"], WAIT, message="the next window acked")
    assert windows(key, "get", "new") == [{"get": ["c", "d"], "new": ["c", "d"]}]


# -- processing time: durations (simulated time) -------------------------------------------------------


@pytest.mark.simulated_time
def test_duration_windows_fire_on_the_clock_and_ack_what_leaves(cluster, key):
    # Duration(10) sliding by Duration(5): windows end at 5, 10, 15... s after the bolt's start
    # (simulated time 0); ticks every 0.5 s. Inputs arrive at t = 1, 3 and 7.
    feeder = submit_window(cluster, "durations", Collect(key).with_window(Duration(10), Duration(5)))

    def arrives(word, count):
        feeder.feed([word], msg_id=word)
        wait_until(lambda: executed(cluster, "durations") == count, WAIT, message=f"{word} arrived")

    advance_time(1)
    arrives("a", 1)
    advance_time(2)  # t = 3
    arrives("b", 2)
    advance_time(3)  # t = 6: the window ending at 5 fires
    wait_until(lambda: len(logged(key)) == 1, WAIT, message="the window ending at 5 s")
    assert windows(key, "get") == [{"get": ["a", "b"]}]
    assert feeder.acked == []  # both are in the next window too
    advance_time(1)  # t = 7
    arrives("c", 3)
    advance_time(4)  # t = 11
    wait_until(lambda: len(logged(key)) == 2, WAIT, message="the window ending at 10 s")
    wait_until(lambda: sorted(feeder.acked) == ["a", "b"], WAIT, message="a, b acked: no later window holds them")
    advance_time(5)  # t = 16
    wait_until(lambda: len(logged(key)) == 3, WAIT, message="the window ending at 15 s")
    wait_until(lambda: sorted(feeder.acked) == ["a", "b", "c"], WAIT, message="c acked")
    advance_time(10)  # t = 26: the windows ending at 20 and 25 are empty and do not fire
    # the ticks up to t = 26 were queued before "d": once it arrived, they had done all they do
    arrives("d", 4)
    got = logged(key)
    assert len(got) == 3, "an empty window fired"
    assert [w["get"] for w in got] == [["a", "b"], ["a", "b", "c"], ["c"]]
    assert [w["new"] for w in got] == [["a", "b"], ["c"], []]
    assert [w["expired"] for w in got] == [[], [], ["a", "b"]]
    origin = got[0]["end"] - 5000
    assert [(w["start"] - origin, w["end"] - origin) for w in got] == [(-5000, 5000), (0, 10000), (5000, 15000)]


# -- event time --------------------------------------------------------------------------------------


def event_time_bolt(key, late_stream=True):
    bolt = (Collect(key).with_window(Duration(1), Duration(0.5)).with_timestamp_field("ts")
            .with_lag(Duration(0.3)).with_watermark_interval(Duration.milliseconds(20)))
    return bolt.with_late_tuple_stream("late") if late_stream else bolt


def test_event_time_windows_of_out_of_order_input_are_the_hand_computed_ones(cluster, key):
    feeder = FeederSpout(["word", "ts"])
    builder = TopologyBuilder()
    builder.set_spout("feed", feeder)
    builder.set_bolt("w", event_time_bolt(key)).shuffle_grouping("feed")
    builder.set_bolt("late", RecordSink("late")).shuffle_grouping("w", "late")
    topology = builder.create_topology()
    assert topology.components["w"].outputs["late"].fields == ["late_tuple"]
    cluster.submit_topology("event", Config(), topology)
    for word, ts in EVENTS:
        feeder.feed([word, ts], msg_id=word)
    wait_until(lambda: len(logged(key)) == 4, WAIT, message="the four windows before the watermark")
    assert logged(key) == EXPECTED_EVENT_WINDOWS
    # the windows still to fire (ending at 2500, 3000) hold h and j, pending; the others were acked
    wait_until(lambda: sorted(feeder.acked) == list("abcdefgi"), WAIT, message="what left the windows acked")
    # the window ending at 2000 fired, so the watermark is past 2000: 1900 is late
    feeder.feed(["k", 1900], msg_id="k")
    wait_for(feeder, "k")
    assert logged("late") == [["k", 1900]]
    # the fourth window fired on a tick after "j", the last input (no other is past 2300): that
    # tick moved the watermark for the last time, and "k" came after it: no window past 2100
    assert len(logged(key)) == 4 and feeder.failed == []


def test_late_tuples_without_a_late_stream_are_logged_and_acked(cluster, key, caplog):
    caplog.set_level(logging.INFO, logger="squall.windowing")
    feeder = submit_window(cluster, "late-logged", event_time_bolt(key, late_stream=False), fields=("word", "ts"))
    for word, ts in EVENTS:
        feeder.feed([word, ts], msg_id=word)
    wait_until(lambda: len(logged(key)) == 4, WAIT, message="four windows")
    feeder.feed(["k", 1900], msg_id="k")
    wait_for(feeder, "k")
    assert any("late tuple" in r.getMessage() and "'w'" in r.getMessage() and "1900" in r.getMessage()
               for r in caplog.records)
    # the fourth window fired on the tick that moved the watermark for the last time (after "j",
    # the last input); "k" came after it: the late tuple is in no window
    assert len(logged(key)) == 4


@pytest.mark.simulated_time
def test_the_watermark_waits_for_every_input_stream(cluster, key):
    fast, slow = FeederSpout(["word", "ts"]), FeederSpout(["word", "ts"])
    builder = TopologyBuilder()
    builder.set_spout("fast", fast)
    builder.set_spout("slow", slow)
    bolt = (Collect(key).with_tumbling_window(Duration(1)).with_timestamp_field("ts")
            .with_watermark_interval(Duration.milliseconds(20)))
    builder.set_bolt("w", bolt).shuffle_grouping("fast").shuffle_grouping("slow")
    cluster.submit_topology("two-streams", Config(), builder.create_topology())
    for ts in (100, 900, 1500, 5000):
        fast.feed([f"f{ts}", ts], msg_id=ts)
    wait_until(lambda: executed(cluster, "two-streams") == 4, WAIT)
    advance_time(0.05)  # watermark ticks (every 20 ms), queued before the slow stream's first tuple
    slow.feed(["s1200", 1200], msg_id=1200)
    wait_until(lambda: executed(cluster, "two-streams") == 5, WAIT)
    assert logged(key) == [], "a window fired before the slow stream delivered"
    advance_time(0.05)  # watermark: min(5000, 1200) = 1200
    wait_until(lambda: len(logged(key)) == 1, WAIT, message="the window ending at 1000")
    assert windows(key, "get", "end") == [{"get": ["f100", "f900"], "end": 1000}]


# -- checks before anything runs ---------------------------------------------------------------------


def builder_with(bolt, fields=("word", "ts"), conf=None, feeder=None):
    """feeder -> "w" (``bolt``); a topology that runs needs a ``feeder`` the test keeps (a
    FeederSpout's channel lives as long as the object)."""
    builder = TopologyBuilder()
    builder.set_spout("feed", feeder or FeederSpout(list(fields)))
    declarer = builder.set_bolt("w", bolt).shuffle_grouping("feed")
    if conf:
        declarer.add_configurations(conf)
    return builder


@pytest.mark.parametrize("call,error,message", [
    (lambda b: b.with_window(Count(0)), ValueError, r"Count must be >= 1, got 0"),
    (lambda b: b.with_window(Count("3")), TypeError, r"Count takes an integer, got str '3'"),
    (lambda b: b.with_window(Duration(-1)), ValueError, r"Duration takes a number of seconds >= 0, got -1"),
    (lambda b: b.with_window(Duration(0)), ValueError, r"Collect.with_window: window length must be at least 1 ms"),
    (lambda b: b.with_window(3), TypeError, r"Collect.with_window: window length must be a Count or a Duration"),
    (lambda b: b.with_window(Count(3), "2"), TypeError, r"Collect.with_window: sliding interval must be a Count"),
    (lambda b: b.with_tumbling_window(Duration(0.0005)), ValueError, r"not a whole number of milliseconds"),
    (lambda b: b.with_lag(Count(1)), TypeError, r"Collect.with_lag: lag must be a Duration, got Count"),
    (lambda b: b.with_watermark_interval(Duration(0)), ValueError,
     r"Collect.with_watermark_interval: watermark interval must be at least 1 ms"),
    (lambda b: b.with_timestamp_field(""), ValueError, r"Collect.with_timestamp_field: timestamp field must be"),
    (lambda b: b.with_late_tuple_stream("__late"), ValueError, r"Collect.with_late_tuple_stream: .* is reserved"),
    (lambda b: b.with_timestamp_extractor("ts"), TypeError, r"with_timestamp_extractor: 'ts' is not callable"),
])
def test_bad_window_settings_raise_at_the_with_call(call, error, message):
    with pytest.raises(error, match=message):
        call(Collect("k"))


@pytest.mark.parametrize("bolt,conf,message", [
    (Collect("k"), None, r"windowed bolt 'w': the window has no length"),
    (Collect("k").with_window(Count(2)).with_late_tuple_stream("late"), None,
     r"windowed bolt 'w': a late tuple stream \('late'\) needs event time"),
    (Collect("k").with_window(Count(2)).with_timestamp_field("time"), None,
     r"windowed bolt 'w': its timestamp field 'time' is not declared by its input stream 'feed':'default' "
     r"\(fields \['word', 'ts'\]\)"),
    (Collect("k").with_window(Duration(20), Duration(15)), {"topology.message.timeout.secs": 30},
     r"windowed bolt 'w': window length Duration\(20\) \+ sliding interval Duration\(15\) \(35000 ms\) is more "
     r"than topology.message.timeout.secs \(30 s\)"),
    (Collect("k").with_window(Count(40), Count(20)), {"topology.max.spout.pending": 50},
     r"windowed bolt 'w': window length Count\(40\) \+ sliding interval Count\(20\) \(60 tuples\) is more than "
     r"topology.max.spout.pending \(50\)"),
    (Collect("k").with_window(Count(2)), {"topology.bolts.window.length.duration.ms": 100},
     r"windowed bolt 'w': config sets both 'topology.bolts.window.length.count' \(2\) and"),
])
def test_create_topology_refuses_a_bad_window_naming_the_component(bolt, conf, message):
    with pytest.raises(InvalidTopologyError, match=message):
        builder_with(bolt, conf=conf).create_topology()


def test_storms_timeout_check_takes_only_the_durations_of_the_window():
    # a Duration length sliding by Count: the length alone against the timeout (Storm's rule)
    short = {"topology.message.timeout.secs": 10}
    builder_with(Collect("k").with_window(Duration(10), Count(500)), conf=short).create_topology()
    with pytest.raises(InvalidTopologyError, match=r"window length Duration\(11\) \(11000 ms\) is more than"):
        builder_with(Collect("k").with_window(Duration(11), Count(1)), conf=short).create_topology()
    # a stateful windowed bolt acks at checkpoints: its window may outlast the timeout
    builder_with(StatefulCollect("k").with_window(Duration(60)), conf=short).create_topology()


def test_a_late_stream_the_bolt_declares_differently_is_refused():
    class DeclaresLate(Collect):
        outputs = {"default": ["words"], "late": ["word", "ts"]}

    bolt = DeclaresLate("k").with_window(Count(2)).with_timestamp_field("ts").with_late_tuple_stream("late")
    with pytest.raises(InvalidTopologyError, match=r"its late tuple stream 'late' must have the one field "
                                                   r"'late_tuple'"):
        builder_with(bolt).create_topology()


def test_a_window_longer_than_the_topologys_timeout_is_refused_at_submit():
    feeder = FeederSpout(["word", "ts"])
    topology = builder_with(Collect("k").with_window(Duration(25), Duration(10)), feeder=feeder).create_topology()
    with LocalCluster() as cluster:
        with pytest.raises(InvalidTopologyError,
                           match=r"topology 'long': windowed bolt 'w': window length Duration\(25\) \+ sliding "
                                 r"interval Duration\(10\) \(35000 ms\) is more than "
                                 r"topology.message.timeout.secs \(30 s\)"):
            cluster.submit_topology("long", Config(), topology)  # the default timeout, 30 s
        assert cluster.get_topologies() == []
        cluster.submit_topology("long", Config().set_message_timeout_secs(40), topology)
        assert cluster.get_topologies() == ["long"]


def test_a_count_window_larger_than_max_spout_pending_is_refused_at_submit():
    feeder = FeederSpout(["word", "ts"])
    topology = builder_with(Collect("k").with_tumbling_window(Count(100)), feeder=feeder).create_topology()
    with LocalCluster() as cluster:
        with pytest.raises(InvalidTopologyError, match=r"topology 'big': windowed bolt 'w': window length "
                                                       r"Count\(100\) \+ sliding interval Count\(100\) \(200 "
                                                       r"tuples\) is more than topology.max.spout.pending \(150\)"):
            cluster.submit_topology("big", Config().set_max_spout_pending(150), topology)
        assert cluster.get_topologies() == []


# -- runtime errors ----------------------------------------------------------------------------------


def test_a_tuple_without_a_timestamp_is_failed_with_an_error_and_the_bolt_goes_on(cluster, key):
    bolt = (Collect(key).with_tumbling_window(Count(2)).with_timestamp_field("ts")
            .with_watermark_interval(Duration.milliseconds(20)))
    feeder = submit_window(cluster, "no-ts", bolt, fields=("word", "ts"))
    feeder.feed(["none", None], msg_id="none")
    feeder.feed(["text", "soon"], msg_id="text")
    wait_until(lambda: feeder.failed == ["none", "text"], WAIT, message="both failed")
    errors = [e["error"] for e in errors_of(cluster, "no-ts", "w")]
    assert len(errors) == 2
    assert all("windowed bolt 'w'" in e and "timestamp field 'ts'" in e for e in errors)
    assert "is None, not a number" in errors[0] and "is 'soon', not a number" in errors[1]
    for word, ts in [("a", 10), ("b", 20), ("c", 30)]:
        feeder.feed([word, ts], msg_id=word)
    wait_until(lambda: len(logged(key)) == 1, WAIT, message="the window of a and b, the bolt went on")
    assert windows(key, "get") == [{"get": ["a", "b"]}]


def test_a_timestamp_extractor_gives_event_time_and_its_bad_values_fail_the_tuple(cluster, key):
    bolt = (Collect(key).with_tumbling_window(Count(2)).with_timestamp_extractor(lambda t: t["secs"] * 1000)
            .with_watermark_interval(Duration.milliseconds(20)))
    feeder = submit_window(cluster, "extractor", bolt, fields=("word", "secs"))
    feeder.feed(["bad", "soon"], msg_id="bad")
    wait_until(lambda: feeder.failed == ["bad"], WAIT, message="bad failed")
    [error] = errors_of(cluster, "extractor", "w")
    assert "windowed bolt 'w'" in error["error"] and "its timestamp extractor is 'soon" in error["error"]
    for word, secs in [("a", 1), ("b", 2.5), ("c", 3)]:
        feeder.feed([word, secs], msg_id=word)
    wait_until(lambda: len(logged(key)) == 1, WAIT, message="a window")
    assert windows(key, "get", "end") == [{"get": ["a", "b"], "end": 2500}]


# -- stateful windowed bolts -------------------------------------------------------------------------


class StatefulCollect(StatefulWindowedBolt):
    """Records each window under ``key``, the keys its state shows at each init_state under
    ``key + ".init"``, and counts its windows in its state."""

    def __init__(self, key):
        self.key = key

    def init_state(self, state):
        self.state = state
        record(self.key + ".init", sorted(state.keys()))

    def execute(self, window):
        record(self.key, [t.values[0] for t in window.get()])
        self.state.put("windows", self.state.get("windows", 0) + 1)


def stateful_conf(**extra) -> Config:
    conf = Config()
    conf.update({"topology.state.checkpoint.interval.ms": 100, "topology.message.timeout.secs": 5, **extra})
    return conf


def submit_stateful(cluster, name, key, conf):
    """feeder -> "w" (a StatefulCollect, tumbling Count(4)), once the checkpoint spout's INITSTATE
    reached it (init_state twice): a tuple before it would be rolled back (and failed)."""
    inits = len(logged(key + ".init"))
    feeder = submit_window(cluster, name, StatefulCollect(key).with_tumbling_window(Count(4)), fields=("v",),
                           conf=conf)
    wait_until(lambda: len(logged(key + ".init")) == inits + 2, WAIT, message="init_state, then INITSTATE's")
    return feeder


def test_a_stateful_window_is_restored_when_the_topology_is_submitted_again(tmp_path, key):
    conf = stateful_conf(**{"topology.state.provider": "sqlite",
                            "topology.state.provider.config": {"path": str(tmp_path / "state")}})
    with LocalCluster() as cluster:
        feeder = submit_stateful(cluster, "restart", key, conf)
        feed_all(feeder, "ab")
        # acked once a commit holds them in the window
        wait_until(lambda: sorted(feeder.acked) == ["a", "b"], WAIT, message="a, b committed")
        cluster.kill_topology("restart", wait_secs=0)
        wait_until(lambda: cluster.get_topologies() == [], WAIT, message="killed")
        assert logged(key) == []  # half a window: it never fired
        feeder = submit_stateful(cluster, "restart", key, conf)
        feed_all(feeder, "cd")
        wait_until(lambda: len(logged(key)) == 1, WAIT, message="the window after the restart")
        assert logged(key) == [["a", "b", "c", "d"]]
        wait_until(lambda: sorted(feeder.acked) == ["c", "d"], WAIT, message="c, d committed")
        topology = builder_with(StatefulCollect(key).with_tumbling_window(Count(4)), fields=("v",)).create_topology()
        wait_until(lambda: next(iter(committed_state("restart", topology, "w", conf).values())).get("windows") == 1,
                   WAIT, message="the window count committed")
        [state] = committed_state("restart", topology, "w", conf).values()
    assert WINDOW_STATE_KEY in state  # the raw state holds the window; the bolt's view never shows it
    assert all(keys in ([], ["windows"]) for keys in logged(key + ".init"))


def test_a_rollback_restores_the_committed_window_and_replays_what_it_did_not_hold(cluster, key):
    feeder = submit_stateful(cluster, "rollback", key, stateful_conf())
    feed_all(feeder, "ab")
    wait_until(lambda: sorted(feeder.acked) == ["a", "b"], WAIT, message="a, b committed")
    # a value the state cannot store (in-process tuples are not serialized): its checkpoint fails
    feeder.feed([object()], msg_id="unstorable")
    wait_until(lambda: feeder.failed == ["unstorable"], WAIT, message="the rollback failed it")
    [error] = errors_of(cluster, "rollback", "w")
    assert "component 'w' task" in error["error"] and f"key {WINDOW_STATE_KEY!r}" in error["error"]
    feed_all(feeder, "cd")
    wait_until(lambda: len(logged(key)) == 1, WAIT, message="a window")
    assert logged(key) == [["a", "b", "c", "d"]]  # restored from the commit, without the rolled-back tuple


def test_a_stateful_windowed_bolt_cannot_anchor(cluster, key):
    class Anchors(StatefulCollect):
        outputs = ["n"]

        def prepare(self, conf, context, collector):
            self.collector = collector

        def execute(self, window):
            self.collector.emit([len(window)], anchors=window.get())

    feeder = submit_window(cluster, "anchors", Anchors(key).with_tumbling_window(Count(1)), fields=("v",),
                           conf=stateful_conf())
    feeder.feed(["a"], msg_id="a")
    wait_until(lambda: errors_of(cluster, "anchors", "w"), WAIT, message="an error")
    assert "a stateful windowed bolt's emits cannot be anchored" in errors_of(cluster, "anchors", "w")[0]["error"]


# -- the example -------------------------------------------------------------------------------------


def test_the_sliding_window_example_prints_the_top_words_of_each_window(capsys):
    from squall.ops.cli import main

    path = os.path.join(os.path.dirname(__file__), "..", "examples", "sliding_window.py")
    assert main(["run", path, "--in-process", "--duration", "4"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("window ")]
    assert len(printed) >= 3, printed
    expected = sliding_window.expected_windows()
    assert printed == [sliding_window.format_window(*w) for w in expected[:len(printed)]]
