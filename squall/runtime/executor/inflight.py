"""How much a stateful spout task has in flight, and when it must wait (Flink's buffer
debloating, end to end).

A stateful spout emits untracked records (its checkpoints, not replays, make it reliable), so
``topology.max.spout.pending`` counting trees cannot hold it back, and a backlog would fill
every queue downstream: a checkpoint barrier then waits behind all of it. Instead, the spout
executor sends a *marker* behind the records every few milliseconds: a tracked tuple on the
``$checkpoint`` stream that every bolt passes on once it came from each of its upstream tasks
that the spout task reaches, without holding any data back (see
:mod:`squall.runtime.executor.checkpointing`). Its tree completes once every task has processed what
the spout task emitted before it. So

* records in flight = records emitted - records emitted before the newest completed marker;
* throughput = records whose markers completed, per second (a moving average);
* the task's limit = throughput x ``topology.state.spout.inflight.ms`` (at most
  ``topology.max.spout.pending`` records, when set): its ``next_tuple`` is not called while
  that many records are in flight. A barrier waits behind about that much time of data.

The limit starts small and grows at most fourfold per completed marker (a burst does not
flood the queues before the first measurement). A marker lost with a dead worker is followed,
after :data:`RESEND_SECS` without completions, by a new one (a later marker completing stands
for every earlier one).

Used from the spout executor's thread only; no method blocks.
"""

from __future__ import annotations

import time

#: how often a marker follows the records while the spout task emits
MARKER_SECS = 0.02
#: a task waiting on markers none of which completed for this long sends another
RESEND_SECS = 1.0
#: the limit before any marker completed, and its floor
START_RECORDS, MIN_RECORDS = 64, 1
#: markers remembered at most (lost ones are forgotten first)
_MAX_MARKERS = 64
#: records per second: the weight of the newest sample in the average
_SMOOTHING = 0.3


class InFlight:
    """One stateful spout task's records in flight (see the module's docstring)."""

    def __init__(self, budget_secs: float, cap: int | None) -> None:
        self._budget = budget_secs
        self._cap = cap
        self.limit = START_RECORDS if cap is None else min(START_RECORDS, cap)
        # root -> (records emitted before it, when the first of those after the previous marker went)
        self._markers: dict[int, tuple[int, float]] = {}
        self._done = 0  # records emitted before the newest completed marker
        self._done_at: float | None = None
        self._rate: float | None = None  # records per second through the topology
        self._marked = 0  # records emitted before the newest marker sent
        self._marked_at = 0.0
        self._unmarked_since: float | None = None  # when records went out after the newest marker

    def room(self, emitted: int) -> int:
        """How many more records may be emitted now (``emitted``: so far)."""
        return self.limit - (emitted - self._done)

    def wants_marker(self, emitted: int, now: float) -> bool:
        """Whether to send a marker now: records went out since the last one and it is time
        (or the task is held back), or the task waits on markers that are not coming back."""
        since = now - self._marked_at
        if emitted > self._marked:
            if self._unmarked_since is None:
                self._unmarked_since = now
            return since >= MARKER_SECS or self.room(emitted) <= 0
        return self.room(emitted) <= 0 and since >= RESEND_SECS

    def sent(self, root: int, emitted: int, now: float) -> None:
        if len(self._markers) >= _MAX_MARKERS:
            del self._markers[next(iter(self._markers))]
        self._markers[root] = (emitted, now if self._unmarked_since is None else self._unmarked_since)
        self._marked, self._marked_at, self._unmarked_since = emitted, now, None

    def completed(self, root: int, acked: bool) -> bool:
        """Marker ``root``'s tree completed (or failed); False if ``root`` is no marker of
        this task's in flight."""
        marker = self._markers.pop(root, None)
        if marker is None:
            return False
        if not acked or marker[0] <= self._done:
            return True  # lost on the way, or overtaken by a later one
        now = time.monotonic()
        records, since = marker[0] - self._done, marker[1]
        if self._done_at is not None:
            since = max(since, self._done_at)  # they were processed after the last completion, and after they went
        if now > since:
            sample = records / (now - since)
            self._rate = sample if self._rate is None else self._rate + _SMOOTHING * (sample - self._rate)
            limit = min(int(self._rate * self._budget), 4 * self.limit)
            self.limit = max(MIN_RECORDS, limit if self._cap is None else min(limit, self._cap))
        self._done, self._done_at = marker[0], now
        # earlier markers still out were lost (a later one completed): forget them
        for old in [r for r, (count, _) in self._markers.items() if count <= self._done]:
            del self._markers[old]
        return True
