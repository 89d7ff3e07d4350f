"""``Config``: a dict of Storm's configuration keys, with constants and helpers."""

from __future__ import annotations

from typing import Any

from squall.defaults import DEFAULTS


class Config(dict):
    """Topology configuration. Keys are Storm's (``"topology.workers"``); user keys are kept too.

    Only the keys set here override :data:`squall.defaults.DEFAULTS`.
    """

    TOPOLOGY_WORKERS = "topology.workers"
    TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
    TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
    TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
    TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
    TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE = "topology.executor.receive.buffer.size"
    TOPOLOGY_EXECUTOR_SEND_BUFFER_SIZE = "topology.executor.send.buffer.size"
    TOPOLOGY_TRANSFER_BUFFER_SIZE = "topology.transfer.buffer.size"
    TOPOLOGY_RECEIVER_BUFFER_SIZE = "topology.receiver.buffer.size"
    TOPOLOGY_PRODUCER_BATCH_SIZE = "topology.producer.batch.size"
    TOPOLOGY_SPOUT_MAX_BATCH_SIZE = "topology.spout.max.batch.size"
    TOPOLOGY_STATS_SAMPLE_RATE = "topology.stats.sample.rate"
    TOPOLOGY_DEBUG = "topology.debug"
    TOPOLOGY_KRYO_REGISTER = "topology.kryo.register"
    #: Storm's key: let values of other types travel pickled (only over secure links). Default False.
    TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION = "topology.fall.back.on.java.serialization"
    #: authenticate and encrypt every link with ZeroMQ CURVE, a key pair per topology. Default True.
    TOPOLOGY_MESSAGING_SECURE = "topology.messaging.secure"
    SUPERVISOR_SLOTS_PORTS = "supervisor.slots.ports"

    def set_num_workers(self, n: int) -> Config:
        self[self.TOPOLOGY_WORKERS] = n
        return self

    def set_num_ackers(self, n: int) -> Config:
        self[self.TOPOLOGY_ACKER_EXECUTORS] = n
        return self

    def set_message_timeout_secs(self, secs: float) -> Config:
        self[self.TOPOLOGY_MESSAGE_TIMEOUT_SECS] = secs
        return self

    def set_max_spout_pending(self, n: int | None) -> Config:
        self[self.TOPOLOGY_MAX_SPOUT_PENDING] = n
        return self

    def set_debug(self, debug: bool) -> Config:
        self[self.TOPOLOGY_DEBUG] = debug
        return self

    def set_fall_back_on_java_serialization(self, fall_back: bool) -> Config:
        """Let tuple values of types that are neither msgpack's own nor registered cross
        workers pickled (cloudpickle). Unpickling runs code: only over authenticated links
        (``topology.messaging.secure``, the default); prefer :meth:`register_serialization`."""
        self[self.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION] = fall_back
        return self

    def set_messaging_secure(self, secure: bool) -> Config:
        """Authenticate and encrypt the topology's links (ZeroMQ CURVE, the default), or not:
        off, anyone who can reach a port can inject tuples or control messages."""
        self[self.TOPOLOGY_MESSAGING_SECURE] = secure
        return self

    def register_serialization(self, cls: type, serializer: Any) -> Config:
        """Serialize instances of ``cls`` that cross workers with ``serializer`` (an object,
        or a class to instantiate, with ``serialize(obj) -> bytes`` and
        ``deserialize(data) -> obj``): Storm's Kryo registration. Without one, such values
        cannot cross workers unless ``topology.fall.back.on.java.serialization`` is on."""
        if not isinstance(cls, type):
            raise ValueError(f"register_serialization: {cls!r} is not a class")
        if isinstance(serializer, type):
            serializer = serializer()
        for method in ("serialize", "deserialize"):
            if not callable(getattr(serializer, method, None)):
                raise ValueError(f"register_serialization({cls.__name__}): {serializer!r} has no {method}()")
        registrations = [r for r in self.get(self.TOPOLOGY_KRYO_REGISTER, []) if r[0] is not cls]
        self[self.TOPOLOGY_KRYO_REGISTER] = [*registrations, (cls, serializer)]
        return self


def _positive_int(key: str, value: Any, allow_none: bool = False, allow_zero: bool = False) -> None:
    if value is None and allow_none:
        return
    low = 0 if allow_zero else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"config {key!r} must be an integer >= {low}, got {value!r}")


def _boolean(key: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"config {key!r} must be true or false, got {value!r}")


def _positive_number(key: str, value: Any, allow_none: bool = False) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"config {key!r} must be a number > 0, got {value!r}")


def _gc_thresholds(key: str, value: Any) -> None:
    if value is None:
        return
    if (not isinstance(value, (list, tuple)) or not 1 <= len(value) <= 3
            or any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in value)):
        raise ValueError(f"config {key!r} must be None or a list of 1 to 3 integers >= 0 "
                         f"(gc.set_threshold's arguments), got {value!r}")


_CHECKS = {
    Config.TOPOLOGY_WORKERS: lambda k, v: _positive_int(k, v),
    Config.TOPOLOGY_ACKER_EXECUTORS: lambda k, v: _positive_int(k, v, allow_none=True, allow_zero=True),
    Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS: lambda k, v: _positive_number(k, v),
    Config.TOPOLOGY_MAX_SPOUT_PENDING: lambda k, v: _positive_int(k, v, allow_none=True),
    Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: lambda k, v: _positive_number(k, v, allow_none=True),
    Config.TOPOLOGY_EXECUTOR_RECEIVE_BUFFER_SIZE: lambda k, v: _positive_int(k, v),
    Config.TOPOLOGY_EXECUTOR_SEND_BUFFER_SIZE: lambda k, v: _positive_int(k, v),
    Config.TOPOLOGY_TRANSFER_BUFFER_SIZE: lambda k, v: _positive_int(k, v),
    Config.TOPOLOGY_RECEIVER_BUFFER_SIZE: lambda k, v: _positive_int(k, v),
    Config.TOPOLOGY_PRODUCER_BATCH_SIZE: lambda k, v: _positive_int(k, v),
    Config.TOPOLOGY_SPOUT_MAX_BATCH_SIZE: lambda k, v: _positive_int(k, v),
    Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION: _boolean,
    Config.TOPOLOGY_MESSAGING_SECURE: _boolean,
    "topology.spout.stall.secs": lambda k, v: _positive_number(k, v),
    "topology.state.checkpoint.interval.ms": lambda k, v: _positive_number(k, v),
    "topology.worker.cooperative": _boolean,
    "topology.worker.gc.thresholds": _gc_thresholds,
    "topology.worker.gil.switch.interval.secs": lambda k, v: _positive_number(k, v),
    "topology.component.blocking": _boolean,
    "supervisor.worker.timeout.secs": lambda k, v: _positive_number(k, v),
    "supervisor.worker.start.timeout.secs": lambda k, v: _positive_number(k, v),
    "worker.heartbeat.frequency.secs": lambda k, v: _positive_number(k, v),
    "topology.subprocess.timeout.secs": lambda k, v: _positive_number(k, v),
    "topology.shellbolt.max.pending": lambda k, v: _positive_int(k, v),
    "topology.spark.max.restarts": lambda k, v: _positive_int(k, v, allow_zero=True),
    "topology.spark.restart.backoff.secs": lambda k, v: _positive_number(k, v),
    "topology.spark.restart.reset.secs": lambda k, v: _positive_number(k, v),
}


def merged_config(*layers: dict[str, Any] | None) -> dict[str, Any]:
    """DEFAULTS overridden by each layer in turn; known keys are type-checked.

    Raises ``ValueError`` naming the offending key.
    """
    conf: dict[str, Any] = dict(DEFAULTS)
    for layer in layers:
        if layer:
            conf.update(layer)
    for key, check in _CHECKS.items():
        check(key, conf[key])
    if conf[Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION] and not conf[Config.TOPOLOGY_MESSAGING_SECURE]:
        raise ValueError(
            f"config {Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION!r} is true but "
            f"{Config.TOPOLOGY_MESSAGING_SECURE!r} is false: pickled values are only accepted over "
            "authenticated links (unpickling runs code); turn one of them around"
        )
    return conf
