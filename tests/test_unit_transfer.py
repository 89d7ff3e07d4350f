"""An executor's send path (squall.runtime.executor.transfer.ExecutorTransfer) and the queue it hands
batches to (squall.utils.batch_queue), driven directly: no topology runs, and no thread is
started except by the tests about threads.

The world is worker 0 of a real two-worker assignment of a real topology, with a real
BatchQueue per executor of worker 0 and a recording ``transfer`` function standing for the
worker's hand-off to worker 1 (tests/test_batch_queue.py covers the queue's basics: order,
capacity, blocking ``put``, ``wake``, racing rings).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from helpers import tree_maps
from squall import Bolt, Spout, TopologyBuilder
from squall.runtime.cluster_state import TopologyState, Tracker
from squall.api.config import merged_config
from squall.api.errors import SerializationError
from squall.runtime.executor.transfer import ExecutorTransfer
from squall.runtime.executor.worker_context import WorkerContext
from squall.runtime.assignment import assign
from squall.runtime.serialization import Serializer
from squall.api.tuple import Fields, StreamSource, Tuple
from squall.utils.batch_queue import BatchQueue, Bell

WAIT = 5  # seconds: the bound of every wait on another thread


class Emitter(Spout):
    outputs = {"default": ["word", "n"], "lines": ["word", "n"]}


class Relay(Bolt):
    outputs = ["word"]


def _topology():
    builder = TopologyBuilder()
    builder.set_spout("emitter", Emitter())
    builder.set_bolt("multi", Relay(), 2).set_num_tasks(4).shuffle_grouping("emitter")
    builder.set_bolt("single", Relay(), 3).shuffle_grouping("emitter")
    return builder.create_topology()


TOPOLOGY = _topology()
ASSIGNMENT = assign(TOPOLOGY, merged_config({"topology.workers": 2}))
EXECUTORS = [{(e.component, e.tasks) for e in w.executors} for w in ASSIGNMENT.workers]


def _tasks(worker: int, component: str) -> list[tuple[int, ...]]:
    return sorted(tasks for cid, tasks in EXECUTORS[worker] if cid == component)


(EMITTER,), = _tasks(0, "emitter")
(SINGLE,), = _tasks(0, "single")  # the only task of a local executor
(MULTI,) = _tasks(0, "multi")  # the two tasks of one local executor
REMOTE = sorted(t for cid in ("multi", "single") for tasks in _tasks(1, cid) for t in tasks)  # worker 1's
#: the tasks of worker 0's executors of one task (the acker's and the emitter's included)
LOCAL_ONE_TASK = {tasks[0] for _, tasks in EXECUTORS[0] if len(tasks) == 1}
assert len(MULTI) == 2 and len(REMOTE) >= 3 and SINGLE in LOCAL_ONE_TASK, "the layout these tests need"

SOURCES = {stream: StreamSource("emitter", stream, Fields("word", "n")) for stream in ("default", "lines")}


def tup(word: Any = "w", n: Any = 0, stream: str = "default", anchors: dict[int, int] | None = None) -> Tuple:
    return Tuple([word, n], SOURCES[stream], EMITTER, anchors)


def send(sender: ExecutorTransfer, targets: list[int], t: Tuple) -> None:
    """``t`` emitted to ``targets`` through ``sender``."""
    sender.send(targets, t.stream_source, t.source_task, t.values, t.tree_ids)


def records(groups: list) -> list[tuple]:
    """The groups handed to the worker's transfer as records (task, source task, stream,
    values, tree ids), one per tuple."""
    return [(task, g.source_task, g.stream, values, ids) for g in groups
            for task, values, ids in zip(g.tasks, g.values, tree_maps(g))]


def seen(x: Any) -> Any:
    """``x`` with its tuples as what they hold (the send path makes the tuples local
    destinations get, so a test compares contents, not identities)."""
    if isinstance(x, Tuple):
        return ("Tuple", x.source_stream_id, x.source_task, x.values, x.tree_ids)
    if isinstance(x, (list, tuple)):
        return type(x)(seen(item) for item in x)
    return x


def overflowed(sender: ExecutorTransfer) -> list[list]:
    """The batches in ``sender``'s overflow, oldest first (a remote one as records)."""
    return [items if ob.queue is not None else records(items) for ob, items, _ in sender.overflow]


def record(task: int, t: Tuple) -> tuple:
    """What worker 1 gets for ``t`` (plain values travel as they are)."""
    return (task, EMITTER, t.source_stream_id, t.values, t.tree_ids)


@dataclass
class Attempt:
    dest: int
    records: list
    block: bool
    accepted: bool
    stopping: Callable[[], bool]


class RecordingTransfer:
    """The worker's ``transfer``: records every call; refuses while ``accept`` is false."""

    def __init__(self) -> None:
        self.accept = True
        self.attempts: list[Attempt] = []

    def __call__(self, dest: int, groups: list, count: int, block: bool, stopping: Callable[[], bool]) -> bool:
        assert count == len(records(groups))
        self.attempts.append(Attempt(dest, records(groups), block, self.accept, stopping))
        return self.accept

    def take(self) -> list[tuple[int, list, bool]]:
        """(dest, records, block) of every accepted call since the last take."""
        handed = [(a.dest, a.records, a.block) for a in self.attempts if a.accepted]
        self.attempts.clear()
        return handed


class Stopping:
    """A send path's ``stopping()``: counts its calls (a blocked hand-off makes them), true
    after ``give_up_after`` calls, or past a safety deadline so that no test hangs."""

    def __init__(self, give_up_after: int | None = None) -> None:
        self.give_up_after = give_up_after
        self.calls = 0
        self.expired = False
        self._deadline = time.monotonic() + 2 * WAIT
        self._cond = threading.Condition()

    def __call__(self) -> bool:
        with self._cond:
            self.calls += 1
            self._cond.notify_all()
        self.expired = time.monotonic() > self._deadline
        return self.expired or (self.give_up_after is not None and self.calls >= self.give_up_after)

    def wait_called(self, times: int = 1) -> bool:
        """Whether it has been called ``times`` times in all (waits up to WAIT seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: self.calls >= times, WAIT)


@dataclass
class World:
    conf: dict[str, Any]
    queues: dict[int, BatchQueue]  # task -> its executor's queue (worker 0)
    transfer: RecordingTransfer = field(default_factory=RecordingTransfer)
    tracker: Tracker = field(default_factory=Tracker)

    def context(self) -> WorkerContext:
        return WorkerContext("t", TOPOLOGY, self.conf, ASSIGNMENT, 0, self.queues,
                             frozenset(id(self.queues[t]) for t in LOCAL_ONE_TASK),
                             {("emitter", s): src for s, src in SOURCES.items()},
                             TopologyState(tracker=self.tracker), self.transfer)

    def sender(self, blocking: bool = False, stopping: Callable[[], bool] = lambda: False,
               wake: Callable[[], None] | None = None) -> ExecutorTransfer:
        return ExecutorTransfer(self.context(), "emitter", self.conf, blocking, stopping, wake)

    def batches(self, task: int) -> list[list]:
        """The batches handed on to ``task``'s destination since the last look."""
        if ASSIGNMENT.task_worker[task] == 0:
            return self.queues[task].take_all()
        return [records for _, records, _ in self.transfer.take()]


def world(batch: int = 100, send_buffer: int = 1024, capacity: int = 1024, **conf: Any) -> World:
    conf = merged_config({"topology.workers": 2, "topology.producer.batch.size": batch,
                          "topology.executor.send.buffer.size": send_buffer, **conf})
    queues = {}
    for component, tasks in EXECUTORS[0]:
        q = BatchQueue(capacity, f"{component}{list(tasks)}")
        queues.update(dict.fromkeys(tasks, q))
    return World(conf, queues)


# -- the form of what each destination gets ----------------------------------------------------


@pytest.mark.parametrize("blocking", [False, True], ids=["non-blocking", "blocking"])
def test_each_destination_gets_the_tuple_in_its_own_form(blocking):
    w = world()
    stopping = Stopping()
    sender = w.sender(blocking, stopping)
    t = tup("a", 1, anchors={11: 22})
    send(sender, [SINGLE, *MULTI, *REMOTE], t)
    assert (w.queues[SINGLE].take_all(), w.queues[MULTI[0]].take_all(), w.transfer.attempts) == ([], [], [])
    assert w.tracker.in_flight == 0  # nothing handed on before the batch is full or flushed
    sender.flush_all()
    [[bare]] = w.queues[SINGLE].take_all()
    assert seen(bare) == seen(t)  # one-task executor: a bare Tuple
    [[(m0, shared), (m1, same)]] = w.queues[MULTI[0]].take_all()  # one batch for the executor
    assert (m0, m1) == MULTI and shared is same is bare  # one Tuple for every local task
    [attempt] = w.transfer.attempts
    assert (attempt.dest, attempt.records, attempt.block) == (1, [record(task, t) for task in REMOTE], blocking)
    assert attempt.stopping is stopping
    assert w.tracker.in_flight == 1 + len(MULTI) + len(REMOTE)  # one per task


def test_values_of_other_types_travel_packed_once_and_local_tuples_are_not_copied():
    w = world()
    sender = w.sender()
    values = [("x", 2), {"k": [1, None]}]
    t = Tuple(values, SOURCES["lines"], EMITTER)
    send(sender, [SINGLE, REMOTE[0], REMOTE[1]], t)
    sender.flush_all()
    assert w.queues[SINGLE].take_all()[0][0].values is values
    first, second = w.transfer.take()[0][1]
    assert first[:3] == (REMOTE[0], EMITTER, "lines") and second[0] == REMOTE[1]
    assert first[3] is second[3]  # packed once per emit, whatever the number of remote tasks
    assert isinstance(first[3], bytes)
    assert Serializer().loads(first[3]) == values  # the tuple stays a tuple


def test_a_value_that_cannot_travel_is_fine_for_local_destinations_only():
    w = world()
    sender = w.sender()
    lock = threading.Lock()
    t = tup(lock)
    send(sender, [SINGLE, MULTI[0]], t)
    sender.flush_all()
    assert seen(w.queues[SINGLE].take_all()) == seen([[t]]) and seen(w.queues[MULTI[0]].take_all()) == seen([[(MULTI[0], t)]])
    assert t.values[0] is lock


# -- batching -----------------------------------------------------------------------------------


def _form(targets: list[int], sent: list[Tuple], first: int = 0) -> list:
    """The batch ``sent`` makes when tuple i went to ``targets[i % len]``."""
    tasks = [targets[(first + i) % len(targets)] for i in range(len(sent))]
    if targets == [SINGLE]:
        return sent
    if ASSIGNMENT.task_worker[targets[0]] == 0:
        return list(zip(tasks, sent))
    return [record(task, t) for task, t in zip(tasks, sent)]


@pytest.mark.parametrize(("batch", "send_buffer"), [(3, 1024), (100, 2)], ids=["producer-batch", "send-buffer"])
@pytest.mark.parametrize("targets", [[SINGLE], MULTI, REMOTE], ids=["one-task", "multi-task", "remote"])
def test_a_batch_is_handed_on_when_full_and_flush_all_hands_on_partial_ones(batch, send_buffer, targets):
    w = world(batch, send_buffer)
    sender = w.sender()
    size = min(batch, send_buffer)
    assert sender.batch_size == size
    dest = targets[0]
    sent = []
    for i in range(size + 1):  # the tasks of one destination take turns: one batch for them all
        sent.append(tup(n=i))
        send(sender, [targets[i % len(targets)]], sent[-1])
        assert seen(w.batches(dest)) == seen(([] if i != size - 1 else [_form(targets, sent[:size])]))
    assert w.tracker.in_flight == size
    sender.flush_all()
    assert seen(w.batches(dest)) == seen([_form(targets, sent[size:], first=size)])
    assert w.tracker.in_flight == size + 1
    sender.flush_all()  # nothing gathered: no empty batch
    assert seen(w.batches(dest)) == seen([]) and w.tracker.in_flight == size + 1


# -- overflow (non-blocking send paths) ----------------------------------------------------------


def _filled(capacity: int = 3) -> tuple[World, ExecutorTransfer, list[Tuple]]:
    """A non-blocking sender whose batch (capacity tuples) filled SINGLE's queue."""
    w = world(batch=capacity, capacity=capacity)
    sender = w.sender()
    first = _send(sender, [SINGLE], capacity)
    assert not w.queues[SINGLE].has_room() and sender.room.is_set() and not sender.overflow
    return w, sender, first


def _send(sender: ExecutorTransfer, targets: list[int], n: int) -> list[Tuple]:
    sent = [tup(n=i) for i in range(n)]
    for t in sent:
        send(sender, targets, t)
    return sent


def waiting(sender: ExecutorTransfer) -> list[list]:
    """The batches waiting for their destinations (a remote one as records)."""
    return [items if ob.queue is not None else records(items) for ob, batches, _ in sender.waiting.values()
            for items, _ in batches]


def test_a_full_queues_batch_waits_without_holding_back_other_destinations_until_a_second_one_comes():
    w, sender, b1 = _filled()
    b2 = _send(sender, [SINGLE], 3)  # SINGLE is full: b2 waits, and the sender goes on
    assert seen(waiting(sender)) == seen([b2]) and sender.overflow == [] and sender.room.is_set()
    b3 = _send(sender, [REMOTE[0]], 3)  # other destinations are not held back
    b4 = _send(sender, [MULTI[0]], 1)
    sender.flush_all()  # the partial batch too
    assert w.transfer.take() == [(1, [record(REMOTE[0], t) for t in b3], False)]
    assert seen(w.batches(MULTI[0])) == seen([[(MULTI[0], t) for t in b4]])
    b5 = _send(sender, [SINGLE], 3)  # a second batch for SINGLE: now the sender is held back
    b6 = _send(sender, [MULTI[0]], 1)
    sender.flush_all()
    assert seen(overflowed(sender)) == seen([b5, [(MULTI[0], t) for t in b6]]) and not sender.room.is_set()
    assert w.tracker.in_flight == 14  # counted once, when they left the outboxes

    assert sender.retry_overflow() is False  # SINGLE's queue is still full
    assert seen(w.queues[SINGLE].take_all()) == seen([b1])  # drained, but b1 is being executed: still no room
    assert sender.retry_overflow() is False
    assert seen(waiting(sender)) == seen([b2]) and not sender.room.is_set()

    assert seen(w.queues[SINGLE].take_all()) == seen([])  # done with b1: room for b2, which fills it again
    assert sender.retry_overflow() is True  # b5 waits in b2's place; b6 goes on
    assert sender.overflow == [] and sender.room.is_set() and seen(waiting(sender)) == seen([b5])
    assert seen(w.batches(SINGLE)) == seen([b2]) and seen(w.batches(MULTI[0])) == seen([[(MULTI[0], t) for t in b6]])
    assert seen(w.queues[SINGLE].take_all()) == seen([])  # done with b2
    assert sender.retry_overflow() is True and not sender.pending
    assert seen(w.batches(SINGLE)) == seen([b5])


def test_a_batch_waiting_for_a_full_queue_polls_nothing_and_is_woken_when_room_is_made():
    w = world(batch=3, capacity=3)
    woken: list[int] = []
    sender = w.sender(wake=lambda: woken.append(1))
    b1 = _send(sender, [SINGLE], 3)  # fills SINGLE's queue
    b2 = _send(sender, [SINGLE], 3)  # waits for room
    assert seen(waiting(sender)) == seen([b2])
    assert sender.retry_secs() is None and woken == []  # no poll: the consumer's wake-up brings it back
    assert seen(w.queues[SINGLE].take_all()) == seen([b1])
    assert w.queues[SINGLE].take_all() == [] and woken == [1]  # done with b1: room, and one wake-up
    assert sender.retry_secs() == 0.0  # due at once, though the ring may have come before a wait
    assert sender.retry_overflow() is True and not sender.pending and sender.retry_secs() is None
    assert seen(w.batches(SINGLE)) == seen([b2])


def test_later_batches_wait_behind_as_batches_of_their_own_up_to_a_batchs_worth():
    w = world(batch=4, capacity=2)
    sender = w.sender()
    b1 = _send(sender, [SINGLE], 2)
    sender.flush_all()  # SINGLE's queue is full now
    b2 = _send(sender, [SINGLE], 1)
    sender.flush_all()
    b3 = _send(sender, [SINGLE], 1)  # a batch of its own (as a checkpoint barrier's is), behind b2
    sender.flush_all()
    assert seen(waiting(sender)) == seen([b2, b3]) and sender.overflow == [] and sender.room.is_set()
    b4 = _send(sender, [SINGLE], 3)  # 2 + 3 tuples waiting would be more than a batch: held back now
    sender.flush_all()
    assert seen(overflowed(sender)) == seen([b4]) and not sender.room.is_set()
    q = w.queues[SINGLE]
    assert seen(q.take_all()) == seen([b1]) and seen(q.take_all()) == seen([])  # done with b1
    assert sender.retry_overflow() is True  # b2 and b3 go, each a batch; b4 now waits for room
    assert seen(q.take_all()) == seen([b2, b3]) and seen(waiting(sender)) == seen([b4])


def test_retry_overflow_hands_on_in_order_per_destination():
    w, sender, b1 = _filled()
    q = w.queues[SINGLE]
    b2, b3 = _send(sender, [SINGLE], 3), _send(sender, [SINGLE], 3)  # b2 waits, b3 overflows behind it
    b4 = _send(sender, [REMOTE[0]], 3)  # behind b3 in the overflow
    assert seen(waiting(sender)) == seen([b2])
    assert seen(overflowed(sender)) == seen([b3, [record(REMOTE[0], t) for t in b4]])
    assert seen(q.take_all()) == seen([b1])
    assert sender.retry_overflow() is False  # b1 is being executed: b2 finds no room, b3 stays behind it
    assert seen(q.take_all()) == seen([])  # done with b1
    assert sender.retry_overflow() is True  # b2 goes; b3 finds no room and waits in its place; b4 goes
    assert seen(waiting(sender)) == seen([b3]) and sender.overflow == [] and sender.room.is_set()
    assert seen(w.batches(REMOTE[0])) == seen([[record(REMOTE[0], t) for t in b4]])
    assert seen(q.take_all()) == seen([b2])
    assert seen(q.take_all()) == seen([])  # done with b2
    assert sender.retry_overflow() is True and not sender.pending
    assert seen(w.batches(SINGLE)) == seen([b3])


def test_a_batch_the_transfer_refuses_waits_until_it_is_taken_and_holds_nothing_else_back():
    w = world(batch=2)
    sender = w.sender()
    w.transfer.accept = False
    b1 = [record(REMOTE[1], t) for t in _send(sender, [REMOTE[1]], 2)]
    b2 = _send(sender, [SINGLE], 2)  # the local queue has room: it goes on
    assert seen(waiting(sender)) == seen([b1]) and sender.overflow == [] and sender.room.is_set()
    assert seen(w.batches(SINGLE)) == seen([b2])
    assert sender.retry_overflow() is True and sender.pending  # b1 still waits
    assert [(a.dest, a.records, a.block) for a in w.transfer.attempts] == [(1, b1, False)] * 2
    w.transfer.accept = True
    assert sender.retry_overflow() is True and not sender.pending
    assert seen(w.batches(REMOTE[1])) == seen([b1])


# -- blocking send paths -------------------------------------------------------------------------


def test_a_blocking_hand_off_to_a_full_queue_waits_until_the_consumer_is_done_with_what_it_drained():
    w = world(batch=2, capacity=2)
    stopping = Stopping()
    sender = w.sender(blocking=True, stopping=stopping)
    q = w.queues[SINGLE]
    b1 = _send(sender, [SINGLE], 2)
    events = []

    def consume():
        q.consumer = threading.get_ident()
        if not stopping.wait_called():  # the sender waits for room (and looks at its stop flag)
            return
        events.append(("drained", q.take_all()))
        # two more looks at the stop flag: a whole wait for room timed out after the drain
        events.append(("blocked after the drain", stopping.wait_called(stopping.calls + 2)))
        events.append("done with b1")
        events.append(("taken", q.take_all(WAIT)))  # room: the sender's batch arrives

    consumer = threading.Thread(target=consume, daemon=True)
    consumer.start()
    b2 = _send(sender, [SINGLE], 2)  # returns once the consumer is done with b1
    events.append("sent")
    consumer.join(WAIT)
    assert not consumer.is_alive()
    assert seen(events[:3]) == seen([("drained", [b1]), ("blocked after the drain", True), "done with b1"])
    assert seen(events[3:]) in seen(([("taken", [b2]), "sent"], ["sent", ("taken", [b2])]))  # either thread may go first
    assert not stopping.expired and sender.overflow == []
    assert seen(q.take_all()) == seen([]) and q.has_room()


def test_a_blocking_hand_off_to_a_full_queue_gives_up_when_stopping():
    w = world(batch=2, capacity=2)
    stopping = Stopping(give_up_after=1)
    sender = w.sender(blocking=True, stopping=stopping)
    b1 = _send(sender, [SINGLE], 2)
    _send(sender, [SINGLE], 2)  # nobody drains: returns once stopping() is true
    assert stopping.calls == 1 and not stopping.expired
    assert seen(w.queues[SINGLE].take_all()) == seen([b1]) and sender.overflow == [] and sender.room.is_set()


# -- all or nothing ------------------------------------------------------------------------------


@pytest.mark.parametrize("targets", [[REMOTE[0]], [SINGLE, *MULTI, REMOTE[0], REMOTE[1]], [REMOTE[2], SINGLE]],
                         ids=["remote-only", "local-then-remote", "remote-then-local"])
@pytest.mark.parametrize(("value", "fallback"), [(object(), False), (threading.Lock(), False),
                                                 (threading.Lock(), True)],
                         ids=["object", "lock", "lock-with-pickle-fallback"])
def test_a_value_that_cannot_travel_fails_the_emit_and_no_destination_gets_the_tuple(targets, value, fallback):
    w = world(**{"topology.fall.back.on.java.serialization": fallback, "topology.messaging.secure": fallback})
    sender = w.sender()
    good = tup("ok", 1, stream="lines")
    send(sender, targets, good)
    with pytest.raises(SerializationError) as raised:
        send(sender, targets, tup(value, 2, stream="lines"))
    remote = [t for t in targets if ASSIGNMENT.task_worker[t] == 1]
    message = str(raised.value)
    assert "'emitter'" in message and "'lines'" in message and str(remote) in message
    sender.flush_all()
    multi = [m for m in MULTI if m in targets]
    assert seen(w.queues[SINGLE].take_all()) == seen(([[good]] if SINGLE in targets else []))
    assert seen(w.queues[MULTI[0]].take_all()) == seen(([[(m, good) for m in multi]] if multi else []))
    assert seen(w.batches(REMOTE[0])) == seen([[record(r, good) for r in remote]])
    assert w.tracker.in_flight == len(targets)


def test_a_string_that_cannot_be_encoded_fails_the_emit():
    w = world()
    sender = w.sender()
    with pytest.raises(SerializationError):
        send(sender, [REMOTE[0]], tup("\ud800"))
    sender.flush_all()
    assert w.transfer.take() == []


# -- the lean path -------------------------------------------------------------------------------


def test_the_outboxes_of_the_local_executors_of_one_task_take_bare_tuples():
    w = world()
    sender = w.sender()
    outboxes = sender.outboxes()
    assert set(outboxes) == set(ASSIGNMENT.task_worker)
    assert {task for task, ob in outboxes.items() if ob.queue is not None and ob.single_task} == LOCAL_ONE_TASK
    assert len({id(outboxes[task]) for task in LOCAL_ONE_TASK}) == len(LOCAL_ONE_TASK)
    # the same outbox as send's: what an emitter appends itself joins the batch send started
    t1, t2 = tup(n=1), tup(n=2)
    send(sender, [SINGLE], t1)
    outboxes[SINGLE].items.append(t2)
    sender.flush(outboxes[SINGLE])
    assert seen(w.queues[SINGLE].take_all()) == seen([[t1, t2]])


# -- BatchQueue ----------------------------------------------------------------------------------


class HeldLock:
    """Holds ``lock`` in another thread (for at most WAIT seconds) while the block runs."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock, self._held, self._release = lock, threading.Event(), threading.Event()
        self.timed_out = False
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def _hold(self) -> None:
        with self._lock:
            self._held.set()
            self.timed_out = not self._release.wait(WAIT)

    def __enter__(self) -> HeldLock:
        self._thread.start()
        assert self._held.wait(WAIT)
        return self

    def __exit__(self, *exc: object) -> None:
        self._release.set()
        self._thread.join(WAIT)


@pytest.mark.parametrize("method", ["force_put", "offer"])
def test_the_consumers_own_batches_take_no_lock(method):
    q = BatchQueue(3)
    q.consumer = threading.get_ident()
    with HeldLock(q._lock) as held:
        getattr(q, method)(["a"], 1)
        getattr(q, method)(["b", "c"], 2)  # fills it
        assert len(q) == 3 and not q.has_room()
    assert not held.timed_out, f"{method} from the consumer's thread waited for the queue's lock"
    assert q.take_all() == [["a"], ["b", "c"]] and len(q) == 0


def test_the_consumer_takes_its_own_batches_without_the_lock_while_there_is_room():
    q = BatchQueue(3)
    q.consumer = threading.get_ident()
    q.force_put(["a"], 1)
    with HeldLock(q._lock) as held:
        assert q.take_all() == [["a"]]
    assert not held.timed_out


@pytest.mark.parametrize("consumer", [True, False], ids=["consumer-thread", "other-thread"])
def test_offer_appends_nothing_to_a_full_queue_until_the_consumer_is_done_with_what_it_took(consumer):
    q = BatchQueue(2)
    q.consumer = threading.get_ident() if consumer else 0
    assert q.offer(["a"], 1) is True
    assert q.offer(["b", "c"], 2) is True  # room for one more: the batch may overshoot
    assert q.offer(["d"], 1) is False
    assert len(q) == 3 and q.take_all() == [["a"], ["b", "c"]]
    assert q.offer(["d"], 1) is False  # drained, but what was taken is being executed
    assert len(q) == 0 and q.is_empty()
    assert q.take_all() == []  # done with it
    assert q.offer(["d"], 1) is True and q.take_all() == [["d"]]


def test_a_producer_turned_away_is_woken_once_when_the_consumer_makes_room():
    q = BatchQueue(2)
    woken: list[str] = []
    assert q.offer(["a", "b"], 2)
    assert q.offer(["c"], 1, lambda: woken.append("p")) is False
    assert q.offer(["c"], 1, lambda: woken.append("q")) is False
    assert q.take_all() == [["a", "b"]] and woken == []  # taken, being executed: no room yet
    assert q.take_all() == [] and woken == ["p", "q"]  # done with it: each waiter once
    q.done()
    assert woken == ["p", "q"]
    assert q.offer(["c"], 1, lambda: woken.append("r")) is True and woken == ["p", "q"]


def _in_thread(target: Callable[[], None]) -> None:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(WAIT)
    assert not thread.is_alive()


@pytest.mark.parametrize("size", [4, 6], ids=["capacity", "overshoot"])
def test_a_batch_the_consumer_is_executing_keeps_producers_out_until_it_takes_again(size):
    q = BatchQueue(4)
    q.consumer = threading.get_ident()
    batch = list(range(size))
    _in_thread(lambda: q.force_put(batch, size))
    assert q.take_all() == [batch]  # the consumer executes it now
    assert len(q) == 0 and q.is_empty() and not q.has_room()
    refused = []
    _in_thread(lambda: refused.extend([q.offer(["x"], 1), q.put(["y"], 1, timeout=0.01)]))
    assert refused == [False, False]
    assert q.offer(["own"], 1) is False  # nor does the consumer's own thread get in
    assert len(q) == 0 and q.is_empty()
    assert q.take_all() == [] and q.has_room()  # done with it
    accepted = []
    _in_thread(lambda: accepted.extend([q.offer(["x"], 1), q.put(["y"], 1, timeout=WAIT)]))
    assert accepted == [True, True] and q.take_all() == [["x"], ["y"]]


def test_batches_come_in_the_order_they_were_put_by_the_consumers_thread_or_another():
    q = BatchQueue(100)
    q.consumer = threading.get_ident()
    q.force_put("own-1")
    _in_thread(lambda: (q.put("other-1"), q.force_put("other-2"), q.offer("other-3")))
    q.offer("own-2")
    assert len(q) == 5
    assert q.take_all() == ["own-1", "other-1", "other-2", "other-3", "own-2"]
    assert q.take_all() == []


class WatchedBell(Bell):
    """A Bell that tells when a consumer armed it (about to wait)."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = threading.Event()

    def arm(self) -> None:
        super().arm()
        self.armed.set()


def _wakes(wait: Callable[[], list], bell: WatchedBell, put: Callable[[], None]) -> list:
    """What ``wait`` (run in a consumer thread, arming ``bell``) returns when ``put`` runs
    in this thread once the consumer armed the bell; it must return within WAIT seconds."""
    got: list = []
    consumer = threading.Thread(target=lambda: got.append(wait()), daemon=True)
    consumer.start()
    assert bell.armed.wait(WAIT)
    put()
    consumer.join(WAIT)
    woken = not consumer.is_alive()
    bell.ring()  # let a consumer that slept through the put go
    assert woken, "the consumer slept through the put"
    return got


@pytest.mark.parametrize("method", ["put", "force_put", "offer"])
def test_a_consumer_waiting_in_take_all_wakes_on_another_threads_batch(method):
    bell = WatchedBell()
    q = BatchQueue(10, bell=bell)

    def wait():
        q.consumer = threading.get_ident()
        return q.take_all(60)

    assert _wakes(wait, bell, lambda: getattr(q, method)(["x"], 1)) == [[["x"]]]


@pytest.mark.parametrize("which", [0, 1])
def test_a_bell_shared_by_two_queues_wakes_their_consumer_on_a_batch_for_either(which):
    bell = WatchedBell()
    queues = [BatchQueue(10, f"q{i}", bell) for i in range(2)]

    def wait():  # as the worker's cooperative thread waits for any of its executors' queues
        bell.arm()
        if all(q.is_empty() for q in queues):
            bell.wait(60)
        else:
            bell.disarm()
        return [q.take_all() for q in queues]

    got = _wakes(wait, bell, lambda: queues[which].put(["x"], 1))
    assert got == [[[["x"]] if i == which else [] for i in range(2)]]
    assert not bell.waiting
