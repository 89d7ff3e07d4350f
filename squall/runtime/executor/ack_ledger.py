"""An executor's side of acking: every init, ack, fail and timeout reset it sends to the ackers.

Storm's executors send one message per tuple to the acker. Squall's combine them first, in one
:class:`AckLedger` per executor, the only place that knows how:

* **combining**: a tree's acks are XOR-ed together until the executor flushes (XOR is
  associative: the acker ends with the same value, from fewer messages), :func:`combine_ack`;
* **rounds**: the executors sharing a worker's cooperative thread combine theirs in one
  :class:`RoundAcks` until the end of the thread's round, so that a tree whose init and acks all
  meet there completes without its acker;
* **held acks**: a stateful bolt's acks wait for its state's commit (``held``, then
  ``prepared``; :mod:`squall.runtime.executor.checkpointing` calls :meth:`AckLedger.prepare`,
  :meth:`AckLedger.commit_prepared` and :meth:`AckLedger.fail_held` as its barriers pass);
* **routing and encoding**: what is left goes to each tree's acker task (:func:`acker_for`),
  one batch per acker task and flush, of one shape, three columns (roots, values, the spout task
  of an init or -1 for an ack): an ``ACK_BATCH`` tuple to an acker of this worker, a typed
  :class:`~squall.runtime.messaging.tuple_batch.AckBatch` to another worker's. Fails and timeout resets
  go at once, one message per tree (a failed edge is never acked, so combining gains nothing).

No other module XORs edge ids into acks or builds a message for an acker.

The acker's side (what it does with all this) is :mod:`squall.runtime.acker`.

Threads: the executor's thread (or its cooperative thread) uses :attr:`AckLedger.pending`;
threads of a bolt's own combine into :attr:`AckLedger.foreign` holding the executor's lock.
Nothing here blocks: sending appends to the executor's send path (see
:class:`~squall.runtime.executor.transfer.ExecutorTransfer`), which decides when to hand on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from squall.api.system_ids import ACK_BATCH, ACK_FAIL, ACKED_BATCH
from squall.runtime.acker import acker_for
from squall.runtime.messaging.tuple_batch import AckBatch
from squall.utils.u64_map import U64Map

if TYPE_CHECKING:
    from squall.api.tuple import StreamSource, Tuple
    from squall.runtime.executor.transfer import ExecutorTransfer

#: set in the root id of the trees of stateful spouts: a stateful bolt does not hold their acks
#: (those spouts replay through rollbacks, not through fails; see squall.runtime.executor.checkpointing)
UNHELD_ROOT_BIT = 1 << 63


def combine_ack(pending: U64Map, tup: Tuple) -> None:
    """XOR the ack of tracked ``tup`` into ``pending`` (root id -> XOR of acks not sent yet)."""
    ack_val = tup.ack_val
    if tup.trees is None:
        pending.xor(tup.root, tup.edge ^ ack_val)
        return
    for root, edge in tup.trees.items():
        pending.xor(root, edge ^ ack_val)


class RoundAcks:
    """The inits and acks of the executors sharing a worker's cooperative thread, combined
    until the end of its round (XOR is associative, so the acker sees the same values).

    A tree whose init and every ack met here within the round adds up to 0: it is complete,
    its spout is told at once and its acker never hears of it (in a single worker, most trees).
    Otherwise the combined value goes to the tree's acker, as an init (with the spout task)
    when the init was here. Fails and timeout resets go to the acker directly: a failed
    tuple's edge is never acked, so its tree cannot add up to 0 here.

    Used only by the cooperative thread (a component's own threads keep acks of their own).
    """

    __slots__ = ("acks", "inits", "init_tasks")

    def __init__(self) -> None:
        self.acks = U64Map()  # root id -> XOR of inits and acks not sent yet
        # the inits among them, in the order they came (emit order: the spouts hear of the trees
        # that complete here in that order), with their spout tasks
        self.inits: list[int] = []
        self.init_tasks: list[int] = []

    def init(self, root: int, val: int, spout_task: int) -> None:
        """A spout task's init of tree ``root`` (a row of an ack batch, Storm's ``__ack_init``)."""
        self.acks.xor(root, val)
        self.inits.append(root)
        self.init_tasks.append(spout_task)

    def take(self) -> tuple[list[tuple[int, int, int]], dict[int, list[int]]]:
        """Empty the round: ``(root, value, spout task or -1)`` inits and acks for the ackers,
        and per spout task the roots of the trees that completed here, in emit order."""
        to_ackers: list[tuple[int, int, int]] = []
        completed: dict[int, list[int]] = {}
        acks, init_tasks = self.acks, self.init_tasks
        for i, root in enumerate(self.inits):
            val = acks.pop(root)  # a root is new: one init per round at most
            if val:
                to_ackers.append((root, val, init_tasks[i]))
            else:
                completed.setdefault(init_tasks[i], []).append(root)
        for root, val in acks.items():  # acks of trees whose init is not here
            if val:  # acks that cancel out would not change the acker's value
                to_ackers.append((root, val, -1))
        acks.clear()
        self.inits.clear()
        init_tasks.clear()
        return to_ackers, completed


class AckLedger:
    """One executor's acks on their way to the ackers (see the module's docstring).

    ``transfer`` is the executor's send path, ``sources`` its system streams' sources and
    ``task`` the task its messages come from; ``held``: a stateful bolt's, whose acks wait for
    its commits.
    """

    __slots__ = ("pending", "foreign", "held", "prepared", "round", "acker_tasks", "_transfer", "_sources", "_task")

    def __init__(self, acker_tasks: list[int], transfer: ExecutorTransfer, sources: dict[str, StreamSource],
                 task: int, held: bool) -> None:
        self.acker_tasks = acker_tasks
        #: root id -> XOR of acks not sent yet, of the executor's thread (the round's when shared)
        self.pending = U64Map()
        #: the same for threads of the component's own, sent when they flush
        self.foreign = self.pending
        #: a stateful bolt's acks of trees of plain spouts, held until its state is committed
        #: (see squall.runtime.executor.checkpointing); None: acks are sent as they are flushed
        self.held: U64Map | None = U64Map() if held else None
        #: the held acks of the state being prepared, sent once it is committed
        self.prepared = U64Map()
        #: the round the executor's inits and acks join, or None
        self.round: RoundAcks | None = None
        self._transfer = transfer
        self._sources = sources
        self._task = task

    def share_round(self, round_acks: RoundAcks) -> bool:
        """Combine this executor's acks (and a spout's inits) in ``round_acks`` until the end of
        the round; False for a stateful bolt, whose acks are held. Called again, with a new
        round, when the executor moves to another cooperative thread (which is not running it
        then)."""
        if self.held is not None:
            return False
        if self.foreign is self.pending:  # the component's threads keep a map of their own
            self.foreign = U64Map()
        self.round = round_acks
        self.pending = round_acks.acks
        return True

    @property
    def holding(self) -> bool:
        """Whether acks wait for a state's commit (a stateful bolt's)."""
        return self.held is not None

    @property
    def round_waiting(self) -> bool:
        """Whether the round holds inits or acks not sent yet."""
        return self.round is not None and bool(self.round.acks)

    def init(self, root: int, val: int, spout_task: int) -> None:
        """A spout task's new tree ``root``: into the round, or to its acker now."""
        if self.round is None:
            self.send([(root, val, spout_task)])
        else:
            self.round.init(root, val, spout_task)

    def to_acker(self, root: int, stream: str, values: list[Any]) -> None:
        """One message on ``stream`` to the acker of tree ``root``, now (fails, timeout resets,
        and what must not wait for a flush)."""
        self._transfer.send((acker_for(root, self.acker_tasks),), self._sources[stream], self._task, values)

    def flush(self) -> None:
        """Send the acks the component's own threads combined (all of them, when the executor
        has no round), but those a stateful bolt holds."""
        acks = self.foreign
        if not acks:
            return
        held = self.held
        out: list[tuple[int, int, int]] = []
        for root, val in acks.items():
            if not val:
                continue  # acks that cancel out would not change the acker's value
            if held is None or root & UNHELD_ROOT_BIT:
                out.append((root, val, -1))
            else:
                held.xor(root, val)
        acks.clear()
        self.send(out)

    def flush_round(self) -> None:
        """The end of the round: its inits and acks to the ackers, and to each spout task of the
        trees that completed in it, one ``ACKED_BATCH`` tuple (the round's spouts are all in
        this worker)."""
        if self.round is None:
            return
        to_ackers, completed = self.round.take()
        self.send(to_ackers)
        source, me = self._sources[ACKED_BATCH], self._task
        for spout_task, roots in completed.items():
            self._transfer.send((spout_task,), source, me, [roots])

    def send(self, acks: list[tuple[int, int, int]]) -> None:
        """Send ``(root, value, spout task or -1)`` inits and acks (one per tree) to the trees'
        ackers, one batch of three columns per acker task: to an acker task of this worker as one
        ACK_BATCH tuple, to another worker's as one AckBatch group."""
        acker_tasks = self.acker_tasks
        batches: dict[int, list[list[int]]] = {}
        for root, val, spout_task in acks:
            task = acker_tasks[root % len(acker_tasks)]  # acker_for, inlined
            columns = batches.get(task)
            if columns is None:
                columns = batches[task] = [[], [], []]
            columns[0].append(root)
            columns[1].append(val)
            columns[2].append(spout_task)
        transfer, source, me = self._transfer, self._sources[ACK_BATCH], self._task
        for task, columns in batches.items():
            if task in transfer.local_tasks:
                transfer.send((task,), source, me, columns)
            else:
                transfer.send_group(task, AckBatch(me, task, *columns))

    def ack_now(self, tup: Tuple) -> None:
        """Ack ``tup`` straight to its ackers, past any round or holding (a checkpoint barrier)."""
        self.send([(root, edge ^ tup.ack_val, -1) for root, edge in tup.tree_ids.items()])

    def fail_now(self, tup: Tuple) -> None:
        """Fail every tree ``tup`` belongs to, at once."""
        for root in tup.tree_ids:
            self.to_acker(root, ACK_FAIL, [root])

    # -- a stateful bolt's held acks (squall.runtime.executor.checkpointing) ----------------------

    def prepare(self) -> None:
        """The state is being prepared: the acks held so far (flushed first) wait for its commit."""
        prepared = self.prepared
        for root, val in self.held.items():
            prepared.xor(root, val)
        self.held.clear()

    def commit_prepared(self) -> None:
        """The prepared state is committed: what its acks' tuples did is in it; send them."""
        self.send([(root, val, -1) for root, val in self.prepared.items() if val])
        self.prepared.clear()

    def fail_held(self) -> None:
        """The state rolls back: every tree with a held or prepared ack fails (its spout replays)."""
        for root in {*self.held.keys(), *self.prepared.keys()}:
            self.to_acker(root, ACK_FAIL, [root])
        self.held.clear()
        self.prepared.clear()
