"""The Streams API (squall.streams): what each operation emits, how a pipeline becomes bolts
(fused where no repartition is needed), acking through a fused chain, and what bad input gets.

Pipelines run with squall.testing.complete_topology on fixed input; the output is what the
bolt feeding the pipeline's ``to(...)`` sink emitted, as Storm's streams tests read it.
"""

from __future__ import annotations

import collections
import functools
import subprocess
import sys
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from squall import Bolt, InvalidTopologyError, LocalCluster, Spout
from squall.api.grouping import FIELDS, GLOBAL, SHUFFLE
from squall.api.system_ids import CHECKPOINT_STREAM, is_system_id
from squall.api.windowing import Count as Count_
from squall.streams import Aggregator, Count, StreamBuilder, TumblingWindows
from squall.testing import FeederSpout, committed_state, complete_topology, read_tuples, wait_until


class Values(Spout):
    """A spout of one field (replaced by fixed data in the tests)."""

    outputs = ["value"]

    def next_tuple(self) -> None:
        pass

    def is_exhausted(self) -> bool:
        return True


class Sink(Bolt):
    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, tup) -> None:
        self.collector.ack(tup)


def run(pipeline, data: list, parallelism: int = 1) -> list:
    """What reaches the sink of ``pipeline(stream)`` on ``data`` (pairs as tuples)."""
    builder = StreamBuilder()
    pipeline(builder.new_stream(Values(), parallelism=parallelism)).to(Sink())
    topology = builder.build()
    sink = next(spec for spec in topology.components.values() if isinstance(spec.instantiate(), Sink))
    (source, stream), = [(c, s) for c, s in sink.inputs if s != CHECKPOINT_STREAM]
    results = complete_topology(topology, {"spout1": [[v] for v in data]})
    return [values[0] if len(values) == 1 else tuple(values) for values in read_tuples(results, source, stream)]


def test_word_count_emits_a_running_count_per_key_after_each_pair() -> None:
    out = run(lambda s: s.flat_map(str.split).map_to_pair(lambda w: (w, 1)).count_by_key(), ["a b a", "c a"])
    assert out == [("a", 1), ("b", 1), ("a", 2), ("c", 1), ("a", 3)]


def test_keyed_aggregations() -> None:
    pairs = lambda s: s.map_to_pair(lambda v: (v % 2, v))  # noqa: E731
    data = [1, 2, 3, 4, 5]
    assert run(lambda s: pairs(s).reduce_by_key(lambda a, b: a + b), data) == [
        (1, 1), (0, 2), (1, 4), (0, 6), (1, 9)]
    assert run(lambda s: pairs(s).group_by_key(), data) == [
        (1, [1]), (0, [2]), (1, [1, 3]), (0, [2, 4]), (1, [1, 3, 5])], "each emitted group is a copy"
    assert run(lambda s: pairs(s).aggregate_by_key(list, lambda acc, v: acc + [v], lambda a, b: a + b), data)[-1] \
        == (1, [1, 3, 5]), "a callable initial value is made anew for each key"
    assert run(lambda s: pairs(s).aggregate_by_key(aggregator=Count()), data)[-2:] == [(0, 2), (1, 3)]
    assert run(lambda s: pairs(s).map_values(lambda v: v * 10).flat_map_values(lambda v: [v, -v]), [1, 2]) == [
        (1, 10), (1, -10), (0, 20), (0, -20)]


def test_global_aggregations_run_in_one_task_and_emit_a_running_result() -> None:
    data = [3, 1, 4, 1, 5]
    assert run(lambda s: s.reduce(max), data, parallelism=2)[-1] == 5
    assert sorted(run(lambda s: s.count(), data, parallelism=2)) == [1, 2, 3, 4, 5]
    sums = run(lambda s: s.aggregate(0, lambda acc, v: acc + v, lambda a, b: a + b), data)
    assert sums == [3, 4, 8, 9, 14]
    mean = Aggregator.of(lambda: [0, 0], lambda acc, v: [acc[0] + v, acc[1] + 1],
                         lambda a, b: [a[0] + b[0], a[1] + b[1]])
    assert run(lambda s: s.aggregate(aggregator=mean), [2, 4])[-1] == [6, 2]


def test_branch_sends_each_value_to_the_first_matching_branch_only() -> None:
    builder = StreamBuilder()
    evens, threes = builder.new_stream(Values()).branch(lambda v: v % 2 == 0, lambda v: v % 3 == 0)
    evens.to(Sink())
    threes.to(Sink())
    topology = builder.build()
    results = complete_topology(topology, {"spout1": [[v] for v in range(1, 10)]})
    (source, even_stream), = topology.components["bolt2"].inputs
    (_, three_stream), = topology.components["bolt3"].inputs
    assert [v for v, in read_tuples(results, source, even_stream)] == [2, 4, 6, 8]
    assert [v for v, in read_tuples(results, source, three_stream)] == [3, 9], "6 went to the first branch"


OPERATIONS = {
    "filter": (lambda s, k: s.filter(lambda v, k=k: v % k != 0), lambda xs, k: [v for v in xs if v % k != 0]),
    "map": (lambda s, k: s.map(lambda v, k=k: v * k + 1), lambda xs, k: [v * k + 1 for v in xs]),
    "flat_map": (lambda s, k: s.flat_map(lambda v, k=k: [v] * (k % 3)),
                 lambda xs, k: [v for v in xs for _ in range(k % 3)]),
    "peek": (lambda s, k: s.peek(lambda v: None), lambda xs, k: list(xs)),
}


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.lists(st.integers(-50, 50), max_size=20),
       steps=st.lists(st.tuples(st.sampled_from(sorted(OPERATIONS)), st.integers(2, 5)), min_size=1, max_size=5),
       cut=st.integers(0, 5))
def test_stateless_pipelines_give_what_plain_python_gives_fused_or_not(data, steps, cut) -> None:
    expected = data
    for name, k in steps:
        expected = OPERATIONS[name][1](expected, k)

    def pipeline(stream, repartition_at=None):
        for i, (name, k) in enumerate(steps):
            if i == repartition_at:
                stream = stream.repartition(2)
            stream = OPERATIONS[name][0](stream, k)
        return stream

    assert run(pipeline, data) == expected, "fused: one bolt, in order"
    unfused = run(functools.partial(pipeline, repartition_at=min(cut, len(steps) - 1)), data)
    assert collections.Counter(unfused) == collections.Counter(expected), "cut by a repartition: same multiset"


def groupings(spec) -> list:
    """The groupings of a component's inputs, the checkpoint stream's left out (aggregations
    keep checkpointed state, so the topology has one)."""
    return [g for (_, stream), g in spec.inputs.items() if not is_system_id(stream)]


def test_operations_that_need_no_repartition_are_fused_and_a_key_operation_starts_a_bolt() -> None:
    builder = StreamBuilder()
    (builder.new_stream(Values(), parallelism=2)
        .flat_map(str.split).map_to_pair(lambda w: (w, 1))
        .count_by_key().map_values(str)
        .to(Sink()))
    components = builder.build().components
    assert sorted(components) == ["bolt1", "bolt2", "bolt3", "spout1"]
    assert not any(spec.stateful for spec in components.values()), "the spout keeps no position: counts in memory"
    first, second = components["bolt1"].instantiate(), components["bolt2"].instantiate()
    assert first.describe_operations() == "flat_map -> map_to_pair"
    assert second.describe_operations() == "count_by_key -> map_values", \
        "a key-preserving operation stays with the key partition"
    assert [g.type for g in groupings(components["bolt1"])] == [SHUFFLE]
    (grouping,) = groupings(components["bolt2"])
    assert grouping.type == FIELDS and list(grouping.fields) == ["key"]
    assert components["bolt1"].parallelism == components["bolt2"].parallelism == 2


def test_a_named_operation_gives_its_bolt_its_id_and_the_unnamed_keep_their_numbers() -> None:
    builder = StreamBuilder()
    words = builder.new_stream(Values(), parallelism=2).name("lines").flat_map(str.split)
    counts = words.map_to_pair(lambda w: (w, 1)).count_by_key().name("counts")
    counts.map_values(str).repartition(3).filter(bool).to(Sink(), name="out")
    components = builder.build().components
    assert sorted(c for c in components if c[0].isalpha()) == ["bolt1", "bolt2", "counts", "lines", "out"]
    assert components["counts"].instantiate().describe_operations() == "count_by_key -> map_values"
    assert [src for src, stream in components["counts"].inputs if not is_system_id(stream)] == ["bolt1"]
    assert [src for src, stream in components["out"].inputs if not is_system_id(stream)] == ["bolt2"]

    unnamed = StreamBuilder()
    unnamed.new_stream(Values()).map(abs).to(Sink())
    assert sorted(c for c in unnamed.build().components if c[0].isalpha()) == ["bolt1", "bolt2", "spout1"]


def test_names_that_clash_are_refused_at_build_naming_them() -> None:
    builder = StreamBuilder()
    builder.new_stream(Values(), parallelism=2).map(abs).name("a").filter(bool).name("b").to(Sink())
    with pytest.raises(InvalidTopologyError, match=r"name: operations named \['a', 'b'\] run in one bolt "
                                                   r"\(map -> filter\): name one of them, or repartition"):
        builder.build()
    builder = StreamBuilder()
    builder.new_stream(Values()).name("x").map(abs).repartition(2).name("bolt1").map(abs).to(Sink(), name="x")
    with pytest.raises(InvalidTopologyError, match=r"name: component id\(s\) \['bolt1', 'x'\] given to more than one"):
        builder.build()
    with pytest.raises(ValueError, match="name: this operation is named 'x' already, not 'y'"):
        StreamBuilder().new_stream(Values()).name("x").name("y")
    with pytest.raises(ValueError, match="name: a component id must be a non-empty string, not ''"):
        StreamBuilder().new_stream(Values()).name("")


def test_repartition_and_global_aggregation_plans() -> None:
    builder = StreamBuilder()
    stream = builder.new_stream(Values(), parallelism=2)
    assert stream.repartition(2) is stream, "the same parallelism: nothing to do"
    stream.map(abs).repartition(3).filter(bool).reduce(max).to(Sink())
    components = builder.build().components
    assert components["bolt2"].parallelism == 3 and [g.type for g in groupings(components["bolt2"])] == [SHUFFLE]
    assert components["bolt3"].parallelism == 1 and [g.type for g in groupings(components["bolt3"])] == [GLOBAL]


def test_counts_by_key_are_exact_over_several_tasks() -> None:
    words = [f"w{i % 7}" for i in range(200)]
    out = run(lambda s: s.map_to_pair(lambda w: (w, 1)).count_by_key(), words, parallelism=3)
    final = {}
    for word, count in out:
        final[word] = max(final.get(word, 0), count)
    assert final == collections.Counter(words)


def test_key_operations_on_a_stream_of_values_are_refused_naming_the_fix() -> None:
    stream = StreamBuilder().new_stream(Values())
    with pytest.raises(TypeError,
                       match="count_by_key needs a stream of \\(key, value\\) pairs; make one with map_to_pair"):
        stream.map(str).count_by_key()
    with pytest.raises(ValueError, match="repartition: parallelism must be an integer >= 1, not 0"):
        stream.repartition(0)


def test_a_function_that_cannot_be_shipped_is_refused_at_build_naming_the_operation() -> None:
    builder = StreamBuilder()
    lock = threading.Lock()
    builder.new_stream(Values()).map(abs).filter(lambda v: lock.locked()).to(Sink())
    with pytest.raises(InvalidTopologyError,
                       match=r"^filter \(.*test_streams.py:\d+\): its function cannot be shipped"):
        builder.build()


def test_a_spout_without_a_default_stream_is_refused() -> None:
    class Other(Spout):
        outputs = {"other": ["v"]}

    with pytest.raises(InvalidTopologyError, match="new_stream: spout Other declares no 'default' stream"):
        StreamBuilder().new_stream(Other())


def halve(v: int) -> int:
    return 10 // v  # raises for 0: the line the error must name


def test_a_user_function_that_raises_fails_the_tuple_and_names_the_operation_and_line() -> None:
    spout = FeederSpout(["value"])
    builder = StreamBuilder()
    builder.new_stream(spout).map(halve).to(Sink())
    with LocalCluster() as cluster:
        cluster.submit_topology("fails", {"topology.acker.executors": 1}, builder.build())
        for i, v in enumerate([5, 0, 2]):
            spout.feed([v], msg_id=i)
        wait_until(lambda: len(spout.acked) == 2 and spout.failed == [1], timeout=30,
                   message="2 acked, the 0 failed")
        errors = cluster.get_topology_info("fails")["components"]["bolt1"]["errors"]
    assert sorted(spout.acked) == [0, 2], "a tuple is acked once the fused chain processed it"
    line = halve.__code__.co_firstlineno + 1
    assert any(f"operation map raised ZeroDivisionError: integer division or modulo by zero "
               f"(at {__file__}:{line})" in e["error"] for e in errors), errors


def test_update_state_by_key_keeps_each_keys_state_in_the_checkpoints(tmp_path) -> None:
    spout = FeederSpout(["value"])
    builder = StreamBuilder()
    (builder.new_stream(spout)
        .map_to_pair(lambda word: (word, 1))
        .update_state_by_key(0, lambda total, n: total + n)
        .to(Sink()))
    topology = builder.build()
    assert topology.checkpointed and topology.components["bolt2"].stateful
    assert topology.components["bolt2"].inputs[("bolt1", "s1")].type == FIELDS, \
        "always behind a fields grouping on the key, even at one task"
    conf = {"topology.acker.executors": 1, "topology.state.checkpoint.interval.ms": 100,
            "topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(tmp_path / "s")}}
    emitted: list[tuple] = []
    with LocalCluster() as cluster:
        cluster.submit_topology(
            "counts", conf, topology,
            capture=lambda component, stream, values: emitted.append(tuple(values)) if stream == "s2" else None)
        for i, word in enumerate(["a", "b", "a"]):
            spout.feed([word], msg_id=i)
        wait_until(lambda: len(spout.acked) == 3, timeout=30, message="every word acked (after its state's commit)")
    committed = committed_state("counts", topology, "bolt2", conf)
    assert [state for state in committed.values()] == [{"a": 2, "b": 1}]
    assert emitted == [("a", 1), ("b", 1), ("a", 2)]


class PositionedFeeder(FeederSpout):
    """A feeder standing for a spout that keeps its position (a stateful spout, a broker's)."""

    keeps_position = True


def test_aggregations_keep_checkpointed_state_when_the_spout_keeps_its_position(tmp_path) -> None:
    spout = PositionedFeeder(["word"])
    builder = StreamBuilder()
    pairs = builder.new_stream(spout).map_to_pair(lambda word: (word, 1))
    pairs.count_by_key().reduce_by_key(max).to(Sink())  # two states in one bolt
    pairs.window(TumblingWindows.of(Count_(2))).count_by_key().print()  # per window, in memory
    topology = builder.build()
    assert [cid for cid, spec in topology.components.items() if spec.stateful] == ["bolt1"]
    assert topology.components["bolt1"].operations == "map_to_pair -> count_by_key -> reduce_by_key"
    conf = {"topology.acker.executors": 1, "topology.state.checkpoint.interval.ms": 100,
            "topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(tmp_path / "s")}}
    with LocalCluster() as cluster:
        cluster.submit_topology("kept", conf, topology)
        for i, word in enumerate(["a", "b", "a", "c"]):
            spout.feed([word], msg_id=i)
        wait_until(lambda: len(spout.acked) == 4, timeout=30, message="every word acked (after its state's commit)")
    (state,) = committed_state("kept", topology, "bolt1", conf).values()
    # several states in one bolt: each under (operation#step, key)
    assert state == {("count_by_key#1", "a"): 2, ("count_by_key#1", "b"): 1, ("count_by_key#1", "c"): 1,
                     ("reduce_by_key#2", "a"): 2, ("reduce_by_key#2", "b"): 1, ("reduce_by_key#2", "c"): 1}


def test_squall_plan_names_the_operations_each_bolt_runs(tmp_path) -> None:
    pipeline = tmp_path / "pipeline.py"
    pipeline.write_text(
        "from squall import Spout\n"
        "from squall.streams import StreamBuilder\n"
        "class Lines(Spout):\n"
        "    outputs = ['line']\n"
        "builder = StreamBuilder()\n"
        "builder.new_stream(Lines(), parallelism=2).flat_map(str.split).map_to_pair(lambda w: (w, 1))"
        ".count_by_key().print()\n"
        "topology = builder.build()\n")
    done = subprocess.run([sys.executable, "-m", "squall", "plan", str(pipeline)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    runs = sorted(f"{line.split()[1]}: {line.split(' runs ')[1]}" for line in done.stdout.splitlines()
                  if line.startswith("  executor") and " runs " in line)
    assert runs == ["bolt1: flat_map -> map_to_pair"] * 2 + ["bolt2: count_by_key -> print"] * 2


# -- Storm's StreamBuilderTest shapes (those without windows or joins) ---------------------------------


def shape(pipeline, parallelism: int = 1) -> dict[str, tuple[int, list[tuple[str, str, str]]]]:
    """Each component's parallelism and inputs ((component, stream, grouping type)) for
    ``pipeline(new_stream(...))``, the checkpoint spout and stream left out."""
    builder = StreamBuilder()
    pipeline(builder.new_stream(Values(), parallelism=parallelism))
    return {cid: (spec.parallelism, sorted((c, s, g.type) for (c, s), g in spec.inputs.items()
                                           if not is_system_id(s)))
            for cid, spec in builder.build().components.items() if not is_system_id(cid)}


def test_storm_spout_to_bolt_subscribes_the_bolt_to_the_spouts_default_stream() -> None:
    assert shape(lambda s: s.to(Sink())) == {"spout1": (1, []), "bolt1": (1, [("spout1", "default", SHUFFLE)])}


def test_storm_a_branch_and_its_outputs_run_in_one_bolt() -> None:
    assert shape(lambda s: s.branch(lambda v: True)[0].print()) == {
        "spout1": (1, []), "bolt1": (1, [("spout1", "default", SHUFFLE)])}


def test_storm_repartitions_start_bolts_and_set_the_parallelism() -> None:
    components = shape(lambda s: s.repartition(3).filter(bool).repartition(2).filter(bool).count().print())
    assert {cid: p for cid, (p, _) in components.items()} == {"spout1": 1, "bolt1": 3, "bolt2": 2, "bolt3": 1}, \
        "Storm keeps the global aggregate's bolt at its parent's parallelism (2); here it runs the one task used"
    assert [g for *_, g in components["bolt3"][1]] == [GLOBAL]


def test_storm_a_key_operation_after_a_repartition_replaces_its_shuffle_with_a_key_partition() -> None:
    components = shape(lambda s: s.map_to_pair(lambda v: (v, v)).reduce_by_key(lambda a, b: a + b)
                       .repartition(10).reduce_by_key(lambda a, b: 0).print())
    assert components["bolt1"] == (1, [("spout1", "default", SHUFFLE)]), "one task: the first reduce is fused"
    assert components["bolt2"][0] == 10 and [g for *_, g in components["bolt2"][1]] == [FIELDS]


def test_storm_a_key_operation_on_one_task_is_fused() -> None:
    assert shape(lambda s: s.map_to_pair(lambda v: (v, v)).reduce_by_key(lambda a, b: a + b).print()) == {
        "spout1": (1, []), "bolt1": (1, [("spout1", "default", SHUFFLE)])}
