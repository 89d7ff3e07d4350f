"""A Kafka-protocol broker whose transactions are real, for the exactly-once tests: the
``kafka_broker`` fixture (import it into a test module) gives a
:class:`squall.testing.KafkaBroker` (``noida-db``'s binary, in the test extra) on 127.0.0.1,
kept for the module's tests.

librdkafka's mock cluster (tests/kafka_mock.py) runs transactions but isolates nothing: a
``read_committed`` consumer gets aborted records, and ``init_transactions`` fences no older
producer. No Apache Kafka broker installs from PyPI, Debian or npm; this one's transactions are
shown to isolate and fence first (tests/test_kafka_exactly_once_broker.py). It is not Apache
Kafka: the tests check Squall's protocol against Kafka's transaction semantics as it implements
them. It does not enforce ``transaction.timeout.ms``; no test relies on that.

Without the package a test using the fixture is skipped, except under CI (CI=true), where it
fails: CI must run them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import pytest

from redis_server import require
from squall.testing import KafkaBroker


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaBroker]:
    if KafkaBroker.executable() is None:
        require("the noida-db package (a Kafka-protocol broker with transactions)",
                "pip install 'noida-db==0.2.3' (in the test extra)")
    if importlib.util.find_spec("confluent_kafka") is None:
        require("the confluent-kafka package", "pip install 'squall[kafka]' (or '.[test]')")
    with KafkaBroker(tmp_path_factory.mktemp("kafka-broker")) as broker:
        yield broker
