"""Output collectors: how spouts and bolts emit, ack and fail.

One collector per task. Emitting picks target tasks with the stream's groupings, creates
the tuples (with fresh edge ids when the emit is tracked) and hands them to the executor's
send path.

Threading: the thread running the executor holds the executor's lock while it runs user
code, so its own calls take no lock. A bolt's ``OutputCollector`` may also be called from
threads of the bolt's own: such a call takes the lock (waiting for the executor to finish
its current batch), hands its tuples on at once, and then (without the lock) waits while
the executor's destinations are full. Spout collectors and ``BasicOutputCollector`` belong
to the thread running the executor, as in Storm.

A collector sees its executor through :class:`CollectorHost` only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from threading import get_ident
from typing import TYPE_CHECKING, Any, Protocol

from squall.api.errors import EmitError, invalid_emit
from squall.api.system_ids import ACK_RESET_TIMEOUT
from squall.api.tuple import Tuple, tree_tuple
from squall.runtime.executor.ack_ledger import combine_ack
from squall.runtime.acker import RootIds
from squall.utils.rand import rand64

if TYPE_CHECKING:
    import threading

    from squall.api.tuple import StreamSource
    from squall.runtime.executor.ack_ledger import AckLedger
    from squall.runtime.executor.executor_stats import ExecutorStats
    from squall.runtime.executor.pending_trees import PendingTrees
    from squall.runtime.executor.route import StreamRoute
    from squall.runtime.executor.transfer import ExecutorTransfer
    from squall.utils.u64_map import U64Map


class CollectorHost(Protocol):
    """What a collector needs of its executor."""

    component: str
    lock: threading.Lock
    acker_tasks: list[int]
    acks: AckLedger  # where inits, acks, fails and resets go
    stats: ExecutorStats  # counts acks and fails, and times the sampled input
    transfer: ExecutorTransfer

    def send(self, tasks: list[int] | tuple[int, ...], source: StreamSource, source_task: int, values: list[Any],
             tree_ids: dict[int, int] | None = None) -> None:
        """Queue a tuple for ``tasks`` (see ExecutorTransfer.send)."""

    def flush_all(self) -> None:
        """Hand on the combined acks and every gathered batch."""

    def wait_for_room(self) -> None:
        """Wait (not holding the lock) while what was handed on cannot be taken yet."""

    def report_error(self, task_id: int, error: BaseException) -> None: ...


class SpoutHost(CollectorHost, Protocol):
    """What a spout's collector needs besides."""

    def pending_for(self, task_id: int) -> PendingTrees:
        """The task's pending trees."""

    def settle_now(self, task_id: int, method: str, msg_id: Any) -> None:
        """Call the spout's ``ack``/``fail`` for ``msg_id`` once the current call returns."""


class EmitPlan:
    """How one task's regular emits on one stream reach their targets, prepared when the task
    starts: no stream lookup, no anchor list, and a tuple for a one-task executor of this
    worker goes straight into its outbox (the rest through ``ExecutorTransfer.send``).

    :meth:`emit` is an emit untracked or anchored to one tracked tuple, :meth:`emit_tree` a
    spout's tracked emit (the root of a new tree); several anchors and direct emits go through
    the collector's :meth:`OutputCollector.emit_anchored`. Used from the emitting executor's
    thread, or holding its lock.
    """

    __slots__ = ("route", "source", "arity", "choose", "grouper", "transfer", "task_id", "one_task", "batch_size")

    def __init__(self, route: StreamRoute, host: CollectorHost, task_id: int) -> None:
        transfer = host.transfer
        self.route = route
        self.source = route.source
        self.arity = route.arity
        self.choose = route.choose
        self.grouper = route.grouper
        self.transfer = transfer
        self.task_id = task_id
        # task -> its outbox when it is the only task of an executor of this worker
        self.one_task = {task: ob if ob.queue is not None and ob.single_task else None
                         for task, ob in transfer.outboxes().items()}
        self.batch_size = transfer.batch_size

    def follow_route(self) -> None:
        """Take the route's ``choose`` and ``grouper`` again: its observers changed."""
        self.choose = self.route.choose
        self.grouper = self.route.grouper

    def targets(self, values: list[Any]) -> list[int]:
        """The target tasks of a regular emit of ``values``, counted as emitted."""
        tasks = self.choose(values) if self.grouper is None else self.grouper.choose(values)
        self.route.emitted += 1
        return tasks

    def emit(self, values: list[Any], anchor: Tuple | None) -> list[int]:
        """Emit ``values`` (a list of the stream's arity), anchored to ``anchor`` (None, or a
        tracked tuple); the target tasks."""
        tasks = self.targets(values)
        if anchor is None:
            if len(tasks) == 1:
                self._deliver(tasks[0], values, None)
            else:  # one Tuple for the local targets; all or nothing, should a value not serialize
                self.transfer.send(tasks, self.source, self.task_id, values)
            return tasks
        trees = anchor.trees
        for task in tasks:  # a new edge per target in each of the anchor's trees, acked with it
            edge = rand64()
            anchor.ack_val ^= edge
            if trees is None:
                self._deliver_tree(task, values, anchor.root, edge)
            else:
                self._deliver(task, values, dict.fromkeys(trees, edge))
        return tasks

    def emit_tree(self, values: list[Any], tasks: list[int], root: int, acks: AckLedger) -> None:
        """Send ``values`` to ``tasks`` as the root of a new tree ``root``, whose init goes to
        ``acks``."""
        ack_val = 0
        for task in tasks:
            edge = rand64()
            ack_val ^= edge
            # should a later target fail, the emit raises and its message id is failed; the
            # tuples already sent belong to a tree the acker never hears of and forgets
            self._deliver_tree(task, values, root, edge)
        acks.init(root, ack_val, self.task_id)

    def _deliver(self, task: int, values: list[Any], tree_ids: dict[int, int] | None) -> None:
        """One tuple for ``task`` (untracked, or in several trees): into its outbox, or through
        the send path."""
        ob = self.one_task[task]
        if ob is None:
            self.transfer.send((task,), self.source, self.task_id, values, tree_ids)
            return
        items = ob.items  # (inline, as in _deliver_tree: a call per tuple costs pure Python)
        items.append(Tuple(values, self.source, self.task_id, tree_ids))
        if len(items) >= self.batch_size:
            self.transfer.flush(ob)

    def _deliver_tree(self, task: int, values: list[Any], root: int, edge: int) -> None:
        """One tuple for ``task`` in the one tree ``root``, as edge ``edge``."""
        ob = self.one_task[task]
        if ob is None:
            self.transfer.send_tree(task, self.source, self.task_id, values, root, edge)
            return
        items = ob.items
        items.append(tree_tuple(values, self.source, self.task_id, root, edge))
        if len(items) >= self.batch_size:
            self.transfer.flush(ob)


class _Collector:
    def __init__(self, executor: CollectorHost, task_id: int, routes: dict[str, StreamRoute]) -> None:
        self._executor = executor
        self._task_id = task_id
        self._routes = routes
        self._lock = executor.lock
        self._send = executor.send
        self._acker_tasks = executor.acker_tasks
        self._acks = executor.acks
        self._stats = executor.stats
        #: stream id -> its EmitPlan
        self._plans = {stream: EmitPlan(route, executor, task_id) for stream, route in routes.items()}

    def plan(self, stream: str, values: list[Any]) -> EmitPlan:
        """The plan of a regular emit of ``values`` (a list) on ``stream``; EmitError if it
        breaks the declarations."""
        plan = self._plans.get(stream)
        if plan is None or len(values) != plan.arity:
            raise self._invalid(stream, values)
        return plan

    def _invalid(self, stream: str, values: list[Any], direct_task: int | None = None) -> EmitError:
        """The error for an emit that breaks the declarations."""
        route = self._routes.get(stream)
        declared = {s: r.source.fields.to_list() for s, r in self._routes.items()}
        targets = list(route.direct_targets) if route is not None and route.direct else None
        return invalid_emit(self._executor.component, stream, values, declared, direct_task, targets)

    def _targets(self, values: list[Any], stream: str, direct_task: int | None) -> tuple[StreamRoute, list[int]]:
        """The route and target tasks of an emit (raises EmitError for an invalid one)."""
        route = self._routes.get(stream)
        if route is None or len(values) != route.arity:
            raise self._invalid(stream, values, direct_task)
        if direct_task is None:
            tasks = route.choose(values)
        elif direct_task in route.direct_targets:
            tasks = route.choose_direct(direct_task, values)
        else:
            raise self._invalid(stream, values, direct_task)
        route.emitted += 1
        return route, tasks

    def report_error(self, error: BaseException) -> None:
        """Record ``error`` for this component (the last 10 are kept); processing goes on."""
        self._executor.report_error(self._task_id, error)

    def set_sampler(self, sampler: Callable[[str, list[Any], list[int]], None] | None) -> None:
        """Report every emit of this task to ``sampler(stream, values, tasks)`` (tuple sampling),
        or stop (None). Holding the executor's lock, so that no emit is under way."""
        for stream, plan in self._plans.items():
            plan.route.set_sampler(None if sampler is None else functools.partial(sampler, stream))
            plan.follow_route()


class SpoutOutputCollector(_Collector):
    """A spout's collector. ``msg_id`` makes the tuple tracked (acked or failed later).

    Call it only from the spout's methods (the executor thread), as in Storm.
    """

    def __init__(self, executor: SpoutHost, task_id: int, routes: dict[str, StreamRoute]) -> None:
        super().__init__(executor, task_id, routes)
        self._pending = executor.pending_for(task_id)
        self.emitted_count = 0
        #: the root ids of this task's trees
        self.root_ids = RootIds(self._acker_tasks, executor.transfer.local_tasks)

    def emit(self, values: Any, stream: str = "default", msg_id: Any = None) -> list[int]:
        """Emit ``values`` on ``stream``; returns the ids of the tasks that will receive it
        (a list the caller must not modify, as in Storm)."""
        if msg_id is None:
            if values.__class__ is not list:
                values = list(values)
            plan = self.plan(stream, values)
            self.emitted_count += 1  # untracked: nothing to settle should it raise
            return plan.emit(values, None)
        return self._emit(values, stream, msg_id, None)

    def emit_direct(self, task_id: int, values: Any, stream: str = "default", msg_id: Any = None) -> None:
        """Emit ``values`` on direct ``stream`` to task ``task_id``."""
        self._emit(values, stream, msg_id, task_id)

    def _emit(self, values: Any, stream: str, msg_id: Any, direct_task: int | None) -> list[int]:
        try:
            return self._emit_values(values, stream, msg_id, direct_task)
        except Exception:
            if msg_id is not None:  # exactly one ack or fail per message id, even for a failed emit
                self._executor.settle_now(self._task_id, "fail", msg_id)
            raise

    def _emit_values(self, values: Any, stream: str, msg_id: Any, direct_task: int | None) -> list[int]:
        if values.__class__ is not list:
            values = list(values)
        if direct_task is None:
            plan = self.plan(stream, values)
            tasks = plan.targets(values)
        else:
            tasks = self._targets(values, stream, direct_task)[1]
            plan = self._plans[stream]
        self.emitted_count += 1
        if msg_id is None or not self._acker_tasks or not tasks:
            self._send(tasks, plan.source, self._task_id, values)
            if msg_id is not None:
                self._executor.settle_now(self._task_id, "ack", msg_id)
            return tasks
        root = self.root_ids.new()
        plan.emit_tree(values, tasks, root, self._acks)
        self._pending.start(root, msg_id)
        return tasks

    def emit_marker(self, values: list[Any], stream: str) -> int | None:
        """A tracked emit of ``values`` on ``stream`` (every target gets it) that no message id
        stands for: the root id of its tree, whose completion reaches the task's pending trees
        as an untracked root (None: nobody subscribes, or nothing is tracked). A stateful spout's
        in-flight markers (see squall.runtime.executor.inflight)."""
        if not self.marker_targets(stream):
            return None
        plan = self._plans[stream]
        root = self.root_ids.new()
        plan.emit_tree(values, plan.targets(values), root, self._acks)
        return root

    def marker_targets(self, stream: str) -> int:
        """How many tasks a marker on ``stream`` reaches (0: none, or nothing is tracked)."""
        route = self._routes.get(stream)
        return (route.fanout or 0) if route is not None and self._acker_tasks else 0


class OutputCollector(_Collector):
    """A bolt's collector (Storm's ``OutputCollector``); thread-safe."""

    def __init__(self, executor: CollectorHost, task_id: int, routes: dict[str, StreamRoute]) -> None:
        super().__init__(executor, task_id, routes)
        self._owner = 0  # the executor thread's id (see run_on)

    def run_on(self, thread_ident: int) -> None:
        """The thread running the executor from now on: its calls take no lock, any other
        thread's are a component's own (see the module's docstring)."""
        self._owner = thread_ident

    def emit(self, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = "default") -> list[int]:
        """Emit ``values`` on ``stream``, anchored to ``anchors`` (a tuple or several);
        returns the ids of the receiving tasks (a list the caller must not modify)."""
        if get_ident() != self._owner:
            return self._foreign(self.emit_anchored, values, stream, anchors, None)
        return self.emit_anchored(values, stream, anchors, None)

    def emit_direct(self, task_id: int, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = "default") -> None:
        """Emit ``values`` on direct ``stream`` to task ``task_id``."""
        if get_ident() != self._owner:
            self._foreign(self.emit_anchored, values, stream, anchors, task_id)
        else:
            self.emit_anchored(values, stream, anchors, task_id)

    def ack(self, tup: Tuple) -> None:
        """The tuple is processed: its part of every tree it belongs to is done."""
        if get_ident() != self._owner:
            self._foreign(self._ack, tup, self._acks.foreign)
        else:
            self._ack(tup, self._acks.pending)

    def fail(self, tup: Tuple) -> None:
        """Fail the tuple: every spout tuple whose tree it belongs to is failed."""
        if get_ident() != self._owner:
            self._foreign(self._fail, tup)
        else:
            self._fail(tup)

    def reset_timeout(self, tup: Tuple) -> None:
        """Restart the timeout of every tree the tuple belongs to (for long processing)."""
        if get_ident() != self._owner:
            self._foreign(self._reset_timeout, tup)
        else:
            self._reset_timeout(tup)

    def _foreign(self, method, *args: Any) -> Any:
        # a call from a thread of the bolt's own: wait for the executor's lock, and hand
        # the result on now since the executor may be idle
        with self._lock:
            result = method(*args)
            self._executor.flush_all()
        self._executor.wait_for_room()
        return result

    def emit_anchored(self, values: Any, stream: str, anchors: Any, direct_task: int | None) -> list[int]:
        """Every emit kind of the executor's thread (or holding its lock): ``anchors`` None, a
        tuple or several, ``direct_task`` None or the target of an ``emit_direct``."""
        if values.__class__ is not list:
            values = list(values)
        if direct_task is None:  # a regular emit: through the stream's plan, unless several anchors are tracked
            if anchors is None:
                return self.plan(stream, values).emit(values, None)
            if anchors.__class__ is Tuple:
                return self.plan(stream, values).emit(values, anchors if anchors.tracked else None)
            anchors = [a for a in anchors if a.tracked]
            if len(anchors) <= 1:
                return self.plan(stream, values).emit(values, anchors[0] if anchors else None)
        elif anchors.__class__ is Tuple:
            anchors = [anchors] if anchors.tracked else []
        else:
            anchors = [a for a in anchors or () if a.tracked]
        # direct emits, and emits anchored to several tracked tuples
        route, tasks = self._targets(values, stream, direct_task)
        if not anchors:
            self._send(tasks, route.source, self._task_id, values)
            return tasks
        for task in tasks:
            ids: dict[int, int] = {}
            for anchor in anchors:  # a new edge per anchor, XOR-ed into each of its trees
                edge = rand64()
                anchor.ack_val ^= edge
                if anchor.trees is None:
                    ids[anchor.root] = ids.get(anchor.root, 0) ^ edge
                    continue
                for root in anchor.trees:
                    ids[root] = ids.get(root, 0) ^ edge
            self._send((task,), route.source, self._task_id, values, ids)
        return tasks

    def _ack(self, tup: Tuple, pending_acks: U64Map) -> None:
        if tup.tracked and self._acker_tasks:
            combine_ack(pending_acks, tup)
        self._stats.record_ack(tup)

    def _fail(self, tup: Tuple) -> None:
        if tup.tracked and self._acker_tasks:
            self._acks.fail_now(tup)
        self._stats.record_fail(tup)

    def _reset_timeout(self, tup: Tuple) -> None:
        if tup.tracked and self._acker_tasks:
            for root in tup.tree_ids:
                self._acks.to_acker(root, ACK_RESET_TIMEOUT, [root])


class BasicOutputCollector:
    """A ``BasicBolt``'s collector: emits are anchored to the input being executed.

    Call it only from ``execute`` (the executor thread), as in Storm.
    """

    def __init__(self, collector: OutputCollector) -> None:
        self._collector = collector
        self.input: Tuple | None = None

    def emit(self, values: Any, stream: str = "default") -> list[int]:
        if values.__class__ is not list:
            values = list(values)
        anchor = self.input
        return self._collector.plan(stream, values).emit(values, anchor if anchor.tracked else None)

    def emit_direct(self, task_id: int, values: Any, stream: str = "default") -> None:
        self._collector.emit_anchored(values, stream, self.input, task_id)

    def report_error(self, error: BaseException) -> None:
        self._collector.report_error(error)
