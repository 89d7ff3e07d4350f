"""TopologyBuilder validation, the ``outputs`` shorthand, parallelism and scheduling,
per-task component instances and the TopologyContext seen from inside ``prepare``."""

from __future__ import annotations

import collections
import threading
import types

import pytest

from helpers import BasicSink, Sink, feeder_builder, logged, record
from squall import Bolt, Config, CustomStreamGrouping, Fields, InvalidTopologyError, Spout, TopologyBuilder
from squall.api.config import merged_config
from squall.cluster.nimbus import _rebalanced
from squall.runtime.assignment import assign
from squall.testing import wait_until

# -- components -------------------------------------------------------------------------


class WordSpout(Spout):
    outputs = ["word", "count"]


class NothingSpout(Spout):
    """Declares nothing and emits nothing."""


class MultiStreamSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["a"])
        declarer.declare_stream("evens", Fields("n", "square"))
        declarer.declare_stream("direct-out", ["x"], direct=True)


class DirectDefaultSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["x"], direct=True)


class TwiceDeclaringSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare_stream("dup", ["a"])
        declarer.declare_stream("dup", ["b"])


class ListOutputsBolt(Bolt):
    outputs = ["left", "right"]

    def execute(self, tup):
        pass


class DictOutputsBolt(Bolt):
    outputs = {"default": ["word"], "lengths": ["word", "length"], "errors": ["message"]}

    def execute(self, tup):
        pass


class OverridingBolt(Bolt):
    """declare_output_fields overrides the ``outputs`` shorthand, as any method override."""

    outputs = ["ignored"]

    def declare_output_fields(self, declarer):
        declarer.declare(["real"])

    def execute(self, tup):
        pass


class LockHoldingBolt(Bolt):
    def __init__(self):
        self.lock = threading.Lock()

    def execute(self, tup):
        pass


class LockHoldingSpout(Spout):
    outputs = ["a"]

    def __init__(self):
        self.lock = threading.Lock()


class FirstTaskGrouping(CustomStreamGrouping):
    def prepare(self, context, stream, target_tasks):
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id, values):
        return self.targets[:1]


class RecordingBolt(Bolt):
    """Records, per task, what prepare saw and every tuple it executes."""

    outputs = ["x", "y"]

    def __init__(self, key):
        self.key = key
        self.prepared = 0
        self.executed = 0

    def prepare(self, conf, context, collector):
        self.prepared += 1
        self.collector = collector
        self.task = context.get_this_task_id()
        record(self.key, ("prepare", self.task, id(self), self.prepared))

    def execute(self, tup):
        self.executed += 1
        record(self.key, ("execute", self.task, id(self), self.executed, tup.values))
        self.collector.ack(tup)


class ContextBolt(Bolt):
    """Records what TopologyContext says from inside prepare."""

    def __init__(self, key):
        self.key = key

    def declare_output_fields(self, declarer):
        declarer.declare(["x", "y"])
        declarer.declare_stream("side", ["z"])

    def prepare(self, conf, context, collector):
        me = context.get_this_task_id()
        record(self.key, {
            "task": me,
            "component": context.get_this_component_id(),
            "own_tasks": context.get_component_tasks(context.get_this_component_id()),
            "spout_tasks": context.get_component_tasks("spout"),
            "component_of_own": {t: context.get_component_id(t)
                                 for t in context.get_component_tasks("ctx")},
            "component_of_spout": {t: context.get_component_id(t) for t in context.get_component_tasks("spout")},
            "worker_tasks": context.get_this_worker_tasks(),
            "port": context.get_this_worker_port(),
            "fields": context.get_this_output_fields(),
            "side_fields": context.get_this_output_fields("side"),
        })

    def execute(self, tup):
        pass


class ContextSpout(Spout):
    outputs = ["v"]

    def __init__(self, key):
        self.key = key

    def open(self, conf, context, collector):
        record(self.key, {
            "task": context.get_this_task_id(),
            "component": context.get_this_component_id(),
            "port": context.get_this_worker_port(),
            "worker_tasks": context.get_this_worker_tasks(),
            "fields": context.get_this_output_fields(),
        })


# -- helpers ----------------------------------------------------------------------------


def assert_invalid(match_parts, fn, *args, **kwargs):
    """``fn`` raises InvalidTopologyError (a ValueError) whose message names every part."""
    with pytest.raises(InvalidTopologyError) as info:
        fn(*args, **kwargs)
    assert isinstance(info.value, ValueError)
    message = str(info.value)
    for part in match_parts:
        assert part in message, f"{part!r} not named in {message!r}"
    return message


def seed_topology():
    """The seeds' example: blue-spout 2, green-bolt 2 executors / 4 tasks, yellow-bolt 6."""
    builder = TopologyBuilder()
    builder.set_spout("blue-spout", WordSpout(), 2)
    builder.set_bolt("green-bolt", ListOutputsBolt(), 2).set_num_tasks(4).shuffle_grouping("blue-spout")
    builder.set_bolt("yellow-bolt", Sink(), 6).shuffle_grouping("green-bolt")
    return builder.create_topology()


def seed_config():
    return Config().set_num_workers(2)


# -- validation -------------------------------------------------------------------------


def test_invalid_topology_error_is_a_value_error():
    assert issubclass(InvalidTopologyError, ValueError)


@pytest.mark.parametrize("spout_id,spout,subscribe,named", [
    ("spout", WordSpout, lambda d: d.shuffle_grouping("no-such-spout"), ["no-such-spout"]),
    ("spout", WordSpout, lambda d: d.shuffle_grouping("spout", "missing-stream"), ["missing-stream"]),
    ("quiet", NothingSpout, lambda d: d.all_grouping("quiet"), ["default", "quiet"]),
    ("spout", WordSpout, lambda d: d.fields_grouping("spout", ["word", "colour"]), ["colour"]),
    # "a" is a field of the default stream, not of "evens"
    ("spout", MultiStreamSpout, lambda d: d.fields_grouping("spout", Fields("a"), stream="evens"), ["'a'"]),
    ("spout", WordSpout, lambda d: d.partial_key_grouping("spout", ["nope"]), ["nope"]),
    ("spout", WordSpout, lambda d: d.direct_grouping("spout"), ["spout", "default"]),
    ("spout", MultiStreamSpout, lambda d: d.direct_grouping("spout", "evens"), ["evens"]),
], ids=[
    "unknown-component", "undeclared-stream", "component-declaring-no-streams", "fields-undeclared-field",
    "fields-on-named-stream-checks-its-fields", "partial-key-undeclared-field", "direct-on-non-direct-stream",
    "direct-on-non-direct-named-stream",
])
def test_bad_subscription_is_rejected_naming_what_is_wrong(spout_id, spout, subscribe, named):
    builder = TopologyBuilder()
    builder.set_spout(spout_id, spout())
    subscribe(builder.set_bolt("bolt", Sink()))
    assert_invalid(named, builder.create_topology)


@pytest.mark.parametrize("grouping", ["shuffle", "all", "global", "none", "local_or_shuffle", "fields", "custom"])
def test_non_direct_grouping_on_direct_stream_is_rejected(grouping):
    builder = TopologyBuilder()
    builder.set_spout("spout", MultiStreamSpout())
    declarer = builder.set_bolt("bolt", Sink())
    if grouping == "fields":
        declarer.fields_grouping("spout", ["x"], stream="direct-out")
    elif grouping == "custom":
        declarer.custom_grouping("spout", FirstTaskGrouping(), stream="direct-out")
    else:
        getattr(declarer, f"{grouping}_grouping")("spout", stream="direct-out")
    assert_invalid(["direct-out"], builder.create_topology)


def test_direct_grouping_on_direct_stream_is_accepted():
    builder = TopologyBuilder()
    builder.set_spout("spout", MultiStreamSpout())
    builder.set_spout("spout2", DirectDefaultSpout())
    builder.set_bolt("bolt", Sink()).direct_grouping("spout", "direct-out").direct_grouping("spout2")
    topology = builder.create_topology()
    assert set(topology.components) == {"spout", "spout2", "bolt"}


@pytest.mark.parametrize("parallelism", [0, -1, "2", 1.5, None])
def test_parallelism_below_one_is_rejected_at_create_topology(parallelism):
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout(), parallelism)  # not raised here
    builder.set_bolt("bolt", Sink()).shuffle_grouping("spout")
    assert_invalid(["spout"], builder.create_topology)


def test_bolt_parallelism_below_one_is_rejected_at_create_topology():
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("the-bolt", Sink(), 0).shuffle_grouping("spout")
    assert_invalid(["the-bolt"], builder.create_topology)


@pytest.mark.parametrize("num_tasks", [0, -3])
def test_num_tasks_below_one_is_rejected_at_create_topology(num_tasks):
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("counted", Sink(), 2).set_num_tasks(num_tasks).shuffle_grouping("spout")
    assert_invalid(["counted"], builder.create_topology)


def test_spout_num_tasks_below_one_is_rejected_at_create_topology():
    builder = TopologyBuilder()
    builder.set_spout("my-spout", WordSpout()).set_num_tasks(0)
    assert_invalid(["my-spout"], builder.create_topology)


def test_duplicate_component_id_is_rejected_at_set():
    builder = TopologyBuilder()
    builder.set_spout("same", WordSpout())
    assert_invalid(["same"], builder.set_bolt, "same", Sink())
    assert_invalid(["same"], builder.set_spout, "same", WordSpout())
    builder.set_bolt("bolt", Sink())
    assert_invalid(["bolt"], builder.set_bolt, "bolt", BasicSink())


@pytest.mark.parametrize("cid", ["__acker", "__system", "__mine"])
def test_reserved_component_ids_are_rejected(cid):
    builder = TopologyBuilder()
    assert_invalid([cid], builder.set_spout, cid, WordSpout())
    assert_invalid([cid], builder.set_bolt, cid, Sink())


def test_unserializable_bolt_is_rejected_at_create_topology_naming_it():
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("locked-bolt", LockHoldingBolt()).shuffle_grouping("spout")  # fine so far
    assert_invalid(["locked-bolt"], builder.create_topology)


def test_unserializable_spout_is_rejected_at_create_topology_naming_it():
    builder = TopologyBuilder()
    builder.set_spout("locked-spout", LockHoldingSpout())
    assert_invalid(["locked-spout"], builder.create_topology)


def test_declaring_the_same_stream_twice_is_rejected():
    builder = TopologyBuilder()
    builder.set_spout("twice", TwiceDeclaringSpout())
    assert_invalid(["dup"], builder.create_topology)


def test_declaring_duplicate_field_names_is_rejected():
    class DupFields(Spout):
        outputs = ["a", "b", "a"]

    builder = TopologyBuilder()
    builder.set_spout("dup-fields", DupFields())
    assert_invalid(["dup-fields"], builder.create_topology)


@pytest.mark.parametrize("obj", [Sink(), BasicSink(), object(), "spout", None, WordSpout])
def test_set_spout_rejects_non_spouts(obj):
    builder = TopologyBuilder()
    assert_invalid(["x"], builder.set_spout, "x", obj)


@pytest.mark.parametrize("obj", [WordSpout(), object(), 42, Sink])
def test_set_bolt_rejects_non_bolts(obj):
    builder = TopologyBuilder()
    assert_invalid(["y"], builder.set_bolt, "y", obj)


def test_set_bolt_accepts_bolt_and_basic_bolt():
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("rich", Sink()).shuffle_grouping("spout")
    builder.set_bolt("basic", BasicSink()).shuffle_grouping("spout")
    topology = builder.create_topology()
    assert list(topology.components) == ["spout", "rich", "basic"]


def test_valid_topology_with_every_grouping_is_accepted():
    builder = TopologyBuilder()
    builder.set_spout("spout", MultiStreamSpout(), 2)
    (builder.set_bolt("bolt", Sink(), 3)
     .shuffle_grouping("spout")
     .fields_grouping("spout", ["n"], stream="evens")
     .direct_grouping("spout", "direct-out"))
    builder.set_bolt("b2", Sink()).all_grouping("spout").global_grouping("spout", "evens")
    builder.set_bolt("b3", Sink()).none_grouping("spout").partial_key_grouping("spout", Fields("n"), "evens")
    builder.set_bolt("b4", Sink()).local_or_shuffle_grouping("spout").custom_grouping(
        "spout", FirstTaskGrouping(), "evens")
    topology = builder.create_topology()
    assert set(topology.components) == {"spout", "bolt", "b2", "b3", "b4"}


def test_created_topology_is_immutable_and_independent_of_builder():
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    topology = builder.create_topology()
    builder.set_bolt("later", Sink()).shuffle_grouping("spout")
    assert list(topology.components) == ["spout"]
    with pytest.raises(TypeError):
        topology.components["x"] = None  # read-only mapping


# -- outputs shorthand ------------------------------------------------------------------


def _outputs_of(obj, cid="c"):
    builder = TopologyBuilder()
    if isinstance(obj, Spout):
        builder.set_spout(cid, obj)
    else:
        builder.set_bolt(cid, obj)
    spec = builder.create_topology().components[cid]
    return {stream: (s.fields.to_list(), s.direct) for stream, s in spec.outputs.items()}


def test_outputs_list_declares_the_default_stream():
    assert _outputs_of(WordSpout()) == {"default": (["word", "count"], False)}
    assert _outputs_of(ListOutputsBolt()) == {"default": (["left", "right"], False)}


def test_outputs_dict_declares_several_streams():
    assert _outputs_of(DictOutputsBolt()) == {
        "default": (["word"], False),
        "lengths": (["word", "length"], False),
        "errors": (["message"], False),
    }


def test_declare_output_fields_declares_streams_and_direct_flag():
    assert _outputs_of(MultiStreamSpout()) == {
        "default": (["a"], False),
        "evens": (["n", "square"], False),
        "direct-out": (["x"], True),
    }


def test_declare_output_fields_overrides_outputs_shorthand():
    assert _outputs_of(OverridingBolt()) == {"default": (["real"], False)}


def test_no_outputs_declares_no_stream():
    assert _outputs_of(NothingSpout()) == {}
    assert _outputs_of(Sink()) == {}


def test_outputs_shorthand_streams_are_usable_by_subscribers():
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("dict", DictOutputsBolt()).fields_grouping("spout", ["word"])
    builder.set_bolt("sink", Sink()).fields_grouping("dict", ["length"], stream="lengths").shuffle_grouping(
        "dict", "errors").global_grouping("dict")
    builder.create_topology()

    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("dict", DictOutputsBolt()).shuffle_grouping("spout")
    builder.set_bolt("sink", Sink()).fields_grouping("dict", ["length"])  # default has only "word"
    assert_invalid(["length"], builder.create_topology)


def test_outputs_shorthand_fields_reach_the_running_component(cluster, key):
    builder = TopologyBuilder()
    builder.set_spout("spout", ContextSpout(key))
    cluster.submit_topology("shorthand", {}, builder.create_topology())
    (seen,) = logged(key)
    assert seen["fields"] == Fields("v")


# -- parallelism and scheduling ---------------------------------------------------------


def _executors(info):
    return [(w["port"], e["component"], tuple(e["tasks"])) for w in info["workers"] for e in w["executors"]]


def _check_seed_layout(workers):
    """``workers``: list of lists of (component, tasks)."""
    assert len(workers) == 2
    all_tasks = []
    for executors in workers:
        user = [(c, t) for c, t in executors if not c.startswith("__")]
        assert len(user) == 5, executors
        by_comp = collections.Counter(c for c, _ in user)
        assert by_comp == {"blue-spout": 1, "green-bolt": 1, "yellow-bolt": 3}, executors
        for c, tasks in user:
            assert len(tasks) == (2 if c == "green-bolt" else 1), executors
        ackers = [t for c, t in executors if c == "__acker"]
        assert len(ackers) == 1 and len(ackers[0]) == 1, executors
        all_tasks.extend(t for _, ts in executors for t in ts)
    # every task runs exactly once: 2 + 4 + 6 user tasks and 2 ackers
    assert sorted(all_tasks) == list(range(1, 15))


def test_seed_example_assignment_via_scheduler():
    conf = merged_config(seed_config())
    assert conf[Config.TOPOLOGY_ACKER_EXECUTORS] is None  # acking on: one acker per worker
    assignment = assign(seed_topology(), conf)
    assert assignment.num_ackers == 2
    workers = [[(e.component, tuple(e.tasks)) for e in w.executors] for w in assignment.workers]
    _check_seed_layout(workers)
    assert len(assignment.component_tasks["blue-spout"]) == 2
    assert len(assignment.component_tasks["green-bolt"]) == 4
    assert len(assignment.component_tasks["yellow-bolt"]) == 6
    assert len(assignment.component_tasks["__acker"]) == 2
    for cid, tasks in assignment.component_tasks.items():
        assert tasks == sorted(tasks)
        for t in tasks:
            assert assignment.task_component[t] == cid
    for w in assignment.workers:
        for e in w.executors:
            for t in e.tasks:
                assert assignment.task_worker[t] == w.index
    assert len({w.port for w in assignment.workers}) == 2


def _busy_topology(split_load=None, spout_load=None):
    """The autoscale benchmark's shape: a spout, a busy split over 4 executors, a count."""
    builder = TopologyBuilder()
    spout = builder.set_spout("lines", WordSpout())
    split = builder.set_bolt("split", ListOutputsBolt(), 4).shuffle_grouping("lines")
    builder.set_bolt("count", Sink()).shuffle_grouping("split")
    if split_load is not None:
        split.set_cpu_load(split_load)
    if spout_load is not None:
        spout.set_cpu_load(spout_load)
    return builder.create_topology()


def _layout(topology, workers=2):
    conf = merged_config(Config().set_num_workers(workers))
    return [sorted(e.component for e in w.executors) for w in assign(topology, conf).workers]


def test_without_cpu_loads_executors_are_dealt_round_robin():
    # count, lines, split x4, then the ackers, dealt in turn
    assert _layout(_busy_topology()) == [["__acker", "count", "split", "split"], ["__acker", "lines", "split", "split"]]


def test_with_cpu_loads_the_executors_are_placed_by_load():
    # largest first, each on the worker with the least so far: the spout (50) on the first, three
    # splits (20 each) on the second, the last split on the first (70, 60), the count (10 by
    # default) on the second, an acker (10) on each (ties: the worker with fewer executors): 80, 80
    assert _layout(_busy_topology(split_load=20, spout_load=50)) == [
        ["__acker", "lines", "split"], ["__acker", "count", "split", "split", "split"]]
    # equal loads: the round-robin order breaks the ties
    assert _layout(_busy_topology(split_load=10, spout_load=10)) == _layout(_busy_topology())


def test_cpu_loads_keep_every_task_once():
    conf = merged_config(Config().set_num_workers(3))
    assignment = assign(_busy_topology(split_load=30), conf)
    tasks = [t for w in assignment.workers for e in w.executors for t in e.tasks]
    assert sorted(tasks) == sorted(t for ts in assignment.component_tasks.values() for t in ts)
    assert all(assignment.task_worker[t] == w.index for w in assignment.workers for e in w.executors for t in e.tasks)


@pytest.mark.parametrize("load", [0, -5, "lots", True])
def test_a_cpu_load_that_is_not_a_positive_number_is_refused_naming_the_component(load):
    builder = TopologyBuilder()
    builder.set_spout("lines", WordSpout()).set_cpu_load(load)
    with pytest.raises(InvalidTopologyError, match=r"component 'lines': 'topology.component.cpu.pcore.percent' "
                                                   r"\(set_cpu_load\) must be a number > 0, got "):
        builder.create_topology()


def test_seed_example_assignment_in_local_cluster(cluster):
    cluster.submit_topology("seed", seed_config(), seed_topology())
    info = cluster.get_topology_info("seed")
    assert len(info["workers"]) == 2
    assert len({w["port"] for w in info["workers"]}) == 2
    workers = [[(e["component"], tuple(e["tasks"])) for e in w["executors"]] for w in info["workers"]]
    _check_seed_layout(workers)
    components = info["components"]
    assert (components["blue-spout"]["parallelism"], components["blue-spout"]["num_tasks"]) == (2, 2)
    assert (components["green-bolt"]["parallelism"], components["green-bolt"]["num_tasks"]) == (2, 4)
    assert (components["yellow-bolt"]["parallelism"], components["yellow-bolt"]["num_tasks"]) == (6, 6)


def test_seed_example_with_acking_off_has_no_acker():
    conf = merged_config(seed_config().set_num_ackers(0))
    assignment = assign(seed_topology(), conf)
    components = [e.component for w in assignment.workers for e in w.executors]
    assert "__acker" not in components
    assert [sum(1 for e in w.executors) for w in assignment.workers] == [5, 5]


def _ackers(assignment) -> list[list[tuple[int, ...]]]:
    """Each worker's acker executors' tasks, in the order of their first tasks."""
    return sorted(([e.tasks for e in w.executors if e.component == "__acker"] for w in assignment.workers),
                  key=lambda tasks: tasks[0] if tasks else (1 << 30,))


def test_ackers_have_tasks_for_the_autoscalers_most_workers_and_keep_them_as_executors_follow_the_workers():
    conf = merged_config({"topology.workers": 1, "topology.autoscale.enabled": True,
                          "topology.autoscale.max.workers": 3})
    one = assign(seed_topology(), conf)
    assert _ackers(one) == [[(1, 2, 3)]], "three tasks, on the one worker's one acker executor"
    running = types.SimpleNamespace(name="t", topology=seed_topology(), conf=conf)
    topology, conf3 = _rebalanced(running, 3, None)
    three = assign(topology, conf3)
    assert _ackers(three) == [[(1,)], [(2,)], [(3,)]], "an acker executor per worker, the same task ids"
    assert three.component_tasks == one.component_tasks
    running = types.SimpleNamespace(name="t", topology=topology, conf=conf3)
    assert _ackers(assign(*_rebalanced(running, 2, None))) == [[(1, 2)], [(3,)]]
    # without the autoscaler, one task per executor (Storm's), kept by a rebalance by hand
    fixed = merged_config({"topology.workers": 1})
    running = types.SimpleNamespace(name="t", topology=seed_topology(), conf=fixed)
    assert _ackers(assign(*_rebalanced(running, 2, None))) == [[(1,)], []]


@pytest.mark.parametrize("executors,tasks", [(3, 7), (2, 5), (4, 4), (1, 3), (3, 10)])
def test_tasks_spread_evenly_over_executors(executors, tasks):
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("bolt", Sink(), executors).set_num_tasks(tasks).shuffle_grouping("spout")
    assignment = assign(builder.create_topology(), merged_config({}))
    sizes = [len(e.tasks) for w in assignment.workers for e in w.executors if e.component == "bolt"]
    assert len(sizes) == executors
    assert sum(sizes) == tasks
    assert max(sizes) - min(sizes) <= 1
    got = sorted(t for w in assignment.workers for e in w.executors if e.component == "bolt" for t in e.tasks)
    assert got == assignment.component_tasks["bolt"]


def test_fewer_tasks_than_executors_gives_one_executor_per_task():
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("bolt", Sink(), 4).set_num_tasks(2).shuffle_grouping("spout")
    assignment = assign(builder.create_topology(), merged_config({}))
    bolt_executors = [e.tasks for w in assignment.workers for e in w.executors if e.component == "bolt"]
    assert sorted(len(t) for t in bolt_executors) == [1, 1]


@pytest.mark.parametrize("workers", [2, 3, 4])
def test_executors_of_each_component_spread_evenly_over_workers(workers):
    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout(), 3)
    builder.set_bolt("a", ListOutputsBolt(), 5).shuffle_grouping("spout")
    builder.set_bolt("b", Sink(), 4).set_num_tasks(8).shuffle_grouping("a")
    assignment = assign(builder.create_topology(), merged_config(Config().set_num_workers(workers)))
    assert len(assignment.workers) == workers
    totals = [sum(1 for e in w.executors if not e.component.startswith("__")) for w in assignment.workers]
    assert max(totals) - min(totals) <= 1, totals
    for cid in ("spout", "a", "b"):
        per_worker = [sum(1 for e in w.executors if e.component == cid) for w in assignment.workers]
        assert max(per_worker) - min(per_worker) <= 1, (cid, per_worker)
    ackers = [sum(1 for e in w.executors if e.component == "__acker") for w in assignment.workers]
    assert ackers == [1] * workers


def test_each_task_gets_its_own_component_instance(cluster, key):
    feeder, builder = feeder_builder(["n"], "feeder")
    original = RecordingBolt(key)
    builder.set_bolt("rec", original, 2).set_num_tasks(4).all_grouping("feeder")
    cluster.submit_topology("instances", Config().set_num_workers(2), builder.create_topology())
    prepares = [r for r in logged(key) if r[0] == "prepare"]
    assert len(prepares) == 4
    assert len({task for _, task, _, _ in prepares}) == 4
    assert len({obj for _, _, obj, _ in prepares}) == 4, "tasks share a component instance"
    assert id(original) not in {obj for _, _, obj, _ in prepares}
    assert all(count == 1 for *_, count in prepares), "prepare ran twice on one instance"
    assert original.prepared == 0  # the submitted object itself is never prepared

    for n in range(3):
        feeder.feed([n])
    wait_until(lambda: len([r for r in logged(key) if r[0] == "execute"]) == 12, 5)
    executes = [r for r in logged(key) if r[0] == "execute"]
    by_task = collections.defaultdict(list)
    for _, task, obj, count, values in executes:
        by_task[task].append((obj, count, values))
    assert len(by_task) == 4
    instance_of = {task: obj for _, task, obj, _ in prepares}
    for task, seen in by_task.items():
        # each instance counts only its own executes: 1, 2, 3
        assert sorted(c for _, c, _ in seen) == [1, 2, 3]
        assert {obj for obj, _, _ in seen} == {instance_of[task]}
        assert sorted(v[0] for _, _, v in seen) == [0, 1, 2]


# -- TopologyContext --------------------------------------------------------------------


def test_topology_context_from_prepare_and_open(cluster, key):
    builder = TopologyBuilder()
    builder.set_spout("spout", ContextSpout(key), 2)
    builder.set_bolt("ctx", ContextBolt(key), 2).set_num_tasks(3).shuffle_grouping("spout")
    cluster.submit_topology("context", Config().set_num_workers(2), builder.create_topology())
    info = cluster.get_topology_info("context")

    task_port = {}
    worker_tasks_by_port = {}
    component_tasks = collections.defaultdict(list)
    for w in info["workers"]:
        worker_tasks_by_port[w["port"]] = sorted(t for e in w["executors"] for t in e["tasks"])
        for e in w["executors"]:
            component_tasks[e["component"]].extend(e["tasks"])
            for t in e["tasks"]:
                task_port[t] = w["port"]
    ctx_tasks = sorted(component_tasks["ctx"])
    spout_tasks = sorted(component_tasks["spout"])
    assert len(ctx_tasks) == 3 and len(spout_tasks) == 2

    seen = logged(key)
    bolt_seen = [r for r in seen if r["component"] == "ctx"]
    spout_seen = [r for r in seen if r["component"] == "spout"]
    assert sorted(r["task"] for r in bolt_seen) == ctx_tasks
    assert sorted(r["task"] for r in spout_seen) == spout_tasks
    for r in bolt_seen:
        assert r["own_tasks"] == ctx_tasks
        assert r["spout_tasks"] == spout_tasks
        assert r["component_of_own"] == {t: "ctx" for t in ctx_tasks}
        assert r["component_of_spout"] == {t: "spout" for t in spout_tasks}
        assert r["port"] == task_port[r["task"]]
        assert r["worker_tasks"] == worker_tasks_by_port[r["port"]]
        assert r["task"] in r["worker_tasks"]
        assert r["fields"] == Fields("x", "y")
        assert list(r["fields"]) == ["x", "y"]
        assert r["side_fields"] == Fields("z")
    for r in spout_seen:
        assert r["port"] == task_port[r["task"]]
        assert r["worker_tasks"] == worker_tasks_by_port[r["port"]]
        assert r["fields"] == Fields("v")


def test_topology_context_get_component_tasks_is_sorted_and_unknown_is_empty(cluster, key):
    class Probe(Bolt):
        def __init__(self, key):
            self.key = key

        def prepare(self, conf, context, collector):
            record(self.key, (context.get_component_tasks("wide"), context.get_component_tasks("nope"),
                              context.get_this_worker_tasks()))

        def execute(self, tup):
            pass

    builder = TopologyBuilder()
    builder.set_spout("spout", WordSpout())
    builder.set_bolt("wide", Sink(), 3).set_num_tasks(6).shuffle_grouping("spout")
    builder.set_bolt("probe", Probe(key)).shuffle_grouping("spout")
    cluster.submit_topology("sorted", Config().set_num_workers(3), builder.create_topology())
    ((wide, unknown, worker_tasks),) = logged(key)
    assert len(wide) == 6 and wide == sorted(wide)
    assert unknown == []
    assert worker_tasks == sorted(worker_tasks)
