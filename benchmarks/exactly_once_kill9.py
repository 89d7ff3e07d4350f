"""Stress runner for exactly-once output under ``kill -9``: the scenario of
tests/exactly_once_run.py, many times, counting the runs whose output was not exact.

Each run: a fresh input (--lines lines of 1 to 3 words, seeded by the run's number) produced to a
topic in five parts, the first before the submit; ``StatefulKafkaSpout x2 -> split x2 -> stateful
count x2 (emits (word, n), 2 ms a word) -> KafkaBolt(exactly_once=True) x2`` on 3 worker
processes, state in SQLite; ``kill -9`` of the worker of a sink task, of a count's, of the
checkpoint spout's, each once half of the latest part's output is visible (the next part follows
the kill), then a stop and a rerun under the same name;
then every ``(word, n)`` must be read back once by a ``read_committed`` consumer (none twice, none
missing). The broker is a process with real transactions (:class:`squall.testing.KafkaBroker`,
``noida-db``); ``--sink`` picks the files, Redis or SQLite sink instead of Kafka's.

A line per run: ``exact`` or ``INEXACT``/``ERROR`` with the reason, its time and where its kills
landed (the share of the output visible). Then "inexact runs: X of N".

Reproduce (a run takes 15-30 s on 2 cores; nothing else should run meanwhile):

    python benchmarks/exactly_once_kill9.py --runs 100
    python benchmarks/exactly_once_kill9.py --runs 20 --sink files
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import traceback
import uuid
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import exactly_once_run as eo  # noqa: E402
from helpers import free_ports  # noqa: E402
from test_checkpoint_kill9 import DirectorySource, KafkaSource, make_lines  # noqa: E402
from test_connectors_kafka_exactly_once import read_all  # noqa: E402

from exactly_once_sqlite import SQLiteSink  # noqa: E402 - examples/, on the path through exactly_once_run
from squall.connectors.files import FileBolt  # noqa: E402
from squall.connectors.kafka import KafkaBolt  # noqa: E402
from squall.connectors.redis import RedisStoreBolt  # noqa: E402
from squall.testing import KafkaBroker, RedisServer  # noqa: E402

KILLS = ["sink", "count", "checkpoint"]
PARTS = eo.parts(KILLS, stop_and_rerun=True)


def mapper(tup):
    return tup.values[0], str(tup.values[1])


def kafka_case(broker: KafkaBroker, root: Path, lines: list[str]):
    servers, out = broker.bootstrap_servers, f"eo-out-{uuid.uuid4().hex[:8]}"
    broker.create_topics(out, f"{out}.markers")
    source = KafkaSource(servers, lines, broker.create_topics, parts=PARTS)
    sink = KafkaBolt(servers, out, mapper, exactly_once=True, marker_topic=f"{out}.markers")
    return source, sink, lambda: [(k, int(v)) for k, v in read_all(servers, out)]


def files_case(root: Path, lines: list[str]):
    import json

    out = root / "out"

    def read():
        rows = []
        for name in os.listdir(out) if out.is_dir() else []:
            if not name.startswith("."):
                rows += [tuple(json.loads(line).values()) for line in (out / name).read_text().splitlines()]
        return rows

    sink = FileBolt(str(out), format="jsonl", fields=["word", "count"], exactly_once=True)
    return DirectorySource(root / "files", lines, parts=PARTS), sink, read


def redis_case(server: RedisServer, root: Path, lines: list[str]):
    import redis

    key = f"eo-{uuid.uuid4().hex[:8]}"
    client = redis.Redis(host=server.host, port=server.port)
    sink = RedisStoreBolt(lambda t: f"{t.values[0]}:{t.values[1]}", data_type="list", key=key, host=server.host,
                          port=server.port, exactly_once=True)
    read = lambda: [(w, int(n)) for w, n in (v.decode().rsplit(":", 1) for v in client.lrange(key, 0, -1))]  # noqa: E731
    return DirectorySource(root / "files", lines, parts=PARTS), sink, read


def sqlite_case(root: Path, lines: list[str]):
    db = root / "out.sqlite"

    def read():
        with sqlite3.connect(db) as connection:
            try:
                return connection.execute("SELECT word, count FROM counts").fetchall()
            except sqlite3.OperationalError:
                return []

    return DirectorySource(root / "files", lines, parts=PARTS), SQLiteSink(str(db), "counts", ["word", "count"]), read


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--lines", type=int, default=1500)
    parser.add_argument("--sink", choices=["kafka", "files", "redis", "sqlite"], default="kafka")
    args = parser.parse_args()
    base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    inexact, started = 0, time.monotonic()
    with tempfile.TemporaryDirectory(dir=base) as services:
        broker = KafkaBroker(Path(services) / "kafka") if args.sink == "kafka" else None
        server = RedisServer(Path(services) / "redis") if args.sink == "redis" else None
        with broker or contextlib.nullcontext(), server or contextlib.nullcontext():
            for n in range(args.runs):
                root = Path(tempfile.mkdtemp(dir=base, prefix=f"eo-kill9-{n}-"))
                lines = make_lines(args.lines, seed=n)
                run_started = time.monotonic()
                try:
                    if args.sink == "kafka":
                        source, sink, read = kafka_case(broker, root, lines)
                    elif args.sink == "redis":
                        source, sink, read = redis_case(server, root, lines)
                    else:
                        source, sink, read = (files_case if args.sink == "files" else sqlite_case)(root, lines)
                    conf = eo.conf({"path": str(root / "state")}, free_ports(3))
                    report = eo.run(eo.build(source.spout(), sink), conf, read, source, KILLS,
                                    stop_and_rerun=True, name=f"eo{n}")
                    landed = ", ".join(f"{k['component']} at {k['visible']:.0%}" for k in report["kills"])
                    print(f"run {n + 1}: exact in {time.monotonic() - run_started:.1f} s; kills: {landed}; "
                          f"stopped at {report.get('stopped_at', 0):.0%}", flush=True)
                    shutil.rmtree(root, ignore_errors=True)
                except AssertionError as e:
                    inexact += 1
                    print(f"run {n + 1}: INEXACT after {time.monotonic() - run_started:.1f} s ({root}): {e}", flush=True)
                except Exception as e:  # noqa: BLE001 - a hang, a crash: counted apart, kept to read
                    print(f"run {n + 1}: ERROR after {time.monotonic() - run_started:.1f} s ({root}): "
                          f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}", flush=True)
    print(f"\n{args.sink}: inexact runs: {inexact} of {args.runs}, in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
