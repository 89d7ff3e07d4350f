"""The ack kernel's map (squall.utils.u64_map) against a dict, and the ids it is keyed by
(squall.utils.rand). Compiled, U64Map is a C table of its own; pure Python, a dict behind the
same methods: both builds run these (CI's pure phase sets SQUALL_NO_EXTENSIONS)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall import compiled
from squall.utils import rand
from squall.utils.u64_map import U64Map

U64 = st.integers(min_value=0, max_value=2**64 - 1)
# few keys, so that operations meet the same keys (and runs of one home slot) again and again;
# sequential and high-bit keys, which a plain modulo would pile into one slot
KEYS = st.one_of(st.sampled_from([0, 1, 2, 3, 2**63, 2**64 - 1, 2**32, 7 << 58]), st.integers(0, 40), U64)
OPS = st.lists(st.tuples(st.sampled_from(["xor", "set", "pop", "value", "in", "clear"]), KEYS, U64),
               max_size=400)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(OPS)
def test_every_operation_does_what_it_does_to_a_dict(ops):
    m, d = U64Map(), {}
    for op, key, value in ops:
        if op == "xor":
            m.xor(key, value)
            d[key] = d.get(key, 0) ^ value
        elif op == "set":
            m.set(key, value)
            d[key] = value
        elif op == "pop":
            assert m.pop(key, "absent") == d.pop(key, "absent")
        elif op == "value":
            assert m.value(key) == d.get(key, 0)
        elif op == "in":
            assert (key in m) == (key in d)
        else:
            m.clear()
            d.clear()
        assert len(m) == len(d)
    assert sorted(m.items()) == sorted(d.items())
    assert sorted(m.keys()) == sorted(d)


def test_a_map_grows_past_its_first_table_and_deletes_keep_every_run_reachable():
    # thousands of keys (the table doubles many times), then every other one removed: each
    # survivor must still be found from its home slot, and each removed one be gone
    m = U64Map()
    keys = [rand.rand64() for _ in range(5000)] + list(range(5000))
    for i, key in enumerate(keys):
        m.xor(key, i + 1)
    assert len(m) == len(set(keys))
    for key in keys[::2]:
        m.pop(key)
    for key in keys[1::2]:
        assert key in m
    assert all(key not in m for key in set(keys[::2]) - set(keys[1::2]))
    m.clear()
    assert len(m) == 0 and m.items() == [] and m.value(keys[1]) == 0 and keys[1] not in m


def test_a_value_out_of_64_bits_is_refused_compiled():
    if "squall.utils.u64_map" not in compiled.compiled_modules():
        pytest.skip("pure Python: the dict behind the map takes any int it is given")
    m = U64Map()
    with pytest.raises(OverflowError):
        m.xor(1, 2**64)
    with pytest.raises(OverflowError):
        m.set(-1, 0)


def test_ids_are_64_bit_distinct_repeatable_after_a_seed_and_not_repeated_by_a_forked_child():
    ids = [rand.rand64() for _ in range(100_000)]
    assert all(0 <= i < 2**64 for i in ids) and len(set(ids)) == len(ids)
    assert max(ids) >= 2**63  # the top bit is drawn too
    rand.seed(42)
    first = [rand.rand64() for _ in range(5)]
    rand.seed(42)
    assert [rand.rand64() for _ in range(5)] == first
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child draws its next id, the parent the same one in the sequence
        os.write(write, rand.rand64().to_bytes(8, "big"))
        os._exit(0)
    os.close(write)
    child = int.from_bytes(os.read(read, 8), "big")
    os.close(read)
    os.waitpid(pid, 0)
    assert child != rand.rand64()
