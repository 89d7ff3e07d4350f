"""Checkpoint alignment (squall.runtime.executor.checkpointing.Checkpointing) driven directly,
without a topology: it sees its executor through a CheckpointHost, and acks through a real
AckLedger whose send path records what it is given.

One bolt task (7) behind two upstream tasks (1 and 2) of component ``up``: data from a channel
whose barrier arrived waits, the other channel's is executed; once both barriers are in, the
barrier is acted on, passed on anchored to both copies, acked (or failed) straight to the
acker, and what waited is executed in order. A newer barrier supersedes the current one.
A batch holding a barrier holds only barriers (the send and receive paths cut batches at one),
so the batches here do too.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from squall.api.checkpoint_spout import COMMIT, INITSTATE, PREPARE
from squall.api.system_ids import ACK_BATCH, ACK_FAIL, CHECKPOINT_COMPONENT, CHECKPOINT_STREAM
from squall.api.tuple import Fields, StreamSource, Tuple, system_sources
from squall.runtime.executor.ack_ledger import AckLedger, combine_ack
from squall.runtime.executor.checkpointing import Checkpointing

TASK, UP, ACKER = 7, (1, 2), 100
DATA = StreamSource("up", "default", Fields("n"))
BARRIER = StreamSource("up", CHECKPOINT_STREAM, Fields("txid", "action", "id"))


class Transfer:
    """The send path: what the ledger and the alignment hand it, in order."""

    local_tasks = frozenset({ACKER})

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any]]] = []
        self.flushes = 0

    def send(self, tasks: Any, source: StreamSource, source_task: int, values: list[Any]) -> None:
        self.sent.append((source.stream, [list(v) if isinstance(v, list) else v for v in values]))

    def flush_all(self) -> None:
        self.flushes += 1

    def acker_rows(self, stream: str) -> list[Any]:
        """The roots of every ack-batch row (ACK_BATCH) or fail (ACK_FAIL) sent."""
        if stream == ACK_BATCH:
            return [root for s, values in self.sent if s == ACK_BATCH for root in values[0]]
        return [values[0] for s, values in self.sent if s == stream]


class Host:
    """The executor as the alignment sees it: what it executed and passed on."""

    component = "bolt"
    task_ids = [TASK]

    def __init__(self, acks: AckLedger) -> None:
        self.acks = acks
        self.executed: list[Any] = []
        self.passed_on: list[tuple[int, list[Any], list[int]]] = []  # (task, values, anchors' roots)
        self.finished = 0

    def execute(self, batch: list[Tuple]) -> None:
        self.executed.extend(tup.values[0] for tup in batch)
        for tup in batch:
            combine_ack(self.acks.pending, tup)  # the bolt acks what it executed

    def pairs(self, batch: list[Tuple]) -> Any:
        return [(TASK, tup) for tup in batch]

    def emit_barrier(self, task: int, values: list[Any], anchors: list[Tuple]) -> None:
        self.passed_on.append((task, list(values), sorted(root for a in anchors for root in a.tree_ids)))

    def finish_batches(self) -> None:
        self.finished += 1

    def flush_all(self) -> None:
        self.acks.flush()


def make(held: bool = False) -> tuple[Checkpointing, Host, Transfer, AckLedger]:
    transfer = Transfer()
    acks = AckLedger([ACKER], transfer, system_sources("bolt"), TASK, held=held)
    host = Host(acks)
    topology = SimpleNamespace(components={
        "up": SimpleNamespace(inputs=[(CHECKPOINT_COMPONENT, CHECKPOINT_STREAM)]),
        "bolt": SimpleNamespace(inputs=[("up", "default"), ("up", CHECKPOINT_STREAM)]),
    })
    assignment = SimpleNamespace(component_tasks={"up": list(UP), "bolt": [TASK], CHECKPOINT_COMPONENT: [0]},
                                 task_component={1: "up", 2: "up", TASK: "bolt", 0: CHECKPOINT_COMPONENT})
    return Checkpointing(host, acks, transfer, topology, assignment, None), host, transfer, acks


def data(n: int, source_task: int) -> Tuple:
    return Tuple([n], DATA, source_task, {1000 + n: 1})


def barrier(source_task: int, barrier_id: int, action: str = INITSTATE, txid: int = 1) -> Tuple:
    return Tuple([txid, action, barrier_id], BARRIER, source_task, {barrier_id * 10 + source_task: 2})


def test_data_without_a_barrier_goes_straight_to_the_executor() -> None:
    cp, host, transfer, _ = make()
    cp.process([data(1, 1), data(2, 2)])
    assert host.executed == [1, 2] and not host.passed_on and transfer.sent == []


def test_a_barrier_holds_back_its_channel_until_every_channel_brought_it() -> None:
    cp, host, transfer, acks = make()
    for batch in [data(1, 1)], [barrier(1, 5)], [data(2, 1), data(3, 2)]:
        cp.process(batch)
    assert host.executed == [1, 3], "task 1's tuple after its barrier waits; task 2's channel flows"
    assert not host.passed_on

    for batch in [data(4, 1)], [barrier(2, 5)], [data(5, 2)]:
        cp.process(batch)
    assert host.finished == 1, "a sink's buffered writes come before the barrier"
    assert host.passed_on == [(TASK, [1, INITSTATE, 5], [51, 52])], "passed on once, anchored to both copies"
    assert host.executed == [1, 3, 2, 4, 5], "what waited runs after the barrier, in channel order"
    assert cp.recovered
    acks.flush()
    acked = transfer.acker_rows(ACK_BATCH)
    assert {51, 52} <= set(acked) and transfer.acker_rows(ACK_FAIL) == []


def test_a_checkpoint_before_the_recovery_fails_but_is_still_passed_on() -> None:
    cp, host, transfer, _ = make()
    cp.process([barrier(1, 5, PREPARE), barrier(2, 5, PREPARE)])
    assert host.passed_on == [(TASK, [1, PREPARE, 5], [51, 52])], "downstream must not wait for it"
    assert sorted(transfer.acker_rows(ACK_FAIL)) == [51, 52]
    assert not cp.recovered


def test_a_newer_barrier_supersedes_the_one_being_aligned() -> None:
    cp, host, transfer, _ = make()
    cp.process([barrier(1, 5)])
    cp.process([data(1, 1)])
    cp.process([barrier(2, 6, txid=2)])
    assert transfer.acker_rows(ACK_FAIL) == [51], "the superseded barrier's copy fails"
    assert host.executed == [1], "what waited behind it runs"
    cp.process([barrier(1, 6, txid=2)])
    assert host.passed_on == [(TASK, [2, INITSTATE, 6], [61, 62])]


def test_a_stateful_bolts_acks_wait_for_the_commit_of_the_state_they_are_in() -> None:
    cp, host, transfer, acks = make(held=True)
    cp.process([barrier(1, 1), barrier(2, 1)])  # INITSTATE: recovered
    cp.process([data(1, 1)])
    host.flush_all()
    assert 1001 not in transfer.acker_rows(ACK_BATCH), "held until its state is committed"
    cp.process([barrier(1, 2, PREPARE, 2), barrier(2, 2, PREPARE, 2)])
    assert 1001 not in transfer.acker_rows(ACK_BATCH), "prepared is not committed"
    cp.process([barrier(1, 3, COMMIT, 2), barrier(2, 3, COMMIT, 2)])
    assert 1001 in transfer.acker_rows(ACK_BATCH)
