"""The RabbitMQ connectors against a real broker (Debian's rabbitmq-server, started by the
tests on 127.0.0.1): the spout's at-least-once contract (acks, requeues, prefetch, topology
and broker restarts, bad input) and the publishing bolt with publisher confirms."""

from __future__ import annotations

import logging
import uuid
from collections import Counter

import pytest

from helpers import (
    CLOSED_PORT, KILL_9_CONF, FailFirstBolt, HoldBolt, KeyedBolt, Recorder, RecordSink, errors_of, free_ports,
    held, kill_9_spout_worker_mid_stream, logged, received, record, spout_to_sink,
)
from rabbitmq_server import RabbitMQServer, pika_module, rabbitmq_available, rabbitmq_server  # noqa: F401
from squall import LocalCluster, TopologyBuilder
from squall.connectors.rabbitmq import RabbitMQBolt, RabbitMQSpout, Route
from squall.api.errors import TopologySetupError
from squall.testing import FeederSpout, wait_until

pytestmark = pytest.mark.timeout(90)

WAIT = 20.0


@pytest.fixture
def channel(rabbitmq_server):  # noqa: F811
    connection = rabbitmq_server.connection()
    ch = connection.channel()
    ch.confirm_delivery()
    yield ch
    connection.close()


@pytest.fixture
def queue(channel) -> str:
    """A durable queue of this test's own."""
    name = f"queue-{uuid.uuid4().hex}"
    channel.queue_declare(name, durable=True)
    return name


def _publish(channel, queue: str, start: int, stop: int) -> list[bytes]:
    pika = pika_module()
    bodies = [str(i).encode() for i in range(start, stop)]
    for body in bodies:
        channel.basic_publish("", queue, body, pika.BasicProperties(delivery_mode=2))
    return bodies


def _ready(channel, queue: str) -> int:
    """Messages ready in the queue (not delivered, or delivered and requeued)."""
    return channel.queue_declare(queue, passive=True).method.message_count


class RecordingSpout(RabbitMQSpout):
    """Records the message ids it acked (``spout.acked``) and failed (``spout.failed``): the
    ack or nack is on the wire once recorded."""

    def ack(self, msg_id):
        super().ack(msg_id)
        record("spout.acked", msg_id)

    def fail(self, msg_id):
        super().fail(msg_id)
        record("spout.failed", msg_id)


def _spout(server: RabbitMQServer, queue: str, **more) -> RabbitMQSpout:
    return RecordingSpout(queue, host=server.host, port=server.port, **more)


class AckBelowBolt(KeyedBolt):
    """Records every body; acks the bodies below ``limit``, holds the others."""

    def execute(self, tup):
        record(self.key, tup.values[0])
        if int(tup.values[0]) < self.limit:
            self.collector.ack(tup)


# -- the spout ------------------------------------------------------------------------------


def test_every_message_is_delivered_once_and_acked(rabbitmq_server, channel, queue):  # noqa: F811
    bodies = _publish(channel, queue, 0, 300)
    with LocalCluster() as cluster:
        cluster.submit_topology("once", {}, spout_to_sink(_spout(rabbitmq_server, queue), RecordSink("bodies")))
        more = _publish(channel, queue, 300, 400)  # while it runs
        wait_until(lambda: len(logged("spout.acked")) == 400, timeout=WAIT, message="every message acked")
        cluster.kill_topology("once", wait_secs=0)
        wait_until(lambda: "once" not in cluster.get_topologies(), timeout=WAIT, message="the topology killed")
    assert Counter(logged("bodies")) == Counter(bodies + more)
    assert _ready(channel, queue) == 0  # nothing was left unacked (it would be back in the queue)


def test_a_failed_tuple_is_requeued_and_redelivered(cluster, rabbitmq_server, channel, queue):  # noqa: F811
    bodies = _publish(channel, queue, 0, 20)
    targets = bodies[3:6]
    cluster.submit_topology("requeue", {}, spout_to_sink(_spout(rabbitmq_server, queue),
                                                     FailFirstBolt("seen", targets=targets)))
    wait_until(lambda: len(logged("spout.acked")) == 20, timeout=WAIT, message="the failed messages redelivered")
    assert Counter(logged("seen")) == Counter({b: 2 if b in targets else 1 for b in bodies})
    assert len(logged("spout.failed")) == 3
    assert _ready(channel, queue) == 0


def test_prefetch_bounds_the_unacked_deliveries(cluster, rabbitmq_server, channel, queue):  # noqa: F811
    _publish(channel, queue, 0, 20)
    cluster.submit_topology("prefetch", {}, spout_to_sink(_spout(rabbitmq_server, queue, prefetch=5), HoldBolt("held")))
    # The broker's queue hands a consumer every ready message it has room for in the step that
    # gives it room (its consume, an ack), before it answers a later queue_declare: a count of 15
    # ready (of 20, none acked) says that exactly 5 were delivered and no more will be without an ack.
    wait_until(lambda: _ready(channel, queue) == 15, timeout=WAIT, message="5 delivered, the rest still in the queue")
    wait_until(lambda: len(held("held")) == 5, timeout=WAIT, message="prefetch deliveries held")
    for collector, tup in held("held")[:2]:
        collector.ack(tup)
    wait_until(lambda: _ready(channel, queue) == 13, timeout=WAIT, message="two acks, two more delivered")
    wait_until(lambda: len(held("held")) == 7, timeout=WAIT, message="two more held")
    assert _ready(channel, queue) == 13


def test_the_prefetch_defaults_to_max_spout_pending(cluster, rabbitmq_server, channel, queue):  # noqa: F811
    _publish(channel, queue, 0, 10)
    cluster.submit_topology("pending", {"topology.max.spout.pending": 3},
                            spout_to_sink(_spout(rabbitmq_server, queue), HoldBolt("held")))
    wait_until(lambda: len(held("held")) == 3 and _ready(channel, queue) == 7, timeout=WAIT,
               message="max.spout.pending deliveries held")


def test_a_restarted_topology_loses_nothing(rabbitmq_server, channel, queue):  # noqa: F811
    bodies = _publish(channel, queue, 0, 100)
    with LocalCluster() as cluster:
        cluster.submit_topology("restart", {}, spout_to_sink(_spout(rabbitmq_server, queue), AckBelowBolt("first", 50)))
        wait_until(lambda: len(logged("first")) == 100 and len(logged("spout.acked")) == 50, timeout=WAIT,
                   message="half the messages acked")
        cluster.kill_topology("restart", wait_secs=0)
        wait_until(lambda: "restart" not in cluster.get_topologies(), timeout=WAIT, message="the topology killed")
        wait_until(lambda: _ready(channel, queue) == 50, timeout=WAIT, message="the unacked half requeued")
        more = _publish(channel, queue, 100, 120)
        cluster.submit_topology("restart", {}, spout_to_sink(_spout(rabbitmq_server, queue), RecordSink("second")))
        wait_until(lambda: len(logged("second")) >= 70 and _ready(channel, queue) == 0
                   and len(logged("spout.acked")) == 120, timeout=WAIT, message="the held and the new messages")
    assert Counter(logged("second")) == Counter(bodies[50:] + more)  # the acked half is not redelivered
    assert _ready(channel, queue) == 0


def test_the_spout_reconnects_after_the_broker_restarts(cluster, tmp_path, caplog):
    rabbitmq_available()
    caplog.set_level(logging.WARNING, logger="squall.connectors.rabbitmq")
    queue = f"queue-{uuid.uuid4().hex}"
    with RabbitMQServer(tmp_path / "rabbitmq") as server:
        connection = server.connection()
        ch = connection.channel()
        ch.confirm_delivery()
        ch.queue_declare(queue, durable=True)
        bodies = _publish(ch, queue, 0, 30)
        connection.close()
        cluster.submit_topology("reconnect", {}, spout_to_sink(
            _spout(server, queue, reconnect_delay_ms=50, reconnect_delay_max_ms=500), HoldBolt("held")))
        wait_until(lambda: len(held("held")) == 30, timeout=WAIT, message="every message held")
        for collector, tup in held("held")[:10]:
            collector.ack(tup)
        wait_until(lambda: len(logged("spout.acked")) == 10, timeout=WAIT, message="10 messages acked")
        server.stop()
        wait_until(lambda: "RabbitMQ is unreachable" in caplog.text, timeout=WAIT, message="the spout noticed")
        # the broker is down: these acks are for the dead connection, dropped; the messages come back
        for collector, tup in held("held")[10:20]:
            collector.ack(tup)
        server.start()  # the same ports, the same data
        wait_until(lambda: "RabbitMQ is reachable again" in caplog.text, timeout=WAIT, message="reconnected")
        connection = server.connection()
        try:
            ch = connection.channel()
            ch.confirm_delivery()
            more = _publish(ch, queue, 30, 40)
            wait_until(lambda: len(held("held")) == 60, timeout=WAIT,
                       message="the 20 unacked messages redelivered and the 10 new ones delivered")
            for collector, tup in held("held")[30:]:
                collector.ack(tup)
            wait_until(lambda: len(logged("spout.acked")) >= 40 and _ready(ch, queue) == 0, timeout=WAIT,
                       message="every message acked")
            seen = Counter(logged("held"))
            assert set(seen) == set(bodies + more)  # nothing lost
            assert all(seen[b] == 1 for b in bodies[:10])  # acked before the restart: not redelivered
            assert all(seen[b] == 2 for b in bodies[10:30])  # unacked at the restart: redelivered once
            assert caplog.text.count("RabbitMQ is unreachable") == 1  # logged once, not once a retry
        finally:
            cluster.kill_topology("reconnect", wait_secs=0)
            wait_until(lambda: "reconnect" not in cluster.get_topologies(), timeout=WAIT, message="killed")
            try:
                assert _ready(ch, queue) == 0  # no unacked message came back to the queue
            finally:
                connection.close()


def test_an_unreachable_broker_fails_the_submission_naming_it(cluster):
    rabbitmq_available()
    port = CLOSED_PORT
    with pytest.raises(TopologySetupError) as e:
        cluster.submit_topology("unreachable", {}, spout_to_sink(RabbitMQSpout("q", port=port, timeout=2),
                                                             RecordSink("x")))
    assert f"127.0.0.1:{port}" in str(e.value) and "'spout'" in str(e.value)


def test_a_missing_queue_fails_the_submission_naming_it(cluster, rabbitmq_server):  # noqa: F811
    queue = f"missing-{uuid.uuid4().hex}"
    with pytest.raises(TopologySetupError) as e:
        cluster.submit_topology("missing", {}, spout_to_sink(_spout(rabbitmq_server, queue), RecordSink("x")))
    assert f"queue {queue!r} does not exist" in str(e.value)


def test_declare_creates_the_queue(cluster, rabbitmq_server, channel):  # noqa: F811
    queue = f"declared-{uuid.uuid4().hex}"
    cluster.submit_topology("declare", {}, spout_to_sink(_spout(rabbitmq_server, queue, declare=True),
                                                     RecordSink("bodies")))
    bodies = _publish(channel, queue, 0, 5)
    wait_until(lambda: len(logged("spout.acked")) == 5, timeout=WAIT, message="every message acked")
    assert sorted(logged("bodies")) == sorted(bodies)


def reject_bad(body, properties):
    if body == b"bad":
        raise ValueError("no thanks")
    if body == b"short":
        return Route("good", [body])  # one value for two fields: the emit raises
    return Route("good", [body, properties.delivery_mode])


def test_a_message_the_translator_rejects_goes_to_the_error_stream(cluster, rabbitmq_server, channel,  # noqa: F811
                                                                    queue):
    good = _publish(channel, queue, 0, 5)
    channel.basic_publish("", queue, b"bad")
    channel.basic_publish("", queue, b"short")
    builder = TopologyBuilder()
    builder.set_spout("spout", _spout(rabbitmq_server, queue, translator=reject_bad,
                                      output_fields={"good": ["body", "mode"]}))
    builder.set_bolt("sink", Recorder()).shuffle_grouping("spout", "good").shuffle_grouping("spout", "error")
    cluster.submit_topology("translate", {}, builder.create_topology())
    wait_until(lambda: len(received("sink")) == 7 and len(logged("spout.acked")) == 7, timeout=WAIT,
               message="every message processed and acked")
    by_stream: dict[str, list] = {"good": [], "error": []}
    for r in received("sink"):
        by_stream[r["stream"]].append(r["values"])
    assert sorted(by_stream["good"]) == sorted([b, 2] for b in good)
    errors = sorted(by_stream["error"], key=lambda v: v[0])
    assert [e[0] for e in errors] == [6, 7]  # the delivery tags
    assert errors[0][1] == "ValueError: no thanks" and "declares 2 fields" in errors[1][1]
    assert _ready(channel, queue) == 0


# -- the bolt -------------------------------------------------------------------------------


def _feed_all(feeder: FeederSpout, rows) -> None:
    for i, row in enumerate(rows):
        feeder.feed(row, msg_id=i)
    wait_until(lambda: len(feeder.acked) + len(feeder.failed) == len(rows), timeout=WAIT,
               message="every tuple acked or failed")


def _get_all(channel, queue: str) -> list[tuple[bytes, object]]:
    out = []
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            return out
        out.append((body, properties))


def _bolt_topology(bolt) -> tuple[FeederSpout, object]:
    feeder = FeederSpout(["word", "n"])
    builder = TopologyBuilder()
    builder.set_spout("words", feeder)
    builder.set_bolt("publish", bolt).shuffle_grouping("words")
    return feeder, builder.create_topology()


def as_message(tup):
    return f"{tup.values[0]}:{int(tup.values[1])}", {"content_type": "text/plain"}


def test_the_bolt_publishes_and_acks_after_the_confirm(cluster, rabbitmq_server, channel, queue):  # noqa: F811
    feeder, topology = _bolt_topology(RabbitMQBolt(routing_key=queue, mapper=as_message, host=rabbitmq_server.host,
                                                   port=rabbitmq_server.port))
    cluster.submit_topology("publish", {}, topology)
    _feed_all(feeder, [["a", 1], ["b", 2], ["c", 3]])
    assert sorted(feeder.acked) == [0, 1, 2] and not feeder.failed
    # acked after the confirm: the messages are in the queue by then
    messages = _get_all(channel, queue)
    assert [body for body, _ in messages] == [b"a:1", b"b:2", b"c:3"]
    assert all(p.delivery_mode == 2 and p.content_type == "text/plain" for _, p in messages)


def test_the_bolt_routes_through_an_exchange_with_a_routing_key_of_the_tuple(cluster, rabbitmq_server, channel):  # noqa: F811
    exchange = f"exchange-{uuid.uuid4().hex}"
    channel.exchange_declare(exchange, "direct")
    queues = {}
    for word in ("a", "b"):
        queues[word] = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queues[word], exchange, routing_key=word)
    feeder, topology = _bolt_topology(RabbitMQBolt(exchange, lambda t: t.values[0], mapper=as_message,
                                                   host=rabbitmq_server.host, port=rabbitmq_server.port))
    cluster.submit_topology("route", {}, topology)
    _feed_all(feeder, [["a", 1], ["b", 2], ["a", 3]])
    assert sorted(feeder.acked) == [0, 1, 2]
    assert [b for b, _ in _get_all(channel, queues["a"])] == [b"a:1", b"a:3"]
    assert [b for b, _ in _get_all(channel, queues["b"])] == [b"b:2"]


def test_an_unroutable_message_fails_the_tuple_with_the_reason(cluster, rabbitmq_server, channel, queue):  # noqa: F811
    feeder, topology = _bolt_topology(RabbitMQBolt(routing_key=lambda t: queue if t.values[0] == "ok" else "nowhere",
                                                   mapper=as_message, host=rabbitmq_server.host,
                                                   port=rabbitmq_server.port))
    cluster.submit_topology("unroutable", {}, topology)
    _feed_all(feeder, [["ok", 1], ["lost", 2], ["ok", 3]])
    assert sorted(feeder.acked) == [0, 2] and feeder.failed == [1]
    assert [b for b, _ in _get_all(channel, queue)] == [b"ok:1", b"ok:3"]
    errors = [e["error"] for e in errors_of(cluster, "unroutable", "publish")]
    assert any("no queue is bound for routing key 'nowhere'" in e and "'words'" in e for e in errors), errors


def test_a_tuple_the_mapper_cannot_map_is_failed_with_the_reason(cluster, rabbitmq_server, channel, queue):  # noqa: F811
    feeder, topology = _bolt_topology(RabbitMQBolt(routing_key=queue, mapper=as_message, host=rabbitmq_server.host,
                                                   port=rabbitmq_server.port))
    cluster.submit_topology("unmappable", {}, topology)
    _feed_all(feeder, [["a", "1"], ["b", "many"]])
    assert feeder.acked == [0] and feeder.failed == [1]
    assert [b for b, _ in _get_all(channel, queue)] == [b"a:1"]
    errors = [e["error"] for e in errors_of(cluster, "unmappable", "publish")]
    assert any("cannot map" in e and "invalid literal for int()" in e for e in errors), errors


def test_the_bolt_fails_the_submission_when_the_broker_is_unreachable(cluster):
    rabbitmq_available()
    port = free_ports(1)[0]
    feeder, topology = _bolt_topology(RabbitMQBolt(routing_key="q", port=port, timeout=2))
    with pytest.raises(TopologySetupError) as e:
        cluster.submit_topology("unreachable-bolt", {}, topology)
    assert f"127.0.0.1:{port}" in str(e.value) and "'publish'" in str(e.value)


@pytest.mark.processes
@pytest.mark.timeout(150)
def test_kill_9_of_the_spout_worker_loses_no_message(rabbitmq_server, channel, queue):  # noqa: F811
    total, out = 3000, f"{queue}-out"
    channel.queue_declare(out, durable=True)
    expected = set(_publish(channel, queue, 0, total))
    builder = TopologyBuilder()
    builder.set_spout("spout", RabbitMQSpout(queue, host=rabbitmq_server.host, port=rabbitmq_server.port))
    builder.set_bolt("publish", RabbitMQBolt(routing_key=out, host=rabbitmq_server.host,
                                             port=rabbitmq_server.port)).shuffle_grouping("spout")
    arrived: set[bytes] = set()

    def take() -> int:
        """Moves what reached the output queue into ``arrived`` (a message may arrive twice)."""
        while True:
            method, _, body = channel.basic_get(out, auto_ack=True)
            if method is None:
                return len(arrived)
            arrived.add(body)

    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("kill9", KILL_9_CONF, builder.create_topology())
        kill_9_spout_worker_mid_stream(cluster, "kill9", take, total)
        wait_until(lambda: take() == total, timeout=100, interval=0.05, message="every message published")
        wait_until(lambda: _ready(channel, queue) == 0, timeout=20, message="the input queue drained")
    assert arrived == expected
