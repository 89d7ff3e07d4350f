"""Exactly-once output to Kafka where transactions are real (tests/kafka_broker.py's broker):
``read_committed`` isolation and fencing shown first, then a zombie sink fenced, a kill between
the checkpoint's commit and the sink's, and ``kill -9`` of worker processes with a stop and a
rerun, each read back by a ``read_committed`` consumer."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest

import exactly_once_run as eo
from helpers import free_ports
from kafka_broker import kafka_broker  # noqa: F401  (a fixture)
from kafka_zombie import sink
from squall.connectors.kafka import ExactlyOnceKafkaBolt, KafkaBolt, KafkaConnectorError
from squall.testing import wait_until
from test_checkpoint_kill9 import KafkaSource, make_lines
from test_connectors_kafka_exactly_once import read_all

pytestmark = pytest.mark.timeout(180)

LOG = logging.getLogger("tests.kafka")


def test_the_broker_isolates_transactions_and_fences_an_older_producer(kafka_broker):  # noqa: F811
    servers = kafka_broker.bootstrap_servers
    """What the exactly-once claim stands on, shown on this broker (the mock cluster fails it)."""
    from confluent_kafka import KafkaException, Producer

    topic = f"isolation-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topics(topic)
    settings = {"bootstrap.servers": servers, "transactional.id": f"t-{topic}", "logger": LOG}
    first = Producer(settings)
    first.init_transactions(10)
    first.begin_transaction()
    first.produce(topic, value=b"committed", partition=0)
    first.commit_transaction(10)
    first.begin_transaction()
    first.produce(topic, value=b"aborted", partition=0)
    first.flush(10)
    first.abort_transaction(10)
    first.begin_transaction()
    first.produce(topic, value=b"fenced", partition=0)
    first.flush(10)
    Producer(settings).init_transactions(10)  # a newer instance: aborts the open one, fences it
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(10)
    assert fenced.value.args[0].fatal()
    assert [v for _, v in read_all(servers, topic)] == ["committed"]
    assert sorted(v for _, v in read_all(servers, topic, "read_uncommitted")) == ["aborted", "committed", "fenced"]


def test_a_zombie_sink_replaced_while_paused_commits_nothing(kafka_broker, tmp_path):  # noqa: F811
    servers = kafka_broker.bootstrap_servers
    topic, name = f"zombie-{uuid.uuid4().hex[:8]}", f"zombie-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topics(topic, f"{topic}.markers")
    state = str(tmp_path / "state")
    tests = Path(__file__).parent
    zombie = subprocess.Popen([sys.executable, str(tests / "kafka_zombie.py"), servers, topic, state, name],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(tests)})
    try:
        wait_until(lambda: Path(f"/proc/{zombie.pid}/stat").read_text().split(")")[1].split()[0] == "T",
                   timeout=60, message="the zombie stopped inside its commit")
        assert read_all(servers, topic) == []
        replacement = sink(servers, topic, state, name)  # the checkpoint committed: publishes the epoch
        assert sorted(read_all(servers, topic)) == [("zombie-a", "1"), ("zombie-b", "1")]
        os.kill(zombie.pid, signal.SIGCONT)
        out, _ = zombie.communicate(timeout=60)
    finally:
        if zombie.poll() is None:
            zombie.kill()
            zombie.wait()
    assert out.startswith("refused:") and "fenced" in out, out
    assert sorted(read_all(servers, topic)) == [("zombie-a", "1"), ("zombie-b", "1")]
    # the zombie's records reached the log: hidden, not missing
    assert len(read_all(servers, topic, "read_uncommitted")) == 4
    replacement.close()


class FirstCommitInterrupted:
    """The sink's producer, whose first commit runs inside ``interruption()`` (a context
    manager), once the epoch's records are in the broker's log."""

    def __init__(self, producer, interruption) -> None:
        self._producer, self._interruption, self.interrupted = producer, interruption, False

    def commit_transaction(self, *args):
        if self.interrupted:
            return self._producer.commit_transaction(*args)
        self.interrupted = True
        self._producer.flush()
        with self._interruption():
            return self._producer.commit_transaction(*args)

    def __getattr__(self, name):
        return getattr(self._producer, name)


@contextlib.contextmanager
def paused(broker):
    """The broker receives the commit but does not answer in time: paused (SIGSTOP) until the
    commit has timed out, committing it then."""
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(broker.pid, signal.SIGCONT)


@contextlib.contextmanager
def restarted(broker):
    """The broker restarts before the commit: it then acknowledges the commit of a transaction it lost."""
    broker.restart()
    yield


def test_a_commit_whose_outcome_is_unknown_is_tried_again_never_published_twice(kafka_broker, tmp_path):  # noqa: F811
    servers = kafka_broker.bootstrap_servers
    topic, name = f"doubt-{uuid.uuid4().hex[:8]}", f"doubt-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topics(topic, f"{topic}.markers")
    h = sink(servers, topic, str(tmp_path / "state"), name)
    h.bolt.transaction_timeout_ms = 2000  # how long publish waits for the commit
    h.bolt._producer = producer = FirstCommitInterrupted(h.bolt._producer, lambda: paused(kafka_broker))
    h.feed(["a", "1"], tracked=False)
    with pytest.raises(KafkaConnectorError, match="epoch 1's commit not confirmed \\(it will be tried again\\)"):
        h.commit_checkpoint(h.prepare_checkpoint())
    assert producer.interrupted and h.bolt.metrics["errors"] == 1, "the commit timed out"
    h.feed(["b", "1"], tracked=False)
    h.checkpoint()  # its commit publishes the pending epoch (the doubtful one), then this one
    h.checkpoint()
    assert sorted(read_all(servers, topic)) == [("a", "1"), ("b", "1")]
    assert h.bolt.metrics["transactions"] == 2
    h.close()


def test_a_commit_acknowledged_for_a_transaction_the_restarted_broker_lost_publishes_the_epoch_again(
        kafka_broker, tmp_path):  # noqa: F811
    servers = kafka_broker.bootstrap_servers
    topic, name = f"lost-{uuid.uuid4().hex[:8]}", f"lost-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topics(topic, f"{topic}.markers")
    h = sink(servers, topic, str(tmp_path / "state"), name)
    h.bolt._producer = producer = FirstCommitInterrupted(h.bolt._producer, lambda: restarted(kafka_broker))
    h.feed(["a", "1"], tracked=False)
    with pytest.raises(KafkaConnectorError, match="epoch 1's commit was acknowledged, but its marker is not there"):
        h.commit_checkpoint(h.prepare_checkpoint())
    assert producer.interrupted and read_all(servers, topic) == []
    h.feed(["b", "1"], tracked=False)
    h.checkpoint()  # its commit publishes the pending epoch again, then this one
    assert sorted(read_all(servers, topic)) == [("a", "1"), ("b", "1")]
    h.close()


def test_a_transaction_another_task_left_open_does_not_hide_this_tasks_marker(kafka_broker, tmp_path):  # noqa: F811
    """Tasks share marker partitions: a marker read that stops where a read_committed reader is
    shown the end (the last stable offset) misses this task's markers behind another's open
    transaction, and publishes their epochs again."""
    from confluent_kafka import Producer

    servers = kafka_broker.bootstrap_servers
    topic, name = f"open-{uuid.uuid4().hex[:8]}", f"open-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topics(topic, f"{topic}.markers")
    state = str(tmp_path / "state")
    h = sink(servers, topic, state, name)
    h.feed(["z", "1"], tracked=False)
    h.checkpoint()  # a first epoch published: the marker read then
    # another task's worker, killed while publishing: its marker sent, its transaction open
    other = {"bootstrap.servers": servers, "transactional.id": f"{name}.other", "logger": LOG}
    killed = Producer(other)
    killed.init_transactions(10)
    killed.begin_transaction()
    killed.produce(f"{topic}.markers", key=b"other", value=b"1", partition=h.bolt.marker_partition)
    killed.flush(10)
    h.feed(["a", "1"], tracked=False)
    txid = h.prepare_checkpoint()
    h.commit_checkpoint(txid, barrier=False)
    h.bolt.publish(txid, [[topic, "a", "1", None]])  # published; the crash came before the state said so
    # that other task starts again a second later: its new producer aborts what the killed one left
    restart = threading.Timer(1.0, lambda: Producer(other).init_transactions(10))
    restart.start()
    try:
        h = sink(servers, topic, state, name)  # the recovery publishes the pending epoch: skipped
    finally:
        restart.join()
    assert h.bolt.published == txid and h.bolt.metrics["skipped"] == 1
    assert sorted(read_all(servers, topic)) == [("a", "1"), ("z", "1")]
    h.close()


class DiesBeforeItsCommit(ExactlyOnceKafkaBolt):
    """Kills its own worker (kill -9) in its first COMMIT of an epoch with records: after the
    checkpoint's commit, before the sink's. Once per topology run directory (``flag``)."""

    def __init__(self, *args, flag: str, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.flag = flag

    def pre_commit(self, txid: int) -> None:
        if self._prepared and self._prepared[0][0] <= txid:
            try:
                os.close(os.open(self.flag, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                pass
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        super().pre_commit(txid)


def mapper(tup):
    return tup.values[0], str(tup.values[1])


@pytest.mark.processes
def test_a_kill_between_the_checkpoints_commit_and_the_sinks_leaves_each_record_once(kafka_broker, tmp_path):  # noqa: F811
    servers = kafka_broker.bootstrap_servers
    source = KafkaSource(servers, make_lines(600, seed=3), kafka_broker.create_topics)
    out = f"eo-out-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topics(out, f"{out}.markers")
    flag = str(tmp_path / "killed")
    bolt = DiesBeforeItsCommit(servers, out, mapper, marker_topic=f"{out}.markers", flag=flag)
    topology = eo.build(source.spout(), bolt)
    conf = eo.conf({"path": str(tmp_path / "state")}, free_ports(3))
    read = lambda: [(k, int(v)) for k, v in read_all(servers, out)]  # noqa: E731
    report = eo.run(topology, conf, read, source, kills=[])
    assert os.path.exists(flag), "no sink died in its commit"
    assert sum(report["restarts"]) >= 1, report


@pytest.mark.processes
def test_kill_9_of_each_worker_kind_then_a_stop_and_a_rerun_leave_each_record_once(kafka_broker, tmp_path):  # noqa: F811
    servers = kafka_broker.bootstrap_servers
    kills = ["sink", "count", "checkpoint"]
    source = KafkaSource(servers, make_lines(1500, seed=4), kafka_broker.create_topics,
                         parts=eo.parts(kills, stop_and_rerun=True))
    out = f"eo-out-{uuid.uuid4().hex[:8]}"
    kafka_broker.create_topics(out, f"{out}.markers")
    bolt = KafkaBolt(servers, out, mapper, exactly_once=True, marker_topic=f"{out}.markers")
    topology = eo.build(source.spout(), bolt)
    conf = eo.conf({"path": str(tmp_path / "state")}, free_ports(3))
    read = lambda: [(k, int(v)) for k, v in read_all(servers, out)]  # noqa: E731
    started = time.monotonic()
    report = eo.run(topology, conf, read, source, kills, stop_and_rerun=True)
    assert [k["component"] for k in report["kills"]] == kills
    LOG.info("kill -9 x3 and a rerun: %.1f s", time.monotonic() - started)
