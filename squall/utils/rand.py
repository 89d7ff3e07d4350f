"""Where the runtime's randomness comes from: tree and edge ids, and groupings' choices.

One generator per process, of Squall's own, so that user code seeding :mod:`random` cannot
make ids collide; a forked child seeds its copy again (a fork must not repeat its parent's
ids). :func:`seed` makes a run repeatable: the deterministic checkpoint harness
(tests/checkpoint_sim.py) seeds it per example.

Ids (:func:`rand64`) are drawn per emit, so compiled they come from SplitMix64 in C (a 64-bit
counter through a bijective mix: no id repeats within a process until 2**64 draws), seeded
from the generator; pure Python draws them from the generator itself. Neither is
cryptographic: an id needs to be unlikely to collide, not unpredictable.
"""

from __future__ import annotations

import os
import random

try:
    import cython
except ImportError:  # Cython builds the extensions; pure Python runs without it
    from squall.utils import no_cython as cython

_generator = random.Random()

# SplitMix64 (Steele, Lea and Flood, 2014): the state and its constants, C integers compiled
_state = 0
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def rand64() -> int:
    """A random 64-bit id (an edge's; a root's, shifted)."""
    if cython.compiled:
        global _state
        _state += _GAMMA
        z = _state
        z = (z ^ (z >> 30)) * _MIX1
        z = (z ^ (z >> 27)) * _MIX2
        return z ^ (z >> 31)
    return _generator.getrandbits(64)


def new_random() -> random.Random:
    """A generator of its own (a grouping's), seeded from this process's."""
    return random.Random(_generator.getrandbits(64))


def seed(value: int | None = None) -> None:
    """Make what follows repeatable (tests); None seeds from the system, as a forked child does."""
    global _state
    _generator.seed(value)
    _state = _generator.getrandbits(64)


seed()
os.register_at_fork(after_in_child=seed)
