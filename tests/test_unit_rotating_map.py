"""squall.utils.rotating_map.RotatingMap: expiry in buckets (what spouts and ackers keep
their pending trees in)."""

from __future__ import annotations

import pytest

from squall.utils.rotating_map import RotatingMap


@pytest.mark.parametrize("buckets", [0, 1, -2])
def test_fewer_than_two_buckets_is_refused(buckets):
    with pytest.raises(ValueError, match="at least 2 buckets"):
        RotatingMap(buckets)


def test_put_get_contains_and_len():
    m = RotatingMap()
    assert len(m) == 0 and "a" not in m and m.get("a") is None and m.get("a", 7) == 7
    value = object()
    assert m.put("a", value) is value
    m.put(("t", 1), 2)
    assert m.get("a") is value and m.get(("t", 1)) == 2
    assert "a" in m and ("t", 1) in m and len(m) == 2


def test_a_stored_none_or_falsy_value_is_not_the_default():
    m = RotatingMap()
    m.put("none", None)
    m.put("zero", 0)
    m.rotate()  # in the older bucket too
    assert m.get("none", "default") is None
    assert m.get("zero", "default") == 0
    assert m.pop("none", "default") is None
    assert "none" not in m and m.pop("none", "default") == "default"


@pytest.mark.parametrize("buckets", [2, 3, 5])
def test_an_entry_expires_at_the_rotation_that_drops_its_bucket(buckets):
    m = RotatingMap(buckets)
    m.put("k", 1)
    for _ in range(buckets - 1):
        assert m.rotate() == {}
        assert m.get("k") == 1 and len(m) == 1
    assert m.rotate() == {"k": 1}
    assert "k" not in m and len(m) == 0 and m.rotate() == {}


def test_rotate_returns_the_oldest_entries_in_put_order():
    m = RotatingMap(2)
    m.put("a", 1)
    m.put("b", 2)
    m.rotate()
    m.put("c", 3)
    assert len(m) == 3
    expired = m.rotate()
    assert list(expired.items()) == [("a", 1), ("b", 2)]
    assert len(m) == 1 and m.get("c") == 3
    assert m.rotate() == {"c": 3}


def test_touch_restarts_the_expiry():
    m = RotatingMap(2)
    m.put("kept", 1)
    m.put("dropped", 2)
    m.rotate()
    assert m.touch("kept") is True
    assert m.touch("absent") is False and "absent" not in m
    assert m.rotate() == {"dropped": 2}
    assert m.get("kept") == 1
    assert m.touch("kept") is True  # touching an entry of the newest bucket keeps it there
    assert m.rotate() == {}
    assert m.rotate() == {"kept": 1}


def test_pop_removes_from_any_bucket_so_it_never_expires():
    m = RotatingMap(3)
    m.put("old", 1)
    m.rotate()
    m.rotate()
    m.put("new", 2)
    assert m.pop("old") == 1 and m.pop("new") == 2
    assert m.pop("old") is None and m.pop("new", "gone") == "gone"
    assert len(m) == 0
    assert [m.rotate() for _ in range(3)] == [{}, {}, {}]


def test_len_counts_every_bucket():
    m = RotatingMap(3)
    m.put(0, 0)
    m.rotate()
    m.put(1, 1)
    m.rotate()
    m.put(2, 2)
    assert len(m) == 3
    m.rotate()  # drops 0
    assert len(m) == 2 and 0 not in m and 1 in m and 2 in m
