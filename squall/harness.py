"""One component under test, without a topology: :class:`BoltHarness` and :class:`SpoutHarness`
(exported by :mod:`squall.testing`).

A harness calls the component the way its executor would — ``prepare``/``open`` with the merged
configuration and a real :class:`~squall.api.context.TopologyContext`, ``init_state`` for a
stateful component, ``execute`` then ``finish_batch``, tick tuples, checkpoints and rollbacks — on
the test's thread, and records what the component did through its collector. Nothing runs in the
background: after a call returns, everything the component did in that call is recorded. (A
component with threads of its own, such as ``ShellBolt``, emits from them: wait for what it
sends with :func:`squall.testing.wait_until`.)

The component is declared in a one-component topology that ``create_topology`` validates, so
a harness raises what submitting it would: an :class:`~squall.api.errors.InvalidTopologyError`
naming the component for a bad declaration or window configuration. An emit on an undeclared
stream, or with the wrong number of values, raises :class:`~squall.api.errors.EmitError` as it
would in a topology. A windowed bolt runs inside the executor bolt the builder wraps it in.

What a harness records (each list in call order; safe to read from the test's thread while the
component's own threads add to it):

* ``emits``: every :class:`Emit` (stream, values, anchors, direct task, message id);
  :meth:`~_Harness.emitted` the values on one stream;
* ``acked``, ``failed``: the input tuples a bolt acked and failed (a basic bolt's input is acked
  when ``execute`` returns, failed when it raises); for a spout, the message ids the harness
  acked or failed;
* ``errors``: what the component reported with ``report_error``, and what escaped ``execute``
  (recorded and the input failed, as an executor does).
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from squall.api.bolt import BasicBolt, Bolt
from squall.api.checkpoint_spout import COMMIT, PREPARE, ROLLBACK
from squall.api.config import Config, checked_config
from squall.api.component import OutputFieldsDeclarer
from squall.api.context import TopologyContext
from squall.api.errors import FailedException, invalid_emit
from squall.api.spout import Spout
from squall.api.stateful import StatefulComponent
from squall.api.storm_topology import ComponentSpec, StormTopology
from squall.api.topology import TopologyBuilder
from squall.api.tuple import TICK_SOURCE, Fields, StreamSource, Tuple
from squall.api.windowing.bolt import BaseWindowedBolt
from squall.api.windowing.executor import windowed_executor
from squall.runtime.assignment import assign
from squall.runtime.state.task_states import TaskStates

__all__ = ["BoltHarness", "Emit", "SpoutHarness"]

TASK_ID = 1  # the component's task in its one-component topology


class Emit(NamedTuple):
    """One emit, as the component made it."""

    stream: str
    values: list[Any]
    anchors: tuple[Tuple, ...] = ()  # a bolt's: the inputs it anchored to
    task: int | None = None  # emit_direct's target task
    msg_id: Any = None  # a spout's: the message id (None: untracked)


class _Sources(Spout):
    """Declares the streams a bolt under test subscribes to; never runs."""

    def __init__(self, streams: Mapping[str, list[str]]) -> None:
        self._streams = dict(streams)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for stream, fields in self._streams.items():
            declarer.declare_stream(stream, fields)

    def next_tuple(self) -> None:
        pass


class _Harness:
    """What both harnesses share: the topology, the context, the records, the checkpoints."""

    def __init__(self, component_id: str, builder: TopologyBuilder, conf: Mapping[str, Any] | None,
                 name: str | None) -> None:
        # a name of its own unless the test gives one: the in-memory state provider keeps one
        # state per topology name, for the life of the process
        self._owns_name = name is None
        name = name or f"harness-{uuid.uuid4().hex[:12]}"
        topology = builder.create_topology()
        spec: ComponentSpec = topology.components[component_id]
        merged = checked_config(name, {Config.TOPOLOGY_WORKERS: 1, **(conf or {})},
                                {c.id: c.conf for c in topology.components.values()})
        self.topology: StormTopology = topology
        self.component_id = component_id
        self.conf: dict[str, Any] = {**merged, **spec.conf}
        self._declared = {stream: s.fields.to_list() for stream, s in spec.outputs.items()}
        self._assignment = assign(topology, merged)
        self._name = name
        self._lock = threading.Lock()
        self.emits: list[Emit] = []
        self.acked: list[Any] = []
        self.failed: list[Any] = []
        self.errors: list[BaseException] = []
        self._states: TaskStates | None = None

    def context(self) -> TopologyContext:
        """A new context for the component's task, as its executor makes one."""
        return TopologyContext(self.topology, self._assignment, self._task_id(), 0, self._name)

    def _task_id(self) -> int:
        return self._assignment.component_tasks[self.component_id][0]

    def emitted(self, stream: str = "default") -> list[list[Any]]:
        """The values emitted on ``stream``, in order."""
        with self._lock:
            return [e.values for e in self.emits if e.stream == stream]

    def _record(self, records: list[Any], item: Any) -> None:
        with self._lock:
            records.append(item)

    def _check_emit(self, stream: str, values: Any, direct_task: int | None) -> list[Any]:
        values = list(values)
        fields = self._declared.get(stream)
        if fields is None or len(values) != len(fields):
            raise invalid_emit(self.component_id, stream, values, self._declared)
        if direct_task is not None and not self.topology.components[self.component_id].outputs[stream].direct:
            raise invalid_emit(self.component_id, stream, values, self._declared, direct_task)
        return values

    def report_error(self, error: BaseException) -> None:
        self._record(self.errors, error)

    # -- state and checkpoints (a StatefulComponent) --------------------------------------

    def _init_state(self, component: Any) -> None:
        if isinstance(component, StatefulComponent):
            self._states = TaskStates(self.conf, self._name, self.component_id, {self._task_id(): component},
                                      {self._task_id(): 0}, lambda _task, error: self.report_error(error))
            self._states.init()

    @property
    def state(self) -> Any:
        """The component's :class:`~squall.api.state.KeyValueState` (a stateful component's)."""
        return self._require_states().states[self._task_id()]

    def checkpoint(self) -> int:
        """Take the next checkpoint: :meth:`prepare_checkpoint` then :meth:`commit_checkpoint`,
        as a checkpoint's two barriers do. Returns its txid; raises what a hook or the store
        raised (the error is recorded too)."""
        txid = self.prepare_checkpoint()
        self.commit_checkpoint(txid)
        return txid

    def prepare_checkpoint(self) -> int:
        """The PREPARE barrier of the next checkpoint: ``pre_prepare``, then the state written.
        Returns its txid (one past the last commit)."""
        states = self._require_states()
        txid = (states.provider.committed() or 0) + 1
        self._act(states, txid, PREPARE)
        return txid

    def commit_checkpoint(self, txid: int, barrier: bool = True) -> None:
        """Record ``txid`` (prepared) as committed, the commit point, as the checkpoint spout does
        once every task prepared it; then its COMMIT barrier: ``pre_commit`` and the state
        folded. ``barrier=False`` stops after the commit point: what a task sees when its worker
        dies before the COMMIT barrier reaches it."""
        states = self._require_states()
        states.provider.set_committed(txid)
        if barrier:
            self._act(states, txid, COMMIT)

    def _act(self, states: TaskStates, txid: int | None, action: str) -> None:
        if not states.act([self._task_id()], txid, action):
            raise self.errors[-1]

    def rollback(self) -> None:
        """Return to the last committed checkpoint: ``pre_rollback``, the state reloaded, then
        ``init_state`` with it, as after a failed checkpoint or a crash."""
        states = self._require_states()
        self._act(states, states.provider.committed(), ROLLBACK)

    def _require_states(self) -> TaskStates:
        if self._states is None:
            raise TypeError(f"component {self.component_id!r} is not stateful (a StatefulComponent)")
        return self._states

    def _close_states(self) -> None:
        if self._states is not None:
            if self._owns_name:
                self._states.provider.drop()
            self._states.close()
            self._states = None


class _BoltCollector:
    """A bolt's collector (:class:`~squall.api.collector.IOutputCollector`) that records."""

    def __init__(self, harness: BoltHarness) -> None:
        self._h = harness

    def emit(self, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = "default") -> list[int]:
        self._h._record(self._h.emits, Emit(stream, self._h._check_emit(stream, values, None), _anchors(anchors)))
        return []

    def emit_direct(self, task_id: int, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = "default") -> None:
        self._h._record(self._h.emits, Emit(stream, self._h._check_emit(stream, values, task_id), _anchors(anchors),
                                            task_id))

    def ack(self, tup: Tuple) -> None:
        self._h._record(self._h.acked, tup)

    def fail(self, tup: Tuple) -> None:
        self._h._record(self._h.failed, tup)

    def reset_timeout(self, tup: Tuple) -> None:
        pass  # the harness has no timeouts

    def report_error(self, error: BaseException) -> None:
        self._h.report_error(error)


class _BasicCollector:
    """A basic bolt's collector (:class:`~squall.api.collector.IBasicOutputCollector`): anchors
    every emit to the input being executed."""

    def __init__(self, collector: _BoltCollector) -> None:
        self._collector = collector
        self.input: Tuple | None = None

    def emit(self, values: Any, stream: str = "default") -> list[int]:
        return self._collector.emit(values, self.input, stream)

    def emit_direct(self, task_id: int, values: Any, stream: str = "default") -> None:
        self._collector.emit_direct(task_id, values, self.input, stream)

    def report_error(self, error: BaseException) -> None:
        self._collector.report_error(error)


def _anchors(anchors: Tuple | Iterable[Tuple] | None) -> tuple[Tuple, ...]:
    if anchors is None:
        return ()
    return (anchors,) if isinstance(anchors, Tuple) else tuple(anchors)


class BoltHarness(_Harness):
    """Runs one bolt — a ``Bolt``, ``BasicBolt``, stateful bolt, windowed bolt, ``ShellBolt`` or
    a pystorm-style bolt — without a topology.

    ``inputs``: the streams it subscribes to, ``{"component": ["field", ...]}`` for a component's
    default stream or ``{"component:stream": [...]}`` for another (default: one component
    ``"source"`` whose default stream has the field ``"value"``). ``conf``: the topology's
    configuration (merged over the defaults and checked, as at submission; the bolt's own
    ``get_component_configuration`` goes over it). ``prepare`` and ``init_state`` are called
    here; :meth:`close` (or leaving a ``with`` block) calls ``cleanup``.

    Usable as a context manager. Every call is made on the caller's thread.
    """

    def __init__(self, bolt: Bolt | BasicBolt | BaseWindowedBolt, inputs: Mapping[str, Iterable[str]] | None = None,
                 conf: Mapping[str, Any] | None = None, component_id: str = "bolt", name: str | None = None) -> None:
        streams: dict[str, dict[str, list[str]]] = {}
        for source, fields in (inputs or {"source": ["value"]}).items():
            component, _, stream = source.partition(":")
            streams.setdefault(component, {})[stream or "default"] = list(fields)
        builder = TopologyBuilder()
        for component, declared in streams.items():
            builder.set_spout(component, _Sources(declared))
        declarer = builder.set_bolt(component_id, bolt)
        for component, declared in streams.items():
            for stream in declared:
                declarer.shuffle_grouping(component, stream)
        super().__init__(component_id, builder, conf, name)
        self.sources = {(component, stream): StreamSource(component, stream, Fields(fields))
                        for component, declared in streams.items() for stream, fields in declared.items()}
        runs: Any = windowed_executor(bolt) if isinstance(bolt, BaseWindowedBolt) else bolt
        #: what runs: the bolt, or the bolt the builder wraps a windowed bolt in
        self.bolt = runs
        self._collector = _BoltCollector(self)
        self._basic = _BasicCollector(self._collector) if isinstance(runs, BasicBolt) else None
        self._edge_ids = itertools.count(1)
        if self._basic is not None:
            runs.prepare(dict(self.conf), self.context())
        else:
            runs.prepare(dict(self.conf), self.context(), self._collector)
        self._init_state(runs)

    def make_tuple(self, values: Iterable[Any], source: str | None = None, stream: str = "default",
                   source_task: int = 0, tracked: bool = True) -> Tuple:
        """A tuple from ``source`` (default: the only input component) on ``stream``, with
        ``values`` for the declared fields; ``tracked``: it belongs to a tree, as a reliable
        spout's tuple does. Raises ``ValueError`` naming the inputs for an undeclared one."""
        if source is None:
            components = {c for c, _ in self.sources}
            if len(components) != 1:
                raise ValueError(f"bolt {self.component_id!r} has several inputs {sorted(components)}: name the source")
            source = next(iter(components))
        stream_source = self.sources.get((source, stream))
        if stream_source is None:
            raise ValueError(f"bolt {self.component_id!r} does not subscribe to {source}:{stream} "
                             f"(inputs: {sorted(f'{c}:{s}' for c, s in self.sources)})")
        values = list(values)
        if len(values) != len(stream_source.fields):
            raise ValueError(f"{source}:{stream} declares {len(stream_source.fields)} fields "
                             f"{stream_source.fields.to_list()}, got {len(values)} values {values!r}")
        return Tuple(values, stream_source, source_task, {next(self._edge_ids): 0} if tracked else None)

    def feed(self, values: Iterable[Any], source: str | None = None, stream: str = "default",
             source_task: int = 0, tracked: bool = True) -> Tuple:
        """Execute one input tuple (see :meth:`make_tuple`) as a batch of one, then the bolt's
        ``finish_batch``; returns the tuple (to compare with ``acked``, ``failed`` and anchors)."""
        tup = self.make_tuple(values, source, stream, source_task, tracked)
        self.execute([tup])
        return tup

    def tick(self, rate_secs: int = 1) -> None:
        """Execute a tick tuple (``tup.is_tick()``), as the executor sends every
        ``topology.tick.tuple.freq.secs``; with :func:`squall.testing.simulated_time`, advance
        the clock first to move a windowed bolt's time."""
        self.execute([Tuple([rate_secs], TICK_SOURCE, -1)])

    def execute(self, batch: Iterable[Tuple]) -> None:
        """Execute ``batch`` (tuples from :meth:`make_tuple`) as one batch: ``execute`` for
        each, then ``finish_batch``. What escapes ``execute`` is recorded in ``errors`` (a
        ``FailedException`` is not) and the input is failed, as an executor does."""
        for tup in batch:
            try:
                if self._basic is not None:
                    self._basic.input = tup
                    self.bolt.execute(tup, self._basic)
                    if not tup.is_tick():
                        self._collector.ack(tup)
                else:
                    self.bolt.execute(tup)
            except Exception as e:  # noqa: BLE001 - recorded and the input failed, as in a topology
                if not isinstance(e, FailedException):
                    self.report_error(e)
                self._collector.fail(tup)
        finish_batch = getattr(self.bolt, "finish_batch", None)  # a Bolt's; a BasicBolt has none
        if finish_batch is not None:
            finish_batch()

    def close(self) -> None:
        """Call the bolt's ``cleanup`` (once) and close its state."""
        if self.bolt is not None:
            bolt, self.bolt = self.bolt, None
            bolt.cleanup()
            self._close_states()

    def __enter__(self) -> BoltHarness:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _SpoutCollector:
    """A spout's collector (:class:`~squall.api.collector.ISpoutOutputCollector`) that records."""

    def __init__(self, harness: SpoutHarness) -> None:
        self._h = harness

    def emit(self, values: Any, stream: str = "default", msg_id: Any = None) -> list[int]:
        self._h._record(self._h.emits, Emit(stream, self._h._check_emit(stream, values, None), msg_id=msg_id))
        return []

    def emit_direct(self, task_id: int, values: Any, stream: str = "default", msg_id: Any = None) -> None:
        self._h._record(self._h.emits, Emit(stream, self._h._check_emit(stream, values, task_id), task=task_id,
                                            msg_id=msg_id))

    def report_error(self, error: BaseException) -> None:
        self._h.report_error(error)


class SpoutHarness(_Harness):
    """Runs one spout — a ``Spout``, a stateful spout, a ``ShellSpout``, a connector's spout or
    a pystorm-style spout — without a topology.

    ``conf`` as for :class:`BoltHarness`. ``open``, ``init_state`` (a stateful spout) and
    ``activate`` are called here; :meth:`close` calls ``deactivate`` and ``close``. The test
    drives it: :meth:`next_tuple`, then :meth:`ack` / :meth:`fail` with the message ids it
    emitted (``pending``: those neither acked nor failed yet).
    """

    def __init__(self, spout: Spout, conf: Mapping[str, Any] | None = None, component_id: str = "spout",
                 name: str | None = None) -> None:
        builder = TopologyBuilder()
        builder.set_spout(component_id, spout)
        super().__init__(component_id, builder, conf, name)
        self.spout: Any = spout
        spout.open(dict(self.conf), self.context(), _SpoutCollector(self))
        self._init_state(spout)
        spout.activate()

    def next_tuple(self, times: int = 1) -> list[Emit]:
        """Call ``next_tuple`` ``times`` times; what those calls emitted."""
        start = len(self.emits)
        for _ in range(times):
            self.spout.next_tuple()
        with self._lock:
            return self.emits[start:]

    @property
    def pending(self) -> list[Any]:
        """Message ids emitted and neither acked nor failed, in emit order."""
        with self._lock:
            settled = self.acked + self.failed
            return [e.msg_id for e in self.emits if e.msg_id is not None and e.msg_id not in settled]

    def ack(self, msg_id: Any) -> None:
        """The tuple's tree completed: call the spout's ``ack``."""
        self._record(self.acked, msg_id)
        self.spout.ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        """The tuple's tree failed or timed out: call the spout's ``fail``."""
        self._record(self.failed, msg_id)
        self.spout.fail(msg_id)

    def close(self) -> None:
        """Call the spout's ``deactivate`` and ``close`` (once) and close its state."""
        if self.spout is not None:
            spout, self.spout = self.spout, None
            spout.deactivate()
            spout.close()
            self._close_states()

    def __enter__(self) -> SpoutHarness:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

