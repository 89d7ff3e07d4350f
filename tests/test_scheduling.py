"""Who runs a worker's executors: one cooperative thread for all of them, a thread of its own
for each executor of a blocking component (``set_blocking``, the ``blocking`` attribute,
ShellBolt), or a thread per executor (``topology.worker.cooperative`` false).

What is checked: a blocking component never stalls the others, declared or not (a stuck
call on the cooperative thread hands the others to a new one, and what waits on the stuck
one's queue keeps its order); local hand-offs keep per-task order and apply backpressure,
cooperatively or with threads; tick tuples arrive on time in a busy worker; a bolt's own
threads emit and ack through its collector (and wait on a full destination); where each
executor runs; results do not depend on the mode.

Components record the thread they run on (``Spied``) and what they emitted and executed
(``COUNTERS``); all of a worker's cooperative executors run on one thread, so counters they
keep are consistent with each other when read from any of them.
"""

from __future__ import annotations

import queue
import sys
import textwrap
import threading
import time
from collections import Counter

import pytest

from helpers import COUNTERS, LOG, STOP, WAIT, RecordSink, errors_of, logged, record
from squall import Bolt, Config, InvalidTopologyError, Spout, TopologyBuilder
from squall.multilang import ShellBolt
from squall.testing import complete_topology, read_tuples, wait_until

GO = threading.Event()  # gated spouts emit only once it is set
GATE = threading.Event()  # GatedBolt's execute returns only once it is set

BLOCKING = "topology.component.blocking"
COOPERATIVE = "topology.worker.cooperative"


@pytest.fixture(autouse=True)
def _events():
    GO.clear()
    GATE.clear()
    yield
    GO.set()


@pytest.fixture
def gate(cluster):
    """GATE, set again before the cluster stops (a bolt stuck on it would hold the stop up)."""
    yield GATE
    GATE.set()


def small_queues(capacity: int, batch: int) -> Config:
    conf = Config()
    conf[Config.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE] = capacity
    conf[Config.TOPOLOGY_PRODUCER_BATCH_SIZE] = batch
    conf[Config.TOPOLOGY_SPOUT_MAX_BATCH_SIZE] = batch
    return conf


def burn(iterations: int) -> int:
    """CPU work (a bolt slower than its spout without sleeping)."""
    x = 0
    for i in range(iterations):
        x += i * i
    return x


def unchanged_for(read, secs: float):
    """A condition for wait_until: true once ``read()`` has kept its value for ``secs``."""
    state = {"value": object(), "since": 0.0}

    def condition() -> bool:
        value, now = read(), time.monotonic()
        if value != state["value"]:
            state.update(value=value, since=now)
        return now - state["since"] >= secs

    return condition


# -- where things run ----------------------------------------------------------------------------


class Spied:
    """Records ``(task, thread ident)`` under ``("thread", component)`` whenever a method of the
    task runs on another thread than the last one (call ``spied_as`` in open/prepare, ``spy``
    in the other methods)."""

    def spied_as(self, context) -> None:
        self.component = context.get_this_component_id()
        self.task = context.get_this_task_id()
        self._ident = None
        self.spy()

    def spy(self) -> None:
        ident = threading.get_ident()
        if ident != self._ident:
            self._ident = ident
            record(("thread", self.component), (self.task, ident))

    def task_counter(self, kind: str) -> dict[int, int]:
        """COUNTERS[(kind, component)], where this task counts from 0."""
        counts = COUNTERS[(kind, self.component)]
        counts[self.task] = 0
        return counts


class SpiedBolt(Spied, Bolt):
    def prepare(self, conf, context, collector):
        self.spied_as(context)
        self.collector = collector


def threads_by_task(component: str) -> dict[int, set[int]]:
    """Task of ``component`` -> idents of the threads its methods ran on."""
    by_task: dict[int, set[int]] = {}
    for task, ident in logged(("thread", component)):
        by_task.setdefault(task, set()).add(ident)
    return by_task


def only_thread(*components: str) -> int:
    """The one thread every task of ``components`` ran on (asserted)."""
    idents = {i for c in components for idents in threads_by_task(c).values() for i in idents}
    assert len(idents) == 1, f"{components} ran on {len(idents)} threads, expected one"
    return idents.pop()


def total(counter_key) -> int:
    return sum(COUNTERS[counter_key].copy().values())  # copy: atomic, while other threads add keys


def seen(component: str) -> dict[int, list]:
    """Origin (spout task) -> the n ``component`` (an OrderBolt) recorded from it, in arrival order."""
    return {key[2]: list(values) for key, values in LOG.copy().items() if key[:2] == ("seen", component)}


def emitted(spout: str) -> int:
    return total(("emitted", spout))


def executed(bolt: str) -> int:
    return total(("executed", bolt))


# -- components ----------------------------------------------------------------------------------


class NumberSpout(Spied, Spout):
    """Emits [n] (n = 0, 1, ... per task): ``limit`` tuples per task, or until STOP (then
    records its task under ("stopped", component), once); only while GO is set if ``gated``.
    ``payload`` > 0 adds a second field of that many characters; ``reliable``: message id n,
    acked / failed ids recorded under "acked" / "failed". Counts its emits per task in
    COUNTERS[("emitted", component)]."""

    def __init__(self, limit: int | None = None, gated: bool = False, payload: int = 0, reliable: bool = False):
        self.limit = limit
        self.gated = gated
        self.payload = payload
        self.reliable = reliable

    def declare_output_fields(self, declarer):
        declarer.declare(["n", "payload"] if self.payload else ["n"])

    def open(self, conf, context, collector):
        self.spied_as(context)
        self.collector = collector
        self.n = 0
        self.stopped = False
        self.counts = self.task_counter("emitted")
        self.filler = "x" * self.payload

    def next_tuple(self):
        self.spy()
        if STOP.is_set():
            if not self.stopped:
                self.stopped = True
                record(("stopped", self.component), self.task)
            return
        if (self.gated and not GO.is_set()) or (self.limit is not None and self.n >= self.limit):
            return
        self.collector.emit([self.n, self.filler] if self.payload else [self.n],
                            msg_id=self.n if self.reliable else None)
        self.n += 1
        self.counts[self.task] = self.n

    def ack(self, msg_id):
        record("acked", msg_id)

    def fail(self, msg_id):
        record("failed", msg_id)


class OrderBolt(SpiedBolt):
    """Does ``work`` (CPU) per input [n] or [n, origin] (origin: the spout task a Relay got n
    from; else the source task is the origin); checks that the n of each (source task, origin)
    arrive strictly increasing (violations under "out-of-order"); with ``keep``, records n
    under ("seen", component, origin). Counts executes per task in COUNTERS[("executed",
    component)] and, per task, the largest emitted(``source``) - executed(component) it saw
    in COUNTERS[("max-in-flight", component)]. Acks every input."""

    def __init__(self, source: str | None = None, work: int = 0, keep: bool = True):
        self.source = source
        self.work = work
        self.keep = keep

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.last: dict[tuple[int, int], int] = {}
        self.executed = self.task_counter("executed")
        self.max_in_flight = self.task_counter("max-in-flight")
        self.emitted = COUNTERS[("emitted", self.source)]

    def execute(self, tup):
        self.spy()
        burn(self.work)
        n, origin = tup.values[0], tup.values[1] if len(tup.values) > 1 else tup.source_task
        key = (tup.source_task, origin)
        if n <= self.last.get(key, -1):
            record("out-of-order", (self.component, self.task, key, self.last[key], n))
        self.last[key] = n
        if self.keep:
            record(("seen", self.component, origin), n)
        self.executed[self.task] += 1
        if self.source is not None:
            in_flight = sum(self.emitted.copy().values()) - sum(self.executed.copy().values())
            if in_flight > self.max_in_flight[self.task]:
                self.max_in_flight[self.task] = in_flight
        self.collector.ack(tup)


class PassBolt(SpiedBolt):
    """Re-emits its input's first value, anchored, and acks it; counts its executes per task
    in COUNTERS[("executed", component)]."""

    outputs = ["n"]

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.executed = self.task_counter("executed")

    def execute(self, tup):
        self.spy()
        self.collector.emit([tup.values[0]], anchors=tup)
        self.collector.ack(tup)
        self.executed[self.task] += 1


class BlockingPassBolt(PassBolt):
    blocking = True


class Relay(SpiedBolt):
    """For an input [n] from spout task origin, emits [n * fanout + i, origin] for i < fanout;
    counts its emits per task in COUNTERS[("emitted", component)]."""

    outputs = ["n", "origin"]

    def __init__(self, fanout: int = 1):
        self.fanout = fanout

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = self.task_counter("emitted")

    def execute(self, tup):
        self.spy()
        first = tup.values[0] * self.fanout
        for n in range(first, first + self.fanout):
            self.collector.emit([n, tup.source_task], anchors=tup)
        self.counts[self.task] += self.fanout
        self.collector.ack(tup)


class GatedBolt(SpiedBolt):
    """Records n under "gated-entered", waits for GATE, records n under "gated-done", acks."""

    def execute(self, tup):
        self.spy()
        record("gated-entered", tup.values[0])
        GATE.wait(30)
        record("gated-done", tup.values[0])
        self.collector.ack(tup)


class TickTimes(SpiedBolt):
    """Every 0.1 s a tick: records (time.monotonic(), executed(``busy``)) under "ticks"."""

    def __init__(self, busy: str):
        self.busy = busy

    def get_component_configuration(self):
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 0.1}

    def execute(self, tup):
        self.spy()
        if tup.is_tick():
            record("ticks", (time.monotonic(), executed(self.busy)))
        self.collector.ack(tup)


class CountingSink(RecordSink):
    """Records the first value of every input under ``key``, counts them in COUNTERS[key]["n"]."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.counts = COUNTERS[self.key]
        self.counts["n"] = 0

    def keep(self, tup):
        burn(200)  # slower than the emitting thread: its destination fills up
        super().keep(tup)
        self.counts["n"] += 1


class OwnThreadEmitter(Bolt):
    """prepare starts a thread of the bolt's own that emits [0] .. [count - 1], unanchored,
    through the OutputCollector; after each emit it records the largest emitted - received by
    ``sink_key`` (a CountingSink) in COUNTERS["own"]["max-in-flight"]. Records executed(``beside``)
    under "beside" as it starts and as it ends."""

    outputs = ["n"]

    def __init__(self, count: int, sink_key: str, beside: str):
        self.count = count
        self.sink_key = sink_key
        self.beside = beside

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.stats = COUNTERS["own"]
        self.stats["max-in-flight"] = 0
        self.thread = threading.Thread(target=self._emit_all, name="own-emitter", daemon=True)
        self.thread.start()

    def _emit_all(self):
        record("own-thread", threading.get_ident())
        record("beside", executed(self.beside))
        received = COUNTERS[self.sink_key]
        for n in range(self.count):
            self.collector.emit([n])
            in_flight = n + 1 - received.get("n", 0)
            if in_flight > self.stats["max-in-flight"]:
                self.stats["max-in-flight"] = in_flight
        record("beside", executed(self.beside))
        record("own-done", True)

    def execute(self, tup):
        self.collector.ack(tup)

    def cleanup(self):
        self.thread.join(5)


class AsyncAckBolt(Bolt):
    """Storm's asynchronous pattern: execute only stores the input; a thread of the bolt's
    own emits [n] anchored to it, then acks it."""

    outputs = ["n"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.inbox = queue.SimpleQueue()
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._work, name="async-acker", daemon=True)
        self.thread.start()

    def execute(self, tup):
        record("async-execute", threading.get_ident())
        self.inbox.put(tup)

    def _work(self):
        record("async-worker", threading.get_ident())
        while not self.closing.is_set():
            try:
                tup = self.inbox.get(timeout=0.05)
            except queue.Empty:
                continue
            self.collector.emit([tup.values[0]], anchors=tup)
            self.collector.ack(tup)

    def cleanup(self):
        self.closing.set()
        self.thread.join(5)


# -- 1. a blocking bolt does not stall the others ---------------------------------------------------


def test_a_blocked_blocking_bolt_does_not_stall_the_rest_of_the_worker(cluster, gate):
    slow_count, n = 200, 500
    capacity, batch = 16, 4
    b = TopologyBuilder()
    b.set_spout("slow-spout", NumberSpout(limit=slow_count))
    b.set_spout("fast-spout", NumberSpout(limit=n, gated=True))
    b.set_bolt("slow", GatedBolt()).set_blocking(True).shuffle_grouping("slow-spout")
    b.set_bolt("fast1", PassBolt()).shuffle_grouping("fast-spout")
    b.set_bolt("fast2", PassBolt()).shuffle_grouping("fast1")
    b.set_bolt("sink", OrderBolt()).shuffle_grouping("fast2")
    cluster.submit_topology("t", small_queues(capacity, batch), b.create_topology())

    wait_until(lambda: logged("gated-entered") == [0], WAIT, message="slow stuck in its first execute")
    GO.set()  # the fast chain starts only now: all of its work happens while slow is stuck
    wait_until(lambda: executed("sink") == n, WAIT, message="the fast chain delivered everything")
    assert logged("gated-entered") == [0] and logged("gated-done") == []  # slow was stuck all along
    # slow-spout is held back by slow's full queue (backpressure) instead of running ahead
    assert emitted("slow-spout") < slow_count
    assert list(seen("sink").values()) == [list(range(n))]  # in order, each once

    gate.set()
    wait_until(lambda: len(logged("gated-done")) == slow_count, WAIT, message="slow got every tuple")
    assert logged("gated-done") == list(range(slow_count))
    # the spout counts an emit once it returned, and the last one hands its batch on inside it: slow,
    # on its own thread, may have executed it before that count is made
    wait_until(lambda: emitted("slow-spout") == slow_count, WAIT, message="the last emit counted")

    cooperative = only_thread("slow-spout", "fast-spout", "fast1", "fast2", "sink")
    slow = only_thread("slow")
    assert slow != cooperative
    assert logged("out-of-order") == []
    assert errors_of(cluster, "t", "slow") == []


@pytest.mark.parametrize("reliable", [False, True], ids=["unreliable", "reliable"])
def test_a_bolt_stuck_on_the_cooperative_thread_keeps_it_and_the_rest_moves_to_a_new_one(cluster, gate, reliable,
                                                                                          caplog):
    """Not declared blocking, the gated bolt blocks the cooperative thread: the watchdog hands
    the worker's other executors to a new cooperative thread, the stuck bolt keeps the old one
    alone, and the hand-off is logged naming it. With acking, every tree of the fast chain
    completes (its round's acks move with it)."""
    caplog.set_level("WARNING", logger="squall.worker")
    slow_count, n = 200, 500
    b = TopologyBuilder()
    b.set_spout("slow-spout", NumberSpout(limit=slow_count))
    b.set_spout("fast-spout", NumberSpout(limit=n, gated=True, reliable=reliable))
    b.set_bolt("slow", GatedBolt()).shuffle_grouping("slow-spout")
    b.set_bolt("fast1", PassBolt()).shuffle_grouping("fast-spout")
    b.set_bolt("fast2", PassBolt()).shuffle_grouping("fast1")
    b.set_bolt("sink", OrderBolt()).shuffle_grouping("fast2")
    conf = small_queues(16, 4)
    conf["topology.worker.handoff.secs"] = 0.05
    cluster.submit_topology("t", conf, b.create_topology())

    wait_until(lambda: logged("gated-entered") == [0], WAIT, message="slow stuck in its first execute")
    started = only_thread("slow-spout", "fast-spout", "fast1", "fast2", "sink", "slow")  # all on one thread

    def stalls() -> list[str]:
        return [r.getMessage() for r in caplog.records if "made no progress" in r.getMessage()]

    wait_until(stalls, WAIT, message="the hand-off")
    GO.set()  # the fast chain starts only now: all of its work happens while slow is stuck
    wait_until(lambda: executed("sink") == n, WAIT, message="the fast chain delivered everything")
    if reliable:
        wait_until(lambda: sorted(logged("acked")) == list(range(n)), WAIT, message="every fast tree acked")
    assert logged("gated-entered") == [0] and logged("gated-done") == []  # slow was stuck all along
    assert list(seen("sink").values()) == [list(range(n))]  # in order, each once
    [stall] = stalls()
    assert "a call into slow" in stall and "moved to a new thread" in stall and "set_blocking(True)" in stall

    gate.set()
    wait_until(lambda: len(logged("gated-done")) == slow_count, WAIT, message="slow got every tuple")
    assert logged("gated-done") == list(range(slow_count))
    assert only_thread("slow") == started  # the stuck bolt kept its thread
    moved = {i for c in ("slow-spout", "fast-spout", "fast1", "fast2", "sink") for idents in threads_by_task(c).values()
             for i in idents} - {started}
    assert len(moved) == 1  # the rest moved to one new thread
    assert logged("out-of-order") == [] and logged("failed") == []


class PacedSpout(NumberSpout):
    """Emits [n] up to ``window`` ahead of what ``bolt`` executed until GO is set, then the rest
    (up to ``limit``) at once."""

    def __init__(self, limit: int, bolt: str, window: int):
        super().__init__(limit=limit)
        self.bolt, self.window = bolt, window

    def next_tuple(self):
        if not GO.is_set() and self.n >= executed(self.bolt) + self.window:
            return
        super().next_tuple()


class StallingOrderBolt(OrderBolt):
    """An OrderBolt slow on every input (2 ms), stuck at n == ``stall_at`` until GATE is set
    (records n under "gated-entered" then)."""

    def __init__(self, stall_at: int):
        super().__init__()
        self.stall_at = stall_at

    def execute(self, tup):
        time.sleep(0.002)  # slow: what it took waits for its next turns, more queues behind it
        if tup.values[0] == self.stall_at:
            record("gated-entered", tup.values[0])
            GATE.wait(30)
        super().execute(tup)


def test_a_bolt_stuck_with_input_queued_gets_it_in_order_after_the_hand_off(cluster, gate, caplog):
    """What the upstream bolt put on the stuck bolt's queue from the cooperative thread comes
    before what it puts from its new thread after the hand-off (a checkpoint barrier must
    never overtake the tuples before it on a channel)."""
    caplog.set_level("WARNING", logger="squall.worker")
    n = 400
    b = TopologyBuilder()
    b.set_spout("numbers", PacedSpout(limit=n, bolt="slow", window=80))
    b.set_bolt("pass", PassBolt()).shuffle_grouping("numbers")
    b.set_bolt("slow", StallingOrderBolt(stall_at=100)).shuffle_grouping("pass")
    conf = small_queues(1000, 4)
    conf[Config.TOPOLOGY_SPOUT_MAX_BATCH_SIZE] = 64  # the spout runs ahead: slow's queue holds its tuples
    conf["topology.worker.handoff.secs"] = 0.05
    cluster.submit_topology("t", conf, b.create_topology())

    wait_until(lambda: logged("gated-entered") == [100], WAIT, message="slow stuck at 100")
    wait_until(lambda: any("made no progress" in r.getMessage() for r in caplog.records), WAIT,
               message="the hand-off")
    GO.set()  # the rest goes through pass on its new thread, onto slow's queue behind what waits there
    wait_until(lambda: executed("pass") == n, WAIT, message="pass executed everything")
    gate.set()
    wait_until(lambda: executed("slow") == n, WAIT, message="slow executed everything")
    assert logged("out-of-order") == []
    assert list(seen("slow").values()) == [list(range(n))]


# -- 2. a ShellBolt has a thread of its own ---------------------------------------------------------

HANG_SCRIPT = r'''
import os, sys, time
from pystorm import Bolt

RELEASE = sys.argv[1]


class HangBolt(Bolt):
    """Emits [n] for each input [n, payload]; the first input makes it wait (reading nothing
    more from stdin) until the file RELEASE exists."""

    def process(self, tup):
        while not os.path.exists(RELEASE):
            time.sleep(0.01)
        self.emit([tup.values[0]])


if __name__ == "__main__":
    HangBolt(serializer="json").run()
'''


class WatchedShellBolt(Spied, ShellBolt):
    """A ShellBolt recording each execute's n under "shell-entered" and, once it returned,
    "shell-returned"."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.spied_as(context)

    def execute(self, tup):
        self.spy()
        record("shell-entered", tup.values[0])
        super().execute(tup)
        record("shell-returned", tup.values[0])


@pytest.fixture
def release(cluster, tmp_path):
    """The file HangBolt waits for; made at the latest before the cluster stops (a failed test
    must not leave the subprocess, nor the bolt's execute, waiting)."""
    path = tmp_path / "release"
    yield path
    path.touch()


@pytest.mark.processes
def test_a_shell_bolt_whose_subprocess_hangs_does_not_stall_the_worker(cluster, tmp_path, release):
    script = tmp_path / "hang.py"
    script.write_text(textwrap.dedent(HANG_SCRIPT))
    big, n = 40, 300
    b = TopologyBuilder()
    # 40 tuples of 64 KiB: more than the pipe to the hung subprocess holds, so execute blocks
    b.set_spout("shell-spout", NumberSpout(limit=big, payload=1 << 16))
    b.set_spout("fast-spout", NumberSpout(limit=n, gated=True))
    b.set_bolt("shell", WatchedShellBolt(sys.executable, str(script), str(release), outputs=["n"])).add_configuration(
        "topology.shellbolt.max.pending", 1).shuffle_grouping("shell-spout")
    b.set_bolt("shell-sink", OrderBolt()).shuffle_grouping("shell")
    b.set_bolt("fast1", PassBolt()).shuffle_grouping("fast-spout")
    b.set_bolt("sink", OrderBolt()).shuffle_grouping("fast1")
    cluster.submit_topology("t", Config(), b.create_topology())

    def shell_calls():
        return len(logged("shell-entered")), len(logged("shell-returned"))

    settled = unchanged_for(shell_calls, 0.3)
    wait_until(lambda: settled() and shell_calls()[0] > 0, WAIT, message="the shell bolt's execute blocked")
    stuck = shell_calls()
    assert stuck[0] == stuck[1] + 1 and stuck[1] < big, stuck  # inside an execute that does not return
    GO.set()
    wait_until(lambda: executed("sink") == n, WAIT, message="the fast chain delivered everything")
    assert shell_calls() == stuck  # the same execute call was blocked the whole time
    assert executed("shell-sink") == 0

    release.touch()
    wait_until(lambda: executed("shell-sink") == big, 20, message="the shell bolt caught up")
    assert list(seen("shell-sink").values()) == [list(range(big))]
    cooperative = only_thread("shell-spout", "fast-spout", "fast1", "sink", "shell-sink")
    assert only_thread("shell") != cooperative
    assert logged("out-of-order") == []
    assert errors_of(cluster, "t", "shell") == []


# -- 3. local hand-offs: per-task order, nothing lost, backpressure ----------------------------------


@pytest.mark.parametrize("cooperative, spout_batch", [(True, 8), (True, 1000), (False, 8)],
                         ids=["cooperative", "cooperative-long-spout-rounds", "threads"])
def test_local_edges_keep_per_task_order_and_apply_backpressure(cluster, cooperative, spout_batch):
    """With spout batches of 8, a cooperative round hands on less than the queues hold; with
    1000 (a round's worth is more than the queues hold) only backpressure holds the spout back."""
    capacity, batch, at_least = 32, 8, 6000
    conf = small_queues(capacity, batch)
    conf[Config.TOPOLOGY_SPOUT_MAX_BATCH_SIZE] = spout_batch
    conf[Config.TOPOLOGY_ACKER_EXECUTORS] = 0
    conf[COOPERATIVE] = cooperative
    b = TopologyBuilder()
    # 3 tasks on 2 executors each: batches of bare tuples and of (task, tuple) pairs
    b.set_spout("numbers", NumberSpout(), 2).set_num_tasks(3)
    b.set_bolt("relay", Relay(), 2).set_num_tasks(3).shuffle_grouping("numbers")
    b.set_bolt("order", OrderBolt("numbers", work=150), 2).set_num_tasks(3).shuffle_grouping("relay")
    cluster.submit_topology("t", conf, b.create_topology())

    wait_until(lambda: executed("order") >= at_least, 20, message=f"{at_least} tuples executed")
    STOP.set()
    wait_until(lambda: len(logged(("stopped", "numbers"))) == 3, WAIT, message="every spout task stopped")
    wait_until(lambda: executed("order") == emitted("numbers"), WAIT, message="the bolts caught up")

    assert logged("out-of-order") == []
    per_task = COUNTERS[("emitted", "numbers")]
    assert len(per_task) == 3
    received = seen("order")
    for origin, count in per_task.items():
        assert sorted(received[origin]) == list(range(count)), f"spout task {origin}: lost or repeated tuples"
    # The spout never stops on its own and the relay is faster than the last bolt: only
    # backpressure held them back. Emitted but not executed: at most what four queues
    # (capacity + a batch or two each) and the batches taken from them hold, plus the
    # executors' partial batches and overflows (a round's output each).
    bound = 400
    max_in_flight = max(COUNTERS[("max-in-flight", "order")].values())
    assert 0 < max_in_flight <= bound, f"{max_in_flight} tuples emitted but not executed"
    assert bound < at_least // 10
    components = ("numbers", "relay", "order")
    if cooperative:
        only_thread(*components)
    else:
        idents = {i for c in components for idents in threads_by_task(c).values() for i in idents}
        assert len(idents) == 6  # one per executor


@pytest.mark.parametrize("cooperative", [True, False], ids=["cooperative", "threads"])
def test_a_bolt_whose_output_cannot_be_handed_on_takes_no_new_input(cluster, cooperative):
    """A relay emitting 10 tuples per input into a slower bolt: its output overflows the
    bolt's queue, and it must stop taking input until that is handed on."""
    capacity, batch, fanout, at_least = 32, 8, 10, 20000
    conf = small_queues(capacity, batch)
    conf[Config.TOPOLOGY_ACKER_EXECUTORS] = 0
    conf[COOPERATIVE] = cooperative
    b = TopologyBuilder()
    b.set_spout("numbers", NumberSpout())
    b.set_bolt("fanout", Relay(fanout)).shuffle_grouping("numbers")
    b.set_bolt("order", OrderBolt("fanout", work=50)).shuffle_grouping("fanout")
    cluster.submit_topology("t", conf, b.create_topology())

    wait_until(lambda: executed("order") >= at_least, 20, message=f"{at_least} tuples executed")
    STOP.set()
    wait_until(lambda: len(logged(("stopped", "numbers"))) == 1, WAIT, message="the spout stopped")
    wait_until(lambda: executed("order") == fanout * emitted("numbers"), WAIT, message="the bolts caught up")

    assert logged("out-of-order") == []
    ((origin, count),) = COUNTERS[("emitted", "numbers")].items()
    assert sorted(seen("order")[origin]) == list(range(count * fanout))  # each once
    # the relay's output not executed yet: what one input batch (a queue's worth) made, plus
    # the bolt's queue and the batch it took; with no backpressure it grows without bound
    bound = fanout * (capacity + 2 * batch) + 2 * (capacity + 2 * batch)
    max_in_flight = max(COUNTERS[("max-in-flight", "order")].values())
    assert 0 < max_in_flight <= bound, f"{max_in_flight} tuples emitted by the relay but not executed"
    assert bound < at_least // 10


# -- 4. ticks on time in a busy worker ----------------------------------------------------------------


def test_ticks_arrive_on_time_while_the_worker_is_busy(cluster):
    b = TopologyBuilder()
    b.set_spout("numbers", NumberSpout())  # as fast as it is let
    b.set_bolt("busy", OrderBolt("numbers", work=300, keep=False)).shuffle_grouping("numbers")
    b.set_bolt("ticked", TickTimes("busy"))  # no inputs: ticks only
    cluster.submit_topology("t", Config(), b.create_topology())

    wait_until(lambda: executed("busy") > 0, WAIT, message="the worker busy")
    busy_since = time.monotonic()

    def ticks():
        return [tick for tick in logged("ticks") if tick[0] > busy_since]

    def enough():
        # the timer makes up for periods it missed (a starved timer thread's ticks come
        # together): 5 ticks at least, and over 0.4 s at least
        recent = ticks()
        return len(recent) >= 5 and recent[-1][0] - recent[0][0] >= 0.4

    wait_until(enough, 10, message="5 ticks over 0.4 s")
    ticks = ticks()
    t0 = ticks[0][0]
    seen_ticks = [(round(t - t0, 3), busy) for t, busy in ticks]  # (secs since the first, busy's executes)
    gaps = [later - earlier for (earlier, _), (later, _) in zip(ticks, ticks[1:])]
    assert all(gap < 1.0 for gap in gaps), seen_ticks
    assert ticks[-1][1] - ticks[0][1] >= 500, seen_ticks  # busy executed many tuples meanwhile
    only_thread("numbers", "busy", "ticked")  # the busy thread is the one that delivered the ticks
    assert logged("out-of-order") == []


# -- 5. a bolt's own threads use its collector ------------------------------------------------------


def test_own_thread_emits_wait_for_a_full_destination_and_arrive_once_in_order(cluster):
    count = 999  # not a multiple of the batch size: the last emits make a partial batch
    capacity, batch = 8, 4
    b = TopologyBuilder()
    b.set_spout("numbers", NumberSpout())  # until STOP: the chain runs all the while
    b.set_bolt("chain", OrderBolt()).shuffle_grouping("numbers")
    b.set_bolt("emitter", OwnThreadEmitter(count, "own-sink", beside="chain"))
    b.set_bolt("own-sink", CountingSink("own-sink")).shuffle_grouping("emitter")
    cluster.submit_topology("t", small_queues(capacity, batch), b.create_topology())

    wait_until(lambda: logged("own-done") == [True], WAIT, message="the own thread emitted everything")
    wait_until(lambda: COUNTERS["own-sink"]["n"] >= count, WAIT, message="the sink got everything")
    STOP.set()
    wait_until(lambda: logged(("stopped", "numbers")), WAIT, message="the spout stopped")
    wait_until(lambda: executed("chain") == emitted("numbers"), WAIT, message="the chain caught up")
    assert logged("own-sink") == list(range(count))  # exactly once, in order
    assert list(seen("chain").values()) == [list(range(emitted("numbers")))]
    before, after = logged("beside")
    assert after > before  # the worker thread ran the chain while the own thread emitted
    # the own thread filled the sink's queue, and then waited for room after its emits
    # instead of piling tuples up: what it emitted but the sink had not received stayed
    # about the queue's size (the sink is slower than the emitting thread)
    max_in_flight = COUNTERS["own"]["max-in-flight"]
    assert capacity <= max_in_flight <= 3 * (capacity + batch), max_in_flight
    assert logged("own-thread")[0] != only_thread("numbers", "chain")
    assert errors_of(cluster, "t", "emitter") == []


def test_own_thread_acks_complete_every_tree(cluster):
    count = 500
    conf = small_queues(16, 4)
    b = TopologyBuilder()
    b.set_spout("spout", NumberSpout(limit=count, reliable=True))
    b.set_bolt("async", AsyncAckBolt()).shuffle_grouping("spout")
    b.set_bolt("sink", RecordSink("sink")).shuffle_grouping("async")
    cluster.submit_topology("t", conf, b.create_topology())

    wait_until(lambda: len(logged("acked")) == count, WAIT, message="every tree acked")
    assert sorted(logged("acked")) == list(range(count))  # each once
    assert logged("failed") == []
    assert Counter(logged("sink")) == Counter(range(count))
    executes, workers = set(logged("async-execute")), set(logged("async-worker"))
    assert len(executes) == 1 and len(workers) == 1 and executes != workers
    assert errors_of(cluster, "t", "async") == []


# -- 6. which thread runs which executor ---------------------------------------------------------------


def _placement_topology():
    b = TopologyBuilder()
    b.set_spout("spout", NumberSpout(limit=20))
    b.set_spout("blocking-spout", NumberSpout(limit=20)).set_blocking(True)
    b.set_bolt("declared", PassBolt(), 2).set_blocking(True).all_grouping("spout")
    b.set_bolt("by-class", BlockingPassBolt()).all_grouping("spout")
    b.set_bolt("overridden", BlockingPassBolt()).set_blocking(False).all_grouping("spout")
    b.set_bolt("plain", PassBolt(), 2).all_grouping("spout").all_grouping("blocking-spout")
    return b.create_topology()


BOLTS = {"declared": (2, 20), "by-class": (1, 20), "overridden": (1, 20), "plain": (2, 40)}  # tasks, inputs each


def _run_placement(cluster, conf) -> dict[str, list[set[int]]]:
    """Component -> the idents of the threads each of its tasks ran on (open/prepare and every
    call since), once every bolt task executed every input."""
    cluster.submit_topology("t", conf, _placement_topology())

    def all_executed():
        return all(sorted(COUNTERS[("executed", c)].copy().values()) == [inputs] * tasks
                   for c, (tasks, inputs) in BOLTS.items())

    wait_until(all_executed, WAIT, message="every bolt task executed every input")
    return {c: list(threads_by_task(c).values()) for c in ["spout", "blocking-spout", *BOLTS]}


def test_blocking_components_get_threads_of_their_own(cluster):
    threads = _run_placement(cluster, Config())
    for component, by_task in threads.items():
        assert all(len(idents) == 1 for idents in by_task), f"{component}'s tasks changed threads"
    one = {c: [next(iter(idents)) for idents in by_task] for c, by_task in threads.items()}
    cooperative = one["spout"][0]
    assert one["plain"] == [cooperative, cooperative]
    assert one["overridden"] == [cooperative]  # set_blocking(False) overrides the class attribute
    own = [*one["declared"], *one["by-class"], *one["blocking-spout"]]
    assert len(set(own)) == 4 and cooperative not in own  # one thread per blocking executor


def test_not_cooperative_gives_every_executor_a_thread(cluster):
    conf = Config()
    conf[COOPERATIVE] = False
    threads = _run_placement(cluster, conf)
    idents = [i for by_task in threads.values() for idents in by_task for i in idents]
    assert len(idents) == 2 + sum(tasks for tasks, _ in BOLTS.values())  # a task per executor, each on one thread
    assert len(set(idents)) == len(idents)


@pytest.mark.parametrize("declare", [
    lambda b: b.set_bolt("weird", PassBolt()).set_blocking("yes").shuffle_grouping("spout"),
    lambda b: b.set_bolt("weird", PassBolt()).add_configuration(BLOCKING, 1).shuffle_grouping("spout"),
    lambda b: b.set_spout("weird", NumberSpout()).set_blocking("no"),
], ids=["set_blocking", "add_configuration", "spout"])
def test_a_non_boolean_blocking_setting_is_rejected_naming_the_component(declare):
    b = TopologyBuilder()
    b.set_spout("spout", NumberSpout())
    declare(b)
    with pytest.raises(InvalidTopologyError, match=f"component 'weird'.*{BLOCKING}"):
        b.create_topology()


# -- 7. the mode does not change results ---------------------------------------------------------------

WORDS = "the cow jumped over moon an apple a day keeps doctor away four score and seven years ago".split()


class Split(Bolt):
    outputs = ["word"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        for word in tup.values[0].split():
            self.collector.emit([word], anchors=tup)
        self.collector.ack(tup)


class Count(Bolt):
    """Emits [word, count so far]."""

    outputs = ["word", "count"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.counts = Counter()

    def execute(self, tup):
        word = tup.values[0]
        self.counts[word] += 1
        self.collector.emit([word, self.counts[word]], anchors=tup)
        self.collector.ack(tup)


def _word_count_topology():
    b = TopologyBuilder()
    b.set_spout("sentences", NumberSpout(), 2)  # mocked
    b.set_bolt("split", Split(), 2).set_num_tasks(4).shuffle_grouping("sentences")
    b.set_bolt("count", Count(), 3).fields_grouping("split", ["word"])
    return b.create_topology()


@pytest.mark.parametrize("workers", [1, 2])
def test_word_count_is_the_same_cooperative_or_not(workers):
    lines = [" ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(1 + i % 6)) for i in range(600)]
    expected = Counter(w for line in lines for w in line.split())
    totals = {}
    for cooperative in (True, False):
        conf = {COOPERATIVE: cooperative, Config.TOPOLOGY_WORKERS: workers}
        results = complete_topology(_word_count_topology(), {"sentences": [[line] for line in lines]}, conf)
        final: dict[str, int] = {}
        for word, count in read_tuples(results, "count"):
            final[word] = max(final.get(word, 0), count)
        assert len(read_tuples(results, "count")) == sum(expected.values())  # each word counted once
        totals[cooperative] = final
    assert totals[True] == totals[False] == dict(expected)


class LifecycleNumberSpout(NumberSpout):
    """A NumberSpout recording its activate/deactivate/close calls under "spout-life"."""

    def activate(self):
        record("spout-life", "activate")

    def deactivate(self):
        record("spout-life", "deactivate")

    def close(self):
        record("spout-life", "close")


def test_a_kill_deactivates_the_spouts_before_closing_them_even_while_the_worker_is_busy(cluster, gate):
    # the cooperative thread is inside a (not blocking-declared) bolt's execute when the kill
    # deactivates the spouts and asks the worker to stop: once the execute returns, the thread
    # stops at once, but the deactivate it had not taken yet still reaches the spout before close
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleNumberSpout(limit=1))
    b.set_bolt("stuck", GatedBolt()).shuffle_grouping("spout")
    cluster.submit_topology("t", Config(), b.create_topology())
    wait_until(lambda: logged("gated-entered") == [0], WAIT, message="the worker's thread busy in execute")
    executors = cluster.executors("t")
    killer = threading.Thread(target=cluster.kill_topology, args=("t",), kwargs={"wait_secs": 0})
    killer.start()
    wait_until(lambda: all(e.stopping for e in executors), WAIT, message="the stop requested")
    gate.set()
    killer.join(WAIT)
    assert not killer.is_alive()
    assert logged("spout-life") == ["activate", "deactivate", "close"]
