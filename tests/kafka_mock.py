"""A Kafka cluster for tests: the ``kafka_cluster`` fixture (import it into a test module)
gives the bootstrap string of a :class:`squall.testing.KafkaMockCluster` (librdkafka's mock
cluster: 3 brokers in this process on 127.0.0.1) kept for the module's tests. The ``names``
fixture gives a test a topic and a group of its own, ``offsets`` their :class:`Offsets`.

Without ``confluent-kafka`` a test using the fixture is skipped, except under CI (CI=true),
where it fails: CI must run them.
"""

from __future__ import annotations

import importlib.util
import logging
import uuid
from collections.abc import Iterator

import pytest

from redis_server import require
from squall.testing import KafkaMockCluster

WAIT = 30.0  # a consumer group's first join takes ~3 s on the mock cluster
PARTITIONS = 4  # the mock cluster creates topics with 4 partitions


@pytest.fixture(scope="module")
def kafka_cluster() -> Iterator[str]:
    if importlib.util.find_spec("confluent_kafka") is None:
        require("the confluent-kafka package", "pip install 'squall[kafka]' (or '.[test]')")
    with KafkaMockCluster(3) as cluster:
        hosts = {server.rsplit(":", 1)[0] for server in cluster.bootstrap_servers.split(",")}
        assert hosts == {"127.0.0.1"}, f"the mock cluster listens beyond loopback: {cluster.bootstrap_servers}"
        yield cluster.bootstrap_servers


@pytest.fixture
def names() -> tuple[str, str]:
    """A topic and a group of this test's own."""
    tag = uuid.uuid4().hex[:12]
    return f"topic-{tag}", f"group-{tag}"


def consumer(servers: str, group: str = "reader"):
    from confluent_kafka import Consumer

    return Consumer({"bootstrap.servers": servers, "group.id": group, "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", "logger": logging.getLogger("tests.kafka")})


class Offsets:
    """Reads a group's committed offsets and the high watermarks of a topic."""

    def __init__(self, servers: str, topic: str, group: str) -> None:
        self.topic, self.consumer = topic, consumer(servers, group)

    def _tps(self):
        from confluent_kafka import TopicPartition

        return [TopicPartition(self.topic, p) for p in range(PARTITIONS)]

    def committed(self) -> dict[int, int]:
        return {tp.partition: tp.offset for tp in self.consumer.committed(self._tps(), timeout=10)}

    def high(self) -> dict[int, int]:
        return {tp.partition: self.consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in self._tps()}

    def commit(self, partition: int, offset: int) -> None:
        from confluent_kafka import TopicPartition

        self.consumer.commit(offsets=[TopicPartition(self.topic, partition, offset)], asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def offsets(kafka_cluster, names):
    o = Offsets(kafka_cluster, *names)
    yield o
    o.close()
