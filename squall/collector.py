"""Output collectors: how spouts and bolts emit, ack and fail.

One collector per task. Emitting picks target tasks with the stream's groupings, creates
the tuples (with fresh edge ids when the emit is tracked) and hands them to the executor's
send path. Every method is thread-safe: it takes the executor's lock, so a bolt may emit
and ack from threads of its own.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from squall.acker import ACK_ACK, ACK_FAIL, ACK_INIT, ACK_RESET_TIMEOUT, acker_for
from squall.errors import EmitError
from squall.tuple import Tuple

if TYPE_CHECKING:
    from squall.executor import Executor, StreamRoute

# Edge and root ids: a generator of our own, so user code seeding `random` cannot make them collide.
_rand64 = random.Random().getrandbits


class _Collector:
    def __init__(self, executor: Executor, task_id: int, routes: dict[str, StreamRoute]) -> None:
        self._executor = executor
        self._task_id = task_id
        self._routes = routes
        self._lock = executor.lock
        self._send = executor.send
        self._acker_tasks = executor.acker_tasks
        self._system_sources = executor.system_sources

    def _route(self, stream: str, values: Any) -> StreamRoute:
        route = self._routes.get(stream)
        if route is None:
            raise EmitError(
                f"component {self._executor.component!r} emitted on undeclared stream {stream!r} "
                f"(declared: {sorted(s for s in self._routes if not s.startswith('__'))})"
            )
        if len(values) != route.arity:
            raise EmitError(
                f"component {self._executor.component!r}, stream {stream!r}: emitted {len(values)} values "
                f"{list(values)!r} but the stream declares {route.arity} fields {route.source.fields.to_list()}"
            )
        return route

    def _direct_route(self, task_id: int, stream: str, values: Any) -> StreamRoute:
        route = self._route(stream, values)
        if not route.direct:
            raise EmitError(
                f"component {self._executor.component!r}: emit_direct on stream {stream!r}, "
                "which is not declared direct"
            )
        if task_id not in route.direct_targets:
            raise EmitError(
                f"component {self._executor.component!r}: emit_direct to task {task_id!r}, which does not "
                f"subscribe to stream {stream!r} (subscribers: {sorted(route.direct_targets)})"
            )
        return route

    def _choose(self, route: StreamRoute, values: list[Any]) -> list[int]:
        if route.direct:
            raise EmitError(
                f"component {self._executor.component!r}: regular emit on direct stream "
                f"{route.source.stream!r}; use emit_direct"
            )
        groupers = route.groupers
        if len(groupers) == 1:
            return groupers[0].choose(values)
        tasks: list[int] = []
        for grouper in groupers:
            tasks.extend(grouper.choose(values))
        return tasks

    def report_error(self, error: BaseException) -> None:
        """Record ``error`` for this component (the last 10 are kept); processing goes on."""
        self._executor.report_error(self._task_id, error)

    def _send_to_acker(self, root: int, stream: str, values: list[Any]) -> None:
        self._send(acker_for(root, self._acker_tasks), Tuple(values, self._system_sources[stream], self._task_id))


class SpoutOutputCollector(_Collector):
    """A spout's collector. ``msg_id`` makes the tuple tracked (acked or failed later)."""

    def __init__(self, executor: Any, task_id: int, routes: dict[str, StreamRoute]) -> None:
        super().__init__(executor, task_id, routes)
        self._pending = executor.pending_for(task_id)
        self.emitted_count = 0

    def emit(self, values: Any, stream: str = "default", msg_id: Any = None) -> list[int]:
        """Emit ``values`` on ``stream``; returns the ids of the tasks that will receive it."""
        if values.__class__ is not list:
            values = list(values)
        with self._lock:
            route = self._route(stream, values)
            tasks = self._choose(route, values)
            self._emit(route, tasks, values, msg_id)
            return list(tasks)

    def emit_direct(self, task_id: int, values: Any, stream: str = "default", msg_id: Any = None) -> None:
        """Emit ``values`` on direct ``stream`` to task ``task_id``."""
        if values.__class__ is not list:
            values = list(values)
        with self._lock:
            route = self._direct_route(task_id, stream, values)
            self._emit(route, [task_id], values, msg_id)

    def _emit(self, route: StreamRoute, tasks: list[int], values: list[Any], msg_id: Any) -> None:
        executor = self._executor
        if executor.capture is not None:
            executor.capture(executor.component, route.source.stream, values)
        route.emitted += 1
        route.transferred += len(tasks)
        self.emitted_count += 1
        send = self._send
        if msg_id is None:
            tup = Tuple(values, route.source, self._task_id)
            for task in tasks:
                send(task, tup)
            return
        if not self._acker_tasks or not tasks:
            for task in tasks:
                send(task, Tuple(values, route.source, self._task_id))
            executor.ack_now(self._task_id, msg_id)
            return
        root = _rand64(64)
        ack_val = 0
        for task in tasks:
            edge = _rand64(64)
            ack_val ^= edge
            send(task, Tuple(values, route.source, self._task_id, {root: edge}))
        self._pending.put(root, (msg_id, time.perf_counter()))
        self._send_to_acker(root, ACK_INIT, [root, ack_val, self._task_id])


class OutputCollector(_Collector):
    """A bolt's collector (Storm's ``OutputCollector``)."""

    def emit(self, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = "default") -> list[int]:
        """Emit ``values`` on ``stream``, anchored to ``anchors`` (a tuple or several);
        returns the ids of the receiving tasks."""
        if values.__class__ is not list:
            values = list(values)
        with self._lock:
            route = self._route(stream, values)
            tasks = self._choose(route, values)
            self._emit(route, tasks, values, anchors)
            return list(tasks)

    def emit_direct(self, task_id: int, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = "default") -> None:
        """Emit ``values`` on direct ``stream`` to task ``task_id``."""
        if values.__class__ is not list:
            values = list(values)
        with self._lock:
            route = self._direct_route(task_id, stream, values)
            self._emit(route, [task_id], values, anchors)

    def _emit(self, route: StreamRoute, tasks: list[int], values: list[Any], anchors: Any) -> None:
        executor = self._executor
        if executor.capture is not None:
            executor.capture(executor.component, route.source.stream, values)
        route.emitted += 1
        route.transferred += len(tasks)
        send = self._send
        if anchors is not None:
            if anchors.__class__ is Tuple:
                anchors = (anchors,) if anchors._anchors_to_ids else ()
            else:
                anchors = [a for a in anchors if a._anchors_to_ids]
        if not anchors:
            tup = Tuple(values, route.source, self._task_id)
            for task in tasks:
                send(task, tup)
            return
        for task in tasks:
            ids: dict[int, int] = {}
            for anchor in anchors:
                edge = _rand64(64)
                anchor._ack_val ^= edge
                for root in anchor._anchors_to_ids:
                    ids[root] = ids.get(root, 0) ^ edge
            send(task, Tuple(values, route.source, self._task_id, ids))

    def ack(self, tup: Tuple) -> None:
        """The tuple is processed: its part of every tree it belongs to is done."""
        with self._lock:
            ids = tup._anchors_to_ids
            if ids and self._acker_tasks:
                ack_val = tup._ack_val
                for root, edge in ids.items():
                    self._send_to_acker(root, ACK_ACK, [root, edge ^ ack_val])
            self._executor.record_ack(tup)

    def fail(self, tup: Tuple) -> None:
        """Fail the tuple: every spout tuple whose tree it belongs to is failed."""
        with self._lock:
            ids = tup._anchors_to_ids
            if ids and self._acker_tasks:
                for root in ids:
                    self._send_to_acker(root, ACK_FAIL, [root])
            self._executor.record_fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of every tree the tuple belongs to (for long processing)."""
        with self._lock:
            ids = tup._anchors_to_ids
            if ids and self._acker_tasks:
                for root in ids:
                    self._send_to_acker(root, ACK_RESET_TIMEOUT, [root])


class BasicOutputCollector:
    """A ``BasicBolt``'s collector: emits are anchored to the input being executed."""

    def __init__(self, collector: OutputCollector) -> None:
        self._collector = collector
        self.input: Tuple | None = None

    def emit(self, values: Any, stream: str = "default") -> list[int]:
        return self._collector.emit(values, self.input, stream)

    def emit_direct(self, task_id: int, values: Any, stream: str = "default") -> None:
        self._collector.emit_direct(task_id, values, self.input, stream)

    def report_error(self, error: BaseException) -> None:
        self._collector.report_error(error)
