"""The send path of one emit, for every kind of emit and every kind of destination: what the
output collectors (squall.runtime.executor.collector) and the executors' send path (squall.runtime.executor.transfer)
hand on, and whether the acking adds up.

Emit kinds: untracked (a spout emit without msg_id, a bolt emit without anchors), anchored (a
bolt emit anchored to one input, and to several: inputs of two trees, one from each worker, and
an untracked input, which adds no tree), a BasicBolt's emit (anchored to its input), spout-root
(a spout emit with a msg_id: a new tree, whose init goes to the acker) and direct (emit_direct
to a named task from a spout, a bolt and a BasicBolt, untracked and tracked). Destination kinds:
the only task of an executor of the emitting worker (bare tuples on its queue), tasks of an
executor of three tasks of that worker ((task, tuple) pairs) and a task of the other worker (a
TupleGroup in the payload sent to it, decoded here).

For each pair: what arrives (values, stream, source and target task, tree ids), what reaches the
ackers (a new tree's init, the anchors' acks: ACK_BATCH tuples for an acker of the emitting
worker, AckBatch groups for one of the other worker), and for tracked emits that the XOR
bookkeeping adds up: while the emitted tuples are held back their trees stay pending; once their
receivers ack them, the acker completes the trees and the spouts' ``ack`` is called, once each.
The tracked pairs run again with the only acker in the other worker (every init and ack then
crosses). Then emits nobody subscribes to, and the EmitError of each invalid emit.

The world is two real Workers (not started) on the in-process transport. The test thread plays
their cooperative threads: it emits through the executors' real collectors, flushes as an
executor does at the end of a batch, ends rounds as the worker does and moves the payloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from operator import xor
from typing import Any

import pytest

from helpers import Sink, tree_maps
from squall import Bolt, Spout, TopologyBuilder
from squall.runtime.acker import acker_for
from squall.api.system_ids import ACKER_COMPONENT, ACK_BATCH
from squall.runtime.cluster_state import TopologyState
from squall.runtime.executor.collector import BasicOutputCollector
from squall.api.component import OutputFieldsDeclarer
from squall.api.config import merged_config
from squall.api.context import TopologyContext
from squall.runtime.worker import Worker, _ack_sender
from squall.api.errors import EmitError
from squall.runtime.executor.executor import Executor
from squall.runtime.messaging import tuple_batch
from squall.runtime.messaging.local import LocalTransport
from squall.runtime.messaging.tuple_batch import AckBatch, TupleGroup
from squall.runtime.assignment import Assignment, assign
from squall.api.tuple import Tuple

FIELDS = ["word", "n"]
DIRECT = "direct"  # declared direct; every destination subscribes to it with a direct grouping
UNSUBSCRIBED = "default"  # declared by every emitter, subscribed by nobody
FEED = "feed"  # the spouts' stream to the emitting bolt: the inputs it anchors to
MSG_ID = "root"  # the msg_id of a spout's tracked emit


class Emitting:
    """The streams of the emitters: one per destination kind (all grouping), the direct one,
    one nobody subscribes to, and the feed of the emitting bolt."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(FIELDS)
        for stream in ("to_one", "to_many", "to_far", FEED):
            declarer.declare_stream(stream, FIELDS)
        declarer.declare_stream(DIRECT, FIELDS, direct=True)


class Source(Emitting, Spout):
    """Emits only what the test emits through its collector; keeps its acks and fails."""

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
        self.acked: list[Any] = []
        self.failed: list[Any] = []

    def ack(self, msg_id: Any) -> None:
        self.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.failed.append(msg_id)


class Holder(Emitting, Bolt):
    """Keeps its inputs, unacked: the test emits anchored to them, then acks them, as an
    ``execute`` would."""

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
        self.inputs: list[Tuple] = []

    def execute(self, tup: Tuple) -> None:
        self.inputs.append(tup)


def _topology():
    builder = TopologyBuilder()
    # the even scheduler deals executors to the 2 workers alternately, in component id order:
    # the letters put a_bolt, c_many, e_one and g_spout in worker 0, the others in worker 1
    builder.set_spout("g_spout", Source())
    builder.set_spout("d_far_spout", Source())
    builder.set_bolt("a_bolt", Holder()).all_grouping("g_spout", FEED).all_grouping("d_far_spout", FEED)
    for cid, stream, tasks in (("e_one", "to_one", 1), ("c_many", "to_many", 3), ("b_far", "to_far", 1)):
        declarer = builder.set_bolt(cid, Sink()).set_num_tasks(tasks)
        for emitter in ("g_spout", "a_bolt"):
            declarer.all_grouping(emitter, stream).direct_grouping(emitter, DIRECT)
    builder.set_bolt("f_bystander", Sink()).all_grouping("a_bolt", FEED)  # not a subscriber of DIRECT
    return builder.create_topology()


TOPOLOGY = _topology()

#: destination kind -> (stream of a regular emit to it, its component, which of its tasks an
#: emit_direct names)
DESTINATIONS = {
    "one-task-local": ("to_one", "e_one", 0),
    "many-task-local": ("to_many", "c_many", 1),
    "remote": ("to_far", "b_far", 0),
}
#: acker layout -> topology.acker.executors: one acker per worker, or one, in worker 1
ACKERS = {"acker-in-each-worker": 2, "acker-in-the-other-worker": 1}


@dataclass(frozen=True)
class Kind:
    """An emit kind. ``emitter``: "spout", "bolt" or "basic" (a BasicBolt's collector, anchored
    to its input); ``tracked``: a spout's emit with a msg_id, a bolt's anchored to tracked
    inputs; ``several``: anchored to several inputs (two trees and an untracked tuple)."""

    emitter: str
    direct: bool = False
    tracked: bool = False
    several: bool = False

    @property
    def component(self) -> str:
        return "g_spout" if self.emitter == "spout" else "a_bolt"


KINDS = {
    "spout-untracked": Kind("spout"),
    "spout-root": Kind("spout", tracked=True),
    "spout-direct": Kind("spout", direct=True),
    "spout-direct-root": Kind("spout", direct=True, tracked=True),
    "bolt-untracked": Kind("bolt"),
    "bolt-anchored-one": Kind("bolt", tracked=True),
    "bolt-anchored-several": Kind("bolt", tracked=True, several=True),
    "bolt-direct": Kind("bolt", direct=True),
    "bolt-direct-anchored": Kind("bolt", direct=True, tracked=True),
    "basic-anchored": Kind("basic", tracked=True),
    "basic-direct-anchored": Kind("basic", direct=True, tracked=True),
}
REGULAR_KINDS = [k for k, kind in KINDS.items() if not kind.direct]
DIRECT_KINDS = [k for k, kind in KINDS.items() if kind.direct]
TRACKED_KINDS = [k for k, kind in KINDS.items() if kind.tracked]


# -- the world -----------------------------------------------------------------------------------


class World:
    """Worker 0 (g_spout, a_bolt, e_one, c_many) and worker 1 (d_far_spout, b_far, f_bystander),
    with ``ackers`` acker tasks dealt after them; every executor set up by this thread, none
    started."""

    def __init__(self, ackers: int = 2) -> None:
        conf = merged_config({"topology.workers": 2, "topology.acker.executors": ackers})
        self.assignment: Assignment = assign(TOPOLOGY, conf)
        self.transport = LocalTransport()
        self.workers = [Worker("emit-plan", TOPOLOGY, conf, self.assignment, i, self.transport, TopologyState())
                        for i in range(2)]
        where = {c: {self.assignment.task_worker[t] for t in ts} for c, ts in self.assignment.component_tasks.items()}
        assert [where[c] for c in ("g_spout", "a_bolt", "e_one", "c_many", "d_far_spout", "b_far")] == \
            [{0}] * 4 + [{1}] * 2, "the layout these tests need"
        assert len(self.tasks("c_many")) == 3 and len(self.executor("c_many").task_ids) == 3
        for worker in self.workers:  # the grants each worker made as it heard of the other
            worker.transfer.send_queued()
        for worker in self.workers:
            assert worker.receive.receive_ready()
        for worker in self.workers:
            assert all(e.cooperative and e.acks.round is not None for e in worker.executors)
            for executor in worker.executors:
                assert executor.start_up(), executor.setup_error
        #: the task of the executor that carries worker 0's combined acks (its acker, if any)
        self.ack_sender = _ack_sender(self.workers[0].executors).task_ids[0]

    def tasks(self, component: str) -> list[int]:
        return self.assignment.component_tasks[component]

    def task(self, component: str) -> int:
        (task,) = self.tasks(component)
        return task

    def worker_of(self, task: int) -> int:
        return self.assignment.task_worker[task]

    def acker_of(self, root: int) -> int:
        return acker_for(root, self.assignment.acker_tasks)

    def has_acker(self, worker: int) -> bool:
        return any(self.worker_of(t) == worker for t in self.assignment.acker_tasks)

    def executor(self, component: str) -> Executor:
        return next(e for w in self.workers for e in w.executors if e.component == component)

    def spout(self, component: str) -> Source:
        (spout,) = self.executor(component).spouts.values()
        return spout

    def collector(self, component: str) -> Any:
        (collector,) = self.executor(component).collectors.values()
        return collector

    def pending_roots(self, component: str = "g_spout") -> int:
        """The trees of ``component``'s task still waiting for their ack or fail."""
        return len(self.executor(component).pending_for(self.task(component)))

    def inputs(self) -> dict[str, Tuple]:
        """The emitting bolt's inputs so far, by their first value."""
        (bolt,) = self.executor("a_bolt").bolts.values()
        return {tup.values[0]: tup for tup in bolt.inputs}

    def end_round(self, worker: Worker) -> bool:
        """The end of ``worker``'s round, as its data path ends one: the round's combined inits
        and acks handed on."""
        sender = _ack_sender(worker.executors)
        if not sender.acks.round_waiting:
            return False
        sender.flush_round_acks()
        return True

    def end_batch(self, component: str) -> None:
        """What follows an emit in ``component`` (of worker 0): its executor's flush at the end of
        its batch, then the end of the round."""
        self.executor(component).flush_all()
        self.end_round(self.workers[0])

    def take_sent(self) -> Sent:
        """Take what worker 0's executors have on their queues, and the payload worker 0 sends
        to worker 1 (so that nothing is left for the workers to deliver)."""
        w0 = self.workers[0]
        local = {e: e.queue.take_all(0) for e in w0.executors}
        w0.transfer.send_queued()
        groups = [group for _, _, payload in self.transport.receive(1, 0) for group in tuple_batch.decode(payload)]
        # the credit worker 0 grants goes on to worker 1 at once: flow control, not what was emitted
        if grants := [g for g in groups if g.__class__ is tuple_batch.CreditGrant]:
            self.workers[1].receive.deliver(tuple_batch.encode(grants), 0, 0)
        return Sent(self, local, [g for g in groups if g.__class__ is not tuple_batch.CreditGrant])

    def deliver(self, sent: Sent, data: bool) -> None:
        """Give back what :meth:`take_sent` took: the data tuples (``data``) or the acker messages."""
        for executor, batches in sent.local.items():
            if (executor.component != ACKER_COMPONENT) == data:
                for batch in batches:
                    executor.queue.force_put(batch, len(batch))
        groups = [g for g in sent.remote if (g.__class__ is TupleGroup) == data]
        if groups:
            self.workers[1].receive.deliver(tuple_batch.encode(groups), 0, 0)

    def settle(self) -> None:
        """Run rounds of both workers (data path, executors, end of round) until nothing moves."""
        for _ in range(50):
            moved = False
            for worker in self.workers:
                moved |= worker.transfer.send_queued()
                moved |= worker.receive.receive_ready()
                for executor in worker.executors:
                    moved |= executor.run_once(0)
                moved |= self.end_round(worker)
            if not moved:
                return
        raise AssertionError("the workers did not settle")

    def pending_trees(self) -> int:
        """Trees the ackers track."""
        return sum(len(acker) for w in self.workers for e in w.executors if e.component == ACKER_COMPONENT
                   for acker in e.ackers.values())


@dataclass
class Sent:
    """What worker 0 handed on: the batches on each of its executors' queues and the groups of
    the payload it sent to worker 1 (decoded)."""

    world: World
    local: dict[Executor, list[list[Any]]]
    remote: list[Any]

    def tuples(self) -> list[tuple[int, int, str, list[Any], dict[int, int] | None]]:
        """(target task, source task, stream, values, tree ids) of every data tuple (not the
        ackers'), by target task; checks the form of each batch on the way."""
        out = []
        for executor, batches in self.local.items():
            if executor.component == ACKER_COMPONENT:
                continue
            for item in (item for batch in batches for item in batch):
                if executor.single_task:  # an executor of one task gets bare tuples
                    assert item.__class__ is Tuple, item
                    task, tup = executor.task_ids[0], item
                else:  # the others (task, tuple) pairs
                    task, tup = item
                    assert task in executor.task_ids and tup.__class__ is Tuple, item
                assert tup.source_component == self.world.assignment.task_component[tup.source_task]
                out.append((task, tup.source_task, tup.source_stream_id, tup.values, tup.tree_ids))
        for group in self.remote:
            if group.__class__ is TupleGroup:
                out.extend((task, group.source_task, group.stream, values, tree_ids)
                           for task, values, tree_ids in zip(group.tasks, group.values, tree_maps(group), strict=True))
        return sorted(out, key=lambda record: record[0])

    def acks(self) -> dict[int, dict[int, tuple[int, int]]]:
        """Acker task -> root -> (value, the spout task of an init or -1 for an ack): the ACK_BATCH
        tuples on the queue of worker 0's acker and the AckBatch groups for worker 1's; each
        from the executor that carries worker 0's acks."""
        out: dict[int, dict[int, tuple[int, int]]] = {}

        def add(acker: int, root: int, val: int, spout_task: int) -> None:
            assert root not in out.get(acker, {}), "one entry per tree and acker"
            out.setdefault(acker, {})[root] = (val, spout_task)

        sender = self.world.ack_sender
        for executor, batches in self.local.items():
            if executor.component == ACKER_COMPONENT:
                for tup in (tup for batch in batches for tup in batch):
                    assert (tup.source_task, tup.source_stream_id) == (sender, ACK_BATCH), tup
                    for root, val, spout_task in zip(*tup.values, strict=True):
                        add(executor.task_ids[0], root, val, spout_task)
        for group in self.remote:
            if group.__class__ is AckBatch:
                assert group.source_task == sender and self.world.worker_of(group.acker_task) == 1, group
                for root, val, spout_task in zip(group.roots, group.vals, group.spout_tasks, strict=True):
                    add(group.acker_task, root, val, spout_task)
        return out

    def nothing(self) -> bool:
        return not any(self.local.values()) and not self.remote


def feed(world: World, kind: Kind) -> list[Tuple]:
    """The inputs a tracked bolt emit anchors to, emitted by the spouts and executed by a_bolt:
    "in" (a tree of g_spout, msg_id "A"), and for ``several`` also "far" (a tree of d_far_spout,
    msg_id "B", of the other worker) and "untracked" (of no tree)."""
    if not kind.tracked or kind.emitter == "spout":
        return []
    world.collector("g_spout").emit(["in", 1], FEED, msg_id="A")
    if kind.several:
        world.collector("d_far_spout").emit(["far", 2], FEED, msg_id="B")
        world.collector("g_spout").emit(["untracked", 3], FEED)
    world.settle()
    inputs = world.inputs()
    if not kind.several:
        return [inputs["in"]]
    (far_root,) = inputs["far"].tree_ids
    assert len(inputs["in"].tree_ids) == 1 and not inputs["untracked"].tree_ids
    assert world.worker_of(world.acker_of(far_root)) == 1  # its ack crosses to worker 1
    return [inputs["in"], inputs["far"], inputs["untracked"]]


def emit(world: World, kind: Kind, values: list[Any], stream: str, target: int | None = None,
         inputs: Sequence[Tuple] = (), ack: bool = True) -> Any:
    """Emit ``values`` on ``stream`` the way ``kind`` does (to ``target`` for a direct kind) and
    return what the emit returned; then (``ack``) the bolt acks its inputs, as its execute would."""
    msg_id = MSG_ID if kind.tracked else None
    if kind.emitter == "spout":
        collector = world.collector("g_spout")
        if kind.direct:
            return collector.emit_direct(target, values, stream, msg_id=msg_id)
        return collector.emit(values, stream, msg_id=msg_id)
    collector = world.collector("a_bolt")
    try:
        if kind.emitter == "basic":
            basic = BasicOutputCollector(collector)  # as the executor makes it for a BasicBolt
            basic.input = inputs[0]
            if kind.direct:
                return basic.emit_direct(target, values, stream)
            return basic.emit(values, stream)
        anchors = (inputs if kind.several else inputs[0]) if inputs else None  # one anchor: a bare Tuple
        if kind.direct:
            return collector.emit_direct(target, values, anchors, stream)
        return collector.emit(values, anchors, stream)
    finally:
        if ack:
            for tup in inputs:  # a basic bolt's input too: its executor acks it as execute returns
                collector.ack(tup)


def check_emit(world: World, kind_id: str, dest: str) -> None:
    """Emit as ``kind_id`` to ``dest`` and check what is sent, and the fate of the trees."""
    kind = KINDS[kind_id]
    stream, component, index = DESTINATIONS[dest]
    targets = world.tasks(component)
    if kind.direct:
        stream, targets = DIRECT, [targets[index]]
    source_task = world.task(kind.component)
    inputs = feed(world, kind)
    values = [f"{kind_id} to {dest}", 7]
    returned = emit(world, kind, values, stream, targets[0] if kind.direct else None, inputs)
    assert returned == (None if kind.direct else targets)
    world.end_batch(kind.component)
    sent = world.take_sent()

    # what arrives: one tuple per target task, of the emitting task, on the stream, as emitted
    arrived = sent.tuples()
    assert [(task, src, s, v) for task, src, s, v, _ in arrived] == [(t, source_task, stream, values) for t in targets]
    ids = [tree_ids for *_, tree_ids in arrived]
    tracked_anchors = [a for a in inputs if a.tree_ids]
    expected_acks: dict[int, dict[int, tuple[int, int]]] = {}
    if not kind.tracked:
        assert ids == [None] * len(targets)
    elif kind.emitter == "spout":  # a new tree: one root, a new edge per target, XOR-ed into its init
        (root,) = ids[0]
        assert all(list(i) == [root] for i in ids)
        edges = [i[root] for i in ids]
        assert len(set(edges)) == len(edges) and 0 not in edges
        expected_acks = {world.acker_of(root): {root: (reduce(xor, edges), source_task)}}
        # tracked by an acker of the spout's worker when there is one (squall.runtime.acker.RootIds)
        assert world.worker_of(world.acker_of(root)) == (0 if world.has_acker(0) else 1)
        assert world.executor("g_spout").pending_for(source_task).msg_id(root) == MSG_ID
    else:  # the anchors' trees: a new edge per anchor and target, XOR-ed into the anchor's ack
        roots = {root: anchor for anchor in tracked_anchors for root in anchor.tree_ids}
        assert all(set(i) == set(roots) for i in ids)
        for root, anchor in roots.items():
            edges = [i[root] for i in ids]
            assert len(set(edges)) == len(edges) and 0 not in edges
            assert anchor.ack_val == reduce(xor, edges)
            # the anchor's ack: its own edge and its children's
            expected_acks.setdefault(world.acker_of(root), {})[root] = (anchor.tree_ids[root] ^ anchor.ack_val, -1)
        assert all(a.ack_val == 0 for a in inputs if not a.tree_ids)
    assert sent.acks() == expected_acks

    # what worker 1 gets: the tuple for a remote destination, and the inits and acks for its acker
    if dest == "remote":
        [group] = [g for g in sent.remote if g.__class__ is TupleGroup]
        assert (group.source_task, group.stream, group.tasks, group.values, tree_maps(group)) == (
            source_task, stream, targets, [values], ids)
        # a tuple in one tree travels as a root and an edge, in several as a tree map
        one_tree = kind.tracked and all(len(i) == 1 for i in ids)
        assert (group.roots is not None, group.tree_ids is not None) == (one_tree, kind.tracked and not one_tree)
    far_ackers = sorted(a for a in expected_acks if world.worker_of(a) == 1)
    kinds = ["TupleGroup"] * (dest == "remote") + ["AckBatch"] * len(far_ackers)
    assert [type(g).__name__ for g in sent.remote] == kinds
    assert [g.acker_task for g in sent.remote if g.__class__ is AckBatch] == far_ackers

    # the trees: pending while the emitted tuples are held back, complete once their receivers ack them
    spouts = {cid: world.spout(cid) for cid in ("g_spout", "d_far_spout")}
    world.deliver(sent, data=False)
    world.settle()
    assert all(s.acked == [] and s.failed == [] for s in spouts.values())
    assert world.pending_trees() == (len(tracked_anchors) if kind.emitter != "spout" else int(kind.tracked))
    world.deliver(sent, data=True)
    world.settle()
    acked = {"g_spout": [MSG_ID] if kind.emitter == "spout" and kind.tracked else ["A"] if kind.tracked else [],
             "d_far_spout": ["B"] if kind.several else []}
    assert {cid: (s.acked, s.failed) for cid, s in spouts.items()} == {cid: (a, []) for cid, a in acked.items()}
    assert world.pending_trees() == 0 and world.pending_roots() == 0
    assert sum(world.executor(c).stats.executed for c in ("e_one", "c_many", "b_far")) == len(targets)


MATRIX = [(kind_id, dest) for kind_id in KINDS for dest in DESTINATIONS]
TRACKED_MATRIX = [(kind_id, dest) for kind_id in TRACKED_KINDS for dest in DESTINATIONS]


def _ids(pairs: list[tuple[str, str]]) -> list[str]:
    return [f"{kind_id}-to-{dest}" for kind_id, dest in pairs]


# -- every kind of emit to every kind of destination ---------------------------------------------


@pytest.mark.parametrize(("kind_id", "dest"), MATRIX, ids=_ids(MATRIX))
def test_what_an_emit_sends_and_that_its_trees_complete(kind_id, dest):
    check_emit(World(ACKERS["acker-in-each-worker"]), kind_id, dest)


@pytest.mark.parametrize(("kind_id", "dest"), TRACKED_MATRIX, ids=_ids(TRACKED_MATRIX))
def test_trees_tracked_by_an_acker_of_the_other_worker(kind_id, dest):
    # worker 0 has no acker: a new tree's init and every ack of worker 0 cross as AckBatch groups
    world = World(ACKERS["acker-in-the-other-worker"])
    assert world.worker_of(world.ack_sender) == 0 and {world.worker_of(t) for t in world.assignment.acker_tasks} == {1}
    check_emit(world, kind_id, dest)


# -- emits nobody subscribes to --------------------------------------------------------------------


def _fed_trees(world: World, inputs: Sequence[Tuple]) -> int:
    """The trees of g_spout among ``inputs`` (still pending: the test did not ack them)."""
    return sum(1 for tup in inputs if tup.tree_ids and tup.source_task == world.task("g_spout"))


@pytest.mark.parametrize("kind_id", REGULAR_KINDS)
def test_an_emit_nobody_subscribes_to_returns_no_tasks_and_sends_nothing(kind_id):
    world = World()
    kind = KINDS[kind_id]
    inputs = feed(world, kind)
    assert emit(world, kind, ["x", 1], UNSUBSCRIBED, inputs=inputs, ack=False) == []
    world.end_batch(kind.component)
    sent = world.take_sent()
    assert sent.nothing(), sent
    assert all(a.ack_val == 0 for a in inputs)  # no edge: the anchors' trees did not grow
    world.settle()
    source = world.spout("g_spout")
    # a tracked spout tuple that reaches nobody makes no tree: the spout's ack comes at once
    assert (source.acked, source.failed) == ([MSG_ID] if kind_id == "spout-root" else [], [])
    assert world.pending_roots() == _fed_trees(world, inputs)


# -- invalid emits -------------------------------------------------------------------------------


def _arity(kind: Kind, stream: str, world: World) -> tuple[list[Any], str]:
    return [1, 2, 3], (f"component {kind.component!r}, stream {stream!r}: emitted 3 values [1, 2, 3] but the stream "
                       f"declares 2 fields {FIELDS}")


def _undeclared(kind: Kind, stream: str, world: World) -> tuple[list[Any], str]:
    declared = sorted([UNSUBSCRIBED, DIRECT, FEED, "to_far", "to_many", "to_one"])
    return ["x", 1], f"component {kind.component!r} emitted on undeclared stream {stream!r} (declared: {declared})"


def _regular_on_direct(kind: Kind, stream: str, world: World) -> tuple[list[Any], str]:
    return ["x", 1], f"component {kind.component!r}: regular emit on direct stream {stream!r}; use emit_direct"


def _not_subscribed(kind: Kind, stream: str, world: World) -> tuple[list[Any], str]:
    subscribers = sorted(world.tasks("e_one") + world.tasks("c_many") + world.tasks("b_far"))
    return ["x", 1], (f"component {kind.component!r}: emit_direct to task {world.task('f_bystander')}, which does "
                      f"not subscribe to stream {stream!r} (subscribers: {subscribers})")


def _not_direct(kind: Kind, stream: str, world: World) -> tuple[list[Any], str]:
    return ["x", 1], f"component {kind.component!r}: emit_direct on stream {stream!r}, which is not declared direct"


#: case -> (stream, the component whose task an emit_direct names, values and EmitError message)
INVALID = {
    "wrong-arity": ("to_one", "e_one", _arity),
    "wrong-arity-unsubscribed": (UNSUBSCRIBED, "e_one", _arity),
    "wrong-arity-direct": (DIRECT, "e_one", _arity),
    "undeclared-stream": ("no_such_stream", "e_one", _undeclared),
    "regular-emit-on-direct-stream": (DIRECT, "e_one", _regular_on_direct),
    "direct-to-a-non-subscriber": (DIRECT, "f_bystander", _not_subscribed),
    "direct-on-a-stream-not-direct": ("to_one", "e_one", _not_direct),
}
_DIRECT_CASES = {"wrong-arity-direct", "direct-to-a-non-subscriber", "direct-on-a-stream-not-direct"}
INVALID_CASES = [(case, kind_id) for case in INVALID
                 for kind_id in (DIRECT_KINDS if case in _DIRECT_CASES else REGULAR_KINDS)]


@pytest.mark.parametrize(("case", "kind_id"), INVALID_CASES, ids=[f"{c}-by-{k}" for c, k in INVALID_CASES])
def test_an_invalid_emit_raises_a_clear_error_and_sends_nothing(case, kind_id):
    world = World()
    kind = KINDS[kind_id]
    stream, target, error = INVALID[case]
    values, message = error(kind, stream, world)
    inputs = feed(world, kind)
    with pytest.raises(EmitError) as raised:
        emit(world, kind, values, stream, world.task(target) if kind.direct else None, inputs, ack=False)
    assert str(raised.value) == message
    world.end_batch(kind.component)
    assert world.take_sent().nothing()
    assert all(a.ack_val == 0 for a in inputs)  # no edge of a tuple never sent
    world.settle()
    source = world.spout("g_spout")
    # exactly one ack or fail per message id, even for an emit that raised
    assert (source.acked, source.failed) == ([], [MSG_ID] if kind.emitter == "spout" and kind.tracked else [])
    assert world.pending_roots() == _fed_trees(world, inputs)
