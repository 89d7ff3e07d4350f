"""Redis connectors: a spout reading a Redis Stream through a consumer group, and Storm's
storm-redis bolts (``RedisStoreBolt``, ``RedisLookupBolt``). Needs the ``redis`` client
(``pip install "squall[redis]"``); the spout needs Redis 6.2 or later (``XAUTOCLAIM``).

Connection settings, the same for the three (Storm's ``JedisPoolConfig``): ``host``
(``127.0.0.1``), ``port`` (6379), or ``unix_socket_path`` instead; ``db`` (Storm's
``database``, 0); ``password``; ``timeout`` (milliseconds, 2000, as Storm's): how long
connecting, and waiting for any reply, may take. ``open``/``prepare`` connect, so a Redis that
cannot be reached fails the submission with an error naming the component and ``host:port``.

:class:`RedisStreamSpout` — the contract
-----------------------------------------

* **Reading.** The spout is consumer ``consumer`` (default ``<component id>-<task index>``, the
  task's place in its component: stable across restarts of the topology) of consumer group
  ``group`` of stream ``stream``; ``open`` creates the group (and the stream) if missing, at
  ``start_id`` (``"0"``: the whole stream; ``"$"``: only entries added from now). It first
  re-delivers the entries this consumer had read and not acknowledged before a restart
  (``XREADGROUP ... 0``), then reads new entries (``XREADGROUP ... >``), ``batch_size`` at a time,
  emitting one entry per ``next_tuple`` call, so ``topology.max.spout.pending`` caps the entries
  in flight. ``block_ms`` (0: none) is how long a read may wait for new entries: keep it to a few
  milliseconds at most, ``next_tuple`` must not block.
* **Emitting.** Each entry is emitted with the entry id as message id. ``translator``, a
  callable ``(entry_id, fields) -> values`` (``fields``: the entry's fields as a ``dict`` of
  ``str``, decoded as UTF-8, invalid bytes replaced), or ``-> Route(stream, values)`` to pick a
  stream, or ``-> None`` to skip the entry (it is acknowledged, counted as ``skipped``);
  ``output_fields`` declares the streams (a list: the ``default`` stream's fields; a dict:
  stream -> fields). Default: the ``default`` stream, fields ``id`` and ``fields`` (the dict).
* **Acknowledging.** An entry is ``XACK``-ed once the tree of its tuple is fully processed
  (the spout's ``ack``), never before: in one ``XACK`` for up to ``batch_size`` entries, sent
  by ``next_tuple`` once that many were acked or before it reads more (and at ``close``).
  Until then it stays in the group's pending entries list (PEL): nothing the spout read is
  lost if the worker, the topology or Redis restarts.
* **Retrying.** A failed tuple (a bolt failed it, or it timed out) is emitted again from the
  pending list after ``retry_delay_ms`` doubling at each failure of the entry up to
  ``retry_delay_max_ms``; with ``max_retries`` set, an entry that failed that many times is
  given up: emitted on the error stream (untracked), ``XACK``-ed and logged.
* **Dead consumers.** Every ``claim_idle_ms`` the spout takes over (``XAUTOCLAIM``) the entries
  pending longer than ``claim_idle_ms`` for any consumer of the group — one that read entries
  and died — and emits them. Keep ``claim_idle_ms`` above ``topology.message.timeout.secs``, or
  a sibling task may take over an entry still in flight (then it is processed twice, which
  at-least-once allows).
* **Bad entries.** When the translator raises, the entry is emitted on the ``error`` stream
  (``error_stream``; fields ``id``, ``error``: the exception), tracked like any tuple: it is
  ``XACK``-ed once that tuple is processed (immediately when nothing subscribes to the stream),
  and logged. Never silently dropped. An entry deleted from the stream while pending is
  ``XACK``-ed and counted as an error.
* **Redis going away.** ``next_tuple`` catches connection errors, logs the first one, and
  tries again after a backoff (``reconnect_delay_ms`` doubling up to ``reconnect_delay_max_ms``);
  acks that could not be sent are kept and sent once Redis is back; a group lost with a Redis
  that restarted without persistence is created again (at ``start_id``). Entries delivered by
  a read whose reply was lost with the connection are in this consumer's pending list, and
  taken back by the next ``XAUTOCLAIM`` once ``claim_idle_ms`` old. Use ``appendonly yes`` for
  the stream and its pending entries to survive a restart of Redis.
* **Threads.** The three connectors are blocking components (``blocking = True``): each
  executor has a thread of its own, so a slow Redis never stalls the worker's other executors
  (not the exactly-once form of the store bolt, which talks to Redis once per checkpoint).
* **Guarantee: at-least-once.** Every entry is processed at least once; an entry whose
  processing completed is not emitted again unless its ``XACK`` was lost with a Redis restart
  without persistence or it was taken over by another consumer while in flight.
* **Metrics.** ``spout.metrics``, a dict of counters: ``read`` (entries read from Redis,
  re-deliveries included), ``emitted``, ``acked``, ``failed``, ``replayed``, ``claimed``
  (taken over from other consumers), ``errors`` (entries on the error stream, deleted entries),
  ``given_up``, ``skipped``, ``reconnects`` (times Redis became unreachable).

:class:`RedisStoreBolt` in exactly-once mode — the contract
------------------------------------------------------------

``RedisStoreBolt(mapper, ..., exactly_once=True)`` makes an :class:`ExactlyOnceRedisStoreBolt`,
a :class:`~squall.api.two_phase_commit.WriteAheadSink` (the topology is checkpointed; every
spout upstream must be a stateful spout):

* **Epochs.** Each input is mapped and checked when it arrives, as in the plain bolt (a tuple
  that cannot be mapped, or whose values Redis cannot take, fails alone, with the reason reported
  for the component), and acked; its command is kept with its checkpoint epoch's, in memory, and
  written into the task's state at the epoch's PREPARE. Nothing reaches Redis before the
  checkpoint covering the epoch is committed.
* **Atomic publish with a marker.** Once the checkpoint is committed, the epoch's commands go to
  Redis in one Lua script (``EVALSHA``; Redis runs a script alone, nothing else in between) that
  first reads the task's *marker* key, a hash ``{txid, run}``: when it already names this epoch
  or a later one of the same ``run``, the script changes nothing (the epoch was published before
  a crash, and is skipped); otherwise it applies every command, in arrival order, and sets the
  marker to this epoch. The commands and the marker change together or not at all: the script
  checks the type of every key it writes before it writes any (a script that fails halfway is
  not rolled back).
* **The marker key** is ``marker_key`` formatted with the topology's name, the component id and
  the task's index in its component (as its state is kept): by default
  ``squall:eo:{topology}:{component}:{task}``. A template must hold the three fields, so that no
  two tasks share a marker (their epochs have the same txids). ``run`` is a random id kept in the
  task's state from its first start: a topology whose state was dropped (``squall run --fresh``)
  counts its txids from 1 again under a new ``run``, and is not mistaken for one already
  published. Delete the marker keys with the data they cover.
* **Failures.** Redis unreachable, or a command it refuses (a key of another type: the whole
  epoch is refused, nothing written) at the commit: reported for the component, naming
  ``host:port`` and the cause; the epoch stays pending, in the state, and the next commit (or
  the recovery after a restart) publishes it, before the later epochs. A crash between the
  checkpoint's commit and the publish: the recovery publishes the epochs the committed
  checkpoint holds; a crash before the commit: the epoch is dropped, the spouts replay it.
* **Threads.** A blocking component, as every two-phase sink: a thread of its own, which a
  Redis that does not answer holds up to ``timeout`` per commit.
* **Guarantee: exactly once.** Every record of a committed epoch is written to Redis once, even
  ``list`` and ``stream`` writes (not idempotent), whatever worker dies when; a Redis that
  restarts may lose what it had not persisted, markers included: use ``appendonly yes``
  (``appendfsync everysec`` loses up to a second).
* **Costs.** Records reach Redis one checkpoint interval after they arrive
  (``topology.state.checkpoint.interval.ms``); each task holds one epoch's commands in memory
  and in its state; Redis runs an epoch's script alone, so keep epochs moderate (a script past
  ``lua-time-limit``, 5 s, makes Redis answer BUSY to others until it ends). Standalone Redis,
  or a cluster with every key and the marker in one hash slot (``{...}`` hash tags).
* **Metrics.** ``bolt.metrics``: ``published`` (epochs applied), ``skipped`` (epochs the marker
  said were applied), ``written`` (commands applied), ``errors`` (publishes that failed).
"""

from __future__ import annotations

import heapq
import logging
import string
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall.api.bolt import Bolt
from squall.api.spout import Spout
from squall.api.two_phase_commit import TwoPhaseCommitSink, WriteAheadSink
from squall.connectors import Backoff, ExactlyOnceOption, Route, SpoutStreams, require
from squall.connectors.redis_client import connect_failure, redis_address, redis_settings

if TYPE_CHECKING:
    from squall.api.collector import IOutputCollector, ISpoutOutputCollector
    from squall.api.component import OutputFieldsDeclarer
    from squall.api.context import TopologyContext
    from squall.api.state import KeyValueState
    from squall.api.tuple import Tuple

log = logging.getLogger("squall.connectors.redis")

__all__ = ["ExactlyOnceRedisStoreBolt", "RedisConnectorError", "RedisLookupBolt", "RedisStoreBolt", "RedisStreamSpout",
           "Route", "by_fields"]


class RedisConnectorError(RuntimeError):
    """Redis could not be reached, or refused a command; the message names ``host:port``."""


class _Connection:
    """The settings every connector shares, and its client (made in ``open``/``prepare``)."""

    def __init__(self, connector: str, host: str, port: int, db: int, password: str | None,
                 unix_socket_path: str | None, timeout: float) -> None:
        require("redis", "redis", connector)
        self.connector = connector
        self.host, self.port, self.db = host, int(port), int(db)
        self.password, self.unix_socket_path = password, unix_socket_path
        self.timeout = float(timeout)
        self.address = redis_address(host, self.port, unix_socket_path)

    def connect(self, what: str, **more: Any) -> Any:
        """A client that answered PING, or :class:`RedisConnectorError` naming the address."""
        import redis

        client = redis.Redis(**redis_settings(self.host, self.port, self.unix_socket_path, self.db, self.password,
                                              self.timeout / 1000, **more))
        try:
            client.ping()
        except redis.RedisError as e:
            client.close()
            raise RedisConnectorError(f"{what}: {connect_failure(self.address, e, self.password)}") from e
        return client


def _decode(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _default_translator(entry_id: str, fields: dict[str, str]) -> list[Any]:
    return [entry_id, fields]


class RedisStreamSpout(Spout):
    """Emits the entries of a Redis Stream, read through a consumer group, at least once
    (see the module's documentation for the contract)."""

    keeps_position = True  # what is acked is not read again: acks wait for the commit of stateful bolts

    blocking = True  # network I/O: a thread of its own, never stalling the cooperative ones

    def __init__(self, stream: str, group: str, consumer: str | None = None, *, host: str = "127.0.0.1",
                 port: int = 6379, db: int = 0, password: str | None = None, unix_socket_path: str | None = None,
                 timeout: float = 2000, translator: Callable[[str, dict[str, str]], Any] | None = None,
                 output_fields: list[str] | dict[str, list[str]] | None = None, error_stream: str = "error",
                 batch_size: int = 100, block_ms: int = 0, claim_idle_ms: int = 30_000, start_id: str = "0",
                 max_retries: int | None = None, retry_delay_ms: float = 100, retry_delay_max_ms: float = 10_000,
                 reconnect_delay_ms: float = 100, reconnect_delay_max_ms: float = 5_000) -> None:
        self._conn = _Connection("RedisStreamSpout", host, port, db, password, unix_socket_path, timeout)
        self.stream, self.group, self.consumer = stream, group, consumer
        self.translator = translator or _default_translator
        self.streams = SpoutStreams("RedisStreamSpout", output_fields, ["id", "fields"], error_stream, ["id", "error"])
        self.batch_size, self.block_ms = int(batch_size), int(block_ms)
        self.claim_idle_ms, self.start_id, self.max_retries = int(claim_idle_ms), start_id, max_retries
        self.retry_delay_ms, self.retry_delay_max_ms = retry_delay_ms, retry_delay_max_ms
        self.reconnect_delay_ms, self.reconnect_delay_max_ms = reconnect_delay_ms, reconnect_delay_max_ms
        self.metrics = self._zero_metrics()

    @staticmethod
    def _zero_metrics() -> dict[str, int]:
        names = ("read", "emitted", "acked", "failed", "replayed", "claimed", "errors", "given_up", "skipped",
                 "reconnects")
        return dict.fromkeys(names, 0)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.streams.declare(declarer)

    # -- lifecycle --------------------------------------------------------------------------

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: ISpoutOutputCollector) -> None:
        import redis

        self._collector = collector
        # what next_tuple catches, looked up once rather than by an import at every call
        self._response_error, self._unreachable = redis.ResponseError, (redis.ConnectionError, redis.TimeoutError)
        # the default translator onto a default stream of two fields: its values always fit
        # (what SpoutStreams.route checks), so they are emitted without the translator nor the check
        self._plain_values = (self.translator is _default_translator
                              and len(self.streams.fields.get("default", ())) == 2)
        component = context.get_this_component_id()
        if self.consumer is None:
            self.consumer = f"{component}-{context.get_this_task_index()}"
        self._where = (f"RedisStreamSpout {component!r}: stream {self.stream!r} group {self.group!r} "
                       f"at {self._conn.address}")
        self.metrics = self._zero_metrics()
        self._inflight: dict[str, dict[str, str]] = {}  # emitted, not yet acked or failed: id -> fields
        self._attempts: dict[str, int] = {}  # id -> failures so far
        self._retries: list[tuple[float, str]] = []  # heap of (due, id) of failed entries
        self._backlog: deque[tuple[str, dict[str, str] | None]] = deque()  # read, not yet emitted
        self._unsent_acks: list[str] = []  # acked, not yet XACK-ed (see _step)
        self._history_from: str | None = "0"  # own pending entries still to re-deliver, from this id
        self._claim_cursor = "0-0"
        self._next_claim = 0.0
        self._backoff = Backoff(self.reconnect_delay_ms, self.reconnect_delay_max_ms)
        self._redis = self._conn.connect(self._where)
        try:
            self._check_version()
            self._create_group()
        except RedisConnectorError as e:
            self._redis.close()
            raise RedisConnectorError(f"{self._where}: {e}") from e
        except Exception as e:
            self._redis.close()
            raise RedisConnectorError(f"{self._where}: creating the consumer group failed: {e}") from e

    def close(self) -> None:
        import redis

        redis_client = getattr(self, "_redis", None)
        if redis_client is not None:
            try:
                self._flush_acks()
            except redis.RedisError as e:  # the entries stay pending: delivered again (at least once)
                log.warning("%s: %d acks could not be sent at close: %s", self._where, len(self._unsent_acks), e)
            redis_client.close()

    def _check_version(self) -> None:
        import redis

        try:
            version = str(self._redis.info("server").get("redis_version", ""))
        except redis.ResponseError:  # INFO disabled (some managed Redis): trust it
            return
        numbers = tuple(int(p) for p in version.split(".")[:2] if p.isdigit())
        if numbers and numbers < (6, 2):
            raise RedisConnectorError(f"Redis {version} has no XAUTOCLAIM: the spout needs Redis 6.2 or later")

    def _create_group(self) -> None:
        import redis

        try:
            self._redis.xgroup_create(self.stream, self.group, id=self.start_id, mkstream=True)
        except redis.ResponseError as e:
            if "BUSYGROUP" not in str(e):
                raise

    # -- next_tuple ---------------------------------------------------------------------------

    def next_tuple(self) -> None:
        if self._backoff.waiting():
            return
        now = time.monotonic()
        try:
            try:
                self._step(now)
            except self._response_error as e:
                if "NOGROUP" not in str(e):
                    raise
                log.warning("%s: the consumer group is gone (Redis restarted without persistence?): creating it "
                            "again", self._where)
                self._create_group()
                return
        except self._unreachable as e:
            self._went_down(e)
            return
        if self._backoff.came_back():
            log.warning("%s: Redis is reachable again", self._where)

    def _went_down(self, error: Exception) -> None:
        if self._backoff.went_down():
            self.metrics["reconnects"] += 1
            log.warning("%s: Redis is unreachable (%s); retrying with backoff, nothing is acknowledged meanwhile",
                        self._where, error)

    def _step(self, now: float) -> None:
        if len(self._unsent_acks) >= self.batch_size or not self._backlog:  # a round trip per batch, not per call
            self._flush_acks()
        if self._retries and self._retries[0][0] <= now:
            entry_id = self._retries[0][1]
            # back in this consumer's hands (and its idle time reset, so no one takes it over);
            # taken off the heap only once that worked, so a Redis error loses no retry
            self._redis.xclaim(self.stream, self.group, self.consumer, 0, [entry_id], justid=True)
            heapq.heappop(self._retries)
            fields = self._inflight.get(entry_id)
            if fields is not None:  # else settled since it failed: nothing to replay
                self.metrics["replayed"] += 1
                self._emit(entry_id, fields)
            return
        if not self._backlog:
            self._fill(now)
        if self._backlog:
            entry_id, fields = self._backlog.popleft()
            if fields is None:  # deleted from the stream while pending: nothing to deliver
                log.warning("%s: entry %s was deleted from the stream while pending; acknowledging it",
                            self._where, entry_id)
                self.metrics["errors"] += 1
                self._redis.xack(self.stream, self.group, entry_id)
                return
            self._inflight[entry_id] = fields
            self._emit(entry_id, fields)

    def _fill(self, now: float) -> None:
        """Read entries into the backlog: taken over from dead consumers when a claim is due,
        else this consumer's own pending entries after a restart, else new ones."""
        if now >= self._next_claim:
            self._claim()
            if self._claim_cursor in ("0-0", b"0-0"):
                self._next_claim = now + self.claim_idle_ms / 1000
            if self._backlog:
                return
        if self._history_from is not None:
            entries = self._read(self._history_from)
            if entries:
                self._history_from = entries[-1][0]
                return
            self._history_from = None
        self._read(">")

    def _read(self, start: str) -> list[tuple[str, Any]]:
        block = self.block_ms if self.block_ms > 0 and start == ">" else None
        reply = self._redis.xreadgroup(self.group, self.consumer, {self.stream: start}, count=self.batch_size,
                                       block=block)
        entries = [(_decode(i), self._fields(f)) for _, stream_entries in (reply or []) for i, f in stream_entries]
        self.metrics["read"] += len(entries)
        self._backlog.extend(entries)
        return entries

    def _claim(self) -> None:
        reply = self._redis.xautoclaim(self.stream, self.group, self.consumer, self.claim_idle_ms,
                                       start_id=self._claim_cursor, count=self.batch_size)
        self._claim_cursor = _decode(reply[0])
        for raw_id, raw_fields in reply[1]:
            if raw_id is None:  # deleted from the stream while pending (Redis < 7 reports it so)
                continue
            entry_id = _decode(raw_id)
            if entry_id in self._inflight or any(entry_id == i for i, _ in self._backlog):
                continue  # one of ours, in flight (or waiting for its retry) for a long time
            self.metrics["claimed"] += 1
            self.metrics["read"] += 1
            self._backlog.append((entry_id, self._fields(raw_fields)))

    @staticmethod
    def _fields(raw: Any) -> dict[str, str] | None:
        if raw is None:
            return None
        # _decode inlined: this runs for every field of every entry
        return {(k.decode("utf-8", "replace") if isinstance(k, bytes) else k):
                (v.decode("utf-8", "replace") if isinstance(v, bytes) else v) for k, v in raw.items()}

    def _emit(self, entry_id: str, fields: dict[str, str]) -> None:
        if self._plain_values:
            self._collector.emit([entry_id, fields], msg_id=entry_id)
            self.metrics["emitted"] += 1
            return
        try:
            out = self.translator(entry_id, fields)
            if out is None:
                self.metrics["skipped"] += 1
                self.ack(entry_id)
                return
            stream, values = self.streams.route(out)
        except Exception as e:
            self._reject(entry_id, e)
            return
        self._collector.emit(values, stream=stream, msg_id=entry_id)
        self.metrics["emitted"] += 1

    def _reject(self, entry_id: str, error: Exception) -> None:
        """A bad entry: to the error stream, acked once that tuple is processed."""
        self.metrics["errors"] += 1
        log.warning("%s: the translator rejected entry %s (%s: %s): emitted on stream %r",
                    self._where, entry_id, type(error).__name__, error, self.streams.error_stream)
        self._collector.emit([entry_id, f"{type(error).__name__}: {error}"], stream=self.streams.error_stream,
                             msg_id=entry_id)
        self.metrics["emitted"] += 1

    # -- ack / fail ---------------------------------------------------------------------------

    def _flush_acks(self) -> None:
        """XACK what was acked since the last call, in one command (connection errors raise:
        the ids stay, for the next call)."""
        if self._unsent_acks:
            self._redis.xack(self.stream, self.group, *self._unsent_acks)
            self.metrics["acked"] += len(self._unsent_acks)
            self._unsent_acks.clear()

    def ack(self, msg_id: Any) -> None:
        self._inflight.pop(msg_id, None)
        self._attempts.pop(msg_id, None)
        self._unsent_acks.append(msg_id)

    def fail(self, msg_id: Any) -> None:
        self.metrics["failed"] += 1
        if msg_id not in self._inflight:
            return  # not one this spout has in flight: nothing to replay
        attempts = self._attempts.get(msg_id, 0) + 1
        if self.max_retries is not None and attempts > self.max_retries:
            self.metrics["given_up"] += 1
            reason = f"failed {attempts} times (max_retries {self.max_retries}): given up"
            log.warning("%s: entry %s %s", self._where, msg_id, reason)
            self._collector.emit([msg_id, reason], stream=self.streams.error_stream)
            self.ack(msg_id)
            return
        self._attempts[msg_id] = attempts
        delay = min(self.retry_delay_ms * 2 ** (attempts - 1), self.retry_delay_max_ms)
        heapq.heappush(self._retries, (time.monotonic() + delay / 1000, msg_id))


class _StoreBoltBase(Bolt):
    """What the store and lookup bolts share: the connection, the data type and key."""

    blocking = True
    _connector = "Redis bolt"
    _types: tuple[str, ...] = ()

    def __init__(self, mapper: Callable[[Tuple], Any], data_type: str, key: str | Callable[[Tuple], Any] | None,
                 host: str, port: int, db: int, password: str | None, unix_socket_path: str | None,
                 timeout: float) -> None:
        if data_type not in self._types:
            raise ValueError(f"{self._connector}: data_type must be one of {', '.join(self._types)}, got {data_type!r}")
        if key is None and data_type != "string":
            raise ValueError(f"{self._connector}: data_type {data_type!r} needs a key (a str, or a callable of the tuple)")
        self._conn = _Connection(self._connector, host, port, db, password, unix_socket_path, timeout)
        self.mapper, self.data_type, self.key = mapper, data_type, key

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        self.collector = collector
        self._component = context.get_this_component_id()
        self._where = f"{self._connector} {self._component!r} at {self._conn.address}"
        self._redis = self._conn.connect(self._where, decode_responses=True)

    def cleanup(self) -> None:
        redis_client = getattr(self, "_redis", None)
        if redis_client is not None:
            redis_client.close()

    def _key_of(self, tup: Tuple) -> Any:
        return self.key(tup) if callable(self.key) else self.key

    def _failed(self, tup: Tuple, what: str, error: BaseException) -> None:
        """Fail ``tup`` and record why for the component."""
        reason = (f"{self._where}: {what} the tuple from component {tup.source_component!r} stream "
                  f"{tup.source_stream_id!r}: {type(error).__name__}: {error}")
        self.collector.report_error(RedisConnectorError(reason))
        self.collector.fail(tup)


#: the writes of RedisStoreBolt that take any number of elements after the key (HSET key f1 v1
#: f2 v2 ...): consecutive ones to one key are sent as one command
_MERGEABLE = frozenset({"HSET", "SADD", "ZADD", "RPUSH"})


class RedisStoreBolt(ExactlyOnceOption, _StoreBoltBase):
    """Writes every input tuple to Redis (Storm's storm-redis ``RedisStoreBolt``), acking it
    once Redis confirmed the write; failing it (and recording why for the component) when
    ``mapper`` cannot map it or Redis refuses or cannot be reached.

    ``mapper(tup)`` gives, by ``data_type``, with ``key`` a str or a callable of the tuple:

    * ``"string"``: ``(key, value)`` -> ``SET key value`` (``key`` unused);
    * ``"hash"``: ``(field, value)`` -> ``HSET key field value``;
    * ``"set"``: ``member`` -> ``SADD key member``;
    * ``"sorted_set"``: ``(member, score)`` -> ``ZADD key score member``;
    * ``"list"``: ``value`` -> ``RPUSH key value``;
    * ``"stream"``: a dict of fields -> ``XADD key * fields``.

    The writes of a batch of inputs (what reached the executor together, at most
    ``max_pipeline``) go to Redis in one pipeline (``finish_batch``), not in a round trip
    each; consecutive writes of the batch to the same key by ``HSET``, ``SADD``, ``ZADD`` or
    ``RPUSH`` are one command (``HSET key f1 v1 f2 v2 ...``, in arrival order). Each input is
    acked or failed by the reply of the command holding its write. Values are checked (and
    the mapping done) in ``execute``, so one bad tuple fails alone. Commands are not a
    transaction: a batch cut by a lost connection fails whole, and the replays may write
    some values twice (the same values: idempotent for all but ``list`` and ``stream``).

    :func:`by_fields` makes a mapper picking the tuple's fields by name. Declares no stream.

    ``exactly_once=True`` makes the exactly-once form instead, :class:`ExactlyOnceRedisStoreBolt`
    (``marker_key`` is its option): each checkpoint epoch's writes applied once, after the
    checkpoint commits, atomically with the task's marker (see the module's documentation).
    """

    _connector = "RedisStoreBolt"
    _types = ("string", "hash", "set", "sorted_set", "list", "stream")

    def __init__(self, mapper: Callable[[Tuple], Any], *, data_type: str = "hash",
                 key: str | Callable[[Tuple], Any] | None = None, host: str = "127.0.0.1", port: int = 6379,
                 db: int = 0, password: str | None = None, unix_socket_path: str | None = None,
                 timeout: float = 2000, max_pipeline: int = 1000, exactly_once: bool = False) -> None:
        super().__init__(mapper, data_type, key, host, port, db, password, unix_socket_path, timeout)
        self.max_pipeline = max(1, int(max_pipeline))

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        super().prepare(conf, context, collector)
        self._encode = self._redis.get_encoder().encode  # raises DataError for a value Redis cannot take
        self._batch: list[tuple[Tuple, str, list[bytes]]] = []  # (input, command, arguments) to write

    def _command(self, tup: Tuple) -> tuple[str, tuple[Any, ...]]:
        """The write of ``tup`` as (command, arguments); mapping errors raise here (the key is
        the first argument of every command)."""
        mapped, kind = self.mapper(tup), self.data_type
        key = self._key_of(tup)
        if kind == "string":
            k, value = mapped
            return "SET", (k, value)
        if kind == "hash":
            field, value = mapped
            return "HSET", (key, field, value)
        if kind == "set":
            return "SADD", (key, mapped)
        if kind == "sorted_set":
            member, score = mapped
            return "ZADD", (key, float(score), member)
        if kind == "list":
            return "RPUSH", (key, mapped)
        if not isinstance(mapped, dict) or not mapped:
            raise TypeError(f"a stream entry must be a non-empty dict of fields, got {mapped!r}")
        return "XADD", (key, "*", *(part for item in mapped.items() for part in item))

    def _write_of(self, tup: Tuple) -> tuple[str, list[bytes]]:
        """The write of ``tup``: the command and its arguments as the bytes Redis receives; what
        the mapper raised, or ``DataError`` for a value Redis cannot take."""
        command, args = self._command(tup)
        return command, [self._encode(arg) for arg in args]

    def execute(self, tup: Tuple) -> None:
        try:
            command, args = self._write_of(tup)
        except Exception as e:
            self._failed(tup, "cannot map", e)
            return
        self._batch.append((tup, command, args))
        if len(self._batch) >= self.max_pipeline:
            self.finish_batch()

    def finish_batch(self) -> None:
        import redis

        batch, self._batch = self._batch, []
        if not batch:
            return
        # one command per run of writes to one key by a command taking many elements: redis-py
        # spends more on each command (packing it, parsing its reply) than on its arguments
        commands: list[tuple[list[Tuple], str, list[bytes]]] = []  # (inputs, command, arguments)
        for tup, command, args in batch:
            last = commands[-1] if commands else None
            if last is not None and command == last[1] and command in _MERGEABLE and args[0] == last[2][0]:
                last[0].append(tup)
                last[2].extend(args[1:])
            else:
                commands.append(([tup], command, list(args)))
        pipe = self._redis.pipeline(transaction=False)
        for _, command, args in commands:
            pipe.execute_command(command, *args)
        try:
            replies = pipe.execute(raise_on_error=False)
        except redis.RedisError as e:
            for tup, _, _ in batch:
                self._failed(tup, f"writing ({self.data_type}) failed for", e)
            return
        for (inputs, _, _), reply in zip(commands, replies):
            if isinstance(reply, Exception):
                for tup in inputs:
                    self._failed(tup, f"writing ({self.data_type}) failed for", reply)
            else:
                for tup in inputs:
                    self.collector.ack(tup)

    def cleanup(self) -> None:
        if getattr(self, "_batch", None) and getattr(self, "_redis", None) is not None:
            self.finish_batch()
        super().cleanup()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass


#: the key type each command of RedisStoreBolt writes ("": any, SET replaces whatever is there)
_KEY_TYPES = {"SET": "", "HSET": "hash", "SADD": "set", "ZADD": "zset", "RPUSH": "list", "XADD": "stream"}

#: Publishes one epoch: KEYS[1] the task's marker, KEYS[k] (k >= 2) the key of command k - 1;
#: ARGV[1] txid, ARGV[2] run, then per command its name, the key type it needs and its argument
#: count n, then its n arguments after the key. Returns 1 if applied, 0 if the marker says it
#: was. Types are checked before anything is written: Redis does not roll back a script that
#: fails halfway, and a half-applied epoch would be applied again (twice) by the retry.
_PUBLISH_SCRIPT = """
local txid, run = tonumber(ARGV[1]), ARGV[2]
local last = redis.call('HMGET', KEYS[1], 'txid', 'run')
if last[2] == run and last[1] and tonumber(last[1]) >= txid then
  return 0
end
local types, i = {}, 3
for k = 2, #KEYS do
  local want = ARGV[i + 1]
  local key = KEYS[k]
  local got = types[key] or redis.call('TYPE', key)['ok']
  if want == '' then
    types[key] = 'string'
  elseif got == 'none' or got == want then
    types[key] = want
  else
    return redis.error_reply('WRONGTYPE key ' .. key .. ' holds a ' .. got .. ', ' .. ARGV[i] .. ' needs a ' ..
                             want .. ': nothing of epoch ' .. ARGV[1] .. ' written')
  end
  i = i + 3 + tonumber(ARGV[i + 2])
end
i = 3
for k = 2, #KEYS do
  local n = tonumber(ARGV[i + 2])
  redis.call(ARGV[i], KEYS[k], unpack(ARGV, i + 3, i + 2 + n))
  i = i + 3 + n
end
redis.call('HSET', KEYS[1], 'txid', ARGV[1], 'run', run)
return 1
"""

#: the key of the task's state holding its run id (see the module's documentation)
RUN_KEY = "$redis-store.run"

DEFAULT_MARKER_KEY = "squall:eo:{topology}:{component}:{task}"


class ExactlyOnceRedisStoreBolt(WriteAheadSink, RedisStoreBolt):
    """:class:`RedisStoreBolt` in exactly-once mode (``RedisStoreBolt(..., exactly_once=True)``):
    the same mapping, data types and checks, each checkpoint epoch's commands published after the
    checkpoint commits, in one Lua script with the task's marker (see the module's documentation
    for the contract). ``marker_key``: the marker's name, a template with the fields
    ``{topology}``, ``{component}`` and ``{task}``. ``max_pipeline`` is unused: an epoch is one
    script."""

    def __init__(self, mapper: Callable[[Tuple], Any], *, marker_key: str = DEFAULT_MARKER_KEY,
                 **options: Any) -> None:
        try:
            marker_key.format(topology="t", component="c", task=1)
            fields = {name for _, name, _, _ in string.Formatter().parse(marker_key) if name}
        except (KeyError, IndexError, ValueError) as e:
            raise ValueError(f"RedisStoreBolt: marker_key {marker_key!r} is not a template of the fields "
                             f"topology, component and task: {e!r}") from None
        missing = sorted({"topology", "component", "task"} - fields)
        if missing:  # a marker shared by tasks would skip a sibling's epochs of the same txid
            raise ValueError(f"RedisStoreBolt: marker_key {marker_key!r} lacks the field(s) {', '.join(missing)}: "
                             "each task of each component of each topology needs a marker of its own")
        RedisStoreBolt.__init__(self, mapper, **options)
        self.marker_key = marker_key
        self.metrics = self._zero_metrics()

    @staticmethod
    def _zero_metrics() -> dict[str, int]:
        return dict.fromkeys(("published", "skipped", "written", "errors"), 0)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        # both: the contract's bookkeeping, and the connection (neither calls the other)
        TwoPhaseCommitSink.prepare(self, conf, context, collector)
        RedisStoreBolt.prepare(self, conf, context, collector)
        self.marker = self.marker_key.format(topology=context.topology_name, component=self._component,
                                             task=context.get_this_task_index())
        self._script = self._redis.register_script(_PUBLISH_SCRIPT)  # EVALSHA, loaded again after NOSCRIPT
        self.metrics = self._zero_metrics()

    def init_state(self, state: KeyValueState) -> None:
        self._run = state.get(RUN_KEY)
        if self._run is None:  # a first start, or the state dropped: a run of txids of its own
            self._run = uuid.uuid4().hex
            state.put(RUN_KEY, self._run)  # in the state before any epoch it publishes (at its PREPARE)
        super().init_state(state)  # may publish (a recovery): after the run is known

    # execute is the contract's (TwoPhaseCommitSink.execute, first in the MRO): record, then ack

    def finish_batch(self) -> None:
        """Nothing to write: an epoch is written once its checkpoint commits (publish)."""

    def record(self, tup: Tuple) -> list[Any]:
        """``[command, key, *arguments]``, as bytes (msgpack takes them, and Redis gets them
        unchanged); a ``ValueError`` naming the component for a tuple that cannot be mapped."""
        try:
            command, args = self._write_of(tup)
        except Exception as e:
            raise ValueError(f"{self._where}: cannot map: {type(e).__name__}: {e}") from e
        return [command, *args]

    def publish(self, txid: int, records: list[Any]) -> bool:
        """Apply ``records`` (epoch ``txid``'s) and set the marker, in one script; True if
        applied, False if the marker says it was. ``RedisConnectorError`` naming the component
        and ``host:port`` if Redis is unreachable or refuses it: then nothing was written, or
        (a reply lost) all of it with the marker, which the retry finds."""
        import redis

        keys: list[Any] = [self.marker]
        args: list[Any] = [txid, self._run]
        for command, key, *rest in records:
            keys.append(key)
            args += [command, _KEY_TYPES[command], len(rest), *rest]
        try:
            applied = bool(self._script(keys=keys, args=args))
        except redis.RedisError as e:
            # a timeout may have come after the script ran: the marker makes the retry a no-op
            self.metrics["errors"] += 1
            raise RedisConnectorError(f"{self._where}: publishing epoch {txid} ({len(records)} writes) failed, kept "
                                      f"for the next commit: {type(e).__name__}: {e}") from e
        if applied:
            self.metrics["published"] += 1
            self.metrics["written"] += len(records)
        else:
            self.metrics["skipped"] += 1
            log.info("%s: epoch %d was published before (marker %s): skipped", self._where, txid, self.marker)
        return applied


RedisStoreBolt.exactly_once_form = ExactlyOnceRedisStoreBolt


class RedisLookupBolt(_StoreBoltBase):
    """Looks a value up in Redis for every input and emits the input's values followed by the
    value found (``None`` when there is none), anchored to the input, then acks it (Storm's
    storm-redis ``RedisLookupBolt``). ``output_fields``: the fields of the emitted tuples (the
    input's fields and one more). A tuple ``mapper`` cannot map, or a failed lookup: the input
    is failed and the reason recorded for the component.

    ``mapper(tup)`` gives, by ``data_type`` (``key``: a str or a callable of the tuple):
    ``"string"``: the key (``GET``); ``"hash"``: the field (``HGET key field``); ``"set"``: the
    member (``SISMEMBER key member``: True/False); ``"sorted_set"``: the member (``ZSCORE key
    member``: a float or None).
    """

    _connector = "RedisLookupBolt"
    _types = ("string", "hash", "set", "sorted_set")

    def __init__(self, mapper: Callable[[Tuple], Any], *, output_fields: list[str], data_type: str = "hash",
                 key: str | Callable[[Tuple], Any] | None = None, host: str = "127.0.0.1", port: int = 6379,
                 db: int = 0, password: str | None = None, unix_socket_path: str | None = None,
                 timeout: float = 2000) -> None:
        super().__init__(mapper, data_type, key, host, port, db, password, unix_socket_path, timeout)
        self.output_fields = list(output_fields)

    def execute(self, tup: Tuple) -> None:
        import redis

        try:
            looked_up, key = self.mapper(tup), self._key_of(tup)
        except Exception as e:
            self._failed(tup, "cannot map", e)
            return
        r = self._redis
        try:
            if self.data_type == "string":
                value = r.get(looked_up)
            elif self.data_type == "hash":
                value = r.hget(key, looked_up)
            elif self.data_type == "set":
                value = bool(r.sismember(key, looked_up))
            else:
                value = r.zscore(key, looked_up)
        except (redis.RedisError, redis.exceptions.DataError) as e:
            self._failed(tup, f"looking up ({self.data_type}) failed for", e)
            return
        self.collector.emit([*tup.values, value], anchors=tup)
        self.collector.ack(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self.output_fields)


class by_fields:  # noqa: N801  (used like a function)
    """A mapper giving the values of the tuple's fields ``names`` (one name: the value itself;
    several: a tuple of them), e.g. ``RedisStoreBolt(by_fields("word", "count"), key="counts")``."""

    def __init__(self, *names: str) -> None:
        if not names:
            raise ValueError("by_fields needs at least one field name")
        self.names = names

    def __call__(self, tup: Tuple) -> Any:
        values = tuple(map(tup.get_value_by_field, self.names))
        return values[0] if len(values) == 1 else values
