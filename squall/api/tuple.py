"""Tuples, fields and values: the data model of streams (Storm's ``Tuple``, ``Fields``, ``Values``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from squall.api.system_ids import SYSTEM_COMPONENT, SYSTEM_STREAM_FIELDS, TICK_STREAM


class Fields(Sequence[str]):
    """An ordered list of unique field names, with O(1) name-to-index lookup.

    ``Fields("a", "b")`` and ``Fields(["a", "b"])`` are the same.
    """

    __slots__ = ("_names", "_index")

    def __init__(self, *names: str | Iterable[str]) -> None:
        if len(names) == 1 and not isinstance(names[0], str):
            names = tuple(names[0])  # type: ignore[arg-type]
        for name in names:
            if not isinstance(name, str) or not name:
                raise ValueError(f"field names must be non-empty strings, got {name!r}")
        self._names: tuple[str, ...] = tuple(names)  # type: ignore[arg-type]
        self._index = {name: i for i, name in enumerate(self._names)}
        if len(self._index) != len(self._names):
            dupes = sorted({n for n in self._names if self._names.count(n) > 1})
            raise ValueError(f"duplicate field names {dupes} in {list(self._names)}")

    @classmethod
    def of(cls, fields: Fields | Iterable[str] | str) -> Fields:
        """Accept ``Fields``, a list of names or a single name."""
        if isinstance(fields, Fields):
            return fields
        if isinstance(fields, str):
            return cls(fields)
        return cls(list(fields))

    def field_index(self, name: str) -> int:
        """Position of ``name``; ``KeyError`` naming the field and the known ones otherwise."""
        try:
            return self._index[name]
        except KeyError:
            raise KeyError(f"unknown field {name!r}; fields are {list(self._names)}") from None

    def contains(self, name: str) -> bool:
        return name in self._index

    def select(self, selector: Fields, values: Sequence[Any]) -> list[Any]:
        """The values of ``selector``'s fields, taken from ``values`` laid out as these fields."""
        return [values[self.field_index(name)] for name in selector]

    def to_list(self) -> list[str]:
        return list(self._names)

    def __getitem__(self, i):  # type: ignore[override]
        return self._names[i]

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Fields):
            return self._names == other._names
        if isinstance(other, (list, tuple)):
            return list(self._names) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields({', '.join(map(repr, self._names))})"

    def __reduce__(self):
        return (Fields, self._names)


class Values(list):
    """A list of values to emit: ``Values("a", 1)`` is ``["a", 1]``."""

    def __init__(self, *values: Any) -> None:
        super().__init__(values)


class Tuple:
    """A tuple received by a bolt: a list of values named by the fields of its stream.

    Besides the values, a tuple knows where it came from (``source_component``,
    ``source_stream_id``, ``source_task``) and carries the acking state of the trees it
    belongs to. Tuples are read-only for user code; the engine reads and writes these slots:

    * ``stream_source``: what every tuple of its (component, stream) shares (names, fields);
    * the trees it belongs to, and its edge id in each (Storm's ``MessageId.anchorsToIds``):
      ``tracked`` says whether it is in any; in one (nearly every tracked tuple), ``root`` and
      ``edge`` are its tree's id and its edge id, as 64-bit C integers compiled; in several,
      ``trees`` maps each root id to its edge id (None otherwise). :attr:`tree_ids` reads them
      as one map whatever the case;
    * ``ack_val``: the XOR of the edge ids of the tuples anchored to this one so far,
      reported with its own edge when it is acked.
    """

    __slots__ = ("values", "stream_source", "source_task", "tracked", "root", "edge", "trees", "ack_val")

    def __init__(
        self,
        values: list[Any],
        source: StreamSource,
        source_task: int,
        tree_ids: dict[int, int] | None = None,
    ) -> None:
        self.values = values
        self.stream_source = source
        self.source_task = source_task
        self.ack_val = 0
        self.root = self.edge = 0
        self.trees = None
        self.tracked = bool(tree_ids)
        if not tree_ids:
            return
        if len(tree_ids) == 1:
            for root, edge in tree_ids.items():
                self.root, self.edge = root, edge
        else:
            self.trees = tree_ids

    @property
    def tree_ids(self) -> dict[int, int] | None:
        """Root id -> this tuple's edge id, for every tree it belongs to; None when untracked."""
        if not self.tracked:
            return None
        return {self.root: self.edge} if self.trees is None else self.trees

    @property
    def fields(self) -> Fields:
        return self.stream_source.fields

    @property
    def source_component(self) -> str:
        return self.stream_source.component

    @property
    def source_stream_id(self) -> str:
        return self.stream_source.stream

    def get_value(self, i: int) -> Any:
        return self.values[i]

    def get_value_by_field(self, name: str) -> Any:
        return self.values[self.stream_source.fields.field_index(name)]

    def get_fields(self) -> Fields:
        return self.stream_source.fields

    def contains(self, name: str) -> bool:
        return name in self.stream_source.fields

    def field_index(self, name: str) -> int:
        return self.stream_source.fields.field_index(name)

    def select(self, fields: Fields | Iterable[str]) -> list[Any]:
        return self.stream_source.fields.select(Fields.of(fields), self.values)

    def is_tick(self) -> bool:
        """True for tick tuples (component ``__system``, stream ``__tick``)."""
        return self.stream_source is TICK_SOURCE

    def __getitem__(self, key: int | str) -> Any:
        index = self.stream_source.fields._index.get(key) if key.__class__ is str else None
        if index is not None:
            return self.values[index]
        if isinstance(key, str):
            return self.values[self.stream_source.fields.field_index(key)]  # raises, naming the fields
        return self.values[key]

    def __len__(self) -> int:
        return len(self.values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __repr__(self) -> str:
        return (
            f"Tuple(source={self.stream_source.component}:{self.source_task}, "
            f"stream={self.stream_source.stream}, values={self.values!r})"
        )


def tree_tuple(values: list[Any], source: StreamSource, source_task: int, root: int, edge: int) -> Tuple:
    """A tuple in the one tree ``root``, as edge ``edge`` (the engine's emits; no map made)."""
    tup = Tuple.__new__(Tuple)
    tup.values = values
    tup.stream_source = source
    tup.source_task = source_task
    tup.ack_val = 0
    tup.tracked = True
    tup.root = root
    tup.edge = edge
    tup.trees = None
    return tup


class StreamSource:
    """What every tuple of one (component, stream) shares: names and declared fields."""

    __slots__ = ("component", "stream", "fields")

    def __init__(self, component: str, stream: str, fields: Fields) -> None:
        self.component = component
        self.stream = stream
        self.fields = fields


TICK_SOURCE = StreamSource(SYSTEM_COMPONENT, TICK_STREAM, Fields("rate_secs"))


def system_sources(component: str) -> dict[str, StreamSource]:
    """The StreamSource of every system stream ``component`` may send."""
    return {stream: StreamSource(component, stream, Fields(*fields)) for stream, fields in SYSTEM_STREAM_FIELDS.items()}
