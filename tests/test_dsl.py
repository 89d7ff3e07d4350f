"""The declarative form: ``squall.Topology`` subclasses of ``Component.spec`` attributes and
``squall.Grouping`` build the same StormTopology as TopologyBuilder code, run, reject bad input
naming the class and attribute, and ``squall run`` / ``plan`` accept a file declaring one."""

from __future__ import annotations

import textwrap

import pytest

from helpers import WAIT, RecordSink, feed_and_wait, logged, record, squall_cli
from squall import (
    BasicBolt, Bolt, Config, CustomStreamGrouping, Fields, Grouping, InvalidTopologyError, Spout, StormTopology,
    Topology, TopologyBuilder,
)
from squall.ops.cli import main
from squall.ops.command import UsageError
from squall.ops.command.topology_file import load_topology_file
from squall.api.component import Component  # noqa: F401 - named in the declarations under test
from squall.api.config import merged_config
from squall.runtime.assignment import assign
from squall.testing import FeederSpout, complete_topology, multiset_eq, read_tuples, wait_until

# -- components ----------------------------------------------------------------------------------


class MultiSpout(Spout):
    def declare_output_fields(self, declarer):
        declarer.declare(["a", "b"])
        declarer.declare_stream("evens", Fields("n", "square"))
        declarer.declare_stream("direct-out", ["x"], direct=True)


class SentenceSpout(Spout):
    outputs = ["sentence"]


class Split(BasicBolt):
    outputs = ["word"]

    def __init__(self, lower: bool):
        self.lower = lower

    def execute(self, tup, collector):
        for word in tup["sentence"].split():
            collector.emit([word.lower() if self.lower else word])


class Count(BasicBolt):
    outputs = ["word", "count"]

    def prepare(self, conf, context):
        self.counts = {}

    def execute(self, tup, collector):
        word = tup["word"]
        self.counts[word] = self.counts.get(word, 0) + 1
        collector.emit([word, self.counts[word]])


class Lengths(BasicBolt):
    outputs = {"default": ["word"], "lengths": ["word", "length"]}

    def execute(self, tup, collector):
        collector.emit([tup["word"]])
        collector.emit([tup["word"], len(tup["word"])], stream="lengths")


class Sink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.ack(tup)


class Relay(Sink):
    outputs = ["a"]


class ConfRecorder(RecordSink):
    """Records, once per task, the topology config keys the test set."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        record(("conf", self.key), {k: conf.get(k) for k in ("test.from", "test.class_only", "test.component")})


class FirstTask(CustomStreamGrouping):
    def prepare(self, context, stream, target_tasks):
        self.target = min(target_tasks)

    def choose_tasks(self, task_id, values):
        return [self.target]


FIRST_TASK = FirstTask()

# -- equivalence with TopologyBuilder ------------------------------------------------------------


class EveryGrouping(Topology):
    config = Config().set_num_workers(3)
    source = MultiSpout.spec(par=2, num_tasks=4, config={"topology.max.spout.pending": 10})
    shuffle = Relay.spec(inputs={source: Grouping.SHUFFLE})
    listed = Sink.spec(inputs=[source, (source, "evens")], par=2)
    fields = Sink.spec(inputs={source: Grouping.fields("a", "b")}, par=3, num_tasks=6)
    fields_list = Sink.spec(inputs={source: Grouping.fields(["b"])})
    partial = Sink.spec(inputs={source["evens"]: Grouping.partial_key("n")}, par=2)
    everyone = Sink.spec(name="all", inputs={(source, "evens"): Grouping.ALL}, par=2)
    single = Sink.spec(inputs={source: Grouping.GLOBAL, source["evens"]: Grouping.NONE})
    direct = Sink.spec(inputs={source["direct-out"]: Grouping.DIRECT}, par=2)
    local = Sink.spec(inputs={source: Grouping.LOCAL_OR_SHUFFLE}, par=2, config={"test.component": 1})
    custom = Sink.spec(inputs={shuffle: Grouping.custom(FIRST_TASK), source: Grouping.SHUFFLE}, par=2)


def every_grouping_builder() -> StormTopology:
    builder = TopologyBuilder()
    builder.set_spout("source", MultiSpout(), 2).set_num_tasks(4).set_max_spout_pending(10)
    builder.set_bolt("shuffle", Relay()).shuffle_grouping("source")
    builder.set_bolt("listed", Sink(), 2).shuffle_grouping("source").shuffle_grouping("source", "evens")
    builder.set_bolt("fields", Sink(), 3).set_num_tasks(6).fields_grouping("source", ["a", "b"])
    builder.set_bolt("fields_list", Sink()).fields_grouping("source", Fields("b"))
    builder.set_bolt("partial", Sink(), 2).partial_key_grouping("source", ["n"], "evens")
    builder.set_bolt("all", Sink(), 2).all_grouping("source", "evens")
    builder.set_bolt("single", Sink()).global_grouping("source").none_grouping("source", "evens")
    builder.set_bolt("direct", Sink(), 2).direct_grouping("source", "direct-out")
    builder.set_bolt("local", Sink(), 2).local_or_shuffle_grouping("source").add_configuration("test.component", 1)
    builder.set_bolt("custom", Sink(), 2).custom_grouping("shuffle", FIRST_TASK).shuffle_grouping("source")
    return builder.create_topology()


def test_every_grouping_kind_and_named_streams_build_what_topology_builder_builds():
    declared, built = EveryGrouping.create_topology(), every_grouping_builder()
    assert list(declared.components) == list(built.components)  # attribute order, name= honoured
    for cid, spec in built.components.items():
        assert declared.components[cid] == spec, cid  # kind, object, parallelism, tasks, conf, inputs, outputs
    assert declared == built
    conf = merged_config(EveryGrouping.config)
    assert assign(declared, conf) == assign(built, conf)  # the same tasks, executors and workers


def test_the_grouping_constants_and_factories():
    assert Grouping.fields("a", "b") == Grouping.fields(["a", "b"]) == Grouping.fields(("a", "b"))
    assert Grouping.partial_key("k") != Grouping.fields("k")
    kinds = [Grouping.SHUFFLE, Grouping.ALL, Grouping.GLOBAL, Grouping.NONE, Grouping.DIRECT,
             Grouping.LOCAL_OR_SHUFFLE]
    assert [repr(g) for g in kinds] == ["Grouping.SHUFFLE", "Grouping.ALL", "Grouping.GLOBAL", "Grouping.NONE",
                                        "Grouping.DIRECT", "Grouping.LOCAL_OR_SHUFFLE"]
    assert repr(Grouping.fields("a", "b")) == "Grouping.fields('a', 'b')"
    assert repr(Grouping.partial_key("k")) == "Grouping.partial_key('k')"


def test_named_stream_inputs_in_every_form_are_the_same_subscription():
    class Forms(Topology):
        source = MultiSpout.spec()
        by_item = Sink.spec(inputs={source["evens"]: Grouping.fields("n")})
        by_tuple = Sink.spec(inputs={(source, "evens"): Grouping.fields("n")})

    components = Forms.create_topology().components
    assert components["by_item"].inputs == components["by_tuple"].inputs
    assert list(components["by_item"].inputs) == [("source", "evens")]
    assert Forms.source["evens"] == (Forms.source, "evens")


def test_a_spec_on_an_instance_keeps_its_constructor_state_and_a_spec_on_a_class_builds_one():
    class Two(Topology):
        sentences = SentenceSpout.spec()
        split = Split(lower=True).spec(inputs=[sentences], par=2)

    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout())
    builder.set_bolt("split", Split(lower=True), 2).shuffle_grouping("sentences")
    assert Two.create_topology() == builder.create_topology()
    assert Two.create_topology().components["split"].instantiate().lower is True


def test_the_single_input_forms_default_stream_and_shuffle():
    class Single(Topology):
        source = MultiSpout.spec()
        bare = Sink.spec(inputs=source)
        item = Sink.spec(inputs=source["evens"])
        pair = Sink.spec(inputs=(source, "evens"))
        listed = Sink.spec(inputs=[(source, "evens")])

    components = Single.create_topology().components
    shuffle = EveryGrouping.create_topology().components["shuffle"].inputs[("source", "default")]
    assert dict(components["bare"].inputs) == {("source", "default"): shuffle}
    for cid in ("item", "pair", "listed"):
        assert dict(components[cid].inputs) == {("source", "evens"): shuffle}, cid


def test_a_subclass_inherits_the_components_and_may_change_the_config_or_override_one():
    class Base(Topology):
        config = {"topology.workers": 2}
        sentences = SentenceSpout.spec()
        split = Split(lower=False).spec(inputs=[sentences])

    class Tuned(Base):
        config = {"topology.workers": 4}
        split = Split(lower=True).spec(inputs=[Base.sentences], par=3)
        count = Count.spec(inputs={split: Grouping.fields("word")})

    components = Tuned.create_topology().components
    assert list(components) == ["sentences", "split", "count"]
    assert components["split"].parallelism == 3 and components["split"].instantiate().lower is True
    assert Base.create_topology().components["split"].instantiate().lower is False
    assert Tuned.config == {"topology.workers": 4}


# -- runs ----------------------------------------------------------------------------------------


class WordCount(Topology):
    config = {"topology.workers": 2}
    sentences = SentenceSpout.spec(par=2)
    split = Split(lower=True).spec(inputs=[sentences], par=2, num_tasks=4)
    count = Count.spec(inputs={split: Grouping.fields("word")}, par=3)
    lengths = Lengths.spec(inputs={split: Grouping.LOCAL_OR_SHUFFLE})
    total = Count.spec(inputs={lengths["lengths"]: Grouping.GLOBAL})


def test_complete_topology_runs_the_class_with_the_right_counts():
    sentences = [["The cow"], ["the moon"], ["a cow"]]
    results = complete_topology(WordCount, mocked_sources={"sentences": sentences})
    assert multiset_eq(read_tuples(results, "split"), [["the"], ["cow"], ["the"], ["moon"], ["a"], ["cow"]])
    finals = {}
    for word, count in read_tuples(results, "count"):
        finals[word] = max(count, finals.get(word, 0))
    assert finals == {"the": 2, "cow": 2, "moon": 1, "a": 1}
    assert multiset_eq(read_tuples(results, "lengths", "lengths"),
                       [["the", 3], ["cow", 3], ["the", 3], ["moon", 4], ["a", 1], ["cow", 3]])
    # global grouping: one task counts every word of the named stream
    assert sorted(count for _, count in read_tuples(results, "total")) == [1, 1, 1, 1, 2, 2]


def test_complete_topology_of_the_class_equals_that_of_its_storm_topology():
    data = {"sentences": [["x y z"], ["y z"], ["z"]]}
    by_class = complete_topology(WordCount, mocked_sources=data)
    by_topology = complete_topology(WordCount.create_topology(), mocked_sources=data, conf=WordCount.config)
    assert multiset_eq(read_tuples(by_class, "count"), read_tuples(by_topology, "count"))


def test_local_cluster_submits_the_class_with_its_config_under_the_given_conf(cluster, key):
    feeder = FeederSpout(["word"])

    class Fed(Topology):
        config = {"test.from": "class", "test.class_only": "kept", "topology.workers": 2}
        words = feeder.spec()
        sink = ConfRecorder(key).spec(inputs={words: Grouping.ALL}, par=2, config={"test.component": "mine"})

    cluster.submit_topology("fed", {"test.from": "submit"}, Fed)
    for i in range(3):
        feed_and_wait(feeder, [f"w{i}"], i)
    wait_until(lambda: len(logged(key)) == 6, timeout=WAIT)  # all grouping: both tasks get each word
    assert sorted(logged(key)) == ["w0", "w0", "w1", "w1", "w2", "w2"]
    assert logged(("conf", key)) == [{"test.from": "submit", "test.class_only": "kept", "test.component": "mine"}] * 2
    assert len(cluster.get_topology_info("fed")["workers"]) == 2


# -- bad input -----------------------------------------------------------------------------------


class Other(Topology):
    sentences = SentenceSpout.spec()


def declare(body: str, **names) -> type[Topology]:
    """Create ``class Bad(Topology)`` with ``body`` (in this module's namespace)."""
    namespace = {**globals(), **names}
    exec(f"class Bad(Topology):\n{textwrap.indent(textwrap.dedent(body), '    ')}", namespace)
    return namespace["Bad"]


@pytest.mark.parametrize("body, message", [
    ("sentences = SentenceSpout.spec()\nsplit = Split(True).spec(inputs=[Other.sentences])",
     "Bad.split: input SentenceSpout.spec() is not a component of Bad (a spec of another topology?)"),
    ("sentences = SentenceSpout.spec()\nsplit = Split(True).spec(inputs={Other.sentences['default']: "
     "Grouping.SHUFFLE})",
     "Bad.split: input SentenceSpout.spec() is not a component of Bad"),
    ("sentences = SentenceSpout.spec()\nmore = SentenceSpout.spec(inputs=[sentences])",
     "Bad.more: SentenceSpout is a spout, and a spout takes no inputs"),
    ("sentences = SentenceSpout.spec()\nsplit = Split(True).spec()",
     "Bad.split: Split is a bolt and subscribes to nothing; give it inputs=[...] or {...: Grouping}"),
    ("sentences = SentenceSpout.spec()\nsplit = Split(True).spec(inputs={sentences: 'shuffle'})",
     "Bad.split: the grouping of input 'sentences':'default' must be a squall.Grouping (Grouping.SHUFFLE, "
     "Grouping.fields(...), ...), got 'shuffle'"),
    ("sentences = SentenceSpout.spec()\nsplit = Split(True).spec(inputs={sentences: Grouping.fields})",
     "Bad.split: the grouping of input 'sentences':'default' must be a squall.Grouping (Grouping.SHUFFLE, "
     "Grouping.fields(...), ...), got <bound method Grouping.fields"),
    ("sentences = SentenceSpout.spec()\nsplit = Split(True).spec(inputs=['sentences'])",
     "Bad.split: input 'sentences' is not a spec, spec['stream'] or (spec, 'stream') of a component of Bad"),
    ("sentences = SentenceSpout.spec(par=0)", "Bad.sentences: par must be an integer >= 1, got 0"),
    ("sentences = SentenceSpout.spec(par='2')", "Bad.sentences: par must be an integer >= 1, got '2'"),
    ("sentences = SentenceSpout.spec(par=True)", "Bad.sentences: par must be an integer >= 1, got True"),
    ("sentences = SentenceSpout.spec(num_tasks=0)", "Bad.sentences: num_tasks must be an integer >= 1, got 0"),
    ("sentences = SentenceSpout.spec(config=[('a', 1)])", "Bad.sentences: config must be a dict, got list"),
    ("a = SentenceSpout.spec()\nb = SentenceSpout.spec(name='a')",
     "Bad.b: component id 'a' is already used by Bad.a"),
    ("a = SentenceSpout.spec(name='x')\nx = SentenceSpout.spec()",
     "Bad.x: component id 'x' is already used by Bad.a (component 'x')"),
    ("a = SentenceSpout.spec()\nb = a", "Bad.b is the same spec as Bad.a; each component needs a spec of its own"),
    ("a = SentenceSpout.spec(name='__a')", "Bad.a: component id '__a' is reserved"),
    ("a = SentenceSpout.spec(name='')", "Bad.a: component id must be a non-empty string, got ''"),
    ("a = SentenceSpout()",
     "Bad.a is a SentenceSpout instance, not a spec: declare it as SentenceSpout(...).spec(...)"),
    ("a = Component.spec()", "Bad.a: Component is neither a squall.Spout, a squall.Bolt nor a squall.BasicBolt"),
    ("config = [('topology.workers', 2)]\na = SentenceSpout.spec()",
     "Bad.config must be a dict (or squall.Config) of topology configuration, got list"),
])
def test_bad_declarations_fail_at_class_creation_naming_the_class_and_attribute(body, message):
    with pytest.raises(InvalidTopologyError) as info:
        declare(body)
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize("body, message", [
    ("source = MultiSpout.spec()\nsink = Sink.spec(inputs=[source['odds']])",
     "Bad: bolt 'sink' subscribes to stream 'odds' of 'source', which declares ['default', 'direct-out', 'evens']"),
    ("source = MultiSpout.spec()\nsink = Sink.spec(inputs={source: Grouping.fields('c')})",
     "Bad: bolt 'sink' subscribes to 'source':'default' grouping on field(s) ['c'] that the stream does not "
     "declare (it declares ['a', 'b'])"),
    ("source = MultiSpout.spec()\nsink = Sink.spec(inputs={source: Grouping.DIRECT})",
     "Bad: bolt 'sink' subscribes to 'source':'default' with direct grouping, but that stream is not declared "
     "direct"),
    ("source = MultiSpout.spec()\nsink = Sink.spec(inputs=[source['direct-out']])",
     "Bad: bolt 'sink' subscribes to direct stream 'source':'direct-out' with shuffle grouping; use "
     "direct_grouping"),
    ("source = MultiSpout.spec()\nsink = Sink.spec(inputs={source: Grouping.fields()})",
     "Bad.sink: bolt 'sink': fields grouping on 'source':'default' selects no field"),
    ("source = MultiSpout.spec()\nsink = Sink.spec(inputs={source: Grouping.custom(object())})",
     "Bad.sink: bolt 'sink', custom grouping on 'source':'default': <object object"),
    ("source = MultiSpout.spec()\nsink = Sink.spec(inputs=[source, source['default']])",
     "Bad.sink: bolt 'sink' already subscribes to stream 'default' of 'source'"),
    ("sentences = SentenceSpout.spec()\nsplit = Split.spec(inputs=[sentences])",
     "Bad.split: Split() raised TypeError: Split.__init__() missing 1 required positional argument: 'lower' (a "
     "component whose constructor takes arguments is declared as Split(...).spec(...))"),
    ("", "Bad: the topology has no components"),
])
def test_what_only_the_components_tell_fails_at_create_topology_naming_the_class(body, message):
    bad = declare(body or "pass")
    with pytest.raises(InvalidTopologyError) as info:
        bad.create_topology()
    assert str(info.value).startswith(message), str(info.value)


def test_submitting_something_else_says_what_is_expected(cluster):
    with pytest.raises(InvalidTopologyError, match="expected a StormTopology .* or a squall.Topology subclass, "
                                                   "got WordCount"):
        cluster.submit_topology("x", None, WordCount())


# -- the squall command --------------------------------------------------------------------------

TOPOLOGY_FILE = """
from squall import BasicBolt, Grouping, Spout, Topology


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        if self.n < 300:
            self.collector.emit([self.n], msg_id=self.n)
            self.n += 1


class Parity(BasicBolt):
    outputs = ["parity"]

    def execute(self, tup, collector):
        collector.emit([tup["n"] % 2])


class Tally(BasicBolt):
    def execute(self, tup, collector):
        pass


class Parities(Topology):
    config = {"topology.workers": 2}
    numbers = Numbers.spec()
    parity = Parity.spec(inputs=[numbers], par=2)
    tally = Tally.spec(inputs={parity: Grouping.fields("parity")}, par=3)
"""


def write(tmp_path, text: str, name: str = "parities.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.mark.processes
def test_squall_run_runs_a_file_declaring_a_topology_class(tmp_path):
    path = write(tmp_path, TOPOLOGY_FILE)
    proc = squall_cli("run", path, "--in-process", "--duration", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "topology 'parities' running, workers in this process" in proc.stderr
    for component, kind, tasks, emitted in (("numbers", "spout", 1, 300), ("parity", "bolt", 2, 300),
                                            ("tally", "bolt", 3, 0)):
        assert any(line.split()[:4] == [component, kind, str(tasks), f"{emitted:,}"]
                   for line in proc.stderr.splitlines()), proc.stderr


def test_squall_plan_uses_the_class_config(tmp_path, capsys):
    assert main(["plan", write(tmp_path, TOPOLOGY_FILE)]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("worker ") for line in out.splitlines()) == 2  # topology.workers of the class
    assert out.count("executor tally") == 3


def test_the_file_config_and_a_module_level_topology(tmp_path):
    _, config = load_topology_file(write(tmp_path, TOPOLOGY_FILE + "config = {'topology.workers': 1, 'x': 2}\n"))
    assert config == {"topology.workers": 1, "x": 2}  # the module's config over the class's
    topology, config = load_topology_file(write(tmp_path, TOPOLOGY_FILE + textwrap.dedent("""
        class Other(Parities):
            config = {}

        topology = Parities.create_topology()
    """), "two.py"))
    assert list(topology.components) == ["numbers", "parity", "tally"] and config == {}
    topology, config = load_topology_file(write(tmp_path, TOPOLOGY_FILE + "topology = Parities\n", "cls.py"))
    assert isinstance(topology, StormTopology) and config == {"topology.workers": 2}


def test_a_file_with_several_topology_classes_and_no_topology_is_refused_listing_them(tmp_path, capsys):
    path = write(tmp_path, TOPOLOGY_FILE + "\nclass Faster(Parities):\n    config = {'topology.workers': 4}\n")
    assert main(["run", path, "--in-process", "--duration", "1"]) == 2
    err = capsys.readouterr().err
    assert (f"{path} must define a module-level 'topology' = TopologyBuilder(...).create_topology() or exactly one "
            "squall.Topology subclass (it defines 2: Parities, Faster; pick one with topology = "
            "Parities.create_topology())") in err
    with pytest.raises(UsageError, match=r"\(it defines none\)"):
        load_topology_file(write(tmp_path, "from squall import Topology\n", "empty.py"))


def test_a_bad_class_in_a_file_fails_the_command_with_its_message(tmp_path, capsys):
    path = write(tmp_path, TOPOLOGY_FILE.replace("par=3)", "par=0)"))
    assert main(["plan", path]) == 2
    line = TOPOLOGY_FILE.splitlines().index("class Parities(Topology):") + 1  # where the class is made
    assert capsys.readouterr().err == (f"squall: error: {path}:{line}: InvalidTopologyError: Parities.tally: par "
                                       "must be an integer >= 1, got 0\n")
