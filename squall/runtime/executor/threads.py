"""Who runs a worker's executors: one cooperative thread, and a thread per blocking executor.

(Where executors run, on which worker, is :mod:`squall.runtime.assignment`'s.)

By default one thread runs every executor of a worker, batch at a time, the way
Bytewax/Timely workers run their operators (:class:`CooperativeThread`): a round calls
:meth:`~squall.runtime.executor.executor.Executor.run_once` of each executor in topology order
(spouts first, ackers last), so a batch a spout emits is executed by the next bolts in the
same round; executors hand batches to each other without locks and without handing the
GIL to another thread. The same thread moves the worker's tuples to and from other
workers between rounds (its :class:`WorkerIO`: the transfer and receive paths), so the
data path of a busy worker never waits for the GIL. An executor's turn ends once it has spent
``topology.batch.flush.interval.millis`` (1 ms) on what it took (a spout's, on ``next_tuple``),
the rest waiting for its next turn, and the thread sends to and takes from the other workers
again when a round has lasted that long: a slow bolt with a full queue does not keep its spout,
its acker or the other workers waiting, and nothing it emitted waits longer than that.
When a round did nothing, the thread
sleeps until something arrives — on the bell its queues share, and on the transport — or a
spout wants its next call.

A component declared blocking (``set_blocking(True)`` / ``topology.component.blocking``,
e.g. ShellBolt and ShellSpout, whose subprocess I/O blocks) runs on a thread of its own
(:class:`ExecutorThread`), so a slow ``execute`` never stalls the others; so does every
executor when ``topology.worker.cooperative`` is false (Storm's thread per executor).

A component that blocks without being declared so (a ``next_tuple`` waiting on a socket, an
``execute`` stuck in a call) does not stall its worker either. Like Go's scheduler when a
goroutine blocks in a system call, the worker's one :class:`Watchdog` finds the cooperative
thread inside the same executor call for ``topology.worker.handoff.secs``, that executor
having made no progress meanwhile (no batch executed, no tuple emitted: a bolt slow on a large
batch is not stuck), and hands the other executors, and the worker's data path, to a new
cooperative thread (:meth:`CooperativeThread.hand_off`), and logs a warning naming it. When
the stuck call returns, its thread keeps that executor alone, as if it were declared blocking.
The same watch tells an executor whose call has lasted its ``stall_secs`` (a spout's
``topology.spout.stall.secs``: ``next_tuple`` must never block), on any runner.

Guarantees either way: one task's methods are never called concurrently; an executor
runs its user code holding its lock, which a component's own threads take to emit; a
runner whose executor raises out of Squall's own code fails the worker (fail-fast); what one
executor hands another arrives in the order it was handed, across a hand-off too (a
checkpoint barrier never overtakes the tuples before it: the queue keeps the order of its puts).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

from squall.runtime.executor.ack_ledger import RoundAcks
from squall.runtime.executor.executor import Executor
from squall.utils.batch_queue import Bell

# How long an idle runner sleeps before it looks at its stop flag again.
_POLL_SECS = 0.1

#: ``on_death(executor, error)``: an executor raised out of its runner's loop.
DeathFn = Callable[[Executor, BaseException], None]


class WorkerIO(Protocol):
    """The worker's traffic with other workers, as the cooperative thread runs it."""

    def exchange(self) -> bool:
        """Send what executors queued for other workers and deliver what arrived, without
        waiting; True if anything moved."""

    def idle(self) -> bool:
        """Nothing waits to be sent (checked with the bell armed)."""

    def wait(self, bell: Bell, timeout: float) -> None:
        """Wait (``bell`` armed) for a payload, a ring, ``timeout``, or for a link that could
        not take all that was sent to take more; ``bell`` disarmed after."""

    def end_round(self) -> None:
        """Hand on what the round left to the worker as a whole (its combined acks)."""


class _Runner:
    """A thread running one or more executors (see the module's docstring)."""

    def __init__(self, executors: list[Executor], name: str, on_death: DeathFn, started: bool = False,
                 round_acks: RoundAcks | None = None) -> None:
        self.executors = executors
        self._started = started  # the executors are running already (taken over from another runner)
        #: the round its executors' acks combine in (None without ackers); executors taken over
        #: from another runner join it in this thread, if they shared one there
        self.round_acks = round_acks
        self._on_death = on_death
        self._stopping = False
        self._current: Executor | None = None  # the executor being run: a death names it
        self._calls = 0  # executor calls made: the watchdog's clock
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def current_call(self) -> tuple[Executor | None, int]:
        """The executor being called (None between calls) and the number of calls so far:
        read by the watchdog's thread."""
        return self._current, self._calls

    def can_hand_off(self) -> bool:
        """Whether a stuck call's executor could be left alone here, the others moved on."""
        return False

    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        self._stopping = True
        for executor in self.executors:
            executor.request_stop()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        running = list(self.executors) if self._started else [e for e in self.executors if e.start_up()]
        try:
            if self._started:
                for executor in running:
                    executor.move_to_this_thread(self.round_acks)
            if len(running) == len(self.executors):  # else the worker is not started: it stops
                self._loop(running)
        except BaseException as e:  # noqa: BLE001 - an executor must never die silently
            self._on_death(self._current or running[0], e)
        finally:
            for executor in running:
                if executor in self.executors:  # not handed to another runner
                    executor.shut_down()

    def _loop(self, executors: list[Executor]) -> None:
        raise NotImplementedError


class ExecutorThread(_Runner):
    """One executor on a thread of its own."""

    def __init__(self, executor: Executor, on_death: DeathFn) -> None:
        super().__init__([executor], f"executor-{executor.component}-{executor.task_ids}", on_death)

    def _loop(self, executors: list[Executor]) -> None:
        executor = self._current = executors[0]
        while not self._stopping and not executor.stopping:
            self._calls += 1
            executor.run_once(_POLL_SECS)


class CooperativeThread(_Runner):
    """Several executors on one thread, whose queues share ``bell``, and the worker's
    traffic ``io``."""

    def __init__(self, executors: list[Executor], bell: Bell, io: WorkerIO, name: str, on_death: DeathFn,
                 started: bool = False, flush_secs: float = 0.001, round_acks: RoundAcks | None = None) -> None:
        super().__init__(executors, name, on_death, started, round_acks)
        self._bell = bell
        self._io = io
        self._flush_secs = flush_secs  # the longest a round goes without io.exchange
        # taken by the thread as a call returns, and by the watchdog as it hands off
        self._switch = threading.Lock()
        self._handed_off = False

    def can_hand_off(self) -> bool:
        return len(self.executors) >= 2 and not self._handed_off

    def hand_off(self, stuck: Executor) -> list[Executor] | None:
        """Keep only ``stuck`` (its call still running) and return the other executors, for a
        new runner; None if the call returned meanwhile (nothing changes). The other executors'
        queues get no consumer until their new runner starts."""
        with self._switch:
            if self._current is not stuck or self._handed_off:
                return None
            self._handed_off = True
            others = [e for e in self.executors if e is not stuck]
            self.executors = [stuck]
        for executor in others:
            executor.queue.consumer = None  # producers take the queue's lock until then
        return others

    def request_stop(self) -> None:
        super().request_stop()
        self._bell.ring()

    def _loop(self, executors: list[Executor]) -> None:
        bell, io, flush_secs = self._bell, self._io, self._flush_secs
        perf_counter = time.perf_counter
        while not self._stopping:
            did = io.exchange()
            exchange_at = perf_counter() + flush_secs
            for executor in executors:
                self._current = executor
                self._calls += 1
                ran = executor.run_once(0)
                with self._switch:
                    self._current = None
                    if self._handed_off:  # the data path is the successor's now: never touch it again
                        break
                if ran:
                    did = True
                    if perf_counter() >= exchange_at:  # a long round: what it sent goes now
                        io.exchange()
                        exchange_at = perf_counter() + flush_secs
            if self._handed_off:
                self._run_alone(executor)
                return
            io.end_round()
            if did:
                continue
            bell.arm()
            if not (io.idle() and self._idle(executors)) or self._stopping:
                bell.disarm()
                continue
            io.wait(bell, self._idle_wait(executors))

    def _idle(self, executors: list[Executor]) -> bool:
        """Whether no executor has input it may take (checked with the bell armed): one whose
        output waits for room takes none (backpressure), so its queue must not keep the thread
        spinning; its idle_poll_secs brings it back soon."""
        return all(e.queue.is_empty() or e.transfer.overflow for e in executors)

    def _idle_wait(self, executors: list[Executor]) -> float:
        """How long an idle round may sleep: until the soonest call an executor or the data
        path wants though nothing arrives."""
        polls = [p for e in executors if (p := e.idle_poll_secs) is not None]
        return min(polls) if polls else _POLL_SECS

    def _run_alone(self, executor: Executor) -> None:
        """After a hand-off: run the executor whose call was stuck, alone, as a blocking
        component's thread would (its round's acks are its own to send)."""
        self._current = executor
        while not self._stopping and not executor.stopping:
            if not executor.run_once(_POLL_SECS) and executor.transfer.pending:
                # no input until the output is handed on: wait for the wake-up of a grant or of
                # room (the bell armed before the check, so none is lost)
                bell = executor.queue.bell
                bell.arm()
                secs = executor.idle_poll_secs
                bell.wait(_POLL_SECS if secs is None else secs)
            if executor.acks.round_waiting:
                executor.flush_round_acks()


class _Look:
    """What the watchdog saw of one runner: the call (executor, call count), since when, the
    executor's progress and since when it has not changed, and whether a stall was told."""

    __slots__ = ("executor", "calls", "since", "progress", "progress_since", "stall_told")

    def __init__(self, executor: Executor, calls: int, now: float) -> None:
        self.executor, self.calls, self.since = executor, calls, now
        self.progress, self.progress_since = executor.progress(), now
        self.stall_told = False


class Watchdog:
    """The one watch over a worker's runners (its timer thread calls :meth:`look` every
    :meth:`period` seconds; it only reads what the runners' threads write, and asks): a call
    into an executor that has not returned

    * for the executor's ``stall_secs`` (None: no limit): the executor is told, once per call
      (:meth:`~squall.runtime.executor.executor.Executor.stalled`);
    * without progress for ``handoff_secs``, on a cooperative thread running others:
      ``hand_off(runner, executor)`` (the worker's) moves the others to a new thread.

    A call is known from the first look that sees it, so either may come up to one period late.
    """

    def __init__(self, runners: list[_Runner], handoff_secs: float,
                 hand_off: Callable[[CooperativeThread, Executor], None],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._runners = runners  # the worker's list: runners a hand-off adds are watched too
        self._handoff_secs = handoff_secs
        self._hand_off = hand_off
        self._clock = clock
        self._looks: dict[_Runner, _Look] = {}

    def period(self) -> float:
        """How often to look: half the shortest stall limit, or the hand-off's delay."""
        limits = [e.stall_secs / 2 for r in self._runners for e in r.executors if e.stall_secs is not None]
        limits.append(self._handoff_secs)
        return min(limits)

    def look(self) -> None:
        now = self._clock()
        for runner in list(self._runners):
            executor, calls = runner.current_call()
            look = self._looks.get(runner)
            if executor is None:
                self._looks.pop(runner, None)
                continue
            if look is None or look.executor is not executor or look.calls != calls:
                self._looks[runner] = _Look(executor, calls, now)
                continue
            progress = executor.progress()
            if progress != look.progress:
                look.progress, look.progress_since = progress, now
            stall_secs = executor.stall_secs
            if stall_secs is not None and not look.stall_told and now - look.since >= stall_secs:
                look.stall_told = True
                executor.stalled(now - look.since)
            if now - look.progress_since >= self._handoff_secs and runner.can_hand_off():
                self._hand_off(runner, executor)
