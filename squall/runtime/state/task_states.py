"""The states of one component's stateful tasks, and what a checkpoint barrier does to them
(Storm's ``StatefulBoltExecutor`` hooks around ``State.prepareCommit``/``commit``/``rollback``).

An executor's barrier handling (:mod:`squall.runtime.executor.checkpointing`) acts through a
:class:`TaskStates` once a barrier is aligned; :mod:`squall.harness` drives one directly.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall.api.checkpoint_spout import COMMIT, PREPARE
from squall.api.config import Config
from squall.api.grouping import FIELDS
from squall.api.state.key_groups import key_group
from squall.api.state.key_value_state import KeyValueState
from squall.api.state.provider import provider_for
from squall.runtime.grouping import key_hash
from squall.runtime.serialization import Serializer

if TYPE_CHECKING:
    from squall.api.storm_topology import StormTopology

log = logging.getLogger("squall.checkpoint")


class KeyedInputs:
    """A stateful bolt's inputs as its keyed states see them (``KeyValueState``'s
    ``KeyedInputs``): the input ``executor`` is executing, and an input's key group among
    ``key_groups``, from the values its fields grouping selects (None on another grouping)."""

    def __init__(self, executor: Any, topology: StormTopology, component: str, key_groups: int) -> None:
        self.executor = executor
        self._key_groups = key_groups
        components = topology.components
        # (source component, stream) -> the indexes of the values its fields grouping selects
        self._indexes = {(source, stream): [components[source].outputs[stream].fields.field_index(f)
                                            for f in grouping.fields]
                         for (source, stream), grouping in components[component].inputs.items()
                         if grouping.type == FIELDS}

    @staticmethod
    def of(executor: Any, topology: StormTopology, component: str, conf: dict[str, Any]) -> KeyedInputs | None:
        """The keyed inputs of ``component``'s executor; None if it has no fields-grouped input,
        the topology keeps no key groups, or the executor does not run its bolt's ``execute``
        itself (a window's: no ``current_input``, so its puts have no group)."""
        key_groups = conf[Config.TOPOLOGY_STATE_KEY_GROUPS]
        inputs = topology.components[component].inputs.values()
        if key_groups is None or not any(g.type == FIELDS for g in inputs) or not hasattr(executor, "current_input"):
            return None
        return KeyedInputs(executor, topology, component, key_groups)

    def group_of(self, tup: Any) -> int | None:
        indexes = None if tup is None else self._indexes.get((tup.source_component, tup.source_stream_id))
        if indexes is None:
            return None
        values = tup.values
        return key_group(key_hash([values[i] for i in indexes]), self._key_groups)


class TaskStates:
    """The states of one component's stateful tasks (``components``: task -> its spout or bolt,
    ``indexes``: task -> its index among the component's tasks), and what a barrier does to
    them. ``report_error(task, error)`` records a hook's or the store's error. ``keyed``: the
    bolt's keyed inputs, or None. An executor holds one; so does :mod:`squall.testing`'s harness."""

    def __init__(self, conf: dict[str, Any], topology_name: str, component: str, components: dict[int, Any],
                 indexes: dict[int, int], report_error: Callable[[int, BaseException], None],
                 keyed: KeyedInputs | None = None) -> None:
        self._component = component
        self._components = components
        self._report_error = report_error
        self.keyed = keyed
        self.provider = provider_for(conf, topology_name)
        serializer = Serializer.for_config(conf)
        self.states = {
            task: KeyValueState(self.provider.task_store(component, task, indexes[task]), serializer,
                                f"component {component!r} task {task}", keyed)
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
