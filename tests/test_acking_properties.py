"""Guaranteed processing on random topologies: every spout tree is acked or failed exactly as
a reference model of Storm's guarantee says, with in-process workers and with two worker
processes (where trees cross workers, and inits, acks and completions travel between them
in batches).

Hypothesis draws a topology: a spout (1-2 executors), then 1-3 bolt layers, each subscribing
to the default stream of the one before it by shuffle, local-or-shuffle, fields, all or
global grouping, and to its join stream by fields, all or global grouping; with 1-3
executors (at times one task more: an executor of two tasks), on the worker's cooperative
thread or on threads of their own, settling inputs in ``execute`` or in ``finish_batch``;
1-2 ackers; 1-2 workers (2 with processes); batch and queue sizes down to a batch per tuple
and queues of two; a thread per executor or not. And a plan: for every tuple, how many
anchored and unanchored children it gets, whether its anchored children are anchored to it
twice, whether it gets a pair of join tuples, and whether it is acked or failed. Trees 2k
and 2k+1 form a group: once a task of the next layer has all the join tuples of a group it
is to get, it joins them two by two, each with one of the other tree where it can, into
tuples anchored to both (in two trees, or in one). Spout tuples without message id are in
no tree.

Decisions are keyed by (group, path), and tuples carry both, so a bolt task looks its
decision up; copies of a tuple (all grouping) decide alike. The plan lives in the components
(cloudpickled at create_topology), so worker processes have it.

The reference model is the guarantee Storm's XOR acker implements: a tree is acked iff every
tuple in it was acked and none failed, failed (once) iff one of its tuples was failed. Every
tuple is acked or failed, so no tree times out. The model also says how often each tuple is
executed. The checks, on one log every task appends to (one ``os.write`` per line, O_APPEND:
whole lines of every task and process in the order they were written):

* the acked and the failed message ids are the model's, each reported exactly once;
* every tuple was executed as often as the model says, and is in the trees its anchors are
  in (unanchored emits are in none);
* a tree was acked only once every tuple in it had been executed (an early completion would
  leave the sets right).

The search is derandomized: the same examples every run. Two explicit examples join tuples
of two trees on every run, whatever the search draws.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, currently_in_test_context, example, given, note, settings
from hypothesis import strategies as st

from helpers import stays
from squall import Bolt, Config, LocalCluster, Spout, TopologyBuilder
from squall.testing import wait_until
from squall.api.storm_topology import StormTopology
from squall.api.topology import BoltDeclarer

FIELDS = ["group", "path", "trees"]
JOIN = "join"  # the stream of join tuples
GROUPINGS = ("shuffle", "local_or_shuffle", "fields:group", "fields:path", "all", "global")
# the join tuples of a group all meet on a task: the grouping sends them to one task, or each to every task
JOIN_GROUPINGS = ("fields:group", "all", "global")
SETTLE_SECS = 20.0  # below the message timeout (30 s): a tree still pending then was lost
QUIET_SECS = 0.2  # how long worker processes are watched for anything more once done


# -- the plan and the reference model ---------------------------------------------------------


class Decision(NamedTuple):
    """What a bolt does with one input, in this order."""

    children: int  # anchored children
    loose: int  # unanchored children (in no tree)
    pair: bool  # two join tuples, anchored
    twice: bool  # the anchored children are anchored to the input twice (anchors=[tup, tup])
    fail: bool  # fail the input, else ack it


@dataclass(frozen=True)
class Layer:
    parallelism: int  # executors
    tasks: int  # at least as many: an executor may run several
    grouping: str  # on the default stream of the layer before (or of the spout)
    join_grouping: str  # on the join stream of the layer before (the spout has none)
    blocking: bool  # executors on threads of their own, else on the worker's cooperative thread
    defer: bool  # settle inputs in finish_batch, else in execute

    def fan(self, stream: str) -> int:
        """How many tasks get a tuple emitted on ``stream`` to this layer."""
        return self.tasks if (self.join_grouping if stream == JOIN else self.grouping) == "all" else 1


@dataclass
class Case:
    trees: int  # message ids 0 .. trees-1
    loose_roots: int  # spout tuples without message id: roots -1 .. -loose_roots
    spout_parallelism: int
    spout_tasks: int
    spout_blocking: bool
    layers: tuple[Layer, ...]
    ackers: int
    workers: int
    tuning: dict[str, Any]  # more configuration: batch and buffer sizes, threads
    plan: dict[tuple[int, str], Decision]  # (group, path) -> decision

    @property
    def roots(self) -> list[int]:
        return [*range(self.trees), *range(-1, -self.loose_roots - 1, -1)]


def group_of(root: int) -> int:
    """Trees 2k and 2k+1 are joined together; a spout tuple without message id on its own."""
    return root // 2 if root >= 0 else root


def spout_path(root: int) -> str:
    return f"r{root}"


def joined_path(layer: int) -> str:
    """The path of the tuples a group's join tuples are joined into at ``layer``."""
    return f"J{layer}"


def is_join(path: str) -> bool:
    return path.endswith((".a", ".b"))


def emits(path: str, d: Decision) -> list[tuple[str, bool]]:
    """(path, anchored) of each tuple a tuple at ``path`` emits by ``d``, in emit order."""
    return ([(f"{path}.{i}", True) for i in range(d.children)]
            + [(f"{path}.u{j}", False) for j in range(d.loose)]
            + ([(f"{path}.a", True), (f"{path}.b", True)] if d.pair else []))


def is_tracked(path: str) -> bool:
    """Whether a tuple at ``path`` is in a tree: its spout tuple had a message id (join tuples
    come from tracked tuples only, so joined ones are in trees too) and every emit on the way
    was anchored."""
    first, *rest = path.split(".")
    return (first.startswith("J") or int(first[1:]) >= 0) and not any(part.startswith("u") for part in rest)


def groups(case: Case) -> dict[int, list[int]]:
    """Group -> its roots."""
    found: dict[int, list[int]] = {}
    for root in case.roots:
        found.setdefault(group_of(root), []).append(root)
    return found


def layer_paths(case: Case, group: int, roots: list[int]) -> Iterator[tuple[int, list[str]]]:
    """Yield (layer, frontier: the paths of the group's tuples at that layer); the caller fills
    ``case.plan`` for them before the next layer is computed."""
    frontier = [spout_path(root) for root in roots]
    for layer in range(len(case.layers)):
        yield layer, frontier
        if layer + 1 == len(case.layers):
            return
        following = [child for path in frontier for child, _ in emits(path, case.plan[group, path])]
        if any(is_join(path) for path in frontier):
            following.append(joined_path(layer))
        frontier = following


def fill_plan(case: Case, decide: Callable[[int, str, bool], Decision]) -> Case:
    """Fill ``case.plan`` with ``decide(group, path, pairable)`` for every tuple that reaches a
    layer (``pairable``: it may get a pair, as a tracked tuple with a layer after it)."""
    for group, roots in groups(case).items():
        for layer, frontier in layer_paths(case, group, roots):
            for path in frontier:
                case.plan[group, path] = decide(group, path, layer + 1 < len(case.layers) and is_tracked(path))
    return case


@st.composite
def decisions(draw: st.DrawFn, pairable: bool) -> Decision:
    return Decision(
        children=draw(st.integers(0, 2)),
        loose=draw(st.integers(0, 1)),
        pair=draw(st.booleans()) if pairable else False,
        twice=draw(st.booleans()),
        fail=draw(st.integers(0, 9)) == 9,  # rare: trees of several tuples still ack often
    )


@st.composite
def layers(draw: st.DrawFn) -> Layer:
    parallelism = draw(st.integers(1, 3))
    return Layer(parallelism, parallelism + draw(st.integers(0, 1)), draw(st.sampled_from(GROUPINGS)),
                 draw(st.sampled_from(JOIN_GROUPINGS)), draw(st.booleans()), draw(st.booleans()))


# the defaults first (what a failing example shrinks to), then values that make the engine hand
# batches on after every tuple, hold few tuples per queue (backpressure) or run a thread per executor
TUNING = {
    "topology.producer.batch.size": st.sampled_from([100, 1, 3]),
    "topology.spout.max.batch.size": st.sampled_from([100, 1]),
    "topology.executor.receive.buffer.size": st.sampled_from([1024, 2]),
    "topology.receiver.credit.size": st.sampled_from([8192, 2]),
    "topology.worker.cooperative": st.sampled_from([True, False]),
}
# payloads ZeroMQ buffers per link between worker processes (2 is the least the config takes)
RECEIVER_BUFFER = {"topology.receiver.buffer.size": st.sampled_from([8, 2])}


@st.composite
def cases(draw: st.DrawFn, workers: st.SearchStrategy[int], tuning: dict[str, st.SearchStrategy[Any]]) -> Case:
    spout_parallelism = draw(st.integers(1, 2))
    case = Case(trees=draw(st.integers(1, 8)), loose_roots=draw(st.integers(0, 2)),
                spout_parallelism=spout_parallelism, spout_tasks=spout_parallelism + draw(st.integers(0, 1)),
                spout_blocking=draw(st.booleans()), layers=tuple(draw(st.lists(layers(), min_size=1, max_size=3))),
                ackers=draw(st.integers(1, 2)), workers=draw(workers), tuning=draw(st.fixed_dictionaries(tuning)),
                plan={})
    return fill_plan(case, lambda group, path, pairable: draw(decisions(pairable)))


def joins_of_two_trees(workers: int) -> Case:
    """Every tracked tuple gets a child, an unanchored child and a pair: joined by a fields
    grouping (tuples of two trees: spout tasks on both workers), then by all grouping (a copy
    on each task); ackers on both workers. Tree 1 fails on its own, trees 4 and 5 in a tuple
    joined from both."""
    layers = (Layer(2, 2, "shuffle", "global", False, False),
              Layer(2, 2, "local_or_shuffle", "fields:group", True, False),
              Layer(2, 3, "fields:path", "all", False, True))
    case = Case(trees=6, loose_roots=1, spout_parallelism=2, spout_tasks=2, spout_blocking=False, layers=layers,
                ackers=2, workers=workers, tuning={}, plan={})
    return fill_plan(case, lambda group, path, pairable: Decision(
        children=1, loose=1, pair=pairable, twice=path.startswith("J"),
        fail=(group, path) in {(0, "r1.0"), (2, joined_path(1))}))


def joins_on_one_task() -> Case:
    """Pairs from copies of the spout's tuples (all grouping) joined on one task (global
    grouping), in one worker with one acker: tree 2, alone in its group, fails in a tuple
    joined from its own."""
    layers = (Layer(2, 2, "all", "global", True, True),
              Layer(3, 3, "shuffle", "global", False, False),
              Layer(1, 1, "fields:path", "all", True, False))
    case = Case(trees=3, loose_roots=0, spout_parallelism=1, spout_tasks=1, spout_blocking=True, layers=layers,
                ackers=1, workers=1, tuning={}, plan={})
    return fill_plan(case, lambda group, path, pairable: Decision(
        children=2, loose=0, pair=pairable, twice=False, fail=(group, path) == (1, joined_path(1))))


@dataclass
class Expected:
    acked: set[int]
    failed: set[int]
    executions: Counter[tuple[int, str]]  # (group, path) -> how many times a tuple at path is executed
    trees: dict[tuple[int, str], frozenset[int]]  # (group, path) -> the trees its tuples are in, together
    arrivals: dict[tuple[int, int], int]  # (group, layer) -> join tuples each task of the layer gets


def reference(case: Case) -> Expected:
    """What running ``case`` must do."""
    layers = case.layers
    executions: Counter[tuple[int, str]] = Counter()
    trees: dict[tuple[int, str], frozenset[int]] = {}
    arrivals: dict[tuple[int, int], int] = {}
    for group, roots in groups(case).items():
        count = Counter({spout_path(root): layers[0].fan("default") for root in roots})  # copies of each tuple
        for root in roots:
            trees[group, spout_path(root)] = frozenset([root] if root >= 0 else [])
        for layer, frontier in layer_paths(case, group, roots):
            for path in frontier:
                executions[group, path] += count[path]
            if joins := sum(count[path] for path in frontier if is_join(path)):
                # each task of an all grouping gets every join tuple, else one task gets them
                arrivals[group, layer] = joins // layers[layer].fan(JOIN)
            if layer + 1 == len(layers):
                break  # the last layer's emits reach nobody
            following = layers[layer + 1]
            for path in frontier:
                for child, anchored in emits(path, case.plan[group, path]):
                    count[child] += count[path] * following.fan(JOIN if is_join(child) else "default")
                    trees[group, child] = trees[group, path] if anchored else frozenset()
            # each task joins the join tuples it gets two by two: one joined tuple per pair, in
            # the trees of both anchors; every join tuple is in one, and all of them decide alike
            if joins:
                count[joined_path(layer)] += joins // 2 * following.fan("default")
                trees[group, joined_path(layer)] = frozenset().union(
                    *(trees[group, path] for path in frontier if is_join(path)))
    failed = {root for key in executions if case.plan[key].fail for root in trees[key]}
    return Expected(acked=set(range(case.trees)) - failed, failed=failed, executions=executions, trees=trees,
                    arrivals=arrivals)


# -- components --------------------------------------------------------------------------------


def open_log(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def write_line(fd: int, line: str) -> None:
    # one write per line, O_APPEND: whole lines, in the order they were written, from any process
    os.write(fd, (line + "\n").encode())


class PlanSpout(Spout):
    """Emits one tuple per root of its share: with the root as message id when it is a tree's
    (root >= 0), without one otherwise. Logs ``ack``/``fail`` of each message id."""

    outputs = FIELDS

    def __init__(self, roots: list[int], log: str) -> None:
        self.roots = roots
        self.log = log

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        count = len(context.get_component_tasks(context.get_this_component_id()))
        self.todo = deque(self.roots[context.get_this_task_index()::count])
        self.fd = open_log(self.log)

    def next_tuple(self) -> None:
        if self.todo:
            root = self.todo.popleft()
            tracked = root >= 0
            self.collector.emit([group_of(root), spout_path(root), [root] if tracked else []],
                                msg_id=root if tracked else None)

    def ack(self, msg_id: int) -> None:
        write_line(self.fd, f"ack {msg_id}")

    def fail(self, msg_id: int) -> None:
        write_line(self.fd, f"fail {msg_id}")

    def close(self) -> None:
        os.close(self.fd)

    def is_exhausted(self) -> bool:
        return not self.todo


class PlanBolt(Bolt):
    """Logs every input (group, path, the trees it should be in, how many it is in), then does
    what the plan says with it. Join tuples wait until all of their group's are on this task
    (``arrivals``: how many); they are then joined two by two, each with one of another tree
    where it can, into tuples anchored to both, and each is handled."""

    outputs = {"default": FIELDS, JOIN: FIELDS}

    def __init__(self, layer: int, plan: dict[tuple[int, str], Decision], arrivals: dict[tuple[int, int], int],
                 log: str, defer: bool) -> None:
        self.layer = layer
        self.plan = plan
        self.arrivals = arrivals
        self.log = log
        self.defer = defer

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.waiting: dict[int, list[Any]] = {}  # group -> its join tuples here so far
        self.unsettled: list[tuple[Any, bool]] = []  # (input, fail) for finish_batch
        self.fd = open_log(self.log)

    def execute(self, tup: Any) -> None:
        group, path, trees = tup.values
        write_line(self.fd, f"x {group} {path} {','.join(map(str, trees)) or '-'} {len(tup.tree_ids or ())}")
        if tup.source_stream_id != JOIN:
            self.handle(tup)
            return
        waiting = self.waiting.setdefault(group, [])
        waiting.append(tup)
        if len(waiting) < self.arrivals[group, self.layer]:
            return
        del self.waiting[group]
        # in the order of their trees, the first half with the second: tuples of both trees
        # together wherever both sent some (joined as they came, the two tuples of a pair would
        # nearly always meet each other, and no tuple would be in two trees)
        waiting.sort(key=lambda t: (t.values[2], t.values[1]))
        half = len(waiting) // 2
        for first, second in zip(waiting[:half], waiting[half:]):
            both = sorted(set(first.values[2]) | set(second.values[2]))
            self.collector.emit([group, joined_path(self.layer), both], anchors=[first, second])
        for t in waiting:
            self.handle(t)

    def handle(self, tup: Any) -> None:
        group, path, trees = tup.values
        d = self.plan[group, path]
        for child, anchored in emits(path, d):
            if not anchored:
                self.collector.emit([group, child, []])
            elif is_join(child):
                self.collector.emit([group, child, trees], anchors=tup, stream=JOIN)
            else:
                self.collector.emit([group, child, trees], anchors=[tup, tup] if d.twice else tup)
        if self.defer:
            self.unsettled.append((tup, d.fail))
        else:
            self.settle(tup, d.fail)

    def settle(self, tup: Any, fail: bool) -> None:
        if fail:
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)

    def finish_batch(self) -> None:
        for tup, fail in self.unsettled:
            self.settle(tup, fail)
        self.unsettled.clear()

    def cleanup(self) -> None:
        os.close(self.fd)


def subscribe(declarer: BoltDeclarer, grouping: str, source: str, stream: str) -> None:
    if grouping.startswith("fields:"):
        declarer.fields_grouping(source, [grouping.split(":")[1]], stream)
    else:
        getattr(declarer, f"{grouping}_grouping")(source, stream)


def build(case: Case, arrivals: dict[tuple[int, int], int], log: str) -> StormTopology:
    builder = TopologyBuilder()
    spout = builder.set_spout("spout", PlanSpout(case.roots, log), case.spout_parallelism)
    spout.set_num_tasks(case.spout_tasks).set_blocking(case.spout_blocking)
    source = "spout"
    for index, layer in enumerate(case.layers):
        name = f"layer{index}"
        declarer = builder.set_bolt(name, PlanBolt(index, case.plan, arrivals, log, layer.defer), layer.parallelism)
        declarer.set_num_tasks(layer.tasks).set_blocking(layer.blocking)
        subscribe(declarer, layer.grouping, source, "default")
        if index:
            subscribe(declarer, layer.join_grouping, source, JOIN)
        source = name
    return builder.create_topology()


# -- running a case ------------------------------------------------------------------------------


@dataclass
class Observed:
    outcomes: list[tuple[str, int]]  # ("ack" | "fail", message id), in order
    executions: Counter[tuple[int, str]]  # (group, path) -> executions
    in_trees: Counter[int]  # message id -> executions of tuples in its tree
    in_trees_before_ack: dict[int, int]  # message id -> the same, logged before its ack
    misplaced: list[str]  # executions not in the trees the model or their anchors say


def observe(log: str, expected: Expected) -> Observed:
    try:
        with open(log) as f:
            lines = f.read().split("\n")[:-1]  # a line being written: not yet
    except FileNotFoundError:
        lines = []
    observed = Observed([], Counter(), Counter(), {}, [])
    for line in lines:
        kind, *rest = line.split()
        if kind == "x":
            group, path, trees, tree_ids = int(rest[0]), rest[1], rest[2], int(rest[3])
            members = [] if trees == "-" else [int(t) for t in trees.split(",")]
            observed.executions[group, path] += 1
            observed.in_trees.update(members)
            # a joined tuple may be in fewer trees than its path (a pair of one tree only)
            if (len(members) != tree_ids or not set(members) <= expected.trees.get((group, path), set())
                    or bool(members) != is_tracked(path)):
                observed.misplaced.append(line)
        else:
            observed.outcomes.append((kind, int(rest[0])))
            if kind == "ack":
                observed.in_trees_before_ack[int(rest[0])] = observed.in_trees[int(rest[0])]
    return observed


def errors(cluster: LocalCluster, name: str) -> dict[str, list[str]]:
    components = cluster.get_topology_info(name)["components"]
    return {cid: [e["error"] for e in c["errors"]] for cid, c in components.items() if c["errors"]}


def check(cluster: LocalCluster, case: Case, directory: str, conf: dict[str, Any],
          settle_secs: float = SETTLE_SECS) -> None:
    """Run ``case`` on ``cluster`` until every tree settled and every tuple was executed (fail
    after ``settle_secs``), then compare with the reference."""
    expected = reference(case)
    total = sum(expected.executions.values())
    if currently_in_test_context():
        note(f"expected: acked {sorted(expected.acked)}, failed {sorted(expected.failed)}, {total} executions")
    name = f"acking-{uuid.uuid4().hex[:8]}"
    log = os.path.join(directory, f"{name}.log")

    def progress() -> tuple[int, int]:
        o = observe(log, expected)
        return len(o.outcomes), sum(o.executions.values())

    def done() -> bool:
        outcomes, executions = progress()
        return outcomes >= case.trees and executions >= total

    tracked = cluster.in_process  # worker processes cannot be tracked from here
    cluster.submit_topology(name, conf, build(case, expected.arrivals, log), tracked=tracked)
    try:
        try:
            wait_until(done, timeout=settle_secs, interval=0.01)
        except TimeoutError:
            o = observe(log, expected)
            pytest.fail(f"not done after {settle_secs}s: outcomes {o.outcomes}; executions missing "
                        f"{sorted((expected.executions - o.executions).items())}; errors {errors(cluster, name)}")
        # and nothing more comes (a second ack or fail of a tree would follow at once)
        if tracked:
            cluster.wait_idle(name, settle_secs)  # nothing queued or being processed: nothing can come
            assert progress() == (case.trees, total), "a further ack, fail or execution"
        else:
            # in worker processes nothing here sees the queues: only watching shows that nothing comes
            stays(lambda: progress() == (case.trees, total), QUIET_SECS, "no further ack, fail or execution")
        assert errors(cluster, name) == {}
    finally:
        cluster.kill_topology(name, wait_secs=0)
    o = observe(log, expected)
    assert sorted(m for _, m in o.outcomes) == list(range(case.trees)), f"not one outcome per tree: {o.outcomes}"
    assert {m for kind, m in o.outcomes if kind == "ack"} == expected.acked
    assert {m for kind, m in o.outcomes if kind == "fail"} == expected.failed
    assert o.executions == expected.executions
    assert o.misplaced == [], "executions as 'x group path trees-by-values len(tree_ids)'"
    early = {m: (n, o.in_trees[m]) for m, n in o.in_trees_before_ack.items() if n != o.in_trees[m]}
    assert early == {}, f"acked before all of its tree was executed: msg id -> (executed then, in all) {early}"


# -- the properties ----------------------------------------------------------------------------------

SEARCH = dict(deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def directory(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("acking-properties"))


@pytest.fixture(scope="module")
def in_process_cluster() -> Iterator[LocalCluster]:
    with LocalCluster() as cluster:
        yield cluster


@pytest.fixture(scope="module")
def process_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(processes=True) as cluster:
        yield cluster


@settings(max_examples=60, **SEARCH)
@given(case=cases(workers=st.integers(1, 2), tuning=TUNING))
@example(case=joins_of_two_trees(workers=2))
@example(case=joins_on_one_task())
def test_in_process_trees_settle_as_the_reference_says(in_process_cluster: LocalCluster, directory: str,
                                                       case: Case) -> None:
    conf = Config().set_num_workers(case.workers).set_num_ackers(case.ackers)
    conf.update(case.tuning)
    check(in_process_cluster, case, directory, conf)


@pytest.mark.processes
@pytest.mark.timeout(120)
@settings(max_examples=6, **SEARCH)
@given(case=cases(workers=st.just(2), tuning={**TUNING, **RECEIVER_BUFFER}))
@example(case=joins_of_two_trees(workers=2))
def test_worker_processes_trees_settle_as_the_reference_says(process_cluster: LocalCluster, directory: str,
                                                             case: Case) -> None:
    conf = Config().set_num_workers(case.workers).set_num_ackers(case.ackers)
    # ephemeral worker ports: concurrent test sessions never share one
    conf.update({"supervisor.slots.ports": [], **case.tuning})
    check(process_cluster, case, directory, conf)
