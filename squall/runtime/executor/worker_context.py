"""What an executor needs of its worker (Storm's ``WorkerState``, the part executors see)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from squall.api.storm_topology import StormTopology
from squall.api.tuple import StreamSource
from squall.runtime.assignment import Assignment
from squall.runtime.cluster_state import TopologyState
from squall.utils.batch_queue import BatchQueue

if TYPE_CHECKING:
    from squall.runtime.messaging.backpressure import Credits

#: ``transfer(dest worker, groups, count, block, stopping)``: queue groups of
#: :mod:`squall.runtime.messaging.tuple_batch` (``count`` tuples and batches in all) for another worker
#: (see :mod:`squall.runtime.executor.transfer`). With ``block``, wait for room while ``stopping()`` is
#: false and return True; without, return False (nothing queued) when there is no room.
TransferFn = Callable[[int, list[Any], int, bool, Callable[[], bool]], bool]


@dataclass(frozen=True)
class WorkerContext:
    """The worker as its executors see it: read-only after the worker is built.

    * ``task_queues``: the incoming queue of every task of this worker (the tasks of one
      executor share one); ``single_task_queues`` holds the ``id`` of the queues of
      executors that run one task (their batches hold bare tuples, not ``(task, tuple)``).
    * ``sources``: the :class:`StreamSource` of every (component, stream) of the topology,
      system streams included, shared by every tuple of that stream.
    * ``transfer``: see :data:`TransferFn`.
    * ``restarted``: the worker replaces one that died (its tasks ask for a rollback).
    """

    topology_name: str
    topology: StormTopology
    conf: dict[str, Any]
    assignment: Assignment
    index: int
    task_queues: dict[int, BatchQueue]
    single_task_queues: frozenset[int]
    sources: dict[tuple[str, str], StreamSource]
    state: TopologyState
    transfer: TransferFn
    restarted: bool = False
    #: the credit this worker holds to send to the others (see squall.runtime.messaging.backpressure): also
    #: what tells a task's load; None where nothing keeps it (load-aware shuffle is then off)
    credits: Credits | None = None

    def is_single_task(self, queue: BatchQueue) -> bool:
        return id(queue) in self.single_task_queues
