"""Exactly-once KafkaBolt throughput against the at-least-once KafkaBolt, in the same run.

One topology per variant in a ``LocalCluster()`` in this process: a stateful spout emitting
--records ready-made records (its position in its state) -> ``KafkaBolt`` into a topic of 4
partitions, on a Kafka broker process with real transactions (:class:`squall.testing.KafkaBroker`,
``noida-db``'s binary; librdkafka's mock cluster with --mock). The topology is checkpointed in
both variants (the spout is stateful), every ``--interval`` ms:

* **at least once**: ``KafkaBolt(...)``: each record produced as it arrives, the input acked on
  its delivery report;
* **exactly once**: ``KafkaBolt(..., exactly_once=True)``: each checkpoint epoch's records kept in
  the checkpoint and produced after it commits, in one transaction with the task's marker.

Records/s from the moment the first records can be read back (by a ``read_committed`` consumer)
until all can, so the start-up is left out (an exactly-once run's first records appear with the
first commit); the variants alternate, the best of --runs counts. Every
run checks that the topic holds exactly --records records at the end. Target (issue 37):
exactly once / at least once >= 0.7.

Reproduce:
    pip install -e ".[test]"        # confluent-kafka, noida-db
    python benchmarks/exactly_once_kafka.py [--records 500000] [--runs 3] [--interval 1000] [--mock]
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
import uuid
from typing import Any

from squall import LocalCluster, StatefulSpout, TopologyBuilder
from squall.connectors.kafka import KafkaBolt
from squall.testing import KafkaBroker, KafkaMockCluster

PARTITIONS = 4
LOG = logging.getLogger("bench.kafka")


class Records(StatefulSpout):
    """``count`` records ``(key, value)``, up to 500 a call, its position in its state."""

    outputs = ["key", "message"]

    def __init__(self, count: int) -> None:
        self.count = count

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state, self.next = state, state.get("next", 0)

    def next_tuple(self) -> None:
        end = min(self.next + 500, self.count)
        for i in range(self.next, end):
            self.collector.emit([f"k{i % 1000}", f"record {i:09d}"])
        if end > self.next:
            self.next = end
            self.state.put("next", end)


class Reader:
    """Counts the records of ``topic`` a ``read_committed`` consumer has read so far."""

    def __init__(self, servers: str, topic: str) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.consumer = Consumer({"bootstrap.servers": servers, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                                  "enable.auto.commit": False, "isolation.level": "read_committed",
                                  "logger": LOG})
        self.consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        self.read = 0

    def poll(self) -> int:
        self.read += sum(1 for m in self.consumer.consume(10_000, timeout=0.05) if m.error() is None)
        return self.read

    def close(self) -> None:
        self.consumer.close()


def run(servers: str, create: Any, exactly_once: bool, records: int, interval: int) -> float:
    """Records/s of one variant (see the module)."""
    topic = f"bench-{uuid.uuid4().hex[:8]}"
    create(topic, f"{topic}.markers")
    options = {"exactly_once": True, "marker_topic": f"{topic}.markers"} if exactly_once else {}
    builder = TopologyBuilder()
    builder.set_spout("records", Records(records))
    builder.set_bolt("out", KafkaBolt(servers, topic, **options)).shuffle_grouping("records")
    conf = {"topology.state.checkpoint.interval.ms": interval, "topology.max.spout.pending": 5000}
    reader = Reader(servers, topic)
    try:
        with LocalCluster() as cluster:
            cluster.submit_topology(f"bench-{topic}", conf, builder.create_topology())
            deadline = time.monotonic() + 600
            while reader.poll() == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{reader.read} of {records} records read in 600 s")
            started, first = time.monotonic(), reader.read
            while reader.poll() < records:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{reader.read} of {records} records read in 600 s")
            elapsed = time.monotonic() - started
        reader.poll()
        if reader.read != records:
            raise SystemExit(f"{'exactly' if exactly_once else 'at least'} once: {reader.read} records read, "
                             f"{records} written")
        return (records - first) / elapsed
    finally:
        reader.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--interval", type=int, default=1000, help="topology.state.checkpoint.interval.ms")
    parser.add_argument("--mock", action="store_true", help="librdkafka's mock cluster (no transaction isolation)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as directory:
        if args.mock:
            cluster = KafkaMockCluster(3)
            create = lambda *topics: None  # noqa: E731 - the mock makes topics of 4 partitions on first use
        else:
            cluster = KafkaBroker(directory)
        with cluster:
            if not args.mock:
                create = cluster.create_topics
            best: dict[bool, float] = {True: 0.0, False: 0.0}
            for n in range(args.runs):
                for exactly_once in (False, True):
                    rate = run(cluster.bootstrap_servers, create, exactly_once, args.records, args.interval)
                    best[exactly_once] = max(best[exactly_once], rate)
                    print(f"run {n + 1}: {'exactly once ' if exactly_once else 'at least once'}: {rate:10,.0f} records/s",
                          flush=True)
    where = "librdkafka's mock cluster" if args.mock else "noida-db (Kafka protocol, real transactions)"
    print(f"\n{args.records:,} records, checkpoints every {args.interval} ms, on {where}; best of {args.runs}:")
    print(f"  at least once: {best[False]:10,.0f} records/s")
    print(f"  exactly once:  {best[True]:10,.0f} records/s")
    print(f"  exactly once / at least once: {best[True] / best[False]:.2f} (target >= 0.7)")


if __name__ == "__main__":
    main()
