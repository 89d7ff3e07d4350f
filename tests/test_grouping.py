"""Stream groupings, observed end to end on running topologies.

Every grouping is checked by what the subscribing bolt's tasks actually receive: bolts
(``helpers.Recorder``) record each input (their task, worker, the tuple's source) in the
module-level stores of ``helpers``. The components are cloudpickled at ``create_topology``;
classes defined at module level are pickled by reference, so the copies running in the
(in-process) workers share those stores.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import textwrap
import time
import zlib

import pytest

from helpers import (
    Recorder, Relay, errors_of, feeder_builder, logged, prepared, received, record, record_prepared,
    tasks_of, where,
)
from squall import BasicBolt, Bolt, Config, CustomStreamGrouping, Fields, GlobalStreamId, Spout, TopologyBuilder
from squall.runtime.grouping import FieldsGrouper, stable_key_bytes
from squall.testing import complete_topology, wait_until

# ---------------------------------------------------------------------------------------
# What is recorded (in the stores of ``helpers``, reset before every test): ``received``
# and ``prepared`` (Recorder tasks, and ListSpout tasks: where they run), "emits" (one entry
# per ListSpout emit: the values and the task ids emit returned) and "grouping-calls"
# (CustomStreamGrouping.prepare / choose_tasks calls)
# ---------------------------------------------------------------------------------------


def tasks_by_value(records: list[dict], index: int = 0) -> dict:
    """value at ``index`` -> set of receiving tasks."""
    out: dict = collections.defaultdict(set)
    for r in records:
        out[_hashable(r["values"][index])].add(r["task"])
    return out


def _hashable(v):
    if isinstance(v, list):
        return tuple(_hashable(x) for x in v)
    return v


# ---------------------------------------------------------------------------------------
# Components
# ---------------------------------------------------------------------------------------


class Src(Spout):
    """A placeholder spout, replaced by mocked_sources in complete_topology."""

    outputs = ["v"]


class Src2(Spout):
    outputs = ["key", "n"]


class Src3(Spout):
    outputs = ["user", "day", "n"]


class ListSpout(Spout):
    """Emits its rows (split over its tasks as a mocked spout does), each with a message id,
    and records the task ids each emit returned."""

    def __init__(self, rows: list[list], fields: list[str] = ("v",)) -> None:
        self.rows = [list(r) for r in rows]
        self.fields = list(fields)

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(self.fields)

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        self.task = context.get_this_task_id()
        mine = context.get_component_tasks(context.get_this_component_id())
        index = mine.index(self.task)
        self.todo = collections.deque(self.rows[index::len(mine)])
        self.next_id = 0
        record_prepared(where(context))

    def next_tuple(self) -> None:
        if self.todo:
            values = self.todo.popleft()
            tasks = self.collector.emit(values, msg_id=self.next_id)
            self.next_id += 1
            record("emits", {"task": self.task, "values": values, "targets": list(tasks)})

    def is_exhausted(self) -> bool:
        return not self.todo


def run(builder: TopologyBuilder, mocked=None, workers: int = 1):
    conf = Config().set_num_workers(workers)
    return complete_topology(builder.create_topology(), mocked_sources=mocked, conf=conf, timeout_secs=20)


def run_keyed(grouping: str, rows: list[list], spouts: int = 1, tasks: int = 4, workers: int = 1) -> list[dict]:
    """Run "src" (Src2, mocked with ``rows``, ``spouts`` tasks) -> "bolt" (a Recorder, ``tasks``
    tasks) by ``grouping`` ("fields" or "partial_key") on "key"; return what "bolt" received,
    after checking that it received every row once."""
    b = TopologyBuilder()
    b.set_spout("src", Src2(), spouts)
    getattr(b.set_bolt("bolt", Recorder(), tasks), f"{grouping}_grouping")("src", ["key"])
    run(b, {"src": rows}, workers=workers)
    recs = received("bolt")
    assert len(recs) == len(rows)
    return recs


# ---------------------------------------------------------------------------------------
# shuffle
# ---------------------------------------------------------------------------------------


def test_shuffle_round_robin_gives_each_task_an_equal_share():
    n = 60
    b = TopologyBuilder()
    b.set_spout("src", Src())
    b.set_bolt("three", Recorder(), 3).shuffle_grouping("src")
    b.set_bolt("seven", Recorder(), 7).shuffle_grouping("src")
    run(b, {"src": [[i] for i in range(n)]})

    for component, k in (("three", 3), ("seven", 7)):
        recs = received(component)
        by_value = tasks_by_value(recs)
        assert sorted(by_value) == list(range(n)), f"{component}: every tuple delivered once"
        assert all(len(ts) == 1 for ts in by_value.values())
        assert len(recs) == n, f"{component}: each tuple goes to exactly one task"
        counts = collections.Counter(r["task"] for r in recs)
        all_tasks = {p["task"] for p in prepared(component)}
        assert len(all_tasks) == k
        assert set(counts) == all_tasks, f"{component}: every task gets tuples"
        if n % k == 0:
            assert set(counts.values()) == {n // k}, counts
        else:
            assert set(counts.values()) <= {n // k, n // k + 1}, counts

        # Storm's algorithm: round-robin over a shuffled list, so any k consecutive tuples
        # of one emitter reach k different tasks, and the sequence repeats with period k.
        seq = [next(iter(by_value[i])) for i in range(n)]
        for i in range(n - k + 1):
            assert len(set(seq[i:i + k])) == k, f"{component}: window {i} is not a permutation: {seq[i:i + k]}"
        assert all(seq[i] == seq[i + k] for i in range(n - k))


class SlowFirstTask(Bolt):
    """Records its task for every input; its first task takes 2 ms per tuple."""

    outputs = ["v"]

    def prepare(self, conf, context, collector) -> None:
        self.task = context.get_this_task_id()
        self.slow = context.get_this_task_index() == 0
        self.collector = collector
        record_prepared(where(context))

    def execute(self, tup) -> None:
        if self.slow:
            time.sleep(0.002)  # the slow task under test: its pace is the point
        record("worked", self.task)
        self.collector.ack(tup)


class PacedSpout(Spout):
    """Emits [0] .. [n - 1], 20 per next_tuple call then a 1 ms pause: slower than a bolt that
    does nothing, faster than SlowFirstTask's slow task."""

    outputs = ["v"]

    def __init__(self, n: int) -> None:
        self.n = n

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        self.i = 0

    def next_tuple(self) -> None:
        for _ in range(min(20, self.n - self.i)):
            self.collector.emit([self.i], msg_id=self.i)
            self.i += 1
        time.sleep(0.001)  # the spout's own pace (see the docstring), not a wait

    def ack(self, msg_id) -> None:
        record("acked", msg_id)


@pytest.mark.parametrize("load_aware", [True, False], ids=["load-aware", "disabled"])
def test_load_aware_shuffle_sends_a_slow_task_fewer_tuples(cluster, load_aware):
    """Storm 2's default: a task whose queue fills up gets a small share, the others the
    rest; with topology.disable.loadaware.messaging, round-robin gives both the same share."""
    n = 4000
    b = TopologyBuilder()
    b.set_spout("src", PacedSpout(n))
    b.set_bolt("work", SlowFirstTask(), 2).set_blocking(True).shuffle_grouping("src")
    conf = Config()
    conf["topology.executor.receive.buffer.size"] = 256
    conf["topology.disable.loadaware.messaging"] = not load_aware
    cluster.submit_topology("paced", conf, b.create_topology())
    wait_until(lambda: len(logged("acked")) == n, timeout=30, message="every tuple acked")
    counts = collections.Counter(logged("worked"))
    slow = min(p["task"] for p in prepared("work"))
    assert sum(counts.values()) == n and sorted(logged("acked")) == list(range(n))  # each once, either way
    if load_aware:
        assert counts[slow] < n * 0.3, counts
    else:
        assert counts[slow] == n // 2, counts


def test_shuffle_from_several_emitters_each_round_robins():
    # two spout tasks, each emitting 30 tuples to 3 bolt tasks: each emitter sends exactly
    # 10 to every task, so every task gets exactly 20 in total, 10 from each emitter
    b = TopologyBuilder()
    b.set_spout("src", Src(), 2)
    b.set_bolt("bolt", Recorder(), 3).shuffle_grouping("src")
    run(b, {"src": [[i] for i in range(60)]}, workers=2)

    recs = received("bolt")
    assert sorted(r["values"][0] for r in recs) == list(range(60))
    per_pair = collections.Counter((r["source_task"], r["task"]) for r in recs)
    assert len({r["source_task"] for r in recs}) == 2
    assert len({r["task"] for r in recs}) == 3
    assert set(per_pair.values()) == {10}, per_pair


# ---------------------------------------------------------------------------------------
# fields
# ---------------------------------------------------------------------------------------

WORDS = [f"word{i}" for i in range(40)] + ["", "ünïcødé", "a b c", "x" * 200]


def test_fields_grouping_same_value_same_task_from_every_worker():
    # each word is emitted 4 times, twice by each of two spout tasks in different workers
    rows = [[w, i] for i in range(4) for w in WORDS]
    b = TopologyBuilder()
    b.set_spout("words", Src2(), 2)
    b.set_bolt("count", Recorder(), 4).fields_grouping("words", Fields("key"))
    run(b, {"words": rows}, workers=2)

    recs = received("count")
    assert len(recs) == len(rows)
    by_key = tasks_by_value(recs, 0)
    assert set(by_key) == set(WORDS)
    for word, tasks in by_key.items():
        assert len(tasks) == 1, f"{word!r} went to several tasks: {tasks}"
    # the emitters really were in different workers
    sources = {r["source_task"] for r in recs}
    assert len(sources) == 2
    ports = {p["port"] for p in prepared("count")}
    assert len(ports) == 2
    # the keys are spread over all four tasks
    counts = collections.Counter(next(iter(t)) for t in by_key.values())
    assert len(counts) == 4, counts
    assert max(counts.values()) < len(WORDS) // 2, counts


def test_fields_grouping_on_several_fields():
    users, days = ["ann", "bob", "cid", "dee", "eve"], ["mon", "tue", "wed", "thu", "fri", "sat"]
    rows = [[u, d, n] for n in range(3) for u in users for d in days]
    b = TopologyBuilder()
    b.set_spout("src", Src3())
    # fields listed in another order than declared, the non-key field "n" in between
    b.set_bolt("bolt", Recorder(), 4).fields_grouping("src", ["day", "user"])
    run(b, {"src": rows})

    recs = received("bolt")
    assert len(recs) == len(rows)
    by_key: dict = collections.defaultdict(set)
    for r in recs:
        by_key[(r["values"][0], r["values"][1])].add(r["task"])
    assert len(by_key) == len(users) * len(days)
    for key, tasks in by_key.items():
        assert len(tasks) == 1, f"{key} went to {tasks}"
    # the key is the pair: one user's tuples go to several tasks depending on the day
    per_user = collections.defaultdict(set)
    for (u, _d), tasks in by_key.items():
        per_user[u] |= tasks
    assert any(len(t) > 1 for t in per_user.values()), per_user
    assert len({t for ts in by_key.values() for t in ts}) == 4


_HASH_SCRIPT = textwrap.dedent(
    """
    import json, sys, zlib
    from squall import Bolt, Config, Fields, Spout, TopologyBuilder
    from squall.runtime.grouping import FieldsGrouper, stable_key_bytes
    from squall.testing import complete_topology, read_tuples

    keys = json.loads(sys.argv[1])
    targets = json.loads(sys.argv[2])
    keys = [tuple(k) if isinstance(k, list) else k for k in keys]
    out = {"crc": [], "grouper": [], "topology": {}}
    for k in keys:
        out["crc"].append(zlib.crc32(stable_key_bytes([k, "fixed"])))
        out["grouper"].append(FieldsGrouper(targets, Fields("k", "x"), Fields("k")).choose([k, None])[0])

    class S(Spout):
        outputs = ["k"]

    class B(Bolt):
        outputs = ["task", "k"]
        def prepare(self, conf, context, collector):
            self.c, self.t = collector, context.get_this_task_id()
        def execute(self, tup):
            self.c.emit([self.t, tup[0]], anchors=tup)
            self.c.ack(tup)

    b = TopologyBuilder()
    b.set_spout("s", S(), 2)
    b.set_bolt("b", B(), 4).fields_grouping("s", ["k"])
    words = [k for k in keys if isinstance(k, str)]
    res = complete_topology(b.create_topology(), {"s": [[w] for w in words * 2]},
                            conf=Config().set_num_workers(2))
    for task, k in read_tuples(res, "b"):
        out["topology"].setdefault(k, []).append(task)
    out["topology"] = {k: sorted(set(v)) for k, v in out["topology"].items()}
    print(json.dumps(out))
    """
)


def _hash_in_subprocess(seed: str, keys: list, targets: list[int]) -> dict:
    env = dict(os.environ, PYTHONHASHSEED=seed)
    proc = subprocess.run(
        [sys.executable, "-c", _HASH_SCRIPT, json.dumps(keys), json.dumps(targets)],
        env=env, capture_output=True, text=True, timeout=30, cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_fields_hash_is_the_same_in_every_process():
    keys = ["apple", "banana", "cherry", "", "ünïcødé", "hash-randomized-string", 42, -7, 3.5, None,
            ["tup", 1]]
    targets = [3, 5, 7, 9]
    results = [_hash_in_subprocess(seed, keys, targets) for seed in ("0", "1", "12345")]
    # string hashes differ between those seeds, so anything built on hash() would differ
    for r in results[1:]:
        assert r == results[0]
    here_keys = [tuple(k) if isinstance(k, list) else k for k in keys]
    assert results[0]["crc"] == [zlib.crc32(stable_key_bytes([k, "fixed"])) for k in here_keys]
    assert results[0]["grouper"] == [
        FieldsGrouper(targets, Fields("k", "x"), Fields("k")).choose([k, None])[0] for k in here_keys
    ]
    # a topology run in each process put each word on one task, the same in every process
    topo = results[0]["topology"]
    assert set(topo) == {k for k in keys if isinstance(k, str)}
    assert all(len(v) == 1 for v in topo.values())
    assert len({v[0] for v in topo.values()}) > 1


def test_running_topology_uses_the_process_independent_hash():
    # the task a key lands on in this process equals what another process computes
    b = TopologyBuilder()
    b.set_spout("words", Src2())
    b.set_bolt("count", Recorder(), 4).fields_grouping("words", ["key"])
    run(b, {"words": [[w, 0] for w in WORDS[:12]]})
    here = {k: sorted(v) for k, v in tasks_by_value(received("count"), 0).items()}
    targets = sorted(p["task"] for p in prepared("count"))
    env = dict(os.environ, PYTHONHASHSEED="777")
    script = (
        "import json, sys\n"
        "from squall import Fields\n"
        "from squall.runtime.grouping import FieldsGrouper\n"
        "keys, targets = json.loads(sys.argv[1]), json.loads(sys.argv[2])\n"
        "g = FieldsGrouper(targets, Fields('key', 'n'), Fields('key'))\n"
        "print(json.dumps({k: g.choose([k, 0]) for k in keys}))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(WORDS[:12]), json.dumps(targets)],
                          env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert here == json.loads(proc.stdout)


def test_equal_keys_of_different_types_land_on_the_same_task():
    # three spout tasks (over two workers): the first emits ints, the second floats, the
    # third bools (or ints): each emitter has its own grouper, so no cache can hide a difference
    keys = [0, 1, 2, 7, -3, 100, 2**40]
    rows = []
    for k in keys:
        rows += [[int(k), 0], [float(k), 1], [bool(k) if k in (0, 1) else int(k), 2]]
    recs = run_keyed("fields", rows, spouts=3, tasks=5, workers=2)
    assert len({r["source_task"] for r in recs}) == 3
    by_number: dict = collections.defaultdict(set)
    types_seen = collections.defaultdict(set)
    for r in recs:
        by_number[r["values"][0]].add(r["task"])  # 1 == 1.0 == True: one dict entry
        types_seen[r["values"][0]].add(type(r["values"][0]).__name__)
    assert set(by_number) == set(keys)
    for k, tasks in by_number.items():
        assert len(tasks) == 1, f"key {k} (as {sorted(types_seen[k])}) went to tasks {tasks}"
    assert types_seen[1] == {"int", "float", "bool"}
    # and the same for the hashing itself
    for k in (0, 1):
        assert stable_key_bytes([k]) == stable_key_bytes([float(k)]) == stable_key_bytes([bool(k)])
    assert stable_key_bytes([7]) == stable_key_bytes([7.0])


def _fresh_choice(value, targets=(1, 2, 3, 4, 5, 6, 7)) -> int:
    """The task a new emitter's fields grouper picks for ``value``."""
    return FieldsGrouper(list(targets), Fields("k"), Fields("k")).choose([value])[0]


@pytest.mark.parametrize("a,b", [
    ((1, "a"), (1.0, "a")),
    ([True, 2], [1, 2.0]),
    ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
    ({"k": (1, 2)}, {"k": (1.0, 2.0)}),
], ids=["tuple-int-float", "list-bool-int-float", "dict-order", "nested"])
def test_equal_container_keys_land_on_the_same_task(a, b):
    assert a == b
    # different emitters (each has its own grouper) must agree, so use a fresh one for each
    assert _fresh_choice(a) == _fresh_choice(b), f"{a!r} and {b!r} are equal keys"


def test_fields_grouping_on_big_numbers(cluster):
    # ints beyond 64 bits and integral floats beyond 64 bits are ordinary Python keys
    keys = [2**64, 2**70, -(2**63) - 1, 10**30, 1e20]
    feeder, b = feeder_builder(["key", "n"], "feeder")
    b.set_bolt("bolt", Recorder(), 4).fields_grouping("feeder", ["key"])
    cluster.submit_topology("big-keys", Config(), b.create_topology())
    ids = []
    for rep in range(2):
        for i, k in enumerate(keys):
            feeder.feed([k, rep], msg_id=(rep, i))
            ids.append((rep, i))

    def settled():
        return errors_of(cluster, "big-keys", "feeder") or len(feeder.acked) + len(feeder.failed) == len(ids)

    wait_until(settled, timeout=5)
    errors = errors_of(cluster, "big-keys", "feeder")
    assert errors == [], errors[0]["error"].strip().splitlines()[-1]
    assert sorted(feeder.acked) == sorted(ids)
    by_key = tasks_by_value(received("bolt"), 0)
    assert set(by_key) == set(keys)
    assert all(len(t) == 1 for t in by_key.values())


# ---------------------------------------------------------------------------------------
# all, global, none
# ---------------------------------------------------------------------------------------


def test_all_grouping_every_task_gets_every_tuple():
    n = 25
    b = TopologyBuilder()
    b.set_spout("src", ListSpout([[i] for i in range(n)]))
    b.set_bolt("bolt", Recorder(), 4).all_grouping("src")
    run(b, workers=2)

    bolt_tasks = sorted(p["task"] for p in prepared("bolt"))
    assert len(bolt_tasks) == 4
    per_task = collections.defaultdict(list)
    for r in received("bolt"):
        per_task[r["task"]].append(r["values"][0])
    assert sorted(per_task) == bolt_tasks
    for task, values in per_task.items():
        assert sorted(values) == list(range(n)), f"task {task}"
    # emit returns every receiving task
    emits = logged("emits")
    assert len(emits) == n
    assert all(sorted(e["targets"]) == bolt_tasks for e in emits)


def test_global_grouping_goes_to_the_lowest_task_only():
    b = TopologyBuilder()
    b.set_spout("src", Src(), 2)
    b.set_bolt("bolt", Recorder(), 3).set_num_tasks(5).global_grouping("src")
    run(b, {"src": [[i] for i in range(40)]}, workers=2)

    bolt_tasks = sorted(p["task"] for p in prepared("bolt"))
    assert len(bolt_tasks) == 5
    recs = received("bolt")
    assert sorted(r["values"][0] for r in recs) == list(range(40))
    assert {r["task"] for r in recs} == {bolt_tasks[0]}
    assert len({r["source_task"] for r in recs}) == 2  # from both emitters


def test_none_grouping_sends_each_tuple_to_one_task():
    n = 90
    b = TopologyBuilder()
    b.set_spout("src", ListSpout([[i] for i in range(n)]))
    b.set_bolt("bolt", Recorder(), 3).none_grouping("src")
    run(b)

    recs = received("bolt")
    assert sorted(r["values"][0] for r in recs) == list(range(n))  # each exactly once
    counts = collections.Counter(r["task"] for r in recs)
    assert set(counts) == {p["task"] for p in prepared("bolt")}, counts  # spread over all tasks
    assert all(len(e["targets"]) == 1 for e in logged("emits"))


# ---------------------------------------------------------------------------------------
# direct
# ---------------------------------------------------------------------------------------


class DirectSpout(Spout):
    """Emits ``n`` tuples on direct stream "to", to the sink's tasks but the lowest, in
    reverse order, and the same count on the (regular) default stream."""

    def __init__(self, n: int) -> None:
        self.n = n

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(["i"])
        declarer.declare_stream("to", ["target", "i"], direct=True)

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        self.pattern = list(reversed(context.get_component_tasks("dsink")[1:]))
        self.i = 0

    def next_tuple(self) -> None:
        if self.i < self.n:
            target = self.pattern[self.i % len(self.pattern)]
            self.collector.emit_direct(target, [target, self.i], stream="to", msg_id=("to", self.i))
            self.collector.emit([self.i], msg_id=("default", self.i))
            self.i += 1

    def is_exhausted(self) -> bool:
        return self.i >= self.n


class DirectRelay(Bolt):
    """Sends each input straight to one task of "dsink2", chosen from the value."""

    def declare_output_fields(self, declarer) -> None:
        declarer.declare_stream("back", ["target", "i"], direct=True)

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector
        self.targets = context.get_component_tasks("dsink2")

    def execute(self, tup) -> None:
        target = self.targets[tup[0] % len(self.targets)]
        self.collector.emit_direct(target, [target, tup[0]], anchors=tup, stream="back")
        self.collector.ack(tup)


class BasicDirectRelay(BasicBolt):
    def declare_output_fields(self, declarer) -> None:
        declarer.declare_stream("back", ["target", "i"], direct=True)

    def prepare(self, conf, context) -> None:
        self.targets = context.get_component_tasks("dsink2")

    def execute(self, tup, collector) -> None:
        target = self.targets[-1 - tup[0] % len(self.targets)]
        collector.emit_direct(target, [target, tup[0]], stream="back")


def test_direct_grouping_reaches_exactly_the_chosen_task():
    n = 30
    b = TopologyBuilder()
    b.set_spout("src", DirectSpout(n))
    b.set_bolt("dsink", Recorder(), 4).direct_grouping("src", "to")
    b.set_bolt("relay", DirectRelay(), 2).shuffle_grouping("src")
    b.set_bolt("brelay", BasicDirectRelay(), 2).shuffle_grouping("src")
    b.set_bolt("dsink2", Recorder(), 3).direct_grouping("relay", "back").direct_grouping("brelay", "back")
    run(b, workers=2)

    sink_tasks = sorted(p["task"] for p in prepared("dsink"))
    recs = received("dsink")
    assert len(recs) == n
    assert sorted(r["values"][1] for r in recs) == list(range(n))  # each exactly once
    for r in recs:
        assert r["stream"] == "to" and r["fields"] == ["target", "i"]
        assert r["task"] == r["values"][0], r
    assert sink_tasks[0] not in {r["task"] for r in recs}  # the task nobody chose got nothing
    assert {r["task"] for r in recs} == set(sink_tasks[1:])

    recs2 = received("dsink2")
    assert len(recs2) == 2 * n
    for r in recs2:
        assert r["task"] == r["values"][0], r
    for relay in ("relay", "brelay"):
        got = sorted(r["values"][1] for r in recs2 if r["source_component"] == relay)
        assert got == list(range(n)), relay


# ---------------------------------------------------------------------------------------
# local or shuffle
# ---------------------------------------------------------------------------------------


def test_local_or_shuffle_prefers_tasks_in_the_same_worker():
    # 2 workers; 4 bolt tasks (2 per worker) and 2 spout tasks (1 per worker)
    n = 80
    b = TopologyBuilder()
    b.set_spout("src", ListSpout([[i] for i in range(n)]), 2)
    b.set_bolt("bolt", Recorder(), 4).local_or_shuffle_grouping("src")
    run(b, workers=2)

    bolts = prepared("bolt")
    spouts = prepared("src")
    assert len({p["port"] for p in bolts}) == 2, "the bolt must have tasks in both workers"
    assert len({p["port"] for p in spouts}) == 2, "the spout must have tasks in both workers"
    recs = received("bolt")
    assert sorted(r["values"][0] for r in recs) == list(range(n))
    for r in recs:
        assert r["source_task"] in r["worker_tasks"], f"task {r['task']} got a tuple from another worker: {r}"
    # and among the local tasks it is a shuffle: each emitter's 40 tuples split 20/20
    per_pair = collections.Counter((r["source_task"], r["task"]) for r in recs)
    assert len(per_pair) == 4
    assert set(per_pair.values()) == {20}, per_pair
    for e in logged("emits"):
        spout_port = next(p["port"] for p in spouts if p["task"] == e["task"])
        local_bolts = {p["task"] for p in bolts if p["port"] == spout_port}
        assert len(e["targets"]) == 1 and e["targets"][0] in local_bolts


def test_local_or_shuffle_without_a_local_task_uses_every_task():
    # 2 workers, 1 bolt task: the spout task in the other worker still reaches it
    b = TopologyBuilder()
    b.set_spout("src", ListSpout([[i] for i in range(20)]), 2)
    b.set_bolt("bolt", Recorder(), 1).local_or_shuffle_grouping("src")
    run(b, workers=2)

    bolt = prepared("bolt")[0]
    spout_tasks = {p["task"] for p in prepared("src")}
    assert len(spout_tasks) == 2
    remote = spout_tasks - set(bolt["worker_tasks"])
    assert remote, "one spout task must run in the other worker"
    recs = received("bolt")
    assert sorted(r["values"][0] for r in recs) == list(range(20))
    assert {r["source_task"] for r in recs} == spout_tasks


# ---------------------------------------------------------------------------------------
# partial key
# ---------------------------------------------------------------------------------------


def test_partial_key_grouping_splits_a_hot_key_over_two_tasks():
    # 8 spout tasks, each emitting a single key 40 times: to each emitter its key is 100%
    # of the stream. Fields grouping would send all of it to one task; partial key grouping
    # sends a key to at most two tasks, balancing between them.
    keys = [f"hot{i}" for i in range(8)]
    per_key = 40
    rows = [[k, i] for i in range(per_key) for k in keys]  # spout task j gets key j only
    recs = run_keyed("partial_key", rows, spouts=8, workers=2)
    per_key_tasks = collections.defaultdict(collections.Counter)
    emitters = collections.defaultdict(set)
    for r in recs:
        per_key_tasks[r["values"][0]][r["task"]] += 1
        emitters[r["values"][0]].add(r["source_task"])
    assert all(len(e) == 1 for e in emitters.values())  # the layout the test relies on
    split = 0
    for key, counts in per_key_tasks.items():
        assert len(counts) <= 2, f"{key} went to {dict(counts)}"
        if len(counts) == 2:
            split += 1
            a, b2 = counts.values()
            assert abs(a - b2) <= 1, f"{key} is not balanced over its two tasks: {dict(counts)}"
    assert split >= 3, per_key_tasks  # with 4 tasks a key's two choices coincide 1 time in 4


def test_partial_key_grouping_mixed_stream_keeps_keys_on_two_tasks():
    # one emitter, a skewed mix: 70% one key, the rest 30 other keys
    rows = []
    for i in range(300):
        rows.append(["hot" if i % 10 < 7 else f"cold{i % 30}", i])
    recs = run_keyed("partial_key", rows)
    assert len(recs) == 300
    per_key = collections.defaultdict(set)
    for r in recs:
        per_key[r["values"][0]].add(r["task"])
    assert all(len(t) <= 2 for t in per_key.values()), per_key
    load = collections.Counter(r["task"] for r in recs)
    hot_total = sum(1 for r in rows if r[0] == "hot")
    # the hot key alone is 210 tuples; no task carries all of it unless its two choices coincide
    if len(per_key["hot"]) == 2:
        assert max(load.values()) < hot_total, load


# ---------------------------------------------------------------------------------------
# custom
# ---------------------------------------------------------------------------------------


class EvenToLastOddToAll(CustomStreamGrouping):
    """Even values go to the highest target task, odd values to every target task."""

    def prepare(self, context, stream, target_tasks) -> None:
        self.targets = list(target_tasks)
        self.me = context.get_this_task_id()
        record("grouping-calls", {"call": "prepare", "task": self.me, "stream": stream,
                                  "targets": list(target_tasks)})

    def choose_tasks(self, task_id, values):
        record("grouping-calls", {"call": "choose", "task": task_id, "prepared_by": self.me})
        if values[0] % 2 == 0:
            return [self.targets[-1]]
        return list(self.targets)


def test_custom_grouping_prepare_and_choose_tasks():
    n = 40
    b = TopologyBuilder()
    b.set_spout("src", Src(), 2)
    b.set_bolt("bolt", Recorder(), 3).set_num_tasks(4).custom_grouping("src", EvenToLastOddToAll())
    run(b, {"src": [[i] for i in range(n)]}, workers=2)

    bolt_tasks = sorted(p["task"] for p in prepared("bolt"))
    calls = logged("grouping-calls")
    preps = [c for c in calls if c["call"] == "prepare"]
    spout_tasks = {r["source_task"] for r in received("bolt")}
    assert len(spout_tasks) == 2
    # prepared once per emitting task, with the stream and the sorted target tasks
    assert sorted(c["task"] for c in preps) == sorted(spout_tasks)
    for c in preps:
        assert c["targets"] == bolt_tasks
        assert c["stream"] == GlobalStreamId("src", "default")
        assert tuple(c["stream"]) == ("src", "default")
    chooses = [c for c in calls if c["call"] == "choose"]
    assert len(chooses) == n
    assert all(c["task"] == c["prepared_by"] for c in chooses)  # choose_tasks gets the emitting task

    per_value = tasks_by_value(received("bolt"))
    for v in range(n):
        expected = {bolt_tasks[-1]} if v % 2 == 0 else set(bolt_tasks)
        assert per_value[v] == expected, v
    assert len(received("bolt")) == n // 2 + (n // 2) * len(bolt_tasks)


class ValueOrBogus(CustomStreamGrouping):
    """Sends to the first target, but to task 9999 (not a target) for the value "bogus"."""

    def prepare(self, context, stream, target_tasks) -> None:
        self.targets = list(target_tasks)

    def choose_tasks(self, task_id, values):
        if values[0] == "bogus":
            return [9999]
        return [self.targets[0]]


def test_custom_grouping_choosing_a_non_target_records_an_error_and_fails_the_input(cluster):
    feeder, b = feeder_builder(spout_id="feeder")
    b.set_bolt("relay", Relay()).shuffle_grouping("feeder")
    b.set_bolt("sink", Recorder(), 2).custom_grouping("relay", ValueOrBogus())
    cluster.submit_topology("custom-bad", Config(), b.create_topology())

    feeder.feed(["fine-1"], msg_id=1)
    wait_until(lambda: feeder.acked == [1], timeout=5)
    feeder.feed(["bogus"], msg_id=2)
    wait_until(lambda: feeder.failed == [2], timeout=5)
    feeder.feed(["fine-3"], msg_id=3)
    wait_until(lambda: feeder.acked == [1, 3], timeout=5)

    errors = errors_of(cluster, "custom-bad", "relay")
    assert len(errors) == 1
    assert "9999" in errors[0]["error"]
    assert errors[0]["task"] == tasks_of(cluster, "custom-bad", "relay")[0]
    assert errors_of(cluster, "custom-bad", "sink") == []
    assert errors_of(cluster, "custom-bad", "feeder") == []
    assert sorted(r["values"][0] for r in received("sink")) == ["fine-1", "fine-3"]
    assert feeder.failed == [2]


# ---------------------------------------------------------------------------------------
# several streams per component
# ---------------------------------------------------------------------------------------


class StreamsSpout(Spout):
    """Emits n on "odd" (n odd), [n, n // 2] on "even" (n even), and n on default when n % 3 == 0."""

    def __init__(self, n: int) -> None:
        self.n = n

    def declare_output_fields(self, declarer) -> None:
        declarer.declare(["n"])
        declarer.declare_stream("odd", ["n"])
        declarer.declare_stream("even", Fields("n", "half"))

    def open(self, conf, context, collector) -> None:
        self.collector = collector
        self.i = 0
        record_prepared({"component": "fields-seen", "task": context.get_this_task_id(),
                         "even": list(context.get_this_output_fields("even")),
                         "odd": list(context.get_this_output_fields("odd")),
                         "default": list(context.get_this_output_fields())})

    def next_tuple(self) -> None:
        if self.i >= self.n:
            return
        i = self.i
        self.i += 1
        if i % 2:
            self.collector.emit([i], stream="odd", msg_id=("odd", i))
        else:
            self.collector.emit([i, i // 2], stream="even", msg_id=("even", i))
        if i % 3 == 0:
            self.collector.emit([i], msg_id=("default", i))

    def is_exhausted(self) -> bool:
        return self.i >= self.n


class HalvesBolt(Bolt):
    """Declares a named stream with the ``outputs`` shorthand and emits on it only."""

    outputs = {"halves": ["half"], "unused": ["x", "y"]}

    def prepare(self, conf, context, collector) -> None:
        self.collector = collector

    def execute(self, tup) -> None:
        self.collector.emit([tup["half"]], anchors=tup, stream="halves")
        self.collector.ack(tup)


def test_multiple_streams_and_subscriptions_to_named_streams():
    n = 30
    b = TopologyBuilder()
    b.set_spout("src", StreamsSpout(n))
    b.set_bolt("odds", Recorder(), 2).shuffle_grouping("src", "odd")
    b.set_bolt("evens", HalvesBolt(), 2).fields_grouping("src", ["half"], stream="even")
    b.set_bolt("both", Recorder(), 2).all_grouping("src", "odd").global_grouping("src", stream="even")
    b.set_bolt("plain", Recorder()).shuffle_grouping("src")
    b.set_bolt("halves", Recorder()).shuffle_grouping("evens", "halves")
    results = run(b, workers=2)

    seen = prepared("fields-seen")[0]
    assert seen["even"] == ["n", "half"] and seen["odd"] == ["n"] and seen["default"] == ["n"]

    odds = received("odds")
    assert sorted(r["values"][0] for r in odds) == list(range(1, n, 2))
    assert all(r["stream"] == "odd" and r["fields"] == ["n"] and r["source_component"] == "src" for r in odds)

    plain = received("plain")
    assert sorted(r["values"][0] for r in plain) == list(range(0, n, 3))
    assert all(r["stream"] == "default" for r in plain)

    both = received("both")
    both_tasks = sorted(p["task"] for p in prepared("both"))
    from_odd = [r for r in both if r["stream"] == "odd"]
    from_even = [r for r in both if r["stream"] == "even"]
    assert len(from_odd) == len(both_tasks) * len(range(1, n, 2))  # all grouping on "odd"
    assert {r["task"] for r in from_even} == {both_tasks[0]}  # global grouping on "even"
    assert sorted(r["values"] for r in from_even) == [[i, i // 2] for i in range(0, n, 2)]
    assert all(r["fields"] == ["n", "half"] for r in from_even)

    halves = received("halves")
    assert sorted(r["values"][0] for r in halves) == [i // 2 for i in range(0, n, 2)]
    assert all(r["stream"] == "halves" and r["source_component"] == "evens" and r["fields"] == ["half"]
               for r in halves)
    # complete_topology captured the streams separately
    assert sorted(results["src"]["odd"]) == [[i] for i in range(1, n, 2)]
    assert sorted(results["src"]["even"]) == [[i, i // 2] for i in range(0, n, 2)]
    assert sorted(results["src"]["default"]) == [[i] for i in range(0, n, 3)]
    assert "unused" not in results["evens"] and "default" not in results["evens"]
