"""Shared fixtures: a LocalCluster per test, stopped afterwards."""

import pytest

from squall import LocalCluster


@pytest.fixture
def cluster():
    with LocalCluster() as c:
        yield c
