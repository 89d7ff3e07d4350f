"""``squall state NAME``: what a stateful topology committed, read from its state provider with
the settings its run recorded (:func:`~squall.ops.command.state.recorded_settings`) or a
topology file's (:func:`~squall.ops.command.state.settings_of`).

It reads, it never writes: the last commit (checkpoint and time) and, at that checkpoint, the
number of keys of each task of each stateful component; or one component's keys and values,
task by task; or one key's value in each task holding it. A running topology may commit again
while its tasks are read: each task is read at the checkpoint the report names, or at a later
one it has already folded in.

Text is for people (numbers with thousands separators, keys as JSON: ``"the"``, ``5``,
``["a", 1]``); ``--json`` is for scripts, as described in :func:`state_report`."""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import msgpack

from squall.api.state.provider import Commit, InMemoryStateProvider, StateProvider, StateProviderError, provider_for
from squall.ops.command import UsageError
from squall.ops.command.state import StateSettings, when_committed
from squall.runtime.serialization import Serializer
from squall.utils.time import format_duration


def parse_key(text: str) -> Any:
    """``--key``'s argument: JSON when it parses (``5``, ``"5"``, ``["count_by_key#1", "a"]``), else
    the text itself (``the``). A JSON array is a tuple, as a state's keys are (they are hashable)."""
    try:
        return _tuples(json.loads(text))
    except ValueError:
        return text


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_tuples(v) for v in value)
    return value


def state_report(settings: StateSettings, component: str | None = None, key: str | None = None,
                 as_json: bool = False) -> str:
    """What topology ``settings.name`` committed, as text (or JSON with ``as_json``):

    * no ``component``: the provider and location, the last commit, the key groups, and each
      stateful component's tasks with their numbers of keys. JSON: ``{"topology", "provider",
      "location", "txid", "committed_at" (epoch seconds or null), "key_groups" (null: none),
      "components": {COMPONENT:
      {"keys": N, "tasks": [{"task": T, "keys": N}, ...]}}}``;
    * ``component``: its keys and values, task by task. JSON: the same head, ``"component"``,
      and ``"tasks": [{"task", "keys", "entries": [{"key", "value"}, ...]}]`` (jq's
      ``from_entries`` takes the entries as they are);
    * ``component`` and ``key`` (read by :func:`parse_key`): the key's value in each task
      holding it. JSON: the head, ``"component"``, ``"key"``, ``"tasks": [{"task", "value"}]``.

    In JSON, tuples and sets are lists, a dict with keys other than strings is a list of
    ``{"key", "value"}``, and what JSON cannot hold (bytes, a registered type's value, which
    only ``--topology FILE`` decodes) is a string describing it. A value that cannot be decoded
    is null, and a line on stderr says why.

    Raises :class:`UsageError` (one line) for ``key`` without ``component``, a component that is
    not one of the stateful ones, state kept in memory (no other process can read it), nothing
    committed yet, a key no task holds, and a provider that cannot be reached or holds another
    topology's state."""
    if key is not None and component is None:
        raise UsageError("--key needs --component: the key of which component's state?")
    if component is not None and component not in settings.tasks:
        raise UsageError(f"topology {settings.name!r} has no stateful component {component!r} (its stateful "
                         f"components: {', '.join(settings.tasks)})")
    try:
        provider = provider_for(settings.provider_conf(), settings.name)
    except StateProviderError as e:
        raise UsageError(str(e)) from None
    try:
        if isinstance(provider, InMemoryStateProvider):
            raise UsageError(f"topology {settings.name!r} keeps its state in the memory of its process "
                             f"(topology.state.provider {settings.provider!r}): no other process can read it")
        commit = provider.last_commit()
        if commit is None:
            raise UsageError(f"topology {settings.name!r} has committed nothing yet to state provider "
                             f"{provider.name!r} at {provider.location}: its first checkpoint commits once it "
                             f"runs (every topology.state.checkpoint.interval.ms)")
        head = _head(settings.name, provider, commit, as_json)
        if component is None:
            keys = {c: {t: len(_read(provider, c, t, i, commit)) for i, t in enumerate(tasks)}
                    for c, tasks in settings.tasks.items()}
            return _overview(head, keys, as_json)
        serializer = settings.serializer()
        raw = {task: _read(provider, component, task, i, commit) for i, task in enumerate(settings.tasks[component])}
        if key is None:
            report = _values(head, component, {task: _decoded(serializer, data) for task, data in raw.items()},
                             as_json)
        else:
            report = _one_key(head, component, key, commit, raw, serializer, settings.name, as_json)
        if serializer.decode_errors:
            print(f"squall: {len(serializer.decode_errors):,} values could not be decoded (shown as null): "
                  f"{serializer.decode_errors[0]}", file=sys.stderr)
        return report
    except StateProviderError as e:
        raise UsageError(str(e)) from None
    finally:
        provider.close()


def _read(provider: StateProvider, component: str, task: int, index: int, commit: Commit) -> dict[bytes, bytes]:
    """The committed content of one task (``index`` its place in its component), as the
    provider stores it (serialized keys and values)."""
    store = provider.task_store(component, task, index)
    try:
        return store.read(commit.txid)
    finally:
        store.close()


def _decoded(serializer: Serializer, data: dict[bytes, bytes]) -> list[tuple[Any, Any]]:
    """The (key, value) pairs of a task's content, sorted by key: numbers by value, then the
    others by their JSON (keys of mixed types do not compare). Pairs, not a dict: a key decoded
    as a list would not hash."""
    pairs = [(serializer.loads(k), serializer.loads(v)) for k, v in data.items()]
    return sorted(pairs, key=lambda pair: _order(pair[0]))


def _order(key: Any) -> tuple[int, Any]:
    if isinstance(key, (int, float)) and not isinstance(key, bool) and not (isinstance(key, float) and math.isnan(key)):
        return 0, key
    return 1, _shown(key)


# -- the report, as text or JSON --------------------------------------------------------------


def _head(name: str, provider: StateProvider, commit: Commit, as_json: bool) -> Any:
    """What every report starts with: the topology, where its state is, its last commit, and
    the key groups its stateful bolts keep their keys in."""
    groups = provider.key_groups()
    if as_json:
        return {"topology": name, "provider": provider.name, "location": provider.location, "txid": commit.txid,
                "committed_at": commit.at, "key_groups": groups}
    ago = "" if commit.at is None else f", {format_duration(max(time.time() - commit.at, 0))} ago"
    return [f"topology {name!r}: state provider {provider.name!r} at {provider.location}",
            f"last commit: {when_committed(commit)}{ago}",
            f"key groups: {groups} (task i of a stateful bolt's n holds groups i*{groups}//n to "
            f"(i+1)*{groups}//n - 1)" if groups is not None else
            "key groups: none (a key goes to its hash modulo the task count: task counts are fixed)"]


def _overview(head: Any, keys: dict[str, dict[int, int]], as_json: bool) -> str:
    if as_json:
        components = {c: {"keys": sum(tasks.values()), "tasks": [{"task": t, "keys": n} for t, n in tasks.items()]}
                      for c, tasks in keys.items()}
        return json.dumps({**head, "components": components})
    rows = [("component", "tasks", "keys", "keys by task")]
    for component, tasks in keys.items():
        rows.append((component, f"{len(tasks):,}", f"{sum(tasks.values()):,}",
                     ", ".join(f"{t}: {n:,}" for t, n in tasks.items())))
    return "\n".join([*head, "", *_table(rows, right={1, 2})])


def _values(head: Any, component: str, contents: dict[int, list[tuple[Any, Any]]], as_json: bool) -> str:
    if as_json:
        tasks = [{"task": task, "keys": len(pairs),
                  "entries": [{"key": _jsonable(k), "value": _jsonable(v)} for k, v in pairs]}
                 for task, pairs in contents.items()]
        return json.dumps({**head, "component": component, "tasks": tasks})
    lines = list(head)
    for task, pairs in contents.items():
        lines.append(f"component {component!r}, task {task}: {_count(len(pairs), 'key')}")
        lines.extend(f"  {_shown(k)}: {_human(v)}" for k, v in pairs)
    return "\n".join(lines)


def _one_key(head: Any, component: str, text: str, commit: Commit, raw: dict[int, dict[bytes, bytes]],
             serializer: Serializer, name: str, as_json: bool) -> str:
    """The value of key ``text`` (:func:`parse_key`) in each task holding it. The key is found
    by its serialized form, as the task's state stores it: ``5`` is not ``5.0`` nor ``"5"``."""
    key = parse_key(text)
    packed = serializer.dumps(key)
    found = [(task, serializer.loads(data[packed])) for task, data in raw.items() if packed in data]
    if not found:
        hint = "" if isinstance(key, str) else f" (--key is read as JSON: the string is --key '{json.dumps(text)}')"
        raise UsageError(f"component {component!r} of topology {name!r} has no key {_shown(key)} in the state "
                         f"committed at checkpoint {commit.txid:,}{hint}")
    if as_json:
        return json.dumps({**head, "component": component, "key": _jsonable(key),
                           "tasks": [{"task": task, "value": _jsonable(value)} for task, value in found]})
    return "\n".join([*head, f"component {component!r}, key {_shown(key)}:",
                      *(f"  task {task}: {_human(value)}" for task, value in found)])


def _jsonable(value: Any) -> Any:
    """``value`` as JSON holds it (see :func:`state_report`)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)  # NaN and infinities are not JSON
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {k: _jsonable(v) for k, v in value.items()}
        return [{"key": _jsonable(k), "value": _jsonable(v)} for k, v in value.items()]
    if isinstance(value, msgpack.ExtType):  # a registered type's, without its serializer
        return f"<a value of a registered type, {len(value.data):,} bytes: --topology FILE decodes it>"
    return repr(value)  # bytes, and what a registered serializer rebuilt


def _shown(value: Any) -> str:
    """A key as text: its JSON, which ``--key`` takes back."""
    return json.dumps(_jsonable(value), ensure_ascii=False, sort_keys=True)


def _human(value: Any) -> str:
    """A value as text: an integer with thousands separators, anything else as JSON."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return _shown(value)


def _count(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"


def _table(rows: list[tuple[str, ...]], right: set[int]) -> list[str]:
    """``rows`` (the first is the header) in aligned columns, those of ``right`` aligned right."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
            .rstrip() for row in rows]
