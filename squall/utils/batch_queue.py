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

    __slots__ = ("capacity", "name", "_items", "_size", "_lock", "_not_empty", "_not_full", "_consumer_waiting",
                 "_producers_waiting")

    def __init__(self, capacity: int, name: str = "") -> None:
        if capacity < 1:
            raise ValueError(f"queue {name!r}: capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.name = name
        self._items: deque[Any] = deque()
        self._size = 0  # tuples queued
        self._lock = threading.Lock()
        self._not_empty = threading.Condition(self._lock)
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
                self._not_empty.notify()
        return True

    def force_put(self, item: Any, size: int = 1) -> None:
        """Append ``item`` (``size`` tuples) even if the queue is full."""
        with self._lock:
            self._items.append(item)
            self._size += size
            if self._consumer_waiting:
                self._not_empty.notify()

    def take_all(self, timeout: float | None = 0) -> list[Any]:
        """Every queued element, oldest first; waits up to ``timeout`` for one ([] if none)."""
        with self._lock:
            if not self._items:
                if not timeout:
                    return []
                self._consumer_waiting = True
                try:
                    self._not_empty.wait(timeout)
                finally:
                    self._consumer_waiting = False
                if not self._items:
                    return []
            items = list(self._items)
            self._items.clear()
            self._size = 0
            if self._producers_waiting:
                self._not_full.notify_all()
        return items

    def wake(self) -> None:
        """Wake the consumer if it waits (e.g. to notice a stop request)."""
        with self._lock:
            self._not_empty.notify_all()
            self._not_full.notify_all()
