"""``U64Map``: 64-bit keys to 64-bit values, the ack kernel's maps (tree id -> XOR of edge ids).

Acking folds one XOR per tuple into a map keyed by tree id (Storm's ``AckObject.updateAck``).
As a dict, each fold hashes an int object and makes another for the value; compiled, this map
holds C integers in one open-addressing table (linear probing, at most half full, Fibonacci
hashing so that ids which are not random spread too; deletion shifts the run back, so there
are no tombstones) and a fold allocates nothing. Pure Python, it is a dict behind the same
methods: one behaviour, property-tested against a dict (tests/test_unit_u64_map.py).

Keys and values are ints in ``[0, 2**64)``; a value out of range raises ``OverflowError``
compiled (pure Python takes it, but nothing in Squall makes one). Not thread-safe: each map
belongs to one thread, or to holders of one lock, as the dicts it replaces did.
"""

from __future__ import annotations

from typing import Any

try:
    import cython
except ImportError:  # Cython builds the extensions; pure Python runs without it
    from squall.utils import no_cython as cython

if cython.compiled:
    from cython.cimports.libc.stdlib import calloc, free
    from cython.cimports.libc.string import memset

_MIN_CAPACITY = 16
_FIBONACCI = 0x9E3779B97F4A7C15  # 2**64 / golden ratio: spreads any keys over the table's bits


class U64Map:
    """A map of 64-bit ints to 64-bit ints (see the module's docstring)."""

    def __init__(self) -> None:
        if cython.compiled:
            self._size = 0
            self._grow_to(_MIN_CAPACITY)
        else:
            self._dict: dict[int, int] = {}

    def __len__(self) -> int:
        if cython.compiled:
            return self._size
        else:
            return len(self._dict)

    def __contains__(self, key: int) -> bool:
        if cython.compiled:
            return self._find(key) >= 0
        else:
            return key in self._dict

    def value(self, key: int) -> int:
        """The value of ``key``, 0 when absent (as :meth:`xor` takes it)."""
        if cython.compiled:
            slot = self._find(key)
            return 0 if slot < 0 else self._vals[slot]
        else:
            return self._dict.get(key, 0)

    def set(self, key: int, value: int) -> None:
        """Set ``key`` to ``value``."""
        if cython.compiled:
            self._vals[self._slot(key)] = value
        else:
            self._dict[key] = value

    def xor(self, key: int, value: int) -> None:
        """XOR ``value`` into ``key``'s value (0 when absent): the fold of an ack."""
        if cython.compiled:
            slot = self._slot(key)
            self._vals[slot] ^= value
        else:
            d = self._dict
            d[key] = d.get(key, 0) ^ value

    def pop(self, key: int, default: Any = None) -> Any:
        """Remove ``key``; its value, or ``default`` when absent."""
        if cython.compiled:
            slot = self._find(key)
            if slot < 0:
                return default
            value = self._vals[slot]
            self._remove(slot)
            return value
        else:
            return self._dict.pop(key, default)

    def items(self) -> list[tuple[int, int]]:
        """Every ``(key, value)``, in no particular order (a list: the map may change after)."""
        if cython.compiled:
            out = []
            for slot in range(self._capacity):
                if self._used[slot]:
                    out.append((self._keys[slot], self._vals[slot]))
            return out
        else:
            return list(self._dict.items())

    def keys(self) -> list[int]:
        """Every key, in no particular order."""
        if cython.compiled:
            return [self._keys[slot] for slot in range(self._capacity) if self._used[slot]]
        else:
            return list(self._dict)

    def clear(self) -> None:
        if cython.compiled:
            if self._size:
                memset(self._used, 0, self._capacity)
                self._size = 0
        else:
            self._dict.clear()

    def __repr__(self) -> str:
        return f"U64Map({dict(self.items())!r})"

    # -- the table, compiled only ------------------------------------------------------------------

    def _probe(self, key: int) -> int:
        """The slot holding ``key``, or the empty slot where it would go."""
        slot = (key * _FIBONACCI) >> self._shift
        while self._used[slot] and self._keys[slot] != key:
            slot = (slot + 1) & self._mask
        return slot

    def _find(self, key: int) -> int:
        """The slot holding ``key``, or -1."""
        slot = self._probe(key)
        return slot if self._used[slot] else -1

    def _slot(self, key: int) -> int:
        """The slot holding ``key``, inserted with value 0 when absent."""
        slot = self._probe(key)
        if self._used[slot]:
            return slot
        if 2 * (self._size + 1) > self._capacity:
            self._grow_to(2 * self._capacity)
            slot = self._probe(key)
        self._used[slot] = 1
        self._keys[slot] = key
        self._vals[slot] = 0
        self._size += 1
        return slot

    def _remove(self, slot: int) -> None:
        """Empty ``slot``, moving back the entries after it in its run that may move (so that no
        probe from their home slot meets a hole before them)."""
        mask = self._mask
        hole = slot
        nxt = (slot + 1) & mask
        while self._used[nxt]:
            home = (self._keys[nxt] * _FIBONACCI) >> self._shift
            # the entry stays when its home lies cyclically in (hole, nxt]
            if hole <= nxt:
                stays = hole < home <= nxt
            else:
                stays = hole < home or home <= nxt
            if not stays:
                self._keys[hole] = self._keys[nxt]
                self._vals[hole] = self._vals[nxt]
                hole = nxt
            nxt = (nxt + 1) & mask
        self._used[hole] = 0
        self._size -= 1

    def _grow_to(self, capacity: int) -> None:
        """A table of ``capacity`` slots (a power of 2), holding what the old one held."""
        old_keys, old_vals, old_used, old_capacity = self._keys, self._vals, self._used, self._capacity
        keys = cython.cast(cython.p_ulonglong, calloc(capacity, cython.sizeof(cython.ulonglong)))
        vals = cython.cast(cython.p_ulonglong, calloc(capacity, cython.sizeof(cython.ulonglong)))
        used = cython.cast(cython.p_uchar, calloc(capacity, 1))
        if not keys or not vals or not used:
            free(keys)
            free(vals)
            free(used)
            raise MemoryError(f"U64Map: no memory for {capacity} slots")
        self._keys, self._vals, self._used, self._capacity = keys, vals, used, capacity
        self._mask = capacity - 1
        self._shift = 64
        while capacity > 1:  # 64 - log2(capacity): a hash's top bits index the table
            capacity >>= 1
            self._shift -= 1
        self._size = 0
        for slot in range(old_capacity):
            if old_used[slot]:
                self.set(old_keys[slot], old_vals[slot])
        free(old_keys)
        free(old_vals)
        free(old_used)

    def __dealloc__(self) -> None:
        if cython.compiled:
            free(self._keys)
            free(self._vals)
            free(self._used)
