"""The interface between workers: how serialized batches reach another worker.

A transport moves opaque payloads (bytes) from one worker to another and carries the credit
each worker grants the others (see :mod:`squall.runtime.messaging.backpressure`). Tuples between tasks of
the same worker never reach it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING

from squall.utils.batch_queue import Bell

if TYPE_CHECKING:
    from squall.runtime.messaging.backpressure import CreditGrants, Credits

#: what :meth:`Transport.receive` returns: (sending worker, its run, payload)
Received = tuple[int, int, bytes]


class Transport(ABC):
    """Contract:

    * :meth:`register` is called by each worker before it sends or receives, with its
      grants (what it lets the others send it), its credits (what it may send them) and the
      bell of the thread that will read its payloads. Grants travel in payloads, and a
      payload's sender and run are how the worker hears of a peer's run (see
      :mod:`squall.runtime.messaging.backpressure`): a transport that learns of peers greets
      them (``grants.greet``); one whose workers share a process may hand grants over directly.
    * :meth:`send` is called only from a worker's transfer thread; it must not block
      for long (the receiving side never blocks on its executors, so it always drains);
      what it cannot hand over yet it keeps for :meth:`send_backlog`. Senders send only what
      they hold credit for, so what a transport keeps is bounded.
    * :meth:`receive` is called only from the thread reading the worker's payloads; it
      returns the payloads that arrived with their senders and the senders' runs, waiting up
      to ``timeout`` seconds for one. :meth:`wait` is for a reading thread that also waits for
      other work: it returns when a payload may have arrived or ``bell`` rang.
    """

    #: the run (incarnation) of the worker this transport serves: grants are per run
    run = 0
    #: whether receivers grant credit; False: senders need none (a transport whose receivers
    #: are never full, as a simulation's)
    credit_based = True

    @abstractmethod
    def register(self, worker: int, grants: CreditGrants, credits: Credits, bell: Bell) -> None: ...

    @abstractmethod
    def send(self, dest_worker: int, payload: bytes, source_worker: int) -> None: ...

    @abstractmethod
    def receive(self, worker: int, timeout: float) -> list[Received]: ...

    @abstractmethod
    def wait(self, worker: int, bell: Bell, timeout: float, backlog: bool = False) -> None:
        """Wait, with ``bell`` armed, until a payload for ``worker`` may have arrived, the bell
        rings or ``timeout`` seconds pass; ``bell`` is disarmed on return. ``backlog``: the
        waiting thread also sends, and :meth:`send_backlog` keeps something: wake as well when
        it may go on."""

    def wait_sendable(self, bell: Bell, timeout: float) -> None:
        """Wait, with ``bell`` armed, until what :meth:`send_backlog` keeps may go on, the bell
        rings or ``timeout`` seconds pass (the transfer thread, when it waits apart from the
        reading thread); ``bell`` is disarmed on return."""
        bell.wait(timeout)

    def send_backlog(self) -> bool:
        """Retry what :meth:`send` could not hand over yet (transfer thread); True while
        something is still waiting. Transports whose send always completes keep none."""
        return False

    def close(self) -> None:
        """Release whatever the transport holds."""
