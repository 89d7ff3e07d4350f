"""Where the runtime's randomness comes from: tree and edge ids, and groupings' choices.

One generator per process, of Squall's own, so that user code seeding :mod:`random` cannot
make ids collide; a forked child seeds its copy again (a fork must not repeat its parent's
ids). :func:`seed` makes a run repeatable: the deterministic checkpoint harness
(tests/checkpoint_sim.py) seeds it per example.
"""

from __future__ import annotations

import os
import random

_generator = random.Random()
os.register_at_fork(after_in_child=_generator.seed)

#: ``rand_bits(k)``: a random int of ``k`` bits (ids are 63 or 64)
rand_bits = _generator.getrandbits


def new_random() -> random.Random:
    """A generator of its own (a grouping's), seeded from this process's."""
    return random.Random(_generator.getrandbits(64))


def seed(value: int) -> None:
    """Make what follows repeatable (tests)."""
    _generator.seed(value)
