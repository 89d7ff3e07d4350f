"""Credit-based flow control, owner by owner and without a topology: the queue's reserved room
and releases, what a worker grants (:class:`CreditGrants`) and what it may spend
(:class:`Credits`), across restarts of either side."""

from __future__ import annotations

import threading

import pytest

from helpers import CountingSpout, Sink
from squall import TopologyBuilder
from squall.api.config import Config, merged_config
from squall.runtime.assignment import assign
from squall.runtime.cluster_state import TopologyState
from squall.runtime.messaging.local import LocalTransport
from squall.runtime.messaging.transport import Transport
from squall.runtime.worker_transfer import WorkerTransfer
from squall.testing import wait_until
from squall.runtime.messaging.tuple_batch import encode
from squall.runtime.worker import Worker
from squall.runtime.assignment import Assignment, ExecutorAssignment, WorkerAssignment
from squall.runtime.messaging.backpressure import CreditGrants, Credits, credit_window, queue_keys, send_batch_size
from squall.runtime.messaging.tuple_batch import AckBatch, TupleGroup
from squall.utils.batch_queue import BatchQueue

pytestmark = pytest.mark.timeout(30)

CAPACITY = WINDOW = 4  # a queue's room for its own worker, and the window of each other worker
# worker 0 runs task 1 (a spout); worker 1 runs tasks 2 and 3 in one executor (key 2) and task 4
ASSIGNMENT = Assignment(
    component_tasks={"s": [1], "b": [2, 3], "a": [4]},
    task_component={1: "s", 2: "b", 3: "b", 4: "a"},
    workers=(WorkerAssignment(0, 0, (ExecutorAssignment("s", (1,)),)),
             WorkerAssignment(1, 0, (ExecutorAssignment("b", (2, 3)), ExecutorAssignment("a", (4,))))),
    task_worker={1: 0, 2: 1, 3: 1, 4: 1},
    num_ackers=1,
)


def tuples(*tasks: int) -> TupleGroup:
    return TupleGroup(1, "default", list(tasks), [[t] for t in tasks], None)


class Pair:
    """Worker 1's grants and worker 0's credits, announcements handed over by hand."""

    def __init__(self) -> None:
        self.b = BatchQueue(CAPACITY, "b")
        self.a = BatchQueue(CAPACITY, "a")
        self.wakes = 0
        self.grants = CreditGrants({2: self.b, 4: self.a}, WINDOW, self._wake)
        keys = queue_keys(ASSIGNMENT)
        self.credits = Credits(0, 0, keys, ASSIGNMENT.task_worker, {1: BatchQueue(CAPACITY, "s")}, 2, WINDOW, CAPACITY)

    def _wake(self) -> None:
        self.wakes += 1

    def announce(self, receiver_run: int = 0, credits: Credits | None = None) -> tuple[int, dict[int, int]] | None:
        """What worker 1's transfer path sends worker 0 (``credits``, else the pair's): the
        grants that changed; returns the last."""
        grant = None
        for peer, run, credit in self.grants.take_changes({0}):
            assert peer == 0
            grant = (run, credit)
            (credits or self.credits).update(1, receiver_run, grant)
        return grant

    def arrive(self, q: BatchQueue, n: int, run: int = 0) -> bool:
        return self.grants.deliver(0, run, [(q, list(range(n)))], {})


def test_the_window_is_the_credit_size_and_batches_fit_in_it():
    conf = {Config.TOPOLOGY_RECEIVER_CREDIT_SIZE: 64, Config.TOPOLOGY_PRODUCER_BATCH_SIZE: 100,
            Config.TOPOLOGY_EXECUTOR_SEND_BUFFER_SIZE: 1024}
    assert credit_window(conf) == 64 and send_batch_size(conf) == 64
    assert queue_keys(ASSIGNMENT) == {1: 1, 2: 2, 3: 2, 4: 4}


def test_other_workers_tuples_do_not_take_local_room_and_are_released_when_taken():
    q = BatchQueue(CAPACITY, "q")
    released = []
    q.on_release = released.append
    q.force_put([7, 7, 7, 7, 7], 5, origin=1)
    assert q.has_room() and q.held() == 5, "another worker's tuples stand on its credit, not on local room"
    assert q.offer([0, 1, 2, 3], 4)
    assert not q.offer([4], 1)
    assert q.take_all(0) == [[7, 7, 7, 7, 7], [0, 1, 2, 3]]
    assert released == [{1: 5}], "the other worker's tuples are released once the consumer takes them"
    assert not q.has_room(), "what the consumer executes still counts for local producers"
    q.done()
    assert q.has_room() and q.held() == 0


def test_a_sender_spends_only_what_was_granted_all_or_nothing():
    pair = Pair()
    assert not pair.credits.spend([tuples(2)]), "nothing is sent to a worker not heard from"
    pair.grants.heard(0, 0)
    assert pair.wakes == 1
    pair.announce()
    assert pair.credits.load(2) == 0.0, "load-aware shuffle: empty while there is credit for a batch"
    # tasks 2 and 3 share key 2's window
    assert pair.credits.spend([tuples(2, 3, 2)])
    assert not pair.credits.spend([tuples(4), tuples(3, 3)]), "key 2 has 1 left: nothing of it is spent"
    assert pair.credits.spend([tuples(4, 4, 4), AckBatch(1, 4, [1], [1], [-1])])
    assert not pair.credits.spend([tuples(4)])
    # full with less credit than a batch (2 here); a local task's load is its queue's
    assert pair.credits.load(4) == 1.0 and pair.credits.load(2) == 1.0 and pair.credits.load(1) == 0.0
    # local producers have the queue's own room
    assert pair.b.offer(list(range(4)), 4) and not pair.b.offer([4], 1)


def test_another_workers_load_is_what_it_holds_of_this_workers_tuples_over_a_local_queues_room():
    pair = Pair()
    pair.grants.heard(0, 0)
    pair.announce()
    assert pair.credits.spend([tuples(2)])
    assert pair.credits.load(2) == pytest.approx(1 / CAPACITY), "one tuple sent, not yet taken"
    assert pair.arrive(pair.b, 1) and pair.credits.load(2) == pytest.approx(1 / CAPACITY), "queued there"
    assert pair.b.take_all(0)
    pair.announce()
    assert pair.credits.load(2) == 0.0, "taken: its credit is back"


def test_credit_comes_back_as_the_executor_is_done_with_the_tuples():
    pair = Pair()
    pair.grants.heard(0, 0)
    pair.announce()
    assert pair.credits.spend([tuples(2, 2, 2, 2)])
    assert pair.arrive(pair.b, 4)
    assert pair.grants.held() == 4
    pair.announce()
    assert not pair.credits.spend([tuples(2)]), "queued at the receiver: not granted again yet"
    wakes = pair.wakes
    pair.b.take_all(0)
    assert pair.grants.held() == 0
    assert pair.wakes == wakes + 1, "the transfer path is woken to send the grant"
    pair.announce()
    assert pair.credits.spend([tuples(2, 3, 3, 2)]), "taken: the sender refills the queue meanwhile"


def test_a_restarted_sender_gets_the_credit_of_its_dead_run_back_and_its_leftovers_are_dropped():
    pair = Pair()
    pair.grants.heard(0, 0)
    pair.announce()
    assert pair.credits.spend([tuples(2, 2, 2)])  # 2 of them die with run 0, unsent
    assert pair.arrive(pair.b, 1)
    pair.grants.heard(0, 1)
    new_run = Credits(0, 1, queue_keys(ASSIGNMENT), ASSIGNMENT.task_worker, {}, 2, WINDOW, CAPACITY)
    pair.announce(credits=new_run)
    assert not new_run.spend([tuples(2, 2, 2, 2)]), "one tuple of run 0 is still held"
    assert new_run.spend([tuples(2, 2, 2)])
    assert not pair.arrive(pair.b, 2, run=0), "what the dead run sent is not counted, nor put"
    assert pair.b.take_all(0) == [[0]]
    pair.announce(credits=new_run)
    assert new_run.spend([tuples(3)]), "the held tuple's credit went to the new run"
    assert pair.grants.held() == 0 and not new_run.spend([tuples(2, 2)])


def test_credit_from_a_dead_receiver_is_void():
    pair = Pair()
    pair.grants.heard(0, 0)
    grant = pair.announce()
    pair.credits.update(1, 1, None)  # the receiver restarted and has not heard from us yet
    assert not pair.credits.spend([tuples(4)])
    pair.credits.update(1, 0, grant)  # a late announcement of the dead run
    assert not pair.credits.spend([tuples(4)])


def test_tuples_the_receiver_drops_are_granted_again():
    pair = Pair()
    pair.grants.heard(0, 0)
    pair.announce()
    assert pair.credits.spend([tuples(4, 4, 4, 4)])
    assert pair.grants.deliver(0, 0, [(pair.a, [1, 2])], {pair.a: 2})  # two were malformed
    pair.announce()
    assert pair.credits.spend([tuples(4, 4)]) and not pair.credits.spend([tuples(4)])


def test_a_blocked_sender_wakes_on_a_grant_and_watchers_are_rung():
    pair = Pair()
    rung = []
    pair.credits.watch(lambda: rung.append(1))
    pair.grants.heard(0, 0)
    version = pair.credits.version
    sent = threading.Event()

    def blocked() -> None:
        while not pair.credits.spend([tuples(2)]):
            pair.credits.wait(version, 10)
        sent.set()

    thread = threading.Thread(target=blocked)
    thread.start()
    pair.announce()
    assert sent.wait(10), "the grant woke the blocked sender"
    thread.join(10)
    assert rung


def test_a_greeted_peer_gets_a_payload_at_once_with_its_grants_once_heard_from():
    pair = Pair()
    pair.grants.greet([0])
    assert pair.wakes == 1, "the transfer path is woken to greet"
    assert pair.grants.take_greetings() == [0] and pair.grants.take_greetings() == []
    assert pair.grants.take_changes({0}) == [], "not heard from: the greeting carries no grants"
    pair.grants.heard(0, 0)
    assert pair.announce() == (0, {2: WINDOW, 4: WINDOW})
    pair.grants.greet([0])  # the peer moved: its grants go again, though they did not change
    assert pair.grants.take_greetings() == [0]
    assert pair.grants.take_changes({0}) == [(0, 0, {2: WINDOW, 4: WINDOW})]


def test_the_receive_path_hears_a_new_run_of_a_peer_from_its_payload_and_drops_a_non_peers():
    conf = merged_config({"topology.workers": 2, "topology.acker.executors": 0})
    builder = TopologyBuilder()
    builder.set_spout("spout", CountingSpout(0))
    builder.set_bolt("sink", Sink(), 2).shuffle_grouping("spout")
    topology = builder.create_topology()
    assignment = assign(topology, conf)
    transport = LocalTransport()
    state = TopologyState()
    workers = [Worker("greet", topology, conf, assignment, i, transport, state) for i in range(2)]
    receiver, sender = workers
    sender.transfer.send_queued()  # worker 1's grants, heard of as it registered, go to worker 0
    assert receiver.receive.receive_ready()
    remote = [t for t in assignment.component_tasks["sink"] if assignment.task_worker[t] == 1]
    assert remote, "a sink task in each worker"
    group = [TupleGroup(1, "default", remote, [[0]] * len(remote), None)]
    assert receiver.credits.spend(group)
    receiver.grants.take_changes({1})
    # worker 1 restarted as run 3: its first payload (a greeting: no groups) is all worker 0 hears
    receiver.receive.deliver(encode([]), 1, 3)
    assert not receiver.credits.spend(group), "credit from the dead run is void"
    ((peer, run, credit),) = receiver.grants.take_changes(set())
    assert (peer, run) == (1, 3) and set(credit.values()) == {credit_window(conf)}, \
        "the new run is granted a window, and the grant is worth a payload of its own"
    receiver.receive.deliver(encode([]), 7, 0)
    assert receiver.grants.take_changes({7}) == []
    errors = [e["error"] for c in ("spout", "sink") for e in state.errors(c)]
    assert any("a payload from worker 7, not a peer" in e for e in errors), errors


class _NarrowLink(Transport):
    """Takes a payload only once the test opens the link; counts the retries."""

    def __init__(self) -> None:
        self.kept: list[bytes] = []
        self.delivered: list[bytes] = []
        self.open = threading.Event()
        self.retries = 0
        self.waits = 0

    def register(self, worker, grants, credits, bell) -> None: ...

    def send(self, dest_worker: int, payload: bytes, source_worker: int) -> None:
        self.kept.append(payload)

    def send_backlog(self) -> bool:
        self.retries += 1
        if self.open.is_set():
            self.delivered += self.kept
            self.kept = []
        return bool(self.kept)

    def receive(self, worker, timeout):
        return []

    def wait(self, worker, bell, timeout, backlog=False) -> None: ...

    def wait_sendable(self, bell, timeout) -> None:
        self.waits += 1
        self.open.wait(timeout)
        bell.disarm()


def test_a_transfer_thread_with_a_backlog_waits_for_the_link_instead_of_retrying():
    link = _NarrowLink()
    conf = {Config.TOPOLOGY_TRANSFER_BUFFER_SIZE: 64}
    credits = Credits(0, 0, {}, {}, {}, 2, WINDOW, CAPACITY, unlimited=True)
    transfer = WorkerTransfer(0, conf, link, CreditGrants({}, WINDOW, lambda: None), credits)
    stop = threading.Event()
    thread = threading.Thread(target=transfer.run, args=(stop.is_set,))
    thread.start()
    try:
        assert transfer.transfer(1, [tuples(2)], 1, True, stop.is_set)
        # each wait ends at its timeout while the link takes nothing: one retry per wait, no spinning
        wait_until(lambda: link.waits >= 3, timeout=10, message="the transfer thread waiting for the link")
        assert not link.delivered and transfer.backlog
        assert link.retries <= link.waits + 2, (link.retries, link.waits)
        link.open.set()
        wait_until(lambda: link.delivered, timeout=10, message="the backlog sent once the link took more")
        assert len(link.delivered) == 1
    finally:
        stop.set()
        transfer.queue.wake()
        thread.join(10)
