"""RedisStoreBolt in exactly-once mode (``exactly_once=True``) against a real redis-server: each
recovery case of the two-phase contract with the harness standing in for the checkpoint
barriers (a "crash" abandons the harness and starts another under the same topology name,
whose in-memory state provider keeps the committed state), then ``kill -9`` of worker
processes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import exactly_once_run as eo
import redis_server as real_redis
from helpers import free_ports
from squall import TwoPhaseCommitSink
from squall.api.state.provider import provider_for
from squall.api.two_phase_commit import PENDING_KEY
from squall.connectors.redis import ExactlyOnceRedisStoreBolt, RedisConnectorError, RedisStoreBolt, by_fields
from squall.testing import BoltHarness, RedisServer
from test_checkpoint_kill9 import DirectorySource, make_lines

redis_server = real_redis.redis_server  # the fixture: a redis-server for the module's tests

pytestmark = pytest.mark.timeout(120)

INPUTS = {"count": ["word", "count"]}


def entry(tup: Any) -> str:
    """The list mapper: ``"word:n"`` (module level: the workers import it)."""
    return f"{tup.values[0]}:{tup.values[1]}"


def parsed(entries: list[str]) -> list[tuple[str, int]]:
    return [(word, int(n)) for word, n in (e.rsplit(":", 1) for e in entries)]


@pytest.fixture
def client(redis_server):
    c = real_redis.redis_client_module().Redis(host=redis_server.host, port=redis_server.port, decode_responses=True)
    yield c
    c.close()


@pytest.fixture
def name() -> str:
    """The topology's name, of this test's own: its state, its markers and its keys."""
    return f"eo-{uuid.uuid4().hex[:10]}"


def sink(server: RedisServer, name: str, mapper: Any = entry, data_type: str = "list", **options: Any) -> BoltHarness:
    """The exactly-once sink's task started as after a (re)start: its state loaded, then the
    recovery barrier every start is followed by. Its key: ``name`` unless ``options`` say."""
    options.setdefault("key", name)
    bolt = RedisStoreBolt(mapper, data_type=data_type, host=server.host, port=server.port, exactly_once=True,
                          **options)
    h = BoltHarness(bolt, INPUTS, component_id="sink", name=name)
    h.rollback()
    return h


def feed(h: BoltHarness, *records: tuple[str, int]) -> None:
    for word, n in records:
        h.feed([word, n], tracked=False)


def marker(h: BoltHarness) -> str:
    """The task's marker key, by default."""
    return f"squall:eo:{h.context().topology_name}:sink:{h.context().get_this_task_index()}"


# -- the forms --------------------------------------------------------------------------------------


def test_exactly_once_true_makes_the_two_phase_form_the_plain_bolt_is_not_one():
    eo_bolt = RedisStoreBolt(entry, data_type="list", key="k", exactly_once=True)
    plain = RedisStoreBolt(entry, data_type="list", key="k")
    assert isinstance(eo_bolt, ExactlyOnceRedisStoreBolt) and isinstance(eo_bolt, RedisStoreBolt)
    assert isinstance(eo_bolt, TwoPhaseCommitSink) and eo_bolt.exactly_once
    assert type(plain) is RedisStoreBolt and not isinstance(plain, TwoPhaseCommitSink)
    assert not getattr(plain, "exactly_once", False)
    assert type(RedisStoreBolt(entry, data_type="list", key="k", exactly_once=False)) is RedisStoreBolt


def test_a_marker_key_template_must_name_the_topology_the_component_and_the_task():
    with pytest.raises(ValueError, match="lacks the field.s. task"):
        RedisStoreBolt(entry, data_type="list", key="k", exactly_once=True, marker_key="eo:{topology}:{component}")
    with pytest.raises(ValueError, match="not a template"):
        RedisStoreBolt(entry, data_type="list", key="k", exactly_once=True, marker_key="eo:{topology}:{job}")


def test_a_subclass_of_the_plain_bolt_refuses_exactly_once_rather_than_losing_its_overrides():
    class Mine(RedisStoreBolt):
        pass

    with pytest.raises(TypeError, match="Mine has no exactly-once form"):
        Mine(entry, data_type="list", key="k", exactly_once=True)
    assert type(Mine(entry, data_type="list", key="k")) is Mine


# -- the protocol, with the harness -----------------------------------------------------------------


def test_nothing_is_written_before_the_checkpoint_commits_then_the_epoch_in_order(redis_server, client, name):
    h = sink(redis_server, name)
    feed(h, ("a", 1), ("b", 1), ("a", 2))
    txid = h.prepare_checkpoint()
    assert client.lrange(name, 0, -1) == [] and not client.exists(marker(h))
    assert h.state.get(PENDING_KEY) == [[txid, [["RPUSH", name.encode(), e] for e in (b"a:1", b"b:1", b"a:2")]]]
    h.commit_checkpoint(txid)
    assert client.lrange(name, 0, -1) == ["a:1", "b:1", "a:2"]
    assert client.hget(marker(h), "txid") == str(txid) and h.bolt.marker == marker(h)
    feed(h, ("c", 1))
    h.checkpoint()
    h.checkpoint()  # an epoch without records publishes nothing
    assert client.lrange(name, 0, -1) == ["a:1", "b:1", "a:2", "c:1"]
    assert h.bolt.metrics == {"published": 2, "skipped": 0, "written": 4, "errors": 0}
    assert len(h.acked) == 4 and h.failed == [] and h.errors == []
    h.close()


def test_a_hash_epoch_is_written_at_the_commit_later_values_over_earlier_ones(redis_server, client, name):
    h = sink(redis_server, name, by_fields("word", "count"), "hash")
    feed(h, ("a", 1), ("b", 1))
    txid = h.prepare_checkpoint()
    assert client.hgetall(name) == {}
    h.commit_checkpoint(txid)
    assert client.hgetall(name) == {"a": "1", "b": "1"}
    feed(h, ("a", 2))
    txid = h.prepare_checkpoint()
    assert client.hgetall(name) == {"a": "1", "b": "1"}
    h.commit_checkpoint(txid)
    assert client.hgetall(name) == {"a": "2", "b": "1"}
    h.close()


def test_an_epoch_committed_again_is_skipped(redis_server, client, name):
    h = sink(redis_server, name)
    feed(h, ("a", 1), ("b", 1))
    txid = h.prepare_checkpoint()
    records = h.state.get(PENDING_KEY)[0][1]
    h.commit_checkpoint(txid)
    assert h.bolt.publish(txid, records) is False  # a COMMIT repeated
    assert h.bolt.publish(txid - 1, records) is False  # an older epoch: published before it, if at all
    h.bolt.commit_transaction(records, txid)
    assert client.lrange(name, 0, -1) == ["a:1", "b:1"]
    assert h.bolt.metrics["published"] == 1 and h.bolt.metrics["skipped"] == 3
    h.close()


def test_a_crash_after_the_publish_before_the_state_said_so_skips_it_at_recovery(redis_server, client, name):
    h = sink(redis_server, name)
    feed(h, ("a", 1), ("b", 1))
    h.checkpoint()  # published; the committed state still holds the epoch as pending
    assert client.lrange(name, 0, -1) == ["a:1", "b:1"]
    h = sink(redis_server, name)  # crash and restart: the recovery publishes the pending epoch again
    assert h.bolt.metrics["skipped"] == 1 and h.bolt.metrics["published"] == 0
    assert client.lrange(name, 0, -1) == ["a:1", "b:1"]
    feed(h, ("c", 1))  # the spout resumes after what the checkpoint committed
    h.checkpoint()
    assert client.lrange(name, 0, -1) == ["a:1", "b:1", "c:1"]
    h.close()


def test_a_crash_between_the_commit_point_and_the_commit_barrier_publishes_at_recovery_once(
        redis_server, client, name):
    h = sink(redis_server, name)
    feed(h, ("a", 1), ("b", 1))
    txid = h.prepare_checkpoint()
    h.commit_checkpoint(txid, barrier=False)  # committed; the COMMIT never reached the sink
    assert client.lrange(name, 0, -1) == []
    h = sink(redis_server, name)
    assert client.lrange(name, 0, -1) == ["a:1", "b:1"] and h.bolt.metrics["published"] == 1
    h = sink(redis_server, name)  # and again: the marker says it is published
    assert client.lrange(name, 0, -1) == ["a:1", "b:1"] and h.bolt.metrics["skipped"] == 1
    feed(h, ("a", 2))
    h.checkpoint()
    assert client.lrange(name, 0, -1) == ["a:1", "b:1", "a:2"]
    h.close()


def test_a_crash_after_prepare_writes_nothing_and_the_replay_once(redis_server, client, name):
    h = sink(redis_server, name)
    feed(h, ("a", 1))
    h.checkpoint()
    feed(h, ("b", 1), ("c", 1))
    h.prepare_checkpoint()  # the checkpoint never commits
    h = sink(redis_server, name)
    assert client.lrange(name, 0, -1) == ["a:1"]
    feed(h, ("b", 1), ("c", 1))  # replayed from the committed position
    h.checkpoint()
    assert client.lrange(name, 0, -1) == ["a:1", "b:1", "c:1"]
    h.close()


def test_a_rollback_without_crash_drops_the_uncommitted_epochs(redis_server, client, name):
    h = sink(redis_server, name)
    feed(h, ("a", 1))
    h.prepare_checkpoint()  # prepared; then another task fails the checkpoint
    feed(h, ("b", 1))
    h.rollback()
    feed(h, ("a", 1), ("b", 1))
    h.checkpoint()
    assert client.lrange(name, 0, -1) == ["a:1", "b:1"]
    h.close()


def test_redis_unreachable_at_the_commit_is_reported_and_the_epoch_published_at_the_next(tmp_path, name):
    redis = real_redis.redis_client_module()
    first = RedisServer(tmp_path / "redis", "--appendonly", "yes")
    with first:
        h = sink(first, name)
        feed(h, ("a", 1))
        h.checkpoint()
    feed(h, ("b", 1))  # Redis is down
    with pytest.raises(RedisConnectorError) as raised:
        h.checkpoint()
    message = str(raised.value)
    assert f"RedisStoreBolt 'sink' at 127.0.0.1:{first.port}" in message and "publishing epoch 2" in message
    assert h.errors[-1] is raised.value and h.bolt.metrics["errors"] == 1
    with RedisServer(tmp_path / "redis", "--appendonly", "yes", port=first.port) as again:
        c = redis.Redis(host=again.host, port=again.port, decode_responses=True)
        assert c.lrange(name, 0, -1) == ["a:1"]
        feed(h, ("c", 1))
        h.checkpoint()  # the pending epoch first, then this one
        assert c.lrange(name, 0, -1) == ["a:1", "b:1", "c:1"]
        assert h.bolt.metrics["published"] == 3
        h.close()
        c.close()


def test_a_key_of_another_type_refuses_the_whole_epoch_until_it_is_fixed(redis_server, client, name):
    keys = {"good": f"{name}-good", "bad": f"{name}-bad"}
    client.set(keys["bad"], "a string, not a list")
    h = sink(redis_server, name, key=lambda tup: keys[tup.values[0]])
    feed(h, ("good", 1), ("bad", 1))
    with pytest.raises(RedisConnectorError, match=f"WRONGTYPE key {keys['bad']} holds a string, RPUSH needs a list"):
        h.checkpoint()
    assert client.lrange(keys["good"], 0, -1) == []  # nothing of the epoch: atomic
    client.delete(keys["bad"])
    h.checkpoint()  # the pending epoch is published at the next commit
    assert client.lrange(keys["good"], 0, -1) == ["good:1"] and client.lrange(keys["bad"], 0, -1) == ["bad:1"]
    h.close()


def test_a_tuple_that_cannot_be_mapped_fails_alone_and_is_reported(redis_server, client, name):
    def mapper(tup: Any) -> Any:
        if tup.values[0] == "boom":
            raise KeyError("no such word")
        return None if tup.values[0] == "none" else entry(tup)

    h = sink(redis_server, name, mapper)
    boom = h.feed(["boom", 1], tracked=False)
    feed(h, ("a", 1))
    none = h.feed(["none", 1], tracked=False)
    assert h.failed == [boom, none] and len(h.acked) == 1
    assert "cannot write ['boom', 1] from component 'count'" in str(h.errors[0])
    assert "RedisStoreBolt 'sink' at" in str(h.errors[0]) and "KeyError" in str(h.errors[0])
    assert "DataError" in str(h.errors[1])
    h.checkpoint()
    assert client.lrange(name, 0, -1) == ["a:1"]
    h.close()


def test_a_topology_whose_state_was_dropped_is_not_taken_for_one_published(redis_server, client, name):
    h = sink(redis_server, name)
    feed(h, ("a", 1))
    h.checkpoint()
    run = client.hget(marker(h), "run")
    assert run == h.state.get("$redis-store.run")
    provider_for(h.conf, name).drop()  # squall run --fresh: txids count from 1 again
    h = sink(redis_server, name)
    feed(h, ("b", 1))
    h.checkpoint()
    assert client.lrange(name, 0, -1) == ["a:1", "b:1"]
    assert client.hget(marker(h), "run") not in (run, None)
    h.close()


@pytest.mark.parametrize("data_type, mapper, read", [
    ("string", lambda t: (f"{t.values[0]}-string", t.values[1]), lambda c, k: c.mget("a-string", "b-string")),
    ("set", lambda t: t.values[0], lambda c, k: sorted(c.smembers(k))),
    ("sorted_set", lambda t: (t.values[0], t.values[1]), lambda c, k: c.zrange(k, 0, -1, withscores=True)),
    ("stream", lambda t: {"word": t.values[0]}, lambda c, k: [f for _, f in c.xrange(k)]),
])
def test_every_data_type_is_published_once(redis_server, client, name, data_type, mapper, read):
    h = sink(redis_server, name, mapper, data_type, marker_key="test:{topology}/{component}/{task}")
    feed(h, ("a", 1), ("b", 2))
    txid = h.prepare_checkpoint()
    records = h.state.get(PENDING_KEY)[0][1]
    h.commit_checkpoint(txid)
    once = read(client, name)
    assert once and h.bolt.publish(txid, records) is False
    assert read(client, name) == once
    assert client.hget(f"test:{name}/sink/{h.context().get_this_task_index()}", "txid") == str(txid)
    h.close()


# -- kill -9 of worker processes ---------------------------------------------------------------------


@pytest.mark.processes
def test_kill_9_of_the_sinks_and_the_counts_workers_leaves_each_entry_once(redis_server, client, tmp_path):
    kills = ["sink", "count"]
    source = DirectorySource(tmp_path / "files", make_lines(1500, seed=3), parts=eo.parts(kills))
    key = f"eo-kill9-{uuid.uuid4().hex[:8]}"
    bolt = RedisStoreBolt(entry, data_type="list", key=key, exactly_once=True, host=redis_server.host,
                          port=redis_server.port)
    conf = eo.conf({"path": str(tmp_path / "state")}, free_ports(3))
    report = eo.run(eo.build(source.spout(), bolt), conf, lambda: parsed(client.lrange(key, 0, -1)), source,
                    kills, name=key)
    assert [k["component"] for k in report["kills"]] == kills
