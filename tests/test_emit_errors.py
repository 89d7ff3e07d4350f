"""Bad input at emit time, errors from user code, and values crossing workers.

Each bad emit must (1) record an error for the emitting component, visible in
``get_topology_info(name)["components"][cid]["errors"]`` with the error text, the task and
the time, (2) fail the input tuple (a FeederSpout's ``failed`` gets its message id) and
(3) leave the executor running (a later valid tuple is processed and acked).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import fractions
import re
import threading
import time

import pytest

from helpers import (
    Recorder, component_info, errors_of, executors_of, feed_and_wait, feeder_builder, prepared, received,
    record_prepared, record_received, tasks_of, wait_for,
)
from squall import BasicBolt, Bolt, Config, FailedException, Spout, TopologyBuilder
from squall.testing import FeederSpout, wait_until


def message_of(error: dict) -> str:
    """The exception line(s) of an error's text: its traceback's frames left out."""
    lines = [ln for ln in error["error"].splitlines()
             if ln.strip() and not ln.startswith((" ", "\t", "Traceback (most recent call last)"))]
    return "\n".join(lines)


def has_word(text: str, word: object) -> bool:
    return re.search(rf"(?<![\w.]){re.escape(str(word))}(?![\w.])", text) is not None


# ---------------------------------------------------------------------------------------
# Components
# ---------------------------------------------------------------------------------------


def _do(case: str, n, emit, emit_direct, ctx) -> None:
    """The emit a case asks for. ``ctx``: sink tasks, a non-subscriber task, local/remote sink tasks."""
    if case == "ok":
        emit([n, n])
    elif case == "ok_remote":
        emit_direct(ctx["remote"], [n, "fine"], "dstream")
    elif case == "undeclared_stream":
        emit([n, n], "no_such_stream_xyz")
    elif case == "wrong_count":
        emit([n, n, n])
    elif case == "regular_on_direct":
        emit([n, n], "dstream")
    elif case == "direct_to_non_subscriber":
        emit_direct(ctx["non_subscriber"], [n, n], "dstream")
    elif case == "direct_on_regular":
        emit_direct(ctx["sink_tasks"][0], [n, n], "default")
    elif case == "lock_remote":
        emit_direct(ctx["remote"], [n, threading.Lock()], "dstream")
    elif case == "generator_remote":
        emit_direct(ctx["remote"], [n, (x for x in range(3))], "dstream")
    elif case == "lock_local":
        emit_direct(ctx["local"], [n, LOCAL_OBJECTS["lock"]], "dstream")
    else:
        raise AssertionError(f"unknown case {case}")


LOCAL_OBJECTS = {"lock": threading.Lock()}


def _context(context) -> dict:
    sink_tasks = context.get_component_tasks("sink")
    here = set(context.get_this_worker_tasks())
    ctx = {
        "sink_tasks": sink_tasks,
        "non_subscriber": context.get_component_tasks("feeder")[0],
        "local": next((t for t in sink_tasks if t in here), None),
        "remote": next((t for t in sink_tasks if t not in here), None),
    }
    record_prepared({"component": context.get_this_component_id(), "task": context.get_this_task_id(), **ctx})
    return ctx


class Emitter:
    @staticmethod
    def declare(declarer) -> None:
        declarer.declare(["a", "b"])
        declarer.declare_stream("dstream", ["a", "b"], direct=True)


class RichEmitter(Bolt):
    """Emits (anchored) as the input's "case" says, then acks; a bad emit raises out of execute."""

    def declare_output_fields(self, declarer) -> None:
        Emitter.declare(declarer)

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector
        self.ctx = _context(context)

    def execute(self, tup) -> None:
        c = self.collector
        _do(tup["case"], tup["n"],
            lambda values, stream="default": c.emit(values, anchors=tup, stream=stream),
            lambda task, values, stream: c.emit_direct(task, values, anchors=tup, stream=stream),
            self.ctx)
        c.ack(tup)


class BasicEmitter(BasicBolt):
    def declare_output_fields(self, declarer) -> None:
        Emitter.declare(declarer)

    def prepare(self, conf, context) -> None:
        self.ctx = _context(context)

    def execute(self, tup, collector) -> None:
        _do(tup["case"], tup["n"],
            lambda values, stream="default": collector.emit(values, stream=stream),
            lambda task, values, stream: collector.emit_direct(task, values, stream=stream),
            self.ctx)


def submit_emitter(cluster, name: str, kind: str, workers: int = 1) -> FeederSpout:
    """feeder -> "bad" (a RichEmitter or a BasicEmitter) -> "sink" (2 tasks), submitted."""
    feeder, b = feeder_builder(["case", "n"], "feeder")
    b.set_bolt("bad", RichEmitter() if kind == "rich" else BasicEmitter()).shuffle_grouping("feeder")
    b.set_bolt("sink", Recorder(), 2).shuffle_grouping("bad").direct_grouping("bad", "dstream")
    cluster.submit_topology(name, Config().set_num_workers(workers), b.create_topology())
    return feeder


def good_bad_good(feeder: FeederSpout, good_case: str, bad_case: str, ns) -> float:
    """Feed a good tuple ("first"), a bad one ("bad") and a good one ("after"), whose "n" are
    ``ns``, each waited for; check that only the bad one failed; return the time just before
    it was fed."""
    first, bad, after = ns
    feed_and_wait(feeder, [good_case, first], "first")
    before = time.time()
    feed_and_wait(feeder, [bad_case, bad], "bad", "failed")
    feed_and_wait(feeder, [good_case, after], "after")
    assert feeder.acked == ["first", "after"]
    assert feeder.failed == ["bad"]
    return before


def check_error(cluster, name: str, component: str, before: float, *words: object) -> dict:
    errors = errors_of(cluster, name, component)
    assert len(errors) == 1, errors
    err = errors[0]
    assert set(err) >= {"error", "task", "time"}
    assert isinstance(err["error"], str)
    assert err["task"] == tasks_of(cluster, name, component)[0]
    assert isinstance(err["time"], float) and before <= err["time"] <= time.time()
    msg = message_of(err)
    for w in words:
        assert has_word(msg, w), f"error should name {w!r}: {msg!r}"
    return err


# ---------------------------------------------------------------------------------------
# Bad emits (one worker)
# ---------------------------------------------------------------------------------------

BAD_EMITS = {
    # case -> words the error message must contain (besides the component)
    "undeclared_stream": ["no_such_stream_xyz"],
    "wrong_count": ["3", "2"],
    "regular_on_direct": ["dstream"],
    "direct_to_non_subscriber": ["<feeder task>", "dstream"],
    "direct_on_regular": ["default"],
}


@pytest.mark.parametrize("kind", ["rich", "basic"])
@pytest.mark.parametrize("case", sorted(BAD_EMITS))
def test_bad_emit_records_error_fails_input_and_executor_goes_on(cluster, case, kind):
    feeder = submit_emitter(cluster, "bad-emit", kind)
    before = good_bad_good(feeder, "ok", case, (1, 7, 2))
    feeder_task = tasks_of(cluster, "bad-emit", "feeder")[0]
    words = [feeder_task if w == "<feeder task>" else w for w in BAD_EMITS[case]]
    err = check_error(cluster, "bad-emit", "bad", before, *words)
    if case in ("regular_on_direct", "direct_on_regular"):
        assert "direct" in message_of(err)
    # nothing of the bad emit reached the sink; the good ones did
    assert sorted(r["values"][0] for r in received("sink")) == [1, 2]
    assert errors_of(cluster, "bad-emit", "sink") == []
    assert errors_of(cluster, "bad-emit", "feeder") == []


def test_several_bad_emits_each_recorded_and_the_bolt_keeps_going(cluster):
    feeder = submit_emitter(cluster, "bad-emits", "rich")
    cases = sorted(BAD_EMITS)
    for i, case in enumerate(cases):
        feeder.feed([case, 100 + i], msg_id=case)
        feeder.feed(["ok", i], msg_id=f"ok-{i}")
    wait_until(lambda: len(feeder.acked) + len(feeder.failed) == 2 * len(cases), timeout=5)
    assert sorted(feeder.failed) == cases
    assert sorted(feeder.acked) == sorted(f"ok-{i}" for i in range(len(cases)))
    errors = errors_of(cluster, "bad-emits", "bad")
    assert len(errors) == len(cases)
    assert [e["time"] for e in errors] == sorted(e["time"] for e in errors)
    assert sorted(r["values"][0] for r in received("sink")) == list(range(len(cases)))
    assert component_info(cluster, "bad-emits", "bad")["failed"] == len(cases)


# ---------------------------------------------------------------------------------------
# Serialization across workers
# ---------------------------------------------------------------------------------------


def two_worker_emitter(cluster, name: str, kind: str = "rich") -> FeederSpout:
    feeder = submit_emitter(cluster, name, kind, workers=2)
    ctx = prepared("bad")[0]
    assert ctx["local"] is not None and ctx["remote"] is not None, "sink must have a task in each worker"
    return feeder


@pytest.mark.parametrize("kind", ["rich", "basic"])
@pytest.mark.parametrize("case,type_name", [("lock_remote", "lock"), ("generator_remote", "generator")])
def test_unserializable_value_to_another_worker_is_an_emit_error(cluster, case, type_name, kind):
    feeder = two_worker_emitter(cluster, "unser", kind)
    remote = prepared("bad")[0]["remote"]
    before = good_bad_good(feeder, "ok_remote", case, (1, 2, 3))
    err = check_error(cluster, "unser", "bad", before)
    assert type_name in err["error"].lower(), err["error"]
    assert "serializ" in message_of(err).lower() or "pickle" in message_of(err).lower(), message_of(err)
    recs = received("sink")
    assert sorted(r["values"][0] for r in recs) == [1, 3]
    assert {r["task"] for r in recs} == {remote}
    assert errors_of(cluster, "unser", "sink") == []


def test_unserializable_value_within_one_worker_is_not_serialized(cluster):
    feeder = two_worker_emitter(cluster, "local-lock")
    local = prepared("bad")[0]["local"]
    feed_and_wait(feeder, ["lock_local", 5], "local")
    recs = received("sink")
    assert len(recs) == 1
    assert recs[0]["task"] == local
    # the very same object: nothing was copied
    assert recs[0]["values"][1] is LOCAL_OBJECTS["lock"]
    assert errors_of(cluster, "local-lock", "bad") == []


class Color(enum.IntEnum):
    RED = 1
    BLUE = 2


@dataclasses.dataclass
class Point:
    x: int
    y: object


class Opaque:
    """A plain class (no __eq__): compared by its __dict__."""

    def __init__(self, payload):
        self.payload = payload


Pair = collections.namedtuple("Pair", "left right")


def same(a, b) -> bool:
    """Equal, and of exactly the same types all the way down (dict keys included)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        if len(a) != len(b):
            return False
        b_keys = {k: k for k in b}
        for k, v in a.items():
            if k not in b_keys or not same(k, b_keys[k]) or not same(v, b[k]):
                return False
        return True
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, Opaque):
        return same(a.payload, b.payload)
    if isinstance(a, Point):
        return same(a.x, b.x) and same(a.y, b.y)
    return a == b


# Types that travel natively (msgpack and Squall's own extension types).
NATIVE_VALUES = {
    "tuple": (1, "two", 3.0),
    "empty-tuple": (),
    "tuple-in-list": [(1, 2), [3, (4,)]],
    "int-keys": {1: "one", 2: "two", -3: [3]},
    "tuple-keys": {(1, "a"): "x", (2, "b"): ("y",)},
    "bytes": b"\x00\xffbinary",
    "str": "ünïcødé",
    "big-int": 2**100,
    "big-negative-int": -(2**90) - 12345,
    "int64-edges": [2**63 - 1, -(2**63), 2**64 - 1, 2**64],
    "bool-not-int": [True, False, 1, 0],
    "float": [1.0, -0.0, float("inf"), 1e300],
    "none": None,
    "set": {1, 2, 3},
    "frozenset": frozenset({"a", "b"}),
    "set-in-tuple": ({(1, 2), frozenset({3})}, [{"x"}]),
    "nested": {"a": [1, (2, {3: b"x", 4: (5, [6, {"deep": (7,)}])})], "b": {"c": None, 9: 2**70}},
}
# Types that need topology.fall.back.on.java.serialization (cloudpickle).
PICKLED_VALUES = {
    "custom-class": Point(3, [Point(4, None)]),
    "plain-class": Opaque({"k": (1, b"v")}),
    "namedtuple": Pair(1, (2, 3)),
    "enum": Color.BLUE,
    "fraction": fractions.Fraction(1, 3),
    "in-a-list": [1, fractions.Fraction(2, 3)],
}


def submit_sinks_on_both_sides(cluster, name: str, conf: Config | None = None) -> tuple[FeederSpout, int, int]:
    """feeder -> "sink" (all grouping, 2 tasks) on two workers, submitted; returns the feeder,
    the sink task in the feeder's worker and the one in the other worker."""
    feeder, b = feeder_builder(["name", "value"], "feeder")
    b.set_bolt("sink", Recorder(), 2).all_grouping("feeder")
    cluster.submit_topology(name, (conf or Config()).set_num_workers(2), b.create_topology())
    feeder_task = tasks_of(cluster, name, "feeder")[0]
    sinks = prepared("sink")
    remote = [p["task"] for p in sinks if feeder_task not in p["worker_tasks"]]
    local = [p["task"] for p in sinks if feeder_task in p["worker_tasks"]]
    assert len(remote) == 1 and len(local) == 1, sinks
    return feeder, local[0], remote[0]


def test_unserializable_value_emitted_by_a_spout_is_recorded_for_the_spout(cluster):
    feeder, _, _ = submit_sinks_on_both_sides(cluster, "spout-unser")  # one sink task is in the other worker
    before = time.time()
    feeder.feed(["lock", threading.Lock()], msg_id="lock")
    wait_until(lambda: errors_of(cluster, "spout-unser", "feeder"), timeout=5)
    feed_and_wait(feeder, ["fine", 1], "fine")
    err = check_error(cluster, "spout-unser", "feeder", before)
    assert "lock" in err["error"].lower()
    assert "'default'" in err["error"]  # the stream is named
    # the emit failed as a whole: no sink task, in either worker, got the tuple
    assert not any(r["values"][0] == "lock" for r in received("sink"))
    # exactly one fail for the message id whose emit raised, never an ack
    wait_for(feeder, "lock", "failed")
    assert feeder.failed.count("lock") == 1 and "lock" not in feeder.acked


@pytest.mark.parametrize("fallback", [False, True], ids=["native", "pickle-fallback"])
def test_values_crossing_workers_keep_their_types(cluster, fallback):
    """Native types cross as they are; the others too when the pickle fallback is on."""
    values = {**NATIVE_VALUES, **PICKLED_VALUES} if fallback else NATIVE_VALUES
    conf = Config().set_fall_back_on_java_serialization(fallback)
    feeder, local, remote = submit_sinks_on_both_sides(cluster, "types", conf)

    for name, value in values.items():
        feeder.feed([name, value], msg_id=name)
    wait_until(lambda: len(feeder.acked) + len(feeder.failed) == len(values), timeout=5)
    assert feeder.failed == []
    assert errors_of(cluster, "types", "feeder") == []

    got = {(r["task"], r["values"][0]): r["values"][1] for r in received("sink")}
    assert len(got) == 2 * len(values)
    wrong = []
    for name, value in values.items():
        crossed = got[(remote, name)]
        if not same(value, crossed):
            wrong.append(f"{name}: sent {value!r} ({type(value).__name__}), got {crossed!r} "
                         f"({type(crossed).__name__})")
        # within the emitter's worker the value is not copied at all
        assert got[(local, name)] is value, name
    assert not wrong, "\n".join(wrong)


def test_value_needing_the_pickle_fallback_fails_its_emit_when_it_is_off(cluster):
    """Off by default: each such value fails its tuple, with an error naming component,
    stream and type; nothing reaches either sink task, and the topology goes on."""
    feeder, _, _ = submit_sinks_on_both_sides(cluster, "no-pickle")
    for name, value in PICKLED_VALUES.items():
        feeder.feed([name, value], msg_id=name)
    feed_and_wait(feeder, ["fine", 1], "fine")
    wait_until(lambda: len(feeder.failed) == len(PICKLED_VALUES), timeout=5)
    assert sorted(feeder.failed) == sorted(PICKLED_VALUES) and feeder.acked == ["fine"]
    assert {r["values"][0] for r in received("sink")} == {"fine"}
    errors = [e["error"] for e in errors_of(cluster, "no-pickle", "feeder")]
    assert len(errors) == len(PICKLED_VALUES)
    for type_name in ("Point", "Opaque", "Pair", "Color", "fractions.Fraction"):
        error = next((e for e in errors if type_name in e), None)
        assert error is not None, (type_name, errors)
        assert "component 'feeder', stream 'default'" in error
        assert "topology.fall.back.on.java.serialization" in error


def test_pickle_fallback_needs_secure_links(cluster):
    conf = Config().set_fall_back_on_java_serialization(True).set_messaging_secure(False)
    with pytest.raises(ValueError, match="topology.fall.back.on.java.serialization.*topology.messaging.secure"):
        cluster.submit_topology("insecure-pickle", conf, feeder_builder()[1].create_topology())


def test_bytearray_arrives_as_bytes_across_workers(cluster):
    feeder, _, remote = submit_sinks_on_both_sides(cluster, "bytearray")
    feed_and_wait(feeder, ["ba", bytearray(b"mutable")], 1)
    crossed = next(r["values"][1] for r in received("sink") if r["task"] == remote)
    # documented in squall/runtime/serialization.py: msgpack packs bytearray natively, as bin
    assert crossed == b"mutable"
    assert type(crossed) is bytes, f"got {type(crossed).__name__}"


# ---------------------------------------------------------------------------------------
# Errors from user code
# ---------------------------------------------------------------------------------------


class Exploder(Bolt):
    """Raises ValueError(<message>) for inputs whose "case" is "boom"; acks the others."""

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector
        self.task = context.get_this_task_id()

    def execute(self, tup) -> None:
        if tup["case"] == "boom":
            record_received({"component": "boom", "task": self.task, "n": tup["n"]})
            raise ValueError(f"kaboom-{tup['n']}")
        if tup["case"] == "report":
            self.collector.report_error(RuntimeError(f"reported-{tup['n']}"))
        record_received({"component": "exploder", "values": list(tup.values)})
        self.collector.ack(tup)


def submit_exploders(cluster, name: str, *components: str, num_tasks: int | None = None) -> FeederSpout:
    """feeder -> an Exploder (one executor; ``num_tasks`` tasks) per component, submitted."""
    feeder, b = feeder_builder(["case", "n"], "feeder")
    for component in components:
        declarer = b.set_bolt(component, Exploder(), 1)
        if num_tasks is not None:
            declarer.set_num_tasks(num_tasks)
        declarer.shuffle_grouping("feeder")
    cluster.submit_topology(name, Config(), b.create_topology())
    return feeder


def test_exception_from_execute_records_traceback_fails_input_and_goes_on(cluster):
    feeder = submit_exploders(cluster, "explode", "exploder")
    before = time.time()
    feed_and_wait(feeder, ["boom", 42], "boom", "failed")
    feed_and_wait(feeder, ["ok", 1], "ok")

    err = check_error(cluster, "explode", "exploder", before, "kaboom-42")
    assert "ValueError" in err["error"]
    assert "execute" in err["error"]  # the traceback's frames are there
    assert received("exploder") == [{"component": "exploder", "values": ["ok", 1]}]
    assert feeder.failed == ["boom"] and feeder.acked == ["ok"]
    stats = component_info(cluster, "explode", "exploder")
    assert stats["failed"] == 1 and stats["acked"] == 1


def test_report_error_records_without_failing(cluster):
    feeder = submit_exploders(cluster, "report", "exploder")
    before = time.time()
    feed_and_wait(feeder, ["report", 5], "r")
    check_error(cluster, "report", "exploder", before, "reported-5")
    assert feeder.failed == []


def test_only_the_last_ten_errors_per_component_are_kept(cluster):
    feeder = submit_exploders(cluster, "ten", "exploder", "other")
    for i in range(15):
        feeder.feed(["boom", i], msg_id=i)
    wait_until(lambda: len(feeder.failed) == 15, timeout=5)
    feed_and_wait(feeder, ["ok", 99], "ok")

    for component in ("exploder", "other"):
        errors = errors_of(cluster, "ten", component)
        assert len(errors) == 10, component
        # the last ten, oldest first
        for err, i in zip(errors, range(5, 15)):
            assert has_word(message_of(err), f"kaboom-{i}"), (i, message_of(err))
        assert [e["time"] for e in errors] == sorted(e["time"] for e in errors)
        assert all(e["task"] == tasks_of(cluster, "ten", component)[0] for e in errors)
    assert errors_of(cluster, "ten", "feeder") == []
    assert sorted(feeder.failed) == list(range(15))


def test_error_names_the_task_that_raised_in_a_multi_task_executor(cluster):
    feeder = submit_exploders(cluster, "multi", "exploder", num_tasks=3)  # one executor running three tasks
    executors = executors_of(cluster, "multi", "exploder")
    assert len(executors) == 1 and len(executors[0]["tasks"]) == 3

    for i in range(6):
        feeder.feed(["boom", i], msg_id=i)
    wait_until(lambda: len(feeder.failed) == 6, timeout=5)
    feed_and_wait(feeder, ["ok", 6], "ok")
    raised_by = {r["n"]: r["task"] for r in received("boom")}
    assert len(set(raised_by.values())) == 3  # shuffle reached every task
    errors = errors_of(cluster, "multi", "exploder")
    assert len(errors) == 6
    for err in errors:
        n = int(re.search(r"kaboom-(\d+)", message_of(err)).group(1))
        assert err["task"] == raised_by[n], (n, err["task"], raised_by)


class PickyBasic(BasicBolt):
    outputs = ["n"]

    def execute(self, tup, collector) -> None:
        if tup["case"] == "fail":
            raise FailedException(f"declined-{tup['n']}")
        if tup["case"] == "boom":
            raise RuntimeError(f"basic-boom-{tup['n']}")
        collector.emit([tup["n"]])


def test_basic_bolt_failed_exception_fails_without_an_error(cluster):
    feeder, b = feeder_builder(["case", "n"], "feeder")
    b.set_bolt("picky", PickyBasic()).shuffle_grouping("feeder")
    b.set_bolt("sink", Recorder()).shuffle_grouping("picky")
    cluster.submit_topology("picky", Config(), b.create_topology())

    feed_and_wait(feeder, ["fail", 1], "declined", "failed")
    feed_and_wait(feeder, ["ok", 2], "ok")
    assert errors_of(cluster, "picky", "picky") == []
    assert [r["values"] for r in received("sink")] == [[2]]

    # any other exception: failed and recorded
    before = time.time()
    feed_and_wait(feeder, ["boom", 3], "boom", "failed")
    feed_and_wait(feeder, ["ok", 4], "ok2")
    check_error(cluster, "picky", "picky", before, "basic-boom-3")
    assert feeder.failed == ["declined", "boom"]
    assert feeder.acked == ["ok", "ok2"]
    assert [r["values"] for r in received("sink")] == [[2], [4]]


class FlakySpout(Spout):
    """Emits 0..9 (one per call); raises on the call that would emit 3, and emits 5 on an
    undeclared stream first; always goes on."""

    outputs = ["n"]

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        self.i = 0
        self.raised = False
        self.bad_stream_done = False

    def next_tuple(self) -> None:
        if self.i >= 10:
            return
        if self.i == 3 and not self.raised:
            self.raised = True
            raise RuntimeError("spout-hiccup")
        if self.i == 5 and not self.bad_stream_done:
            self.bad_stream_done = True
            self.collector.emit([self.i], stream="nowhere_stream")
        self.collector.emit([self.i], msg_id=self.i)
        self.i += 1


def test_spout_errors_are_recorded_and_the_spout_goes_on(cluster):
    b = TopologyBuilder()
    b.set_spout("flaky", FlakySpout())
    b.set_bolt("sink", Recorder()).shuffle_grouping("flaky")
    before = time.time()
    cluster.submit_topology("flaky", Config(), b.create_topology())
    wait_until(lambda: len(received("sink")) == 10, timeout=5)
    assert sorted(r["values"][0] for r in received("sink")) == list(range(10))
    errors = errors_of(cluster, "flaky", "flaky")
    assert len(errors) == 2
    assert has_word(message_of(errors[0]), "spout-hiccup")
    assert has_word(message_of(errors[1]), "nowhere_stream")
    task = tasks_of(cluster, "flaky", "flaky")[0]
    assert all(e["task"] == task and before <= e["time"] <= time.time() for e in errors)


class Celsius:
    def __init__(self, degrees):
        self.degrees = degrees


class CelsiusSerializer:
    def serialize(self, obj):
        return str(obj.degrees).encode()

    def deserialize(self, data):
        return Celsius(float(data) + 0.5)  # the +0.5 shows this path ran, not cloudpickle


def test_registered_serializer_is_used_across_workers(cluster):
    feeder, b = feeder_builder(["name", "value"], spout_id="feeder")
    b.set_bolt("sink", Recorder(), 2).all_grouping("feeder")
    conf = Config().set_num_workers(2).register_serialization(Celsius, CelsiusSerializer)
    cluster.submit_topology("registered", conf, b.create_topology())
    feeder_task = tasks_of(cluster, "registered", "feeder")[0]
    remote = next(p["task"] for p in prepared("sink") if feeder_task not in p["worker_tasks"])
    local = next(p["task"] for p in prepared("sink") if feeder_task in p["worker_tasks"])
    feeder.feed(["t", Celsius(20.0)], msg_id=1)
    wait_for(feeder, 1, "acked")
    by_task = {r["task"]: r["values"][1] for r in received("sink")}
    assert by_task[remote].degrees == 20.5  # serialized by the registered serializer
    assert by_task[local].degrees == 20.0  # same worker: not serialized at all


def test_register_serialization_rejects_a_serializer_without_the_methods():
    with pytest.raises(ValueError, match="deserialize"):
        Config().register_serialization(Celsius, type("Half", (), {"serialize": lambda self, o: b""}))
