"""The messages of Squall's control protocols, as typed schemas checked on arrival.

Two protocols, one module (msgspec Structs, encoded as msgpack):

* **master** (:mod:`squall.cluster.master` <-> :mod:`squall.cluster.worker_process`): a worker
  sends :data:`WorkerMessage`\\ s (``hello``, ``bound``, ``ready``, ``setup_error``,
  ``heartbeat``, ``stopped``, ``stacks``), the master answers with :data:`MasterMessage`\\ s
  (``bootstrap``, ``peers``, ``activate``, ``deactivate``, ``kill``, ``sample``,
  ``dump_stacks``); the ``type`` field tags them;
* **control** (``squall list/kill/activate/deactivate/stacks`` -> :mod:`squall.ops.control`):
  :data:`ControlRequest` (tagged by ``op``) and :class:`ControlReply`.

Every field has a type and, where it has one, a range; :func:`decode` raises
:class:`MalformedMessage` for anything else (bad msgpack, unknown tag, wrong type, out of range,
missing field), which receivers log with the peer and drop. Tuples themselves travel in
batches (:mod:`squall.runtime.serialization`), not through these schemas.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import msgspec

from squall.api.metrics2.metrics import MAX_FIGURE, MAX_METRICS_PER_TASK, MAX_NAME_LENGTH
from squall.runtime.info import TopologyInfo
from squall.runtime.stats import MAX_COMPONENT_METRICS

#: the longest error text or traceback a message carries (senders cut theirs to it)
MAX_TEXT = 1 << 20

NonNegative = Annotated[int, msgspec.Meta(ge=0)]
Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]
Seconds = Annotated[float, msgspec.Meta(ge=0, le=1e12)]  # finite
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
Finite = Annotated[float, msgspec.Meta(ge=-MAX_FIGURE, le=MAX_FIGURE)]
Figure = Annotated[int, msgspec.Meta(ge=-(1 << 63), le=(1 << 63) - 1)] | Finite
MetricName = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME_LENGTH)]
#: the most tasks one executor reports user metrics of
MAX_TASKS_PER_EXECUTOR = 1 << 16


class MalformedMessage(ValueError):
    """A message that does not fit its schema; the text says what is wrong with it."""


# -- master protocol: worker -> master ----------------------------------------------------------


class CounterFigures(msgspec.Struct, frozen=True, tag="counter", tag_field="type"):
    """A user counter's snapshot (see :mod:`squall.api.metrics2.metrics`)."""

    count: Figure


class GaugeFigures(msgspec.Struct, frozen=True, tag="gauge", tag_field="type"):
    value: Figure


class MeterFigures(msgspec.Struct, frozen=True, tag="meter", tag_field="type"):
    count: Figure
    mean_rate: Finite
    m1_rate: Finite
    m5_rate: Finite
    m15_rate: Finite


class HistogramFigures(msgspec.Struct, frozen=True, tag="histogram", tag_field="type"):
    count: NonNegative
    sum: Finite
    min: Finite
    max: Finite
    mean: Finite
    stddev: Finite
    p50: Finite
    p75: Finite
    p95: Finite
    p98: Finite
    p99: Finite
    p999: Finite


class TimerFigures(HistogramFigures, frozen=True, tag="timer", tag_field="type"):
    """A histogram of seconds, with a meter's rates."""

    mean_rate: Finite
    m1_rate: Finite
    m5_rate: Finite
    m15_rate: Finite


UserMetricFigures = CounterFigures | GaugeFigures | MeterFigures | HistogramFigures | TimerFigures
#: one task's user metrics by name
TaskUserMetrics = Annotated[dict[MetricName, UserMetricFigures], msgspec.Meta(max_length=MAX_METRICS_PER_TASK)]


class ExecutorFigures(msgspec.Struct, frozen=True):
    """One executor's figures (see :mod:`squall.runtime.stats`)."""

    emitted: NonNegative
    transferred: NonNegative
    acked: NonNegative
    failed: NonNegative
    executed: NonNegative
    execute_secs: Seconds
    process_secs: Seconds
    process_count: NonNegative
    complete_secs: Seconds
    complete_count: NonNegative
    capacity: Seconds
    #: stream -> (emitted, transferred) on it
    streams: Annotated[dict[Name, tuple[NonNegative, NonNegative]], msgspec.Meta(max_length=10000)] = {}
    #: the tasks' components' own counters (their ``metrics`` dicts, e.g. a connector's), summed
    metrics: Annotated[dict[Text, int | float], msgspec.Meta(max_length=MAX_COMPONENT_METRICS)] = {}
    #: task -> name -> snapshot: the user metrics of the tasks that registered some
    user_metrics: Annotated[dict[NonNegative, TaskUserMetrics], msgspec.Meta(max_length=MAX_TASKS_PER_EXECUTOR)] = {}


class ExecutorReport(msgspec.Struct, frozen=True):
    component: Name
    tasks: list[NonNegative]
    stats: ExecutorFigures


class ErrorReport(msgspec.Struct, frozen=True):
    component: Name
    task: int
    error: Text
    time: float  # the last occurrence's
    count: Annotated[int, msgspec.Meta(ge=1)] = 1  # identical errors in a row, reported once


class Hello(msgspec.Struct, frozen=True, tag="hello", tag_field="type"):
    pid: Annotated[int, msgspec.Meta(ge=1)]


class Bound(msgspec.Struct, frozen=True, tag="bound", tag_field="type"):
    host: Name
    port: Port


class Ready(msgspec.Struct, frozen=True, tag="ready", tag_field="type"):
    pass


class SetupFailed(msgspec.Struct, frozen=True, tag="setup_error", tag_field="type"):
    error: Text  # one line: what failed and why
    trace: Text = ""  # the traceback, for --verbose and the topology's errors


class TupleSample(msgspec.Struct, frozen=True, array_like=True):
    """A tuple a component emitted, sampled (squall.runtime.sampling): ``values`` as shown."""

    time: float
    component: Name
    stream: Name
    task: int
    values: Any


class Heartbeat(msgspec.Struct, frozen=True, tag="heartbeat", tag_field="type"):
    """Every ``worker.heartbeat.frequency.secs``: figures and the errors since the last one, and
    the tuples sampled since (while a sampling runs)."""

    executors: list[ExecutorReport]
    errors: list[ErrorReport]
    samples: Annotated[list[TupleSample], msgspec.Meta(max_length=10000)] = []


class Stacks(msgspec.Struct, frozen=True, tag="stacks", tag_field="type"):
    """The answer to :class:`DumpStacks`: every thread's Python stack, as text."""

    text: Text


class Stopped(Heartbeat, frozen=True, tag="stopped", tag_field="type"):
    """The last message of a worker that was told to stop: its final figures and errors."""


WorkerMessage = Hello | Bound | Ready | SetupFailed | Heartbeat | Stopped | Stacks

# -- master protocol: master -> worker ----------------------------------------------------------


class Bootstrap(msgspec.Struct, frozen=True, tag="bootstrap", tag_field="type"):
    """The pickled (name, topology, config, assignment, active, the slot's restarts): sent only
    over an authenticated link, to a worker of this topology."""

    payload: bytes


class Peers(msgspec.Struct, frozen=True, tag="peers", tag_field="type"):
    """Every worker's (host, worker port, run), by worker index: a worker's run (incarnation)
    is told as soon as it binds, so the others drop what its dead run left before anything of
    the new run reaches them."""

    peers: dict[NonNegative, tuple[Name, Port, NonNegative]]


class Activate(msgspec.Struct, frozen=True, tag="activate", tag_field="type"):
    pass


class Deactivate(msgspec.Struct, frozen=True, tag="deactivate", tag_field="type"):
    pass


class Kill(msgspec.Struct, frozen=True, tag="kill", tag_field="type"):
    pass


class Sample(msgspec.Struct, frozen=True, tag="sample", tag_field="type"):
    """Sample ``percent`` of ``component``'s emits for ``secs`` (percent 0: stop)."""

    component: Name
    percent: Annotated[float, msgspec.Meta(ge=0, le=100)]
    secs: Annotated[float, msgspec.Meta(ge=0, le=3600)]


class DumpStacks(msgspec.Struct, frozen=True, tag="dump_stacks", tag_field="type"):
    pass


MasterMessage = Bootstrap | Peers | Activate | Deactivate | Kill | Sample | DumpStacks

# -- control ------------------------------------------------------------------------------------


class InfoRequest(msgspec.Struct, frozen=True, tag="info", tag_field="op"):
    pass


class ActivateRequest(msgspec.Struct, frozen=True, tag="activate", tag_field="op"):
    pass


class DeactivateRequest(msgspec.Struct, frozen=True, tag="deactivate", tag_field="op"):
    pass


class KillRequest(msgspec.Struct, frozen=True, tag="kill", tag_field="op"):
    """``wait_secs``: between deactivating the spouts and stopping; None: the message timeout."""

    wait_secs: Seconds | None = None


class RebalanceRequest(msgspec.Struct, frozen=True, tag="rebalance", tag_field="op"):
    """Storm's rebalance options: ``wait_secs`` as a kill's; ``num_workers``; ``executors``,
    component -> executors. None: unchanged."""

    wait_secs: Seconds | None = None
    num_workers: Annotated[int, msgspec.Meta(ge=1, le=1 << 16)] | None = None
    executors: Annotated[dict[Name, Annotated[int, msgspec.Meta(ge=1, le=1 << 20)]],
                         msgspec.Meta(max_length=10000)] | None = None


class StacksRequest(msgspec.Struct, frozen=True, tag="stacks", tag_field="op"):
    """Every thread's Python stack in the worker on port ``worker`` (None: in every worker)."""

    worker: Port | None = None


ControlRequest = InfoRequest | ActivateRequest | DeactivateRequest | KillRequest | RebalanceRequest | StacksRequest


class ControlReply(msgspec.Struct, frozen=True, omit_defaults=True):
    ok: bool
    error: str | None = None
    info: TopologyInfo | None = None
    message_timeout_secs: float | None = None
    stacks: dict[str, str] | None = None  # "host:port" -> the worker's stacks


# -- encoding -----------------------------------------------------------------------------------

_encoder = msgspec.msgpack.Encoder()
_decoders: dict[Any, msgspec.msgpack.Decoder] = {}
T = TypeVar("T")


def encode(message: msgspec.Struct) -> bytes:
    return _encoder.encode(message)


def decode(data: bytes, schema: type[T] | Any) -> T:
    """``data`` as a message of ``schema`` (a Struct or a union of them); raises
    :class:`MalformedMessage` saying what is wrong."""
    decoder = _decoders.get(schema)
    if decoder is None:
        decoder = _decoders[schema] = msgspec.msgpack.Decoder(schema)
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise MalformedMessage(f"{e} ({len(data)} bytes)") from None


def to_dict(struct: msgspec.Struct) -> dict[str, Any]:
    """A Struct's fields as a dict, nested Structs included (figures as :mod:`squall.runtime.stats`
    takes them; a tagged Struct's tag under its tag field, as ``"type"`` of user metrics)."""
    return msgspec.to_builtins(struct)
