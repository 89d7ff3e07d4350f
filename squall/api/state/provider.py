"""State providers: where a topology's committed state lives (Storm's ``StateProvider``).

A provider is chosen by ``topology.state.provider`` and configured by
``topology.state.provider.config`` (a dict, or a JSON string as in Storm). Each worker makes
its own provider object from the config (:func:`provider_for`), so a provider holds nothing
that cannot be rebuilt from the config: connections are opened lazily, per process.

The store is versioned by checkpoint transaction id (txid), which makes recovery a pure
function of one number, the topology's *committed txid* (:meth:`StateProvider.committed`):

* every stateful task has a :class:`TaskStore`: a committed base (with the txid it holds)
  plus at most one *prepared* delta (puts and deletes, with its txid);
* a checkpoint writes each task's delta with :meth:`TaskStore.prepare` (durable before it
  returns); once every task has prepared txid N, the checkpoint spout records N with
  :meth:`StateProvider.set_committed` — that single write is the commit point — and then
  tells the tasks to :meth:`TaskStore.commit` (fold the delta into the base);
* a task recovering to committed txid G calls :meth:`TaskStore.load` (G): a prepared delta
  of txid <= G is folded in first (its commit was decided but maybe not done), one of
  txid > G is discarded (that checkpoint never completed).

Keys and values are bytes here; :class:`~squall.api.state.key_value_state.KeyValueState`
serializes them with the topology's serializer. Every method may raise
:class:`StateProviderError`, whose message names the provider and location.

Methods are called from one thread at a time per object; a TaskStore is used by the thread
running its task. They may block (I/O) but should return within seconds.
"""

from __future__ import annotations

import json
import threading
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from squall.api.config import Config


class StateProviderError(RuntimeError):
    """A state provider cannot be reached or used; the message names the provider, its
    location and (where it applies) the component and task."""


class TaskStore(ABC):
    """The durable state of one stateful task (component, task id)."""

    @abstractmethod
    def load(self, committed: int | None) -> dict[bytes, bytes]:
        """Recover to the topology's committed txid ``committed`` (None: nothing was ever
        committed, the state is empty) and return the whole committed content: a prepared
        delta of a txid up to ``committed`` is folded into the base. One of a later txid is
        kept as it is, unfolded: that checkpoint may still be committed (a restarted task
        loads while the others finish it), and then a later load or :meth:`commit` folds it;
        if it is not, the next :meth:`prepare` replaces it."""

    @abstractmethod
    def read(self, committed: int | None) -> dict[bytes, bytes]:
        """What :meth:`load` would return, changing nothing: for reading a running topology's
        committed state from outside (tests, tools)."""

    @abstractmethod
    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes]) -> None:
        """Durably record the delta of checkpoint ``txid`` (relative to the base), replacing
        any earlier prepared delta. The base is unchanged."""

    @abstractmethod
    def commit(self, txid: int) -> None:
        """Fold the prepared delta of ``txid`` into the base (atomically); nothing to do if it
        is already folded or there is none of that txid."""

    def close(self) -> None:
        """Release what the store holds (connections, files)."""


@dataclass(frozen=True)
class Commit:
    """A location's last commit: its checkpoint (txid) and when it was committed (epoch
    seconds; None for a commit recorded before Squall kept the time)."""

    txid: int
    at: float | None


class StateProvider(ABC):
    """The stores of one topology's tasks, plus the topology's committed txid."""

    #: short name for messages and config ("memory", "sqlite", "redis")
    name = "?"

    def __init__(self, topology_name: str, config: dict[str, Any]) -> None:
        self.topology_name = topology_name
        self.config = config

    @property
    def location(self) -> str:
        """Where the state lives, for messages (a path, a Redis address)."""
        return self.name

    @abstractmethod
    def check(self, layout: dict[str, int]) -> None:
        """Called at submit, before any worker starts: raise :class:`StateProviderError`
        within seconds if the store cannot be reached, or if its location holds the state of
        another topology (another name, or other stateful components/task counts than
        ``layout``: component id -> number of tasks). A fresh location is claimed for this
        topology (name and layout recorded)."""

    @abstractmethod
    def task_store(self, component: str, task: int) -> TaskStore:
        """The store of one task; made on the worker running it."""

    @abstractmethod
    def committed(self) -> int | None:
        """The topology's committed txid (None before the first commit). A durable provider
        raises :class:`StateProviderError` if :meth:`check` did not claim the location for this
        topology: a worker that sees another location than the submitter did (a path that is
        not shared, say) must not start from an empty state."""

    @abstractmethod
    def set_committed(self, txid: int) -> None:
        """Durably record ``txid`` as committed, with the time: the commit point of a checkpoint."""

    def last_commit(self) -> Commit | None:
        """What the topology will resume from, read before :meth:`check` (which it does not do):
        the last commit at the location, or None if there is none (a new location, or one never
        committed to). Raises :class:`StateProviderError` if the location cannot be reached or
        holds another topology's state. This default knows no time: override it."""
        try:
            txid = self.committed()
        except StateProviderError:  # not claimed yet: nothing committed (another's: check says so)
            return None
        return None if txid is None else Commit(txid, None)

    def drop(self) -> None:
        """Forget the topology's state at the location (``squall run --fresh``), before
        :meth:`check`; nothing if there is none. Raises :class:`StateProviderError` if the
        location holds another topology's state, or if the provider cannot drop (this default)."""
        raise StateProviderError(f"state provider {self.name!r} at {self.location} cannot drop state: "
                                 "remove it by hand, or use another location")

    def close(self) -> None:
        """Release what the provider holds."""


# -- in memory ------------------------------------------------------------------------

class _MemoryLocation:
    """One topology's state in this process: survives a topology's restart, not the process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.layout: dict[str, int] | None = None
        self.committed: Commit | None = None
        # (component, task) -> [base txid, base, prepared txid, puts, deletes]
        self.tasks: dict[tuple[str, int], list[Any]] = {}


_MEMORY: dict[str, _MemoryLocation] = {}
_MEMORY_LOCK = threading.Lock()


class _MemoryTaskStore(TaskStore):
    def __init__(self, location: _MemoryLocation, key: tuple[str, int]) -> None:
        self._location = location
        with location.lock:
            self._record = location.tasks.setdefault(key, [None, {}, None, {}, []])

    def load(self, committed: int | None) -> dict[bytes, bytes]:
        with self._location.lock:
            record = self._record
            if prepared_is_committed(record[2], committed):
                self._fold(record[2])
            return dict(record[1])

    def read(self, committed: int | None) -> dict[bytes, bytes]:
        with self._location.lock:
            _, base, prepared, puts, deletes = self._record
            content = dict(base)
            if prepared_is_committed(prepared, committed):
                content.update(puts)
                for key in deletes:
                    content.pop(key, None)
            return content

    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes]) -> None:
        with self._location.lock:
            self._record[2:] = [txid, dict(puts), list(deletes)]

    def commit(self, txid: int) -> None:
        with self._location.lock:
            if self._record[2] == txid:
                self._fold(txid)

    def _fold(self, txid: int) -> None:
        record = self._record
        base = record[1]
        base.update(record[3])
        for key in record[4]:
            base.pop(key, None)
        record[0], record[2], record[3], record[4] = txid, None, {}, []


def prepared_is_committed(prepared: int | None, committed: int | None) -> bool:
    """Whether a prepared delta of txid ``prepared`` belongs to the committed state."""
    return prepared is not None and committed is not None and prepared <= committed


class InMemoryStateProvider(StateProvider):
    """State in the memory of the process (Storm's ``InMemoryKeyValueStateProvider``): for tests
    and in-process topologies. It survives resubmitting a topology in the same process, but
    not the process: a worker process's state dies with it."""

    name = "memory"

    def _location(self) -> _MemoryLocation:
        with _MEMORY_LOCK:
            return _MEMORY.setdefault(self.topology_name, _MemoryLocation())

    @property
    def location(self) -> str:
        return f"memory of process (topology {self.topology_name!r})"

    def check(self, layout: dict[str, int]) -> None:
        location = self._location()
        with location.lock:
            if location.layout is None:
                location.layout = dict(layout)
            elif location.layout != layout:
                raise StateProviderError(layout_mismatch(self, location.layout, layout))

    def task_store(self, component: str, task: int) -> TaskStore:
        return _MemoryTaskStore(self._location(), (component, task))

    def committed(self) -> int | None:
        commit = self._location().committed
        return None if commit is None else commit.txid

    def set_committed(self, txid: int) -> None:
        location = self._location()
        with location.lock:
            location.committed = Commit(txid, time.time())

    def last_commit(self) -> Commit | None:
        with _MEMORY_LOCK:
            location = _MEMORY.get(self.topology_name)
        return None if location is None else location.committed

    def drop(self) -> None:
        with _MEMORY_LOCK:
            _MEMORY.pop(self.topology_name, None)


def name_mismatch(provider: StateProvider, found: str | None) -> str:
    """The message for a location not claimed for this topology (``found``: the topology it
    was claimed for, None if for none)."""
    where = f"state provider {provider.name!r} at {provider.location}"
    if found is None:
        return (f"{where}: the location is not claimed for topology {provider.topology_name!r}; "
                "StateProvider.check claims it at submit, before any worker starts")
    return (f"{where}: it holds the state of topology {found!r}, not of {provider.topology_name!r}; "
            "use another state location for this topology")


def verify_claim(provider: StateProvider, found_name: str | None, found_layout: dict[str, int],
                 layout: dict[str, int]) -> None:
    """For :meth:`StateProvider.check` of a location found claimed for topology ``found_name``
    with ``found_layout``: raise :class:`StateProviderError` unless both are this topology's."""
    if found_name != provider.topology_name:
        raise StateProviderError(name_mismatch(provider, found_name))
    if found_layout != layout:
        raise StateProviderError(layout_mismatch(provider, found_layout, layout))


def layout_mismatch(provider: StateProvider, found: dict[str, int], layout: dict[str, int]) -> str:
    """The message for a location that holds the state of other stateful components."""
    return (f"state provider {provider.name!r} at {provider.location}: it holds the state of topology "
            f"{provider.topology_name!r} with stateful components (tasks) {found}, but this topology has {layout}; "
            "use another state location, or the same components and task counts")


# -- choosing one -------------------------------------------------------------------------

# provider names, and Storm's class names for them, -> "module:class"
_PROVIDERS = {
    "memory": "squall.api.state.provider:InMemoryStateProvider",
    "org.apache.storm.state.InMemoryKeyValueStateProvider": "squall.api.state.provider:InMemoryStateProvider",
    "sqlite": "squall.runtime.state.sqlite_provider:SqliteStateProvider",
    "redis": "squall.runtime.state.redis_provider:RedisStateProvider",
    "org.apache.storm.redis.state.RedisKeyValueStateProvider": "squall.runtime.state.redis_provider:RedisStateProvider",
}


def provider_config(conf: dict[str, Any]) -> dict[str, Any]:
    """``topology.state.provider.config`` as a dict (Storm gives it as a JSON string)."""
    raw = conf.get(Config.TOPOLOGY_STATE_PROVIDER_CONFIG)
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            raise StateProviderError(f"'topology.state.provider.config' is not valid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise StateProviderError(f"'topology.state.provider.config' must be a dict (or a JSON object), got {raw!r}")
    return raw


def provider_for(conf: dict[str, Any], topology_name: str) -> StateProvider:
    """The provider ``conf`` asks for (a name above, a Storm class name, or "module:Class"
    of a :class:`StateProvider` subclass)."""
    import importlib

    name = conf.get(Config.TOPOLOGY_STATE_PROVIDER) or "memory"
    target = _PROVIDERS.get(name, name)
    module_name, _, class_name = target.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError, ValueError) as e:
        raise StateProviderError(
            f"'topology.state.provider' = {name!r}: no such state provider ({e}); use one of "
            f"'memory', 'sqlite', 'redis' or 'module:Class'"
        ) from None
    if not (isinstance(cls, type) and issubclass(cls, StateProvider)):
        raise StateProviderError(f"'topology.state.provider' = {name!r} is not a squall.api.state.StateProvider")
    return cls(topology_name, provider_config(conf))
