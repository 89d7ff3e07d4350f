"""RabbitMQ connectors: a spout consuming a queue, and a bolt publishing to an exchange with
publisher confirms. Needs the ``pika`` client (``pip install "squall[rabbitmq]"``).

Connection settings, the same for both: ``host`` (``127.0.0.1``), ``port`` (5672),
``virtual_host`` (``/``), ``username``/``password`` (``guest``/``guest``), ``timeout`` (seconds,
5): how long connecting, and waiting for any reply, may take. ``open``/``prepare`` connect, so
a broker that cannot be reached fails the submission with an error naming the component and
``host:port``.

:class:`RabbitMQSpout` — the contract
--------------------------------------

* **Reading.** The spout consumes ``queue`` (``basic_consume``, manual acknowledgements). By
  default the queue must exist (a passive declare at ``open``: a missing queue fails the
  submission with an error naming it); ``declare=True`` declares it (``durable``). Several
  tasks of the spout are competing consumers of the queue.
* **Never blocking.** ``next_tuple`` only handles the frames that already arrived
  (``process_data_events(time_limit=0)``) and emits one delivery per call.
* **Prefetch.** ``prefetch`` (default ``topology.max.spout.pending``, else 1000) is the
  channel's ``basic_qos``: RabbitMQ never has more deliveries unacknowledged at this
  consumer, so never more in flight in the topology.
* **Emitting.** Each delivery is emitted with message id ``(generation, delivery_tag)``
  (``generation``: the connection's, see below). ``translator``, a callable ``(body,
  properties) -> values`` (``body``: ``bytes``; ``properties``: pika's ``BasicProperties``),
  or ``-> Route(stream, values)`` to pick a stream, or ``-> None`` to skip the delivery (it is
  acknowledged, counted as ``skipped``); ``output_fields`` declares the streams (a list: the
  ``default`` stream's fields; a dict: stream -> fields). Default: the ``default`` stream,
  field ``body``.
* **Acknowledging.** A delivery is ``basic_ack``-ed when the tree of its tuple is fully
  processed (the spout's ``ack``), never before; a failed tuple (a bolt failed it, or it timed
  out) is ``basic_nack``-ed with ``requeue=requeue_on_fail`` (True: RabbitMQ delivers it
  again, flagged redelivered; False: it is dropped, or dead-lettered if the queue has a
  dead-letter exchange).
* **Bad deliveries.** When the translator raises, the delivery is emitted on the ``error``
  stream (``error_stream``; fields ``delivery_tag``, ``error``: the exception), tracked like
  any tuple: it is ``basic_ack``-ed once that tuple is processed (immediately when nothing
  subscribes to the stream), and logged. Never silently dropped.
* **The broker going away.** ``next_tuple`` catches connection errors, logs the first one, and
  connects again after a backoff (``reconnect_delay_ms`` doubling up to
  ``reconnect_delay_max_ms``). Each connection has a generation; RabbitMQ requeues the
  deliveries left unacknowledged by a dead connection, so acks and fails of the tuples of an
  older generation are dropped (counted as ``stale``): those messages come back, redelivered.
  Use a durable queue and persistent messages (``delivery_mode=2``) for them to survive a
  restart of the broker.
* **Threads.** Both connectors are blocking components (``blocking = True``): each executor
  has a thread of its own, so a slow broker never stalls the worker's other executors.
* **Guarantee: at-least-once.** Every message is processed at least once; a message whose
  processing completed is delivered again only when its ack was lost with the connection (a
  broker restart, a network failure, the worker or topology killed before the ack was sent).
* **Metrics.** ``spout.metrics``, a dict of counters: ``received`` (deliveries,
  redeliveries included), ``redelivered`` (those RabbitMQ flagged redelivered), ``emitted``,
  ``acked``, ``failed``, ``stale`` (acks and fails dropped for a dead connection), ``errors``
  (deliveries on the error stream), ``skipped``, ``reconnects`` (times the broker became
  unreachable).

:class:`RabbitMQBolt` — the contract
-------------------------------------

Publishes every input tuple to ``exchange`` (``""``: the default exchange, routing by queue
name; any other must exist: ``prepare`` checks, and a missing one fails it naming the exchange)
with ``routing_key`` (a str, or a callable of the tuple); ``mapper(tup)`` gives the body
(``bytes`` or ``str``, encoded as UTF-8) or ``(body, properties)`` (``properties``: a dict of
``BasicProperties`` fields, or a ``BasicProperties``); default: the tuple's first value.
``persistent=True`` (default) sets ``delivery_mode=2`` unless the properties say otherwise.
With ``confirm=True`` (default) the channel is in publisher-confirm mode and messages are
published ``mandatory``: the input is acked once the broker confirmed the message, and failed
(the reason recorded for the component with ``report_error``) when the broker nacks it or
cannot route it to any queue. With ``confirm=False`` it is acked once handed to the socket
(at-most-once). A tuple ``mapper`` or ``routing_key`` cannot map, and a lost connection, fail
the input with the reason; the bolt connects again at the next tuple, after a backoff during
which inputs are failed at once. Declares no stream. Each publish waits for its confirmation:
the bolt's throughput is bounded by the broker's round trip (parallelise the bolt for more).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from squall.api.bolt import Bolt
from squall.api.config import Config
from squall.api.spout import Spout
from squall.connectors import Backoff, Route, SpoutStreams, require

if TYPE_CHECKING:
    from squall.api.collector import IOutputCollector, ISpoutOutputCollector
    from squall.api.component import OutputFieldsDeclarer
    from squall.api.context import TopologyContext
    from squall.api.tuple import Tuple

__all__ = ["RabbitMQBolt", "RabbitMQConnectorError", "RabbitMQSpout", "Route"]

log = logging.getLogger("squall.connectors.rabbitmq")

DEFAULT_PREFETCH = 1000


class RabbitMQConnectorError(RuntimeError):
    """The broker could not be reached, or refused something; the message names ``host:port``."""


class _Connection:
    """The settings both connectors share."""

    def __init__(self, connector: str, host: str, port: int, virtual_host: str, username: str, password: str,
                 timeout: float) -> None:
        require("pika", "rabbitmq", connector)
        self.connector = connector
        self.host, self.port, self.virtual_host = host, int(port), virtual_host
        self.username, self.password, self.timeout = username, password, float(timeout)
        self.address = f"{host}:{self.port}"

    def connect(self, what: str) -> Any:
        """A ``BlockingConnection``, or :class:`RabbitMQConnectorError` naming the address."""
        import pika

        params = pika.ConnectionParameters(
            host=self.host, port=self.port, virtual_host=self.virtual_host,
            credentials=pika.PlainCredentials(self.username, self.password),
            connection_attempts=1, socket_timeout=self.timeout, stack_timeout=self.timeout,
            blocked_connection_timeout=self.timeout * 6)
        try:
            return pika.BlockingConnection(params)
        except pika.exceptions.ProbableAuthenticationError as e:
            raise RabbitMQConnectorError(f"{what}: RabbitMQ at {self.address} refused user {self.username!r}'s "
                                         f"login: check username= and password=") from e
        except pika.exceptions.ProbableAccessDeniedError as e:
            raise RabbitMQConnectorError(f"{what}: RabbitMQ at {self.address} refused vhost {self.virtual_host!r} "
                                         f"to user {self.username!r} ({_innermost(e)}): check virtual_host= and "
                                         f"the user's permissions") from e
        except pika.exceptions.AMQPError as e:
            raise RabbitMQConnectorError(f"{what}: cannot reach RabbitMQ at {self.address} (vhost "
                                         f"{self.virtual_host!r}): {_innermost(e)}") from e

    def open(self, what: str, setup: Callable[[Any], None]) -> tuple[Any, Any]:
        """``(connection, channel)``, ``setup(channel)`` done; the connection closed if it raised."""
        connection = self.connect(what)
        try:
            channel = connection.channel()
            setup(channel)
        except BaseException:
            _close_quietly(connection)
            raise
        return connection, channel


def _innermost(error: BaseException) -> str:
    """The cause pika wraps in its connection errors (e.g. "Connection refused"), as words."""
    while True:
        inner = getattr(error, "exception", None)  # pika's connection workflow wraps the socket's error
        if inner is None and error.args and isinstance(error.args[0], BaseException):
            inner = error.args[0]
        if not isinstance(inner, BaseException):
            break
        error = inner
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error) or type(error).__name__


def _connection_errors() -> tuple[type[BaseException], ...]:
    import pika

    return (pika.exceptions.AMQPConnectionError, pika.exceptions.AMQPChannelError, ConnectionError, OSError)


def _default_translator(body: bytes, properties: Any) -> list[Any]:
    return [body]


class RabbitMQSpout(Spout):
    """Emits the messages of a RabbitMQ queue, at least once (see the module's documentation
    for the contract)."""

    keeps_position = True  # what is acked is not read again: acks wait for the commit of stateful bolts

    blocking = True  # network I/O: a thread of its own, never stalling the cooperative ones

    def __init__(self, queue: str, *, host: str = "127.0.0.1", port: int = 5672, virtual_host: str = "/",
                 username: str = "guest", password: str = "guest", timeout: float = 5,
                 translator: Callable[[bytes, Any], Any] | None = None,
                 output_fields: list[str] | dict[str, list[str]] | None = None, error_stream: str = "error",
                 prefetch: int | None = None, declare: bool = False, durable: bool = True,
                 requeue_on_fail: bool = True, reconnect_delay_ms: float = 100,
                 reconnect_delay_max_ms: float = 5_000) -> None:
        self._conn = _Connection("RabbitMQSpout", host, port, virtual_host, username, password, timeout)
        self.queue = queue
        self.translator = translator or _default_translator
        self.streams = SpoutStreams("RabbitMQSpout", output_fields, ["body"], error_stream, ["delivery_tag", "error"])
        if prefetch is not None and not 0 < int(prefetch) <= 65535:
            raise ValueError(f"RabbitMQSpout: prefetch must be between 1 and 65535, got {prefetch!r}")
        self.prefetch = prefetch
        self.declare, self.durable, self.requeue_on_fail = declare, durable, requeue_on_fail
        self.reconnect_delay_ms, self.reconnect_delay_max_ms = reconnect_delay_ms, reconnect_delay_max_ms
        self.metrics = self._zero_metrics()

    @staticmethod
    def _zero_metrics() -> dict[str, int]:
        names = ("received", "redelivered", "emitted", "acked", "failed", "stale", "errors", "skipped", "reconnects")
        return dict.fromkeys(names, 0)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        self.streams.declare(declarer)

    # -- lifecycle --------------------------------------------------------------------------

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: ISpoutOutputCollector) -> None:
        self._collector = collector
        component = context.get_this_component_id()
        self._where = f"RabbitMQSpout {component!r}: queue {self.queue!r} at {self._conn.address}"
        if self.prefetch is None:
            pending = conf.get(Config.TOPOLOGY_MAX_SPOUT_PENDING)
            self._prefetch = min(int(pending), 65535) if pending else DEFAULT_PREFETCH
        else:
            self._prefetch = int(self.prefetch)
        self.metrics = self._zero_metrics()
        self._backlog: deque[tuple[int, int, bytes, Any]] = deque()  # (generation, tag, body, properties)
        self._inflight: set[tuple[Any, ...]] = set()  # message ids emitted, not yet settled
        self._generation = 0
        self._connection: Any = None
        self._channel: Any = None
        self._backoff = Backoff(self.reconnect_delay_ms, self.reconnect_delay_max_ms)
        self._connect()

    def _connect(self) -> None:
        self._connection, self._channel = self._conn.open(self._where, self._setup)

    def _setup(self, channel: Any) -> None:
        import pika

        try:
            channel.queue_declare(self.queue, passive=not self.declare, durable=self.durable)
        except pika.exceptions.ChannelClosedByBroker as e:
            if e.reply_code == 404:
                raise RabbitMQConnectorError(f"{self._where}: queue {self.queue!r} does not exist (in vhost "
                                             f"{self._conn.virtual_host!r}); declare it, or pass "
                                             f"declare=True") from e
            raise RabbitMQConnectorError(f"{self._where}: declaring queue {self.queue!r} failed: "
                                         f"{e.reply_code} {e.reply_text}") from e
        channel.basic_qos(prefetch_count=self._prefetch)
        self._generation += 1
        generation = self._generation

        def on_message(ch: Any, method: Any, properties: Any, body: bytes) -> None:
            self._backlog.append((generation, method.delivery_tag, body, properties))
            self.metrics["received"] += 1
            if method.redelivered:
                self.metrics["redelivered"] += 1

        channel.basic_consume(self.queue, on_message, auto_ack=False)

    def close(self) -> None:
        _disconnect(self)

    # -- next_tuple ---------------------------------------------------------------------------

    def next_tuple(self) -> None:
        errors = _connection_errors()
        if self._connection is None:
            if self._backoff.waiting():
                return
            try:
                self._connect()
            except (RabbitMQConnectorError, *errors) as e:
                self._went_down(e)
                return
        if not self._backlog:
            try:
                self._connection.process_data_events(time_limit=0)
            except errors as e:
                self._went_down(e)
                return
        if self._backoff.came_back():
            log.warning("%s: RabbitMQ is reachable again", self._where)
        if self._backlog:
            self._emit(*self._backlog.popleft())

    def _went_down(self, error: BaseException) -> None:
        # the deliveries not yet emitted or settled belong to the dead connection: RabbitMQ requeues them
        self._backlog.clear()
        self._inflight.clear()
        _disconnect(self)
        if self._backoff.went_down():
            self.metrics["reconnects"] += 1
            log.warning("%s: RabbitMQ is unreachable (%s: %s); reconnecting with backoff, the unacknowledged "
                        "deliveries come back redelivered", self._where, type(error).__name__, error)

    def _emit(self, generation: int, tag: int, body: bytes, properties: Any) -> None:
        msg_id = (generation, tag)
        self._inflight.add(msg_id)
        try:
            out = self.translator(body, properties)
            if out is None:
                self.metrics["skipped"] += 1
                self.ack(msg_id)
                return
            stream, values = self.streams.route(out)
        except Exception as e:  # a bad delivery: to the error stream, acked once that tuple is processed
            self.metrics["errors"] += 1
            error_stream = self.streams.error_stream
            log.warning("%s: the translator rejected delivery %s (%s: %s): emitted on stream %r",
                        self._where, tag, type(e).__name__, e, error_stream)
            stream, values = error_stream, [tag, f"{type(e).__name__}: {e}"]
        self._collector.emit(values, stream=stream, msg_id=msg_id)
        self.metrics["emitted"] += 1

    # -- ack / fail ---------------------------------------------------------------------------

    def _settle(self, msg_id: Any, ack: bool) -> None:
        generation, tag = msg_id[0], msg_id[1]
        if generation != self._generation or self._channel is None:
            self.metrics["stale"] += 1  # its connection is gone: RabbitMQ redelivers the message
            return
        if msg_id not in self._inflight:
            return  # settled already
        self._inflight.discard(msg_id)
        try:
            if ack:
                self._channel.basic_ack(tag)
            else:
                self._channel.basic_nack(tag, requeue=self.requeue_on_fail)
        except _connection_errors() as e:
            self.metrics["stale"] += 1
            self._went_down(e)
            return
        self.metrics["acked" if ack else "failed"] += 1

    def ack(self, msg_id: Any) -> None:
        self._settle(msg_id, True)

    def fail(self, msg_id: Any) -> None:
        self._settle(msg_id, False)


def _disconnect(component: Any) -> None:
    """Close ``component``'s connection, if any, and forget it and its channel."""
    connection = getattr(component, "_connection", None)
    component._connection = component._channel = None
    if connection is not None:
        _close_quietly(connection)


def _close_quietly(connection: Any) -> None:
    try:
        if connection.is_open:
            connection.close()
    except Exception:  # already broken: nothing to close cleanly
        pass


class RabbitMQBolt(Bolt):
    """Publishes every input tuple to RabbitMQ, acking it once the broker confirmed it (see the
    module's documentation for the contract)."""

    blocking = True

    def __init__(self, exchange: str = "", routing_key: str | Callable[[Tuple], str] = "", *,
                 mapper: Callable[[Tuple], Any] | None = None, confirm: bool = True, persistent: bool = True,
                 host: str = "127.0.0.1", port: int = 5672, virtual_host: str = "/", username: str = "guest",
                 password: str = "guest", timeout: float = 5, reconnect_delay_ms: float = 100,
                 reconnect_delay_max_ms: float = 5_000) -> None:
        self._conn = _Connection("RabbitMQBolt", host, port, virtual_host, username, password, timeout)
        self.exchange, self.routing_key = exchange, routing_key
        self.mapper = mapper or (lambda tup: tup.values[0])
        self.confirm, self.persistent = confirm, persistent
        self.reconnect_delay_ms, self.reconnect_delay_max_ms = reconnect_delay_ms, reconnect_delay_max_ms

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        self.collector = collector
        self._component = context.get_this_component_id()
        self._where = f"RabbitMQBolt {self._component!r}: exchange {self.exchange!r} at {self._conn.address}"
        self._backoff = Backoff(self.reconnect_delay_ms, self.reconnect_delay_max_ms)
        self._connection: Any = None
        self._channel: Any = None
        self._connect()

    def _connect(self) -> None:
        self._connection, self._channel = self._conn.open(self._where, self._setup)

    def _setup(self, channel: Any) -> None:
        import pika

        if self.exchange:  # the default exchange ("") always exists
            try:
                channel.exchange_declare(self.exchange, passive=True)
            except pika.exceptions.ChannelClosedByBroker as e:
                if e.reply_code == 404:
                    raise RabbitMQConnectorError(f"{self._where}: exchange {self.exchange!r} does not exist (in "
                                                 f"vhost {self._conn.virtual_host!r}); declare it first") from e
                raise RabbitMQConnectorError(f"{self._where}: checking exchange {self.exchange!r} failed: "
                                             f"{e.reply_code} {e.reply_text}") from e
        if self.confirm:
            channel.confirm_delivery()

    def cleanup(self) -> None:
        _disconnect(self)

    def _message(self, tup: Tuple) -> tuple[str, bytes, Any]:
        """``(routing key, body, properties)`` of ``tup`` (mapping errors raise here)."""
        import pika

        mapped = self.mapper(tup)
        body, properties = mapped if isinstance(mapped, tuple) else (mapped, None)
        if isinstance(body, str):
            body = body.encode("utf-8")
        if not isinstance(body, (bytes, bytearray)):
            raise TypeError(f"the body must be bytes or str, got {type(body).__name__}")
        if properties is None:
            properties = {}
        if isinstance(properties, dict):
            if self.persistent:
                properties = {"delivery_mode": 2, **properties}
            properties = pika.BasicProperties(**properties)
        key = self.routing_key(tup) if callable(self.routing_key) else self.routing_key
        if not isinstance(key, str):
            raise TypeError(f"the routing key must be a str, got {type(key).__name__}")
        return key, bytes(body), properties

    def execute(self, tup: Tuple) -> None:
        import pika

        try:
            key, body, properties = self._message(tup)
        except Exception as e:
            self._failed(tup, "cannot map", e)
            return
        if self._connection is None:
            if self._backoff.waiting():
                self._failed(tup, "RabbitMQ is unreachable (reconnecting), cannot publish",
                             RabbitMQConnectorError("not connected"))
                return
            try:
                self._connect()
            except RabbitMQConnectorError as e:
                self._went_down(tup, e)
                return
            if self._backoff.came_back():
                log.warning("%s: RabbitMQ is reachable again", self._where)
        try:
            self._channel.basic_publish(self.exchange, key, body, properties, mandatory=self.confirm)
        except pika.exceptions.UnroutableError as e:
            self._failed(tup, f"no queue is bound for routing key {key!r}: the broker returned", e)
            return
        except pika.exceptions.NackError as e:
            self._failed(tup, "the broker refused (nack)", e)
            return
        except _connection_errors() as e:
            self._went_down(tup, e)
            return
        self.collector.ack(tup)

    def _went_down(self, tup: Tuple, error: BaseException) -> None:
        _disconnect(self)
        if self._backoff.went_down():
            log.warning("%s: RabbitMQ is unreachable (%s: %s); failing inputs, reconnecting with backoff",
                        self._where, type(error).__name__, error)
        self._failed(tup, "the connection was lost while publishing", error)

    def _failed(self, tup: Tuple, what: str, error: BaseException) -> None:
        """Fail ``tup`` and record why for the component."""
        reason = (f"{self._where}: {what} the tuple from component {tup.source_component!r} stream "
                  f"{tup.source_stream_id!r}: {type(error).__name__}: {error}")
        self.collector.report_error(RabbitMQConnectorError(reason))
        self.collector.fail(tup)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        pass
