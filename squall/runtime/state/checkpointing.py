"""Checkpoint barriers in executors (Storm's ``StatefulBoltExecutor`` and
``CheckpointTupleForwarder``, with aligned barriers and spouts in the snapshot).

Barriers are ``$checkpoint`` tuples (see :mod:`squall.api.checkpoint_spout`). The channel from one
task to another is FIFO (one outbox per destination, one ZeroMQ connection per pair of
workers), so a barrier splits each channel into the tuples before it and after it. A batch
holding a barrier holds only barriers: the sender hands its batches on before and after
one, and the receive path cuts its batches at one. An executor therefore looks at the first
tuple of each batch only, until a barrier arrives; then, until one of the same id has
arrived from every upstream task for each of the executor's tasks (*alignment*), the tuples
on the channels (upstream task -> task) whose barrier has arrived wait in memory, and the
others are executed. Once aligned, the executor acts on the
barrier (state written, committed or rolled back), passes it on, acks it (or fails it), and
executes what waited. The state of every task then reflects exactly the tuples before the
barrier of the cut, and a spout's position taken when the barrier passed it matches.

A barrier with a newer id from a channel not waiting on the current one means the current
one was superseded (the checkpoint spout sends a ROLLBACK when a worker restarted): the
current alignment is given up (its barriers failed) and the newer one starts. A barrier is
passed on even when acting on it failed (its tree fails all the same), so that the tasks
downstream are never left waiting for it.

A stateful spout task's *markers* (see :mod:`squall.runtime.executor.inflight`) travel the same way
but hold nothing back: a task passes a marker on, and acks it, once it has come from each of
its upstream tasks that the marker's spout task reaches; the marker's tree then completes once
every task has processed what that spout task emitted before it.

Until an INITSTATE or ROLLBACK has reached its executor since its worker started, a task
fails every PREPARE and COMMIT (a restarted worker lost tuples, which no checkpoint may leave
out), and a spout task emits nothing: what it emitted would be rolled back and failed by the
recovery (a start would show replays as failures), and a stateful spout's would be replayed
through the bolts that are not stateful.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall.api.checkpoint_spout import COMMIT, MARK, PREPARE, RECOVERY_ACTIONS
from squall.api.state.key_value_state import KeyValueState
from squall.api.state.provider import provider_for
from squall.api.system_ids import CHECKPOINT_COMPONENT, CHECKPOINT_RECOVER, CHECKPOINT_STREAM
from squall.api.tuple import Tuple
from squall.runtime.serialization import Serializer

if TYPE_CHECKING:
    from squall.runtime.executor.executor import Executor

log = logging.getLogger("squall.checkpoint")


class TaskStates:
    """The states of one component's stateful tasks (``components``: task -> its spout or bolt),
    and what a barrier does to them. ``report_error(task, error)`` records a hook's or the
    store's error. An executor holds one; so does :mod:`squall.testing`'s harness."""

    def __init__(self, conf: dict[str, Any], topology_name: str, component: str, components: dict[int, Any],
                 report_error: Callable[[int, BaseException], None]) -> None:
        self._component = component
        self._components = components
        self._report_error = report_error
        self.provider = provider_for(conf, topology_name)
        serializer = Serializer.for_config(conf)
        self.states = {
            task: KeyValueState(self.provider.task_store(component, task), serializer,
                                f"component {component!r} task {task}")
            for task in components
        }

    def init(self) -> None:
        """Load the last committed state and call ``init_state`` (before the first tuple);
        raises what they raise."""
        committed = self.provider.committed()
        for task, state in self.states.items():
            state.load(committed)
            self._components[task].init_state(state)

    def act(self, tasks: Any, txid: int | None, action: str) -> bool:
        """Do ``action`` of checkpoint ``txid`` for ``tasks``; False (error recorded for the
        task) if a hook or the store raised."""
        for task in tasks:
            component, state = self._components[task], self.states[task]
            try:
                if action == PREPARE:
                    component.pre_prepare(txid)
                    state.prepare(txid)
                elif action == COMMIT:
                    component.pre_commit(txid)
                    state.commit(txid)
                else:
                    component.pre_rollback()
                    state.load(txid)
                    component.init_state(state)
            except Exception as e:  # noqa: BLE001 - the checkpoint fails and rolls back
                log.warning("component %r task %d: %s of checkpoint %s failed: %s",
                            self._component, task, action, txid, e)
                self._report_error(task, e)
                return False
        return True

    def close(self) -> None:
        for state in self.states.values():
            state.close()
        self.provider.close()


class Checkpointing:
    """Barrier handling for one executor of a checkpointed topology.

    ``process_batch`` replaces the bolt executor's; a spout executor calls :meth:`barrier`
    for the barriers from the checkpoint spout (its only upstream task, so it aligns at once).
    ``emit_barrier(task, values, anchors)`` passes a barrier on from ``task``;
    ``states``: the stateful tasks' :class:`TaskStates`, or None.
    """

    def __init__(self, executor: Executor, emit_barrier: Any, states: TaskStates | None) -> None:
        self._executor = executor
        self._emit_barrier = emit_barrier
        self.states = states
        self._execute = None  # the executor's own process_batch
        assignment = executor.worker.assignment
        upstream = [source for source, stream in executor.spec.inputs if stream == CHECKPOINT_STREAM]
        self._expected = {(src, task) for component in upstream for src in assignment.component_tasks[component]
                          for task in executor.task_ids}
        self._current: int | None = None  # id of the barrier being aligned
        self._barrier: tuple[Any, str] | None = None  # its (txid, action)
        self._arrived: set[tuple[int, int]] = set()  # channels (source task, task) its barrier came on
        self._held: dict[int, list[Tuple]] = {}  # task -> its barriers, acked once acted on
        self._buffer: list[tuple[int, Tuple]] = []  # (task, tuple) that came after it on their channel
        #: whether an INITSTATE or ROLLBACK reached the executor since its worker started
        self.recovered = False
        # the PREPARE a stateful bolt's held acks were moved aside at (squall.runtime.ack_ledger)
        self._prepared_txid: int | None = None
        self._checkpoint_task = assignment.component_tasks[CHECKPOINT_COMPONENT][0]
        self._upstream = upstream
        # (task, spout task) -> marker id -> (its copies so far, the tasks they came from)
        self._markers: dict[tuple[int, int], dict[int, tuple[list[Tuple], set[int]]]] = {}
        self._marker_sources: dict[int, frozenset[int]] = {}  # spout task -> upstream tasks its markers come from

    def wrap(self, process_batch: Any) -> Any:
        """The bolt executor's ``process_batch`` with barriers taken out (see the module)."""
        self._execute = process_batch
        single = self._executor.single_task

        def process(batch: list[Any]) -> None:
            if self._current is None:
                first = batch[0] if single else batch[0][1]
                if first.stream_source.stream != CHECKPOINT_STREAM:
                    process_batch(batch)
                    return
            self._process(self._executor.pairs(batch))
        return process

    def request_recovery(self) -> None:
        """Ask the checkpoint spout for a rollback (a restarted worker's executor, at start)."""
        ex = self._executor
        task = ex.task_ids[0]
        ex.send((self._checkpoint_task,), ex.system_sources[CHECKPOINT_RECOVER], task, [task])
        ex.transfer.flush_all()  # now: nothing may flow to this worker that would flush it later

    # -- alignment ----------------------------------------------------------------------

    def _process(self, pairs: Any) -> None:
        run: list[tuple[int, Tuple]] = []  # tuples to execute, in order
        for task, tup in pairs:
            if self._current is not None and (tup.source_task, task) in self._arrived:
                self._buffer.append((task, tup))
            elif tup.stream_source.stream == CHECKPOINT_STREAM:
                self._run(run)
                run = []
                self.barrier(task, tup)
            else:
                run.append((task, tup))
        self._run(run)

    def _run(self, pairs: list[tuple[int, Tuple]]) -> None:
        if pairs:
            self._execute([tup for _, tup in pairs] if self._executor.single_task else pairs)

    def barrier(self, task: int, tup: Tuple) -> None:
        """A barrier (or a marker) for ``task`` from the task upstream that emitted ``tup``."""
        txid, action, barrier_id = tup.values
        if action == MARK:
            self._marker(task, tup)
            return
        if self._current is not None and barrier_id != self._current:
            if barrier_id < self._current:
                self._settle([tup], False)  # of a superseded checkpoint
                return
            self._give_up()
            if self._current is not None:  # what waited started an alignment of its own
                self.barrier(task, tup)
                return
        if self._current is None:
            self._current, self._barrier = barrier_id, (txid, action)
        self._held.setdefault(task, []).append(tup)
        self._arrived.add((tup.source_task, task))
        if self._arrived >= self._expected:
            self._complete()

    def _marker(self, task: int, tup: Tuple) -> None:
        """Pass a marker on once it came from every upstream task its spout task reaches."""
        origin, _, marker_id = tup.values
        markers = self._markers.setdefault((task, origin), {})
        copies, sources = markers.setdefault(marker_id, ([], set()))
        copies.append(tup)
        sources.add(tup.source_task)
        if sources < self._sources_of(origin):
            return
        del markers[marker_id]
        for older in [m for m in markers if m < marker_id]:  # lost on a way (channels are FIFO)
            self._settle(markers.pop(older)[0], False)
        ex = self._executor
        ex.flush_all()  # what came before the marker goes first, in batches of their own
        self._emit_barrier(task, tup.values, copies)
        self._settle(copies, True)
        ex.transfer.flush_all()

    def _sources_of(self, origin: int) -> frozenset[int]:
        """The upstream tasks of this executor that spout task ``origin``'s markers come from:
        ``origin`` itself, and every task of an upstream bolt downstream of its spout."""
        sources = self._marker_sources.get(origin)
        if sources is None:
            topology, assignment = self._executor.worker.topology, self._executor.worker.assignment
            spout = assignment.task_component[origin]
            reached, frontier = {spout}, [spout]
            while frontier:
                source = frontier.pop()
                for cid, spec in topology.components.items():
                    if (source, CHECKPOINT_STREAM) in spec.inputs and cid not in reached:
                        reached.add(cid)
                        frontier.append(cid)
            found: set[int] = set()
            for component in self._upstream:
                if component == spout:
                    found.add(origin)
                elif component in reached:
                    found.update(assignment.component_tasks[component])
            sources = self._marker_sources[origin] = frozenset(found)
        return sources

    def _give_up(self) -> None:
        log.info("component %r: checkpoint barrier %s superseded", self._executor.component, self._current)
        for held in self._held.values():
            self._settle(held, False)
        self._reset()

    def _reset(self) -> None:
        buffered = self._buffer
        self._current = self._barrier = None
        self._arrived, self._held, self._buffer = set(), {}, []
        if buffered:
            self._process(buffered)

    def _complete(self) -> None:
        txid, action = self._barrier
        ex = self._executor
        ex.finish_batches()  # what a sink buffered from before the barrier is written first
        ok = self.act(ex.task_ids, txid, action)
        ex.flush_all()  # every tuple before the barrier goes first, in batches of their own
        for task, held in self._held.items():
            self._emit_barrier(task, [txid, action, self._current], held)
            self._settle(held, ok)
        ex.transfer.flush_all()
        self._reset()

    def act(self, tasks: Any, txid: int | None, action: str) -> bool:
        """Act on a barrier for ``tasks`` (all of them aligned); False to fail it."""
        ex = self._executor
        if action in RECOVERY_ACTIONS:
            self.recovered = True
        elif not self.recovered:
            log.warning("component %r: %s %s failed: this worker restarted and has not rolled back to the last "
                        "commit yet", ex.component, action, txid)
            return False
        if self.states is not None and not self.states.act(tasks, txid, action):
            return False
        if ex.acks.held is None:
            return True
        if action == PREPARE:
            ex.flush_all()  # the acks of tuples before the barrier join the held ones
            ex.acks.prepare()
            self._prepared_txid = txid
        elif action == COMMIT or self._prepared_txid is not None and txid is not None and txid >= self._prepared_txid:
            # committed: what the prepared acks' tuples did is in the committed state (also when
            # a recovery to that txid superseded its COMMIT)
            ex.acks.commit_prepared()
            self._prepared_txid = None
        if action in RECOVERY_ACTIONS:  # the updates since are rolled back: the trees fail, spouts replay
            ex.flush_all()
            ex.acks.fail_held()
            self._prepared_txid = None
        return True

    def _settle(self, barriers: list[Tuple], ok: bool) -> None:
        """Ack (or fail) ``barriers`` straight to their acker: never held with the data's."""
        acks = self._executor.acks
        for tup in barriers:
            if ok:
                acks.ack_now(tup)
            else:
                acks.fail_now(tup)