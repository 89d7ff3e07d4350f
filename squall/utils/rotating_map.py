"""``RotatingMap``: expiry in buckets, as Storm's spouts and ackers keep pending trees."""

from __future__ import annotations

from typing import Any


class RotatingMap:
    """A map split into ``num_buckets`` buckets; new keys go into the newest.

    :meth:`rotate` drops the oldest bucket and returns what it held. Rotated every T
    seconds with 2 buckets, an entry expires between T and 2T after it was put.
    """

    def __init__(self, num_buckets: int = 2) -> None:
        if num_buckets < 2:
            raise ValueError("a RotatingMap needs at least 2 buckets")
        self._buckets: list[dict[Any, Any]] = [{} for _ in range(num_buckets)]  # the newest first

    def __len__(self) -> int:
        return self.size()

    def size(self) -> int:
        """How many keys it holds (``len``)."""
        count = 0
        for bucket in self._buckets:
            count += len(bucket)
        return count

    def __contains__(self, key: Any) -> bool:
        return any(key in b for b in self._buckets)

    def put(self, key: Any, value: Any) -> Any:
        """Set a new ``key`` in the newest bucket (use :meth:`touch` for a present one);
        returns ``value``."""
        self._buckets[0][key] = value
        return value

    def get(self, key: Any, default: Any = None) -> Any:
        for bucket in self._buckets:
            value = bucket.get(key, self)
            if value is not self:
                return value
        return default

    def pop(self, key: Any, default: Any = None) -> Any:
        for bucket in self._buckets:
            value = bucket.pop(key, self)
            if value is not self:
                return value
        return default

    def touch(self, key: Any) -> bool:
        """Move ``key`` to the newest bucket (restart its expiry); False if absent."""
        for bucket in self._buckets:
            if key in bucket:
                self._buckets[0][key] = bucket.pop(key)
                return True
        return False

    def rotate(self) -> dict[Any, Any]:
        """Drop the oldest bucket; return its entries (the expired ones)."""
        expired = self._buckets.pop()
        self._buckets.insert(0, {})
        return expired
