"""The public API around topologies: Fields / Values / Tuple, Config and its merging,
LocalCluster's lifecycle and introspection, and the ``squall`` command."""

from __future__ import annotations

import ast
import collections
import importlib
import pathlib
import re
import subprocess
import sys
import threading
import time

import pytest

import squall
from helpers import (COUNTERS, Relay, Sink, TupleRecorder, errors_of, feeder_builder, logged, record,
                     squall_cli, tasks_of)
from squall import (
    AlreadyAliveError, BasicBolt, Bolt, Config, Fields, LocalCluster, NotAliveError, Spout, TopologyBuilder,
    Tuple, Values,
)
from squall.api.defaults import DEFAULTS
from squall.testing import wait_until

# -- components -------------------------------------------------------------------------


class LengthBolt(BasicBolt):
    """Emits each word's length on stream "lengths" and the word on the default stream."""

    outputs = {"default": ["word"], "lengths": ["word", "length"]}

    def execute(self, tup, collector):
        word = tup.get_value_by_field("word")
        collector.emit([word])
        collector.emit([word, len(word)], stream="lengths")


class BoomBolt(Bolt):
    def __init__(self, text):
        self.text = text

    def execute(self, tup):
        raise ValueError(self.text)


class ConfSpout(Spout):
    outputs = ["n"]

    def __init__(self, key):
        self.key = key

    def open(self, conf, context, collector):
        record(self.key, (context.get_this_component_id(), dict(conf)))


class ConfBolt(Bolt):
    def __init__(self, key, component_conf=None):
        self.key = key
        self.component_conf = component_conf

    def get_component_configuration(self):
        return self.component_conf

    def prepare(self, conf, context, collector):
        record(self.key, (context.get_this_component_id(), dict(conf)))

    def execute(self, tup):
        pass


class ConfBasicBolt(BasicBolt):
    def __init__(self, key):
        self.key = key

    def get_component_configuration(self):
        return {"basic.key": "basic"}

    def prepare(self, conf, context):
        record(self.key, (context.get_this_component_id(), dict(conf)))

    def execute(self, tup, collector):
        pass


class LifecycleSpout(Spout):
    """Records its lifecycle calls; counts next_tuple calls; flags calls while inactive."""

    outputs = ["n"]

    def __init__(self, key):
        self.key = key

    def open(self, conf, context, collector):
        self.task = context.get_this_task_id()
        self.active = False
        self.calls = 0
        COUNTERS[self.key][self.task] = 0
        record(self.key, ("open", self.task, self.calls))

    def activate(self):
        self.active = True
        record(self.key, ("activate", self.task, self.calls))

    def deactivate(self):
        self.active = False
        record(self.key, ("deactivate", self.task, self.calls))

    def next_tuple(self):
        self.calls += 1
        COUNTERS[self.key][self.task] = self.calls
        if not self.active:
            record(self.key, ("next_tuple while inactive", self.task, self.calls))

    def close(self):
        record(self.key, ("close", self.task, self.calls))


class LifecycleBolt(Bolt):
    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.task = context.get_this_task_id()
        record(self.key, ("prepare", self.task, 0))

    def execute(self, tup):
        pass

    def cleanup(self):
        record(self.key, ("cleanup", self.task, 0))


class TickCounter(Bolt):
    """Counts the tick tuples it receives in COUNTERS[key]["ticks"]."""

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector = collector
        COUNTERS[self.key]["ticks"] = 0

    def execute(self, tup):
        if tup.is_tick():
            COUNTERS[self.key]["ticks"] += 1
        self.collector.ack(tup)


def events(key, kind=None):
    return [e for e in logged(key) if kind is None or e[0] == kind]


# -- the package ------------------------------------------------------------------------


def test_the_api_loads_no_runtime_and_the_runtime_loads_on_first_use():
    """``squall``'s names load on first use (PEP 562): the API alone pulls in no daemon,
    executor or transport, and no zmq: nothing under squall.runtime, squall.cluster or squall.ops."""
    script = """if True:
        import sys
        import squall.api.tuple
        from squall import Bolt, Config, Spout, TopologyBuilder
        runtime = ("squall.runtime", "squall.cluster", "squall.ops", "zmq")
        print(sorted(m for m in sys.modules if m.startswith(runtime)))
        from squall import LocalCluster
        print("squall.cluster.nimbus" in sys.modules, LocalCluster.__module__)
    """
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert proc.stdout.splitlines() == ["[]", "True squall.cluster.local_cluster"], proc.stdout + proc.stderr


def test_every_public_name_is_what_type_checkers_see():
    """``squall.__all__`` resolves, each name to the object its ``TYPE_CHECKING`` import names."""
    tree = ast.parse(pathlib.Path(squall.__file__).read_text())
    checked = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    seen = {alias.name: node.module for node in checked.body for alias in node.names}
    assert sorted(seen) == sorted(squall._EXPORTS) == sorted(name for name in squall.__all__ if name != "__version__")
    for name, module in seen.items():
        assert getattr(squall, name) is getattr(importlib.import_module(module), name), name
    assert set(squall.__all__) <= set(dir(squall))
    with pytest.raises(AttributeError, match="module 'squall' has no attribute 'Bolts'"):
        squall.Bolts  # noqa: B018


# -- Fields / Values --------------------------------------------------------------------


def test_fields_varargs_and_list_are_equal():
    assert Fields("a", "b") == Fields(["a", "b"])
    assert Fields("a", "b") == Fields(("a", "b"))
    assert Fields("a", "b") != Fields("b", "a")
    assert hash(Fields("a", "b")) == hash(Fields(["a", "b"]))
    assert Fields("only") == Fields(["only"])


def test_fields_is_an_ordered_sequence_of_names():
    f = Fields("word", "count", "ts")
    assert len(f) == 3
    assert list(f) == ["word", "count", "ts"]
    assert f[1] == "count"
    assert "ts" in f and "nope" not in f
    assert f.to_list() == ["word", "count", "ts"]


def test_fields_field_index():
    f = Fields("word", "count", "ts")
    assert [f.field_index(n) for n in ("word", "count", "ts")] == [0, 1, 2]
    with pytest.raises(KeyError, match="nope"):
        f.field_index("nope")


def test_fields_select():
    f = Fields("word", "count", "ts")
    values = ["hello", 3, 17.5]
    assert f.select(Fields("ts", "word"), values) == [17.5, "hello"]
    assert f.select(Fields("count"), values) == [3]
    with pytest.raises(KeyError, match="missing"):
        f.select(Fields("missing"), values)


@pytest.mark.parametrize("names", [("a", "b", "a"), (["x", "x"],)])
def test_fields_reject_duplicate_names(names):
    with pytest.raises(ValueError, match="a|x"):
        Fields(*names)


def test_values_is_a_list():
    v = Values("a", 1, None)
    assert isinstance(v, list)
    assert v == ["a", 1, None]
    assert Values() == []
    assert Values(["nested"]) == [["nested"]]


# -- Tuple ------------------------------------------------------------------------------


def test_tuple_api_on_real_tuples(cluster, key):
    feeder, builder = feeder_builder(["word", "count"], "feeder")
    builder.set_bolt("rec", TupleRecorder(key)).shuffle_grouping("feeder")
    cluster.submit_topology("tuples", {}, builder.create_topology())
    feeder.feed(["hello", 3], msg_id="m1")
    wait_until(lambda: len(logged(key)) == 1, 5)
    (tup,) = logged(key)
    assert isinstance(tup, Tuple)
    assert tup.values == ["hello", 3]
    assert tup.fields == Fields("word", "count")
    assert tup.get_value(0) == "hello"
    assert tup.get_value(1) == 3
    assert tup.get_value_by_field("word") == "hello"
    assert tup.get_value_by_field("count") == 3
    assert tup[0] == "hello" and tup[1] == 3
    assert tup["word"] == "hello" and tup["count"] == 3
    assert tup.select(Fields("count", "word")) == [3, "hello"]
    assert tup.select(["word"]) == ["hello"]
    assert len(tup) == 2
    assert tup.source_component == "feeder"
    assert tup.source_stream_id == "default"
    assert tup.source_task == tasks_of(cluster, "tuples", "feeder")[0]
    assert tup.is_tick() is False
    with pytest.raises(KeyError, match="nope"):
        tup.get_value_by_field("nope")
    with pytest.raises(KeyError, match="nope"):
        tup["nope"]
    wait_until(lambda: feeder.acked == ["m1"], 5)


def test_tuple_source_of_named_stream_across_workers(cluster, key):
    feeder, builder = feeder_builder(["word"], "feeder")
    builder.set_bolt("lengths", LengthBolt(), 2).shuffle_grouping("feeder")
    builder.set_bolt("rec", TupleRecorder(key), 2).shuffle_grouping("lengths", "lengths")
    cluster.submit_topology("streams", Config().set_num_workers(2), builder.create_topology())
    words = ["a", "bb", "ccc", "dddd", "eeeee", "ffffff"]
    for w in words:
        feeder.feed([w])
    wait_until(lambda: len(logged(key)) == len(words), 5)
    length_tasks = tasks_of(cluster, "streams", "lengths")
    got = logged(key)
    assert sorted((t["word"], t["length"]) for t in got) == [(w, len(w)) for w in words]
    for t in got:
        assert t.source_component == "lengths"
        assert t.source_stream_id == "lengths"
        assert t.source_task in length_tasks
        assert t.fields == Fields("word", "length")
        assert t.select(Fields("length")) == [len(t.get_value(0))]
        assert not t.is_tick()


def test_tick_tuples_are_marked(cluster, key):
    feeder, builder = feeder_builder(["word"], "feeder")
    (builder.set_bolt("rec", TupleRecorder(key)).shuffle_grouping("feeder")
     .add_configuration(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 0.05))
    cluster.submit_topology("ticks", {}, builder.create_topology())
    feeder.feed(["plain"])
    wait_until(lambda: any(t.is_tick() for t in logged(key))
               and any(not t.is_tick() for t in logged(key)), 5)
    ticks = [t for t in logged(key) if t.is_tick()]
    plain = [t for t in logged(key) if not t.is_tick()]
    for t in ticks:
        assert t.source_component == "__system"
        assert t.source_stream_id == "__tick"
    assert [t.values for t in plain] == [["plain"]]
    assert plain[0].source_component == "feeder"
    # acking ticks (TupleRecorder acks everything) is harmless
    assert errors_of(cluster, "ticks", "rec") == []


# -- Config -----------------------------------------------------------------------------


STORM_KEYS = {
    "TOPOLOGY_WORKERS": "topology.workers",
    "TOPOLOGY_ACKER_EXECUTORS": "topology.acker.executors",
    "TOPOLOGY_MESSAGE_TIMEOUT_SECS": "topology.message.timeout.secs",
    "TOPOLOGY_MAX_SPOUT_PENDING": "topology.max.spout.pending",
    "TOPOLOGY_TICK_TUPLE_FREQ_SECS": "topology.tick.tuple.freq.secs",
    "TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE": "topology.executor.receive.buffer.size",
    "TOPOLOGY_EXECUTOR_SEND_BUFFER_SIZE": "topology.executor.send.buffer.size",
    "TOPOLOGY_TRANSFER_BUFFER_SIZE": "topology.transfer.buffer.size",
    "TOPOLOGY_DEBUG": "topology.debug",
}


def test_config_constants_are_storms_keys():
    for name, storm_key in STORM_KEYS.items():
        assert getattr(Config, name) == storm_key


def test_config_is_a_dict_and_helpers_chain():
    conf = Config()
    assert isinstance(conf, dict) and conf == {}
    same = (conf.set_num_workers(3).set_num_ackers(2).set_message_timeout_secs(12)
            .set_max_spout_pending(50).set_debug(True))
    assert same is conf
    assert conf == {
        "topology.workers": 3,
        "topology.acker.executors": 2,
        "topology.message.timeout.secs": 12,
        "topology.max.spout.pending": 50,
        "topology.debug": True,
    }
    conf["my.own.key"] = "kept"
    assert conf["my.own.key"] == "kept"


def test_defaults_are_documented_in_one_place():
    import squall.api.defaults

    assert squall.api.defaults.__doc__ and "defaults.yaml" in squall.api.defaults.__doc__
    for storm_key in STORM_KEYS.values():
        assert storm_key in DEFAULTS, storm_key
    # Storm's defaults for the keys whose values are Storm's
    assert DEFAULTS["topology.workers"] == 1
    assert DEFAULTS["topology.message.timeout.secs"] == 30
    assert DEFAULTS["topology.max.spout.pending"] is None
    assert DEFAULTS["topology.debug"] is False
    assert DEFAULTS["topology.tick.tuple.freq.secs"] is None
    # None means one acker per worker
    assert DEFAULTS["topology.acker.executors"] is None


def test_defaults_reach_components(cluster, key):
    builder = TopologyBuilder()
    builder.set_spout("spout", ConfSpout(key))
    cluster.submit_topology("defaults", None, builder.create_topology())
    ((_, conf),) = logged(key)
    for storm_key in STORM_KEYS.values():
        assert conf[storm_key] == DEFAULTS[storm_key], storm_key


def test_component_conf_is_topology_conf_merged_with_components(cluster, key):
    topology_conf = Config({
        "user.key": "topology",
        "shared.key": "topology",
        "declarer.key": "topology",
    }).set_message_timeout_secs(7).set_num_workers(2)
    builder = TopologyBuilder()
    builder.set_spout("spout", ConfSpout(key)).set_max_spout_pending(3).add_configuration("spout.key", True)
    (builder.set_bolt("custom", ConfBolt(key, {"shared.key": "component", "component.only": 1,
                                                "declarer.key": "component"}))
     .shuffle_grouping("spout")
     .add_configuration("declarer.key", "declarer")
     .add_configurations({"declarer.only": [1, 2], "another": {"nested": "dict"}}))
    builder.set_bolt("plain", ConfBolt(key), 2).shuffle_grouping("spout")
    builder.set_bolt("basic", ConfBasicBolt(key)).shuffle_grouping("spout").add_configuration("added", 5)
    cluster.submit_topology("merge", topology_conf, builder.create_topology())
    wait_until(lambda: len(logged(key)) == 5, 5)
    confs = collections.defaultdict(list)
    for cid, conf in logged(key):
        confs[cid].append(conf)

    (custom,) = confs["custom"]
    assert custom["user.key"] == "topology"
    assert custom["shared.key"] == "component"
    assert custom["component.only"] == 1
    assert custom["declarer.key"] == "declarer"  # add_configuration wins over get_component_configuration
    assert custom["declarer.only"] == [1, 2]
    assert custom["another"] == {"nested": "dict"}
    assert custom[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS] == 7
    assert custom[Config.TOPOLOGY_WORKERS] == 2
    assert "spout.key" not in custom

    assert len(confs["plain"]) == 2
    for plain in confs["plain"]:
        assert plain["user.key"] == "topology"
        assert plain["shared.key"] == "topology"
        assert plain["declarer.key"] == "topology"
        assert "component.only" not in plain and "declarer.only" not in plain
        assert plain[Config.TOPOLOGY_MAX_SPOUT_PENDING] is None
        assert plain[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS] == 7

    (basic,) = confs["basic"]
    assert (basic["basic.key"], basic["added"], basic["user.key"]) == ("basic", 5, "topology")
    assert basic[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS] == 7

    (spout,) = confs["spout"]
    assert spout[Config.TOPOLOGY_MAX_SPOUT_PENDING] == 3
    assert spout["spout.key"] is True
    assert spout["user.key"] == "topology"


def test_declarer_configuration_methods_chain():
    builder = TopologyBuilder()
    sd = builder.set_spout("spout", ConfSpout("unused"))
    assert sd.set_num_tasks(2) is sd
    assert sd.add_configuration("a", 1) is sd
    assert sd.add_configurations({"b": 2}) is sd
    assert sd.set_max_spout_pending(5) is sd
    bd = builder.set_bolt("bolt", Sink())
    assert bd.set_num_tasks(1) is bd
    assert bd.add_configuration("a", 1) is bd
    assert bd.add_configurations({"b": 2}) is bd
    assert bd.shuffle_grouping("spout") is bd


@pytest.mark.parametrize("conf_key,value", [
    ("topology.workers", 0),
    ("topology.workers", -2),
    ("topology.workers", "2"),
    ("topology.message.timeout.secs", 0),
    ("topology.message.timeout.secs", "soon"),
    ("topology.max.spout.pending", 0),
    ("topology.acker.executors", -1),
    ("topology.executor.receive.buffer.size", 0),
    ("topology.executor.send.buffer.size", -5),
    ("topology.transfer.buffer.size", 0),
    ("topology.tick.tuple.freq.secs", -1),
])
def test_bad_config_value_raises_value_error_naming_key_at_submit(cluster, conf_key, value):
    builder = TopologyBuilder()
    builder.set_spout("spout", ConfSpout("unused"))
    topology = builder.create_topology()
    with pytest.raises(ValueError) as info:
        cluster.submit_topology("bad-conf", {conf_key: value}, topology)
    assert conf_key in str(info.value)
    assert "bad-conf" not in cluster.get_topologies()
    with pytest.raises(NotAliveError):
        cluster.get_topology_info("bad-conf")
    # the name was not taken: a good submission under it works
    cluster.submit_topology("bad-conf", {}, topology)
    assert cluster.get_topology_info("bad-conf")["status"] == "ACTIVE"


def test_bad_component_config_value_names_key_and_component(cluster):
    builder = TopologyBuilder()
    builder.set_spout("spout", ConfSpout("unused"))
    builder.set_bolt("ticky", Sink()).shuffle_grouping("spout").add_configuration(
        Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, -1)
    with pytest.raises(ValueError) as info:
        cluster.submit_topology("bad-component-conf", {}, builder.create_topology())
    assert Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS in str(info.value)
    assert "ticky" in str(info.value)


# -- LocalCluster lifecycle -------------------------------------------------------------


def _lifecycle_topology(key, spouts=2, bolts=2, tick_key=None):
    builder = TopologyBuilder()
    builder.set_spout("spout", LifecycleSpout(key), spouts)
    builder.set_bolt("bolt", LifecycleBolt(key), bolts).shuffle_grouping("spout")
    if tick_key is not None:
        (builder.set_bolt("ticker", TickCounter(tick_key)).shuffle_grouping("spout")
         .add_configuration(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 0.02))
    return builder.create_topology()


def test_submit_twice_with_same_name_raises_already_alive(cluster, key):
    topology = _lifecycle_topology(key)
    cluster.submit_topology("twice", {}, topology)
    with pytest.raises(AlreadyAliveError, match="twice"):
        cluster.submit_topology("twice", {}, topology)
    # the first one is untouched
    assert cluster.get_topology_info("twice")["status"] == "ACTIVE"
    assert len(events(key, "open")) == 2
    assert events(key, "close") == []


@pytest.mark.parametrize("method", ["kill_topology", "activate", "deactivate", "get_topology_info"])
def test_unknown_topology_raises_not_alive(cluster, method):
    with pytest.raises(NotAliveError) as info:
        getattr(cluster, method)("ghost-topology")
    assert "ghost-topology" in str(info.value)


def test_kill_topology_calls_close_and_cleanup_and_frees_the_name(cluster, key):
    cluster.submit_topology("killme", {}, _lifecycle_topology(key, spouts=2, bolts=3))
    spout_tasks = sorted(t for _, t, _ in events(key, "open"))
    bolt_tasks = sorted(t for _, t, _ in events(key, "prepare"))
    assert len(spout_tasks) == 2 and len(bolt_tasks) == 3
    cluster.kill_topology("killme", wait_secs=0)
    # kill_topology returns once the topology is gone: close/cleanup already ran
    assert sorted(t for _, t, _ in events(key, "close")) == spout_tasks
    assert sorted(t for _, t, _ in events(key, "cleanup")) == bolt_tasks
    assert "killme" not in cluster.get_topologies()
    with pytest.raises(NotAliveError):
        cluster.get_topology_info("killme")
    with pytest.raises(NotAliveError):
        cluster.kill_topology("killme", wait_secs=0)
    # next_tuple is never called after close
    calls_at_close = {t: c for _, t, c in events(key, "close")}
    assert dict(COUNTERS[key]) == calls_at_close

    # the name can be reused
    cluster.submit_topology("killme", {}, _lifecycle_topology(key, spouts=1, bolts=1))
    assert cluster.get_topology_info("killme")["status"] == "ACTIVE"
    assert len(events(key, "open")) == 3


def test_kill_topology_deactivates_then_waits_message_timeout_by_default(cluster, key):
    conf = Config().set_message_timeout_secs(0.3)
    cluster.submit_topology("slowkill", conf, _lifecycle_topology(key, spouts=1, bolts=1))
    started = time.monotonic()
    cluster.kill_topology("slowkill")
    assert time.monotonic() - started >= 0.3
    kinds = [e[0] for e in logged(key) if e[0] in ("open", "activate", "deactivate", "close")]
    assert kinds == ["open", "activate", "deactivate", "close"]


def test_status_is_killed_while_kill_topology_waits(cluster, key):
    cluster.submit_topology("dying", {}, _lifecycle_topology(key, spouts=1, bolts=1))
    killer = threading.Thread(target=cluster.kill_topology, args=("dying",), kwargs={"wait_secs": 1.5})
    killer.start()
    try:
        # during the wait the spouts are deactivated and the topology reports KILLED
        wait_until(lambda: cluster.get_topology_info("dying")["status"] == "KILLED", 1)
        wait_until(lambda: events(key, "deactivate"), 1)
        assert events(key, "close") == []
        with pytest.raises(NotAliveError):
            cluster.kill_topology("dying", wait_secs=0)
    finally:
        killer.join(10)
    assert not killer.is_alive()
    assert len(events(key, "close")) == 1 and len(events(key, "cleanup")) == 1
    with pytest.raises(NotAliveError):
        cluster.get_topology_info("dying")


def test_deactivate_and_activate(cluster, key):
    tick_key = key + "-ticks"
    cluster.submit_topology("toggle", {}, _lifecycle_topology(key, spouts=2, bolts=1, tick_key=tick_key))
    tasks = sorted(t for _, t, _ in events(key, "open"))
    assert len(tasks) == 2
    wait_until(lambda: all(COUNTERS[key].get(t, 0) > 0 for t in tasks), 5, message="next_tuple called")
    assert [e[0] for e in events(key) if e[0] in ("activate", "deactivate")] == ["activate", "activate"]

    cluster.deactivate("toggle")
    assert cluster.get_topology_info("toggle")["status"] == "INACTIVE"
    wait_until(lambda: len(events(key, "deactivate")) == 2, 5, message="deactivate called")
    at_deactivate = {t: c for _, t, c in events(key, "deactivate")}
    assert sorted(at_deactivate) == tasks
    # let time pass, measured by tick tuples (bolts keep running while spouts are inactive)
    ticks = COUNTERS[tick_key]["ticks"]
    wait_until(lambda: COUNTERS[tick_key]["ticks"] >= ticks + 5, 5, message="ticks while inactive")
    assert {t: COUNTERS[key][t] for t in tasks} == at_deactivate, "next_tuple called while inactive"
    assert events(key, "next_tuple while inactive") == []
    # deactivating an inactive topology changes nothing
    cluster.deactivate("toggle")
    assert cluster.get_topology_info("toggle")["status"] == "INACTIVE"

    cluster.activate("toggle")
    assert cluster.get_topology_info("toggle")["status"] == "ACTIVE"
    wait_until(lambda: len(events(key, "activate")) == 4, 5, message="activate called")
    wait_until(lambda: all(COUNTERS[key][t] > at_deactivate[t] for t in tasks), 5, message="next_tuple resumed")
    assert events(key, "next_tuple while inactive") == []
    for t in tasks:
        assert [e[0] for e in events(key) if e[1] == t and e[0] != "prepare"] == [
            "open", "activate", "deactivate", "activate"]


def test_local_cluster_context_manager_kills_everything(key):
    with LocalCluster() as cluster:
        cluster.submit_topology("one", {}, _lifecycle_topology(key, spouts=1, bolts=1))
        cluster.submit_topology("two", {}, _lifecycle_topology(key, spouts=1, bolts=1))
        assert sorted(cluster.get_topologies()) == ["one", "two"]
    assert len(events(key, "close")) == 2
    assert len(events(key, "cleanup")) == 2
    assert cluster.get_topologies() == []


SPOUT_KEYS = {"type", "parallelism", "num_tasks", "emitted", "transferred", "acked", "failed",
              "execute_latency_ms", "process_latency_ms", "complete_latency_ms", "errors"}
BOLT_KEYS = {"type", "parallelism", "num_tasks", "emitted", "transferred", "acked", "failed",
             "execute_latency_ms", "process_latency_ms", "capacity", "errors"}


def test_get_topology_info_shape_and_counts(cluster):
    feeder, builder = feeder_builder(["value"], "feeder")
    builder.set_bolt("echo", Relay(), 2).set_num_tasks(4).shuffle_grouping("feeder")
    builder.set_bolt("sink", Sink()).shuffle_grouping("echo")
    cluster.submit_topology("shape", Config().set_num_workers(2), builder.create_topology())
    for i in range(5):
        feeder.feed([i], msg_id=i)
    wait_until(lambda: sorted(feeder.acked) == [0, 1, 2, 3, 4], 5)

    info = cluster.get_topology_info("shape")
    assert {"name", "status", "uptime_secs", "workers", "components"} <= set(info)
    assert info["name"] == "shape"
    assert info["status"] == "ACTIVE"
    assert isinstance(info["uptime_secs"], (int, float)) and info["uptime_secs"] >= 0

    assert isinstance(info["workers"], list) and len(info["workers"]) == 2
    executor_components = []
    all_tasks = []
    for w in info["workers"]:
        assert isinstance(w["port"], int)
        assert isinstance(w["executors"], list)
        for e in w["executors"]:
            assert isinstance(e["component"], str)
            assert all(isinstance(t, int) for t in e["tasks"]) and e["tasks"]
            executor_components.append(e["component"])
            all_tasks.extend(e["tasks"])
    assert len({w["port"] for w in info["workers"]}) == 2
    assert collections.Counter(executor_components) == {"feeder": 1, "echo": 2, "sink": 1, "__acker": 2}
    assert len(all_tasks) == len(set(all_tasks)) == 1 + 4 + 1 + 2

    components = info["components"]
    assert {"feeder", "echo", "sink"} <= set(components)
    assert SPOUT_KEYS <= set(components["feeder"])
    assert BOLT_KEYS <= set(components["echo"]) and BOLT_KEYS <= set(components["sink"])
    assert components["feeder"]["type"] == "spout"
    assert components["echo"]["type"] == "bolt" and components["sink"]["type"] == "bolt"
    assert (components["echo"]["parallelism"], components["echo"]["num_tasks"]) == (2, 4)
    assert (components["feeder"]["parallelism"], components["feeder"]["num_tasks"]) == (1, 1)
    for c in components.values():
        assert c["errors"] == []
        for k in ("execute_latency_ms", "process_latency_ms"):
            assert isinstance(c[k], (int, float)) and c[k] >= 0

    def counts():
        cs = cluster.get_topology_info("shape")["components"]
        return {cid: (cs[cid]["emitted"], cs[cid]["transferred"], cs[cid]["acked"], cs[cid]["failed"])
                for cid in ("feeder", "echo", "sink")}

    expected = {"feeder": (5, 5, 5, 0), "echo": (5, 5, 5, 0), "sink": (0, 0, 5, 0)}
    wait_until(lambda: counts() == expected, 5, message=f"counts {expected}")
    assert isinstance(components["echo"]["capacity"], (int, float))
    assert isinstance(components["feeder"]["complete_latency_ms"], (int, float))

    first = info["uptime_secs"]
    wait_until(lambda: cluster.get_topology_info("shape")["uptime_secs"] > first, 5)


def test_uptime_counts_from_when_the_workers_are_ready_not_from_submit(cluster):
    class SlowToOpen(Spout):
        outputs = ["n"]

        def open(self, conf, context, collector):
            time.sleep(1.5)  # a connection, a cache to warm: start-up, not uptime

        def next_tuple(self):
            pass

    builder = TopologyBuilder()
    builder.set_spout("slow", SlowToOpen())
    submitted = time.monotonic()
    cluster.submit_topology("slow-start", Config(), builder.create_topology())
    uptime = cluster.get_topology_info("slow-start")["uptime_secs"]
    # open's 1.5 s not counted; measured against the test's own clock, so a slow machine cannot fail it
    assert uptime <= time.monotonic() - submitted - 1.5


def test_get_topology_info_records_errors(cluster):
    feeder, builder = feeder_builder(["value"], "feeder")
    builder.set_bolt("boom", BoomBolt("kaboom-123")).shuffle_grouping("feeder")
    cluster.submit_topology("errors", {}, builder.create_topology())
    before = time.time()
    feeder.feed(["x"], msg_id="doomed")
    wait_until(lambda: cluster.get_topology_info("errors")["components"]["boom"]["errors"], 5)
    info = cluster.get_topology_info("errors")
    (error,) = info["components"]["boom"]["errors"]
    assert {"error", "task", "time"} <= set(error)
    assert "kaboom-123" in error["error"] and "ValueError" in error["error"]
    assert error["task"] == tasks_of(cluster, "errors", "boom")[0]
    assert before - 1 <= error["time"] <= time.time() + 1
    wait_until(lambda: feeder.failed == ["doomed"], 5)  # the input was failed
    assert feeder.acked == []


# -- command line -----------------------------------------------------------------------


CLI_TOPOLOGY = '''
from squall import Bolt, Config, Spout, TopologyBuilder


class NumberSpout(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.n = 0

    def next_tuple(self):
        if self.n < 200:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1


class DoubleBolt(Bolt):
    outputs = ["n2"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit([tup["n"] * 2], anchors=tup)
        self.collector.ack(tup)


class SinkBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("numbers", NumberSpout())
builder.set_bolt("doubler", DoubleBolt(), 2).shuffle_grouping("numbers")
builder.set_bolt("sink", SinkBolt()).global_grouping("doubler")
topology = builder.create_topology()
config = Config().set_num_workers(2)
'''

SEED_TOPOLOGY = '''
from squall import Bolt, Config, Spout, TopologyBuilder


class Blue(Spout):
    outputs = ["x"]


class Green(Bolt):
    outputs = ["y"]

    def execute(self, tup):
        pass


class Yellow(Bolt):
    def execute(self, tup):
        pass


builder = TopologyBuilder()
builder.set_spout("blue-spout", Blue(), 2)
builder.set_bolt("green-bolt", Green(), 2).set_num_tasks(4).shuffle_grouping("blue-spout")
builder.set_bolt("yellow-bolt", Yellow(), 6).shuffle_grouping("green-bolt")
topology = builder.create_topology()
config = Config().set_num_workers(2)
'''


def test_cli_version(tmp_path):
    proc = squall_cli("--version", cwd=tmp_path)
    assert proc.returncode == 0
    assert squall.__version__ in proc.stdout + proc.stderr


def test_cli_plan_prints_workers_executors_and_tasks(tmp_path):
    path = tmp_path / "seed.py"
    path.write_text(SEED_TOPOLOGY)
    proc = squall_cli("plan", str(path), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    worker_lines = [line for line in out.splitlines() if re.match(r"worker \d+ \(port", line)]
    assert len(worker_lines) == 2, out
    assert "6700" in out and "6701" in out
    executor_lines = [line for line in out.splitlines() if line.startswith("  executor ")]
    per_component = collections.Counter(
        cid for line in executor_lines for cid in ("blue-spout", "green-bolt", "yellow-bolt", "__acker") if cid in line)
    assert per_component == {"blue-spout": 2, "green-bolt": 2, "yellow-bolt": 6, "__acker": 2}, out
    # green executors list two tasks each
    for line in executor_lines:
        if "green-bolt" in line:
            assert len(re.findall(r"\d+", line.split("green-bolt", 1)[1])) == 2, line


def test_cli_plan_with_override(tmp_path):
    path = tmp_path / "seed.py"
    path.write_text(SEED_TOPOLOGY)
    proc = squall_cli("plan", str(path), "-c", "topology.workers=3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert len([line for line in proc.stdout.splitlines() if re.match(r"worker \d+ \(port", line)]) == 3


@pytest.mark.processes
def test_cli_run_prints_per_component_summary(tmp_path):
    path = tmp_path / "counting.py"  # not numbers.py: python -m squall would import it for the stdlib numbers
    path.write_text(CLI_TOPOLOGY)
    proc = squall_cli("run", str(path), "--duration", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    for word in ("emitted", "acked", "failed"):
        assert word in out, out
    rows = {}
    header = None
    for line in out.splitlines():
        tokens = line.split()
        if "emitted" in tokens and "acked" in tokens:
            header = tokens
        elif tokens and tokens[0] in ("numbers", "doubler", "sink"):
            rows[tokens[0]] = tokens
    assert header is not None and set(rows) == {"numbers", "doubler", "sink"}, out

    def column(cid, name):
        return int(rows[cid][header.index(name)].replace(",", ""))

    # every number was emitted and its tree completed before the 2 s were up
    assert (column("numbers", "emitted"), column("numbers", "acked"), column("numbers", "failed")) == (200, 200, 0)
    assert (column("doubler", "emitted"), column("doubler", "acked")) == (200, 200)
    assert column("sink", "acked") == 200


def test_cli_run_rejects_bad_config_naming_the_key(tmp_path):
    path = tmp_path / "counting.py"  # not numbers.py: python -m squall would import it for the stdlib numbers
    path.write_text(CLI_TOPOLOGY)
    proc = squall_cli("run", str(path), "--duration", "1", "-c", "topology.workers=0", cwd=tmp_path)
    assert proc.returncode != 0
    assert "topology.workers" in proc.stderr


def test_cli_file_without_topology_is_an_error(tmp_path):
    path = tmp_path / "empty.py"
    path.write_text("x = 1\n")
    proc = squall_cli("plan", str(path), cwd=tmp_path)
    assert proc.returncode != 0
    assert "topology" in proc.stderr


def test_topology_debug_logs_every_emit(cluster, caplog):
    import logging

    from helpers import feeder_builder

    feeder, b = feeder_builder(["word"], spout_id="words")
    conf = Config().set_debug(True)
    with caplog.at_level(logging.INFO, logger="squall.executor"):
        cluster.submit_topology("debug", conf, b.create_topology())
        feeder.feed(["hello"], msg_id=1)
        wait_until(lambda: any("'hello'" in r.getMessage() for r in caplog.records), timeout=5)
    line = next(r.getMessage() for r in caplog.records if "'hello'" in r.getMessage())
    assert "words" in line and "'default'" in line


def _old_paths(module: str) -> list[str]:
    """The paths the classes of ``module`` had before (squall.moved's MOVED and SPLIT_FROM, read
    backwards); the module itself when it never moved."""
    from squall.moved import MOVED, SPLIT_FROM, new_path

    modules = [module, *([SPLIT_FROM[module]] if module in SPLIT_FROM else [])]
    olds = {old + m[len(new):] for m in modules for old, new in MOVED.items() if m == new or m.startswith(new + ".")}
    moved = {old for old in olds if new_path(old) in modules}
    return sorted(moved | set(modules[1:])) or [module]


def _user_nameable_classes() -> list[type]:
    """What configs, console scripts and pickles may name: the public classes (squall's exports,
    the state providers, the metrics consumers)."""
    import squall
    from squall.api.metrics2.consumer import LoggingMetricsConsumer, MetricsConsumer
    from squall.api.state.provider import InMemoryStateProvider, StateProvider
    from squall.runtime.state.redis_provider import RedisStateProvider
    from squall.runtime.state.sqlite_provider import SqliteStateProvider

    exported = [getattr(squall, name) for name in squall.__all__ if name != "__version__"]
    return [*[e for e in exported if isinstance(e, type)], InMemoryStateProvider, StateProvider,
            SqliteStateProvider, RedisStateProvider, MetricsConsumer, LoggingMetricsConsumer]


@pytest.mark.parametrize("cls", _user_nameable_classes(), ids=lambda c: c.__name__)
def test_every_class_users_can_name_is_at_its_path_from_before_the_layers(cls):
    """Configs, console scripts and old pickles name classes by the module that defined them
    before the layers (squall.moved): there, each is the class itself, unpickled too."""
    import importlib
    import pickle

    for old in _old_paths(cls.__module__):
        assert getattr(importlib.import_module(old), cls.__qualname__) is cls, old
        assert pickle.loads(f"c{old}\n{cls.__qualname__}\n.".encode()) is cls, old  # a pickle from before


def test_the_paths_modules_had_before_the_layers_import_the_same_modules():
    """Each old path is the module at its new path, loaded once; config strings and console
    scripts that name old paths work."""
    import importlib

    from squall.api.metrics2.consumer import LoggingMetricsConsumer
    from squall.api.state.provider import InMemoryStateProvider, provider_for
    from squall.cluster.metrics_reporter import consumer_class

    old = importlib.import_module("squall.state.sqlite_provider")
    new = importlib.import_module("squall.runtime.state.sqlite_provider")
    assert old is new and old.__name__ == "squall.runtime.state.sqlite_provider"
    assert importlib.import_module("squall.executor.route") is importlib.import_module("squall.runtime.executor.route")
    assert importlib.import_module("squall.cli").main is importlib.import_module("squall.ops.cli").main
    # renamed in the same step, and moved down a layer since: still at their old paths
    assert importlib.import_module("squall.scheduler") is importlib.import_module("squall.runtime.assignment")
    assert (importlib.import_module("squall.executor.scheduler")
            is importlib.import_module("squall.runtime.executor.threads"))
    assert (importlib.import_module("squall.command.spark_master")
            is importlib.import_module("squall.cluster.spark_master_url"))
    conf = {"topology.state.provider": "squall.state.provider:InMemoryStateProvider"}
    assert isinstance(provider_for(conf, "old-path"), InMemoryStateProvider)
    assert consumer_class("squall.metrics2.consumer.LoggingMetricsConsumer") is LoggingMetricsConsumer
    loaded = [m for m in sys.modules.values() if getattr(m, "__file__", None) == new.__file__]
    assert {id(m) for m in loaded} == {id(new)}
