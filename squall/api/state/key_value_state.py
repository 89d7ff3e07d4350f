"""``KeyValueState``: the state a stateful component reads and writes (Storm's ``KeyValueState``).

The state is a dict in the task's memory; every put and delete also marks its key. A
checkpoint writes only the marked keys (the delta since the last checkpoint) to the task's
:class:`~squall.api.state.provider.TaskStore`, so a checkpoint costs what changed, not what is held.
A bolt fed by a fields grouping keeps each key under the key group of the input it was put
while executing (see :mod:`squall.api.state.key_groups`), so that its state can follow its keys
to another number of tasks; what is put outside such an input (a spout's position, a sink's
pending epochs, a put in a checkpoint hook) has no group, and ties the component to its task count.
Keys and values are serialized with the topology's serializer (msgpack's types, registered
serializers, and pickles only where the topology allows them), so anything a tuple may carry
can be stored; keys must also be hashable.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from squall.api.errors import SerializationError
from squall.api.state.provider import TaskStore


class ValueSerializer(Protocol):
    """What the state needs of the topology's serializer (:class:`squall.runtime.serialization.Serializer`):
    bytes for a key or value and back; :class:`SerializationError` for what it cannot encode."""

    def dumps(self, obj: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class KeyedInputs(Protocol):
    """What a keyed state needs of its executor: ``executor.current_input``, the input being
    executed (None outside ``execute``), and the key group of an input (None: not from a
    fields grouping)."""

    executor: Any

    def group_of(self, tup: Any) -> int | None: ...


_MISSING = object()


class KeyValueState:
    """A task's key-value state. Use it from the task's own methods only (the executor's
    thread); it is not thread-safe.

    Changes become durable at the next checkpoint; on a rollback (a failed checkpoint, a
    worker's crash) the state returns to the last committed checkpoint and the component's
    ``init_state`` is called again.
    """

    def __init__(self, store: TaskStore, serializer: ValueSerializer, where: str,
                 keyed: KeyedInputs | None = None) -> None:
        self._store = store
        self._serializer = serializer
        self._where = where  # "component 'count' task 3", for messages
        self._data: dict[Any, Any] = {}
        self._dirty: set[Any] = set()
        self._keyed = keyed  # None: no key groups
        self._executor = None if keyed is None else keyed.executor  # read at each put
        self._inputs: dict[Any, Any] = {}  # key -> the input it was last put under, until the checkpoint

    # -- the component's API -------------------------------------------------------------

    def put(self, key: Any, value: Any) -> None:
        self._data[key] = value
        self._dirty.add(key)
        if self._executor is not None:
            self._inputs[key] = self._executor.current_input

    def get(self, key: Any, default: Any = None) -> Any:
        return self._data.get(key, default)

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its value (None if it had none)."""
        self._dirty.add(key)
        return self._data.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``(key, value)`` pairs, as Storm's state iterates over entries."""
        return iter(self._data.items())

    def items(self) -> Any:
        return self._data.items()

    def keys(self) -> Any:
        return self._data.keys()

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: Any) -> bool:
        return key in self._data

    def __repr__(self) -> str:
        return f"KeyValueState({self._where}, {len(self._data)} keys)"

    # -- the checkpoint's (the executor's) -------------------------------------------------

    def prepare(self, txid: int) -> None:
        """Write the delta since the last checkpoint as checkpoint ``txid``'s. Raises
        :class:`SerializationError` naming the task and key of a value that cannot be
        stored (nothing is written then)."""
        dumps, data, keyed, inputs = self._serializer.dumps, self._data, self._keyed, self._inputs
        puts: dict[bytes, bytes] = {}
        deletes: list[bytes] = []
        groups: dict[bytes, int] = {}
        for key in self._dirty:
            try:
                packed_key = dumps(key)
                value = data.get(key, _MISSING)
                if value is _MISSING:
                    deletes.append(packed_key)
                else:
                    puts[packed_key] = dumps(value)
                    if keyed is not None and (group := keyed.group_of(inputs.get(key))) is not None:
                        groups[packed_key] = group
            except SerializationError as e:
                raise SerializationError(f"{self._where}: the state of key {key!r} cannot be stored: {e}") from e
        self._store.prepare(txid, puts, deletes, groups)
        self._dirty.clear()
        inputs.clear()

    def commit(self, txid: int) -> None:
        self._store.commit(txid)

    def load(self, committed: int | None) -> None:
        """Replace the content with the committed state of txid ``committed`` (see
        :meth:`TaskStore.load`)."""
        loads = self._serializer.loads
        self._data = {_hashable(loads(k)): loads(v) for k, v in self._store.load(committed).items()}
        self._dirty.clear()
        self._inputs.clear()

    def close(self) -> None:
        self._store.close()


def _hashable(key: Any) -> Any:
    # msgpack has no tuple of its own; the serializer keeps tuples, but a list key stored by
    # another client would not hash
    return tuple(key) if key.__class__ is list else key
