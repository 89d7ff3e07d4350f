"""The states of one component's stateful tasks, and what a checkpoint barrier does to them
(Storm's ``StatefulBoltExecutor`` hooks around ``State.prepareCommit``/``commit``/``rollback``).

An executor's barrier handling (:mod:`squall.runtime.executor.checkpointing`) acts through a
:class:`TaskStates` once a barrier is aligned; :mod:`squall.harness` drives one directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from squall.api.checkpoint_spout import COMMIT, PREPARE
from squall.api.state.key_value_state import KeyValueState
from squall.api.state.provider import provider_for
from squall.runtime.serialization import Serializer

log = logging.getLogger("squall.checkpoint")


class TaskStates:
    """The states of one component's stateful tasks (``components``: task -> its spout or bolt),
    and what a barrier does to them. ``report_error(task, error)`` records a hook's or the
    store's error. An executor holds one; so does :mod:`squall.testing`'s harness."""

    def __init__(self, conf: dict[str, Any], topology_name: str, component: str, components: dict[int, Any],
                 report_error: Callable[[int, BaseException], None]) -> None:
        self._component = component
        self._components = components
        self._report_error = report_error
        self.provider = provider_for(conf, topology_name)
        serializer = Serializer.for_config(conf)
        self.states = {
            task: KeyValueState(self.provider.task_store(component, task), serializer,
                                f"component {component!r} task {task}")
            for task in components
        }

    def init(self) -> None:
        """Load the last committed state and call ``init_state`` (before the first tuple);
        raises what they raise."""
        committed = self.provider.committed()
        for task, state in self.states.items():
            state.load(committed)
            self._components[task].init_state(state)

    def act(self, tasks: Any, txid: int | None, action: str) -> bool:
        """Do ``action`` of checkpoint ``txid`` for ``tasks``; False (error recorded for the
        task) if a hook or the store raised."""
        for task in tasks:
            component, state = self._components[task], self.states[task]
            try:
                if action == PREPARE:
                    component.pre_prepare(txid)
                    state.prepare(txid)
                elif action == COMMIT:
                    component.pre_commit(txid)
                    state.commit(txid)
                else:
                    component.pre_rollback()
                    state.load(txid)
                    component.init_state(state)
            except Exception as e:  # noqa: BLE001 - the checkpoint fails and rolls back
                log.warning("component %r task %d: %s of checkpoint %s failed: %s",
                            self._component, task, action, txid, e)
                self._report_error(task, e)
                return False
        return True

    def close(self) -> None:
        for state in self.states.values():
            state.close()
        self.provider.close()
