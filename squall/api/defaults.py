"""The configuration registry: Squall's equivalent of Storm's ``defaults.yaml`` together with
the validator annotations of Storm's ``Config.java``.

Every key Squall reads is defined here once, as a :class:`ConfigKey`: its name, default,
validator and one-line doc (plus, where the default needs a reason, a longer note, and whether
the key is Storm's own or Squall's). :data:`KEYS` maps names to them; :data:`DEFAULTS` and the
``Config.TOPOLOGY_*`` constants (:mod:`squall.api.config`) are derived from it, and ``squall plan``
and the UI show the docs (:func:`squall.api.config.config_table`).

A topology's ``Config`` overrides these defaults, and a component's
``get_component_configuration()`` / ``add_configuration`` override the topology's for that
component. Where Squall's default differs from Storm 2.x, the note says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    """A validator: ``check(key, value)`` returns when ``value`` is valid and otherwise raises
    ``ValueError("config 'KEY' must be WHAT, got VALUE")``; ``what`` also tells a reader what
    the key accepts."""

    what: str
    accepts: Callable[[Any], bool]

    def __call__(self, key: str, value: Any) -> None:
        if not self.accepts(value):
            raise ValueError(f"config {key!r} must be {self.what}, got {value!r}")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def integer(at_least: int) -> Check:
    """An int (not a bool) >= ``at_least``."""
    return Check(f"an integer >= {at_least}", lambda v: _is_int(v) and v >= at_least)


def optional(check: Check) -> Check:
    """None, or what ``check`` accepts."""
    return Check(f"None or {check.what}", lambda v: v is None or check.accepts(v))


#: An int or float (not a bool) > 0.
POSITIVE = Check("a number > 0", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0)
BOOLEAN = Check("true or false", lambda v: isinstance(v, bool))
NON_EMPTY_STRING = Check("a non-empty string", lambda v: isinstance(v, str) and v != "")
#: A window's milliseconds (lag, durations): as ``squall.api.windowing.config`` reads them.
MILLIS = integer(0)


@dataclass(frozen=True)
class ConfigKey:
    """One configuration key. ``doc`` is one line (what the key does, shown by ``squall plan``
    and the UI); ``note`` is the longer story (why the default). ``storm``: the key is Storm's
    own (same name and meaning), else Squall's. ``component_only``: a key set per component
    only (a windowed bolt's window), with no topology-wide default, so it is not in
    :data:`DEFAULTS`. ``constant_name``: the ``Config`` attribute, when Storm's differs from
    the name in capitals with underscores.

    Raises ``ValueError`` when the default does not pass ``check`` or the doc is not one line.
    """

    name: str
    default: Any
    check: Check
    doc: str
    note: str = ""
    storm: bool = True
    component_only: bool = False
    constant_name: str | None = None

    def __post_init__(self) -> None:
        if not self.doc or "\n" in self.doc:
            raise ValueError(f"config key {self.name!r}: the doc must be one line")
        self.check(self.name, self.default)

    @property
    def constant(self) -> str:
        """The ``Config`` attribute holding the name (Storm's: ``TOPOLOGY_WORKERS``)."""
        return self.constant_name or self.name.upper().replace(".", "_")


def _registry(*keys: ConfigKey) -> dict[str, ConfigKey]:
    registry = {key.name: key for key in keys}
    if len(registry) != len(keys):
        raise ValueError("a config key is defined twice")
    return registry


_TUNING_NOTE = ("Small queues keep the working set in the CPU's caches; a full queue is backpressure. "
                "The queue's elements are batches; the batch that fills it may overshoot by its own size.")

#: Every key Squall reads, by name, in the order ``squall plan`` shows them.
KEYS: dict[str, ConfigKey] = _registry(
    ConfigKey("topology.workers", 1, integer(1),
              "Worker slots (Storm: worker processes) the topology's executors spread over."),
    ConfigKey("topology.acker.executors", None, optional(integer(0)),
              "Acker executors; None: one per worker (as Storm); 0 turns acking off."),
    ConfigKey("topology.acker.tasks", None, optional(integer(1)),
              "Acker tasks, fixed once submitted; None: one per executor, or autoscale.max.workers if autoscaling.",
              note="Rebalances keep the tasks (a tuple tree's acker is its root id modulo them) and spread them "
                   "over the acker executors, which follow the workers when topology.acker.executors is None.",
              storm=False),
    ConfigKey("topology.message.timeout.secs", 30, POSITIVE,
              "A spout tuple whose tree is not complete within this many seconds is failed.",
              note="It expires between T and 2T, as the pending map is rotated every T seconds."),
    ConfigKey("topology.max.spout.pending", None, optional(integer(1)),
              "Per spout task: next_tuple is not called while this many trees are pending; None: no limit.",
              note="A stateful spout's records are untracked: for it, this caps its records in flight (see "
                   "topology.state.spout.inflight.ms)."),
    ConfigKey("topology.tick.tuple.freq.secs", None, optional(POSITIVE),
              "Seconds between tick tuples sent to a bolt (usually set per component); None: no ticks."),
    ConfigKey("topology.executor.receive.buffer.size", 1024, integer(1),
              "Tuples an executor's incoming queue holds before it pushes back.",
              note="The seeds' value; Storm 2 uses 32768. Tuples from other workers stand on their credit "
                   "instead (topology.receiver.credit.size). " + _TUNING_NOTE),
    ConfigKey("topology.executor.send.buffer.size", 1024, integer(1),
              "Most tuples an executor gathers for one destination before handing them on.",
              note="The outgoing side of the executor; the batch is the smaller of this and "
                   "topology.producer.batch.size."),
    ConfigKey("topology.transfer.buffer.size", 1024, integer(1),
              "Tuples a worker's transfer queue (bound for other workers) holds."),
    ConfigKey("topology.receiver.buffer.size", 8, integer(2),
              "Batches a worker's receive path buffers per link (ZeroMQ, multi-process workers).",
              note="At least 2: through a receive buffer of 1, ZeroMQ 4.3 delivers nothing on a link "
                   "secured with CURVE (the default), so no tuple would cross workers."),
    ConfigKey("topology.receiver.credit.size", 8192, integer(1),
              "Credit: tuples each other worker may have on the way to, or waiting in, one executor's queue.",
              note="Credit-based flow control between workers. An executor's queue holds at most "
                   "topology.executor.receive.buffer.size tuples of its own worker plus this many of each "
                   "other worker. Credit comes back as the executor takes the tuples, once per round of the "
                   "receiving worker: a window smaller than what a link carries in a few rounds stalls the "
                   "sender (with 8192, benchmarks/scaling.py's two workers reach about 90% of their "
                   "throughput without any limit). Batches to other workers are never larger.",
              storm=False),
    ConfigKey("topology.producer.batch.size", 100, integer(1),
              "Tuples an executor gathers per destination before handing a batch on.",
              note="Storm 2 uses 1 and a flush timer; in CPython per-batch costs dominate, so batches are "
                   "larger and an executor also flushes whenever it has drained its input (no trickle is "
                   "held back)."),
    ConfigKey("topology.batch.flush.interval.millis", 1, POSITIVE,
              "The longest a batch waits before it is handed on (an executor's turn, a worker's round).",
              note="Storm's flush timer. An executor's turn, and a worker's round between its sends to the "
                   "other workers, end after this long, between incoming batches (one batch's execution is not "
                   "cut): a slow bolt hands on what it emitted, and lets the other executors of its thread "
                   "and the worker's traffic run, at least this often. An executor that drained its input "
                   "hands its batches on at once anyway."),
    ConfigKey("topology.spout.max.batch.size", 100, integer(1),
              "next_tuple calls a spout executor makes before it flushes and looks at its acks."),
    ConfigKey("topology.spout.stall.secs", 5, POSITIVE,
              "A next_tuple running this long is recorded as an error naming the spout (once per stall).",
              note="next_tuple must never block.", storm=False),
    ConfigKey("topology.worker.cooperative", True, BOOLEAN,
              "One thread runs a worker's executors, batch at a time; false: a thread per executor (Storm).",
              note="Executors of blocking components (topology.component.blocking) get a thread of their own "
                   "either way.", storm=False),
    ConfigKey("topology.worker.handoff.secs", 0.2, POSITIVE,
              "An executor call this long without progress moves the cooperative thread's other executors.",
              note="As Go's scheduler does for a goroutine blocked in a system call: the stuck executor keeps its "
                   "thread alone, so one component that blocks never stalls the rest of its worker.", storm=False),
    ConfigKey("topology.disable.loadaware.messaging", False, BOOLEAN,
              "True: shuffle and local-or-shuffle groupings ignore the targets' load (plain round-robin).",
              note="By default, as in Storm 2, targets with fuller incoming queues get fewer tuples, so a slow "
                   "task does not hold its stream back (squall.runtime.grouping.LoadAwareShuffleGrouper)."),
    ConfigKey("topology.component.cpu.pcore.percent", 10.0, POSITIVE,
              "An executor's CPU in percent of a core (set_cpu_load); any set: executors placed by load.",
              note="Storm's resource-aware placement, in small: the executors, largest load first, each go to the "
                   "worker with the least load so far (squall.runtime.assignment). The autoscaler sets it from what "
                   "it measured when it rebalances."),
    ConfigKey("topology.component.blocking", False, BOOLEAN,
              "Set per component (set_blocking or a `blocking` attribute): its executors get their own thread.",
              storm=False),
    ConfigKey("topology.worker.gc.thresholds", [100000, 10, 10],
              optional(Check("a list of 1 to 3 integers >= 0 (gc.set_threshold's arguments)",
                             lambda v: isinstance(v, (list, tuple)) and 1 <= len(v) <= 3
                             and all(_is_int(t) and t >= 0 for t in v))),
              "The cyclic garbage collector's thresholds while a worker runs; None: Python's (700, 10, 10).",
              note="Every tuple is a container: at 700 the collector takes about a fifth of a busy worker's "
                   "time, at 10,000 about 8% of a worker exchanging tuples with another, at 100,000 about 1% "
                   "(see squall/utils/gc_tuning.py).", storm=False),
    ConfigKey("topology.worker.gil.switch.interval.secs", 0.0005, POSITIVE,
              "A worker process's sys.setswitchinterval (Python's default: 0.005).",
              note="A thread waiting for the GIL (the receive thread with a payload, the transfer thread with "
                   "a batch) waits up to this long for a busy executor thread to hand it over: at 5 ms, two "
                   "word count workers ran at 0.44M words/s, at 0.5 ms at 0.95M (benchmarks/wordcount.py "
                   "--processes). Workers in the submitting process (in-process mode) leave it alone.",
              storm=False),
    ConfigKey("topology.autoscale.enabled", False, BOOLEAN,
              "Let the topology size itself: workers and busy components' executors, by rebalance.",
              note="squall/cluster/autoscaler.py says how it decides (busy time, queue fill, spouts' lag) and "
                   "why it never flaps; each decision is logged in the UI and `squall monitor`. A `squall "
                   "rebalance` by hand pauses it for the cool-down.", storm=False),
    ConfigKey("topology.autoscale.min.workers", 1, integer(1), "The fewest workers the autoscaler goes down to.",
              storm=False),
    ConfigKey("topology.autoscale.max.workers", 4, integer(1),
              "The most workers the autoscaler goes up to (on Spark, also the task slots there are).", storm=False),
    ConfigKey("topology.autoscale.target.utilization", 0.7, POSITIVE,
              "The share of a worker's time the autoscaler sizes the topology for.", storm=False),
    ConfigKey("topology.autoscale.scale.up.utilization", 0.85, POSITIVE,
              "Busier than this per worker for the whole window (or a spout's lag growing): scale up.",
              storm=False),
    ConfigKey("topology.autoscale.scale.down.utilization", 0.35, POSITIVE,
              "Idler than this per worker for the whole window: scale down.", storm=False),
    ConfigKey("topology.autoscale.window.secs", 15, POSITIVE,
              "How long a signal must hold before the autoscaler acts on it.", storm=False),
    ConfigKey("topology.autoscale.cooldown.secs", 60, POSITIVE,
              "The least time between two rebalances (the autoscaler's or a user's) before it acts again.",
              storm=False),
    ConfigKey("topology.autoscale.interval.secs", 1, POSITIVE, "How often the autoscaler looks at the topology.",
              storm=False),
    ConfigKey("topology.debug", False, BOOLEAN,
              "Log every emit (component:task, stream, target tasks, values) at INFO on logger squall.executor.",
              note="As Storm's 'Emitting:' lines. Off, nothing is added to the emit path."),
    ConfigKey("topology.kryo.register", [],
              Check("a list of (class, serializer) pairs (Config.register_serialization)",
                    lambda v: isinstance(v, (list, tuple)) and all(
                        isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], type) for p in v)),
              "(class, serializer) pairs for values crossing workers; see Config.register_serialization."),
    ConfigKey("topology.fall.back.on.java.serialization", False, BOOLEAN,
              "Values neither msgpack's own nor registered travel pickled (only over secure links); off: refused.",
              note="Off, emitting one to another worker is an EmitError naming the component, stream and type. "
                   "Storm 2's default: unpickling runs code."),
    ConfigKey("topology.messaging.secure", True, BOOLEAN,
              "Authenticate and encrypt every link of the topology (ZeroMQ CURVE, a key pair per topology).",
              note="Master <-> workers, worker <-> worker data and backpressure, CLI <-> control socket: a peer "
                   "without the keys is refused before any byte of it is decoded. Off only for measuring what "
                   "it costs, on a machine nobody else can reach.", storm=False),
    ConfigKey("topology.state.checkpoint.interval.ms", 1000, POSITIVE,
              "How often a topology with stateful components takes a checkpoint; below the message timeout.",
              constant_name="TOPOLOGY_STATE_CHECKPOINT_INTERVAL"),
    ConfigKey("topology.state.spout.inflight.ms", 250, POSITIVE,
              "A stateful spout task keeps about this many ms of its measured downstream throughput in flight.",
              note="Its records are untracked; markers it sends behind them measure what the bolts have "
                   "processed, and next_tuple waits while more is in flight. A checkpoint barrier then waits "
                   "behind at most that much data, however large the backlog.", storm=False),
    ConfigKey("topology.state.key.groups", 128,
              Check("None or an integer from 1 to 32768", lambda v: v is None or _is_int(v) and 1 <= v <= 32768),
              "Key groups of each stateful bolt: its most tasks; recorded when its state location is first claimed.",
              note="A key's state stays in its group, so a topology submitted again with other task counts restores "
                   "each group into its new task (squall/api/state/key_groups.py). A location keeps the number "
                   "it was claimed with: submitting another is refused. None: no key groups (a key goes to its "
                   "hash modulo the task count, as in Storm, and task counts cannot change): what a location "
                   "claimed before key groups, or a provider without them (redis), keeps.", storm=False),
    ConfigKey("topology.state.allow.dropped", False, BOOLEAN,
              "Delete the state of stateful components the topology no longer has, instead of refusing it.",
              note="squall run/submit --allow-dropped-state sets it (Flink's --allowNonRestoredState): for an upgrade "
                   "that removes a stateful component, or renames one (its state is not moved to the new id).",
              storm=False),
    ConfigKey("topology.state.provider", None, optional(NON_EMPTY_STRING),
              "Where stateful components keep their state: memory, sqlite, redis or module:Class.",
              note="Storm's class names for memory and Redis work too. None: memory, except that `squall run` "
                   "and `squall submit` choose sqlite under --checkpoint-dir."),
    ConfigKey("topology.state.provider.config", None,
              Check("None, a dict or a JSON string", lambda v: v is None or isinstance(v, (dict, str))),
              "The state provider's settings: a dict, or a JSON string as in Storm (see squall/api/state/)."),
    ConfigKey("supervisor.slots.ports", [6700, 6701, 6702, 6703],
              Check("a list of port numbers (1 to 65535)",
                    lambda v: isinstance(v, (list, tuple)) and all(_is_int(p) and 1 <= p <= 65535 for p in v)),
              "Ports the local supervisor hands to workers, one per worker."),
    ConfigKey("supervisor.worker.timeout.secs", 30, POSITIVE,
              "A worker process silent (no heartbeat) this long is killed and restarted."),
    ConfigKey("supervisor.worker.start.timeout.secs", 120, POSITIVE,
              "A worker not ready (open/prepare done) this long after its start is killed.",
              note="When that happens at submission, or 3 times in a row later, it is not restarted."),
    ConfigKey("topology.logs.retained", 10, integer(1),
              "Runs of a topology whose logs are kept under SQUALL_HOME/logs/NAME (older ones are removed).",
              note="A run whose logs stayed empty leaves nothing there.", storm=False),
    ConfigKey("worker.heartbeat.frequency.secs", 1, POSITIVE,
              "How often a worker process reports its figures and errors to the master."),
    ConfigKey("topology.subprocess.timeout.secs", 30, POSITIVE,
              "A multilang subprocess silent this long while it is waited on is killed and restarted.",
              note="Storm falls back to supervisor.worker.timeout.secs when this is unset; both are 30 s."),
    ConfigKey("topology.shellbolt.max.pending", 100, integer(1),
              "Input tuples a ShellBolt lets wait for its subprocess's stdin before execute waits."),
    ConfigKey("topology.spark.max.restarts", 10, integer(0),
              "On Spark: times in a row the driver resubmits the job after a worker died; then FAILED.",
              storm=False),
    ConfigKey("topology.spark.restart.backoff.secs", 1.0, POSITIVE,
              "On Spark: wait before the first resubmission, doubled for each further one (at most 30 s).",
              storm=False),
    ConfigKey("topology.spark.restart.reset.secs", 60, POSITIVE,
              "On Spark: a job whose workers have all been up this long resets the count of restarts.",
              storm=False),
    ConfigKey("topology.metrics.consumer.register", None,
              optional(Check("a list of {'class': ..., 'parallelism.hint': ..., 'argument': ...} dicts",
                             lambda v: isinstance(v, (list, tuple)) and all(isinstance(e, dict) for e in v))),
              "Metrics consumers every task's data points go to (squall/api/metrics2/consumer.py).",
              note="The classes and hints are checked when the topology is submitted."),
    ConfigKey("topology.builtin.metrics.bucket.size.secs", 60, POSITIVE,
              "How often every task's metrics are handed to the metrics consumers."),
    ConfigKey("storm.local.hostname", None, optional(NON_EMPTY_STRING),
              "The address this process's control socket listens on and is found at; None: 127.0.0.1.",
              note="Set it (e.g. to spark.driver.host) with storm.zookeeper.servers, so that squall kill and the "
                   "other commands reach the topology from other hosts."),
    ConfigKey("storm.zookeeper.servers", None,
              optional(Check("a list of host names (HOST or HOST:PORT)",
                             lambda v: isinstance(v, (list, tuple)) and len(v) > 0
                             and all(isinstance(h, str) and h for h in v))),
              "ZooKeeper servers holding the cluster's topologies; None: the local registry of this machine.",
              note="See squall/cluster/registry/zookeeper.py: entries, assignments, heartbeats and errors, under "
                   "digest ACLs."),
    ConfigKey("storm.zookeeper.port", 2181, Check("a port number (1 to 65535)",
                                                  lambda v: _is_int(v) and 1 <= v <= 65535),
              "The port of the ZooKeeper servers given without one."),
    ConfigKey("storm.zookeeper.root", "/squall",
              Check("a ZooKeeper path ('/' then a name)", lambda v: isinstance(v, str) and len(v) > 1
                    and v.startswith("/") and not v.endswith("/")),
              "The ZooKeeper node Squall's cluster state is kept under.",
              note="Storm's default is /storm; Squall's keeps the two apart on one ensemble."),
    ConfigKey("storm.zookeeper.auth.file", None, optional(NON_EMPTY_STRING),
              "A file of mode 0600 holding 'user:password', the digest ACL guarding the ZooKeeper nodes.",
              storm=False),
    ConfigKey("storm.zookeeper.session.timeout", 20000, integer(1000),
              "Milliseconds after which a silent process's ZooKeeper session (and registration) ends."),
    ConfigKey("storm.zookeeper.connection.timeout", 15000, integer(1),
              "Milliseconds a command waits to connect to ZooKeeper before it fails."),
    ConfigKey("ui.host", "127.0.0.1", NON_EMPTY_STRING,
              "Address the UI and REST API of `squall run` / `squall submit` listen on; 127.0.0.1: this machine.",
              note="Storm binds 0.0.0.0; Squall listens on this machine only unless told otherwise."),
    ConfigKey("ui.port", 8080, Check("a port number (0 to 65535; 0: any free one)",
                                     lambda v: _is_int(v) and 0 <= v <= 65535),
              "Port of the UI and REST API (Storm UI's); when it is taken, a free one."),
    # A windowed bolt's window (squall.api.windowing.config writes and reads them; it also checks
    # how they combine): Storm's keys, set per component.
    ConfigKey("topology.bolts.window.length.count", None, optional(integer(1)),
              "A windowed bolt's window length in tuples (set by with_window).", component_only=True),
    ConfigKey("topology.bolts.window.length.duration.ms", None, optional(MILLIS),
              "A windowed bolt's window length in milliseconds (set by with_window).", component_only=True),
    ConfigKey("topology.bolts.window.sliding.interval.count", None, optional(integer(1)),
              "A windowed bolt's sliding interval in tuples; None (and no duration): 1.", component_only=True,
              constant_name="TOPOLOGY_BOLTS_SLIDING_INTERVAL_COUNT"),
    ConfigKey("topology.bolts.window.sliding.interval.duration.ms", None, optional(MILLIS),
              "A windowed bolt's sliding interval in milliseconds.", component_only=True,
              constant_name="TOPOLOGY_BOLTS_SLIDING_INTERVAL_DURATION_MS"),
    ConfigKey("topology.bolts.tuple.timestamp.field.name", None, optional(NON_EMPTY_STRING),
              "A windowed bolt's event-time field; None: processing time.", component_only=True),
    ConfigKey("topology.bolts.tuple.timestamp.max.lag.ms", None, optional(MILLIS),
              "How far out of order event timestamps may be, in milliseconds; None: 0.", component_only=True),
    ConfigKey("topology.bolts.watermark.event.interval.ms", None, optional(MILLIS),
              "How often a windowed bolt's watermark moves, in milliseconds; None: 1000.", component_only=True),
    ConfigKey("topology.bolts.late.tuple.stream", None, optional(NON_EMPTY_STRING),
              "The stream a windowed bolt emits late tuples on (event time only).", component_only=True),
)

#: The topology-wide defaults (Storm's ``defaults.yaml``): every key but the per-component ones.
DEFAULTS: dict[str, Any] = {name: key.default for name, key in KEYS.items() if not key.component_only}

#: Storm keys Squall does not read, and why: the warning for an unknown key says so.
STORM_KEYS_NOT_USED: dict[str, str] = {
    "storm.zookeeper.auth.payload": "Squall reads ZooKeeper's credentials from storm.zookeeper.auth.file "
                                    "(mode 0600), never from a config",
    "nimbus.task.timeout.secs": "the master restarts a worker silent for supervisor.worker.timeout.secs",
    "topology.stats.sample.rate": "Squall measures latencies on the first tuple of every batch "
                                  "(squall/runtime/stats.py)",
}
