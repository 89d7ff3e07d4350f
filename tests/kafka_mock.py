"""A Kafka cluster for tests: librdkafka's built-in mock cluster (``test.mock.num.brokers``),
3 brokers in this process listening on 127.0.0.1. The ``kafka_cluster`` fixture (import it into
a test module) gives its bootstrap string.

The mock cluster speaks the Kafka protocol well enough for producing, consuming in a group
and committing offsets; topics are created on first use (a produce), with 4 partitions. It
has no real broker failover, ACLs, transactions across clients or retention.

Without ``confluent-kafka`` a test using the fixture is skipped, except under CI (CI=true),
where it fails: CI must run them.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import threading
import time
from collections.abc import Iterator

import pytest

from redis_server import require

_REPLACED = re.compile(r"Mock cluster enabled: .* replaced with (\S+)")


class _Bootstrap(logging.Handler):
    """Catches the bootstrap address in librdkafka's "Mock cluster enabled" log line."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.address: str | None = None
        self.found = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        match = _REPLACED.search(record.getMessage())
        if match:
            self.address = match.group(1).rstrip(",")
            self.found.set()


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[str]:
    """The bootstrap servers (``host:port,...``) of a 3-broker mock cluster kept alive for the
    module's tests."""
    if importlib.util.find_spec("confluent_kafka") is None:
        require("the confluent-kafka package", "pip install 'squall[kafka]' (or '.[test]')")
    from confluent_kafka import Producer

    logger = logging.getLogger(f"tests.kafka_mock.{id(object())}")
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    handler = _Bootstrap()
    logger.addHandler(handler)
    holder = Producer({"test.mock.num.brokers": 3, "logger": logger, "debug": "mock"})
    deadline = time.monotonic() + 10
    while not handler.found.is_set() and time.monotonic() < deadline:
        holder.poll(0.05)
    if handler.address is None:
        holder.flush(1)
        pytest.fail("librdkafka's mock cluster did not log its bootstrap address")
    hosts = {server.rsplit(":", 1)[0] for server in handler.address.split(",")}
    assert hosts == {"127.0.0.1"}, f"the mock cluster listens beyond loopback: {handler.address}"
    logger.setLevel(logging.WARNING)  # the mock's debug lines: one per request from now on
    try:
        yield handler.address
    finally:
        holder.flush(5)
        logger.removeHandler(handler)
