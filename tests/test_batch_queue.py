"""The bounded batching queue between executors (squall.utils.batch_queue)."""

import threading
import time

import pytest

from squall.testing import wait_until
from squall.utils.batch_queue import BatchQueue


def test_take_all_returns_every_batch_in_order_and_counts_tuples():
    q = BatchQueue(100)
    q.put([1, 2, 3], 3)
    q.force_put("control")
    q.put([4], 1)
    assert len(q) == 5
    assert q.take_all() == [[1, 2, 3], "control", [4]]
    assert len(q) == 0 and q.take_all() == []


def test_a_producer_that_moves_off_the_consumers_thread_keeps_its_order():
    # a worker's hand-off: the producer put batches from the consumer's own thread (no lock),
    # then goes on from a new thread while those are still queued; a checkpoint barrier it puts
    # then must not overtake them (nor the tuples another producer put meanwhile reorder them)
    q = BatchQueue(100)
    q.consumer = threading.get_ident()
    q.force_put(["before 1"], 1)
    q.force_put(["before 2"], 1)

    def moved() -> None:
        q.force_put(["barrier"], 1)
        q.put(["after"], 1)

    producer = threading.Thread(target=moved)
    producer.start()
    producer.join(5)
    q.force_put(["the consumer's own"], 1)
    assert q.take_all() == [["before 1"], ["before 2"], ["barrier"], ["after"], ["the consumer's own"]]
    assert len(q) == 0 and q.take_all() == []


def test_a_producer_that_moves_onto_the_consumers_thread_keeps_its_order():
    q = BatchQueue(100)
    q.on_release = lambda released: None  # the credit of another worker's tuples
    other = threading.Thread(target=lambda: q.put(["first"], 1))
    other.start()
    other.join(5)
    q.consumer = threading.get_ident()
    q.force_put(["second"], 1)
    q.force_put(["origin 3"], 1, origin=3)
    q.force_put(["third"], 1)
    assert q.take_all() == [["first"], ["second"], ["origin 3"], ["third"]]


def test_take_all_waits_up_to_its_timeout():
    q = BatchQueue(10)
    start = time.monotonic()
    assert q.take_all(0.05) == []
    assert time.monotonic() - start >= 0.04


def test_a_waiting_consumer_wakes_when_a_batch_arrives():
    q = BatchQueue(10)
    got = []
    consumer = threading.Thread(target=lambda: got.append(q.take_all(10)))
    consumer.start()
    wait_until(lambda: q._bell.waiting, timeout=5, message="the consumer waiting")
    q.put(["x"], 1)
    consumer.join(5)
    assert got == [[["x"]]]


def test_put_blocks_while_full_and_resumes_once_the_consumer_is_done_with_what_it_took():
    q = BatchQueue(2)
    q.put([1, 2], 2)
    assert not q.has_room()
    assert q.put([3], 1, timeout=0.01) is False  # full: the producer waits, then gives up
    done = threading.Event()
    producer = threading.Thread(target=lambda: (q.put([3], 1, timeout=5), done.set()))
    producer.start()
    wait_until(lambda: q._producers_waiting == 1, timeout=5, message="the producer waiting for room")
    assert not done.is_set()
    assert q.take_all() == [[1, 2]]
    # the batch taken is being executed: it still occupies the queue, and the producer still waits
    assert not q.has_room() and len(q) == 0
    assert q._producers_waiting == 1 and not done.is_set()
    assert q.take_all(5) == [[3]]  # done with it: room, and the producer's batch arrives
    assert done.wait(5)
    producer.join(5)


def test_force_put_ignores_the_capacity():
    q = BatchQueue(1)
    q.put([1], 1)
    q.force_put([2, 3], 2)
    assert len(q) == 3


def test_wake_releases_a_waiting_consumer():
    q = BatchQueue(1)
    got = []
    consumer = threading.Thread(target=lambda: got.append(q.take_all(10)))
    consumer.start()
    wait_until(lambda: q._bell.waiting, timeout=5, message="the consumer waiting")
    q.wake()
    consumer.join(5)
    assert got == [[]]


@pytest.mark.parametrize("timeout", [0.0005, 0.002])
def test_no_batch_is_lost_when_rings_race_with_timeouts(timeout):
    # producers ring the bell while the consumer's short waits time out: every batch must
    # arrive once, and the bell must never be released twice (RuntimeError)
    q = BatchQueue(10_000)
    per_producer, producers = 2000, 3
    received = []

    def produce(p):
        for i in range(per_producer):
            q.put([(p, i)], 1)

    threads = [threading.Thread(target=produce, args=(p,)) for p in range(producers)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while len(received) < per_producer * producers and time.monotonic() < deadline:
        for batch in q.take_all(timeout):
            received.extend(batch)
    for t in threads:
        t.join(5)
    assert sorted(received) == sorted((p, i) for p in range(producers) for i in range(per_producer))
    for p in range(producers):
        assert [i for q_, i in received if q_ == p] == list(range(per_producer))  # per-producer order


def test_done_gives_the_room_of_what_the_consumer_took_back_at_once():
    q = BatchQueue(2)
    q.put([1, 2], 2)
    done = threading.Event()
    producer = threading.Thread(target=lambda: (q.put([3], 1, timeout=5), done.set()))
    producer.start()
    assert q.take_all() == [[1, 2]]
    assert not done.wait(0.05)  # being executed: still no room
    q.done()  # executed: room, a waiting producer goes on
    assert done.wait(5)
    assert q.take_all() == [[3]]
    q.done()
    q.done()  # nothing taken: nothing happens
    assert q.has_room() and len(q) == 0
    producer.join(5)
