"""The local runtime: backpressure and bounded memory, lifecycle (activate, deactivate,
kill), a thread-safe OutputCollector, error reporting, setup errors, tick tuples and the
statistics of get_topology_info."""

from __future__ import annotations

import queue
import threading
import time
from collections import Counter, defaultdict

import pytest

import squall
import squall.cluster.nimbus as nimbus_module
from helpers import (
    COUNTERS, LOG, SLOW, STOP, WAIT, HoldBolt, RecordSink, Relay, SlowSink, barrier, component_info, errors_of,
    executors_of, feeder_builder, held, logged, record, stays, tasks_of,
)
from squall import (
    AlreadyAliveError, BasicBolt, Bolt, Config, LocalCluster, NotAliveError, Spout, TopologyBuilder,
)
from squall.testing import advance_time, simulated_time, wait_until


def emitted_by_task() -> dict:
    """FastSpout task -> tuples emitted so far."""
    return COUNTERS["emitted"]


# -- components ----------------------------------------------------------------------------


class FastSpout(Spout):
    """Emits 0, 1, 2, ... as fast as it is let, without message ids, until STOP."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()
        self.n = 0
        emitted_by_task()[self.task] = 0

    def next_tuple(self):
        if STOP.is_set():
            return
        self.collector.emit([(self.task, self.n)])
        self.n += 1
        emitted_by_task()[self.task] = self.n

    def is_exhausted(self):
        return STOP.is_set()


def _thread(key, task):
    record("threads", (key, task, threading.get_ident()))


class LifecycleSpout(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()
        self.active = False
        self.calls = 0
        record("spout", ("open", self.task))
        _thread("spout", self.task)

    def activate(self):
        self.active = True
        record("spout", ("activate", self.task))
        _thread("spout", self.task)

    def deactivate(self):
        self.active = False
        record("spout", ("deactivate", self.task))
        _thread("spout", self.task)

    def next_tuple(self):
        _thread("spout", self.task)
        if not self.active:
            record("violations", ("next_tuple while inactive", self.task))
        self.calls += 1
        record("calls", self.task)
        if self.calls <= 5:
            self.collector.emit([self.calls], msg_id=(self.task, self.calls))

    def ack(self, msg_id):
        _thread("spout", self.task)
        record("spout-acked", msg_id)

    def close(self):
        _thread("spout", self.task)
        record("spout", ("close", self.task))


class LifecycleBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()
        record("bolt", ("prepare", self.task))

    def execute(self, tup):
        _thread("bolt", self.task)
        self.collector.ack(tup)

    def cleanup(self):
        _thread("bolt", self.task)
        record("bolt", ("cleanup", self.task))


class LifecycleBasicBolt(BasicBolt):
    def prepare(self, conf, context):
        self.task = context.get_this_task_id()
        record("basic", ("prepare", self.task))

    def execute(self, tup, collector):
        pass

    def cleanup(self):
        record("basic", ("cleanup", self.task))


class ThreadedBolt(Bolt):
    """execute only queues the input; two threads of the bolt's own emit (anchored) and ack."""

    outputs = ["v"]

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.inbox = queue.Queue()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._work, daemon=True) for _ in range(2)]
        for t in self.threads:
            t.start()

    def execute(self, tup):
        record("threaded-execute", threading.get_ident())
        self.inbox.put(tup)

    def _work(self):
        while not self.stop.is_set():
            try:
                tup = self.inbox.get(timeout=0.02)
            except queue.Empty:
                continue
            record("threaded-worker", threading.get_ident())
            self.collector.emit([tup[0] + "!"], anchors=tup)
            self.collector.emit([tup[0] + "?"], anchors=tup)
            self.collector.ack(tup)

    def cleanup(self):
        self.stop.set()
        for t in self.threads:
            t.join(1)


class FlakySpout(Spout):
    """Raises on every third next_tuple call; emits 1..60 except multiples of 3."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector = collector
        self.i = 0

    def next_tuple(self):
        self.i += 1
        if self.i % 3 == 0:
            raise RuntimeError(f"flaky call {self.i}")
        if self.i <= 60:
            self.collector.emit([self.i])


class BadOpenSpout(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        raise ValueError("cannot open the source")


class BadPrepareBolt(Bolt):
    def prepare(self, conf, context, collector):
        raise OSError("cannot reach the database")

    def execute(self, tup):
        pass


class BadPrepareBasicBolt(BasicBolt):
    def prepare(self, conf, context):
        raise KeyError("missing setting")

    def execute(self, tup, collector):
        pass


class TickBolt(Bolt):
    """Records (is_tick, component, stream, values) of every input, acks everything."""

    def __init__(self, key, freq=None):
        self.key = key
        self.freq = freq

    def get_component_configuration(self):
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.freq} if self.freq else None

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.task = context.get_this_task_id()

    def execute(self, tup):
        record(self.key, (tup.is_tick(), tup.source_component, tup.source_stream_id))
        if tup.is_tick():
            record(self.key + ".tick-tasks", self.task)
        self.collector.ack(tup)


class TickReporter(BasicBolt):
    """A BasicBolt that emits a report on each tick (as word count's report bolt does)."""

    outputs = ["report"]

    def get_component_configuration(self):
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: 5}

    def prepare(self, conf, context):
        self.seen = 0

    def execute(self, tup, collector):
        if tup.is_tick():
            collector.emit([f"seen {self.seen}"])
        else:
            self.seen += 1


class SplitTwo(Bolt):
    outputs = ["v"]

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        self.collector.emit([tup[0] + ".1"], anchors=tup)
        self.collector.emit([tup[0] + ".2"], anchors=tup)
        self.collector.ack(tup)


class FailPrefixSink(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        time.sleep(0.001)  # so that latencies are measurable
        if tup[0].startswith("fail"):
            self.collector.fail(tup)
        else:
            self.collector.ack(tup)


def _queues(cluster, name):
    """(executor component, queue) of every executor of the topology."""
    return [(e.component, e.queue) for e in cluster.executors(name)]


def _small_queues(capacity, batch, conf=None):
    conf = Config() if conf is None else conf
    conf[Config.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE] = capacity
    conf[Config.TOPOLOGY_RECEIVER_CREDIT_SIZE] = capacity  # each other worker's window in a queue
    conf[Config.TOPOLOGY_PRODUCER_BATCH_SIZE] = batch
    return conf


def _submit_fast_to_slow(cluster, conf):
    """Submit "bp" (tracked): a FastSpout -> a Relay -> a SlowSink ("sink"), slowed down (SLOW set)."""
    b = TopologyBuilder()
    b.set_spout("spout", FastSpout())
    b.set_bolt("relay", Relay()).shuffle_grouping("spout")
    b.set_bolt("sink", SlowSink("sink")).shuffle_grouping("relay")
    SLOW.set()
    cluster.submit_topology("bp", conf, b.create_topology(), tracked=True)


# -- backpressure and bounded memory ----------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_slow_bolt_backpressures_a_fast_spout_and_nothing_is_dropped(cluster, workers):
    capacity, batch = 4, 10
    conf = _small_queues(capacity, batch, Config().set_num_workers(workers))
    conf[Config.TOPOLOGY_TRANSFER_BUFFER_SIZE] = capacity
    _submit_fast_to_slow(cluster, conf)
    queues = _queues(cluster, "bp")
    for _, q in queues:
        assert q.capacity == capacity
    # A queue counts tuples; a producer waits while it is full, so the batch that fills it
    # overshoots by at most one batch. Between workers, the other worker's tuples stand on its
    # credit on top of that: a window (capacity here), and what the consumer took of it.
    cross_worker = 2 * capacity
    queue_bound = capacity + batch + (cross_worker if workers > 1 else 0) + 2
    # tuples anywhere between the spout and the sink: two queues, the batches the two bolts
    # took and are processing, the relay's blocked batch, the spout's overflow and partial
    # batches, and the transfer path
    bound = 4 * (capacity + batch) + 5 * batch + (cross_worker if workers > 1 else 0)
    max_len = Counter()
    max_in_flight = 0
    samples = []
    deadline = time.monotonic() + 1.2
    while time.monotonic() < deadline:
        for component, q in queues:
            max_len[component] = max(max_len[component], len(q))
        processed = len(LOG["sink"])
        emitted = sum(emitted_by_task().values())
        max_in_flight = max(max_in_flight, emitted - processed)
        samples.append((emitted, processed))
        time.sleep(0.002)  # the sampling period of a measurement over 1.2 s, not a wait
    for component, longest in max_len.items():
        assert longest <= queue_bound, (
            f"queue of {component} held {longest} tuples (capacity {capacity}, batch {batch})"
        )
    assert max_in_flight <= bound, f"{max_in_flight} tuples emitted but not processed (bound {bound})"
    # the slow bolt made progress, and so did the spout (slowed, not stopped)
    assert samples[-1][1] > 50
    assert samples[-1][0] > samples[len(samples) // 2][0]
    # stop the spout, speed the bolt up: everything emitted is processed, once
    STOP.set()
    SLOW.clear()
    cluster.wait_idle("bp", WAIT)  # the spout stopped, and nothing is queued or being processed
    assert len(logged("sink")) == sum(emitted_by_task().values()), "the sink got more or less than was emitted"
    seen = logged("sink")
    assert len(seen) == len(set(seen)), "a tuple was processed twice"
    (task, total), = emitted_by_task().items()
    assert sorted(n for _, n in seen) == list(range(total))


def test_backpressure_with_acking_and_parallel_slow_bolts(cluster):
    """With message ids and no max pending, memory is still bounded and every tree is acked."""
    capacity, batch = 4, 10
    conf = _small_queues(capacity, batch)
    feeder, b = feeder_builder()
    b.set_bolt("split", SplitTwo(), 2).shuffle_grouping("spout")
    b.set_bolt("sink", SlowSink("sink-str"), 2).shuffle_grouping("split")
    SLOW.set()
    cluster.submit_topology("bp", conf, b.create_topology())
    n = 1500
    for i in range(n):
        feeder.feed([f"v{i}"], msg_id=i)
    queues = _queues(cluster, "bp")
    # a queue's producers each wait while it is full, so each may overshoot by one batch:
    # split has one producer (the spout), each sink two (the split executors), the spout
    # one (the acker), the acker five (every other executor)
    producers = {"split": 1, "sink": 2, "spout": 1, "__acker": 5}
    # spout tuples emitted but not through the sinks yet: the spout's overflow and partial
    # batches, the split queues and the batches the splits hold, the sinks' (in halves)
    in_flight_bound = 3 * batch + 2 * 2 * (capacity + batch) + 2 * batch + 2 * (capacity + 2 * batch)
    max_in_flight = 0
    deadline = time.monotonic() + 0.8
    while time.monotonic() < deadline:
        for component, q in queues:
            bound = capacity + producers[component] * batch + 2
            assert len(q) <= bound, f"queue of {component}: {len(q)} tuples (capacity {capacity})"
        emitted = n - len(feeder._channel.queue)
        max_in_flight = max(max_in_flight, emitted - len(LOG["sink-str"]) // 2)
        time.sleep(0.002)  # the sampling period of a measurement over 0.8 s, not a wait
    assert max_in_flight <= in_flight_bound
    assert len(feeder._channel.queue) > 0, "the spout drained its source although the bolts are slow"
    SLOW.clear()
    wait_until(lambda: len(feeder.acked) == n, WAIT, message="every tree acked")
    assert sorted(feeder.acked) == list(range(n))
    assert feeder.failed == []
    assert Counter(logged("sink-str")) == Counter([f"v{i}.{k}" for i in range(n) for k in (1, 2)])


# -- lifecycle ---------------------------------------------------------------------------------------


def _lifecycle_topology():
    b = TopologyBuilder()
    b.set_spout("spout", LifecycleSpout(), 2)
    b.set_bolt("bolt", LifecycleBolt(), 2).set_num_tasks(3).shuffle_grouping("spout")
    b.set_bolt("basic", LifecycleBasicBolt()).shuffle_grouping("spout")
    return b.create_topology()


def _calls():
    return len(logged("calls"))


class HeldWait:
    """Stands in for Nimbus's ``time``, which it uses only to sleep: the wait of a kill (or a
    rebalance) before it stops the executors. ``asked`` holds the seconds of each wait; each lasts
    until :meth:`release`, so that a test sees what happens during the wait without racing the clock."""

    def __init__(self):
        self.asked = []
        self._released = threading.Event()

    def sleep(self, secs):
        self.asked.append(secs)
        self._released.wait()

    def release(self):
        self._released.set()


def stop_timeouts(caplog) -> list[str]:
    """The warnings of workers whose executors were still running when the stop's timeout ended."""
    return [r.getMessage() for r in caplog.records if r.name == "squall.worker" and "did not stop" in r.getMessage()]


@pytest.fixture
def kill_wait(monkeypatch):
    wait = HeldWait()
    monkeypatch.setattr(nimbus_module, "time", wait)
    yield wait
    wait.release()  # a kill still waiting when the test failed ends (the cluster is stopped after this)


@pytest.mark.parametrize("workers", [1, 2])
def test_activate_deactivate_kill_call_the_spout_and_bolt_hooks(cluster, workers):
    cluster.submit_topology("life", Config().set_num_workers(workers), _lifecycle_topology())
    assert cluster.get_topology_info("life")["status"] == "ACTIVE"
    spout_tasks = tasks_of(cluster, "life", "spout")
    bolt_tasks = tasks_of(cluster, "life", "bolt")
    assert len(spout_tasks) == 2 and len(bolt_tasks) == 3
    wait_until(lambda: _calls() > 10, WAIT)
    events = logged("spout")
    for task in spout_tasks:
        assert events.index(("open", task)) < events.index(("activate", task))
    assert sorted(logged("bolt")) == sorted(("prepare", t) for t in bolt_tasks)
    wait_until(lambda: len(logged("spout-acked")) == 10, WAIT)

    cluster.deactivate("life")
    assert cluster.get_topology_info("life")["status"] == "INACTIVE"
    wait_until(lambda: sum(1 for e, _ in logged("spout") if e == "deactivate") == 2, WAIT)
    calls = _calls()
    # an inactive spout's executor only waits: nothing marks that it did not call, so watch it
    stays(lambda: _calls() == calls, 0.3, "next_tuple not called while inactive")
    cluster.deactivate("life")  # already inactive: nothing happens
    cluster.activate("life")
    assert cluster.get_topology_info("life")["status"] == "ACTIVE"
    wait_until(lambda: sum(1 for e, _ in logged("spout") if e == "activate") == 4, WAIT)
    wait_until(lambda: _calls() > calls + 10, WAIT, message="next_tuple called again after activate")

    cluster.kill_topology("life", wait_secs=0)
    events = logged("spout")
    assert sorted(t for e, t in events if e == "close") == spout_tasks
    assert sorted(t for e, t in logged("bolt") if e == "cleanup") == bolt_tasks
    assert [e for e, _ in logged("basic")] == ["prepare", "cleanup"]
    assert sum(1 for e, _ in events if e == "deactivate") == 4  # deactivated before being killed
    for task in spout_tasks:
        task_events = [e for e, t in events if t == task]
        assert task_events[-2:] == ["deactivate", "close"]
    assert logged("violations") == []
    # every method of one spout task runs on one thread; so does each bolt task
    threads = defaultdict(set)
    for key, task, ident in logged("threads"):
        threads[(key, task)].add(ident)
    assert {k for k in threads if k[0] == "spout"} == {("spout", t) for t in spout_tasks}
    for key, idents in threads.items():
        assert len(idents) == 1, f"{key} ran on {len(idents)} threads"
    with pytest.raises(NotAliveError):
        cluster.get_topology_info("life")
    assert "life" not in cluster.get_topologies()
    # the name can be used again
    cluster.submit_topology("life", Config(), _lifecycle_topology())
    assert cluster.get_topology_info("life")["status"] == "ACTIVE"
    cluster.kill_topology("life", wait_secs=0)


def test_kill_deactivates_then_waits_for_pending_trees(cluster, kill_wait):
    feeder, b = feeder_builder()
    b.set_bolt("hold", HoldBolt("hold")).shuffle_grouping("spout")
    cluster.submit_topology("k", Config().set_message_timeout_secs(30), b.create_topology())
    feeder.feed(["x"], msg_id="x")
    wait_until(lambda: len(held("hold")) == 1, WAIT)
    killer = threading.Thread(target=cluster.kill_topology, args=("k",), kwargs={"wait_secs": 0.8})
    killer.start()
    wait_until(lambda: kill_wait.asked == [0.8], WAIT, message="the kill waiting")
    assert cluster.get_topology_info("k")["status"] == "KILLED"
    # the executors still run during the wait: the pending tree completes
    collector, tup = held("hold")[0]
    collector.ack(tup)
    wait_until(lambda: feeder.acked == ["x"], WAIT)
    # the spout is deactivated: what is fed now is not emitted (no event marks that: watch it)
    feeder.feed(["late"], msg_id="late")
    stays(lambda: len(held("hold")) == 1, 0.3, "nothing emitted while the kill waits")
    assert cluster.get_topologies() == ["k"]  # not stopped before its wait ends
    kill_wait.release()
    killer.join()
    assert len(held("hold")) == 1
    assert feeder.acked == ["x"]
    with pytest.raises(NotAliveError):
        cluster.kill_topology("k")


def test_kill_of_a_backpressured_topology_is_prompt(cluster, caplog):
    others = set(threading.enumerate())
    _submit_fast_to_slow(cluster, _small_queues(4, 10))
    wait_until(lambda: len(logged("sink")) > 20, WAIT)
    cluster.kill_topology("bp", wait_secs=0)
    # its threads ended when asked, those blocked on a full queue too: none was left behind by the stop's timeout
    assert stop_timeouts(caplog) == []
    assert [t.name for t in threading.enumerate() if t not in others] == []
    assert cluster.get_topologies() == []


def test_kill_waits_the_message_timeout_by_default(cluster, kill_wait):
    _, b = feeder_builder()
    cluster.submit_topology("k", Config().set_message_timeout_secs(0.5), b.create_topology())
    killer = threading.Thread(target=cluster.kill_topology, args=("k",))
    killer.start()
    wait_until(lambda: kill_wait.asked == [0.5], WAIT, message="the kill waiting")
    assert cluster.get_topologies() == ["k"]  # not stopped before its wait ends
    kill_wait.release()
    killer.join()
    assert cluster.get_topologies() == []


def test_unknown_and_duplicate_topology_names(cluster):
    for call in (cluster.activate, cluster.deactivate, cluster.get_topology_info,
                 lambda n: cluster.kill_topology(n, wait_secs=0)):
        with pytest.raises(NotAliveError, match="nosuch"):
            call("nosuch")
    _, b = feeder_builder()
    cluster.submit_topology("dup", Config(), b.create_topology())
    with pytest.raises(AlreadyAliveError, match="dup"):
        cluster.submit_topology("dup", Config(), b.create_topology())
    assert cluster.get_topologies() == ["dup"]


def test_shutdown_kills_every_topology(kill_wait, caplog):
    kill_wait.release()  # a wait asked for is recorded, and returns at once
    with LocalCluster() as c:
        for name in ("a", "b"):
            c.submit_topology(name, Config(), _lifecycle_topology())
        wait_until(lambda: _calls() > 0, WAIT)
    assert kill_wait.asked == []  # at once: no wait for the message timeout (30 s)
    assert stop_timeouts(caplog) == []
    assert sum(1 for e, _ in logged("spout") if e == "close") == 4
    assert sum(1 for e, _ in logged("bolt") if e == "cleanup") == 6


# -- thread-safe OutputCollector -----------------------------------------------------------------------


def test_bolt_emits_and_acks_from_its_own_threads(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("threaded", ThreadedBolt(), 2).shuffle_grouping("spout")
    b.set_bolt("sink", RecordSink("sink"), 2).shuffle_grouping("threaded")
    cluster.submit_topology("ts", Config().set_num_workers(2), b.create_topology())
    n = 300
    for i in range(n):
        feeder.feed([f"v{i}"], msg_id=i)
    wait_until(lambda: len(feeder.acked) == n, WAIT, message="every tree acked")
    assert sorted(feeder.acked) == list(range(n))
    assert feeder.failed == []
    assert Counter(logged("sink")) == Counter([f"v{i}{s}" for i in range(n) for s in "!?"])
    executors = set(logged("threaded-execute"))
    workers = set(logged("threaded-worker"))
    assert workers and not (workers & executors), "the emits were expected from the bolt's own threads"
    assert errors_of(cluster, "ts", "threaded") == []


# -- errors ---------------------------------------------------------------------------------------------


def test_next_tuple_errors_are_recorded_and_the_spout_keeps_going(cluster):
    b = TopologyBuilder()
    b.set_spout("flaky", FlakySpout())
    b.set_bolt("sink", RecordSink("sink")).shuffle_grouping("flaky")
    cluster.submit_topology("err", Config(), b.create_topology())
    expected = [i for i in range(1, 61) if i % 3]
    wait_until(lambda: sorted(logged("sink")) == expected, WAIT, message="every good tuple processed")
    tasks = tasks_of(cluster, "err", "flaky")

    def call_numbers(errors):
        return [int(e["error"].rsplit("flaky call ", 1)[1].split()[0]) for e in errors]

    # next_tuple keeps being called (and failing) after the last emit
    wait_until(lambda: (call_numbers(errors_of(cluster, "err", "flaky")) or [0])[-1] > 90, WAIT)
    errors = errors_of(cluster, "err", "flaky")
    assert len(errors) == 10, "the last 10 errors are kept"
    now = time.time()
    for error in errors:
        assert error["task"] == tasks[0]
        assert "RuntimeError" in error["error"] and "flaky call" in error["error"]
        assert "Traceback" in error["error"] and "next_tuple" in error["error"]
        assert now - 60 < error["time"] <= now + 1
    # they are the latest ones, oldest first
    numbers = call_numbers(errors)
    assert numbers == sorted(numbers) and numbers[0] > 30
    assert all(b - a == 3 for a, b in zip(numbers, numbers[1:]))
    assert errors_of(cluster, "err", "sink") == []


@pytest.mark.parametrize("bad, component", [
    ("spout", "bad-spout"), ("bolt", "bad-bolt"), ("basic", "bad-basic"),
])
def test_open_or_prepare_raising_fails_submit_naming_the_component(cluster, bad, component):
    b = TopologyBuilder()
    b.set_spout("bad-spout" if bad == "spout" else "spout", BadOpenSpout() if bad == "spout" else FastSpout())
    source = "bad-spout" if bad == "spout" else "spout"
    b.set_bolt("relay", Relay()).shuffle_grouping(source)
    if bad == "bolt":
        b.set_bolt("bad-bolt", BadPrepareBolt(), 2).shuffle_grouping("relay")
    if bad == "basic":
        b.set_bolt("bad-basic", BadPrepareBasicBolt()).shuffle_grouping("relay")
    with pytest.raises(squall.TopologySetupError, match=f"'{component}'") as info:
        cluster.submit_topology("setup", Config(), b.create_topology())
    assert "setup" in str(info.value)
    assert cluster.get_topologies() == []
    with pytest.raises(NotAliveError):
        cluster.get_topology_info("setup")
    # the name is free again
    _, ok = feeder_builder()
    cluster.submit_topology("setup", Config(), ok.create_topology())
    assert cluster.get_topology_info("setup")["status"] == "ACTIVE"


# -- tick tuples ------------------------------------------------------------------------------------------


@pytest.mark.simulated_time
def test_tick_tuples_under_simulated_time(cluster):
    F = 2
    feeder, b = feeder_builder()
    b.set_bolt("ticked", TickBolt("ticked", freq=F)).shuffle_grouping("spout")
    b.set_bolt("ticked3", TickBolt("ticked3")).shuffle_grouping("spout") \
        .add_configuration(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS, 3)
    b.set_bolt("plain", TickBolt("plain")).shuffle_grouping("spout")
    # one executor running two tasks: each task gets its ticks
    b.set_bolt("two-tasks", TickBolt("two-tasks", freq=F)).set_num_tasks(2).all_grouping("spout")
    b.set_bolt("reporter", TickReporter()).shuffle_grouping("spout")
    b.set_bolt("reports", RecordSink("reports")).shuffle_grouping("reporter")
    cluster.submit_topology("tick", Config().set_message_timeout_secs(1000), b.create_topology())

    def ticks(key):
        return [e for e in logged(key) if e[0]]

    # every tick due is queued before advance_time returns; a tuple fed afterwards
    # reaches each bolt after them
    barrier(feeder, "m0")
    assert ticks("ticked") == [] and ticks("ticked3") == []
    advance_time(F * 3)
    wait_until(lambda: len(ticks("ticked")) == 3, WAIT)
    barrier(feeder, "m1")
    assert ticks("ticked") == [(True, "__system", "__tick")] * 3
    assert len(ticks("ticked3")) == 2  # at 3 and 6
    assert ticks("plain") == []
    two = Counter(logged("two-tasks.tick-tasks"))
    assert sorted(two.values()) == [3, 3] and len(two) == 2
    for _ in range(3):
        advance_time(F)
    barrier(feeder, "m2")
    assert len(ticks("ticked")) == 6
    assert len(ticks("ticked3")) == 4  # at 3, 6, 9, 12
    advance_time(F / 2)
    barrier(feeder, "m3")
    assert len(ticks("ticked")) == 6
    # regular tuples are not ticks; acking the ticks did no harm
    for key in ("ticked", "ticked3", "plain"):
        assert [e for e in logged(key) if not e[0]] == [(False, "spout", "default")] * 4
    assert feeder.acked == ["m0", "m1", "m2", "m3"] and feeder.failed == []
    # ticks at 5 and 10 (after m0 and m1 were seen)
    wait_until(lambda: len(logged("reports")) == 2, WAIT)
    assert logged("reports") == ["seen 1", "seen 2"]
    for key in ("ticked", "ticked3", "plain"):
        assert errors_of(cluster, "tick", key) == []
    assert component_info(cluster, "tick", "spout")["failed"] == 0


def test_tick_tuples_real_time(cluster):
    _, b = feeder_builder()
    b.set_bolt("ticked", TickBolt("ticked", freq=0.05)).shuffle_grouping("spout")
    cluster.submit_topology("tick", Config(), b.create_topology())
    wait_until(lambda: len(logged("ticked")) >= 3, WAIT)
    assert set(logged("ticked")) == {(True, "__system", "__tick")}


# -- get_topology_info -----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [1, 2])
def test_topology_info_counters(cluster, workers):
    feeder, b = feeder_builder()
    b.set_bolt("split", SplitTwo(), 2).shuffle_grouping("spout")
    b.set_bolt("sink", FailPrefixSink(), 2).all_grouping("split")
    cluster.submit_topology("info", Config().set_num_workers(workers), b.create_topology())
    for i in range(5):
        feeder.feed([f"ok{i}"], msg_id=i)
    feeder.feed(["fail"], msg_id="f")
    wait_until(lambda: len(feeder.acked) == 5 and feeder.failed == ["f"], WAIT)
    expected = {
        "spout": {"emitted": 6, "transferred": 6, "acked": 5, "failed": 1},
        "split": {"emitted": 12, "transferred": 24, "acked": 6, "failed": 0},
        "sink": {"emitted": 0, "transferred": 0, "acked": 20, "failed": 4},
    }

    def counters():
        comps = cluster.get_topology_info("info")["components"]
        return {c: {k: comps[c][k] for k in ("emitted", "transferred", "acked", "failed")} for c in expected}

    try:
        wait_until(lambda: counters() == expected, WAIT)
    except TimeoutError:
        assert counters() == expected
    info = cluster.get_topology_info("info")
    assert info["name"] == "info" and info["status"] == "ACTIVE"
    assert info["uptime_secs"] >= 0
    assert len(info["workers"]) == workers
    assert len({w["port"] for w in info["workers"]}) == workers
    assert len(executors_of(cluster, "info", "__acker")) == workers
    assert set(info["components"]) == {"spout", "split", "sink"}
    comps = info["components"]
    assert comps["spout"]["type"] == "spout" and comps["split"]["type"] == "bolt"
    assert (comps["split"]["parallelism"], comps["split"]["num_tasks"]) == (2, 2)
    assert comps["spout"]["complete_latency_ms"] > 0
    for c in ("split", "sink"):
        assert "capacity" in comps[c] and 0 <= comps[c]["capacity"] <= 1
        assert comps[c]["execute_latency_ms"] >= 0 and comps[c]["process_latency_ms"] >= 0
        assert "complete_latency_ms" not in comps[c]
    assert comps["sink"]["execute_latency_ms"] > 0
    assert comps["sink"]["capacity"] > 0
    assert "capacity" not in comps["spout"]
    for c in comps.values():
        assert c["errors"] == []


class DirectAndUnsubscribedSpout(Spout):
    """Emits 3 tracked tuples direct to "hold", and 3 tracked ones on a stream nobody reads;
    its ack raises for one message id."""

    def declare_output_fields(self, declarer):
        declarer.declare(["v"], direct=True)
        declarer.declare_stream("nobody", ["v"])

    def open(self, conf, context, collector):
        self.collector = collector
        self.target = context.get_component_tasks("sink")[0]
        self.n = 0

    def next_tuple(self):
        if self.n < 3:
            self.collector.emit_direct(self.target, [f"d{self.n}"], msg_id=self.n)
            self.collector.emit([self.n], stream="nobody", msg_id=("nobody", self.n))
            self.n += 1

    def ack(self, msg_id):
        record("acked", msg_id)
        if msg_id == 1:
            raise RuntimeError("ack raised")


def test_topology_info_counters_with_direct_and_unsubscribed_streams(cluster):
    b = TopologyBuilder()
    b.set_spout("spout", DirectAndUnsubscribedSpout())
    b.set_bolt("sink", FailPrefixSink(), 2).direct_grouping("spout")
    cluster.submit_topology("info", Config(), b.create_topology())
    wait_until(lambda: len(logged("acked")) == 6, WAIT)
    assert sorted(map(str, logged("acked"))) == sorted(map(str, [0, 1, 2, ("nobody", 0), ("nobody", 1),
                                                                 ("nobody", 2)]))
    comps = cluster.get_topology_info("info")["components"]
    assert {k: comps["spout"][k] for k in ("emitted", "transferred", "acked", "failed")} == {
        "emitted": 6, "transferred": 3, "acked": 6, "failed": 0}
    wait_until(lambda: component_info(cluster, "info", "sink")["acked"] == 3, WAIT)
    # an exception from the spout's ack is recorded; the spout goes on
    errors = comps["spout"]["errors"]
    assert len(errors) == 1 and "ack raised" in errors[0]["error"]


def test_topology_info_counters_without_ackers(cluster):
    feeder, b = feeder_builder()
    b.set_bolt("sink", FailPrefixSink()).shuffle_grouping("spout")
    cluster.submit_topology("info", Config().set_num_ackers(0), b.create_topology())
    for i in range(4):
        feeder.feed([f"ok{i}"], msg_id=i)
    wait_until(lambda: len(feeder.acked) == 4, WAIT)
    wait_until(lambda: component_info(cluster, "info", "sink")["acked"] == 4, WAIT)
    comps = cluster.get_topology_info("info")["components"]
    assert (comps["spout"]["emitted"], comps["spout"]["acked"], comps["spout"]["failed"]) == (4, 4, 0)


STALL_RELEASE = threading.Event()


class StallingSpout(Spout):
    """Emits one tuple, then blocks in next_tuple until STALL_RELEASE is set."""

    outputs = ["v"]

    def open(self, conf, context, collector):
        self.collector, self.emitted = collector, False

    def next_tuple(self):
        if not self.emitted:
            self.emitted = True
            self.collector.emit([1])
        else:
            STALL_RELEASE.wait(30)


def test_a_spout_whose_next_tuple_blocks_is_reported_once_per_stall():
    STALL_RELEASE.clear()
    builder = TopologyBuilder()
    builder.set_spout("stuck", StallingSpout())
    conf = Config()
    conf["topology.spout.stall.secs"] = 0.3
    # the stall checks run on the worker's timer (every 0.15 s), which runs on the simulated clock:
    # each advance_time returns once the checks it was due have run; the stall is in real time
    with simulated_time(), LocalCluster() as cluster:
        cluster.submit_topology("stall", conf, builder.create_topology())
        errors = lambda: cluster.get_topology_info("stall")["components"]["stuck"]["errors"]  # noqa: E731

        def checked() -> list[dict]:
            advance_time(0.2)
            return errors()

        try:
            wait_until(checked, timeout=10, interval=0.05, message="the stall reported")
            first = errors()[0]
            assert first["task"] == tasks_of(cluster, "stall", "stuck")[0]
            assert f"spout 'stuck' task {first['task']}: next_tuple has not returned" in first["error"]
            assert "topology.spout.stall.secs" in first["error"]
            # the same stall is not reported again, however long it lasts: ten more checks
            for _ in range(10):
                advance_time(0.2)
            assert len(errors()) == 1
        finally:
            STALL_RELEASE.set()
