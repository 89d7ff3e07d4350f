"""The Kafka connectors against librdkafka's mock cluster (tests/kafka_mock.py): the spout's
processing guarantees (acks, commits, replays, restarts, rebalances, first-poll strategies,
bad records, an unreachable cluster) and the bolt's delivery-confirmed acks."""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections import Counter

import pytest

from helpers import (
    CLOSED_PORT, KILL_9_CONF, HoldBolt, Recorder, RecordSink, errors_of, held, kill_9_spout_worker_mid_stream,
    logged, received, record,
)
from kafka_mock import (  # noqa: F401  (fixtures: kafka_cluster, names, offsets)
    PARTITIONS, WAIT, Offsets, consumer as _consumer, kafka_cluster, names, offsets,
)
from squall import Bolt, TopologyBuilder
from squall.connectors.kafka import (
    AT_MOST_ONCE, EARLIEST, LATEST, UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST, KafkaBolt, KafkaSpout,
    KafkaSpoutConfig, RetryPolicy, Route,
)
from squall.api.errors import TopologySetupError
from squall.testing import FeederSpout, KafkaMockCluster, wait_until

pytestmark = pytest.mark.timeout(60)

GROUP_SESSION = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}


def _produce(servers: str, topic: str, start: int, stop: int, partition: int | None = None) -> None:
    """Records ``n`` = start..stop-1 (value ``str(n)``), on ``partition`` or round robin."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "logger": logging.getLogger("tests.kafka")})
    for n in range(start, stop):
        producer.produce(topic, value=str(n), key=f"k{n}", partition=n % PARTITIONS if partition is None else partition)
    assert producer.flush(10) == 0


def as_numbered(record):
    return [int(record.value), record.partition, record.offset]


def _spout(servers: str, topic: str, group: str, **more) -> KafkaSpout:
    more.setdefault("offset_commit_period_ms", 100)
    more.setdefault("translator", as_numbered)
    more.setdefault("output_fields", ["n", "partition", "offset"])
    # the mock cluster ignores a consumer leaving its group: the group waits out the member's
    # session (45 s by default; 6 s is the mock's minimum) before giving its partitions to others
    more.setdefault("consumer_config", GROUP_SESSION)
    return KafkaSpout(KafkaSpoutConfig(servers, topics=[topic], group_id=group, **more))


def _topology(spout, sink, parallelism: int = 1, spout_id: str = "spout") -> object:
    builder = TopologyBuilder()
    builder.set_spout(spout_id, spout, parallelism)
    builder.set_bolt("sink", sink).shuffle_grouping(spout_id)
    return builder.create_topology()


def _assignments(caplog, spout_ids: list[str]) -> dict[str, set[int]]:
    """The partitions each of the spouts ``spout_ids`` holds, as their logged assignments and revokes say."""
    held: dict[str, set[int]] = {}
    for entry in caplog.records:
        message = entry.getMessage()
        spout = next((s for s in spout_ids if message.startswith(f"KafkaSpout {s!r}:")), None)
        event = re.search(r": (assigned|revoked) (.*)$", message)
        if spout is not None and event is not None:
            partitions = {int(place.rsplit(":", 1)[1]) for place in event.group(2).split(", ")}
            if event.group(1) == "assigned":  # consumer.assign: the whole new assignment
                held[spout] = partitions
            else:
                held[spout] = held.get(spout, set()) - partitions
    return held


def _fully_committed(offsets: Offsets) -> bool:
    return offsets.committed() == offsets.high()


class ByNumberBolt(Bolt):
    """Records every ``n``; acks those below ``limit``, and fails (``fail_rest``) or holds the others."""

    def __init__(self, key, limit, fail_rest=False):
        self.key, self.limit, self.fail_rest = key, limit, fail_rest

    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        record(self.key, tup.values[0])
        if tup.values[0] < self.limit:
            self.collector.ack(tup)
        elif self.fail_rest:
            self.collector.fail(tup)


# -- the spout ------------------------------------------------------------------------------


def test_every_record_is_delivered_once_and_committed(cluster, kafka_cluster, names, offsets):  # noqa: F811
    topic, group = names
    _produce(kafka_cluster, topic, 0, 200)
    cluster.submit_topology("once", {}, _topology(_spout(kafka_cluster, topic, group), RecordSink("n")))
    _produce(kafka_cluster, topic, 200, 300)  # while it runs
    wait_until(lambda: len(logged("n")) >= 300 and _fully_committed(offsets), timeout=WAIT,
               message="every record processed and committed")
    assert Counter(logged("n")) == Counter(range(300))
    assert offsets.high() == {p: 75 for p in range(PARTITIONS)}


def test_a_failed_tuple_is_replayed_and_its_offset_not_committed_until_acked(cluster, kafka_cluster, names,  # noqa: F811
                                                                           offsets):
    topic, group = names
    _produce(kafka_cluster, topic, 0, 10, partition=0)
    spout = _spout(kafka_cluster, topic, group, retry=RetryPolicy(initial_delay_ms=20))
    cluster.submit_topology("replay", {}, _topology(spout, HoldBolt("held")))
    wait_until(lambda: len(held("held")) == 10, timeout=WAIT, message="every record held")
    for collector, tup in held("held"):
        if tup.values[0] == 3:
            collector.fail(tup)
        else:
            collector.ack(tup)
    wait_until(lambda: len(held("held")) == 11, timeout=WAIT, message="the failed record redelivered")
    redelivered = held("held")[-1]
    assert redelivered[1].values[0] == 3
    wait_until(lambda: offsets.committed()[0] == 3, timeout=WAIT, message="offsets 0-2 committed")
    # The commit stops at the un-acked offset 3. A barrier through the spout's commits: once the
    # spout has the nine acks of partition 0, a record of partition 1 goes through and is acked; the
    # commit carrying it is one request for every partition, made with all of partition 0's acks in.
    wait_until(lambda: cluster.get_topology_info("replay")["components"]["spout"]["metrics"]["acked"] == 9,
               timeout=WAIT, message="the spout has the acks of partition 0")
    _produce(kafka_cluster, topic, 10, 11, partition=1)
    wait_until(lambda: len(held("held")) == 12, timeout=WAIT, message="the record of partition 1 held")
    collector, tup = held("held")[-1]
    collector.ack(tup)
    wait_until(lambda: offsets.committed()[1] == 1, timeout=WAIT, message="partition 1 committed")
    assert offsets.committed()[0] == 3, "committed past the un-acked offset 3"
    collector, tup = redelivered
    collector.ack(tup)
    wait_until(lambda: offsets.committed()[0] == 10, timeout=WAIT, message="every offset committed")
    assert sorted(logged("held")) == sorted([*range(11), 3])


def test_a_restarted_topology_loses_nothing_and_replays_no_committed_record(cluster, kafka_cluster, names,  # noqa: F811
                                                                            offsets):
    topic, group = names
    _produce(kafka_cluster, topic, 0, 100)  # n ascending within each partition
    cluster.submit_topology("restart", {}, _topology(_spout(kafka_cluster, topic, group), ByNumberBolt("first", 50)))
    # partition p holds p, p+4, ...: the first n >= 50 of each is at offset 13 (12 for 0 and 1)
    expected = {p: (50 - p + PARTITIONS - 1) // PARTITIONS for p in range(PARTITIONS)}
    wait_until(lambda: len(logged("first")) == 100 and offsets.committed() == expected, timeout=WAIT,
               message="the acked half committed")
    cluster.kill_topology("restart", wait_secs=0)
    wait_until(lambda: "restart" not in cluster.get_topologies(), timeout=WAIT, message="the topology killed")
    assert offsets.committed() == expected
    _produce(kafka_cluster, topic, 100, 120)
    cluster.submit_topology("restart", {}, _topology(_spout(kafka_cluster, topic, group), RecordSink("second")))
    wait_until(lambda: len(logged("second")) >= 70 and _fully_committed(offsets), timeout=WAIT,
               message="the held and the new records processed after the restart")
    assert Counter(logged("second")) == Counter(range(50, 120))  # the committed half is not redelivered


def test_a_rebalance_loses_no_record_and_no_ack(cluster, kafka_cluster, names, offsets, caplog):  # noqa: F811
    caplog.set_level(logging.INFO, logger="squall.connectors.kafka")
    topic, group = names
    _produce(kafka_cluster, topic, 0, 200)
    cluster.submit_topology("first", {}, _topology(_spout(kafka_cluster, topic, group), RecordSink("n"),
                                                   spout_id="first"))
    wait_until(lambda: len(logged("n")) >= 200 and _fully_committed(offsets), timeout=WAIT,
               message="the first spout's records processed and committed")
    # a second consumer of the group: the partitions are revoked from the first and spread over both
    cluster.submit_topology("second", {}, _topology(_spout(kafka_cluster, topic, group), RecordSink("n"),
                                                    spout_id="second"))

    def spread() -> bool:  # the group may rebalance more than once before it settles
        held = _assignments(caplog, ["first", "second"])
        return len(held) == 2 and all(held.values()) and sorted([*held["first"], *held["second"]]) == [0, 1, 2, 3]

    wait_until(spread, timeout=WAIT, message="the partitions spread over both spouts")
    _produce(kafka_cluster, topic, 200, 400)
    wait_until(lambda: set(logged("n")) == set(range(400)) and _fully_committed(offsets), timeout=WAIT,
               message="every record processed and committed")
    # a record is processed twice only when in flight during the rebalance: none here
    assert Counter(logged("n")) == Counter(range(400))


def test_a_spout_task_beyond_the_partition_count_gets_nothing(cluster, kafka_cluster, names, offsets):  # noqa: F811
    topic, group = names
    _produce(kafka_cluster, topic, 0, 100)
    spout = _spout(kafka_cluster, topic, group)
    cluster.submit_topology("wide", {}, _topology(spout, RecordSink("n"), parallelism=PARTITIONS + 1))
    wait_until(lambda: len(logged("n")) >= 100 and _fully_committed(offsets), timeout=WAIT,
               message="every record processed and committed")
    # the tasks join one after the other: the group rebalances while records are in flight, and
    # the mock refuses commits during a rebalance, so some records may be processed twice
    assert set(logged("n")) == set(range(100))


def test_first_poll_offset_strategies_on_a_group_with_committed_offsets(cluster, kafka_cluster):  # noqa: F811
    topic = f"topic-{uuid.uuid4().hex[:12]}"
    _produce(kafka_cluster, topic, 0, 10, partition=0)
    strategies = (EARLIEST, LATEST, UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST)
    builder = TopologyBuilder()
    for strategy in strategies:
        group = f"group-{strategy}-{topic}"
        committing = Offsets(kafka_cluster, topic, group)
        committing.commit(0, 6)
        committing.close()
        builder.set_spout(strategy, _spout(kafka_cluster, topic, group, first_poll_offset_strategy=strategy))
        builder.set_bolt(f"sink-{strategy}", RecordSink(strategy)).shuffle_grouping(strategy)
    cluster.submit_topology("strategies", {}, builder.create_topology())
    # LATEST reads from the end as of an offset lookup it makes some time after its assignment, which
    # no client sees: one record more per poll until it got one (any record produced after the lookup)
    n = 10

    def latest_got_one() -> bool:
        nonlocal n
        if logged(LATEST) and logged(LATEST)[-1] >= 10:
            return True
        _produce(kafka_cluster, topic, n, n + 1, partition=0)
        n += 1
        return False

    wait_until(latest_got_one, timeout=WAIT, interval=0.2, message="LATEST got a record produced after it started")
    wait_until(lambda: all(logged(k) and logged(k)[-1] == n - 1 for k in strategies), timeout=WAIT,
               message="every spout reached the last record")
    later = list(range(10, n))
    assert logged(EARLIEST) == list(range(10)) + later  # committed offsets ignored: from the beginning
    assert logged(UNCOMMITTED_EARLIEST) == list(range(6, 10)) + later  # from the committed offset
    assert logged(UNCOMMITTED_LATEST) == list(range(6, 10)) + later
    assert all(x >= 10 for x in logged(LATEST))  # from the end: none of the first 10


def reject_bad(record):
    if record.value == "bad":
        raise ValueError("no thanks")
    if record.value == "short":
        return Route("good", [record.value])  # one value for two fields: the emit raises
    return Route("good", [int(record.value), record.offset])


def test_a_record_the_translator_rejects_goes_to_the_error_stream(cluster, kafka_cluster, names, offsets):  # noqa: F811
    from confluent_kafka import Producer

    topic, group = names
    producer = Producer({"bootstrap.servers": kafka_cluster})
    for value in ["0", "1", "bad", "3", "short"]:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(10) == 0
    builder = TopologyBuilder()
    builder.set_spout("spout", _spout(kafka_cluster, topic, group, translator=reject_bad,
                                      output_fields={"good": ["n", "offset"]}))
    builder.set_bolt("sink", Recorder()).shuffle_grouping("spout", "good").shuffle_grouping("spout", "error")
    cluster.submit_topology("translate", {}, builder.create_topology())
    wait_until(lambda: len(received("sink")) == 5 and offsets.committed()[0] == 5, timeout=WAIT,
               message="every record processed and committed")
    by_stream: dict[str, list] = {}
    for r in received("sink"):
        by_stream.setdefault(r["stream"], []).append(r["values"])
    assert by_stream["good"] == [[0, 0], [1, 1], [3, 3]]
    assert by_stream["error"][0] == [topic, 0, 2, "ValueError: no thanks"]
    assert by_stream["error"][1][:3] == [topic, 0, 4] and "declares 2 fields" in by_stream["error"][1][3]


def test_a_record_failing_more_than_max_retries_is_given_up_on_the_error_stream(cluster, kafka_cluster, names,  # noqa: F811
                                                                               offsets):
    topic, group = names
    _produce(kafka_cluster, topic, 0, 1, partition=0)
    builder = TopologyBuilder()
    builder.set_spout("spout", _spout(kafka_cluster, topic, group,
                                      retry=RetryPolicy(initial_delay_ms=10, max_retries=2)))
    builder.set_bolt("failer", ByNumberBolt("tries", 0, fail_rest=True)).shuffle_grouping("spout")
    builder.set_bolt("errors", Recorder()).shuffle_grouping("spout", "error")
    cluster.submit_topology("give-up", {}, builder.create_topology())
    wait_until(lambda: received("errors") and offsets.committed()[0] == 1, timeout=WAIT,
               message="the record given up and committed")
    assert logged("tries") == [0, 0, 0]  # the first delivery and 2 retries
    [error] = received("errors")
    assert error["values"][:3] == [topic, 0, 0] and "given up" in error["values"][3]


def test_at_most_once_commits_before_emitting(cluster, kafka_cluster, names, offsets):  # noqa: F811
    topic, group = names
    _produce(kafka_cluster, topic, 0, 20)
    spout = _spout(kafka_cluster, topic, group, processing_guarantee=AT_MOST_ONCE)
    cluster.submit_topology("at-most", {}, _topology(spout, HoldBolt("held")))  # never acks
    wait_until(lambda: len(held("held")) == 20 and _fully_committed(offsets), timeout=WAIT,
               message="every record emitted, its offset committed though never acked")
    assert sorted(logged("held")) == list(range(20))


def test_an_unreachable_cluster_fails_the_submission_naming_it(cluster):
    port = CLOSED_PORT
    spout = KafkaSpout(KafkaSpoutConfig(f"127.0.0.1:{port}", topics=["t"], group_id="g", open_timeout_ms=1500))
    with pytest.raises(TopologySetupError) as e:
        cluster.submit_topology("unreachable", {}, _topology(spout, RecordSink("n")))
    assert f"127.0.0.1:{port}" in str(e.value) and "'spout'" in str(e.value)


def test_a_missing_topic_fails_the_submission_naming_it(cluster, kafka_cluster):  # noqa: F811
    spout = KafkaSpout(KafkaSpoutConfig(kafka_cluster, topics=["no-such-topic"], group_id="g"))
    with pytest.raises(TopologySetupError) as e:
        cluster.submit_topology("missing", {}, _topology(spout, RecordSink("n")))
    assert "'no-such-topic' does not exist" in str(e.value)


# -- the bolt -------------------------------------------------------------------------------


def _read_all(servers: str, topic: str, count: int) -> list[tuple[str, str]]:
    consumer = _consumer(servers, f"reader-{uuid.uuid4().hex}")
    consumer.subscribe([topic])
    got: list[tuple[str, str]] = []
    try:
        deadline = time.monotonic() + WAIT
        while len(got) < count and time.monotonic() < deadline:
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                got.append((message.key().decode(), message.value().decode()))
    finally:
        consumer.close()
    return got


def test_the_bolt_acks_each_tuple_once_written(cluster, kafka_cluster, names):  # noqa: F811
    topic, _ = names
    feeder = FeederSpout(["key", "message"])
    builder = TopologyBuilder()
    builder.set_spout("feeder", feeder)
    builder.set_bolt("kafka", KafkaBolt(kafka_cluster, topic)).shuffle_grouping("feeder")
    cluster.submit_topology("bolt", {}, builder.create_topology())
    rows = [[f"k{i}", f"v{i}"] for i in range(20)]
    for i, row in enumerate(rows):
        feeder.feed(row, msg_id=i)
    wait_until(lambda: len(feeder.acked) == 20, timeout=WAIT, message="every tuple acked")
    assert not feeder.failed
    assert sorted(_read_all(kafka_cluster, topic, 20)) == sorted(tuple(r) for r in rows)


def _by_topic_field(tup):
    return tup.values[0]


def _needs_int(tup):
    return None, str(int(tup.values[1]))


def test_the_bolt_fails_a_tuple_it_cannot_map_with_the_reason(cluster, kafka_cluster, names):  # noqa: F811
    topic, _ = names
    feeder = FeederSpout(["topic", "n"])
    builder = TopologyBuilder()
    builder.set_spout("feeder", feeder)
    builder.set_bolt("kafka", KafkaBolt(kafka_cluster, _by_topic_field, _needs_int)).shuffle_grouping("feeder")
    cluster.submit_topology("unmappable", {}, builder.create_topology())
    feeder.feed([topic, "1"], msg_id=0)
    feeder.feed([topic, "many"], msg_id=1)
    wait_until(lambda: len(feeder.acked) + len(feeder.failed) == 2, timeout=WAIT, message="both settled")
    assert feeder.acked == [0] and feeder.failed == [1]
    errors = [e["error"] for e in errors_of(cluster, "unmappable", "kafka")]
    assert any("cannot map" in e and "'feeder'" in e and "invalid literal for int()" in e for e in errors), errors


def _to_partition(tup):
    return tup.values[0], tup.values[1], tup.values[2]


def test_the_bolt_fails_a_tuple_kafka_refuses_with_the_reason(cluster, kafka_cluster, names):  # noqa: F811
    topic, _ = names
    _produce(kafka_cluster, topic, 0, 1)  # the topic, with its 4 partitions
    feeder = FeederSpout(["key", "message", "partition"])
    builder = TopologyBuilder()
    builder.set_spout("feeder", feeder)
    builder.set_bolt("kafka", KafkaBolt(kafka_cluster, topic, _to_partition)).shuffle_grouping("feeder")
    cluster.submit_topology("refused", {}, builder.create_topology())
    feeder.feed(["a", "kept", 1], msg_id=0)
    # no such partition: refused by produce() once the producer knows the topic's partitions,
    # else by the delivery report
    feeder.feed(["b", "refused", PARTITIONS + 3], msg_id=1)
    wait_until(lambda: len(feeder.acked) + len(feeder.failed) == 2, timeout=WAIT, message="both settled")
    assert feeder.acked == [0] and feeder.failed == [1]
    errors = [e["error"] for e in errors_of(cluster, "refused", "kafka")]
    assert any("'feeder'" in e and "Unknown partition" in e for e in errors), errors
    assert ("a", "kept") in _read_all(kafka_cluster, topic, 2)


def test_the_bolt_fails_a_tuple_whose_delivery_report_is_an_error(cluster):
    # a cluster of its own, shut down once the bolt wrote to it: produce() takes the next record
    # (librdkafka queues it), and its delivery report says it timed out (message.timeout.ms)
    feeder = FeederSpout(["key", "message"])
    builder = TopologyBuilder()
    builder.set_spout("feeder", feeder)
    with KafkaMockCluster(1) as doomed:
        bolt = KafkaBolt(doomed.bootstrap_servers, "doomed", producer_config={"message.timeout.ms": 500})
        builder.set_bolt("kafka", bolt).shuffle_grouping("feeder")
        cluster.submit_topology("undelivered", {}, builder.create_topology())
        feeder.feed(["a", "written"], msg_id=0)
        wait_until(lambda: feeder.acked == [0], timeout=WAIT, message="the first tuple written and acked")
    feeder.feed(["b", "lost"], msg_id=1)
    wait_until(lambda: feeder.failed == [1], timeout=WAIT, message="the second tuple failed")
    assert feeder.acked == [0]
    errors = [e["error"] for e in errors_of(cluster, "undelivered", "kafka")]
    # (a long error is kept with its middle elided)
    assert any("KafkaConnectorError: KafkaBolt 'kafka' at " in e and "did not confirm" in e and "'feeder'" in e
               and "Message timed out" in e for e in errors), errors


@pytest.mark.processes
@pytest.mark.timeout(150)
def test_kill_9_of_the_spout_worker_loses_no_record(kafka_cluster, names):  # noqa: F811
    from squall import LocalCluster

    topic, group = names
    total, out = 4000, f"{topic}-out"
    _produce(kafka_cluster, topic, 0, total)
    _produce(kafka_cluster, out, 0, 0)  # nothing: the bolt's open checks that the topic exists
    spout = KafkaSpout(KafkaSpoutConfig(kafka_cluster, topics=[topic], group_id=group, offset_commit_period_ms=100,
                                        consumer_config=GROUP_SESSION))
    builder = TopologyBuilder()
    builder.set_spout("spout", spout)
    builder.set_bolt("kafka", KafkaBolt(kafka_cluster, out, lambda t: (t.values[3], t.values[4]))).shuffle_grouping(
        "spout")
    reader = _consumer(kafka_cluster, f"reader-{group}")
    reader.subscribe([out])
    arrived: set[bytes] = set()

    def take() -> int:
        """Moves what reached the output topic into ``arrived`` (a record may arrive twice)."""
        for message in reader.consume(1000, timeout=0.2):
            if message.error() is None:
                arrived.add(message.value())
        return len(arrived)

    try:
        with LocalCluster(processes=True) as cluster:
            cluster.submit_topology("kill9", KILL_9_CONF, builder.create_topology())
            kill_9_spout_worker_mid_stream(cluster, "kill9", take, total)
            wait_until(lambda: take() == total, timeout=100, interval=0, message="every record written")
    finally:
        reader.close()
    assert arrived == {str(n).encode() for n in range(total)}
