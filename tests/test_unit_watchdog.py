"""The worker's one watchdog (squall.runtime.executor.threads.Watchdog) without a topology: what it
sees of each runner's call, on a clock the test moves. The runners and executors here are the
watchdog's whole view of them (current_call, can_hand_off, executors; progress, stall_secs,
stalled); the same watch over real threads is tested end to end in tests/test_runtime.py (a
spout's stall) and tests/test_scheduling.py (hand-offs). Last, a hand-off on a real
CooperativeThread: what the thread that keeps the stuck executor does with the data path."""

from __future__ import annotations

import threading
import time

import pytest

from squall.runtime.executor.ack_ledger import AckLedger
from squall.runtime.executor.executor import Executor as RealExecutor
from squall.runtime.executor.threads import CooperativeThread, Watchdog
from squall.testing import wait_until
from squall.utils.batch_queue import BatchQueue, Bell


class Executor:
    def __init__(self, stall_secs: float | None = None) -> None:
        self.stall_secs = stall_secs
        self.done = 0  # progress: tuples executed or emitted
        self.stalls: list[float] = []

    def progress(self) -> int:
        return self.done

    def stalled(self, secs: float) -> None:
        self.stalls.append(secs)


class Runner:
    def __init__(self, *executors: Executor, cooperative: bool = True) -> None:
        self.executors = list(executors)
        self.cooperative = cooperative
        self.current: Executor | None = None
        self.calls = 0

    def call(self, executor: Executor | None) -> None:
        self.current = executor
        self.calls += 1

    def current_call(self):
        return self.current, self.calls

    def can_hand_off(self) -> bool:
        return self.cooperative and len(self.executors) >= 2


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def watch(runners, handoff_secs=0.2):
    clock, handed = Clock(), []
    dog = Watchdog(runners, handoff_secs, lambda runner, executor: handed.append((runner, executor)), clock)
    return dog, clock, handed


def test_a_call_without_progress_past_the_hand_off_delay_is_handed_off_and_a_moving_one_is_not():
    slow, stuck, other = Executor(), Executor(), Executor()
    runner = Runner(slow, stuck, other)
    dog, clock, handed = watch([runner])
    runner.call(slow)
    for _ in range(5):  # a long call that keeps executing: slow, not stuck
        dog.look()
        slow.done += 10
        clock.now += 0.1
    assert handed == []
    runner.call(stuck)
    dog.look()  # the call is seen from here
    clock.now += 0.15
    dog.look()
    assert handed == []  # not yet the delay
    clock.now += 0.1
    dog.look()
    assert handed == [(runner, stuck)]


def test_new_calls_restart_the_watch_and_a_thread_alone_is_never_handed_off():
    a, b = Executor(), Executor()
    shared, alone = Runner(a, b), Runner(Executor(), cooperative=False)
    dog, clock, handed = watch([shared, alone], handoff_secs=0.2)
    alone.call(alone.executors[0])
    for _ in range(10):  # a call per look on the shared thread: nothing is stuck there
        shared.call(a if shared.calls % 2 else b)
        dog.look()
        clock.now += 0.1
    assert handed == []  # and the lone thread's call, however long, has nobody to hand off


def test_a_stall_is_told_once_per_call_with_how_long_it_lasted():
    spout, bolt = Executor(stall_secs=1.0), Executor()
    runner = Runner(spout, bolt, cooperative=False)
    dog, clock, _ = watch([runner])
    assert dog.period() == 0.2  # the hand-off delay, below half the stall limit
    runner.call(spout)
    dog.look()
    clock.now += 0.9
    dog.look()
    assert spout.stalls == []
    clock.now += 0.2
    dog.look()
    clock.now += 5
    dog.look()
    assert spout.stalls == [pytest.approx(1.1)]  # once, however long it lasts
    runner.call(spout)  # returned and called again: a new call
    dog.look()
    clock.now += 1.0
    dog.look()
    assert spout.stalls == [pytest.approx(1.1), pytest.approx(1.0)]
    runner.call(None)  # between calls: nothing to watch
    clock.now += 10
    dog.look()
    assert len(spout.stalls) == 2 and bolt.stalls == []


def test_the_period_is_half_the_shortest_stall_limit_when_that_is_sooner():
    runner = Runner(Executor(stall_secs=0.3), Executor(stall_secs=5), Executor())
    dog, _, _ = watch([runner], handoff_secs=0.2)
    assert dog.period() == 0.15



# -- the hand-off on a real cooperative thread ---------------------------------------------------


class DataPath:
    """A WorkerIO that records the thread of every call (the data path is one thread's)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def _call(self, what: str) -> None:
        self.calls.append((threading.get_ident(), what))

    def exchange(self) -> bool:
        self._call("exchange")
        return False

    def idle(self) -> bool:
        self._call("idle")
        return True

    def wait(self, bell: Bell, timeout: float) -> None:
        self._call("wait")
        bell.wait(min(timeout, 0.01))
        bell.disarm()

    def end_round(self) -> None:
        self._call("end_round")


class Turns(RealExecutor):
    """An executor that only takes turns: each ``run_once`` reports work done; a turn can be
    held (``hold``) until ``release`` lets it return, the way a stuck ``execute`` holds it."""

    def __init__(self, name: str) -> None:
        self.component, self.task_ids = name, [1]
        self.queue = BatchQueue(10, name)
        self.acks = AckLedger([], None, {}, 1, held=False)  # no round: nothing for a thread alone to send
        self.stopping = False
        self.turns = 0
        self.held = threading.Event()  # a turn is being held
        self.hold = False
        self._release = threading.Event()

    def start_up(self) -> bool:
        return True

    def shut_down(self) -> None:
        pass

    def request_stop(self) -> None:
        self.stopping = True

    def run_once(self, timeout: float) -> bool:
        self.turns += 1
        if self.hold:
            self.hold = False
            self.held.set()
            self._release.wait(10)
        time.sleep(0.001)
        return True

    def release(self) -> None:
        self._release.set()

    @property
    def idle_poll_secs(self) -> float | None:
        return None


def test_a_thread_that_handed_its_data_path_off_never_touches_it_again():
    # the stuck call returns having done work, its round long past the flush interval: the
    # exchange it would make then is the successor's (two threads reading one link duplicated
    # or lost whole payloads)
    stuck, other, io = Turns("stuck"), Turns("other"), DataPath()
    runner = CooperativeThread([other, stuck], Bell(), io, "test-runner", lambda e, error: None, flush_secs=0.0)
    runner.start()
    try:
        wait_until(lambda: stuck.turns > 0 and other.turns > 0, timeout=5, message="both executors' turns")
        stuck.hold = True
        assert stuck.held.wait(5), "the stuck executor's turn did not come"
        assert runner.hand_off(stuck) == [other]
        handed_at = len(io.calls)
        turns = stuck.turns
        stuck.release()
        wait_until(lambda: stuck.turns >= turns + 3, timeout=5, message="the stuck executor running alone")
        assert io.calls[handed_at:] == []
        assert runner.executors == [stuck]
    finally:
        runner.request_stop()
        stuck.release()
        runner.join(5)
    assert not runner.is_alive()
