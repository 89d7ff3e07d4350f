"""A Kafka cluster for tests: the ``kafka_cluster`` fixture (import it into a test module)
gives the bootstrap string of a :class:`squall.testing.KafkaMockCluster` (librdkafka's mock
cluster: 3 brokers in this process on 127.0.0.1) kept for the module's tests.

Without ``confluent-kafka`` a test using the fixture is skipped, except under CI (CI=true),
where it fails: CI must run them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from redis_server import require
from squall.testing import KafkaMockCluster


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[str]:
    if importlib.util.find_spec("confluent_kafka") is None:
        require("the confluent-kafka package", "pip install 'squall[kafka]' (or '.[test]')")
    with KafkaMockCluster(3) as cluster:
        hosts = {server.rsplit(":", 1)[0] for server in cluster.bootstrap_servers.split(",")}
        assert hosts == {"127.0.0.1"}, f"the mock cluster listens beyond loopback: {cluster.bootstrap_servers}"
        yield cluster.bootstrap_servers
