"""squall.serialization.Serializer without workers: what a tuple's values and anchors become
after the trip a record makes between workers (``wire_values`` at emit, ``pack_batch`` in the
sender's transfer thread, ``load_batches`` and, for values packed at emit, ``loads`` in the
receiver), for every native type; registered serializers; what is refused, with and without
the pickle fallback."""

from __future__ import annotations

import threading

import msgpack
import pytest

from squall.errors import EmitError, SerializationError
from squall.serialization import PICKLE_FALLBACK_KEY, REGISTRATIONS_KEY, Packed, Serializer

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


def travel(values: list, anchors: dict | None = None, sender: Serializer | None = None,
           receiver: Serializer | None = None) -> tuple[tuple, Serializer]:
    """One record from ``sender`` to ``receiver``, as between two workers; returns the record
    as it arrives (values decoded) and the receiver."""
    sender = sender or Serializer()
    receiver = receiver or Serializer()
    record = (4, 2, "stream", sender.wire_values(values), anchors or {})
    [(task, src, stream, got, ids)] = list(receiver.load_batches(sender.pack_batch([record])))
    if got.__class__ is Packed:
        got = receiver.loads(got.data)
    return (task, src, stream, got, ids), receiver


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


def test_a_batch_of_many_records_keeps_each_records_fields_and_anchors():
    s = Serializer()
    records = []
    for i, (name, value) in enumerate(NATIVE.items()):
        anchors = {} if i % 3 == 0 else {(2**64 - 1 - i): i, i: 2**63 + i}  # 64-bit root and edge ids
        records.append((i + 1, 100 + i, f"stream-{name}", s.wire_values([value, i]), anchors))
    arrived = list(s.load_batches(s.pack_batch(records)))
    assert len(arrived) == len(records)
    for (task, src, stream, _, anchors), (value, (a_task, a_src, a_stream, a_values, a_ids)) in zip(
            records, zip(NATIVE.values(), arrived)):
        assert (a_task, a_src, a_stream) == (task, src, stream)
        assert a_ids == anchors and all(type(k) is int and type(v) is int for k, v in a_ids.items())
        if a_values.__class__ is Packed:
            a_values = s.loads(a_values.data)
        assert same(a_values, [value, task - 1]), (stream, a_values)


def test_batches_packed_back_to_back_are_read_in_order():
    s = Serializer()
    first = s.pack_batch([(1, 9, "a", s.wire_values(["x"]), {}), (2, 9, "a", s.wire_values([(1,)]), {5: 6})])
    second = s.pack_batch([(3, 8, "b", s.wire_values([BIG]), {})])
    arrived = list(s.load_batches(first + second))
    assert [(t, src, st, ids) for t, src, st, _, ids in arrived] == [(1, 9, "a", {}), (2, 9, "a", {5: 6}),
                                                                     (3, 8, "b", {})]
    values = [s.loads(v.data) if v.__class__ is Packed else v for _, _, _, v, _ in arrived]
    assert same(values, [["x"], [(1,)], [BIG]])


def test_nothing_to_read_is_no_record():
    assert list(Serializer().load_batches(b"")) == []


def test_an_empty_batch_round_trips_to_no_record():
    s = Serializer()
    assert list(s.load_batches(s.pack_batch([]))) == []


# -- registered serializers ------------------------------------------------------------------------


def registered() -> Serializer:
    return Serializer.for_config({REGISTRATIONS_KEY: [(Celsius, CelsiusSerializer())], PICKLE_FALLBACK_KEY: False})


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
        Serializer([(Celsius, Failing())]).wire_values([Celsius(2.0)])


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
        Serializer().wire_values(values)
    assert isinstance(error.value, EmitError)
    assert f"value of type {type_name} cannot travel to another worker" in str(error.value)
    assert PICKLE_FALLBACK_KEY in str(error.value) and "register_serialization" in str(error.value)


def test_a_refused_value_leaves_the_serializer_usable():
    s = Serializer()
    with pytest.raises(SerializationError):
        s.wire_values([[1, 2, 3, Unregistered()]])
    (_, _, _, got, _), _ = travel([[4, 5]], sender=s, receiver=s)
    assert same(got, [[4, 5]])


def test_a_value_too_deep_to_pack_is_a_serialization_error():
    loop: list = []
    loop.append(loop)
    with pytest.raises(SerializationError, match="cannot be serialized"):
        Serializer().wire_values([loop])


def test_with_the_fallback_other_types_travel_pickled():
    on = Serializer(pickle_fallback=True)
    (_, _, _, got, _), receiver = travel([Celsius(3.0), {"k": [Celsius(4.0)]}], sender=on,
                                         receiver=Serializer(pickle_fallback=True))
    assert got == [Celsius(3.0), {"k": [Celsius(4.0)]}] and receiver.decode_errors == []


def test_with_the_fallback_a_value_pickle_cannot_take_is_still_refused_at_emit():
    with pytest.raises(SerializationError, match="value of type lock cannot be serialized"):
        Serializer(pickle_fallback=True).wire_values([threading.Lock()])


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


def test_a_batch_with_a_forged_extension_type_is_refused():
    # only values packed at emit may be extension types in a batch: a pickle there is forged
    forged = msgpack.packb([[1], [2], ["s"], [msgpack.ExtType(0, b"cos\nsystem\n")], [{}]], use_bin_type=True)
    with pytest.raises(ValueError, match="extension type 0"):
        list(Serializer(pickle_fallback=True).load_batches(forged))
