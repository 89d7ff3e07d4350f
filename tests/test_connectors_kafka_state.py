"""StatefulKafkaSpout -> split -> a stateful count (examples/stateful_wordcount.py's bolts)
against librdkafka's mock cluster (tests/kafka_mock.py): the committed counts are exactly
those of the records produced, through rollbacks (in-process) and ``kill -9`` of the spout's
worker and of the count's worker (worker processes, state in SQLite); each spout task reads the
partitions ``p % n == its index``, its committed state holds the next offset of each, and the
group's offsets in Kafka follow the commits."""

from __future__ import annotations

import logging
import os
import random
import sys
import threading
from collections import Counter

import pytest

from helpers import KILL_9_CONF, kill_9_spout_worker_mid_stream, tasks_of
from kafka_mock import PARTITIONS, WAIT, kafka_cluster, names, offsets  # noqa: F401  (fixtures)
from squall import LocalCluster, TopologyBuilder
from squall.connectors.kafka import AT_MOST_ONCE, KafkaSpoutConfig, StatefulKafkaSpout
from squall.api.stateful import StatefulSpout
from squall.testing import committed_state, wait_until
from wordcount_state import counts_of

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's bolts; workers import it too

pytestmark = pytest.mark.timeout(90)


def make_lines(count: int, seed: int = 11) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(swc.WORDS) for _ in range(rng.randint(3, 9))) for _ in range(count)]


def word_counts(lines: list[str]) -> Counter:
    return Counter(w for line in lines for w in line.split())


def produce_lines(servers: str, topic: str, lines: list[str], start: int = 0) -> None:
    """Line ``start + i`` on partition ``(start + i) % PARTITIONS``."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": servers, "logger": logging.getLogger("tests.kafka")})
    for i, line in enumerate(lines, start):
        producer.produce(topic, value=line, partition=i % PARTITIONS)
    assert producer.flush(10) == 0


def as_line(record):
    return [record.value]


def stateful_spout(servers: str, topic: str, group: str, **more) -> StatefulKafkaSpout:
    return StatefulKafkaSpout(KafkaSpoutConfig(servers, topics=[topic], group_id=group, translator=as_line,
                                               output_fields=["line"], **more))


def word_count(spout, count, spouts: int, counters: int):
    builder = TopologyBuilder()
    builder.set_spout("spout", spout, spouts)
    builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("spout")
    builder.set_bolt("count", count, counters).fields_grouping("split", ["word"])
    return builder.create_topology()


def committed_words(name, topology, conf) -> int:
    return sum(counts_of(name, topology, conf).values())


def committed_positions(name, topology, conf) -> dict[int, dict[str, int]]:
    return committed_state(name, topology, "spout", conf)


class RefusesMidStream(swc.WordCount):
    """The word count, whose task of index 0 refuses the prepare of ``failures`` checkpoints
    once it has counted ``after`` words (each refusal: a rollback of every component)."""

    def __init__(self, after: int, failures: int) -> None:
        self.after, self.failures = after, failures

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.first, self.seen = context.get_this_task_index() == 0, 0

    def execute(self, tup):
        self.seen += 1
        super().execute(tup)

    def pre_prepare(self, txid):
        if self.first and self.failures and self.seen >= self.after:
            self.failures -= 1
            raise RuntimeError(f"prepare of {txid} refused")


def test_a_pattern_or_another_guarantee_is_refused(kafka_cluster):  # noqa: F811
    assert isinstance(stateful_spout(kafka_cluster, "t", "g"), StatefulSpout)
    with pytest.raises(ValueError, match="give topics, not a pattern"):
        StatefulKafkaSpout(KafkaSpoutConfig(kafka_cluster, pattern="t.*"))
    with pytest.raises(ValueError, match="processing_guarantee 'AT_MOST_ONCE' does not apply"):
        stateful_spout(kafka_cluster, "t", "g", processing_guarantee=AT_MOST_ONCE)


def test_counts_are_exact_through_rollbacks(cluster, kafka_cluster, names, offsets):  # noqa: F811
    topic, group = names
    lines = make_lines(3000)
    produce_lines(kafka_cluster, topic, lines[:1500])
    conf = {"topology.state.checkpoint.interval.ms": 100, "topology.message.timeout.secs": 5}
    topology = word_count(stateful_spout(kafka_cluster, topic, group), RefusesMidStream(after=1000, failures=2),
                          spouts=2, counters=2)
    cluster.submit_topology("kexact", conf, topology)
    wait_until(lambda: committed_words("kexact", topology, conf) > 0, timeout=WAIT, interval=0.05,
               message="a first commit with counts")
    produce_lines(kafka_cluster, topic, lines[1500:], start=1500)
    wait_until(lambda: counts_of("kexact", topology, conf) == word_counts(lines), timeout=WAIT, interval=0.05,
               message="the committed counts exact")
    errors = cluster.get_topology_info("kexact")["components"]["count"]["errors"]
    assert sum(e["count"] for e in errors) == 2 and all("refused" in e["error"] for e in errors)  # two rollbacks
    # task i of 2 read partitions i and i + 2; its committed state: the next offset of each (the end)
    high = offsets.high()
    first, second = tasks_of(cluster, "kexact", "spout")
    wait_until(lambda: committed_positions("kexact", topology, conf) == {
        first: {f"{topic}:0": high[0], f"{topic}:2": high[2]},
        second: {f"{topic}:1": high[1], f"{topic}:3": high[3]},
    }, timeout=WAIT, interval=0.05, message="the spout's positions committed at the end of each partition")
    # Kafka gets the committed positions (for monitoring); each task sought at open, at INITSTATE and
    # at each of the two rollbacks
    wait_until(lambda: offsets.committed() == high, timeout=WAIT, message="the group's offsets committed")
    metrics = cluster.get_topology_info("kexact")["components"]["spout"]["metrics"]
    assert metrics["seeks"] >= 2 * 4 and metrics["emitted"] > len(lines), metrics  # rolled back: read again
    assert counts_of("kexact", topology, conf) == word_counts(lines)


@pytest.mark.processes
@pytest.mark.timeout(200)
def test_kill_9_of_the_spout_and_the_count_workers_leaves_the_exact_counts(kafka_cluster, names, offsets,  # noqa: F811
                                                                           tmp_path):
    topic, group = names
    lines = make_lines(4000)
    expected = word_counts(lines)
    total, gated = sum(expected.values()), len(lines) * 3 // 5
    conf = {**KILL_9_CONF, "topology.state.checkpoint.interval.ms": 200, "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state")}}
    # two spout tasks, one per worker; the count on the second worker: each kill kills a spout task
    topology = word_count(stateful_spout(kafka_cluster, topic, group), swc.WordCount(), spouts=2, counters=1)
    produce_lines(kafka_cluster, topic, lines[:40])  # the topic, before the spout opens
    released, produced = threading.Event(), []

    def produce() -> None:
        """3/5 of the lines paced (400/s until ``released``: the kills land while they flow, and
        before the end), the rest once ``released``."""
        for start in range(40, gated, 40):
            produce_lines(kafka_cluster, topic, lines[start:start + 40], start)
            released.wait(0.1)
        released.wait(120)
        produce_lines(kafka_cluster, topic, lines[gated:], gated)
        produced.append(True)

    progress = lambda: committed_words("kcrash", topology, conf)  # noqa: E731
    producer = threading.Thread(target=produce, daemon=True)
    try:
        with LocalCluster(processes=True) as cluster:
            cluster.submit_topology("kcrash", conf, topology)
            workers = cluster.get_topology_info("kcrash")["workers"]
            by_worker = [{e["component"] for e in w["executors"]} for w in workers]
            assert [("spout" in c, "count" in c) for c in by_worker] == [(True, False), (True, True)], by_worker
            producer.start()
            kill_9_spout_worker_mid_stream(cluster, "kcrash", progress, total)
            kill_9_spout_worker_mid_stream(cluster, "kcrash", progress, total, spout="count")
            released.set()
            wait_until(lambda: counts_of("kcrash", topology, conf) == expected, timeout=120, interval=0.2,
                       message="the committed counts exact")
            assert [w["restarts"] for w in cluster.get_topology_info("kcrash")["workers"]] == [1, 1]
    finally:
        released.set()
        producer.join(30)
    assert produced
    high = offsets.high()
    positions = {k: v for state in committed_positions("kcrash", topology, conf).values() for k, v in state.items()}
    assert positions == {f"{topic}:{p}": high[p] for p in range(PARTITIONS)}
