"""streamparse / pystorm topologies run natively (squall.streamparse): the project that
``sparse quickstart`` makes, unchanged, and pystorm's component API — named and direct
streams, need_task_ids, auto_ack/auto_anchor/auto_fail, manual acks, BatchingBolt with tick
tuples, ReliableSpout replays — with the real ``streamparse`` and ``pystorm`` packages."""

from __future__ import annotations

import collections
import importlib.util
import os
import subprocess
import sys

import pytest

streamparse = pytest.importorskip("streamparse")

from streamparse import (  # noqa: E402
    BatchingBolt, Bolt, Grouping, ReliableSpout, Spout, Stream, TicklessBatchingBolt, Topology,
)

from squall import InvalidTopologyError, LocalCluster  # noqa: E402
from squall.streamparse.project import find_project, project_config  # noqa: E402
from squall.streamparse.topology import from_streamparse  # noqa: E402
from squall.testing import complete_topology, read_tuples, wait_until  # noqa: E402

from helpers import squall_cli, summary_row  # noqa: E402

# -- the quickstart project, unchanged -----------------------------------------------------------------


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory):
    """A project made by ``sparse quickstart wordcount`` (which needs no JVM to generate)."""
    root = tmp_path_factory.mktemp("sparse")
    sparse = os.path.join(os.path.dirname(sys.executable), "sparse")
    subprocess.run([sparse, "quickstart", "wordcount"], cwd=root, check=True, capture_output=True, timeout=60,
                   env={**os.environ, "LEIN_ROOT": "1"})
    return root / "wordcount"


def load_class(path, name: str) -> type:
    spec = importlib.util.spec_from_file_location(f"sp_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


@pytest.mark.processes
def test_quickstart_word_count_counts_like_streamparse(quickstart, monkeypatch):
    monkeypatch.syspath_prepend(str(quickstart / "src"))  # as sparse run does
    topology_file = quickstart / "topologies" / "wordcount.py"
    assert find_project(str(topology_file)) == str(quickstart)
    topology, config = from_streamparse(load_class(topology_file, "WordCount"), project_config(str(quickstart)))
    words = ["dog", "cat", "zebra", "dog", "elephant", "cat", "dog"] * 20
    results = complete_topology(topology, mocked_sources={"word_spout": [[w] for w in words]},
                                conf={**config, "topology.workers": 2})
    final: dict[str, int] = {}
    for word, count in read_tuples(results, "count_bolt"):
        final[word] = max(final.get(word, 0), count)
    expected = collections.Counter(words)
    expected["dog"] *= 10  # the quickstart's bolt counts a dog ten times
    assert final == dict(expected)


@pytest.mark.processes
def test_quickstart_runs_unchanged_in_worker_processes(quickstart, monkeypatch):
    monkeypatch.syspath_prepend(str(quickstart / "src"))
    topology, config = from_streamparse(load_class(quickstart / "topologies" / "wordcount.py", "WordCount"))
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("wordcount", {**config, "worker.heartbeat.frequency.secs": 0.2,
                                              "supervisor.slots.ports": []}, topology)
        info = lambda: cluster.get_topology_info("wordcount")["components"]  # noqa: E731
        wait_until(lambda: info()["count_bolt"]["executed"] > 1000, timeout=20, message="words counted")
        assert all(not c["errors"] for c in info().values()), info()


@pytest.mark.processes
@pytest.mark.parametrize("command", [["run", "--in-process"], ["run"],
                                     pytest.param(["submit", "--master", "local[2]"], marks=pytest.mark.spark)],
                         ids=["threads", "processes", "spark"])
def test_squall_runs_the_quickstart_project_from_its_directory(quickstart, command):
    if command[0] == "submit":
        pytest.importorskip("pyspark")
    out = squall_cli(command[0], "topologies/wordcount.py", *command[1:], "--duration", "3", "-c",
                     "worker.heartbeat.frequency.secs=0.2", cwd=quickstart, timeout=90)
    assert out.returncode == 0, out.stderr[-3000:]
    spout, bolt = summary_row(out.stderr, "word_spout"), summary_row(out.stderr, "count_bolt")
    assert int(spout[3].replace(",", "")) > 1000 and int(bolt[5].replace(",", "")) > 1000  # emitted, acked
    assert "error(s) in" not in out.stderr


# -- pystorm's API, natively -------------------------------------------------------------------------------


class Sentences(Spout):
    outputs = [Stream(["sentence"]), Stream(["note"], name="notes")]

    def initialize(self, conf, context):
        self.todo = collections.deque(conf["test.sentences"])

    def next_tuple(self):
        if self.todo:
            sentence = self.todo.popleft()
            self.emit([sentence], tup_id=sentence)
            self.emit([f"sent {sentence}"], stream="notes")


class Splitter(Bolt):
    """Emits words on the default stream (auto-anchored, auto-acked), and each word's length
    directly to the task that its first letter picks, asking for task ids once."""

    outputs = [Stream(["word"]), Stream(["word", "length"], name="lengths", direct=True)]

    def initialize(self, conf, context):
        self.length_tasks = sorted(int(t) for t, c in context["task->component"].items() if c == "lengths")

    def process(self, tup):
        for word in tup.values.sentence.split():  # named fields: pystorm's namedtuple values
            tasks = self.emit([word], need_task_ids=True)
            assert isinstance(tasks, list) and len(tasks) == 1
            task = self.length_tasks[ord(word[0]) % len(self.length_tasks)]
            self.emit([word, len(word)], stream="lengths", direct_task=task)


class Lengths(Bolt):
    outputs = ["word", "length", "task"]

    def process(self, tup):
        self.emit([tup.values[0], tup.values[1], self.task_id])


class ManualCounter(Bolt):
    """auto_ack off: acks itself; fails sentences containing 'poison' (a ReliableSpout
    replays them up to max_fails times, then gives up with an ack)."""

    auto_ack = False
    outputs = ["word"]

    def process(self, tup):
        if tup.values[0] == "poison":
            self.fail(tup)
        else:
            self.emit([tup.values[0]])
            self.ack(tup)


class Batcher(BatchingBolt):
    """Counts words per first letter, in batches flushed on tick tuples."""

    ticks_between_batches = 1
    outputs = ["letter", "count"]

    def group_key(self, tup):
        return tup.values[0][0]

    def process_batch(self, key, tups):
        self.emit([key, len(tups)])


class Notes(Bolt):
    outputs = ["note"]

    def process(self, tup):
        self.logger.info("note: %s", tup.values[0])
        self.emit([tup.values[0]])


class TimedBatches(TicklessBatchingBolt):
    """Counts words per first letter in batches every 0.2 s (no tick tuples in pystorm)."""

    secs_between_batches = 0.2
    outputs = ["letter", "count"]

    def group_key(self, tup):
        return tup.values[0][0]

    def process_batch(self, key, tups):
        self.emit([key, len(tups)])


class Tickless(Topology):
    sentences = Sentences.spec()
    splitter = Splitter.spec(inputs=[sentences])
    lengths = Lengths.spec(inputs={splitter["lengths"]: Grouping.DIRECT})
    batches = TimedBatches.spec(inputs={splitter: Grouping.fields("word")}, par=2)
    config = {"test.sentences": [f"word{i} again{i}" for i in range(200)]}


def test_tickless_batching_bolt_flushes_its_batches_and_acks_every_tuple():
    topology, config = from_streamparse(Tickless)
    with LocalCluster() as cluster:
        cluster.submit_topology("tickless", config, topology)
        components = lambda: cluster.get_topology_info("tickless")["components"]  # noqa: E731
        wait_until(lambda: components()["sentences"]["acked"] == 200, timeout=20,
                   message="every sentence acked once its words' batches were processed")
        assert components()["batches"]["emitted"] >= 2  # the two letters, in one batch or more
        errors = {cid: c["errors"] for cid, c in components().items() if c["errors"]}
        assert not errors, errors


class Reliable(ReliableSpout):
    max_fails = 2
    outputs = ["word"]

    def initialize(self, conf, context):
        self.todo = collections.deque(["ok", "poison", "fine"])

    def next_tuple(self):
        if self.todo:
            word = self.todo.popleft()
            self.emit([word], tup_id=word)


class Features(Topology):
    sentences = Sentences.spec(par=2)
    splitter = Splitter.spec(inputs=[sentences], par=2)
    lengths = Lengths.spec(inputs={splitter["lengths"]: Grouping.DIRECT}, par=3)
    batcher = Batcher.spec(inputs={splitter: Grouping.fields("word")}, par=2,
                           config={"topology.tick.tuple.freq.secs": 1})
    notes = Notes.spec(inputs=[sentences["notes"]])
    config = {"test.sentences": ["the cow jumped", "over the moon", "and the dish ran"]}


def test_pystorm_streams_direct_emits_and_named_fields_run_natively():
    topology, config = from_streamparse(Features)
    with LocalCluster() as cluster:
        cluster.submit_topology("features", config, topology)
        components = lambda: cluster.get_topology_info("features")["components"]  # noqa: E731
        wait_until(lambda: components()["sentences"]["acked"] == 3 * 2, timeout=15,
                   message="every sentence acked (each of the 2 spout tasks emits the 3)")
        wait_until(lambda: components()["batcher"]["emitted"] > 0, timeout=15, message="a batch on a tick")
        errors = {cid: c["errors"] for cid, c in components().items() if c["errors"]}
        assert not errors, errors


def test_lengths_go_to_the_task_the_direct_emit_names():
    topology, config = from_streamparse(Features)
    results = complete_topology(topology, mocked_sources={"sentences": {"default": [["the cow"], ["a bat"]],
                                                                         "notes": [["n"]]}}, conf=config)
    lengths = read_tuples(results, "lengths")
    assert sorted((w, n) for w, n, _ in lengths) == [("a", 1), ("bat", 3), ("cow", 3), ("the", 3)]
    by_letter = {}
    for word, _, task in lengths:
        by_letter.setdefault(ord(word[0]) % 3, set()).add(task)
    assert all(len(t) == 1 for t in by_letter.values())  # one task per first-letter bucket
    assert read_tuples(results, "notes") == [["n"]]


class ReliableTopology(Topology):
    words = Reliable.spec()
    counter = ManualCounter.spec(inputs=[words])


def test_reliable_spout_replays_failures_then_gives_up_and_manual_acks_count():
    topology, config = from_streamparse(ReliableTopology)
    with LocalCluster() as cluster:
        cluster.submit_topology("reliable", config, topology)
        spout = lambda: cluster.get_topology_info("reliable")["components"]["words"]  # noqa: E731
        # "poison" is replayed after each of its first max_fails (2) failures; after the third,
        # ReliableSpout gives up on it (and acks it itself)
        wait_until(lambda: spout()["failed"] == 3 and spout()["acked"] == 2, timeout=15,
                   message="ok and fine acked, poison failed three times")
        assert spout()["emitted"] == 5  # ok, fine, and poison three times
        assert cluster.get_topology_info("reliable")["components"]["counter"]["emitted"] == 2


SHELL_BOLT = """
import sys
from pystorm import Bolt


class Shout(Bolt):
    def process(self, tup):
        self.emit([tup.values[0].upper()])


Shout(serializer=sys.argv[1]).run()
"""


@pytest.mark.processes
@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_shell_specs_run_over_multilang_with_the_projects_serializer(tmp_path, serializer):
    from streamparse import ShellBolt

    script = tmp_path / "shout.py"
    script.write_text(SHELL_BOLT)

    class WithShell(Topology):
        words = Reliable.spec()
        shout = ShellBolt.spec(command=sys.executable, script=f"{script} {serializer}", inputs=[words],
                               outputs=["loud"])

    topology, config = from_streamparse(WithShell, {"serializer": serializer})
    with LocalCluster() as cluster:
        cluster.submit_topology("shell", config, topology)
        components = lambda: cluster.get_topology_info("shell")["components"]  # noqa: E731
        # the subprocess acks (pystorm's auto_ack) after emitting: ok, poison and fine all pass
        wait_until(lambda: components()["words"]["acked"] == 3, timeout=20, message="every word acked")
        assert components()["shout"]["emitted"] == 3


@pytest.mark.processes
def test_python_components_can_run_over_multilang_as_on_storm():
    topology, config = from_streamparse(ReliableTopology, {"serializer": "msgpack"}, multilang=True)
    with LocalCluster() as cluster:
        cluster.submit_topology("reliable", config, topology)
        spout = lambda: cluster.get_topology_info("reliable")["components"]["words"]  # noqa: E731
        wait_until(lambda: spout()["failed"] == 3 and spout()["acked"] == 2, timeout=30,
                   message="the same acks and fails as natively")


# -- what cannot run ---------------------------------------------------------------------------------------


def test_a_java_bolt_is_refused_at_load_naming_it():
    from streamparse import JavaBolt

    class WithJava(Topology):
        words = Reliable.spec()
        java = JavaBolt.spec(full_class_name="com.example.Enricher", args_list=[], inputs=[words])

    with pytest.raises(InvalidTopologyError, match=r"component 'java' is a JavaBolt \(com.example.Enricher\)"):
        from_streamparse(WithJava)
