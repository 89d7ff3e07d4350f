"""Bolts: the processing steps of a topology (Storm's ``IRichBolt`` and ``IBasicBolt``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from squall.api.component import Component

if TYPE_CHECKING:
    from squall.api.collector import IBasicOutputCollector, IOutputCollector
    from squall.api.context import TopologyContext
    from squall.api.tuple import Tuple


class Bolt(Component):
    """Processes tuples and may emit new ones.

    Contract:

    * The instance given to ``set_bolt`` is serialized at ``create_topology``; each task
      gets its own copy and :meth:`prepare` runs in the worker.
    * :meth:`execute` of one task is never called concurrently. The collector is
      thread-safe: a bolt may emit, ack and fail from threads of its own.
    * Every input must eventually be acked or failed (``collector.ack(tup)`` /
      ``collector.fail(tup)``), or its spout tuple times out. Emits anchored to inputs
      (``collector.emit(values, anchors=tup)``) join the inputs' trees.
    * An exception raised by ``execute`` is recorded as an error of the component and the
      input is failed; the executor goes on with the next tuple.
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        """Called once in the worker before the first ``execute``."""

    def execute(self, tup: Tuple) -> None:
        """Process one input tuple."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup)")

    def finish_batch(self) -> None:
        """Called after ``execute`` ran for a batch of inputs (what had arrived for the
        executor since the last call), before the batch's emits and acks are handed on, and
        before a checkpoint barrier is acted on. Default: nothing.

        A sink buffers its writes in ``execute`` and sends them here in one round trip,
        then acks (or fails) those inputs. Runs on the executor's thread, never concurrently
        with ``execute``; it should block no longer than that write. An exception is recorded
        as an error of the component; the inputs the bolt holds are still its to ack or fail.
        """

    def cleanup(self) -> None:
        """The topology is being killed. Not guaranteed to run if the process dies."""


class BasicBolt(Component):
    """A bolt whose emits are anchored to the input and whose input is acked for it
    (Storm's ``IBasicBolt``).

    The input is acked when :meth:`execute` returns, and failed if it raises
    :class:`~squall.FailedException` (no error recorded) or any other exception (error
    recorded for the component).
    """

    def prepare(self, conf: dict[str, Any], context: TopologyContext) -> None:
        """Called once in the worker before the first ``execute``."""

    def execute(self, tup: Tuple, collector: IBasicOutputCollector) -> None:
        """Process one input tuple; emits through ``collector`` are anchored to it."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(tup, collector)")

    def cleanup(self) -> None:
        """The topology is being killed."""
