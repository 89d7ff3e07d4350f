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
from typing import TYPE_CHECKING, Any, Protocol

from squall.api.checkpoint_spout import COMMIT, MARK, PREPARE, RECOVERY_ACTIONS
from squall.api.system_ids import CHECKPOINT_COMPONENT, CHECKPOINT_RECOVER, CHECKPOINT_STREAM
from squall.api.tuple import Tuple, system_sources

if TYPE_CHECKING:
    from squall.api.storm_topology import StormTopology
    from squall.runtime.assignment import Assignment
    from squall.runtime.executor.ack_ledger import AckLedger
    from squall.runtime.executor.transfer import ExecutorTransfer
    from squall.runtime.state.task_states import TaskStates

log = logging.getLogger("squall.checkpoint")


class CheckpointHost(Protocol):
    """What barrier handling needs of the executor it sits in (the executor's thread, holding
    its lock)."""

    component: str
    task_ids: list[int]

    def execute(self, batch: list[Any]) -> None:
        """Run the user's calls for a batch without barriers (bare tuples for a one-task
        executor, else ``(task, tuple)`` pairs)."""

    def pairs(self, batch: list[Any]) -> Any:
        """``(task, tuple)`` pairs of an incoming batch."""

    def emit_barrier(self, task: int, values: list[Any], anchors: list[Tuple]) -> None:
        """Pass a barrier (or a marker) on from ``task``, anchored to the copies that came in."""

    def finish_batches(self) -> None:
        """Let the components write what they buffered (Bolt.finish_batch)."""

    def flush_all(self) -> None:
        """Hand on the combined acks and every gathered batch."""


class Checkpointing:
    """Barrier handling for one executor of a checkpointed topology, at its input (as Flink's
    barrier handler): a bolt executor's batches go through :meth:`process`, which runs the
    tuples that need not wait through ``host.execute``; a spout executor calls :meth:`barrier`
    for the barriers from the checkpoint spout (its only upstream task, so it aligns at once).

    It sees the executor through ``host`` (:class:`CheckpointHost`), and sends through the
    executor's ack ledger (``acks``: barriers are acked past any holding; a stateful bolt's
    held acks wait for the commit) and send path (``transfer``), by their public methods.
    ``states``: the stateful tasks' :class:`TaskStates`, or None.
    """

    def __init__(self, host: CheckpointHost, acks: AckLedger, transfer: ExecutorTransfer, topology: StormTopology,
                 assignment: Assignment, states: TaskStates | None) -> None:
        self._host = host
        self._acks = acks
        self._transfer = transfer
        self._topology = topology
        self._assignment = assignment
        self.states = states
        self._single = len(host.task_ids) == 1
        upstream = [source for source, stream in topology.components[host.component].inputs
                    if stream == CHECKPOINT_STREAM]
        self._expected = {(src, task) for component in upstream for src in assignment.component_tasks[component]
                          for task in host.task_ids}
        self._current: int | None = None  # id of the barrier being aligned
        self._barrier: tuple[Any, str] | None = None  # its (txid, action)
        self._arrived: set[tuple[int, int]] = set()  # channels (source task, task) its barrier came on
        self._held: dict[int, list[Tuple]] = {}  # task -> its barriers, acked once acted on
        self._buffer: list[tuple[int, Tuple]] = []  # (task, tuple) that came after it on their channel
        #: whether an INITSTATE or ROLLBACK reached the executor since its worker started
        self.recovered = False
        # the PREPARE a stateful bolt's held acks were moved aside at (squall.runtime.executor.ack_ledger)
        self._prepared_txid: int | None = None
        self._checkpoint_task = assignment.component_tasks[CHECKPOINT_COMPONENT][0]
        self._upstream = upstream
        # (task, spout task) -> marker id -> (its copies so far, the tasks they came from)
        self._markers: dict[tuple[int, int], dict[int, tuple[list[Tuple], set[int]]]] = {}
        self._marker_sources: dict[int, frozenset[int]] = {}  # spout task -> upstream tasks its markers come from

    def process(self, batch: list[Any]) -> None:
        """A bolt executor's incoming batch: executed at once unless it holds barriers or an
        alignment is under way (see the module)."""
        if self._current is None:
            first = batch[0] if self._single else batch[0][1]
            if first.stream_source.stream != CHECKPOINT_STREAM:
                self._host.execute(batch)
                return
        self._process(self._host.pairs(batch))

    def request_recovery(self) -> None:
        """Ask the checkpoint spout for a rollback (a restarted worker's executor, at start)."""
        task = self._host.task_ids[0]
        source = system_sources(self._host.component)[CHECKPOINT_RECOVER]
        self._transfer.send((self._checkpoint_task,), source, task, [task])
        self._transfer.flush_all()  # now: nothing may flow to this worker that would flush it later

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
            self._host.execute([tup for _, tup in pairs] if self._single else pairs)
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
        self._host.flush_all()  # what came before the marker goes first, in batches of their own
        self._host.emit_barrier(task, tup.values, copies)
        self._settle(copies, True)
        self._transfer.flush_all()

    def _sources_of(self, origin: int) -> frozenset[int]:
        """The upstream tasks of this executor that spout task ``origin``'s markers come from:
        ``origin`` itself, and every task of an upstream bolt downstream of its spout."""
        sources = self._marker_sources.get(origin)
        if sources is None:
            topology, assignment = self._topology, self._assignment
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
        log.info("component %r: checkpoint barrier %s superseded", self._host.component, self._current)
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
        host = self._host
        host.finish_batches()  # what a sink buffered from before the barrier is written first
        ok = self.act(host.task_ids, txid, action)
        host.flush_all()  # every tuple before the barrier goes first, in batches of their own
        for task, held in self._held.items():
            host.emit_barrier(task, [txid, action, self._current], held)
            self._settle(held, ok)
        self._transfer.flush_all()
        self._reset()

    def act(self, tasks: Any, txid: int | None, action: str) -> bool:
        """Act on a barrier for ``tasks`` (all of them aligned); False to fail it."""
        if action in RECOVERY_ACTIONS:
            self.recovered = True
        elif not self.recovered:
            log.warning("component %r: %s %s failed: this worker restarted and has not rolled back to the last "
                        "commit yet", self._host.component, action, txid)
            return False
        if self.states is not None and not self.states.act(tasks, txid, action):
            return False
        acks = self._acks
        if not acks.holding:
            return True
        if action == PREPARE:
            self._host.flush_all()  # the acks of tuples before the barrier join the held ones
            acks.prepare()
            self._prepared_txid = txid
        elif action == COMMIT or self._prepared_txid is not None and txid is not None and txid >= self._prepared_txid:
            # committed: what the prepared acks' tuples did is in the committed state (also when
            # a recovery to that txid superseded its COMMIT)
            acks.commit_prepared()
            self._prepared_txid = None
        if action in RECOVERY_ACTIONS:  # the updates since are rolled back: the trees fail, spouts replay
            self._host.flush_all()
            acks.fail_held()
            self._prepared_txid = None
        return True

    def _settle(self, barriers: list[Tuple], ok: bool) -> None:
        """Ack (or fail) ``barriers`` straight to their acker: never held with the data's."""
        acks = self._acks
        for tup in barriers:
            if ok:
                acks.ack_now(tup)
            else:
                acks.fail_now(tup)