"""Durable state for stateful spouts and bolts: ``KeyValueState`` and its providers.

See :mod:`squall.api.stateful` for the components' API and :mod:`squall.api.checkpoint_spout` for how
checkpoints are taken.
"""

from squall.api.state.key_value_state import KeyValueState
from squall.api.state.provider import InMemoryStateProvider, StateProvider, StateProviderError, TaskStore, provider_for

State = KeyValueState  # Storm's State interface; KeyValueState is its only kind here

__all__ = [
    "PROVIDER_CONFIG_KEY", "PROVIDER_KEY", "InMemoryStateProvider", "KeyValueState", "State", "StateProvider",
    "StateProviderError", "TaskStore", "provider_for",
]
