"""Kafka connectors: :class:`KafkaSpout`, reading topics through a consumer group with
storm-kafka-client's semantics, :class:`StatefulKafkaSpout`, whose offsets are in the
topology's checkpoints (effectively once), and :class:`KafkaBolt`, writing tuples to topics. All use
librdkafka through ``confluent-kafka`` (``pip install "squall[kafka]"``).

``open``/``prepare`` ask the cluster for its metadata (``open_timeout_ms``, 5000), so a
cluster that cannot be reached fails the submission with an error naming the component and
the bootstrap ``host:port``; a topic the spout names and the cluster does not have (with
auto-creation disabled) fails it naming the topic. Afterwards librdkafka reconnects by itself.

:class:`KafkaSpout` — the contract
----------------------------------

* **Reading.** Every task of the spout is a consumer of group ``group_id``, subscribed to
  ``topics`` (or to the topics matching ``pattern``); Kafka spreads the partitions over the
  tasks and moves them when tasks come and go (a rebalance). A task with no partition (more
  tasks than partitions) emits nothing. Records are fetched ``max_poll_records`` at a time,
  waiting at most ``poll_timeout_ms`` (keep it a few milliseconds: ``next_tuple`` must not
  block), and emitted one per ``next_tuple`` call, so ``topology.max.spout.pending`` caps the
  records in flight.
* **Where reading starts** (``first_poll_offset_strategy``), the first time this spout is given
  a partition: ``EARLIEST``/``LATEST``: the beginning/end of the partition, whatever the group
  committed (so a redeployed topology reads again from there); ``UNCOMMITTED_EARLIEST``
  (default)/``UNCOMMITTED_LATEST``: the group's committed offset, or the beginning/end when
  there is none. A partition that comes back after a rebalance resumes at the committed offset.
* **Emitting.** ``translator(record)`` (a :class:`KafkaRecord`) gives the values, or a
  :class:`Route` ``(stream, values)`` to pick a stream, or ``None`` to skip the record (it counts
  as acked, ``skipped``); ``output_fields`` declares the streams (a list: the ``default``
  stream's; a dict: stream -> fields). Default: fields ``topic``, ``partition``, ``offset``,
  ``key``, ``value`` (key and value decoded with ``encoding``, UTF-8; ``encoding=None`` keeps
  bytes).
* **AT_LEAST_ONCE** (default). A record is emitted with a :class:`KafkaMessageId` (topic,
  partition, offset; plus the assignment generation, so an ack arriving after its partition was
  taken away and given back is ignored). Offsets are committed every ``offset_commit_period_ms``,
  when partitions are revoked, and on ``close``, and only up to the lowest offset of the
  partition not yet acked (the committed offset is the next one to read): a record is never
  committed before its tuple tree completed. A failed tuple (failed by a bolt, or timed out) is
  emitted again from the kept record after the ``retry`` backoff (``initial_delay_ms``
  multiplied by ``multiplier`` at each failure up to ``max_delay_ms``); after ``max_retries``
  failures it is given up: emitted on the error stream, acked (its offset may be committed) and
  logged. With more than ``max_uncommitted_offsets`` offsets read past a partition's commit point,
  the partition is paused until commits catch up. **Guarantee:** every record is processed at
  least once; records are emitted again only after a failure, a crash or kill before the commit
  (up to ``offset_commit_period_ms`` of acked records), or a rebalance that moved a partition with
  records in flight.
* **AT_MOST_ONCE.** The offsets of every fetched batch are committed before any of it is emitted;
  records are emitted without message id (no ack, no retry). **Guarantee:** no record is
  processed twice; records fetched but not processed when the worker dies are lost.
* **NO_GUARANTEE.** Emitted without message id; offsets are committed in the background every
  ``offset_commit_period_ms`` by librdkafka (auto commit) whatever became of the tuples.
  **Guarantee:** none: a record can be lost or processed twice.
* **Rebalances.** When partitions are revoked the spout commits what was acked for them, then
  forgets their records (buffered, in flight, waiting for retry): their acks and fails arriving
  later are ignored, their records in flight are read again by whichever task gets the
  partition. Nothing acked is lost; nothing is committed twice.
* **Bad records.** When the translator raises (or its values do not fit the declared stream),
  the record is emitted on the ``error`` stream (``error_stream``; fields ``topic``,
  ``partition``, ``offset``, ``error``), tracked as the record itself under AT_LEAST_ONCE: its
  offset is committed once that tuple is processed (at once when nothing subscribes). Never
  silently dropped.
* **Kafka going away.** ``next_tuple`` never raises for Kafka's errors: it logs the first error
  of an outage (and "reachable again" at its end), counts them, and keeps polling; librdkafka
  reconnects. A failed commit is logged and tried again at the next period.
* **Threads.** Both connectors are blocking components (``blocking = True``): a thread per
  executor. Note librdkafka's ``max.poll.interval.ms`` (300 s): a spout not polled that long
  (deactivated, or held at ``max.spout.pending``) leaves the group until polled again.
* **Metrics.** ``spout.metrics``: counters ``read``, ``emitted``, ``acked``, ``failed``,
  ``replayed``, ``given_up``, ``skipped``, ``errors`` (bad records, Kafka errors), ``commits``;
  and dicts keyed ``"topic:partition"``: ``committed`` (last committed offset) and ``lag``
  (high watermark minus position, where known).

:class:`StatefulKafkaSpout` — effectively once with stateful bolts
-------------------------------------------------------------------

A :class:`KafkaSpout` that is also a :class:`~squall.api.stateful.StatefulSpout`: its partition
offsets are in the topology's checkpoints, with the bolts' state (README, "State and windows").
Its tasks split the partitions of ``topics`` among themselves (task ``i`` of ``n``: partitions
``p % n == i``; no consumer group, no rebalance), emit without message ids and keep
``{"topic:partition": next offset}`` in their state as they emit. After a crash or a failed
checkpoint every component returns to the last commit, and ``init_state`` seeks each partition
back to the offset committed with it, so ``StatefulKafkaSpout -> ... -> stateful bolts`` counts
every record exactly once in the committed state. Empty state (the first start): where
``first_poll_offset_strategy`` says. Offsets are committed to Kafka (group ``group_id``) after each
checkpoint commits, for lag monitoring only. Bolts that are not stateful see the records after
the last commit again after a rollback (at least once). See the class for the details.

:class:`KafkaBolt`: see its documentation.
"""

from __future__ import annotations

import heapq
import logging
import time
import zlib
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from squall.api.bolt import Bolt
from squall.api.config import Config
from squall.api.spout import Spout
from squall.api.stateful import StatefulSpout
from squall.api.two_phase_commit import WriteAheadSink
from squall.connectors import ExactlyOnceOption, Route, SpoutStreams, require

if TYPE_CHECKING:
    from squall.api.collector import IOutputCollector, ISpoutOutputCollector
    from squall.api.component import OutputFieldsDeclarer
    from squall.api.context import TopologyContext
    from squall.api.state import KeyValueState
    from squall.api.tuple import Tuple

log = logging.getLogger("squall.connectors.kafka")

__all__ = ["AT_LEAST_ONCE", "AT_MOST_ONCE", "EARLIEST", "LATEST", "NO_GUARANTEE", "UNCOMMITTED_EARLIEST",
           "UNCOMMITTED_LATEST", "KafkaBolt", "KafkaConnectorError", "KafkaMessageId", "KafkaRecord", "KafkaSpout",
           "KafkaSpoutConfig", "RetryPolicy", "Route", "StatefulKafkaSpout", "ExactlyOnceKafkaBolt"]

AT_LEAST_ONCE, AT_MOST_ONCE, NO_GUARANTEE = "AT_LEAST_ONCE", "AT_MOST_ONCE", "NO_GUARANTEE"
EARLIEST, LATEST = "EARLIEST", "LATEST"
UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST = "UNCOMMITTED_EARLIEST", "UNCOMMITTED_LATEST"
_GUARANTEES = (AT_LEAST_ONCE, AT_MOST_ONCE, NO_GUARANTEE)
_STRATEGIES = (EARLIEST, LATEST, UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST)


class KafkaConnectorError(RuntimeError):
    """Kafka could not be reached, or a topic is missing; the message names ``host:port`` or
    the topic."""


class KafkaRecord(NamedTuple):
    """A record as the translator sees it (key and value decoded unless ``encoding=None``)."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int | None
    headers: list[tuple[str, bytes]] | None


class KafkaMessageId(NamedTuple):
    """The message id of an AT_LEAST_ONCE tuple: the record's place, and the generation of the
    partition's assignment it was emitted under."""

    topic: str
    partition: int
    offset: int
    generation: int = 0


@dataclass
class RetryPolicy:
    """Exponential backoff of failed tuples (storm-kafka-client's
    ``KafkaSpoutRetryExponentialBackoff``): delay ``initial_delay_ms * multiplier ** (n - 1)``
    before the n-th retry, at most ``max_delay_ms``; ``max_retries`` (None: forever)."""

    initial_delay_ms: float = 0
    multiplier: float = 2.0
    max_delay_ms: float = 10_000
    max_retries: int | None = None

    def delay_ms(self, failures: int) -> float:
        return min(self.initial_delay_ms * self.multiplier ** (failures - 1), self.max_delay_ms)


def _default_translator(record: KafkaRecord) -> list[Any]:
    return [record.topic, record.partition, record.offset, record.key, record.value]


@dataclass
class KafkaSpoutConfig:
    """What a :class:`KafkaSpout` reads and how (see the module's documentation)."""

    bootstrap_servers: str
    topics: list[str] | None = None
    pattern: str | None = None
    group_id: str = "squall"
    translator: Callable[[KafkaRecord], Any] | None = None
    output_fields: list[str] | dict[str, list[str]] | None = None
    error_stream: str = "error"
    encoding: str | None = "utf-8"
    processing_guarantee: str = AT_LEAST_ONCE
    first_poll_offset_strategy: str = UNCOMMITTED_EARLIEST
    max_uncommitted_offsets: int = 10_000_000
    offset_commit_period_ms: int = 30_000
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    poll_timeout_ms: int = 5
    max_poll_records: int = 500
    open_timeout_ms: int = 5_000
    consumer_config: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if (self.topics is None) == (self.pattern is None):
            raise ValueError("KafkaSpoutConfig: give topics or pattern (one of the two)")
        if self.topics is not None:
            self.topics = [self.topics] if isinstance(self.topics, str) else list(self.topics)
            if not self.topics:
                raise ValueError("KafkaSpoutConfig: topics is empty")
        if self.processing_guarantee not in _GUARANTEES:
            raise ValueError(f"KafkaSpoutConfig: processing_guarantee must be one of {', '.join(_GUARANTEES)}, "
                             f"got {self.processing_guarantee!r}")
        if self.first_poll_offset_strategy not in _STRATEGIES:
            raise ValueError(f"KafkaSpoutConfig: first_poll_offset_strategy must be one of {', '.join(_STRATEGIES)}, "
                             f"got {self.first_poll_offset_strategy!r}")
        if self.max_uncommitted_offsets < 1:
            raise ValueError("KafkaSpoutConfig: max_uncommitted_offsets must be at least 1")


def _check_reachable(client: Any, servers: str, where: str, timeout_ms: float) -> Any:
    """The cluster's metadata, or :class:`KafkaConnectorError` naming ``servers``."""
    from confluent_kafka import KafkaException

    try:
        return client.list_topics(timeout=timeout_ms / 1000)
    except KafkaException as e:
        raise KafkaConnectorError(f"{where}: cannot reach Kafka at {servers} within {timeout_ms:g} ms "
                                  f"({_reason(e)}): check bootstrap_servers, and that the brokers run") from e


def _reason(error: BaseException) -> str:
    """librdkafka's description of ``error`` (a KafkaException)."""
    inner = error.args[0] if error.args else error
    return getattr(inner, "str", inner.__str__)()


def _missing(metadata: Any, topic: str) -> Any:
    """Why ``topic`` is not in the cluster's ``metadata`` (an error or a sentence), or None."""
    found = metadata.topics.get(topic)
    if found is None:
        return "not in the cluster's metadata"
    return found.error


class _LibrdkafkaLog:
    """Where librdkafka's own log lines go (confluent-kafka calls ``log(level, format, *args)``):
    at DEBUG, since its errors also reach ``error_cb`` (:class:`_Outage`), which logs an outage
    once, where librdkafka logs every reconnection attempt."""

    def log(self, level: int, msg: str, *args: Any) -> None:
        log.debug(msg, *args)


_LIBRDKAFKA_LOG = _LibrdkafkaLog()


class _Outage:
    """Logs the first error of an outage and its end, not every error in between. Until
    ``opened`` is set, errors are only counted: ``open`` raises naming the cause if the cluster
    stays out of reach."""

    def __init__(self, where: str, metrics: dict[str, Any]) -> None:
        self.where, self.metrics, self.down = where, metrics, False
        self.opened = False

    def error(self, error: Any) -> None:
        from confluent_kafka import KafkaError

        self.metrics["errors"] += 1
        if not self.opened:
            log.debug("%s: Kafka error while opening: %s", self.where, error)
        elif getattr(error, "fatal", lambda: False)():
            log.error("%s: fatal Kafka error: %s", self.where, error)
        elif not self.down:
            self.down = True
            log.warning("%s: Kafka error (%s); going on (librdkafka reconnects by itself, a failed commit is "
                        "tried again at the next one)", self.where, error)
        elif isinstance(error, KafkaError):
            log.debug("%s: Kafka error: %s", self.where, error)

    def fine(self) -> None:
        if self.down:
            self.down = False
            log.warning("%s: Kafka is reachable again", self.where)


class _Partition:
    """The AT_LEAST_ONCE bookkeeping of one assigned partition (storm-kafka-client's
    ``OffsetManager``): every offset read and not yet acked is ``pending``; the commit point is
    the lowest pending offset, or the end of what was read."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.pending: set[int] = set()
        self.read_end: int | None = None  # the offset after the last one read
        self.committed: int | None = None  # the last offset committed by this spout
        self.paused = False

    def commit_point(self) -> int | None:
        if self.pending:
            return min(self.pending)
        return self.read_end

    def uncommitted(self) -> int:
        if self.read_end is None:
            return 0
        start = self.committed if self.committed is not None else min(self.pending, default=self.read_end)
        return self.read_end - start


def _key(topic: str, partition: int) -> str:
    return f"{topic}:{partition}"


class KafkaSpout(Spout):
    """Emits the records of Kafka topics read through a consumer group (storm-kafka-client's
    ``KafkaSpout``; see the module's documentation for the contract)."""

    keeps_position = True  # what is acked is not read again: acks wait for the commit of stateful bolts

    blocking = True  # network I/O: a thread of its own, never stalling the cooperative ones
    _message_ids = True  # AT_LEAST_ONCE emits with message ids (StatefulKafkaSpout never does)

    def __init__(self, config: KafkaSpoutConfig) -> None:
        require("confluent_kafka", "kafka", "KafkaSpout")
        self.config = config
        self.translator = config.translator or _default_translator
        self.streams = SpoutStreams("KafkaSpout", config.output_fields, ["topic", "partition", "offset", "key", "value"],
                                    config.error_stream, ["topic", "partition", "offset", "error"])
        self.metrics = self._zero_metrics()

    @staticmethod
    def _zero_metrics() -> dict[str, Any]:
        names = ("read", "emitted", "acked", "failed", "replayed", "given_up", "skipped", "errors", "commits")
        metrics: dict[str, Any] = dict.fromkeys(names, 0)
        metrics["committed"], metrics["lag"] = {}, {}
        return metrics

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.streams.declare(declarer)

    # -- lifecycle --------------------------------------------------------------------------

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: ISpoutOutputCollector) -> None:
        from confluent_kafka import Consumer, KafkaException

        c = self.config
        self._collector = collector
        self._kafka_exception = KafkaException  # what next_tuple catches: imported once, not per call
        # the default translator onto a default stream of five fields: the values are built
        # straight from the message (no KafkaRecord), and they always fit the stream (what
        # SpoutStreams.route checks), so there is no check per record
        self._plain_values = (self.translator is _default_translator
                              and len(self.streams.fields.get("default", ())) == 5)
        component = context.get_this_component_id()
        what = (f"topic{'s' * (len(c.topics) > 1)} {', '.join(map(repr, c.topics))}" if c.topics
                else f"pattern {c.pattern!r}")
        self._where = f"{type(self).__name__} {component!r}: {what} group {c.group_id!r} at {c.bootstrap_servers}"
        self.metrics = self._zero_metrics()
        self._outage = _Outage(self._where, self.metrics)
        self._tracked = self._message_ids and c.processing_guarantee == AT_LEAST_ONCE
        self._partitions: dict[tuple[str, int], _Partition] = {}  # assigned now
        self._ever_assigned: set[tuple[str, int]] = set()
        self._generation = 0
        self._buffer: deque[Any] = deque()  # fetched, not yet emitted (confluent_kafka Messages)
        self._records: dict[KafkaMessageId, Any] = {}  # emitted, kept for a retry until acked
        self._failures: dict[KafkaMessageId, int] = {}
        self._retries: list[tuple[float, KafkaMessageId]] = []  # heap of (due, id)
        self._next_commit = time.monotonic() + c.offset_commit_period_ms / 1000
        settings = self._consumer_settings()
        self._consumer = Consumer(settings)
        try:
            metadata = _check_reachable(self._consumer, c.bootstrap_servers, self._where, c.open_timeout_ms)
            self._outage.opened = True
            auto_created = str(settings.get("allow.auto.create.topics", "false")).lower() == "true"
            for topic in c.topics or ():
                reason = _missing(metadata, topic)
                if reason is not None and not auto_created:
                    raise KafkaConnectorError(f"{self._where}: topic {topic!r} does not exist ({reason}): create "
                                             f"it, or check topics=")
            self._start(metadata)
        except Exception:
            self._consumer.close()
            raise

    def _consumer_settings(self) -> dict[str, Any]:
        """The consumer's configuration: the spout's, then ``consumer_config`` over it."""
        c = self.config
        settings: dict[str, Any] = {
            "bootstrap.servers": c.bootstrap_servers,
            "group.id": c.group_id,
            "auto.offset.reset": "latest" if c.first_poll_offset_strategy.endswith("LATEST") else "earliest",
            "enable.auto.commit": c.processing_guarantee == NO_GUARANTEE,
            "logger": _LIBRDKAFKA_LOG,
            "error_cb": self._outage.error,
        }
        if c.processing_guarantee == NO_GUARANTEE:
            settings["auto.commit.interval.ms"] = c.offset_commit_period_ms
        settings.update(c.consumer_config)
        return settings

    def _start(self, metadata: Any) -> None:
        """Start reading (``open``, the cluster reached): join the group; Kafka assigns the
        partitions (:meth:`_on_assign`)."""
        c = self.config
        subscription = list(c.topics) if c.topics else [c.pattern if c.pattern.startswith("^") else f"^{c.pattern}"]
        self._consumer.subscribe(subscription, on_assign=self._on_assign, on_revoke=self._on_revoke,
                                 on_lost=self._on_lost)

    def close(self) -> None:
        consumer = getattr(self, "_consumer", None)
        if consumer is None:
            return
        try:
            if self._tracked:
                self._commit()
            consumer.close()  # leaves the group (its revoke callback commits nothing more)
        except Exception as e:  # closing must not fail the kill
            log.warning("%s: closing the consumer: %s", self._where, e)
        self._consumer = None

    # -- rebalances (called inside consumer.consume, on the executor's thread) -------------------

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_END

        strategy = self.config.first_poll_offset_strategy
        for tp in partitions:
            place = (tp.topic, tp.partition)
            if place not in self._ever_assigned:
                self._ever_assigned.add(place)
                if strategy == EARLIEST:
                    tp.offset = OFFSET_BEGINNING
                elif strategy == LATEST:
                    tp.offset = OFFSET_END
            self._generation += 1
            self._partitions[place] = _Partition(self._generation)
        consumer.assign(partitions)
        log.info("%s: assigned %s", self._where, ", ".join(_key(tp.topic, tp.partition) for tp in partitions))

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        if self._tracked:
            self._commit(partitions=[(tp.topic, tp.partition) for tp in partitions])
        self._forget(partitions)
        consumer.unassign()
        log.info("%s: revoked %s", self._where, ", ".join(_key(tp.topic, tp.partition) for tp in partitions))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        log.warning("%s: partitions lost (not committed): %s", self._where,
                    ", ".join(_key(tp.topic, tp.partition) for tp in partitions))
        self._forget(partitions)

    def _forget(self, partitions: list[Any]) -> None:
        gone = {(tp.topic, tp.partition) for tp in partitions}
        for place in gone:
            self._partitions.pop(place, None)
            self.metrics["lag"].pop(_key(*place), None)
        self._buffer = deque(m for m in self._buffer if (m.topic(), m.partition()) not in gone)
        for msg_id in [m for m in self._records if (m.topic, m.partition) in gone]:
            del self._records[msg_id]
            self._failures.pop(msg_id, None)
        self._retries = [r for r in self._retries if (r[1].topic, r[1].partition) not in gone]
        heapq.heapify(self._retries)

    # -- next_tuple ---------------------------------------------------------------------------

    def next_tuple(self) -> None:
        now = time.monotonic()
        try:
            if self._tracked and now >= self._next_commit:
                self._next_commit = now + self.config.offset_commit_period_ms / 1000
                self._commit()
            if self._retries and self._retries[0][0] <= now:
                _, msg_id = heapq.heappop(self._retries)
                message = self._records.get(msg_id)
                if message is not None:
                    self.metrics["replayed"] += 1
                    self._emit(message, msg_id)
                return
            if not self._buffer:
                self._poll()
            if self._buffer:
                self._emit_next(self._buffer.popleft())
        except self._kafka_exception as e:
            self._outage.error(e.args[0] if e.args else e)

    def _emit_next(self, message: Any) -> None:
        """Emit a fetched record (with a message id under AT_LEAST_ONCE, kept for a retry)."""
        if not self._tracked:
            self._emit(message, None)
            return
        topic, partition = message.topic(), message.partition()
        state = self._partitions.get((topic, partition))
        if state is None:
            return  # of a partition no longer ours: its new owner reads it from the commit
        msg_id = KafkaMessageId(topic, partition, message.offset(), state.generation)
        self._records[msg_id] = message
        self._emit(message, msg_id)

    def _poll(self) -> None:
        c = self.config
        messages = self._consumer.consume(c.max_poll_records, c.poll_timeout_ms / 1000)
        good = [m for m in messages if m.error() is None]
        if len(good) < len(messages):
            for message in messages:
                if message.error() is not None:
                    self._outage.error(message.error())
        if not good:
            return
        self._outage.fine()
        self.metrics["read"] += len(good)
        if c.processing_guarantee == AT_MOST_ONCE:
            ends: dict[tuple[str, int], int] = {}
            for m in good:
                ends[(m.topic(), m.partition())] = m.offset() + 1
            self._commit_offsets(ends)  # before anything is emitted: a crash loses, never repeats
        elif self._tracked:
            partitions = self._partitions
            for m in good:
                state = partitions.get((m.topic(), m.partition()))
                if state is not None:
                    offset = m.offset()
                    state.pending.add(offset)
                    if state.read_end is None or offset >= state.read_end:
                        state.read_end = offset + 1
            self._pause_full()
        self._buffer.extend(good)

    def _key_value(self, message: Any) -> tuple[Any, Any]:
        """The record's key and value, decoded with ``encoding`` (unless None)."""
        key, value, encoding = message.key(), message.value(), self.config.encoding
        if encoding is not None:
            key = key.decode(encoding) if isinstance(key, bytes) else key
            value = value.decode(encoding) if isinstance(value, bytes) else value
        return key, value

    def _record(self, message: Any) -> KafkaRecord:
        key, value = self._key_value(message)
        kind, timestamp = message.timestamp()
        return KafkaRecord(message.topic(), message.partition(), message.offset(), key, value,
                           timestamp if kind else None, message.headers())

    def _emit(self, message: Any, msg_id: KafkaMessageId | None) -> None:
        try:
            if self._plain_values:  # what _default_translator gives, without the record
                stream, values = "default", [message.topic(), message.partition(), message.offset(),
                                             *self._key_value(message)]
            else:
                out = self.translator(self._record(message))
                if out is None:
                    self.metrics["skipped"] += 1
                    if msg_id is not None:
                        self.ack(msg_id)
                    return
                stream, values = self.streams.route(out)
        except Exception as e:
            self._reject(message, msg_id, e)
            return
        self._collector.emit(values, stream=stream, msg_id=msg_id)
        self.metrics["emitted"] += 1

    def _reject(self, message: Any, msg_id: KafkaMessageId | None, error: Exception) -> None:
        """A bad record: to the error stream, tracked as the record."""
        self.metrics["errors"] += 1
        log.warning("%s: the translator rejected record %s offset %d (%s: %s): emitted on stream %r",
                    self._where, _key(message.topic(), message.partition()), message.offset(),
                    type(error).__name__, error, self.streams.error_stream)
        self._collector.emit([message.topic(), message.partition(), message.offset(),
                              f"{type(error).__name__}: {error}"], stream=self.streams.error_stream, msg_id=msg_id)
        self.metrics["emitted"] += 1

    # -- commits ------------------------------------------------------------------------------

    def _commit(self, partitions: list[tuple[str, int]] | None = None) -> None:
        """Commit, for ``partitions`` (default: all assigned), up to the lowest un-acked offset."""
        points = {}
        for place in partitions if partitions is not None else list(self._partitions):
            state = self._partitions.get(place)
            if state is None:
                continue
            point = state.commit_point()
            if point is not None and point != state.committed:
                points[place] = point
        if points:
            self._commit_offsets(points)
        self._pause_full()
        self._update_lag()

    def _commit_offsets(self, points: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        try:
            self._consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in points.items()],
                                  asynchronous=False)
        except KafkaException as e:
            self._outage.error(e.args[0] if e.args else e)
            return
        self._committed(points)

    def _committed(self, points: dict[tuple[str, int], int]) -> None:
        """Kafka confirmed the commit of ``points``."""
        self.metrics["commits"] += 1
        for place, offset in points.items():
            self.metrics["committed"][_key(*place)] = offset
            state = self._partitions.get(place)
            if state is not None:
                state.committed = offset

    def _pause_full(self) -> None:
        """Pause the partitions with ``max_uncommitted_offsets`` read past their commit point;
        resume the others."""
        from confluent_kafka import TopicPartition

        limit = self.config.max_uncommitted_offsets
        pause, resume = [], []
        for (topic, partition), state in self._partitions.items():
            full = state.uncommitted() >= limit
            if full != state.paused:
                state.paused = full
                (pause if full else resume).append(TopicPartition(topic, partition))
        if pause:
            self._consumer.pause(pause)
        if resume:
            self._consumer.resume(resume)

    def _update_lag(self) -> None:
        from confluent_kafka import TopicPartition

        places = [TopicPartition(t, p) for t, p in self._partitions]
        if places:
            self._record_lag({(tp.topic, tp.partition): tp.offset for tp in self._consumer.position(places)})

    def _record_lag(self, positions: dict[tuple[str, int], int]) -> None:
        """``lag``: the high watermark (as last fetched) minus the position, per partition."""
        from confluent_kafka import TopicPartition

        for (topic, partition), offset in positions.items():
            if offset < 0:
                continue
            try:
                _, high = self._consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
            except Exception:  # noqa: BLE001  (not known yet)
                continue
            if high is not None and high >= 0:
                self.metrics["lag"][_key(topic, partition)] = high - offset

    # -- ack / fail ---------------------------------------------------------------------------

    def _current(self, msg_id: Any) -> _Partition | None:
        """The partition state ``msg_id`` belongs to, or None when it was revoked since."""
        if not isinstance(msg_id, KafkaMessageId):
            return None
        state = self._partitions.get((msg_id.topic, msg_id.partition))
        return state if state is not None and state.generation == msg_id.generation else None

    def ack(self, msg_id: Any) -> None:
        state = self._current(msg_id)
        if state is None:
            return  # revoked since: another task reads it again
        try:
            state.pending.remove(msg_id.offset)
        except KeyError:
            return  # acked already
        self._records.pop(msg_id, None)
        self._failures.pop(msg_id, None)
        self.metrics["acked"] += 1

    def fail(self, msg_id: Any) -> None:
        self.metrics["failed"] += 1
        if self._current(msg_id) is None or msg_id not in self._records:
            return  # revoked since: nothing to replay here
        failures = self._failures.get(msg_id, 0) + 1
        retry = self.config.retry
        if retry.max_retries is not None and failures > retry.max_retries:
            self.metrics["given_up"] += 1
            reason = f"failed {failures} times (max_retries {retry.max_retries}): given up"
            log.warning("%s: record %s offset %d %s", self._where, _key(msg_id.topic, msg_id.partition),
                        msg_id.offset, reason)
            self._collector.emit([msg_id.topic, msg_id.partition, msg_id.offset, reason],
                                 stream=self.streams.error_stream)
            self.ack(msg_id)
            return
        self._failures[msg_id] = failures
        heapq.heappush(self._retries, (time.monotonic() + retry.delay_ms(failures) / 1000, msg_id))


class StatefulKafkaSpout(KafkaSpout, StatefulSpout):
    """A :class:`KafkaSpout` whose partition offsets are part of the topology's checkpoints:
    with stateful bolts, effectively once (the committed state counts every record exactly
    once, across ``kill -9`` of any worker). Flink's Kafka source does the same.

    * **Partitions.** No consumer-group membership, no rebalance: task ``i`` of the ``n`` tasks
      reads the partitions ``p`` with ``p % n == i`` of each topic of ``topics`` (the same after
      every restart). The topics must exist when the spout opens; partitions added later are
      read after the next restart. ``pattern`` is refused (the set of topics must not move).
    * **State.** The task's state maps ``"topic:partition"`` to the next offset to read, written
      as each record is emitted, so the position committed with a checkpoint is exactly that of
      the records before its barrier. Keep the spout's parallelism when submitting again under
      the same name: positions are per task.
    * **Start and rollback.** ``init_state`` (at start, and after every rollback with the state
      rolled back) drops what was fetched and not emitted and seeks each partition to the offset
      its state holds. A partition the state does not hold starts where
      ``first_poll_offset_strategy`` says (``EARLIEST``/``LATEST``: its first/next offset;
      ``UNCOMMITTED_*``: the group's committed offset, else the first/next), resolved to a
      number once per ``open`` and put in the state, so a rollback before the partition's first
      commit returns to the same offset. A restart before the first checkpoint commits resolves it
      again.
    * **Emitting.** As :class:`KafkaSpout` (translator, streams, error stream, metrics), but
      without message ids: no ack, no fail, no retry; a rollback replays (the records after the
      last commit are emitted again, and bolts that are not stateful see them again).
    * **Commits to Kafka** are for monitoring only (lag tools): after each checkpoint commits,
      its positions are committed to group ``group_id`` (asynchronously; ``committed``/``commits``
      metrics once Kafka confirmed). Correctness never depends on them. Give the spout a group of
      its own: Kafka refuses commits by a consumer outside a group that has live members.
    * ``processing_guarantee``, ``retry``, ``max_uncommitted_offsets`` and
      ``offset_commit_period_ms`` do not apply; a guarantee other than the default is refused.
    * **Metrics.** ``read``, ``emitted``, ``skipped``, ``errors``, ``commits``, ``committed``,
      ``lag`` (per partition, at each checkpoint commit) and ``seeks`` (``init_state`` calls).
    """

    _message_ids = False

    def __init__(self, config: KafkaSpoutConfig) -> None:
        if config.pattern is not None:
            raise ValueError("StatefulKafkaSpout: give topics, not a pattern: its tasks split the partitions of a "
                             "fixed set of topics among themselves, the same after every restart")
        if config.processing_guarantee != AT_LEAST_ONCE:
            raise ValueError(f"StatefulKafkaSpout: processing_guarantee {config.processing_guarantee!r} does not "
                             f"apply: its checkpoints make it effectively once (leave the default)")
        super().__init__(config)

    @staticmethod
    def _zero_metrics() -> dict[str, Any]:
        metrics = KafkaSpout._zero_metrics()
        metrics["seeks"] = 0
        return metrics

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: ISpoutOutputCollector) -> None:
        self._task_index = context.get_this_task_index()
        self._task_count = len(context.get_component_tasks(context.get_this_component_id()))
        self._mine: list[tuple[str, int]] = []  # this task's partitions
        self._positions: dict[tuple[str, int], int] = {}  # partition -> the next offset to emit
        self._starts: dict[tuple[str, int], int] = {}  # where the strategy started them (see init_state)
        self._prepared: tuple[int, dict[tuple[str, int], int]] | None = None  # (txid, its positions)
        super().open(conf, context, collector)

    def _consumer_settings(self) -> dict[str, Any]:
        return {**super()._consumer_settings(), "enable.auto.commit": False, "on_commit": self._on_commit}

    def _start(self, metadata: Any) -> None:
        """This task's partitions; reading starts at ``init_state``."""
        for topic in self.config.topics:
            reason = _missing(metadata, topic)
            if reason is not None:  # with auto-creation on, the loop in open let it pass
                raise KafkaConnectorError(f"{self._where}: topic {topic!r} does not exist ({reason}); "
                                          f"StatefulKafkaSpout needs its partitions at open")
            self._mine += [(topic, p) for p in sorted(metadata.topics[topic].partitions)
                           if p % self._task_count == self._task_index]
        log.info("%s: task %d of %d reads %s", self._where, self._task_index, self._task_count,
                 ", ".join(_key(*place) for place in self._mine) or "no partition")

    # -- the checkpoint's hooks -----------------------------------------------------------------

    def init_state(self, state: KeyValueState) -> None:
        from confluent_kafka import TopicPartition

        self._state = state
        committed = {place: state.get(_key(*place)) for place in self._mine}
        committed = {place: offset for place, offset in committed.items() if offset is not None}
        starts = self._start_offsets([place for place in self._mine if place not in committed])
        for place, offset in starts.items():
            state.put(_key(*place), offset)
        self._positions = {**starts, **committed}
        self._prepared = None
        self._buffer.clear()  # fetched past the position: read again from it
        self._consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in self._positions.items()])
        self.metrics["seeks"] += 1
        log.info("%s: reading from %s", self._where,
                 ", ".join(f"{_key(*place)}@{offset}" for place, offset in sorted(self._positions.items())) or "nothing")
        self._commit_to_kafka(committed)  # the state of the last commit: Kafka may not have it yet

    def pre_prepare(self, txid: int) -> None:
        self._prepared = (txid, dict(self._positions))

    def pre_commit(self, txid: int) -> None:
        if self._prepared is not None and self._prepared[0] == txid:
            self._commit_to_kafka(self._prepared[1])
        self._prepared = None
        self._record_lag(self._positions)

    def pre_rollback(self) -> None:
        self._prepared = None

    # -- reading ----------------------------------------------------------------------------------

    def _start_offsets(self, places: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Where ``first_poll_offset_strategy`` starts ``places``: offsets resolved once per open."""
        from confluent_kafka import KafkaException, TopicPartition

        todo = [place for place in places if place not in self._starts]
        if todo:
            c = self.config
            timeout = c.open_timeout_ms / 1000
            try:
                stored = {}
                if c.first_poll_offset_strategy in (UNCOMMITTED_EARLIEST, UNCOMMITTED_LATEST):
                    for tp in self._consumer.committed([TopicPartition(t, p) for t, p in todo], timeout=timeout):
                        if tp.error is None and tp.offset >= 0:
                            stored[(tp.topic, tp.partition)] = tp.offset
                for place in todo:
                    if place not in stored:
                        low, high = self._consumer.get_watermark_offsets(TopicPartition(*place), timeout=timeout)
                        stored[place] = high if c.first_poll_offset_strategy.endswith("LATEST") else low
            except KafkaException as e:
                raise KafkaConnectorError(f"{self._where}: cannot find where to start reading "
                                          f"{', '.join(_key(*place) for place in todo)}: "
                                          f"{e.args[0] if e.args else e}") from e
            self._starts.update(stored)
        return {place: self._starts[place] for place in places}

    def _emit_next(self, message: Any) -> None:
        place, offset = (message.topic(), message.partition()), message.offset()
        position = self._positions.get(place)
        if position is None or offset < position:
            return  # not this task's partition, or fetched before a seek back
        self._positions[place] = offset + 1
        self._state.put(_key(*place), offset + 1)
        self._emit(message, None)

    # -- commits to Kafka (monitoring only) ----------------------------------------------------------

    def _commit_to_kafka(self, positions: dict[tuple[str, int], int]) -> None:
        from confluent_kafka import KafkaException, TopicPartition

        done = self.metrics["committed"]
        offsets = [TopicPartition(t, p, offset) for (t, p), offset in positions.items() if done.get(_key(t, p)) != offset]
        if not offsets:
            return
        try:
            self._consumer.commit(offsets=offsets, asynchronous=True)  # the result: _on_commit
        except KafkaException as e:
            self._outage.error(e.args[0] if e.args else e)

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        """librdkafka's report of a commit (inside ``consume``, on the executor's thread)."""
        if error is not None:
            self._outage.error(error)
            return
        for tp in partitions:
            if tp.error is not None:
                self._outage.error(tp.error)
        self._committed({(tp.topic, tp.partition): tp.offset for tp in partitions if tp.error is None})


def _default_mapper(tup: Tuple) -> tuple[Any, Any]:
    return tup.get_value_by_field("key"), tup.get_value_by_field("message")


class KafkaBolt(ExactlyOnceOption, Bolt):
    """Writes every input tuple to Kafka (storm-kafka-client's ``KafkaBolt``); with
    ``exactly_once=True``, an :class:`ExactlyOnceKafkaBolt`.

    * ``topic_selector``: the topic, or a callable of the tuple giving it.
    * ``mapper(tup) -> (key, value)`` (str, bytes or None), or ``(key, value, partition)``
      to pick the partition (else the producer's partitioner does, by key); default: the
      tuple's fields ``key`` and ``message``.
    * **Acking.** The record is produced asynchronously; the input is acked when its delivery
      report says the broker confirmed the write (``acks=all`` unless ``producer_config`` says
      otherwise), failed when the report is an error (librdkafka retried within
      ``delivery.timeout.ms`` already), with the reason recorded for the component (which names
      it). Reports are delivered on the executor's thread: after each batch of inputs the bolt
      waits up to ``tick_secs`` (0.1) for the batch's reports (``finish_batch``: one wait per
      batch, as a plain client loop flushes per batch; it also delivers the reports of earlier
      batches that came later), and polls the producer at every tick for those when no input
      comes. A tuple the mapper or the topic selector cannot map, or the producer refuses
      (queue full even after waiting ``queue_wait_ms``), is failed with the reason.
      ``cleanup`` flushes (up to ``flush_timeout_ms``).
    * **Guarantee.** With a spout replaying failed tuples, every tuple is written at least once;
      a write whose report was lost (the worker died) is written again, so twice.
    * Declares no stream.
    """

    blocking = True

    def __init__(self, bootstrap_servers: str, topic_selector: str | Callable[[Tuple], str],
                 mapper: Callable[[Tuple], tuple[Any, Any]] | None = None,
                 producer_config: dict[str, Any] | None = None, *, tick_secs: float = 0.1,
                 open_timeout_ms: int = 5_000, queue_wait_ms: int = 1_000, flush_timeout_ms: int = 30_000,
                 exactly_once: bool = False) -> None:
        require("confluent_kafka", "kafka", "KafkaBolt")
        self.bootstrap_servers, self.topic_selector = bootstrap_servers, topic_selector
        self.mapper = mapper or _default_mapper
        self.producer_config = dict(producer_config or {})
        self.tick_secs, self.open_timeout_ms = tick_secs, open_timeout_ms
        self.queue_wait_ms, self.flush_timeout_ms = queue_wait_ms, flush_timeout_ms
        self.metrics = self._zero_metrics()

    @staticmethod
    def _zero_metrics() -> dict[str, int]:
        return dict.fromkeys(("produced", "acked", "failed", "errors"), 0)

    def get_component_configuration(self) -> dict[str, Any] | None:
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.tick_secs}

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        from confluent_kafka import Producer

        self.collector = collector
        self._component = context.get_this_component_id()
        self._where = f"KafkaBolt {self._component!r} at {self.bootstrap_servers}"
        self.metrics = self._zero_metrics()
        self._outage = _Outage(self._where, self.metrics)
        settings = {"bootstrap.servers": self.bootstrap_servers, "acks": "all", "logger": _LIBRDKAFKA_LOG,
                    "error_cb": self._outage.error, **self.producer_config}
        self._producer = Producer(settings)
        try:
            _check_reachable(self._producer, self.bootstrap_servers, self._where, self.open_timeout_ms)
            self._outage.opened = True
        except Exception:
            self._producer.flush(0)
            raise

    def cleanup(self) -> None:
        producer = getattr(self, "_producer", None)
        if producer is not None:
            left = producer.flush(self.flush_timeout_ms / 1000)
            if left:
                log.warning("%s: %d records not confirmed at cleanup", self._where, left)
            self._producer = None

    def _failed(self, tup: Tuple, what: str, error: Any) -> None:
        reason = (f"{self._where}: {what} the tuple from component {tup.source_component!r} stream "
                  f"{tup.source_stream_id!r}: {type(error).__name__}: {error}")
        self.metrics["failed"] += 1
        self.collector.report_error(KafkaConnectorError(reason))
        self.collector.fail(tup)

    def _report(self, tup: Tuple, error: Any, _message: Any) -> None:
        if error is None:
            self.metrics["acked"] += 1
            if self._outage.down:  # checked here: a call per report costs more than the test
                self._outage.fine()
            self.collector.ack(tup)
        else:
            self._failed(tup, "the broker did not confirm writing", error)

    def _map(self, tup: Tuple) -> list[Any]:
        """``[topic, key, value, partition]`` (partition None: the partitioner's) for ``tup``;
        ValueError (or what the selector or the mapper raised) when it cannot be mapped."""
        topic = self.topic_selector(tup) if callable(self.topic_selector) else self.topic_selector
        mapped = tuple(self.mapper(tup))
        if len(mapped) not in (2, 3):
            raise ValueError(f"the mapper must give (key, value) or (key, value, partition), got {mapped!r}")
        return [topic, *mapped] if len(mapped) == 3 else [topic, *mapped, None]

    def _produce(self, record: list[Any], **report: Any) -> None:
        """Hand ``record`` (see :meth:`_map`) to the producer, waiting up to ``queue_wait_ms`` for
        room in its queue (BufferError past that); ``report``: ``on_delivery``, if any."""
        topic, key, value, partition = record
        if partition is not None:
            report["partition"] = partition
        deadline = None
        while True:
            try:
                self._producer.produce(topic, value, key, **report)
                return
            except BufferError:  # librdkafka's queue is full: let it drain a little
                now = time.monotonic()
                if deadline is None:
                    deadline = now + self.queue_wait_ms / 1000
                elif now >= deadline:
                    raise
                self._producer.poll(0.05)

    def execute(self, tup: Tuple) -> None:
        # no poll per input: a poll is a round through librdkafka's queue (and the GIL) per
        # record; finish_batch delivers the reports, a tick those that came after its wait
        if tup.is_tick():
            self._producer.poll(0)
            return
        try:
            record = self._map(tup)
        except Exception as e:
            self._failed(tup, "cannot map", e)
            return
        try:
            self._produce(record, on_delivery=partial(self._report, tup))
        except BufferError as e:
            self._failed(tup, "the producer's queue is full, cannot write", e)
            return
        except Exception as e:  # noqa: BLE001  (bad types, unknown topic...)
            self._failed(tup, "cannot write", e)
            return
        self.metrics["produced"] += 1

    def finish_batch(self) -> None:
        self._producer.flush(self.tick_secs)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


class ExactlyOnceKafkaBolt(WriteAheadSink, KafkaBolt):
    """A :class:`KafkaBolt` whose records become visible to ``read_committed`` consumers once,
    after the checkpoint covering them commits (``KafkaBolt(..., exactly_once=True)``; a
    :class:`~squall.api.two_phase_commit.WriteAheadSink`).

    * **Epochs.** An input is mapped as by :class:`KafkaBolt` (a tuple that cannot be mapped is
      failed, with the reason reported) and acked; the epoch's records are kept in memory and,
      at the checkpoint's PREPARE, in the task's state. librdkafka cannot resume a transaction
      another producer opened, so nothing is produced before the checkpoint commits.
    * **Publishing.** Once the checkpoint commits, the epoch's records go out in one Kafka
      transaction, with a *marker* in that same transaction: a record of ``marker_topic``
      (default ``squall.exactly-once.markers``; make it compacted, ``cleanup.policy=compact``,
      so that it keeps one record per task), key the task's transactional id, value the
      epoch's txid. The first publish reads the task's last marker back (``read_committed``, to
      the partition's high watermark: past the transactions other tasks left open); an epoch
      at or below it is skipped, so a commit repeated after a crash between the transaction's
      commit and the checkpoint state saying so publishes nothing twice.
    * **Fencing.** Each task's producer has the stable ``transactional.id``
      ``<transactional_id_prefix>.<topology>.<component>.<task index>`` (the task's place in its
      component, as its state is kept); ``prepare`` calls
      ``init_transactions``, which aborts what an earlier instance
      of the task left open and fences it: a zombie (a worker paused past its timeout and
      replaced) fails its next transaction and publishes nothing. A fenced producer stays
      fenced: its task's commits fail (reported) until its worker is stopped.
    * **Failures.** An abortable error aborts the transaction and raises: the epoch stays
      pending and the next commit, or the recovery after a restart, publishes it again whole.
      A retriable error of the commit itself (a timeout, the broker restarting) leaves the
      outcome unknown: the next commit retries that same commit, never the epoch anew. If that
      fails otherwise, or the task restarts in between, the marker says whether it went through.
      So it does after a commit acknowledged though the broker was out of reach during the
      transaction (a restarted broker may acknowledge a transaction it lost; noida-db does): an
      epoch whose marker is missing is published again.
    * **Costs.** Records are visible one checkpoint interval after they arrive; each task holds
      an epoch's records in memory and writes them into its state at each checkpoint; one
      marker record per task and epoch.
    * Consumers must read with ``isolation.level=read_committed`` to see exactly once.
      (librdkafka's mock cluster, :class:`squall.testing.KafkaMockCluster`, does not filter
      aborted transactions nor fence: it runs this bolt, but shows exactly once only where
      no transaction is aborted.)
    """

    def __init__(self, bootstrap_servers: str, topic_selector: str | Callable[[Tuple], str],
                 mapper: Callable[[Tuple], tuple[Any, Any]] | None = None,
                 producer_config: dict[str, Any] | None = None, *,
                 marker_topic: str = "squall.exactly-once.markers", transactional_id_prefix: str = "squall",
                 transaction_timeout_ms: int = 30_000, open_timeout_ms: int = 10_000, queue_wait_ms: int = 1_000,
                 flush_timeout_ms: int = 30_000, exactly_once: bool = True) -> None:
        super().__init__(bootstrap_servers, topic_selector, mapper, producer_config, open_timeout_ms=open_timeout_ms,
                         queue_wait_ms=queue_wait_ms, flush_timeout_ms=flush_timeout_ms)
        self.marker_topic = marker_topic
        self.transactional_id_prefix = transactional_id_prefix
        self.transaction_timeout_ms = transaction_timeout_ms

    @staticmethod
    def _zero_metrics() -> dict[str, int]:
        return dict.fromkeys(("produced", "transactions", "skipped", "failed", "errors"), 0)

    def get_component_configuration(self) -> dict[str, Any] | None:
        return None  # no ticks: nothing is produced between commits

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        from confluent_kafka import KafkaException, Producer

        WriteAheadSink.prepare(self, conf, context, collector)
        self._component = context.get_this_component_id()
        # by its place in the component, as its state is: other components' task counts may change
        self.transactional_id = (f"{self.transactional_id_prefix}.{context.topology_name}.{self._component}."
                                 f"{context.get_this_task_index()}")
        self._where = (f"KafkaBolt {self._component!r} (exactly once, {self.transactional_id}) "
                       f"at {self.bootstrap_servers}")
        self.metrics = self._zero_metrics()
        self._outage = _Outage(self._where, self.metrics)
        settings = {"bootstrap.servers": self.bootstrap_servers, "logger": _LIBRDKAFKA_LOG,
                    "error_cb": self._outage.error, **self.producer_config,
                    "transactional.id": self.transactional_id,
                    "transaction.timeout.ms": self.transaction_timeout_ms}
        self._producer = Producer(settings)
        timeout = self.open_timeout_ms / 1000
        try:
            metadata = _check_reachable(self._producer, self.bootstrap_servers, self._where, self.open_timeout_ms)
            self._producer.init_transactions(timeout)  # fences earlier instances, aborts what they left open
            self.marker_partition = self._marker_partition(metadata)
            #: the txid of the last epoch published (the marker; -1: none), read at the first
            #: publish: by then every task restarted with this one has fenced its predecessor,
            #: whose open transaction would hold the read back (see _read_marker)
            self.published: int | None = None
            #: the txid whose commit failed with a retriable error: its outcome is unknown
            self._in_doubt: int | None = None
            self._topics = {name for name, topic in metadata.topics.items() if topic.error is None}
        except KafkaException as e:
            self.cleanup()
            raise KafkaConnectorError(f"{self._where}: cannot start its transactions: {_reason(e)}") from e
        except Exception:
            self.cleanup()
            raise
        self._outage.opened = True

    def _marker_partition(self, metadata: Any) -> int:
        """The partition of the marker topic holding this task's markers (by its transactional
        id); KafkaConnectorError naming the topic if the cluster lacks it."""
        topic = metadata.topics.get(self.marker_topic)
        if topic is None or topic.error is not None:  # asking for it creates it where topics auto-create
            topic = self._producer.list_topics(self.marker_topic, timeout=self.open_timeout_ms / 1000) \
                .topics.get(self.marker_topic)
        if topic is None or topic.error is not None or not topic.partitions:
            raise KafkaConnectorError(
                f"{self._where}: the marker topic {self.marker_topic!r} is not in the cluster "
                f"({getattr(topic, 'error', None) or 'no partitions'}); create it (compacted: cleanup.policy=compact) "
                "or name another with marker_topic")
        return zlib.crc32(self.transactional_id.encode()) % len(topic.partitions)

    def _read_marker(self, timeout: float) -> int:
        """The last txid this task's markers say was published (-1: none), reading its marker
        partition with ``read_committed`` to where it ended when asked (its high watermark).

        Not just to the end a ``read_committed`` reader is shown (the last stable offset): the
        tasks share marker partitions, and a transaction another task left open (its worker
        killed while publishing, not yet restarted) holds that end back, before markers of this
        task committed after it. Read only that far, an epoch published would look unpublished,
        and be published twice. So this waits, up to ``timeout``, for every transaction open
        when it began to end (committed, or aborted by its task's next instance)."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

        settings = {"bootstrap.servers": self.bootstrap_servers, "group.id": self.transactional_id,
                    "enable.auto.commit": False, "enable.partition.eof": True, "logger": _LIBRDKAFKA_LOG}
        partition = TopicPartition(self.marker_topic, self.marker_partition)
        probe = Consumer({**settings, "isolation.level": "read_uncommitted"})  # is told the high watermark
        try:
            end = probe.get_watermark_offsets(partition, timeout=timeout)[1]
        except KafkaException as e:
            raise KafkaConnectorError(f"{self._where}: cannot read its marker's partition ({self.marker_topic!r} "
                                      f"partition {self.marker_partition}): {_reason(e)}") from e
        finally:
            probe.close()
        last, key = -1, self.transactional_id.encode()
        if end == 0:
            return last
        consumer = Consumer({**settings, "isolation.level": "read_committed"})
        try:
            consumer.assign([TopicPartition(self.marker_topic, self.marker_partition, OFFSET_BEGINNING)])
            deadline = time.monotonic() + timeout
            while True:
                if time.monotonic() > deadline:
                    at = max(0, consumer.position([partition])[0].offset)  # negative: nothing read
                    raise KafkaConnectorError(
                        f"{self._where}: its marker in {self.marker_topic!r} partition {self.marker_partition} not "
                        f"read in {timeout:g} s: read to offset {at} of {end} (a transaction another task left "
                        "open there holds the rest back until that task starts again)")
                for message in consumer.consume(1000, timeout=0.1):
                    error = message.error()
                    if error is None and message.key() == key:
                        last = max(last, int(message.value()))
                    elif (error is not None and error.code() == KafkaError._PARTITION_EOF
                          and consumer.position([partition])[0].offset >= end):
                        return last  # every record then: committed, or aborted and skipped
        finally:
            consumer.close()

    def record(self, tup: Tuple) -> list[Any]:
        # checked now: a record the producer refuses at the commit would fail its epoch each time
        record = topic, key, value, partition = self._map(tup)
        for what, part in (("key", key), ("value", value)):
            if part is not None and not isinstance(part, (str, bytes)):
                raise TypeError(f"its {what} must be str, bytes or None, got {type(part).__name__} {part!r}")
        if partition is not None and not isinstance(partition, int):
            raise TypeError(f"its partition must be an int, got {partition!r}")
        if topic not in self._topics:
            found = self._producer.list_topics(topic, timeout=self.open_timeout_ms / 1000).topics.get(topic)
            if found is None or found.error is not None:
                raise ValueError(f"topic {topic!r} is not in the cluster ({getattr(found, 'error', None)})")
            self._topics.add(topic)
        return record

    def publish(self, txid: int, records: list[Any]) -> None:
        from confluent_kafka import KafkaException

        timeout = self.transaction_timeout_ms / 1000
        if self.published is None:
            self.published = self._read_marker(self.open_timeout_ms / 1000)
        if txid <= self.published:
            self.metrics["skipped"] += 1
            return
        producer = self._producer
        errors = self.metrics["errors"]
        try:
            if self._in_doubt != txid:
                producer.begin_transaction()
                for record in records:
                    self._produce(record)
                self._produce([self.marker_topic, self.transactional_id, str(txid), self.marker_partition])
            producer.commit_transaction(timeout)
            if self.metrics["errors"] != errors:
                self._check_published(txid, timeout)
        except (KafkaException, BufferError) as e:
            self.metrics["errors"] += 1
            error = e.args[0] if isinstance(e, KafkaException) and e.args else None
            if error is not None and error.fatal():
                raise KafkaConnectorError(f"{self._where}: epoch {txid} not published, and this producer is done "
                                          f"(fenced by a newer instance of the task?): {_reason(e)}") from e
            if error is not None and error.retriable() and not error.txn_requires_abort():
                # the commit may have reached the broker (a timeout, a broker restarting): only
                # the same commit may be tried again, never the epoch anew (librdkafka's rule)
                self._in_doubt = txid
                raise KafkaConnectorError(f"{self._where}: epoch {txid}'s commit not confirmed (it will be "
                                          f"tried again): {_reason(e)}") from e
            doubtful, self._in_doubt = self._in_doubt == txid, None
            try:
                producer.abort_transaction(timeout)
            except KafkaException as abort_error:
                log.warning("%s: aborting epoch %d's transaction failed: %s", self._where, txid, _reason(abort_error))
            if doubtful:
                # whether the doubtful commit went through: the marker says, read before the next
                # publish (after this abort: a transaction left open would hold the read back)
                self.published = None
            raise KafkaConnectorError(f"{self._where}: epoch {txid} not published (it will be again): "
                                      f"{_reason(e) if error is not None else e}") from e
        self._in_doubt = None
        self.published = txid
        self.metrics["transactions"] += 1
        self.metrics["produced"] += len(records)
        self._outage.fine()

    def _check_published(self, txid: int, timeout: float) -> None:
        """After a commit the broker acknowledged though it was out of reach during the
        transaction: a broker that restarted may acknowledge the commit of a transaction it lost
        (noida-db does), so the marker must say it went through; else the epoch is published again.
        Should the marker be unreadable now, the next publish reads it first."""
        self._in_doubt = None
        try:
            published = self._read_marker(timeout)
        except KafkaConnectorError:
            self.published = None
            raise
        if published < txid:
            self.metrics["errors"] += 1
            raise KafkaConnectorError(f"{self._where}: epoch {txid}'s commit was acknowledged, but its marker is not "
                                      f"there (the broker lost the transaction, restarting?): it will be published "
                                      f"again")

    def finish_batch(self) -> None:
        pass  # nothing is produced until the checkpoint commits


KafkaBolt.exactly_once_form = ExactlyOnceKafkaBolt
