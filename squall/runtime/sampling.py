"""Tuple sampling (Storm UI's Debug) and a worker's thread stacks (Storm UI's JStack): what a
user looks at inside a running worker, on request.

**Sampling.** :class:`TupleSampler` keeps a share (``percent``) of one component's emits for a
while: each becomes a :class:`~squall.runtime.messaging.schema.TupleSample` (time, component,
stream, task, values shown as JSON-able data) in a buffer of at most :data:`SAMPLES_KEPT`, the
oldest dropped first. It costs nothing when off: the worker hands it to the component's
collectors (``set_sampler``) only while it runs, and takes it back once its time is up.

**Stacks.** :func:`thread_stacks` is the Python stack of every thread of this process, as text.
"""

from __future__ import annotations

import collections
import random
import sys
import threading
import time
import traceback
from typing import Any

from squall.runtime.messaging.schema import TupleSample

#: the samples a worker (and Nimbus, per topology) keeps at most
SAMPLES_KEPT = 1000
#: the longest a sampling runs
MAX_SAMPLING_SECS = 3600.0
#: how often a worker looks for samplings whose time is up
SAMPLING_CHECK_SECS = 0.5
#: the most text a stack dump carries (a message's text limit)
MAX_STACKS_TEXT = (1 << 20) - 100


class TupleSampler:
    """Keeps ``percent`` of ``component``'s emits in ``buffer`` until ``until`` (the cluster
    clock's seconds); called from the emitting executors' threads, never blocking."""

    def __init__(self, component: str, percent: float, until: float, buffer: collections.deque[TupleSample]) -> None:
        self.component = component
        self.share = percent / 100.0
        self.until = until
        self._buffer = buffer
        self._random = random.Random()

    def for_task(self, task: int) -> Any:
        """The sampler of ``task``'s collector: ``(stream, values, tasks)`` per emit."""
        def sample(stream: str, values: list[Any], tasks: list[int]) -> None:
            if self._random.random() < self.share:
                self._buffer.append(TupleSample(time.time(), self.component, stream, task, shown(values)))
        return sample


def shown(value: Any, depth: int = 0) -> Any:
    """``value`` as data the UI can show and msgpack can carry: numbers, strings, booleans and
    None as they are, lists, tuples and dicts of them likewise; anything else as its (short) repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value if not isinstance(value, str) or len(value) <= 1000 else value[:1000] + "…"
    if depth < 4 and isinstance(value, (list, tuple)):
        return [shown(v, depth + 1) for v in value[:100]]
    if depth < 4 and isinstance(value, dict):
        return {str(k): shown(v, depth + 1) for k, v in list(value.items())[:100]}
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "…"


def thread_stacks() -> str:
    """The current Python stack of every thread of this process, the threads by name."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sorted(sys._current_frames().items(), key=lambda item: names.get(item[0], "")):
        stack = "".join(traceback.format_stack(frame))
        parts.append(f'Thread "{names.get(ident, "?")}" ({ident}):\n{stack}')
    text = "\n".join(parts)
    return text if len(text) <= MAX_STACKS_TEXT else text[:MAX_STACKS_TEXT] + "\n… (cut)"
