"""The interface between workers: how serialized batches reach another worker.

A transport moves opaque payloads (bytes) from one worker to another and tells senders
whether a destination task can take more (backpressure). Tuples between tasks of the
same worker never reach it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable

from squall.utils.batch_queue import Bell

#: ``full_tasks()``: a worker's tasks whose incoming queues are full (backpressure).
FullTasksFn = Callable[[], frozenset[int]]


class Transport(ABC):
    """Contract:

    * :meth:`register` is called by each worker before it sends or receives, with its
      index, how to tell which of its tasks' queues are full, and the bell of the thread
      that will read its payloads.
    * :meth:`send` is called only from a worker's transfer thread; it must not block
      for long (the receiving side never blocks on its executors, so it always drains);
      what it cannot hand over yet it keeps for :meth:`send_backlog`.
    * :meth:`receive` is called only from the thread reading the worker's payloads; it
      returns the payloads that arrived, waiting up to ``timeout`` seconds for one.
      :meth:`wait` is for a reading thread that also waits for other work: it returns
      when a payload may have arrived or ``bell`` rang.
    * :meth:`full_tasks` may be called from any executor thread; it is advisory
      (a full destination makes senders wait, never drop).
    """

    @abstractmethod
    def register(self, worker: int, full_tasks: FullTasksFn, bell: Bell) -> None: ...

    @abstractmethod
    def send(self, dest_worker: int, payload: bytes) -> None: ...

    @abstractmethod
    def receive(self, worker: int, timeout: float) -> list[bytes]: ...

    @abstractmethod
    @abstractmethod
    def wait(self, worker: int, bell: Bell, timeout: float) -> None:
        """Wait, with ``bell`` armed, until a payload for ``worker`` may have arrived, the bell
        rings or ``timeout`` seconds pass; ``bell`` is disarmed on return."""

    @abstractmethod
    def full_tasks(self, dest_worker: int) -> frozenset[int] | None:
        """The tasks of ``dest_worker`` whose queues are full, as last known; None when it
        must be sent nothing at all for now (nothing is known of a worker that just started,
        or it has not taken what was sent to it yet)."""

    def send_backlog(self) -> bool:
        """Retry what :meth:`send` could not hand over yet (transfer thread); True while
        something is still waiting. Transports whose send always completes keep none."""
        return False

    def close(self) -> None:
        """Release whatever the transport holds."""
