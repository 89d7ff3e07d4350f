"""squall.runtime.serialization.Serializer and squall.runtime.messaging.tuple_batch without workers: what a
tuple's values and tree ids become after the trip between workers (``wire_values`` at emit,
``encode`` in the sender's transfer, ``decode`` and, for values packed at emit, ``loads`` in
the receiver), for every native type; registered serializers; what is refused, with and
without the pickle fallback."""

from __future__ import annotations

import threading

import msgpack
import pytest

from helpers import tree_maps
from squall.api.errors import EmitError, SerializationError
from squall.runtime.messaging import tuple_batch
from squall.runtime.messaging.schema import MalformedMessage
from squall.runtime.messaging.tuple_batch import TupleGroup
from squall.runtime.messaging.wire_values import wire_values
from squall.runtime.serialization import Serializer

BIG = 2**200

# value -> what arrives (the value itself unless given)
NATIVE = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "int64-min": -(2**63),
    "uint64-max": 2**64 - 1,
    "int-above-uint64": 2**64,
    "int-below-int64": -(2**63) - 1,
    "big-int": BIG,
    "big-negative-int": -BIG,
    "float": 1.5,
    "negative-zero": -0.0,
    "inf": float("inf"),
    "str": "ünïcødé ☃",
    "empty-str": "",
    "bytes": b"\x00\xff\x80",
    "empty-bytes": b"",
    "list": [1, "a", None, 2.5],
    "empty-list": [],
    "tuple": (1, "a"),
    "empty-tuple": (),
    "dict": {"a": 1, 2: "b", None: [3]},
    "empty-dict": {},
    "set": {1, "a", (2, 3)},
    "empty-set": set(),
    "frozenset": frozenset({"x", 1}),
    "empty-frozenset": frozenset(),
    "nested": [(1, [2, (3, {4})]), {"k": frozenset({(5, 6)})}, {(7, 8): {9: (10,)}}],
    "big-ints-nested": [(BIG,), {"k": -BIG}, {BIG: [2**64]}, {2**70}],
    "bools-in-containers": (True, [False], {True: None}),
}

CONVERTED = {
    "bytearray": (bytearray(b"ab\x00"), b"ab\x00"),
    "memoryview": (memoryview(b"cd"), b"cd"),
    "bytearray-nested": ([bytearray(b"x"), (memoryview(b"y"),)], [b"x", (b"y",)]),
}


class Celsius:
    def __init__(self, degrees: float) -> None:
        self.degrees = degrees

    def __eq__(self, other: object) -> bool:
        return type(other) is Celsius and other.degrees == self.degrees


class CelsiusSerializer:
    def serialize(self, obj: Celsius) -> bytes:
        return str(obj.degrees).encode()

    def deserialize(self, data: bytes) -> Celsius:
        return Celsius(float(data))


class Unregistered:
    pass


TRIPPED: list[str] = []


def _tripwire(note: str) -> Unregistered:
    TRIPPED.append(note)
    return Unregistered()


class Canary:
    """Unpickling it runs ``_tripwire``: what code from the wire would do."""

    def __reduce__(self):
        return (_tripwire, ("unpickled",))


def same(a, b) -> bool:
    """Equal, and of the same types all the way down (1 == 1.0 == True does not count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a == b and all(same(k, next(k2 for k2 in b if k2 == k)) and same(v, b[k]) for k, v in a.items())
    if isinstance(a, float) and a == 0:
        return str(a) == str(b)  # -0.0 stays -0.0
    return a == b


def wire(values: list, serializer: Serializer | None = None) -> list | bytes:
    """``values`` as they leave the emitting worker."""
    return wire_values(values, serializer or Serializer())


def arrived(data: list | bytes, receiver: Serializer) -> list:
    """Values as the receiving worker rebuilds them."""
    return receiver.loads(data) if data.__class__ is bytes else data


def travel(values: list, anchors: dict | None = None, sender: Serializer | None = None,
           receiver: Serializer | None = None) -> tuple[tuple, Serializer]:
    """One tuple from ``sender`` to ``receiver``, as between two workers; returns it as it
    arrives (task, source task, stream, values decoded, tree ids) and the receiver."""
    sender = sender or Serializer()
    receiver = receiver or Serializer()
    group = TupleGroup(2, "stream", [4], [wire(values, sender)], [anchors or {}])
    [g] = tuple_batch.decode(tuple_batch.encode([group]))
    return (g.tasks[0], g.source_task, g.stream, arrived(g.values[0], receiver), tree_maps(g)[0]), receiver


@pytest.mark.parametrize("value", list(NATIVE.values()), ids=list(NATIVE))
def test_native_values_arrive_with_their_types(value):
    (task, src, stream, got, ids), receiver = travel(["before", value, "after"])
    assert (task, src, stream, ids) == (4, 2, "stream", {})
    assert same(got, ["before", value, "after"]), got
    assert receiver.decode_errors == []


@pytest.mark.parametrize("value, arrives", list(CONVERTED.values()), ids=list(CONVERTED))
def test_bytearray_and_memoryview_arrive_as_bytes(value, arrives):
    (_, _, _, got, _), _ = travel([value])
    assert same(got, [arrives]), got


def test_a_payload_of_many_groups_keeps_each_tuples_fields_and_tree_ids():
    s = Serializer()
    groups = []
    for i, (name, value) in enumerate(NATIVE.items()):
        # untracked, in one tree (root and edge columns), in several; 64-bit root and edge ids
        kind = i % 3
        tree_ids = [{(2**64 - 1 - i): i, i: 2**63 + i}] if kind == 2 else None
        roots, edges = ([2**64 - 1 - i], [2**63 + i]) if kind == 1 else (None, None)
        groups.append(TupleGroup(100 + i, f"stream-{name}", [i + 1], [wire([value, i], s)], tree_ids, roots, edges))
    received = tuple_batch.decode(tuple_batch.encode(groups))
    assert len(received) == len(groups)
    for sent, (value, got) in zip(groups, zip(NATIVE.values(), received)):
        assert (got.tasks, got.source_task, got.stream, got.tree_ids, got.roots, got.edges) == (
            sent.tasks, sent.source_task, sent.stream, sent.tree_ids, sent.roots, sent.edges)
        assert tree_maps(got) == tree_maps(sent) and len(tree_maps(got)) == 1
        assert all(type(k) is int and type(v) is int for ids in tree_maps(got) if ids for k, v in ids.items())
        assert same(arrived(got.values[0], s), [value, sent.tasks[0] - 1]), (sent.stream, got.values)


def test_groups_keep_their_order_and_their_tuples_theirs():
    s = Serializer()
    groups = [TupleGroup(9, "a", [1, 2], [wire(["x"], s), wire([(1,)], s)], [{}, {5: 6}]),
              TupleGroup(8, "b", [3], [wire([BIG], s)], None)]
    received = tuple_batch.decode(tuple_batch.encode(groups))
    assert [(g.source_task, g.stream, g.tasks, g.tree_ids) for g in received] == [
        (9, "a", [1, 2], [{}, {5: 6}]), (8, "b", [3], None)]
    values = [arrived(v, s) for g in received for v in g.values]
    assert same(values, [["x"], [(1,)], [BIG]])


def test_an_empty_payload_round_trips_to_no_group():
    assert tuple_batch.decode(tuple_batch.encode([])) == []


@pytest.mark.parametrize("payload", [
    b"",
    tuple_batch.encode([TupleGroup(1, "s", [2], [["x"]], None)])[:-1],  # truncated
    msgpack.packb([[0, 1, "s", [2], [[{"k": 1}]], None]]),  # a value that is neither plain nor packed
    msgpack.packb([[0, 1, "s", [2], [[msgpack.ExtType(0, b"cos\nsystem\n")]], None]]),  # a pickle
    msgpack.packb([[7, 1, 2]]),  # no such group
    msgpack.packb([[0, -1, "s", [2], [["x"]], None]]),  # a negative task
    msgpack.packb([[0, 1, "s", [2], [["x"]], None, "more"]]),  # a field too many
], ids=["empty", "truncated", "wrong-type", "pickle", "unknown-group", "negative-task", "extra-field"])
def test_a_payload_that_does_not_fit_the_schemas_is_refused_whole(payload):
    with pytest.raises(MalformedMessage):
        tuple_batch.decode(payload)


# -- registered serializers ------------------------------------------------------------------------


def registered() -> Serializer:
    return Serializer.for_config({"topology.kryo.register": [(Celsius, CelsiusSerializer())],
                                  "topology.fall.back.on.java.serialization": False})


def test_a_registered_type_travels_with_its_serializer_nested_too():
    (_, _, _, got, _), receiver = travel([Celsius(21.5), [Celsius(-3.0), {"k": (Celsius(0.0),)}]],
                                         sender=registered(), receiver=registered())
    assert got == [Celsius(21.5), [Celsius(-3.0), {"k": (Celsius(0.0),)}]]
    assert type(got[1][1]["k"]) is tuple and receiver.decode_errors == []


def test_a_registered_value_that_cannot_be_rebuilt_arrives_as_none_with_the_reason():
    class Broken(CelsiusSerializer):
        def deserialize(self, data: bytes) -> Celsius:
            raise ValueError(f"bad degrees {data!r}")

    receiver = Serializer([(Celsius, Broken())])
    (_, _, _, got, _), _ = travel(["ok", Celsius(1.0)], sender=registered(), receiver=receiver)
    assert got == ["ok", None]
    assert receiver.decode_errors == ["ValueError: bad degrees b'1.0'"]


def test_a_registered_serializer_that_raises_fails_at_emit_naming_the_type():
    class Failing(CelsiusSerializer):
        def serialize(self, obj: Celsius) -> bytes:
            raise RuntimeError("no degrees")

    with pytest.raises(SerializationError, match="value of type Celsius cannot be serialized: no degrees"):
        wire([Celsius(2.0)], Serializer([(Celsius, Failing())]))


# -- what is refused -------------------------------------------------------------------------------


@pytest.mark.parametrize("values, type_name", [
    ([Unregistered()], "test_unit_serialization.Unregistered"),
    ([1, [2, {"k": Unregistered()}]], "test_unit_serialization.Unregistered"),
    ([Celsius(1.0)], "test_unit_serialization.Celsius"),  # not registered with this serializer
    ([threading.Lock()], "_thread.lock"),
    ([(i for i in ())], "generator"),
    ([5, object()], "object"),
], ids=["class", "nested", "unregistered", "lock", "generator", "object"])
def test_a_value_of_another_type_is_refused_at_emit_naming_its_type(values, type_name):
    with pytest.raises(SerializationError) as error:
        wire(values)
    assert isinstance(error.value, EmitError)
    assert f"value of type {type_name} cannot travel to another worker" in str(error.value)
    assert "topology.fall.back.on.java.serialization" in str(error.value)
    assert "register_serialization" in str(error.value)


def test_a_refused_value_leaves_the_serializer_usable():
    s = Serializer()
    with pytest.raises(SerializationError):
        wire([[1, 2, 3, Unregistered()]], s)
    (_, _, _, got, _), _ = travel([[4, 5]], sender=s, receiver=s)
    assert same(got, [[4, 5]])


def test_a_value_too_deep_to_pack_is_a_serialization_error():
    loop: list = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="cannot be serialized"):
        wire([loop])


def test_with_the_fallback_other_types_travel_pickled():
    on = Serializer(pickle_fallback=True)
    (_, _, _, got, _), receiver = travel([Celsius(3.0), {"k": [Celsius(4.0)]}], sender=on,
                                         receiver=Serializer(pickle_fallback=True))
    assert got == [Celsius(3.0), {"k": [Celsius(4.0)]}] and receiver.decode_errors == []


def test_with_the_fallback_a_value_pickle_cannot_take_is_still_refused_at_emit():
    with pytest.raises(SerializationError, match="value of type lock cannot be serialized"):
        wire([threading.Lock()], Serializer(pickle_fallback=True))


@pytest.mark.parametrize("receiver_fallback", [False, True], ids=["receiver-off", "receiver-on"])
def test_a_pickled_value_is_unpickled_only_by_a_receiver_with_the_fallback(receiver_fallback):
    TRIPPED.clear()
    (_, _, _, got, _), receiver = travel(["before", Canary()], sender=Serializer(pickle_fallback=True),
                                         receiver=Serializer(pickle_fallback=receiver_fallback))
    if receiver_fallback:
        assert TRIPPED == ["unpickled"] and got[0] == "before" and type(got[1]) is Unregistered
        assert receiver.decode_errors == []
    else:
        assert TRIPPED == [], "a pickle from the wire was unpickled"
        assert got == ["before", None]
        assert len(receiver.decode_errors) == 1 and "not unpickled" in receiver.decode_errors[0]
