"""Stateful spouts and bolts (Storm's ``IStatefulBolt`` / ``IStatefulComponent``).

A topology with a stateful component is checkpointed (see :mod:`squall.api.checkpoint_spout`):
every ``topology.state.checkpoint.interval.ms`` a barrier flows from the spouts through every
bolt, and each stateful task writes its state when the barrier has arrived from all of its
inputs, so that all the states of one checkpoint belong to one cut of the stream.

What the component gets, and when (all on its executor's thread, never concurrently with
``execute``/``next_tuple``):

* :meth:`StatefulComponent.init_state` after ``open``/``prepare`` and before the first tuple,
  with the state of the last committed checkpoint (empty the first time), and again after
  every rollback, with the state rolled back;
* :meth:`~StatefulComponent.pre_prepare` before its state is written for checkpoint ``txid``,
  :meth:`~StatefulComponent.pre_commit` before that checkpoint is committed, and
  :meth:`~StatefulComponent.pre_rollback` before the state returns to the last commit.

Guarantees (README, "State and windows"):

* stateful spouts + stateful bolts: *effectively once*. A stateful spout keeps its source
  position in its state, in the same checkpoint as the bolts' state; after a crash or a
  failed checkpoint every component returns to the last commit and the spouts resume from
  the position committed with it, so the states count every input exactly once. Such a spout
  must not replay on ``fail`` (the rollback does); it may emit without message ids.
* a plain reliable spout + stateful bolts: Storm's *at-least-once*: a stateful bolt's acks
  are held until its state is committed, and a rollback fails them, so the spout replays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from squall.api.bolt import Bolt
from squall.api.spout import Spout

if TYPE_CHECKING:
    from squall.api.state import KeyValueState


class StatefulComponent:
    """The hooks of a stateful spout or bolt (Storm's ``IStatefulComponent``)."""

    def init_state(self, state: KeyValueState) -> None:
        """Called after ``open``/``prepare`` and after every rollback, before any tuple that
        follows, with the last committed state. Keep the object: it stays this task's state."""

    def pre_prepare(self, txid: int) -> None:
        """Checkpoint ``txid`` is about to write this task's state."""

    def pre_commit(self, txid: int) -> None:
        """Checkpoint ``txid`` is about to be committed."""

    def pre_rollback(self) -> None:
        """The state is about to return to the last committed checkpoint."""


class StatefulBolt(Bolt, StatefulComponent):
    """A bolt with durable state (Storm's ``IStatefulBolt`` / ``BaseStatefulBolt``).

    Ack inputs as in any bolt; the acks reach the spouts only once the state they changed is
    committed.
    """


class StatefulSpout(Spout, StatefulComponent):
    """A spout whose source position is part of each checkpoint.

    Keep the position in the state as you emit (``state.put("offset", n)``); in
    :meth:`init_state`, seek the source to the position the state holds.
    """

    keeps_position = True


IStatefulBolt = StatefulBolt
IStatefulComponent = StatefulComponent
