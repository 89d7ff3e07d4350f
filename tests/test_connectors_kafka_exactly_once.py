"""KafkaBolt in exactly-once mode (squall.connectors.kafka.ExactlyOnceKafkaBolt) on librdkafka's
mock cluster: each recovery case with the harness, then ``kill -9`` of worker processes.

The mock cluster runs transactions but does not isolate them: a ``read_committed`` consumer is
given an aborted transaction's records, and ``init_transactions`` fences no older producer
(the first test shows it). So here exactly once is checked where no transaction is aborted:
the epochs are published after the checkpoint commits, once, and a repeated commit is
recognised by the marker; that an abort hides records and that a zombie is fenced is Kafka's
part, which the mock cannot show.
"""

from __future__ import annotations

import logging
import time
import uuid

import pytest

import exactly_once_run as eo
from helpers import free_ports
from kafka_mock import kafka_cluster  # noqa: F401 F811  (a fixture)
from squall import TwoPhaseCommitSink
from squall.connectors.kafka import ExactlyOnceKafkaBolt, KafkaBolt
from squall.testing import BoltHarness
from test_checkpoint_kill9 import KafkaSource, make_lines

pytestmark = pytest.mark.timeout(120)


def read_all(servers: str, topic: str, isolation: str = "read_committed") -> list[tuple[str, str]]:
    """Every (key, value) of ``topic`` so far, partition by partition."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    consumer = Consumer({"bootstrap.servers": servers, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation, "enable.partition.eof": True, "allow.auto.create.topics": True,
                         "logger": logging.getLogger("tests.kafka")})
    try:
        out = []
        # asking makes a topic nothing was written to yet (the mock cluster: with PARTITIONS partitions)
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        places = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions]
        # an empty partition gives no end-of-partition event
        ended = {tp.partition for tp in places if consumer.get_watermark_offsets(tp, timeout=10)[1] == 0}
        consumer.assign(places)
        deadline = time.monotonic() + 30
        while len(ended) < len(places):
            assert time.monotonic() < deadline, f"{topic!r}: partitions {sorted(ended)} read to their end in 30 s"
            for m in consumer.consume(1000, timeout=0.2):
                if m.error() is None:
                    out.append((m.key().decode() if m.key() else None, m.value().decode()))
                elif m.error().code() == KafkaError._PARTITION_EOF:
                    ended.add(m.partition())
        return out
    finally:
        consumer.close()


def test_the_mock_cluster_gives_read_committed_consumers_an_aborted_transactions_records(kafka_cluster):  # noqa: F811
    """Why the tests here cannot check what an abort or a fence hides (see the module)."""
    from confluent_kafka import Producer

    topic = f"aborted-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": kafka_cluster, "transactional.id": f"t-{topic}",
                         "logger": logging.getLogger("tests.kafka")})
    producer.init_transactions(10)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0)
    producer.commit_transaction(10)
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted", partition=0)
    producer.flush(10)  # sent: an abort before sending would drop it in the client
    producer.abort_transaction(10)
    # a real broker delivers ["committed"] only
    assert sorted(v for _, v in read_all(kafka_cluster, topic)) == ["aborted", "committed"]


def sink(servers: str, topic: str, name: str) -> BoltHarness:
    bolt = KafkaBolt(servers, topic, mapper=lambda t: (t.values[0], t.values[1]), exactly_once=True,
                     marker_topic=f"{topic}.markers")
    h = BoltHarness(bolt, {"count": ["key", "message"]}, name=name)
    h.rollback()  # the recovery barrier every start is followed by
    return h


@pytest.fixture
def names():
    tag = uuid.uuid4().hex[:8]
    return f"eo-{tag}", f"eo-topology-{tag}"


def test_the_exactly_once_form_is_a_kafka_bolt_and_a_two_phase_sink(kafka_cluster):  # noqa: F811
    assert isinstance(KafkaBolt(kafka_cluster, "t", exactly_once=True), ExactlyOnceKafkaBolt)
    assert isinstance(KafkaBolt(kafka_cluster, "t", exactly_once=True), TwoPhaseCommitSink)
    assert not isinstance(KafkaBolt(kafka_cluster, "t"), TwoPhaseCommitSink)


def test_an_epoch_is_published_once_its_checkpoint_commits(kafka_cluster, names):  # noqa: F811
    topic, name = names
    h = sink(kafka_cluster, topic, name)
    h.feed(["a", "1"], tracked=False)
    h.feed(["b", "1"], tracked=False)
    txid = h.prepare_checkpoint()
    assert read_all(kafka_cluster, topic, "read_uncommitted") == []  # not even sent
    h.commit_checkpoint(txid)
    assert sorted(read_all(kafka_cluster, topic)) == [("a", "1"), ("b", "1")]
    assert h.bolt.metrics["transactions"] == 1 and len(h.acked) == 2
    h.close()


def test_a_crash_between_the_checkpoints_commit_and_the_sinks_publishes_at_recovery_once(kafka_cluster, names):  # noqa: F811
    topic, name = names
    h = sink(kafka_cluster, topic, name)
    h.feed(["a", "1"], tracked=False)
    txid = h.prepare_checkpoint()
    h.commit_checkpoint(txid, barrier=False)
    h = sink(kafka_cluster, topic, name)  # restarted: the committed state holds the epoch
    assert read_all(kafka_cluster, topic) == [("a", "1")]
    h.feed(["b", "1"], tracked=False)
    h.checkpoint()
    assert sorted(read_all(kafka_cluster, topic)) == [("a", "1"), ("b", "1")]
    h.close()


def test_an_epoch_published_before_a_crash_is_recognised_by_its_marker_and_skipped(kafka_cluster, names):  # noqa: F811
    topic, name = names
    h = sink(kafka_cluster, topic, name)
    h.feed(["a", "1"], tracked=False)
    txid = h.prepare_checkpoint()
    h.commit_checkpoint(txid, barrier=False)
    h.bolt.publish(txid, [[topic, "a", "1", None]])  # published; the crash came before the state said so
    h = sink(kafka_cluster, topic, name)
    assert h.bolt.published == txid and h.bolt.metrics["skipped"] == 1
    assert read_all(kafka_cluster, topic) == [("a", "1")]
    h.close()


def test_a_crash_after_prepare_publishes_nothing_and_the_replay_once(kafka_cluster, names):  # noqa: F811
    topic, name = names
    h = sink(kafka_cluster, topic, name)
    h.feed(["a", "1"], tracked=False)
    h.prepare_checkpoint()
    h = sink(kafka_cluster, topic, name)
    h.feed(["a", "1"], tracked=False)
    h.checkpoint()
    assert read_all(kafka_cluster, topic) == [("a", "1")]
    h.close()


def test_a_tuple_that_cannot_be_mapped_fails_alone_naming_the_component(kafka_cluster, names):  # noqa: F811
    topic, name = names
    h = sink(kafka_cluster, topic, name)
    bad = h.feed([None, {"not": "bytes"}], tracked=False)
    h.feed(["a", "1"], tracked=False)
    h.checkpoint()
    assert h.failed == [bad]
    assert "cannot write [None, {'not': 'bytes'}] from component 'count'" in str(h.errors[0])
    assert "its value must be str, bytes or None, got dict" in str(h.errors[0])
    assert read_all(kafka_cluster, topic) == [("a", "1")]
    h.close()


@pytest.mark.processes
def test_kill_9_of_the_sinks_and_the_checkpoint_spouts_workers_and_a_rerun_leave_each_record_once(
        kafka_cluster, tmp_path):  # noqa: F811
    kills = ["sink", "checkpoint"]
    source = KafkaSource(kafka_cluster, make_lines(1500, seed=2), parts=eo.parts(kills, stop_and_rerun=True))
    out = f"eo-out-{uuid.uuid4().hex[:8]}"
    bolt = KafkaBolt(kafka_cluster, out, mapper=lambda t: (t.values[0], str(t.values[1])), exactly_once=True,
                     marker_topic=f"{out}.markers")
    topology = eo.build(source.spout(), bolt)
    conf = eo.conf({"path": str(tmp_path / "state")}, free_ports(3))
    read = lambda: [(k, int(v)) for k, v in read_all(kafka_cluster, out)]  # noqa: E731
    report = eo.run(topology, conf, read, source, kills, stop_and_rerun=True)
    assert [k["component"] for k in report["kills"]] == kills
