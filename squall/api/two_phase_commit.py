"""Exactly-once output: sinks whose writes commit with the topology's checkpoints (Flink's
``TwoPhaseCommitSinkFunction``, on Squall's checkpoints).

A checkpointed topology's state is effectively once; what a plain bolt writes out is at least
once, since a rollback replays what followed the last commit. A :class:`TwoPhaseCommitSink`
writes the tuples of each checkpoint *epoch* (those between two PREPARE barriers) into a
*transaction* that nobody outside sees until the checkpoint covering it is committed:

1. ``begin_transaction()`` when the epoch's first tuple arrives, then ``write(transaction, tup)``
   for each tuple (the tuple is acked; its ack reaches the spout once the checkpoint commits);
2. at PREPARE ``txid``: ``prepare_transaction(transaction, txid)`` makes it durable but not
   visible (flushed, fsynced, written ahead) and returns its *handle*, a small value of the
   topology's serializer's types that is stored in the task's state in that same checkpoint;
3. once checkpoint ``txid`` is committed (COMMIT ``txid``): ``commit_transaction(handle, txid)``
   makes it visible, for every handle prepared up to ``txid``, in order;
4. on a rollback (a failed checkpoint, or any worker restarted): ``abort_transaction`` the open
   transaction, ``abort_prepared`` the handles no committed checkpoint covers, and ``recover``
   with the handles the committed checkpoint holds: they are committed (again).

The hard case is a crash between the checkpoint's commit and the sink's. The handle is in the
committed checkpoint, so after the restart :meth:`~TwoPhaseCommitSink.recover` commits it:
every epoch the checkpoint committed is made visible, and no other. Hence the one rule for
implementers: **``commit_transaction`` is idempotent**: it may be called again for a handle it
already committed (in this run or an earlier one), and must then change nothing.

When each hook is called: on the executor's thread, never concurrently with ``execute`` or with
each other (``prepare``, as for any bolt, may run on another thread). A two-phase sink is a
blocking component (a thread of its own): ``prepare_transaction`` and ``commit_transaction``
may block (I/O) for as long as the checkpoint may take (``topology.message.timeout.secs``).
An exception from ``write`` fails that tuple, with the error reported for the component; one
from ``prepare_transaction`` fails the checkpoint (the topology rolls back and goes on); one from
``commit_transaction`` or ``recover`` is reported, and the handle stays pending: the next
COMMIT, or the recovery after a restart, commits it.

The guarantee holds when every spout upstream is a :class:`~squall.api.stateful.StatefulSpout`
(its position is in the same checkpoints), which ``create_topology`` checks. Records become
visible one checkpoint interval (``topology.state.checkpoint.interval.ms``) after they arrive;
what a handle holds (a write-ahead sink's records) stays in memory and in the state until its
epoch is committed.

:class:`WriteAheadSink` is the form for stores without their own transactions to resume
(Kafka's producers, Redis, a database): the epoch's records *are* the handle, kept in the
checkpoint, and ``publish(txid, records)`` writes them after the commit, atomically with a
marker of the last ``txid`` it published, so that an epoch published before a crash is
recognised and skipped (Storm Trident's transactional state).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from squall.api.stateful import StatefulBolt

if TYPE_CHECKING:
    from squall.api.collector import IOutputCollector
    from squall.api.context import TopologyContext
    from squall.api.state import KeyValueState
    from squall.api.tuple import Tuple

__all__ = ["TwoPhaseCommitSink", "WriteAheadSink", "PENDING_KEY"]

Transaction = TypeVar("Transaction")
Handle = TypeVar("Handle")

#: the key of the task's state holding the prepared handles ([txid, handle] pairs) not yet committed
PENDING_KEY = "$two-phase-commit.pending"


class TwoPhaseCommitSink(StatefulBolt, Generic[Transaction, Handle]):
    """A sink bolt whose output commits with the topology's checkpoints (see the module).

    Implement :meth:`begin_transaction`, :meth:`write`, :meth:`prepare_transaction` and
    :meth:`commit_transaction`; :meth:`abort_transaction`, :meth:`abort_prepared` and
    :meth:`recover` where the store keeps something to clean. A subclass overriding
    ``prepare``, ``init_state``, ``pre_prepare``, ``pre_commit`` or ``pre_rollback`` calls the
    base class's method. It declares no stream (override ``declare_output_fields`` to emit).
    """

    #: read at submit: every spout upstream must keep its position in the checkpoints
    exactly_once = True
    blocking = True  # commits do I/O: a thread of its own, never the worker's cooperative one

    # -- what an implementation provides -------------------------------------------------------

    def begin_transaction(self) -> Transaction:
        """A new transaction, for the epoch's first tuple."""
        raise NotImplementedError

    def write(self, transaction: Transaction, tup: Tuple) -> None:
        """Add ``tup`` to ``transaction``, invisibly. Raise (naming what is wrong) to fail it."""
        raise NotImplementedError

    def prepare_transaction(self, transaction: Transaction, txid: int) -> Handle:
        """Make ``transaction`` durable but invisible, for checkpoint ``txid``; return what
        :meth:`commit_transaction` needs to make it visible, even in another process after a
        crash (a value the topology's serializer takes: msgpack types)."""
        raise NotImplementedError

    def commit_transaction(self, handle: Handle, txid: int) -> None:
        """Make the transaction prepared for checkpoint ``txid`` visible. Idempotent: a handle
        committed before (by this run or an earlier one) changes nothing. Handles come in
        increasing ``txid``; the ``txid`` of a committed checkpoint is never reused."""
        raise NotImplementedError

    def abort_transaction(self, transaction: Transaction) -> None:
        """Discard an open transaction (a rollback came before its PREPARE)."""

    def abort_prepared(self, handle: Handle) -> None:
        """Discard a prepared transaction that no committed checkpoint covers (a rollback came
        after its PREPARE, before its checkpoint committed)."""

    def recover(self, pending: list[tuple[int, Handle]]) -> None:
        """After a rollback or a restart: commit the ``pending`` ``(txid, handle)`` pairs (those
        of the committed checkpoint that may not be visible yet, oldest first), and discard what
        earlier runs of this task left that no committed checkpoint covers (a crashed run's open
        or prepared transactions, which :meth:`abort_prepared` never saw). The default commits
        each handle."""
        for txid, handle in pending:
            self.commit_transaction(handle, txid)

    # -- the bolt: the protocol above on Squall's checkpoint hooks -----------------------------

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        self.collector = collector
        self._component = context.get_this_component_id()
        self._open: Any = None  # the epoch's transaction, until its PREPARE
        self._has_open = False
        self._prepared: list[list[Any]] = []  # [txid, handle] prepared, not known to be committed
        self._recovering = False

    def init_state(self, state: KeyValueState) -> None:
        self.state = state
        committed = [list(pair) for pair in state.get(PENDING_KEY, ())]
        if not self._recovering:  # a start: a recovery barrier follows before any tuple
            self._prepared = committed
            return
        self._recovering = False
        # txids grow between two recoveries, so one prepared since the last is covered by the
        # committed checkpoint iff that checkpoint's state holds it
        covered = {txid for txid, _ in committed}
        for txid, handle in self._prepared:
            if txid not in covered:
                self.abort_prepared(handle)
        self._prepared = committed
        self.recover([(txid, handle) for txid, handle in committed])
        self._prepared = []
        if committed:
            state.delete(PENDING_KEY)

    def execute(self, tup: Tuple) -> None:
        if tup.is_tick():
            return
        if not self._has_open:
            self._open, self._has_open = self.begin_transaction(), True
        try:
            self.write(self._open, tup)
        except Exception as e:  # noqa: BLE001 - the tuple fails, named; the epoch goes on
            error = RuntimeError(f"component {self._component!r} ({type(self).__name__}): cannot write "
                                 f"{tup.values!r} from component {tup.source_component!r}: {type(e).__name__}: {e}")
            error.__cause__ = e
            self.collector.report_error(error)
            self.collector.fail(tup)
            return
        self.collector.ack(tup)

    def pre_prepare(self, txid: int) -> None:
        if self._has_open:
            handle = self.prepare_transaction(self._open, txid)
            self._open, self._has_open = None, False
            self._prepared.append([txid, handle])
            self.state.put(PENDING_KEY, list(self._prepared))

    def pre_commit(self, txid: int) -> None:
        while self._prepared and self._prepared[0][0] <= txid:
            self.commit_transaction(self._prepared[0][1], self._prepared[0][0])
            self._prepared.pop(0)
            if self._prepared:
                self.state.put(PENDING_KEY, list(self._prepared))
            else:
                self.state.delete(PENDING_KEY)

    def pre_rollback(self) -> None:
        if self._has_open:
            transaction, self._open, self._has_open = self._open, None, False
            self.abort_transaction(transaction)
        self._recovering = True

    def declare_output_fields(self, declarer: Any) -> None:
        pass


class WriteAheadSink(TwoPhaseCommitSink[list, list]):
    """A two-phase sink whose transactions are the epoch's records, kept in the checkpoint and
    published after it commits (see the module). Implement :meth:`record` and :meth:`publish`.

    Costs: each epoch's records are held in memory and written into the task's state at
    PREPARE; they reach the store after the commit, so one checkpoint interval later.
    """

    def record(self, tup: Tuple) -> Any:
        """What to publish for ``tup``: a value of the serializer's types (kept in the state).
        Raise (naming what is wrong) to fail the tuple."""
        raise NotImplementedError

    def publish(self, txid: int, records: list[Any]) -> None:
        """Write ``records`` (epoch ``txid``'s, in arrival order) atomically with a marker of
        ``txid`` as this task's last published epoch; change nothing if the marker already is
        ``txid`` or later (a commit repeated after a crash). Committed epochs come in
        increasing ``txid``."""
        raise NotImplementedError

    def begin_transaction(self) -> list:
        return []

    def write(self, transaction: list, tup: Tuple) -> None:
        transaction.append(self.record(tup))

    def prepare_transaction(self, transaction: list, txid: int) -> list:
        return transaction

    def commit_transaction(self, handle: list, txid: int) -> None:
        self.publish(txid, handle)
