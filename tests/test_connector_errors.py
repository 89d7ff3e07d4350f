"""A connector's wrong setting, as a user meets it: ``squall run`` of a topology whose spout or
bolt cannot start prints one line naming the topology, the component, the cause and the fix,
and exits 1 (the traceback is for ``-v``: tests/test_cli.py).

Every case runs on real servers where one is needed: librdkafka's mock Kafka cluster, a
``redis-server`` asking for a password, Debian's ``rabbitmq-server``; "unreachable" is port 1
on 127.0.0.1, where nothing listens.
"""

from __future__ import annotations

import os

import pytest

from helpers import squall_cli
from kafka_mock import kafka_cluster  # noqa: F401  (a fixture)
from rabbitmq_server import rabbitmq_server  # noqa: F401  (a fixture)
from redis_server import redis_server  # noqa: F401  (a fixture)

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

PASSWORD = "s3cret"

TOPOLOGY = '''
from squall import BasicBolt, Config, Spout, TopologyBuilder
from squall.connectors import files, kafka, rabbitmq, redis
from squall.api.stateful import StatefulBolt


class Words(Spout):
    outputs = ["word"]

    def open(self, conf, context, collector):
        self.collector = collector

    def next_tuple(self):
        self.collector.emit(["w"])


class Drop(BasicBolt):
    outputs = []

    def execute(self, tup, collector):
        pass


class Keep(StatefulBolt):
    outputs = []

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.collector.ack(tup)


builder = TopologyBuilder()
builder.set_spout("source", {source})
builder.set_bolt("sink", {sink}).shuffle_grouping("source")
topology = builder.create_topology()
config = Config({config})
'''

# id -> (spout, bolt, config, the component at fault, the end of the line)
CASES = {
    "kafka-spout-unreachable": (
        "kafka.KafkaSpout(kafka.KafkaSpoutConfig('127.0.0.1:1', topics=['t'], open_timeout_ms=1000))", None, None,
        "source", "KafkaSpout 'source': topic 't' group 'squall' at 127.0.0.1:1: cannot reach Kafka at 127.0.0.1:1 "
        "within 1000 ms (Failed to get metadata: Local: Broker transport failure): check bootstrap_servers, and "
        "that the brokers run"),
    "stateful-kafka-spout-unreachable": (
        "kafka.StatefulKafkaSpout(kafka.KafkaSpoutConfig('127.0.0.1:1', topics=['t'], open_timeout_ms=1000))",
        None, None, "source", "StatefulKafkaSpout 'source': topic 't' group 'squall' at 127.0.0.1:1: cannot reach "
        "Kafka at 127.0.0.1:1 within 1000 ms (Failed to get metadata: Local: Broker transport failure): check "
        "bootstrap_servers, and that the brokers run"),
    "kafka-spout-missing-topic": (
        "kafka.KafkaSpout(kafka.KafkaSpoutConfig('{kafka}', topics=['nosuch']))", None, None,
        "source", "KafkaSpout 'source': topic 'nosuch' group 'squall' at {kafka}: topic 'nosuch' does not exist "
        "(not in the cluster's metadata): create it, or check topics="),
    "stateful-kafka-spout-missing-topic": (
        "kafka.StatefulKafkaSpout(kafka.KafkaSpoutConfig('{kafka}', topics=['nosuch']))", None, None,
        "source", "StatefulKafkaSpout 'source': topic 'nosuch' group 'squall' at {kafka}: topic 'nosuch' does not "
        "exist (not in the cluster's metadata): create it, or check topics="),
    "kafka-bolt-unreachable": (
        None, "kafka.KafkaBolt('127.0.0.1:1', 't', open_timeout_ms=1000)", None,
        "sink", "KafkaBolt 'sink' at 127.0.0.1:1: cannot reach Kafka at 127.0.0.1:1 within 1000 ms (Failed to get "
        "metadata: Local: Broker transport failure): check bootstrap_servers, and that the brokers run"),
    "redis-spout-unreachable": (
        "redis.RedisStreamSpout('s', 'g', port=1)", None, None,
        "source", "RedisStreamSpout 'source': stream 's' group 'g' at 127.0.0.1:1: cannot reach Redis at "
        "127.0.0.1:1: Error 111 connecting to 127.0.0.1:1. Connection refused. (is redis-server running there?)"),
    "redis-spout-wrong-password": (
        "redis.RedisStreamSpout('s', 'g', port={redis}, password='wrong')", None, None,
        "source", "RedisStreamSpout 'source': stream 's' group 'g' at 127.0.0.1:{redis}: Redis at 127.0.0.1:{redis} "
        "refused the password (invalid username-password pair or user is disabled.): check password="),
    "redis-bolt-no-password": (
        None, "redis.RedisStoreBolt(lambda t: {{'w': t.values[0]}}, key='k', port={redis})", None,
        "sink", "RedisStoreBolt 'sink' at 127.0.0.1:{redis}: Redis at 127.0.0.1:{redis} requires a password: give "
        "password="),
    "rabbitmq-spout-unreachable": (
        "rabbitmq.RabbitMQSpout('q', port=1)", None, None,
        "source", "RabbitMQSpout 'source': queue 'q' at 127.0.0.1:1: cannot reach RabbitMQ at 127.0.0.1:1 (vhost "
        "'/'): Connection refused"),
    "rabbitmq-spout-wrong-password": (
        "rabbitmq.RabbitMQSpout('q', port={rabbitmq}, password='wrong')", None, None,
        "source", "RabbitMQSpout 'source': queue 'q' at 127.0.0.1:{rabbitmq}: RabbitMQ at 127.0.0.1:{rabbitmq} "
        "refused user 'guest''s login: check username= and password="),
    "rabbitmq-spout-missing-queue": (
        "rabbitmq.RabbitMQSpout('nosuch', port={rabbitmq})", None, None,
        "source", "RabbitMQSpout 'source': queue 'nosuch' at 127.0.0.1:{rabbitmq}: queue 'nosuch' does not exist "
        "(in vhost '/'); declare it, or pass declare=True"),
    "rabbitmq-spout-missing-vhost": (
        "rabbitmq.RabbitMQSpout('q', port={rabbitmq}, virtual_host='nosuch')", None, None,
        "source", "RabbitMQSpout 'source': queue 'q' at 127.0.0.1:{rabbitmq}: RabbitMQ at 127.0.0.1:{rabbitmq} "
        "refused vhost 'nosuch' to user 'guest' (ConnectionClosedByBroker: (530) 'NOT_ALLOWED - vhost nosuch not "
        "found'): check virtual_host= and the user's permissions"),
    "rabbitmq-bolt-missing-exchange": (
        None, "rabbitmq.RabbitMQBolt('nosuch', 'q', port={rabbitmq})", None,
        "sink", "RabbitMQBolt 'sink': exchange 'nosuch' at 127.0.0.1:{rabbitmq}: exchange 'nosuch' does not exist "
        "(in vhost '/'); declare it first"),
    "directory-spout-missing-directory": (
        "files.DirectorySpout('{tmp}/nosuch', archive_dir='{tmp}/done', bad_dir='{tmp}/bad')", None, None,
        "source", "FileNotFoundError: DirectorySpout: source directory '{tmp}/nosuch' does not exist: create it, or "
        "check source_dir="),
    "file-bolt-output-directory-not-creatable": (
        None, "files.FileBolt('{tmp}/a-file/out')", None,
        "sink", "NotADirectoryError: FileBolt: cannot create output_dir '{tmp}/a-file/out': Not a directory"),
}


@pytest.fixture(scope="module")
def servers(kafka_cluster, redis_server, rabbitmq_server):  # noqa: F811  (fixtures)
    import redis

    client = redis.Redis(host="127.0.0.1", port=redis_server.port)
    client.config_set("requirepass", PASSWORD)
    client.close()
    return {"kafka": kafka_cluster, "redis": redis_server.port, "rabbitmq": rabbitmq_server.port}


def run_bad(tmp_path, case: str, source: str | None, sink: str | None, config: str | None,
            places: dict) -> list[str]:
    """``squall run`` of the case's topology: exit status 1, nothing on stdout; its stderr lines
    but the state announcement."""
    path = tmp_path / "bad.py"
    path.write_text(TOPOLOGY.format(source=(source or "Words()").format(**places),
                                    sink=(sink or "Drop()").format(**places), config=config or ""))
    proc = squall_cli("run", str(path), "--name", case, "--duration", "30",
                      env={**os.environ, "SQUALL_HOME": str(tmp_path / "home")})
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    return [line for line in proc.stderr.splitlines() if not line.startswith("squall: starting ")]


@pytest.mark.parametrize("case", list(CASES))
def test_a_connector_that_cannot_start_is_one_line_naming_component_cause_and_fix(tmp_path, servers, case):
    source, sink, config, component, end = CASES[case]
    (tmp_path / "a-file").write_text("")
    places = {**servers, "tmp": tmp_path}
    [line] = run_bad(tmp_path, case, source, sink, config, places)
    start = f"squall: error: topology '{case}': worker 0 could not start: component '{component}' (task "
    assert line.startswith(start) and line.endswith(end.format(**places)), line


def test_an_unreachable_redis_state_provider_is_one_line(tmp_path):
    config = "{'topology.state.provider': 'redis', 'topology.state.provider.config': {'port': 1}}"
    [line] = run_bad(tmp_path, "state", None, "Keep()", config, {})
    assert line == ("squall: error: state provider 'redis': cannot reach Redis at 127.0.0.1:1: Error 111 connecting "
                    "to 127.0.0.1:1. Connection refused. (is redis-server running there?)")
