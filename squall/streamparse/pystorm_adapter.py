"""pystorm components (and so streamparse's ``Bolt``/``Spout``) run natively in a worker.

A pystorm component normally lives in a subprocess and talks Storm's multilang protocol
over its stdin/stdout. Here the component's own class runs in the executor's thread:
:class:`PystormBolt` and :class:`PystormSpout` hand it each command exactly as the
protocol would (a tuple, ``next``, ``ack``, ``fail``, ``activate``, ``deactivate``) and
call its own ``_run``, so pystorm's logic — ``auto_ack``/``auto_anchor``/``auto_fail``,
``BatchingBolt``'s batches, ``ReliableSpout``'s bookkeeping, tick tuples — is pystorm's,
unchanged. What the component sends back (emit, ack, fail, log, error, metrics) reaches
Squall's collector through :class:`_Messages` instead of a pipe: no serialization, no
subprocess, no JSON.

Differences from a subprocess, by design: heartbeats are not needed; an exception in
``process``/``next_tuple`` is reported and handled by the component's
``_handle_run_exception`` (failing the current tuples when ``auto_fail``), and the task
then goes on with the same instance instead of its process exiting and restarting.
"""

from __future__ import annotations

import io
import itertools
import logging
import signal
import threading
from collections.abc import Callable
from typing import Any

import pystorm.bolt
import pystorm.spout
from pystorm.component import Tuple as PystormTuple

from squall.api.bolt import Bolt
from squall.api.component import OutputFieldsDeclarer
from squall.api.config import Config
from squall.api.context import TopologyContext
from squall.api.spout import Spout
from squall.api.tuple import Tuple
from squall.multilang.protocol import ShellMetrics, handshake_context, log_from_subprocess

log = logging.getLogger("squall.pystorm")


class _Signals:
    """What pystorm.bolt sees as ``signal``: ``TicklessBatchingBolt`` installs a SIGUSR1 handler
    (for its batcher thread's deaths), which only a main thread may; an executor is not one,
    and natively there is no batcher thread (:class:`_BatcherThread`)."""

    SIGUSR1 = signal.SIGUSR1

    @staticmethod
    def signal(signum: int, handler: Any) -> None:
        return None


class _BatcherThread:
    """What a TicklessBatchingBolt starts natively as its batcher thread: nothing. Its batches
    are processed in the executor thread on tick tuples every ``secs_between_batches``
    (a thread of its own would emit while holding the batch lock that the executor thread,
    holding the executor's lock, waits for: a deadlock)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.name, self.daemon = "", True

    def start(self) -> None:
        pass


class _Threading:
    """What pystorm.bolt sees as ``threading``: the real one, but for the batcher thread."""

    Thread = _BatcherThread

    def __getattr__(self, name: str) -> Any:
        return getattr(threading, name)


# natively run pystorm bolts are what this process runs pystorm for
pystorm.bolt.signal = _Signals()
pystorm.bolt.threading = _Threading()

# pystorm's log levels (its ``log(message, level)``) in Python's terms
_LEVELS = {"trace": logging.DEBUG, "debug": logging.DEBUG, "info": logging.INFO, "warn": logging.WARNING,
           "error": logging.ERROR}
# what pystorm numbers its log levels in "log" messages (Storm's multilang levels)
_NUMBERED_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


class _Messages:
    """Stands in for pystorm's serializer: receives the component's outgoing messages.

    ``send_message`` is called by the component, in the executor's thread or in a thread of
    its own (a ``TicklessBatchingBolt``); ``on_emit`` returns the task ids an emit went to."""

    def __init__(self, on_message: Callable[[dict[str, Any]], None]) -> None:
        self.on_message = on_message
        self.output_stream = None  # pystorm redirects sys.stdout only when this is sys.stdout

    def send_message(self, message: dict[str, Any]) -> None:
        self.on_message(message)

    def read_message(self) -> Any:
        raise RuntimeError("a natively run pystorm component read from Storm: nothing is there to read")


class _Hosted:
    """What a natively run pystorm component needs from Squall, for bolts and spouts alike."""

    def __init__(self, component_class: type, outputs: dict[str, tuple[list[str], bool]]) -> None:
        self.component_class = component_class
        self.streams = outputs  # stream -> (fields, direct)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        for stream, (fields, direct) in self.streams.items():
            declarer.declare_stream(stream, fields, direct)

    def _start(self, conf: dict[str, Any], context: TopologyContext) -> None:
        thread = threading.current_thread()
        name = thread.name
        try:
            # streams of its own: pystorm wraps them, and closes them when the wrapper goes (the
            # default, sys.stdin/stdout, would be closed for the whole worker); rdb_signal=None:
            # pystorm would install a signal handler, which only a main thread may
            self.component = self.component_class(input_stream=io.BytesIO(), output_stream=io.BytesIO(),
                                                  rdb_signal=None)
        finally:
            thread.name = name  # TicklessBatchingBolt renames the thread it is created in
        self.component.serializer = _Messages(self._on_message)
        self.component.send_message = self._on_message  # straight to Squall (pystorm's only checks it is a dict)
        # a class that keeps pystorm's own _run gets each command as the call _run would make
        self.plain = type(self.component)._run is type(self).pystorm_run
        self.name = context.get_this_component_id()
        self.task = context.get_this_task_id()
        self.shell_metrics = ShellMetrics(context, f"pystorm component {self.name!r} task {self.task}")
        storm_conf = {**conf, "topology.name": conf.get("topology.name", "")}
        handshake = handshake_context(context)
        root = logging.getLogger()
        before = list(root.handlers)
        self.component._setup_component(storm_conf, handshake)
        # pystorm hangs a handler sending every record of the process to Storm on the root
        # logger; natively, records already reach Squall's logging
        for handler in root.handlers[len(before):]:
            root.removeHandler(handler)
        self.component.initialize(storm_conf, handshake)
        if self.plain:
            self._call_directly()

    def _call_directly(self) -> None:
        """Give the component methods that reach Squall's collector directly where its class
        keeps pystorm's own (which build a message for :meth:`_on_message` to take apart)."""

    @staticmethod
    def _checked(tup: Any) -> Any:
        if not isinstance(tup, (list, tuple)):  # pystorm's own check and words
            raise TypeError(f"All Tuples must be either lists or tuples, received {type(tup)!r} instead.")
        return tup

    def _run(self, command: dict[str, Any]) -> None:
        """Give the component one command, as its multilang loop would, and run one turn."""
        self.component._pending_commands.append(command)
        self._call(self.component._run)

    def _call(self, method: Callable[..., Any], *args: Any) -> None:
        """Run one turn of the component; an exception gets pystorm's own handling (report,
        auto_fail), as in its run loop."""
        try:
            method(*args)
        except Exception as e:  # noqa: BLE001 - handled as pystorm does
            self.component._handle_run_exception(e)

    def _emit(self, message: dict[str, Any], **reliability: Any) -> None:
        """An ``emit`` message (with the bolt's anchors or the spout's message id); the task ids
        go back to the component when it waits for them (``need_task_ids``)."""
        stream = message.get("stream", "default")
        if "task" in message:
            self.collector.emit_direct(message["task"], message["tuple"], stream=stream, **reliability)
            return
        tasks = self.collector.emit(message["tuple"], stream=stream, **reliability)
        if message.get("need_task_ids", True):
            self.component._pending_task_ids.append(tasks)

    def _common(self, message: dict[str, Any]) -> bool:
        """Handle the messages bolts and spouts share; False if ``message`` is not one."""
        command = message.get("command")
        if command == "log":
            log_from_subprocess(self.name, self.task, message)
        elif command == "error":
            self.collector.report_error(RuntimeError(message.get("msg", "")))
        elif command == "metrics":  # pystorm's report_metric
            self.shell_metrics.update(message)
        elif command == "sync":
            pass  # sync answers heartbeats, which natively do not happen
        else:
            return False
        return True


class PystormBolt(_Hosted, Bolt):
    """A pystorm ``Bolt`` class (``BatchingBolt`` and ``TicklessBatchingBolt`` included) run
    natively as a Squall bolt. ``outputs``: stream -> (fields, direct). One instance of the
    class per task, created in ``prepare``; ``initialize(conf, context)`` is called there."""

    pystorm_run = pystorm.bolt.Bolt._run

    def __init__(self, component_class: type, outputs: dict[str, tuple[list[str], bool]]) -> None:
        _Hosted.__init__(self, component_class, outputs)

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
        self.collector = collector
        self.inflight: dict[str, Tuple] = {}  # pystorm tuple id -> the Squall tuple
        self.current: Tuple | None = None  # the tuple being processed (what auto_anchor anchors to)
        self.named_values: dict[Any, Any] = {}  # StreamSource -> pystorm's namedtuple of its fields, or None
        self.ids = (str(n) for n in itertools.count(1))
        self._start(conf, context)

    def get_component_configuration(self) -> dict[str, Any] | None:
        if issubclass(self.component_class, pystorm.bolt.TicklessBatchingBolt):  # see _BatcherThread
            return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: self.component_class.secs_between_batches}
        return None

    def execute(self, tup: Tuple) -> None:
        tup_id = next(self.ids)
        tick = tup.is_tick()
        if not tick:  # ticks are not tracked: acking one does nothing
            self.inflight[tup_id] = tup
        task = -1 if tick else tup.source_task
        if not self.plain:
            self._run({"id": tup_id, "comp": tup.source_component, "stream": tup.source_stream_id,
                       "task": task, "tuple": list(tup.values)})
            if tick and isinstance(self.component, pystorm.bolt.TicklessBatchingBolt):
                self._call(self._process_batches)
            return
        # what pystorm's Bolt._run does with a tuple it read (read_tuple: values named after
        # the source stream's fields), its turn inlined
        component, source = self.component, tup.stream_source
        try:
            named = self.named_values[source]
        except KeyError:
            named = self.named_values[source] = component._source_tuple_types[source.component].get(source.stream)
        values = tup.values
        ptup = PystormTuple(tup_id, source.component, source.stream, task,
                            tuple(values) if named is None else named(*values))
        component._current_tups = [ptup]
        self.current = tup
        try:
            (component.process_tick if tick else component.process)(ptup)
            if component.auto_ack:
                component.ack(ptup)
        except Exception as e:  # noqa: BLE001 - handled as pystorm does (see _call)
            component._handle_run_exception(e)
        component._current_tups = []
        self.current = None

    def _call_directly(self) -> None:
        cls, pystorm_bolt = type(self.component), pystorm.bolt.Bolt
        if (cls.emit, cls.ack, cls.fail) != (pystorm_bolt.emit, pystorm_bolt.ack, pystorm_bolt.fail):
            return
        component, collector, inflight, checked = self.component, self.collector, self.inflight, self._checked

        def emit(tup: Any, stream: str | None = None, anchors: Any = None, direct_task: int | None = None,
                 need_task_ids: bool = False) -> list[int] | None:
            """pystorm's ``Bolt.emit``: anchored to the current tuple when ``auto_anchor``."""
            if anchors is None:
                anchors = self.current if component.auto_anchor else None
            else:
                anchors = [t for t in (inflight.get(a.id if isinstance(a, PystormTuple) else a) for a in anchors)
                           if t is not None]
                if len(anchors) == 1:
                    anchors = anchors[0]  # the collector's prepared emit
            stream = "default" if stream is None else stream
            if direct_task is not None:
                collector.emit_direct(direct_task, checked(tup), anchors, stream)
                return [direct_task] if need_task_ids else None
            tasks = collector.emit(checked(tup), anchors, stream)
            return tasks if need_task_ids else None

        def settle(squall_settle: Callable[[Tuple], None]) -> Callable[[Any], None]:
            def settle_tuple(tup: Any) -> None:
                """pystorm's ``ack``/``fail`` of a tuple or its id (twice, or a tick: nothing)."""
                settled = inflight.pop(tup.id if isinstance(tup, PystormTuple) else tup, None)
                if settled is not None:
                    squall_settle(settled)
            return settle_tuple

        component.emit, component.ack, component.fail = emit, settle(collector.ack), settle(collector.fail)

    def _process_batches(self) -> None:
        with self.component._batch_lock:
            self.component.process_batches()

    def _on_message(self, message: dict[str, Any]) -> None:
        command = message.get("command")
        if command == "emit":
            anchors = [self.inflight[a] for a in message.get("anchors", ()) if a in self.inflight]
            # one anchor (auto_anchor's usual case) as a tuple: the collector's prepared emit
            self._emit(message, anchors=anchors[0] if len(anchors) == 1 else anchors)
        elif command in ("ack", "fail"):
            tup = self.inflight.pop(message["id"], None)
            if tup is not None:  # acking twice, or a tick tuple (not tracked), does nothing
                (self.collector.ack if command == "ack" else self.collector.fail)(tup)
        elif not self._common(message):
            self.collector.report_error(ValueError(f"unknown pystorm command {command!r}: {message!r}"))

    def cleanup(self) -> None:
        self.inflight.clear()


class PystormSpout(_Hosted, Spout):
    """A pystorm ``Spout`` class (``ReliableSpout`` included) run natively as a Squall spout:
    ``next_tuple``, ``ack``, ``fail``, ``activate`` and ``deactivate`` become the multilang
    commands the class answers; its emits with a ``tup_id`` are reliable."""

    pystorm_run = pystorm.spout.Spout._run

    def __init__(self, component_class: type, outputs: dict[str, tuple[list[str], bool]]) -> None:
        _Hosted.__init__(self, component_class, outputs)

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: Any) -> None:
        self.collector = collector
        self._start(conf, context)

    def _call_directly(self) -> None:
        if type(self.component).emit is not pystorm.spout.Spout.emit:
            return  # e.g. ReliableSpout, which keeps its own books in emit
        collector, checked = self.collector, self._checked

        def emit(tup: Any, tup_id: Any = None, stream: str | None = None, direct_task: int | None = None,
                 need_task_ids: bool = False) -> list[int] | None:
            """pystorm's ``Spout.emit``: reliable with a ``tup_id``."""
            stream = "default" if stream is None else stream
            if direct_task is not None:
                collector.emit_direct(direct_task, checked(tup), stream, msg_id=tup_id)
                return [direct_task] if need_task_ids else None
            tasks = collector.emit(checked(tup), stream, msg_id=tup_id)
            return tasks if need_task_ids else None

        self.component.emit = emit

    def next_tuple(self) -> None:
        self._command("next", "next_tuple")

    def ack(self, msg_id: Any) -> None:
        self._command("ack", "ack", msg_id)

    def fail(self, msg_id: Any) -> None:
        self._command("fail", "fail", msg_id)

    def activate(self) -> None:
        self._command("activate", "activate")

    def deactivate(self) -> None:
        self._command("deactivate", "deactivate")

    def _command(self, command: str, method: str, *msg_id: Any) -> None:
        """pystorm's Spout._run calls ``method`` for ``command`` (and answers sync, which
        natively is not needed): a class that keeps that _run has the call made directly."""
        if self.plain:
            self._call(getattr(self.component, method), *msg_id)
        else:
            self._run({"command": command, **({"id": msg_id[0]} if msg_id else {})})

    def _on_message(self, message: dict[str, Any]) -> None:
        command = message.get("command")
        if command == "emit":
            self._emit(message, msg_id=message.get("id"))
        elif not self._common(message):
            self.collector.report_error(ValueError(f"unknown pystorm command {command!r}: {message!r}"))
