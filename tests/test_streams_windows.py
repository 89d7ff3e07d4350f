"""The Streams API over windows (squall.streams): what windowed aggregations and joins emit per
window, with Storm's semantics; out-of-order and late values in event time; windows of parallel
tasks ended together downstream (punctuations); acking through windows; what bad input gets.

Pipelines run on a LocalCluster fed by FeederSpouts; sinks record every tuple they receive,
``(key, value, window)`` for a windowed pair stream. Event-time windows end on watermarks (every
20 ms here), so each test feeds a value far ahead to move the watermark past the windows it
reads, and waits on what the sink recorded.
"""

from __future__ import annotations

import collections

import pytest

from helpers import errors_of, logged, record, wait_for
from squall import Bolt, Config, InvalidTopologyError
from squall.api.windowing import Count, Duration
from squall.streams import SlidingWindows, StreamBuilder, TumblingWindows
from squall.testing import FeederSpout, advance_time, wait_until

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0


class TupleSink(Bolt):
    """Records the values of every input, as a tuple, under ``key``."""

    def __init__(self, key) -> None:
        self.key = key

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, tup) -> None:
        record(self.key, tuple(tup.values))
        self.collector.ack(tup)


def event_time(window):
    """``window`` in event time: the timestamp is the value's second element; watermarks every 20 ms."""
    return window.with_timestamp(lambda value: value[1]).with_watermark_interval(Duration.milliseconds(20))


def by_window(rows):
    """``(key, value, window)`` rows -> {window: sorted [(key, value)]}."""
    windows = collections.defaultdict(list)
    for *pair, window in rows:
        windows[window].append(tuple(pair))
    return {w: sorted(rows) for w, rows in windows.items()}


def executed(cluster, name, component) -> int:
    return cluster.get_topology_info(name)["components"][component]["executed"]


def feed(feeder, rows, prefix=""):
    for i, row in enumerate(rows):
        feeder.feed(list(row), msg_id=f"{prefix}{i}")


# -- windowed aggregations -----------------------------------------------------------------------


def test_a_tumbling_count_window_counts_each_window_by_key_and_acks_its_values(cluster, key):
    feeder = FeederSpout(["word"])
    builder = StreamBuilder()
    (builder.new_stream(feeder).window(TumblingWindows.of(Count(3)))
        .map_to_pair(lambda word: (word, 1)).count_by_key().to(TupleSink(key)))
    cluster.submit_topology("count-windows", Config(), builder.build())
    feed(feeder, [[w] for w in "abacab"])
    wait_until(lambda: len(logged(key)) == 5, WAIT, message="two windows' counts")
    rows = logged(key)
    # each window's keys in the order they came; nothing running between windows
    assert [(k, v) for k, v, _ in rows] == [("a", 2), ("b", 1), ("c", 1), ("a", 1), ("b", 1)]
    assert [window for *_, window in rows] == [1, 1, 2, 2, 2]  # windows sliding by a count are numbered
    wait_until(lambda: len(feeder.acked) == 6, WAIT, message="every value acked as its window ended")


def test_a_sliding_count_window_sees_a_value_once_per_window_it_is_in(cluster, key):
    feeder = FeederSpout(["n"])
    builder = StreamBuilder()
    windowed = builder.new_stream(feeder).window(SlidingWindows.of(Count(3), Count(1)))
    windowed.reduce(lambda a, b: a + b).to(TupleSink(key))
    windowed.map(lambda n: n * 10).to(TupleSink(key + "map"))
    cluster.submit_topology("sliding-sum", Config(), builder.build())
    feed(feeder, [[n] for n in (1, 2, 3, 4, 5)])
    wait_until(lambda: len(logged(key)) == 5, WAIT, message="a sum per value")
    assert logged(key) == [(1, 1), (3, 2), (6, 3), (9, 4), (12, 5)]
    # a stateless operation after a window emits each value once per window holding it (Storm's)
    wait_until(lambda: len(logged(key + "map")) == 12, WAIT)
    assert [v for v, _ in logged(key + "map")] == [10, 10, 20, 10, 20, 30, 20, 30, 40, 30, 40, 50]


def test_event_time_windows_take_out_of_order_values_and_send_late_ones_to_the_late_stream(cluster, key):
    feeder = FeederSpout(["word", "ts"])
    builder = StreamBuilder()
    window = event_time(TumblingWindows.of(Duration(1))).with_lag(Duration.milliseconds(200))
    windowed = builder.new_stream(feeder).window(window)
    windowed.late().to(TupleSink(key + "late"))
    windowed.map_to_pair(lambda v: (v[0], 1)).count_by_key().to(TupleSink(key))
    cluster.submit_topology("event-time", Config(), builder.build())
    # "c" at 300 comes after "b" at 900, within the lag; 2600 moves the watermark to 2400
    feed(feeder, [("a", 100), ("b", 900), ("c", 300), ("a", 1500), ("a", 1600), ("e", 2600)])
    wait_until(lambda: len(logged(key)) == 4, WAIT, message="the windows ending at 1000 and 2000")
    assert by_window(logged(key)) == {1000: [("a", 1), ("b", 1), ("c", 1)], 2000: [("a", 2)]}
    feeder.feed(["late", 800], msg_id="late")
    wait_for(feeder, "late")
    assert logged(key + "late") == [(("late", 800),)]
    assert len(logged(key)) == 4  # the late value is in no window


def test_parallel_windows_end_together_in_a_keyed_aggregation_after_them(cluster, key):
    """Two window tasks (shuffled), then a count by key on two tasks behind a fields grouping:
    each window's counts are whole, although each key's values came from both window tasks."""
    feeder = FeederSpout(["word", "ts"])
    builder = StreamBuilder()
    (builder.new_stream(feeder).repartition(2).window(event_time(TumblingWindows.of(Duration(1))))
        .map_to_pair(lambda v: (v[0], 1)).count_by_key().to(TupleSink(key)))
    topology = builder.build()
    assert topology.components["bolt2"].parallelism == 2
    cluster.submit_topology("parallel-windows", Config(), topology)
    words = [("a", 10 * i) for i in range(1, 30)] + [("b", 500), ("b", 600), ("a", 1100), ("c", 1200), ("c", 1300)]
    feed(feeder, words + [("z", 5500), ("z", 5501), ("z", 5502), ("z", 5503)])
    wait_until(lambda: len(logged(key)) == 4, WAIT, message="two windows' counts")
    assert by_window(logged(key)) == {1000: [("a", 29), ("b", 2)], 2000: [("a", 1), ("c", 2)]}


@pytest.mark.simulated_time
def test_processing_time_windows_of_parallel_tasks_are_aligned_and_an_idle_task_does_not_hold_them(cluster, key):
    """Durations in processing time end at multiples of the interval in every task, so the counts
    downstream are whole per window; a window task that got nothing punctuates on its ticks."""
    feeder = FeederSpout(["word"])
    builder = StreamBuilder()
    (builder.new_stream(feeder).repartition(3).window(TumblingWindows.of(Duration(1)))
        .map_to_pair(lambda w: (w, 1)).repartition(2).count_by_key().to(TupleSink(key)))
    cluster.submit_topology("processing-time", Config(), builder.build())
    feed(feeder, [["a"], ["b"]])  # three window tasks: one gets nothing
    wait_until(lambda: executed(cluster, "processing-time", "bolt1") == 2, WAIT)
    advance_time(1.2)  # past the end of the window holding them, in whichever tasks
    wait_until(lambda: len(logged(key)) == 2, WAIT, message="the window's counts")
    (window, counts), = by_window(logged(key)).items()
    assert counts == [("a", 1), ("b", 1)] and window % 1000 == 0
    wait_until(lambda: len(feeder.acked) == 2, WAIT)


def test_a_windowed_aggregation_after_a_repartition_gives_what_the_fused_one_gives(cluster, key):
    rows = [("x", 100), ("y", 150), ("x", 700), ("x", 1200), ("y", 1900), ("z", 9500), ("z", 9501)]
    for name, repartition in (("fused", 1), ("apart", 2)):
        feeder = FeederSpout(["word", "ts"])
        builder = StreamBuilder()
        (builder.new_stream(feeder).window(event_time(TumblingWindows.of(Duration(1))))
            .map_to_pair(lambda v: (v[0], v[1])).repartition(repartition).group_by_key().to(TupleSink(key + name)))
        topology = builder.build()
        assert len(topology.components) == (3 if repartition == 1 else 4)
        cluster.submit_topology(f"windowed-{name}", Config(), topology)
        feed(feeder, rows)
    for name in ("fused", "apart"):
        wait_until(lambda: len(logged(key + name)) == 4, WAIT, message=name)
    assert by_window(logged(key + "fused")) == by_window(logged(key + "apart")) == {
        1000: [("x", [100, 700]), ("y", [150])], 2000: [("x", [1200]), ("y", [1900])]}


def test_an_error_in_a_window_fails_its_values_and_names_the_operation(cluster, key):
    feeder = FeederSpout(["n"])
    builder = StreamBuilder()
    (builder.new_stream(feeder).window(TumblingWindows.of(Count(2)))
        .map(lambda n: 10 // n).aggregate(0, lambda acc, v: acc + v, lambda a, b: a + b).to(TupleSink(key)))
    cluster.submit_topology("window-error", Config(), builder.build())
    feed(feeder, [[1], [0], [2], [5]])
    wait_until(lambda: sorted(feeder.failed) == ["0", "1"], WAIT, message="the first window's values failed")
    wait_until(lambda: logged(key) != [], WAIT)
    assert [total for total, _ in logged(key)] == [7]  # 10 // 2 + 10 // 5: nothing of the failed window
    wait_until(lambda: sorted(feeder.acked) == ["2", "3"], WAIT)
    errors = [e["error"] for e in errors_of(cluster, "window-error", "bolt1")]
    assert any("operation map raised ZeroDivisionError" in e and "test_streams_windows.py" in e for e in errors)


# -- joins -----------------------------------------------------------------------------------------


LEFT = [("a", 100, 1), ("a", 200, 2), ("b", 300, 3), ("a", 1500, 9), ("z", 3000, 0)]
RIGHT = [("a", 150, "x"), ("c", 400, "y"), ("a", 500, "w"), ("z", 3000, 0)]


def test_joins_pair_each_windows_values_by_key(cluster, key):
    left, right = FeederSpout(["k", "ts", "v"]), FeederSpout(["k", "ts", "v"])
    builder = StreamBuilder()
    window = event_time(TumblingWindows.of(Duration(1)))
    lefts = builder.new_stream(left).window(window).map_to_pair(lambda r: (r[0], r[2]))
    rights = builder.new_stream(right).window(window).map_to_pair(lambda r: (r[0], r[2]))
    kinds = ("join", "left_outer_join", "right_outer_join", "full_outer_join", "co_group_by_key")
    for kind in kinds:
        getattr(lefts, kind)(rights).to(TupleSink(key + kind))
    lefts.join(rights, lambda v, w: f"{v}{w}").to(TupleSink(key + "joiner"))
    cluster.submit_topology("joins", Config(), builder.build())
    feed(left, LEFT, "l")
    feed(right, RIGHT, "r")
    wait_until(lambda: len(logged(key + "co_group_by_key")) == 4, WAIT, message="the windows to 2000")
    inner = [("a", (1, "w")), ("a", (1, "x")), ("a", (2, "w")), ("a", (2, "x"))]
    expected = {
        "join": {1000: inner},
        "left_outer_join": {1000: sorted(inner + [("b", (3, None))]), 2000: [("a", (9, None))]},
        "right_outer_join": {1000: sorted(inner + [("c", (None, "y"))])},
        "co_group_by_key": {1000: [("a", ([1, 2], ["x", "w"])), ("b", ([3], [])), ("c", ([], ["y"]))],
                            2000: [("a", ([9], []))]},
        "joiner": {1000: [("a", "1w"), ("a", "1x"), ("a", "2w"), ("a", "2x")]},
    }
    expected["full_outer_join"] = {1000: sorted(inner + [("b", (3, None)), ("c", (None, "y"))]),
                                   2000: [("a", (9, None))]}
    for kind, windows in expected.items():
        wait_until(lambda: len(logged(key + kind)) == sum(map(len, windows.values())), WAIT, message=kind)
        assert by_window(logged(key + kind)) == windows, kind
    # every value is acked once its window is joined (the "z" values hold the watermark up)
    wait_until(lambda: len(left.acked) == 4 and len(right.acked) == 3, WAIT)


def test_a_join_takes_out_of_order_values_and_leaves_late_ones_to_the_late_stream(cluster, key):
    left, right = FeederSpout(["k", "ts", "v"]), FeederSpout(["k", "ts", "v"])
    builder = StreamBuilder()
    window = event_time(TumblingWindows.of(Duration(1))).with_lag(Duration.milliseconds(300))
    lefts = builder.new_stream(left).window(window)
    rights = builder.new_stream(right).window(window)
    rights.late().to(TupleSink(key + "late"))
    pairs = [s.map_to_pair(lambda r: (r[0], r[2])) for s in (lefts, rights)]
    pairs[0].join(pairs[1]).to(TupleSink(key))
    cluster.submit_topology("join-out-of-order", Config(), builder.build())
    feed(left, [("a", 100, 1), ("a", 900, 2), ("z", 5000, 0)], "l")
    # 400 comes after 700 (within the lag of 300 ms); 5000 passes the window ending at 1000
    feed(right, [("a", 700, "x"), ("a", 400, "y"), ("z", 5000, 0)], "r")
    wait_until(lambda: len(logged(key)) == 4, WAIT, message="the window ending at 1000 joined")
    assert by_window(logged(key)) == {1000: [("a", (1, "x")), ("a", (1, "y")), ("a", (2, "x")), ("a", (2, "y"))]}
    right.feed(["a", 500, "late"], msg_id="late")
    wait_for(right, "late")
    assert logged(key + "late") == [(("a", 500, "late"),)] and len(logged(key)) == 4


# Storm's JoinProcessorTest and CoGroupByKeyProcessorTest, ported: the same rows in one window
STORM_LEFT = [(2, 4), (5, 25), (7, 49)]
STORM_RIGHT = [(1, 1), (2, 8), (5, 125), (6, 216)]


def storm_join(cluster, key, kind, left_rows, right_rows):
    """``kind`` of two streams of (key, value) rows, all in the event-time window ending at 1000
    (a value at 5000 on each side ends it)."""
    left, right = FeederSpout(["k", "v", "ts"]), FeederSpout(["k", "v", "ts"])
    builder = StreamBuilder()
    window = event_time(TumblingWindows.of(Duration(1))).with_timestamp(lambda row: row[2])
    lefts, rights = (builder.new_stream(s).window(window).map_to_pair(lambda row: (row[0], row[1]))
                     for s in (left, right))
    getattr(lefts, kind)(rights).to(TupleSink(key))
    cluster.submit_topology(f"storm-{kind}", Config(), builder.build())
    feed(left, [(k, v, 100) for k, v in left_rows] + [("z", 0, 5000)], "l")
    feed(right, [(k, v, 200) for k, v in right_rows] + [("z", 0, 5000)], "r")


@pytest.mark.parametrize("kind,expected", [
    ("join", [(2, (4, 8)), (5, (25, 125))]),
    ("left_outer_join", [(2, (4, 8)), (5, (25, 125)), (7, (49, None))]),
    ("right_outer_join", [(1, (None, 1)), (2, (4, 8)), (5, (25, 125)), (6, (None, 216))]),
    ("full_outer_join", [(1, (None, 1)), (2, (4, 8)), (5, (25, 125)), (6, (None, 216)), (7, (49, None))]),
])
def test_storm_join_processor_cases(cluster, key, kind, expected):
    storm_join(cluster, key, kind, STORM_LEFT, STORM_RIGHT)
    wait_until(lambda: len(logged(key)) == len(expected), WAIT, message=kind)
    assert by_window(logged(key)) == {1000: expected}


def test_a_join_with_one_windowed_side_windows_the_other_alike(cluster, key):
    """Storm's docs: ``squares.window(...).join(cubes)``: the bolt windows both inputs."""
    squares, cubes = FeederSpout(["n"]), FeederSpout(["n"])
    builder = StreamBuilder()
    windowed = builder.new_stream(squares).window(TumblingWindows.of(Count(3))).map_to_pair(lambda n: (n, n * n))
    windowed.join(builder.new_stream(cubes).map_to_pair(lambda n: (n, n ** 3))).to(TupleSink(key))
    topology = builder.build()
    assert sum(1 for spec in topology.components.values() if (spec.operations or "").startswith("window")) == 2
    cluster.submit_topology("one-side-windowed", Config(), topology)
    feed(squares, [[1], [2], [3]], "s")
    feed(cubes, [[2], [3], [4]], "c")
    wait_until(lambda: len(logged(key)) == 2, WAIT, message="the first windows joined")
    assert by_window(logged(key)) == {1: [(2, (4, 8)), (3, (9, 27))]}


def test_storm_co_group_by_key_case(cluster, key):
    storm_join(cluster, key, "co_group_by_key", [(2, 4), (5, 25), (7, 49), (7, 87)],
               [(1, 1), (2, 8), (5, 125), (5, 50), (6, 216)])
    wait_until(lambda: len(logged(key)) == 5, WAIT, message="five keys co-grouped")
    assert {k: v for k, v, _ in logged(key)} == {
        2: ([4], [8]), 5: ([25], [125, 50]), 7: ([49, 87], []), 1: ([], [1]), 6: ([], [216])}


def test_storm_branch_and_join_shape():
    """Storm's StreamBuilderTest.testBranchAndJoin, windowed (a join here needs windows): the
    branches run fused in the spout's bolt, each window in a bolt of its own, and the join
    reads both behind fields groupings on the key, with their punctuations."""
    builder = StreamBuilder()
    evens, threes = builder.new_stream(FeederSpout(["n"]), parallelism=2).branch(lambda x: x % 2 == 0,
                                                                                lambda x: x % 3 == 0)
    window = TumblingWindows.of(Count(10))
    left, right = (branch.map_to_pair(lambda x: (x, 1)).window(window) for branch in (evens, threes))
    left.join(right).print()
    components = builder.build().components
    assert {cid: spec.operations for cid, spec in components.items() if spec.operations} == {
        "bolt1": "branch -> branch[0] -> map_to_pair -> branch[1] -> map_to_pair", "bolt2": "window",
        "bolt3": "join -> print", "bolt4": "window"}
    inputs = {(source, stream): grouping.type for (source, stream), grouping in components["bolt3"].inputs.items()}
    assert inputs == {("bolt2", "s5"): "fields", ("bolt2", "s5__punctuation"): "all",
                      ("bolt4", "s7"): "fields", ("bolt4", "s7__punctuation"): "all"}
    assert components["bolt3"].parallelism == 2


# -- state queries ---------------------------------------------------------------------------------


def test_state_query_reads_the_state_update_state_by_key_keeps(cluster, key):
    words, queries = FeederSpout(["word"]), FeederSpout(["word"])
    builder = StreamBuilder()
    counts = builder.new_stream(words).map_to_pair(lambda w: (w, 1)).update_state_by_key(0, lambda n, _: n + 1)
    builder.new_stream(queries).state_query(counts).to(TupleSink(key))
    topology = builder.build()
    assert topology.components["bolt2"].instantiate().describe_operations() == "update_state_by_key -> state_query"
    cluster.submit_topology("state-query", Config({"topology.state.checkpoint.interval.ms": 50}), topology)
    feed(words, [["a"], ["b"], ["a"]])
    wait_until(lambda: len(words.acked) == 3, WAIT, message="the counts committed")
    feed(queries, [["a"], ["nothing"], ["b"]], "q")
    wait_until(lambda: len(queries.acked) == 3, WAIT)
    assert sorted(logged(key)) == [("a", 2), ("b", 1)]  # no state for "nothing": no pair


# -- bad input -----------------------------------------------------------------------------------


def streams():
    builder = StreamBuilder()
    return builder, builder.new_stream(FeederSpout(["k", "v"]), pairs=True, value_mapper=tuple)


@pytest.mark.parametrize("make,error,message", [
    (lambda s: s.join(s), InvalidTopologyError, r"^join: the streams are not windowed: call window\(\.\.\.\) on one"),
    (lambda s: s.window(TumblingWindows.of(Count(2))).co_group_by_key(s.window(TumblingWindows.of(Count(3)))),
     InvalidTopologyError, r"^co_group_by_key: the streams have different windows, TumblingWindows.of\(Count\(2\)\) "
     r"and TumblingWindows.of\(Count\(3\)\)"),
    (lambda s: s.window(TumblingWindows.of(Count(2))).window(TumblingWindows.of(Count(2))), InvalidTopologyError,
     r"^window: the stream is windowed already"),
    (lambda s: s.window(Count(2)), TypeError, r"^window takes TumblingWindows.of\(\.\.\.\) or SlidingWindows"),
    (lambda s: TumblingWindows.of(None), ValueError, r"^TumblingWindows.of: a window needs a length"),
    (lambda s: SlidingWindows.of(Count(3), Duration(0)), ValueError, r"sliding interval must be at least 1 ms"),
    (lambda s: s.window(TumblingWindows.of(Count(2))).late(), InvalidTopologyError,
     r"^late: TumblingWindows.of\(Count\(2\)\) is in processing time"),
    (lambda s: s.late(), InvalidTopologyError, r"^late: call it on the stream window\(\.\.\.\) returned"),
    (lambda s: s.map_values(abs).window(TumblingWindows.of(Count(2)).with_timestamp_field("ts")),
     InvalidTopologyError, r"^window: with_timestamp_field\('ts'\) reads a spout's field"),
    (lambda s: s.map(str).state_query(s), TypeError, r"^state_query takes the stream update_state_by_key returned"),
    (lambda s: s.state_query(s.update_state_by_key(0, max)), TypeError, r"^state_query needs a stream of keys"),
])
def test_bad_windows_joins_and_queries_are_refused_naming_the_operation(make, error, message):
    _, stream = streams()
    with pytest.raises(error, match=message):
        make(stream)


def test_a_join_with_streams_of_another_builder_is_refused():
    _, mine = streams()
    _, theirs = streams()
    window = TumblingWindows.of(Count(2))
    with pytest.raises(InvalidTopologyError, match=r"^join: the other stream belongs to another StreamBuilder"):
        mine.window(window).join(theirs.window(window))


def test_a_window_longer_than_the_message_timeout_is_refused_at_build():
    builder, stream = streams()
    stream.window(TumblingWindows.of(Duration(60))).count_by_key().print()
    topology = builder.build()
    from squall.api.windowing.checks import check_topology_windows
    with pytest.raises(InvalidTopologyError, match=r"windowed bolt 'bolt1': .*topology.message.timeout.secs"):
        check_topology_windows("t", topology, {"topology.message.timeout.secs": 30})
