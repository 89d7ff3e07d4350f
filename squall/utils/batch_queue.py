"""A bounded multi-producer, single-consumer queue of batches (Squall's ``JCQueue``).

Storm puts a bounded ring buffer between threads and consumes it in batches. In CPython
the cost that matters is per call, not per slot, so producers hand over whole batches
(lists of tuples) and the consumer takes everything queued in one call. The lock is taken
once per batch, never per tuple, and not at all for batches the consumer's own thread
hands over (executors that run cooperatively in one thread pass batches to each other so). The bound counts tuples, not batches: a full queue keeps
the working set small enough to stay in the CPU's caches.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from itertools import count
from threading import get_ident
from typing import Any


class Bell:
    """Wakes one waiting consumer thread; several queues may share one (a thread that
    consumes all of them waits on it once).

    A bare lock held while nobody rang: cheaper than a Condition, whose wait allocates a
    lock each time; a consumer waits once per batch or less, so this is on the hot path.
    A consumer that must also wait for sockets polls :meth:`fileno` with them instead of
    calling :meth:`wait`, then calls :meth:`disarm`.
    """

    __slots__ = ("waiting", "_lock", "_rung", "_pipe")

    def __init__(self) -> None:
        self.waiting = False
        self._lock = threading.Lock()
        self._rung = threading.Lock()
        self._rung.acquire()
        self._pipe: tuple[int, int] | None = None

    def arm(self) -> None:
        """Announce a wait: a producer appending from now on rings. The consumer checks its
        queues after arming and before waiting, so no ring is lost in between."""
        self.waiting = True

    def disarm(self) -> None:
        """End a wait (after :meth:`wait` timed out, or a poll of :meth:`fileno` returned)."""
        with self._lock:
            rung = not self.waiting
            self.waiting = False
        if rung:
            self._rung.acquire()  # rung after arming: take the ring, re-arming the bell
            self._drain_pipe()

    def _drain_pipe(self) -> None:
        # the byte of the ring just taken (written before its release)
        if self._pipe is not None:
            os.read(self._pipe[0], 1)

    def ring(self) -> None:
        """Wake the consumer if it is armed (rings at most once per wait)."""
        with self._lock:
            if not self.waiting:
                return
            self.waiting = False
        if self._pipe is not None:  # before the release: whoever takes the ring finds the byte
            try:
                os.write(self._pipe[1], b"r")
            except OSError:
                pass  # closed: the consumer is gone
        self._rung.release()

    def wait(self, timeout: float | None) -> None:
        """Wait (armed) up to ``timeout`` seconds for a ring; disarmed on return."""
        if self._rung.acquire(True, -1 if timeout is None else timeout):
            self._drain_pipe()
        else:
            self.disarm()

    def fileno(self) -> int:
        """A file descriptor that becomes readable when the bell rings (made on first use)."""
        if self._pipe is None:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            self._pipe = (r, w)
        return self._pipe[0]

    def close(self) -> None:
        """Close the file descriptors of :meth:`fileno`, if made."""
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            for fd in pipe:
                os.close(fd)


class BatchQueue:
    """Bounded queue; each element is a batch of ``size`` tuples (or a control message).

    * :meth:`put` blocks while the queue holds ``capacity`` tuples or more (backpressure);
      the batch that fills it may overshoot by its own size. What the consumer took counts
      until it calls :meth:`done` (or takes again): a batch being executed still occupies the
      queue, so a slow consumer that took a large batch is not taken for one with room.
    * :meth:`force_put` never blocks: for control messages and for paths that must not
      wait (a worker's receive path, cooperative executors), whose volume the senders bound.
    * :meth:`offer` appends only if there is room, and never blocks; a producer it turned away
      may leave a ``wake`` callable, called once the consumer makes room (nobody polls a full
      queue).
    * :meth:`force_put` and :meth:`offer` take no lock when called from the consumer's own
      thread (``consumer``, set by the consumer when it starts).
    * :meth:`take_all` is for the single consumer: it returns every queued element,
      waiting up to ``timeout`` seconds for one to arrive, in the order they were put. A
      producer's elements therefore arrive in its order even when it moves to another thread
      while some are queued (a worker's hand-off of its executors to a new thread), as
      checkpoint barriers need: the channel from one task to another is FIFO.
    * ``bell`` wakes the consumer; a thread consuming several queues gives them one.
    * Credit (see :mod:`squall.runtime.messaging.backpressure`): tuples other workers sent arrive by a
      :meth:`force_put` with an ``origin`` (the sending worker). Their room is the credit their
      worker was granted, on top of ``capacity``: the room local producers see counts their
      own tuples only. Once the consumer takes such tuples ``on_release`` is called with their
      count per origin (in the consumer's thread, under no lock of the queue), so that their
      senders may send more while they execute.
    """

    __slots__ = ("capacity", "name", "on_release", "consumer", "_items", "_size", "_local", "_local_size",
                 "_seq", "_taken", "_remote", "_remote_taken", "_arrived", "_lock", "_bell",
                 "_not_full", "_producers_waiting", "_room_waiters")

    def __init__(self, capacity: int, name: str = "", bell: Bell | None = None) -> None:
        if capacity < 1:
            raise ValueError(f"queue {name!r}: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.name = name
        # called with {origin: tuples} when the consumer is done with tuples put with an origin
        self.on_release: Callable[[dict[int, int]], None] | None = None
        self.consumer = 0  # the consuming thread's ident, once it has started
        self._items: deque[Any] = deque()
        self._size = 0  # tuples queued by other threads
        self._local: list[Any] = []  # batches from the consumer's own thread (no lock)
        self._local_size = 0
        # both lists hold (put number, element): the numbers come from one counter (atomic under
        # the GIL), so that take_all returns the elements in the order they were put
        self._seq = count()
        self._taken = 0  # tuples the consumer took and is not done with (see done)
        self._remote = 0  # tuples of other workers queued (see force_put's origin)
        self._remote_taken = 0  # and taken
        self._arrived: dict[int, int] = {}  # origin -> its tuples queued (under the lock)
        self._lock = threading.Lock()
        self._bell = bell if bell is not None else Bell()
        self._not_full = threading.Condition(self._lock)
        self._producers_waiting = 0
        self._room_waiters: list[Callable[[], None]] = []  # offer's turned-away producers (under the lock)

    def set_bell(self, bell: Bell) -> None:
        """Wake the consumer with ``bell`` from now on (its thread must not be waiting): a
        producer that still rings the old one wakes its other consumer for nothing, and the
        consumer checks the queue after arming, so no batch is missed."""
        self._bell = bell

    @property
    def bell(self) -> Bell:
        """The bell that wakes the consumer."""
        return self._bell

    def __len__(self) -> int:
        """Tuples queued."""
        return self._size + self._local_size

    def load(self) -> float:
        """How full the queue is, 0.0 to 1.0, what the consumer is executing included (any
        thread; a racy read is fine for the load-aware shuffle that asks)."""
        return min(1.0, (self._size + self._local_size + self._taken) / self.capacity)

    def has_room(self) -> bool:
        return self._size + self._local_size + self._taken - self._remote - self._remote_taken < self.capacity

    def held(self) -> int:
        """Tuples queued and taken, other workers' included (any thread; a racy read)."""
        return self._size + self._local_size + self._taken

    def is_empty(self) -> bool:
        """Nothing queued (lock-free; exact from the consumer's thread once its bell is armed)."""
        return not (self._items or self._local)

    def put(self, item: Any, size: int = 1, timeout: float | None = None) -> bool:
        """Append ``item`` (``size`` tuples), waiting while the queue is full. False if
        ``timeout`` expired."""
        with self._lock:
            if not self.has_room():
                self._producers_waiting += 1
                try:
                    if not self._not_full.wait_for(self.has_room, timeout):
                        return False
                finally:
                    self._producers_waiting -= 1
            self._items.append((next(self._seq), item))
            self._size += size
        if self._bell.waiting:
            self._bell.ring()
        return True

    def force_put(self, item: Any, size: int = 1, origin: int = -1) -> None:
        """Append ``item`` (``size`` tuples) even if the queue is full; an ``origin`` >= 0 (the
        worker that sent them) puts them in the room its credit stands for."""
        if origin >= 0:
            with self._lock:
                self._items.append((next(self._seq), item))
                self._size += size
                self._remote += size
                self._arrived[origin] = self._arrived.get(origin, 0) + size
            if self._bell.waiting:
                self._bell.ring()
            return
        if get_ident() == self.consumer:
            self._local.append((next(self._seq), item))
            self._local_size += size
            return
        with self._lock:
            self._items.append((next(self._seq), item))
            self._size += size
        if self._bell.waiting:
            self._bell.ring()

    def offer(self, item: Any, size: int = 1, wake: Callable[[], None] | None = None) -> bool:
        """Append ``item`` (``size`` tuples) if the queue has room; False (nothing appended)
        if it is full, and then ``wake()`` is called (once, by the consumer's thread, never
        under a lock) when the consumer makes room."""
        if not self.has_room():
            if wake is None:
                return False
            with self._lock:
                if wake not in self._room_waiters:
                    self._room_waiters.append(wake)
            if not self.has_room():  # else the consumer made room meanwhile: no wake-up is lost
                return False
        self.force_put(item, size)
        return True

    def take_all(self, timeout: float | None = 0) -> list[Any]:
        """Every queued element, oldest first per producing thread (other threads' first);
        waits up to ``timeout`` for one ([] if none). What it returned before is done with."""
        if self._taken:
            self.done()
        if self._items or self._local or not timeout:
            return self._drain()
        bell = self._bell
        bell.arm()
        if self._items:
            bell.disarm()
        else:
            bell.wait(timeout)
        return self._drain()

    def done(self) -> None:
        """The consumer is done with what it took (the queue's room counts it no more)."""
        if not self._taken:
            return
        was_full = not self.has_room()
        self._taken = self._remote_taken = 0
        if was_full and self.has_room() and self._producers_waiting:
            with self._lock:
                self._not_full.notify_all()
        if self._room_waiters:  # read without the lock: offer checks the room again after it waits
            with self._lock:
                waiters, self._room_waiters = self._room_waiters, []
            for wake in waiters:
                wake()

    def _drain(self) -> list[Any]:
        # what is drained becomes taken: room does not change here, so nobody is notified
        entries = local = self._local
        taken = self._local_size
        if local:
            self._local = []
            self._local_size = 0
        released = None
        # _items is read without the lock: an append racing with the read is taken next time
        if self._items:
            with self._lock:
                entries = list(self._items)
                self._items.clear()
                taken += self._size
                self._size = 0
                if self._arrived:  # taken: their senders get the credit back (see on_release)
                    released, self._arrived = self._arrived, {}
                    self._remote_taken, self._remote = self._remote, 0
            if local:
                interleaved = entries[-1][0] > local[0][0]
                entries += local
                if interleaved:
                    # put order across the lists (put numbers are unique: elements are never
                    # compared): a producer that moved from the consumer's thread to another,
                    # or back, has elements in both
                    entries.sort()
        self._taken = taken
        if released is not None:
            self.on_release(released)
        return [item for _, item in entries]

    def wake(self) -> None:
        """Wake the consumer and producers if they wait (e.g. to notice a stop request)."""
        self._bell.ring()
        with self._lock:
            self._not_full.notify_all()

