"""The cyclic garbage collector's thresholds while workers run (``topology.worker.gc.thresholds``).

Every tuple is a container object, so a busy worker allocates millions of them a second;
with CPython's default first threshold (700 allocations) the collector runs thousands of
times a second and scans the tuples queued between executors each time: about a fifth of
a word count's time (benchmarks/vs_bytewax.py). Tuples are freed by reference counting
anyway; a higher threshold only lets cyclic garbage wait a little longer. The count that
triggers a collection is of tracked objects made less those freed, so what a worker
receives from another (a payload's values decoded at once, alive in the queues) is what
drives it: with two worker processes exchanging words (benchmarks/scaling.py), each spent
about 8% of its time collecting at 10,000 (a young collection every ~25 ms, of ~1 ms, and
every tenth a middle one of ~10 ms) and about 1% at 100,000. This is the Python counterpart
of the GC options Storm users give worker JVMs.

The thresholds are the process's: they are set while at least one worker of this process
runs and the previous ones are restored when the last stops (in-process topologies share
their user's process).
"""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()
_holders = 0
_previous: tuple[int, int, int] | None = None


def hold(thresholds: list[int] | tuple[int, ...] | None) -> None:
    """A worker starts: apply ``thresholds`` (None: leave the collector alone)."""
    global _holders, _previous
    with _lock:
        _holders += 1
        if thresholds is not None:
            if _previous is None:
                _previous = gc.get_threshold()
            gc.set_threshold(*thresholds)


def release() -> None:
    """A worker stopped: the last one restores the thresholds it found."""
    global _holders, _previous
    with _lock:
        _holders -= 1
        if _holders == 0 and _previous is not None:
            gc.set_threshold(*_previous)
            _previous = None
