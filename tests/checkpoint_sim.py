"""A deterministic harness for the checkpoint protocol: Squall's own workers, run step by step
by a scheduler that chooses the order of every message and where a worker dies.

The workers are :class:`squall.runtime.worker.Worker` objects (the real executors, acker,
collectors, checkpoint spout, barrier alignment and state stores), built but never started:
no thread runs them. A step is one of

* ``("run", w, i)``: executor ``i`` of worker ``w`` runs once (``Executor.run_once(0)``: what
  is queued, and a spout's ``next_tuple``), then the acks its cooperative round combined are
  handed on, as at the end of the worker thread's round;
* ``("send", w)``: worker ``w`` sends what its executors queued for other workers;
* ``("round", w)``: a round of worker ``w``'s thread: each executor runs once, then the sends;
* ``("deliver", link)``: the oldest payload of ``link`` reaches its worker's receive path;
* ``("timeout", w, i)``: the pending trees of spout or acker ``i`` of ``w`` age (a ROTATE);
* ``("kill", w)``: ``kill -9`` of worker ``w``; ``("restart", w)``: its supervisor starts
  its next run (``restarted``, the next incarnation).

Links stand for ZeroMQ between worker processes: one FIFO per (sending run, receiving
worker), and payloads of different links arrive in any order (ZeroMQ takes turns between
connections). A kill loses what the worker held (queues, batches not sent). Of what its run
sent, what already reached a live receiver stays there (a prefix of each link, its length
chosen by the scheduler: the receiver's pipe), the rest is lost; of what was sent to it, a
prefix is lost (it was in the dead process's pipe) and the rest reaches its next run (it
waited in the sender's pipe). ``drop_stale`` is the receive path's rule of
:mod:`squall.runtime.messaging.incarnation`; without it, a dead run's leftovers are delivered after
its next run's payloads.

Time is the harness's too: :func:`simulated_time` gives the checkpoint spout and the spout
executors (their in-flight markers) a clock that moves 1 ms per step.

The topology is the word count the effectively-once promise is about: ``lines`` (a stateful
spout, one list of lines per task, all there from the start: a backlog) -> ``split`` ->
``count`` (a stateful bolt), ``topology.workers`` 3. :meth:`Simulation.check` asserts the
invariant: the committed counts are the word counts of exactly the lines below the committed
positions of the spout's tasks.

``Simulation(..., sink=True)`` adds ``out``, an exactly-once sink (:class:`WordSink`, a
:class:`~squall.api.two_phase_commit.TwoPhaseCommitSink`) fed by ``split`` (fields grouping on
the word): each epoch's words go into a pending part of an outside store
(:class:`SinkStore`, which survives kills), made visible at commit. :meth:`Simulation.check`
then also asserts that the visible words never exceed the words of the lines below the
committed positions, and that no part was made visible twice; :meth:`Simulation.drain` that
in the end the visible words are all the words, exactly.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterator
from typing import Any

import squall.api.checkpoint_spout
import squall.runtime.executor.executor
import squall.runtime.executor.inflight
import squall.runtime.executor.spout_executor
from squall import Fields, TopologyBuilder
from squall.api.system_ids import CHECKPOINT_COMPONENT
from squall.runtime.cluster_state import TopologyState
from squall.api.config import checked_config
from squall.runtime.worker import Worker
from squall.runtime.executor.executor import Control
from squall.runtime.messaging.incarnation import Incarnations, incarnation
from squall.runtime.messaging.transport import Transport
from squall.runtime.assignment import assign
from squall.runtime.serialization import Serializer
from squall.api.state.provider import InMemoryStateProvider
from squall.api.stateful import StatefulSpout
from squall.api.two_phase_commit import TwoPhaseCommitSink
from squall.utils import rand

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's split and count

#: topology name -> per task index of ``lines``, the lines that task reads
SOURCES: dict[str, list[list[str]]] = {}
_names = itertools.count()

#: topology name -> the exactly-once sink's outside store (outside the workers: kills spare it)
STORES: dict[str, SinkStore] = {}

Link = tuple[int, int, int]  # (sending worker, its incarnation, receiving worker)


class _Clock:
    """``time`` as the timed parts of the protocol see it in the harness: 1 ms per step."""

    ns = 10**18

    def monotonic(self) -> float:
        return self.ns / 1e9

    perf_counter = monotonic
    thread_time = monotonic  # a spout's busy time, in steps too

    def time_ns(self) -> int:
        return self.ns


CLOCK = _Clock()


@contextlib.contextmanager
def simulated_time() -> Iterator[None]:
    """While it lasts, the checkpoint spout and the executors read :data:`CLOCK` (which stands
    still within a step: a bolt's slice never ends mid-step, so runs replay alike)."""
    modules = (squall.api.checkpoint_spout, squall.runtime.executor.inflight, squall.runtime.executor.spout_executor,
               squall.runtime.executor.executor)
    real = [module.time for module in modules]
    for module in modules:
        module.time = CLOCK
    try:
        yield
    finally:
        for module, original in zip(modules, real):
            module.time = original


class LineSpout(StatefulSpout):
    """Emits the lines of its task's source, one per call, untracked; its position is in its state."""

    outputs = ["line"]

    def __init__(self, source: str) -> None:
        self.source = source

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.lines = SOURCES[self.source][context.get_this_task_index()]

    def init_state(self, state: Any) -> None:
        self.state = state

    def next_tuple(self) -> None:
        position = self.state.get("position", 0)
        if position < len(self.lines):
            self.collector.emit([self.lines[position]])
            self.state.put("position", position + 1)


class SinkStore:
    """The outside store :class:`WordSink` writes into, as a directory of part files is: parts
    pending (prepared, invisible) and the words made visible, in order."""

    def __init__(self) -> None:
        self.pending: dict[str, list[str]] = {}  # part -> its words
        self.txids: dict[str, int] = {}  # part -> the checkpoint it was prepared for
        self.visible: list[str] = []
        self.visible_parts: list[str] = []  # the parts made visible, in order (each once)
        self.parts = itertools.count()  # part names are never reused, across runs too
        #: sink task ids whose next commit crashes: the part made visible, then the process dies
        self.crash_in_commit: set[int] = set()
        self.log: list[tuple[Any, ...]] = []  # (what, task, part or txid): for messages


class Crash(BaseException):
    """The process dies inside a call (``kill -9`` there): no part of the worker catches it (a
    BaseException), it leaves the step, and the test kills the worker."""


class WordSink(TwoPhaseCommitSink):
    """Writes each epoch's words into a pending part of its :class:`SinkStore` at PREPARE (the
    handle is the part's name), moved to the visible words at commit (a part no longer pending:
    nothing to do, so commits are idempotent); ``abort_prepared`` drops a pending part,
    ``recover`` commits the committed handles, then drops this task's other pending parts (a
    crashed run's leftovers).

    Blocking, as the contract declares it (``TwoPhaseCommitSink.blocking``): in a real worker
    its executor has a thread of its own; here the scheduler runs it like any other, one
    ``run_once(0)`` per step (its queue never fills and the simulated transport is not
    credit-based, so its blocking send path never waits). Unlike a cooperative executor's, its
    acks are sent at the end of each of its runs, not combined with the round's.
    :class:`CooperativeWordSink` is the same sink on the worker's cooperative thread."""

    def __init__(self, store: str) -> None:
        self.store_name = store

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.store = STORES[self.store_name]
        self.task = context.get_this_task_id()
        self.prefix = f"task{self.task}-"
        self.open: dict[str, Any] | None = None  # the epoch's transaction, until its PREPARE or abort

    def begin_transaction(self) -> dict[str, Any]:
        self.open = {"words": []}
        return self.open

    def write(self, transaction: dict[str, Any], tup: Any) -> None:
        transaction["words"].append(tup.values[0])

    def prepare_transaction(self, transaction: dict[str, Any], txid: int) -> str:
        part = f"{self.prefix}{next(self.store.parts)}"
        self.store.pending[part] = list(transaction["words"])
        self.store.txids[part] = txid
        self.open = None
        self.store.log.append(("prepare", self.task, part, txid))
        return part

    def commit_transaction(self, handle: str, txid: int) -> None:
        words = self.store.pending.pop(handle, None)
        self.store.log.append(("commit", self.task, handle, txid, words is not None))
        if words is None:  # visible already (or never prepared): nothing to do
            return
        self.store.visible.extend(words)
        self.store.visible_parts.append(handle)
        if self.task in self.store.crash_in_commit:
            self.store.crash_in_commit.discard(self.task)
            raise Crash(f"sink task {self.task} died inside the commit of {handle} (txid {txid})")

    def abort_transaction(self, transaction: dict[str, Any]) -> None:
        self.open = None

    def abort_prepared(self, handle: str) -> None:
        self.store.log.append(("abort", self.task, handle))
        self.store.pending.pop(handle, None)

    def recover(self, pending: list[tuple[int, str]]) -> None:
        self.store.log.append(("recover", self.task, [list(p) for p in pending]))
        super().recover(pending)
        for part in [p for p in self.store.pending if p.startswith(self.prefix)]:
            self.store.log.append(("leftover", self.task, part))
            del self.store.pending[part]


class CooperativeWordSink(WordSink):
    """:class:`WordSink` declared non-blocking: on the worker's cooperative round, its acks
    combined with the round's."""

    blocking = False


class _SimTransport(Transport):
    """One run's end of the simulated network: what it sends joins its links."""

    def __init__(self, sim: Simulation, index: int, run: int) -> None:
        self._sim = sim
        self._index = index
        self._run = run

    credit_based = False  # the simulated queues never fill

    def register(self, worker: int, grants: Any, credits: Any, bell: Any) -> None:
        pass

    def send(self, dest_worker: int, payload: bytes, source_worker: int) -> None:
        self._sim.links.setdefault((self._index, self._run, dest_worker), deque()).append(payload)

    def receive(self, worker: int, timeout: float) -> list[Any]:
        return []  # the scheduler delivers

    def wait(self, worker: int, bell: Any, timeout: float, backlog: bool = False) -> None:
        bell.disarm()


class _Run:
    """One run of a worker: its Worker object and its receive path's incarnation rule."""

    def __init__(self, sim: Simulation, index: int, run: int) -> None:
        self.run = run
        self.worker = Worker(sim.name, sim.topology, sim.conf, sim.assignment, index, _SimTransport(sim, index, run),
                             sim.state, True, run > 0)
        self.incarnations = Incarnations(index)
        for executor in self.worker.executors:
            if not executor.start_up():
                raise AssertionError(f"{executor.component} failed to start: {executor.setup_error!r}")


class Simulation:
    """The word count on simulated workers; ``lines``: per spout task, its lines; ``seed``:
    of the runtime's randomness (see squall.utils.rand); ``sink``: with the exactly-once sink
    ``out`` (see the module; ``sink_class``: a :class:`WordSink` subclass)."""

    def __init__(self, lines: list[list[str]], drop_stale: bool = True, workers: int = 3, seed: int = 0,
                 sink: bool = False, sink_class: type[WordSink] | None = None) -> None:
        rand.seed(seed)  # tree ids and shuffles: the same steps take the same course
        CLOCK.ns = 10**18
        self.name = f"sim-{next(_names)}"
        SOURCES[self.name] = lines
        self.lines = lines
        self.drop_stale = drop_stale
        builder = TopologyBuilder()
        builder.set_spout("lines", LineSpout(self.name), len(lines))
        builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("lines")
        builder.set_bolt("count", swc.WordCount(), 2).fields_grouping("split", Fields("word"))
        self.sink = sink
        if sink:
            self.store = STORES[self.name] = SinkStore()
            builder.set_bolt("out", (sink_class or WordSink)(self.name), 2).fields_grouping("split", Fields("word"))
        self.topology = builder.create_topology()
        conf = {
            "topology.workers": workers,
            # a PREPARE as soon as the last checkpoint is done: the scheduler sets the pace
            "topology.state.checkpoint.interval.ms": 1e-6,
            # small batches: more places for a barrier, a kill or a reordering to land
            "topology.spout.max.batch.size": 2,
            "topology.producer.batch.size": 2,
            "topology.executor.receive.buffer.size": 1 << 20,
        }
        self.conf = checked_config(self.name, conf, {cid: c.conf for cid, c in self.topology.components.items()})
        self.assignment = assign(self.topology, self.conf)
        self.provider = InMemoryStateProvider(self.name, {})
        layout = {"lines": len(lines), "count": len(self.assignment.component_tasks["count"])}
        if sink:
            layout["out"] = len(self.assignment.component_tasks["out"])
        self.provider.check(layout)
        self.serializer = Serializer.for_config(self.conf)
        self.state = TopologyState()
        self.links: dict[Link, deque[bytes]] = {}
        self.runs: list[_Run | None] = [None] * workers
        self.next_run = [0] * workers
        for index in range(workers):
            self.restart(index)

    # -- the steps ------------------------------------------------------------------------

    def actions(self) -> list[tuple[Any, ...]]:
        """The steps that can be taken now (``kill`` and ``timeout`` always can)."""
        out: list[tuple[Any, ...]] = []
        for index, run in enumerate(self.runs):
            if run is None:
                out.append(("restart", index))
                continue
            out += [("kill", index), ("round", index)]
            for i, executor in enumerate(run.worker.executors):
                out.append(("run", index, i))
                if executor.kind in ("spout", "acker"):
                    out.append(("timeout", index, i))
            if not run.worker.transfer.queue.is_empty():
                out.append(("send", index))
        # the newest links first: a search that prefers early choices tries a new run's payloads
        # before an old run's leftovers
        out += [("deliver", link) for link, payloads in reversed(self.links.items())
                if payloads and self.runs[link[2]] is not None]
        return out

    def step(self, action: tuple[Any, ...], keep: Callable[[int], int] = lambda n: n) -> None:
        """Take ``action``; for a kill, ``keep(n)`` chooses how many of ``n`` payloads of a
        link stay (at the receiver, of what the dead run sent) or are lost (of what was sent
        to it)."""
        kind = action[0]
        CLOCK.ns += 1_000_000
        if kind == "run":
            executor = self.runs[action[1]].worker.executors[action[2]]
            executor.run_once(0)
            if executor.acks.round is not None:
                executor.flush_round_acks()
        elif kind == "send":
            self.runs[action[1]].worker.transfer.send_queued()
        elif kind == "round":
            for i in range(len(self.runs[action[1]].worker.executors)):
                self.step(("run", action[1], i))
            self.step(("send", action[1]))
        elif kind == "deliver":
            self.deliver(action[1])
        elif kind == "timeout":
            self.runs[action[1]].worker.executors[action[2]].queue.force_put(Control(Control.ROTATE))
        elif kind == "kill":
            self.kill(action[1], keep)
        elif kind == "restart":
            self.restart(action[1])
        else:
            raise ValueError(f"no such step: {action!r}")

    def deliver(self, link: Link) -> None:
        source, run, dest = link
        payload = self.links[link].popleft()
        receiver = self.runs[dest]
        if not self.drop_stale or receiver.incarnations.admit(source, incarnation(0, run)):
            receiver.worker.receive.deliver(payload, source, incarnation(0, run))

    def kill(self, index: int, keep: Callable[[int], int]) -> None:
        run = self.runs[index].run
        self.runs[index] = None
        for link, payloads in list(self.links.items()):
            source, source_run, dest = link
            if (source, source_run) == (index, run):
                # what reached a live receiver stays in its pipe; the rest died with the sender
                kept = keep(len(payloads)) if self.runs[dest] is not None else 0
                self.links[link] = deque(itertools.islice(payloads, kept))
            elif dest == index:
                if self.runs[source] is None or self.next_run[source] - 1 != source_run:
                    self.links[link] = deque()  # a dead sender's leftovers lived in the dead receiver
                else:  # a prefix was in the dead process's pipe; the rest waits in the sender's
                    lost = keep(len(payloads))
                    self.links[link] = deque(itertools.islice(payloads, lost, None))

    def restart(self, index: int) -> None:
        self.runs[index] = _Run(self, index, self.next_run[index])
        self.next_run[index] += 1

    def phase(self) -> str:
        """The action of the checkpoint spout's barrier in flight ("between" checkpoints; "down"
        while its worker is dead)."""
        task = self.assignment.component_tasks[CHECKPOINT_COMPONENT][0]
        run = self.runs[self.assignment.task_worker[task]]
        if run is None:
            return "down"
        spout = next(e for e in run.worker.executors if e.component == CHECKPOINT_COMPONENT).spouts[task]
        in_flight = spout.barrier_in_flight
        return "between" if in_flight is None else in_flight[1]

    # -- what is committed ------------------------------------------------------------------

    def committed(self) -> tuple[int | None, dict[int, int], Counter]:
        """The committed txid, the spout tasks' committed positions (by task index) and the
        committed counts."""
        txid = self.provider.committed()
        tasks = self.assignment.component_tasks

        positions = {i: self._read("lines", task, txid).get("position", 0) for i, task in enumerate(tasks["lines"])}
        counts: Counter = Counter()
        for task in tasks["count"]:
            counts.update(self._read("count", task, txid))
        return txid, positions, counts

    def task_state(self, component: str, task: int) -> dict[Any, Any]:
        """The committed state of ``task`` of ``component``."""
        return self._read(component, task, self.provider.committed())

    def _read(self, component: str, task: int, txid: int | None) -> dict[Any, Any]:
        index = self.assignment.component_tasks[component].index(task)
        raw = self.provider.task_store(component, task, index).read(txid)
        return {self.serializer.loads(k): self.serializer.loads(v) for k, v in raw.items()}

    def check(self) -> None:
        """The invariant: committed counts == the counts of the lines below the committed positions
        (with the sink, its invariant too: :meth:`check_sink`)."""
        txid, positions, counts = self.committed()
        expected = Counter(word for i, position in positions.items() for line in self.lines[i][:position]
                           for word in line.split())
        if counts != expected:
            over, under = counts - expected, expected - counts
            raise AssertionError(f"committed txid {txid}, positions {positions}: counts are not those of the lines "
                                 f"below the positions; counted too often {dict(over)}, too rarely {dict(under)}")
        if self.sink:
            self.check_sink(txid, expected)

    def all_words(self) -> Counter:
        """The words of every line."""
        return Counter(word for lines in self.lines for line in lines for word in line.split())

    def check_sink(self, txid: int | None, expected: Counter) -> None:
        """The sink's invariant: what is visible is covered by the committed state (the words of
        the lines below the committed positions, ``expected``), and no part was made visible
        twice."""
        visible = Counter(self.store.visible)
        if not visible <= expected:
            raise AssertionError(f"committed txid {txid}: the sink made visible words the committed state does not "
                                 f"cover (or visible twice): {dict(visible - expected)} beyond the words of the lines "
                                 f"below the committed positions")
        parts = Counter(self.store.visible_parts)
        if any(n > 1 for n in parts.values()):
            raise AssertionError(f"parts made visible twice: {[p for p, n in parts.items() if n > 1]}")

    def sink_tasks(self, worker: int) -> list[WordSink]:
        """The sink tasks of ``worker``'s live run (none if it is dead)."""
        run = self.runs[worker]
        if run is None:
            return []
        return [bolt for e in run.worker.executors if e.component == "out" for bolt in e.bolts.values()]

    def done(self) -> bool:
        """Whether every line is committed."""
        _, positions, _ = self.committed()
        return all(positions[i] == len(lines) for i, lines in enumerate(self.lines))

    def rounds(self, n: int, timeout_every: int = 25) -> bool:
        """Up to ``n`` fair rounds: every worker runs a round (spouts' and ackers' trees time
        out every ``timeout_every`` rounds), then every payload is delivered, the newest
        links first (a new run's payloads before a dead run's leftovers, as ZeroMQ may take
        them). Checks the invariant each round; True as soon as every line is committed."""
        for n in range(n):
            self._fair_round(n % timeout_every == timeout_every - 1)
            if self.done():
                return True
        return False

    def _fair_round(self, timeout: bool) -> None:
        """A fair round of :meth:`rounds` (with a timeout of the pending trees first)."""
        for index, run in enumerate(self.runs):
            if timeout:
                for i, executor in enumerate(run.worker.executors):
                    if executor.kind in ("spout", "acker"):
                        self.step(("timeout", index, i))
            self.step(("round", index))
        while deliveries := [a for a in self.actions() if a[0] == "deliver"]:
            self.step(deliveries[0])
        self.check()

    def drain(self, rounds: int = 400) -> bool:
        """Restart the dead, then run fair rounds until every line is committed; whether that
        happened within ``rounds``."""
        for index, run in enumerate(self.runs):
            if run is None:
                self.restart(index)
        if not self.rounds(rounds):
            return False
        if self.sink:
            self.settle_sink()
        return True

    def settle_sink(self, rounds: int = 100, timeout_every: int = 25) -> None:
        """Every line committed: fair rounds until every sink task has recovered since its run
        started (a restarted task's recovery commits, or drops, what its earlier run left) and
        the last COMMIT reached the sink's tasks (up to ``rounds``); then the visible words
        must be all the words, exactly."""
        everything = self.all_words()
        for n in range(rounds):
            if Counter(self.store.visible) == everything and self.sink_recovered():
                return
            self._fair_round(n % timeout_every == timeout_every - 1)
        visible = Counter(self.store.visible)
        if visible != everything:
            raise AssertionError(f"every line committed (txid {self.provider.committed()}), but after {rounds} more "
                                 f"rounds the visible words are not all the words: missing {dict(everything - visible)}"
                                 f", extra {dict(visible - everything)}; pending parts {self.store.pending}")
        if not self.sink_recovered():
            raise AssertionError(f"the sink's tasks have not all recovered after {rounds} more rounds")

    def sink_recovered(self) -> bool:
        """Whether every sink executor saw an INITSTATE or a ROLLBACK since its run started."""
        return all(e.checkpointing.recovered for run in self.runs if run is not None
                   for e in run.worker.executors if e.component == "out")
