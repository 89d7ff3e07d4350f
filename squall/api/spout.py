"""Spouts: the sources of streams (Storm's ``ISpout``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from squall.api.component import Component

if TYPE_CHECKING:
    from squall.api.collector import ISpoutOutputCollector
    from squall.api.context import TopologyContext


class Spout(Component):
    """A source of tuples.

    Contract:

    * The instance given to ``TopologyBuilder.set_spout`` is serialized at
      ``create_topology``; each task gets its own copy. What the constructor stores
      travels; open files, sockets and threads belong in :meth:`open`.
    * Every method of one task is called from one thread, never concurrently: ``ack`` and
      ``fail`` arrive between ``next_tuple`` calls.
    * :meth:`next_tuple` must not block. It may emit zero or more tuples; when it emits
      nothing the executor backs off briefly before calling again.
    * A tuple emitted with a ``msg_id`` is tracked: exactly one of ``ack(msg_id)`` (its
      whole tree was processed) or ``fail(msg_id)`` (a bolt failed it, or it timed out
      after ``topology.message.timeout.secs``) follows. Without ``msg_id`` nothing follows.
    * An exception from ``next_tuple``, ``ack`` or ``fail`` is recorded as an error of
      the component; the executor goes on.
    * :attr:`keeps_position` says whether a restart resumes from where the input was
      committed; stateful bolts fed by a spout that does not are warned about at submit.
    """

    #: True when, after a restart, the spout resumes where its input was committed (a broker's
    #: offsets or acknowledgements, files archived once acked, its position in checkpointed
    #: state) rather than reading it again from its start: a stateful bolt downstream of a spout
    #: that does not would count the input twice on top of its restored state.
    keeps_position: bool = False

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: ISpoutOutputCollector) -> None:
        """Called once in the worker before any other method."""

    def next_tuple(self) -> None:
        """Emit the next tuple(s), if any. Must not block."""

    def ack(self, msg_id: Any) -> None:
        """The tree of the tuple emitted with ``msg_id`` was fully processed."""

    def fail(self, msg_id: Any) -> None:
        """The tuple emitted with ``msg_id`` failed or timed out; replay it if it matters."""

    def activate(self) -> None:
        """The topology became active (also called once after ``open`` when it starts active)."""

    def deactivate(self) -> None:
        """The topology was deactivated: ``next_tuple`` is not called until ``activate``."""

    def close(self) -> None:
        """The topology is being killed. Not guaranteed to run if the process dies."""
