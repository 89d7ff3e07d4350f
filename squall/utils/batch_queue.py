"""A bounded multi-producer, single-consumer queue of batches (Squall's ``JCQueue``).

Storm puts a bounded ring buffer between threads and consumes it in batches. In CPython
the cost that matters is per call, not per slot, so producers hand over whole batches
(lists of tuples) and the consumer takes everything queued in one call. The lock is taken
once per batch, never per tuple. The bound counts tuples, not batches: a full queue keeps
the working set small enough to stay in the CPU's caches.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any


class BatchQueue:
    """Bounded queue; each element is a batch of ``size`` tuples (or a control message).

    * :meth:`put` blocks while the queue holds ``capacity`` tuples or more (backpressure);
      the batch that fills it may overshoot by its own size.
    * :meth:`force_put` never blocks: for control messages and for paths that must not
      wait (a worker's receive path), whose volume the senders bound.
    * :meth:`take_all` is for the single consumer: it returns every queued element,
      waiting up to ``timeout`` seconds for one to arrive.
    """

    __slots__ = ("capacity", "name", "on_room", "_items", "_size", "_lock", "_bell", "_not_full",
                 "_consumer_waiting", "_producers_waiting")

    def __init__(self, capacity: int, name: str = "") -> None:
        if capacity < 1:
            raise ValueError(f"queue {name!r}: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.name = name
        # called (under the queue's lock; must be quick) when the consumer drains a full queue
        self.on_room: Callable[[], None] | None = None
        self._items: deque[Any] = deque()
        self._size = 0  # tuples queued
        self._lock = threading.Lock()
        # Wakes the waiting consumer: a bare lock, held while nobody rang. Cheaper than a
        # Condition, whose wait allocates a lock each time; the consumer waits once per
        # batch or less, so this is on the hot path.
        self._bell = threading.Lock()
        self._bell.acquire()
        self._not_full = threading.Condition(self._lock)
        self._consumer_waiting = False
        self._producers_waiting = 0

    def __len__(self) -> int:
        """Tuples queued."""
        return self._size

    def has_room(self) -> bool:
        return self._size < self.capacity

    def put(self, item: Any, size: int = 1, timeout: float | None = None) -> bool:
        """Append ``item`` (``size`` tuples), waiting while the queue is full. False if
        ``timeout`` expired."""
        with self._lock:
            if self._size >= self.capacity:
                self._producers_waiting += 1
                try:
                    if not self._not_full.wait_for(self.has_room, timeout):
                        return False
                finally:
                    self._producers_waiting -= 1
            self._items.append(item)
            self._size += size
            if self._consumer_waiting:
                self._ring()
        return True

    def force_put(self, item: Any, size: int = 1) -> None:
        """Append ``item`` (``size`` tuples) even if the queue is full."""
        with self._lock:
            self._items.append(item)
            self._size += size
            if self._consumer_waiting:
                self._ring()

    def _ring(self) -> None:
        # under self._lock; rings at most once per wait, so the bell is never released twice
        self._consumer_waiting = False
        self._bell.release()

    def take_all(self, timeout: float | None = 0) -> list[Any]:
        """Every queued element, oldest first; waits up to ``timeout`` for one ([] if none)."""
        with self._lock:
            if self._items or not timeout:
                return self._drain()
            self._consumer_waiting = True
        rung = self._bell.acquire(True, -1 if timeout is None else timeout)
        with self._lock:
            if not rung and not self._consumer_waiting:
                self._bell.acquire()  # rung just after the timeout: take the ring, re-arming the bell
            self._consumer_waiting = False
            return self._drain()

    def _drain(self) -> list[Any]:
        # under self._lock
        if not self._items:
            return []
        items = list(self._items)
        self._items.clear()
        was_full, self._size = self._size >= self.capacity, 0
        if self._producers_waiting:
            self._not_full.notify_all()
        if was_full and self.on_room is not None:
            self.on_room()
        return items

    def wake(self) -> None:
        """Wake the consumer and producers if they wait (e.g. to notice a stop request)."""
        with self._lock:
            if self._consumer_waiting:
                self._ring()
            self._not_full.notify_all()
