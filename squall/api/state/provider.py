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

A provider that keeps key groups (memory, sqlite; see :mod:`squall.api.state.key_groups`)
stores each put with its group, keeps a task's state by the task's *index* in its component
(not its topology-wide task id, which other components shift), and lets a stateful bolt's task
count change between two submits: :meth:`StateProvider.claim` moves each group's entries to
the task that owns it under the new count. One without them (redis, a user's provider) keeps
state by task id and refuses any change of layout.

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

import msgpack

from squall.api.config import Config
from squall.api.state.key_groups import DEFAULT_KEY_GROUPS, owner


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
    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes],
                groups: dict[bytes, int] | None = None) -> None:
        """Durably record the delta of checkpoint ``txid`` (relative to the base), replacing
        any earlier prepared delta. The base is unchanged. ``groups``: the key group of each
        put that has one (kept by a provider with key groups, ignored by the others)."""

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
        another topology (another name), or a layout ``layout`` (component id -> number of
        tasks) cannot take (see :meth:`claim`; without key groups, any other). A fresh location
        is claimed for this topology (name and layout recorded)."""

    def claim(self, layout: dict[str, int], key_groups: int | None, allow_dropped: bool = False) -> int | None:
        """Called at submit, before any worker starts, in place of :meth:`check`: the number of
        key groups the stateful bolts' inputs are routed by (None: none, a key goes to its hash
        modulo the task count). A provider with key groups records ``key_groups`` when it claims
        a location, refuses another later, moves the state of a component whose task count
        changed, starts a component new to the location empty, and refuses the state of one the
        topology no longer has unless ``allow_dropped`` (then it is deleted; see
        :func:`check_rescale`); this default (no key groups) checks the layout."""
        self.check(layout)
        return None

    @abstractmethod
    def task_store(self, component: str, task: int, index: int) -> TaskStore:
        """The store of one task (``task`` its id, ``index`` its place among its component's
        tasks); made on the worker running it."""

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

    def key_groups(self) -> int | None:
        """The key groups the location was claimed with (see :meth:`claim`), read without
        claiming it: None for none (this default), or a location not claimed yet."""
        return None

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
        self.key_groups: int | None = None
        self.committed: Commit | None = None
        # (component, task index) -> its record (see _MemoryTaskStore)
        self.tasks: dict[tuple[str, int], list[Any]] = {}


_MEMORY: dict[str, _MemoryLocation] = {}
_MEMORY_LOCK = threading.Lock()


class _MemoryTaskStore(TaskStore):
    """A task's record: [base txid, base, base's key groups, prepared txid, puts, their groups,
    deletes]."""

    def __init__(self, location: _MemoryLocation, key: tuple[str, int]) -> None:
        self._location = location
        with location.lock:
            self._record = location.tasks.setdefault(key, _empty_record())

    def load(self, committed: int | None) -> dict[bytes, bytes]:
        with self._location.lock:
            record = self._record
            if prepared_is_committed(record[3], committed):
                _fold(record, record[3])
            return dict(record[1])

    def read(self, committed: int | None) -> dict[bytes, bytes]:
        with self._location.lock:
            return {key: value for key, (value, _) in _entries(self._record, committed).items()}

    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes],
                groups: dict[bytes, int] | None = None) -> None:
        with self._location.lock:
            self._record[3:] = [txid, dict(puts), dict(groups or {}), list(deletes)]

    def commit(self, txid: int) -> None:
        with self._location.lock:
            if self._record[3] == txid:
                _fold(self._record, txid)


def _empty_record() -> list[Any]:
    return [None, {}, {}, None, {}, {}, []]


def _fold(record: list[Any], txid: int) -> None:
    base, base_groups = record[1], record[2]
    base.update(record[4])
    for key in record[4]:
        base_groups.pop(key, None)
    base_groups.update(record[5])
    for key in record[6]:
        base.pop(key, None)
        base_groups.pop(key, None)
    record[0], record[3:] = txid, [None, {}, {}, []]


def _entries(record: list[Any], committed: int | None) -> dict[bytes, tuple[bytes, int | None]]:
    """A task's committed content, each value with its key group (None: none)."""
    base, groups = record[1], record[2]
    content = {key: (value, groups.get(key)) for key, value in base.items()}
    if prepared_is_committed(record[3], committed):
        content.update((key, (value, record[5].get(key))) for key, value in record[4].items())
        for key in record[6]:
            content.pop(key, None)
    return content


def prepared_is_committed(prepared: int | None, committed: int | None) -> bool:
    """Whether a prepared delta of txid ``prepared`` belongs to the committed state."""
    return prepared is not None and committed is not None and prepared <= committed


def regroup(provider: StateProvider, component: str, contents: list[dict[bytes, tuple[bytes, int | None]]], tasks: int,
            key_groups: int) -> list[dict[bytes, tuple[bytes, int]]]:
    """The committed contents of ``component``'s tasks (key -> (value, key group)) dealt to
    ``tasks`` tasks by the owners of their groups; :class:`StateProviderError` naming a key
    that has no group, whose task cannot be known."""
    dealt: list[dict[bytes, tuple[bytes, int]]] = [{} for _ in range(tasks)]
    held: dict[bytes, int] = {}  # key -> the old task that held it
    for index, content in enumerate(contents):
        for key, (value, group) in content.items():
            if key in held:  # a task's own entry (a running total), not a key's: one would be lost
                raise StateProviderError(
                    f"{_where(provider)}: component {component!r} cannot change its task count ({len(contents)} -> "
                    f"{tasks}): its tasks {held[key]} and {index} (by index) both hold state key {_shown(key)}, "
                    "so it is not kept by the key of an input, and dealing it anew would lose one; submit it with "
                    f"{len(contents)} task(s)")
            held[key] = index
            if group is None:
                raise StateProviderError(
                    f"{_where(provider)}: component {component!r} cannot change its task count ({len(contents)} -> "
                    f"{tasks}): its state key {_shown(key)} was not put while executing an input of a fields "
                    "grouping (a spout's position, a sink's pending epochs, a put outside execute), so no key group "
                    f"says which task keeps it; submit it with {len(contents)} task(s)")
            dealt[owner(group, tasks, key_groups)][key] = (value, group)
    return dealt


def _shown(key: bytes) -> str:
    """A stored key as a message shows it: decoded, when it is msgpack (the serializer's)."""
    try:
        return repr(msgpack.unpackb(key))
    except Exception:  # noqa: BLE001 - another serializer's bytes: shown as they are
        return repr(key)


def check_key_groups(provider: StateProvider, claimed: int | None, requested: int | None) -> None:
    """Refuse a submit whose ``topology.state.key.groups`` differs from the location's."""
    if requested != claimed:
        raise StateProviderError(
            f"{_where(provider)}: its stateful bolts keep {claimed} key groups, chosen when the location was "
            f"claimed; this topology asks for {requested} (topology.state.key.groups): set it to {claimed}, or use "
            "another state location")


def check_rescale(provider: StateProvider, found: dict[str, int], layout: dict[str, int],
                  key_groups: int | None, allow_dropped: bool = False) -> tuple[list[str], list[str]]:
    """The components whose task count changes from ``found`` to ``layout``, and those whose
    state is dropped (in ``found`` only, with ``allow_dropped``). Refused in one line: without
    key groups (a location by task id), any change; a component the topology no longer has
    (named) unless ``allow_dropped``; a task count beyond the key groups. A component in
    ``layout`` only is new: it starts empty."""
    where = _where(provider)
    dropped = sorted(set(found) - set(layout))
    if key_groups is None and set(found) != set(layout):
        raise StateProviderError(layout_mismatch(provider, found, layout))
    if dropped and not allow_dropped:
        held = ", ".join(f"{c!r} ({found[c]} task(s))" for c in dropped)
        raise StateProviderError(
            f"{where}: it holds the state of {held}, which this topology no longer has: keep the component's id "
            "(name a Streams API operation with .name()), or run it with --allow-dropped-state "
            "(topology.state.allow.dropped) to delete that state")
    changed = sorted(c for c in layout if c in found and layout[c] != found[c])
    for component in changed:
        if key_groups is None:
            raise StateProviderError(
                f"{where}: component {component!r} cannot change its task count ({found[component]} -> "
                f"{layout[component]}): this location keeps no key groups (claimed before them); submit it with "
                f"{found[component]} task(s), or use another state location")
        if layout[component] > key_groups:
            raise StateProviderError(
                f"{where}: component {component!r} cannot have {layout[component]} tasks: its state has "
                f"{key_groups} key groups (topology.state.key.groups), each kept by one task")
    return changed, dropped


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
        self.claim(layout, DEFAULT_KEY_GROUPS)

    def claim(self, layout: dict[str, int], key_groups: int | None, allow_dropped: bool = False) -> int | None:
        location = self._location()
        with location.lock:
            if location.layout is None:
                location.layout, location.key_groups = dict(layout), key_groups
                return key_groups
            check_key_groups(self, location.key_groups, key_groups)
            committed = None if location.committed is None else location.committed.txid
            changed, dropped = check_rescale(self, location.layout, layout, key_groups, allow_dropped)
            for component in dropped:
                del location.layout[component]
            for key in [key for key in location.tasks if key[0] not in location.layout]:
                del location.tasks[key]  # a dropped component's state
            for component in layout.keys() - location.layout.keys():  # new to the location: empty
                location.layout[component] = layout[component]
            for component in changed:
                assert key_groups is not None  # check_rescale refuses a change without
                contents = [_entries(location.tasks.get((component, i), _empty_record()), committed)
                            for i in range(location.layout[component])]
                for index, content in enumerate(regroup(self, component, contents, layout[component], key_groups)):
                    location.tasks[(component, index)] = [committed, {k: v for k, (v, _) in content.items()},
                                                          {k: g for k, (_, g) in content.items()}, None, {}, {}, []]
                for index in range(layout[component], location.layout[component]):
                    location.tasks.pop((component, index), None)
                location.layout[component] = layout[component]
            return key_groups

    def task_store(self, component: str, task: int, index: int) -> TaskStore:
        return _MemoryTaskStore(self._location(), (component, index))

    def committed(self) -> int | None:
        commit = self._location().committed
        return None if commit is None else commit.txid

    def set_committed(self, txid: int) -> None:
        location = self._location()
        with location.lock:
            location.committed = Commit(txid, time.time())

    def key_groups(self) -> int | None:
        return self._location().key_groups

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
    where = _where(provider)
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
    return (f"{_where(provider)}: it holds the state of topology {provider.topology_name!r} with stateful components "
            f"(tasks) {found}, but this topology has {layout}; use another state location, or the same components")


def _where(provider: StateProvider) -> str:
    return f"state provider {provider.name!r} at {provider.location}"


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
