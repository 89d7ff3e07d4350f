"""Storm's multilang protocol: real pystorm components, run as subprocesses by ShellSpout and
ShellBolt, over JSON and msgpack; crashes, hangs and bad messages.

The pystorm components live in one script written into the test's tmp_path and started as
``python components.py CLASS SERIALIZER ARGS...``. They talk to the test through files in
tmp_path (acked ids, crash markers); Squall-side sinks record through ``helpers``.
"""

from __future__ import annotations

import logging
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from helpers import (
    Recorder,
    RecordSink,
    errors_of,
    feed_and_wait,
    feeder_builder,
    logged,
    received,
    record,
    tasks_of,
)

from squall import Config, Spout, TopologyBuilder, TopologySetupError
from squall.multilang import ShellBolt, ShellSpout
from squall.testing import wait_until

pytestmark = pytest.mark.processes

COMPONENTS = r'''
import os, sys, time
from collections import Counter
from pystorm import Bolt, ReliableSpout

ARGS = sys.argv[3:]


class SentenceSpout(ReliableSpout):
    """Emits each line of ARGS[0] once (id: its line number); appends acked ids to ARGS[1].
    Exits, once, when about to emit id ARGS[2] (if given)."""
    max_fails = 1000

    def initialize(self, conf, context):
        with open(ARGS[0]) as f:
            self.todo = [(str(i), line.strip()) for i, line in enumerate(f)]

    def next_tuple(self):
        if self.todo:
            tup_id, sentence = self.todo.pop(0)
            marker = os.path.join(os.path.dirname(ARGS[1]), "SPOUT-CRASH")
            if ARGS[2:] == [tup_id] and not os.path.exists(marker):  # crash once, at that id
                open(marker, "w").close()
                print(f"spout going down at {tup_id}", file=sys.stderr, flush=True)
                os._exit(4)
            self.emit([sentence], tup_id=tup_id)

    def ack(self, tup_id):
        super().ack(tup_id)
        with open(ARGS[1], "a") as f:
            f.write(tup_id + "\n")


class SplitBolt(Bolt):
    """Emits [id, word] for each word of [id, sentence] (auto-anchored, auto-acked).
    A sentence with CRASH makes it exit at once, one with HANG makes it stop answering,
    both once (marker files in ARGS[0])."""

    def process(self, tup):
        tup_id, sentence = tup.values
        for trouble in ("CRASH", "HANG"):
            marker = os.path.join(ARGS[0], trouble)
            if trouble in sentence and not os.path.exists(marker):
                open(marker, "w").close()
                print(f"{trouble} on {tup_id}: going down", file=sys.stderr, flush=True)
                if trouble == "CRASH":
                    os._exit(3)
                time.sleep(3600)
        for word in sentence.split():
            self.emit([tup_id, word])


class WordsBolt(Bolt):
    """Emits [word] for each word of [sentence]."""

    def process(self, tup):
        for word in tup.values[0].split():
            self.emit([word])


class CountBolt(Bolt):
    """Emits [word, count so far]."""

    def initialize(self, conf, context):
        self.counts = Counter()

    def process(self, tup):
        word = tup.values[0]
        self.counts[word] += 1
        self.emit([word, self.counts[word]])


class DirectBolt(Bolt):
    """Emits [v] on default with need_task_ids, then [v, those task ids] on the direct stream
    to the lowest task of component "direct-sink"."""

    def initialize(self, conf, context):
        self.target = min(int(t) for t, c in context["task->component"].items() if c == "direct-sink")

    def process(self, tup):
        tasks = self.emit([tup.values[0]], need_task_ids=True)
        self.emit([tup.values[0], tasks], stream="direct", direct_task=self.target)


class TalkBolt(Bolt):
    """log..., error..., bogus..., garbage... and fail... do what they say; then ack (not fail...)."""

    auto_ack = False

    def process(self, tup):
        value = tup.values[0]
        if value.startswith("log"):
            self.log("hello from pystorm: " + value)
        elif value.startswith("error"):
            self.send_message({"command": "error", "msg": "pystorm says no: " + value})
        elif value.startswith("bogus"):
            self.send_message({"command": "bogus"})
        elif value.startswith("garbage"):
            self.serializer.output_stream.write("{not json\nend\n")
            self.serializer.output_stream.flush()
        if value.startswith("fail"):
            self.fail(tup)
        else:
            self.ack(tup)


if __name__ == "__main__":
    globals()[sys.argv[1]](serializer=sys.argv[2]).run()
'''

SENTENCES = [
    "the cow jumped over the moon",
    "an apple a day keeps the doctor away",
    "four score and seven years ago",
    "snow white and the seven dwarfs",
    "i am at two with nature",
] * 4


@pytest.fixture
def script(tmp_path) -> Path:
    path = tmp_path / "components.py"
    path.write_text(textwrap.dedent(COMPONENTS))
    return path


def shell(script: Path, cls: str, *args: str, serializer: str = "json") -> list[str]:
    """The command (as ShellBolt/ShellSpout arguments) running ``cls`` of the script."""
    return [sys.executable, str(script), cls, serializer, *map(str, args)]


def read_lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


# -- Squall-side components ----------------------------------------------------------------------


class CountSink(RecordSink):
    """Records [word, count] pairs under "counts"."""

    def __init__(self):
        super().__init__("counts")

    def item(self, tup):
        return tuple(tup.values)


class DirectShellBolt(ShellBolt):
    """A ShellBolt with a regular and a direct stream."""

    def declare_output_fields(self, declarer):
        declarer.declare(["v"])
        declarer.declare_stream("direct", ["v", "tasks"], direct=True)


class ReplaySpout(Spout):
    """Emits [id, sentence] per sentence with msg id = id; replays on fail; records
    "acked" / "failed" ids."""

    outputs = ["id", "sentence"]

    def __init__(self, sentences):
        self.sentences = dict(enumerate(sentences))

    def open(self, conf, context, collector):
        self.collector = collector
        self.todo = list(self.sentences)

    def next_tuple(self):
        if self.todo:
            i = self.todo.pop(0)
            self.collector.emit([i, self.sentences[i]], msg_id=i)

    def ack(self, msg_id):
        record("acked", msg_id)

    def fail(self, msg_id):
        record("failed", msg_id)
        self.todo.append(msg_id)


class WordSink(RecordSink):
    """Records (id, word) under "words"."""

    def __init__(self):
        super().__init__("words")

    def item(self, tup):
        return tuple(tup.values)


# -- word count over multilang ---------------------------------------------------------------------


@pytest.mark.parametrize("serializer", ["json", "msgpack"])
def test_pystorm_word_count(cluster, script, tmp_path, serializer):
    sentences, acked = tmp_path / "sentences.txt", tmp_path / "acked.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n")
    b = TopologyBuilder()
    b.set_spout("sentences", ShellSpout(*shell(script, "SentenceSpout", sentences, acked, serializer=serializer),
                                        outputs=["sentence"], serializer=serializer))
    b.set_bolt("split", ShellBolt(*shell(script, "WordsBolt", serializer=serializer), outputs=["word"],
                                    serializer=serializer),
               2).shuffle_grouping("sentences")
    b.set_bolt("count", ShellBolt(*shell(script, "CountBolt", serializer=serializer), outputs=["word", "count"],
                                    serializer=serializer),
               2).fields_grouping("split", ["word"])
    b.set_bolt("sink", CountSink()).shuffle_grouping("count")
    cluster.submit_topology("t", Config(), b.create_topology())

    expected = Counter(w for s in SENTENCES for w in s.split())
    wait_until(lambda: len(read_lines(acked)) == len(SENTENCES), timeout=20, message="every sentence acked")
    wait_until(lambda: len(logged("counts")) == sum(expected.values()), message="every word counted")
    assert sorted(map(int, read_lines(acked))) == list(range(len(SENTENCES)))
    final = {}
    for word, count in logged("counts"):
        final[word] = max(final.get(word, 0), count)
    assert final == dict(expected)
    assert all(not errors_of(cluster, "t", c) for c in ("sentences", "split", "count"))


def test_direct_emit_and_need_task_ids(cluster, script):
    feeder, b = feeder_builder()
    b.set_bolt("shell", DirectShellBolt(*shell(script, "DirectBolt"))).shuffle_grouping("spout")
    b.set_bolt("default-sink", Recorder(), 3).shuffle_grouping("shell")
    b.set_bolt("direct-sink", Recorder(), 2).direct_grouping("shell", "direct")
    cluster.submit_topology("t", Config(), b.create_topology())
    for i in range(6):
        feed_and_wait(feeder, [f"v{i}"], i)

    direct = {e["values"][0]: e for e in received("direct-sink")}
    regular = {e["values"][0]: e["task"] for e in received("default-sink")}
    assert set(direct) == set(regular) == {f"v{i}" for i in range(6)}
    target = min(tasks_of(cluster, "t", "direct-sink"))
    for value, entry in direct.items():
        assert entry["task"] == target
        assert entry["values"][1] == [regular[value]]  # need_task_ids: where the default emit went
    assert not errors_of(cluster, "t", "shell")


# -- fail, log, error, bad messages ----------------------------------------------------------------


def test_fail_log_error_and_bad_messages(cluster, script, caplog):
    caplog.set_level(logging.INFO, logger="squall.multilang")
    feeder, b = feeder_builder()
    b.set_bolt("talk", ShellBolt(*shell(script, "TalkBolt"))).shuffle_grouping("spout")
    cluster.submit_topology("t", Config(), b.create_topology())

    feed_and_wait(feeder, ["fail-1"], "f1", "failed")
    feed_and_wait(feeder, ["log-1"], "l1")
    assert any("hello from pystorm: log-1" in r.getMessage() and r.name == "squall.multilang.talk"
               for r in caplog.records)
    feed_and_wait(feeder, ["error-1"], "e1")
    feed_and_wait(feeder, ["bogus-1"], "b1")
    feed_and_wait(feeder, ["garbage-1"], "g1")
    feed_and_wait(feeder, [b"bytes"], "x1", "failed")  # JSON cannot carry it: failed here, never sent
    feed_and_wait(feeder, ["after"], "a1")  # the subprocess is still the same, and answers
    errors = [e["error"] for e in errors_of(cluster, "t", "talk")]
    assert any("pystorm says no: error-1" in e and "'talk' task" in e for e in errors)
    assert any("unknown command" in e and "bogus" in e for e in errors)
    assert any("malformed JSON" in e for e in errors)
    assert any("cannot be sent as json" in e for e in errors)
    assert not any("ended" in e for e in errors), errors
    assert feeder.failed == ["f1", "x1"]


def test_bad_command_or_serializer_fails_early(cluster, tmp_path):
    with pytest.raises(ValueError, match="unknown multilang serializer 'xml'"):
        ShellBolt(sys.executable, "x.py", serializer="xml")
    feeder, b = feeder_builder()
    b.set_bolt("shell", ShellBolt(str(tmp_path / "no-such-program"))).shuffle_grouping("spout")
    with pytest.raises(TopologySetupError, match="cannot start"):
        cluster.submit_topology("t", Config(), b.create_topology())


# -- a subprocess that dies or hangs ---------------------------------------------------------------


def _split_over_multilang(cluster, script, tmp_path, sentences, conf=None):
    b = TopologyBuilder()
    b.set_spout("spout", ReplaySpout(sentences))
    # one task: only a restarted subprocess can process the replays
    b.set_bolt("split", ShellBolt(*shell(script, "SplitBolt", tmp_path), outputs=["id", "word"])).shuffle_grouping(
        "spout")
    b.set_bolt("sink", WordSink()).shuffle_grouping("split")
    cluster.submit_topology("t", conf or Config(), b.create_topology())


def _expect_all_words(sentences):
    wait_until(lambda: set(logged("acked")) == set(range(len(sentences))), timeout=30, message="every sentence acked")
    expected = {(i, w) for i, s in enumerate(sentences) for w in s.split()}
    assert set(logged("words")) == expected  # at least once: replays may repeat some


def test_crashing_subprocess_is_restarted_and_its_tuples_replayed(cluster, script, tmp_path):
    sentences = SENTENCES[:8] + ["this one makes it CRASH"] + SENTENCES[8:]
    _split_over_multilang(cluster, script, tmp_path, sentences)
    _expect_all_words(sentences)
    crashed = sentences.index("this one makes it CRASH")
    assert crashed in logged("failed")
    # no fail storm: only what the dead subprocess held is failed; tuples arriving while it
    # restarts wait for the new one (failing them at once made the spout replay in a loop)
    assert len(logged("failed")) <= len(sentences), Counter(logged("failed"))
    errors = [e["error"] for e in errors_of(cluster, "t", "split")]
    assert any("component 'split' task" in e and "exit code 3" in e and f"CRASH on {crashed}: going down" in e
               for e in errors), errors


def test_hung_subprocess_is_detected_and_restarted(cluster, script, tmp_path):
    conf = Config()
    conf["topology.subprocess.timeout.secs"] = 2
    sentences = SENTENCES[:5] + ["this one makes it HANG"] + SENTENCES[5:10]
    _split_over_multilang(cluster, script, tmp_path, sentences, conf)
    hung = sentences.index("this one makes it HANG")
    wait_until(lambda: hung in logged("failed"), timeout=10, message="the hung tuple failed")
    _expect_all_words(sentences)
    errors = [e["error"] for e in errors_of(cluster, "t", "split")]
    # the subprocess was killed by the 2 s timeout set above, not the default one (30 s)
    assert any("did not answer within topology.subprocess.timeout.secs (2s)" in e
               and f"HANG on {hung}: going down" in e for e in errors), errors


def test_crashing_spout_subprocess_is_restarted(cluster, script, tmp_path):
    sentences, acked = tmp_path / "sentences.txt", tmp_path / "acked.txt"
    sentences.write_text("\n".join(SENTENCES) + "\n")
    b = TopologyBuilder()
    b.set_spout("sentences", ShellSpout(*shell(script, "SentenceSpout", sentences, acked, 7), outputs=["sentence"]))
    b.set_bolt("split", ShellBolt(*shell(script, "WordsBolt"), outputs=["word"])).shuffle_grouping("sentences")
    cluster.submit_topology("t", Config(), b.create_topology())
    # the new subprocess starts its file over: every line is acked, by one or the other
    wait_until(lambda: set(read_lines(acked)) == {str(i) for i in range(len(SENTENCES))}, timeout=20,
               message="every sentence acked")
    errors = [e["error"] for e in errors_of(cluster, "t", "sentences")]
    assert any("component 'sentences' task" in e and "exit code 4" in e and "spout going down at 7" in e
               for e in errors), errors
