"""What the cluster knows about one running topology beyond its code: errors, tracking.

In Storm this lives in ZooKeeper (``/errors`` keeps the last 10 errors per component);
here it is an in-memory object shared by the topology's workers.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

MAX_ERRORS_PER_COMPONENT = 10


class Tracker:
    """Counts tuples handed to executors minus tuples they finished (Storm's tracked topologies).

    An executor adds a batch's size before it hands the batch on and marks its own input
    done only after every emit it caused was added, so the count reaches 0 only when no
    tuple is queued or being processed anywhere.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._in_flight = 0

    def add(self, n: int) -> None:
        with self._lock:
            self._in_flight += n

    def done(self, n: int) -> None:
        with self._lock:
            self._in_flight -= n

    @property
    def in_flight(self) -> int:
        return self._in_flight


class TopologyState:
    """Errors of every component, and the optional test hooks (tracker, emit capture).

    Of each component it keeps the last :data:`MAX_ERRORS_PER_COMPONENT` errors, a run of
    identical ones folded into one entry with its ``count``, and the true count of all."""

    def __init__(
        self,
        tracker: Tracker | None = None,
        capture: Callable[[str, str, list[Any]], None] | None = None,
    ) -> None:
        self.tracker = tracker
        self.capture = capture
        self._lock = threading.Lock()
        self._errors: dict[str, deque[dict[str, Any]]] = {}
        self._counts: dict[str, int] = {}

    def report_error(self, component: str, task: int, text: str, when: float | None = None,
                     count: int = 1) -> None:
        """Record ``count`` occurrences of the error ``text`` (the last at ``when``)."""
        when = time.time() if when is None else when
        with self._lock:
            self._counts[component] = self._counts.get(component, 0) + count
            errors = self._errors.setdefault(component, deque(maxlen=MAX_ERRORS_PER_COMPONENT))
            if errors and errors[-1]["error"] == text:
                errors[-1].update(task=task, time=when, count=errors[-1]["count"] + count)
            else:
                errors.append({"error": text, "task": task, "time": when, "count": count})

    def errors(self, component: str) -> list[dict[str, Any]]:
        """The component's last errors, oldest first: ``error``, ``task``, ``time`` (the last
        occurrence's), ``count``."""
        with self._lock:
            return [dict(e) for e in self._errors.get(component, ())]

    def error_count(self, component: str) -> int:
        """How many errors the component reported, all of them."""
        with self._lock:
            return self._counts.get(component, 0)
