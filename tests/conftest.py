"""Shared fixtures: fresh recording stores for every test, a LocalCluster per test (stopped
afterwards; under simulated time for tests marked ``simulated_time``) and a unique recording
key."""

import contextlib
import uuid

import pytest

import helpers
from squall import LocalCluster
from squall.testing import simulated_time


@pytest.fixture(autouse=True, scope="session")
def _private_squall_home(tmp_path_factory):
    """Topologies started by the tests register in a registry of their own (squall list),
    so that concurrent test sessions and real topologies do not collide."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SQUALL_HOME", str(tmp_path_factory.mktemp("squall-home")))
        yield


@pytest.fixture(autouse=True)
def _fresh_records():
    helpers.reset()
    yield
    helpers.STOP.set()
    helpers.SLOW.clear()


@pytest.fixture
def cluster(request):
    simulated = request.node.get_closest_marker("simulated_time") is not None
    with simulated_time() if simulated else contextlib.nullcontext():
        with LocalCluster() as c:
            yield c


@pytest.fixture
def key():
    return uuid.uuid4().hex
