"""Settings given on the command line: topology config overrides (``-c key=value``) and Spark
settings (``squall submit --conf spark.key=value``)."""

from __future__ import annotations

import json
from typing import Any

from squall.ops.command import UsageError


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are read as JSON when they parse (numbers, lists, null),
    else kept as strings. Raises :class:`UsageError` for a pair without ``=`` or key."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"-c expects key=value, got {pair!r}")
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def parse_spark_conf(pairs: list[str]) -> dict[str, str]:
    """``spark.key=value`` pairs, values kept as strings (as ``spark-submit --conf`` has them).
    Raises :class:`UsageError` for a pair without ``=`` or whose key is not ``spark.*``."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.startswith("spark."):
            raise UsageError(f"--conf expects spark.key=value, got {pair!r}")
        out[key] = value
    return out
