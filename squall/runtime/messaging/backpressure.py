"""Backpressure between workers: credit-based flow control (Flink's credit-based flow control,
in place of Storm 2's "my queues are full" announcements).

A worker sends tuples to an executor of another worker only against *credit* that worker
granted it, one unit per tuple (an ack or completion batch counts as one). So what a worker
holds from others never exceeds the room it granted, and a sender that has no credit waits for
a grant instead of sending and hoping. The rules, in the order a tuple meets them:

1. **Windows.** Each executor's incoming queue (:class:`~squall.utils.batch_queue.BatchQueue`)
   holds ``topology.executor.receive.buffer.size`` tuples of its own worker's executors, and
   gives every other worker of the topology a window of its own,
   ``topology.receiver.credit.size`` tuples (:func:`credit_window`; as Flink gives each input
   channel buffers of its own): a slow peer or a busy local producer never takes another's
   room, and what a queue holds is bounded by its size plus a window per other worker.
2. **Grants** (:class:`CreditGrants`, the receiving side): a window is granted to each run of
   each peer worker once that run is heard from, and every tuple it sent is granted again when
   the executor takes it off the queue (``BatchQueue.on_release``; as Flink recycles a buffer
   once its records are read): credit the peer holds plus its tuples waiting in this worker's
   queue never exceed the window, and the sender refills the queue while the executor works
   through what it took (one take at most: the executor takes no more until it is done). A
   peer that restarts gets back the credit its dead run held; what a dead run sent after that
   is dropped (it would not fit).
3. **Credit** (:class:`Credits`, the sending side): a worker's send path spends credit when it
   hands a batch to the worker's transfer (all of the batch's tasks at once, or nothing) and,
   without it, keeps the batch waiting: a blocking sender waits on :meth:`Credits.wait`, a
   non-blocking one is woken by a grant (``watch``). Nobody polls. Credit is also what load-aware
   shuffle reads as another worker's task load.
4. **Announcements travel one way: with the payloads.** Grants are cumulative counts per (peer
   run, queue), so an announcement repeated or out of date does no harm. Changed grants ride to
   the peer with the payloads going there, as a
   :class:`~squall.runtime.messaging.tuple_batch.CreditGrant` group sent by the worker's transfer
   path (:mod:`squall.runtime.worker_transfer`); a quarter of a window or more goes in a payload
   of its own if nothing else is going. Runs find each other the same way: a worker greets every
   peer it is told of (a payload with its grants, or none yet), and a receiver that hears of a
   new run of a peer (from any payload's sender and run, or first from the master, which names
   every worker's run as soon as it binds) grants it a window and sends it at once; from then
   on what the dead run left is dropped. A payload is lost only with a dead run, whose credit is
   void anyway; the new run greets again. Nobody polls, and no port of its own carries credit.

Queues are named, in grants, by their executor's first task (:func:`queue_keys`).
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Callable, Container, Iterable, Mapping
from typing import Any

from squall.api.config import Config
from squall.runtime.assignment import Assignment
from squall.runtime.messaging import tuple_batch
from squall.utils.batch_queue import BatchQueue


def credit_window(conf: Mapping[str, Any]) -> int:
    """The credit each other worker gets per executor queue (``topology.receiver.credit.size``;
    a window of its own, as Flink gives every input channel buffers of its own)."""
    return conf[Config.TOPOLOGY_RECEIVER_CREDIT_SIZE]


def send_batch_size(conf: Mapping[str, Any]) -> int:
    """How many tuples a send path gathers for one destination before handing them on: the
    producer batch, never more than the send buffer nor a credit window (or no credit would
    ever be enough for it)."""
    return min(conf[Config.TOPOLOGY_PRODUCER_BATCH_SIZE], conf[Config.TOPOLOGY_EXECUTOR_SEND_BUFFER_SIZE],
               credit_window(conf))


def queue_keys(assignment: Assignment) -> dict[int, int]:
    """Task -> the key its executor's queue has in grants (the executor's first task)."""
    return {t: ea.tasks[0] for w in assignment.workers for ea in w.executors for t in ea.tasks}


class CreditGrants:
    """What one worker lets each peer worker send to each of its executors' queues.

    ``queues`` maps a queue key to the queue; ``wake()`` is called (never under a lock of this
    object) when grants changed and :meth:`take_changes` has something new (the transfer
    path's wake-up); ``unlimited``: no credit is kept (a transport that needs none). Thread-safe: the receive
    path calls :meth:`heard` and :meth:`deliver`, executors' threads release through their
    queues, the thread that learns the peers' addresses calls :meth:`greet`.
    """

    def __init__(self, queues: Mapping[int, BatchQueue], window: int, wake: Callable[[], None],
                 unlimited: bool = False) -> None:
        self._unlimited = unlimited
        self._queues = dict(queues)
        self._key_of = {id(q): key for key, q in self._queues.items()}
        self._window = window
        self._wake = wake
        self._lock = threading.Lock()
        self._runs: dict[int, int] = {}  # peer -> the run granted to
        # per peer, per queue key: [granted to its run, arrived from its run, held (queued)]
        self._ledger: dict[int, dict[int, list[int]]] = {}
        self._changed: set[int] = set()  # peers whose grants changed since take_changes
        self._unsent: dict[int, int] = {}  # peer -> tuples granted since take_changes took its grants
        self._greet: set[int] = set()  # peers to greet with the next payloads
        if not unlimited:
            for key, q in self._queues.items():
                q.on_release = self._releaser(key)

    def _releaser(self, key: int) -> Callable[[dict[int, int]], None]:
        return lambda origins: self._release(key, origins)

    def heard(self, peer: int, run: int) -> None:
        """``peer`` runs as ``run``: a new run gets a window per queue, less what its worker's
        earlier runs sent that this worker still holds; what its dead run held is void."""
        with self._lock:
            current = self._runs.get(peer)
            if current is not None and run <= current:
                return
            self._runs[peer] = run
            ledger = self._ledger.setdefault(peer, {})
            for key in self._queues:
                entry = ledger.setdefault(key, [0, 0, 0])
                entry[0], entry[1] = self._window - entry[2], 0
            wake = self._changed_for(peer, self._window)
        if wake:  # out of the lock
            self._wake()

    def deliver(self, sender: int, run: int, puts: Iterable[tuple[BatchQueue, list[Any]]],
                dropped: Mapping[BatchQueue, int]) -> bool:
        """Put what ``run`` of ``sender`` sent on the queues, in order, against its credit; tuples
        it spent credit on that were ``dropped`` (malformed) are granted again. False (nothing
        put) if ``run`` is not the run granted to: a dead run's leftovers."""
        if self._unlimited:
            for q, batch in puts:
                q.force_put(batch, len(batch))
            return True
        key_of = self._key_of
        with self._lock:
            if self._runs.get(sender) != run:
                return False
            ledger = self._ledger[sender]
            for q, batch in puts:
                n = len(batch)
                entry = ledger[key_of[id(q)]]
                entry[1] += n
                entry[2] += n
                q.force_put(batch, n, sender)
            wake = False
            for q, n in dropped.items():
                entry = ledger[key_of[id(q)]]
                entry[0] += n
                entry[1] += n
                wake = self._changed_for(sender, n) or wake
        if wake:  # out of the lock
            self._wake()
        return True

    def _release(self, key: int, origins: dict[int, int]) -> None:
        """The executor of queue ``key`` took tuples of these peers: grant them again."""
        wake = False
        with self._lock:
            for peer, n in origins.items():
                entry = self._ledger[peer][key]
                entry[2] -= n
                entry[0] += n
                wake = self._changed_for(peer, n) or wake
        if wake:  # out of the lock
            self._wake()

    def _changed_for(self, peer: int, n: int) -> bool:
        """``n`` more tuples granted to ``peer`` (under the lock); whether that makes a quarter
        window unsent, worth a payload of its own."""
        self._changed.add(peer)
        unsent = self._unsent[peer] = self._unsent.get(peer, 0) + n
        return (unsent - n) * 4 < self._window <= unsent * 4

    def greet(self, peers: Iterable[int]) -> None:
        """Send ``peers`` (new to this worker, or at a new address) this worker's grants with
        the next payloads, or a payload without any if they were not heard from yet: how they
        hear of this run (see the module's docstring)."""
        with self._lock:
            for peer in peers:
                self._greet.add(peer)
                if peer in self._runs:
                    self._changed.add(peer)
        self._wake()

    def take_greetings(self) -> list[int]:
        """The peers :meth:`greet` named since the last call (the transfer path's)."""
        if not self._greet:  # read without the lock, as take_changes
            return []
        with self._lock:
            greet, self._greet = list(self._greet), set()
        return greet

    def take_changes(self, going: Container[int]) -> list[tuple[int, int, dict[int, int]]]:
        """(peer, its run, queue key -> granted) for the peers whose grants changed since the
        last call and that something is ``going`` to anyway, or that were granted a quarter
        window or more since: what the transfer path sends them."""
        if not self._changed:  # read without the lock: a change racing with it is taken next time
            return []
        out = []
        with self._lock:
            for peer in list(self._changed):
                if peer in going or self._unsent[peer] * 4 >= self._window:
                    self._changed.discard(peer)
                    self._unsent[peer] = 0
                    out.append((peer, self._runs[peer], {key: entry[0] for key, entry in self._ledger[peer].items()}))
        return out

    def held(self) -> int:
        """Tuples of other workers waiting in this worker's queues."""
        with self._lock:
            return sum(entry[2] for ledger in self._ledger.values() for entry in ledger.values())


class Credits:
    """The credit one worker holds to send to the executors of the others.

    ``keys`` maps each task to its queue key, ``task_worker`` each task to its worker,
    ``local_queues`` this worker's tasks to their queues; ``batch`` (the send paths' batch
    size), ``window`` (a credit window) and ``capacity`` (an executor queue's own room) are for
    :meth:`load`. :meth:`spend` is
    called by executors' send paths (any thread), :meth:`update` by whoever reads the peers'
    announcements; ``unlimited``: every spend succeeds (a transport that keeps no credit).
    """

    def __init__(self, index: int, run: int, keys: Mapping[int, int], task_worker: Mapping[int, int],
                 local_queues: Mapping[int, BatchQueue], batch: int, window: int, capacity: int,
                 unlimited: bool = False) -> None:
        self.run = run
        self._batch = batch
        self._window = window
        self._capacity = capacity
        self._local_queues = local_queues
        self._key = {t: k for t, k in keys.items() if task_worker[t] != index}
        self._key_worker = {k: task_worker[k] for k in self._key.values()}
        self.unlimited = unlimited
        self._cond = threading.Condition()
        self._runs: dict[int, int] = {}  # peer -> its run the credit is from
        self._granted: dict[int, int] = {}  # key -> granted by that run so far
        self._spent: dict[int, int] = {}  # key -> spent of it
        self._watchers: list[Callable[[], None]] = []
        #: grows with every grant: a sender that failed to spend at one version may retry at the next
        self.version = 0

    def watch(self, wake: Callable[[], None]) -> None:
        """Call ``wake()`` whenever credit is granted (a non-blocking sender's wake-up)."""
        self._watchers.append(wake)

    def update(self, peer: int, run: int, grants: tuple[int, dict[int, int]] | None) -> None:
        """``run`` of ``peer`` announced ``grants`` for this worker (its run, queue key ->
        granted so far), or None (it has not heard from this run yet). Credit from an earlier
        run of ``peer`` is void: its queues are gone."""
        with self._cond:
            current = self._runs.get(peer)
            if current is not None and run < current:
                return
            if run != current:
                self._runs[peer] = run
                for key, worker in self._key_worker.items():
                    if worker == peer:
                        self._granted[key] = self._spent[key] = 0
            if grants is not None and grants[0] == self.run:
                for key, total in grants[1].items():
                    if self._key_worker.get(key) == peer and total > self._granted.get(key, 0):
                        self._granted[key] = total
            self.version += 1
            self._cond.notify_all()
        for wake in self._watchers:
            wake()

    def spend(self, groups: list[Any]) -> bool:
        """Spend the credit ``groups`` (for one other worker) need, all or nothing: False (nothing
        spent) if some queue they go to has not granted enough."""
        if self.unlimited:
            return True
        need = self._need(groups)
        with self._cond:
            granted, spent = self._granted, self._spent
            for key, n in need.items():
                if granted.get(key, 0) - spent.get(key, 0) < n:
                    return False
            for key, n in need.items():
                spent[key] = spent.get(key, 0) + n
        return True

    def _need(self, groups: list[Any]) -> dict[int, int]:
        key = self._key
        need: dict[int, int] = {}
        for group in groups:
            if group.__class__ is tuple_batch.TupleGroup:
                for task, n in collections.Counter(group.tasks).items():
                    k = key[task]
                    need[k] = need.get(k, 0) + n
            else:
                k = key[group.acker_task if group.__class__ is tuple_batch.AckBatch else group.spout_task]
                need[k] = need.get(k, 0) + 1
        return need

    def wait(self, version: int, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a grant after ``version`` (a blocking sender)."""
        with self._cond:
            self._cond.wait_for(lambda: self.version != version, timeout)

    def load(self, task: int) -> float:
        """How full ``task``'s queue looks from here, 0 to 1 (load-aware shuffle): measured for
        this worker's tasks. Another worker's is full while this worker has less credit for it
        than a batch; else what this worker sent it and it has not taken yet (its window less the
        credit left: in flight, queued there, or being executed), over the room of a local queue.
        So a remote task and a local one with as many of this worker's tuples waiting weigh
        alike: were remote tasks read by their window's share, a window larger than a local
        queue would hold most of the spout's pending tuples, and starve the local tasks."""
        q = self._local_queues.get(task)
        if q is not None:
            return q.load()
        if self.unlimited:
            return 0.0
        k = self._key[task]
        left = self._granted.get(k, 0) - self._spent.get(k, 0)
        if left < self._batch:
            return 1.0
        return min(1.0, (self._window - left) / self._capacity)
