"""``ShellBolt``: a bolt whose logic runs in a subprocess speaking Storm's multilang protocol."""

from __future__ import annotations

import itertools
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from squall.api.bolt import Bolt
from squall.api.config import Config
from squall.multilang.protocol import HEARTBEAT_STREAM, RESTART_BACKOFF_SECS, ShellComponent, command_of
from squall.multilang.serializer import ProtocolError, get_serializer
from squall.multilang.shell_process import Exited, ShellProcess, ShellProcessError

if TYPE_CHECKING:
    from squall.api.collector import IOutputCollector
    from squall.api.context import TopologyContext
    from squall.api.tuple import Tuple

log = logging.getLogger("squall.multilang")

# Storm's topology.shellbolt.max.pending: input tuples queued for the subprocess's stdin
# before execute waits.


class ShellBolt(ShellComponent, Bolt):
    """Runs ``command *args`` (one subprocess per task) as a bolt over the multilang protocol.

    ``outputs`` declares the streams, as the ``outputs`` shorthand of any component (a list
    of fields for ``default``, or ``{stream: fields}``); override ``declare_output_fields``
    for direct streams. ``serializer`` is ``"json"`` (Storm's default) or ``"msgpack"``; the
    subprocess must be told the same (pystorm: ``MyBolt(serializer="msgpack").run()``).

    Contract:

    * ``prepare`` starts the subprocess in the current directory and does the handshake
      (blocking up to ``topology.subprocess.timeout.secs``); if that fails, ``prepare``
      raises and the topology does not start.
    * ``execute`` sends the tuple as ``{"id", "comp", "stream", "task", "tuple"}`` and
      returns: the subprocess acks, fails and emits later. ``execute`` waits only while
      ``topology.shellbolt.max.pending`` tuples are still queued for the subprocess's stdin,
      and never longer than it takes to declare the subprocess hung.
    * A thread of the bolt's own (one per task) handles what the subprocess sends — emit
      (anchors, stream, ``task`` for direct emits, the task ids sent back unless
      ``need_task_ids`` is false), ack, fail, log, error (recorded as an error of the
      component), metrics (see :class:`~squall.multilang.protocol.ShellMetrics`), sync — and sends a heartbeat tuple (stream
      ``__heartbeat``, task -1) every second.
    * A subprocess that exits, or sends nothing (not even the ``sync`` answering a
      heartbeat) for ``topology.subprocess.timeout.secs``: an error is recorded naming the
      component, the task and the stderr tail; it is killed; the inputs it had not acked
      are failed (their spouts replay them); a new subprocess is started and handshaken.
      A tuple arriving meanwhile waits for the new subprocess — up to
      ``topology.subprocess.timeout.secs``, then it is failed — so that a spout replaying on
      fail does not spin through fails while the subprocess restarts.
    * A bad message (malformed, unknown command, ack of an unknown id, an invalid emit) is
      recorded as an error; processing goes on.
    * ``cleanup`` kills the subprocess by pid.
    """

    # -- executor thread -----------------------------------------------------------------

    def prepare(self, conf: dict[str, Any], context: TopologyContext, collector: IOutputCollector) -> None:
        self._collector = collector
        self._set_up(conf, context)
        self._max_pending = conf[Config.TOPOLOGY_SHELLBOLT_MAX_PENDING]
        self._heartbeat_secs = min(1.0, self._timeout / 4)
        self._ids = itertools.count()
        self._lock = threading.Lock()  # guards _process and _pending, shared with the reader thread
        self._started = threading.Condition(self._lock)  # notified when a new subprocess is up
        self._pending: dict[str, Tuple] = {}  # id sent to the subprocess -> input not acked nor failed yet
        self._process: ShellProcess | None = None  # None while restarting
        self._closing = threading.Event()
        self._process = self._launch()  # raises: a bolt that cannot start fails the topology's start
        self._thread = threading.Thread(target=self._run, name=f"multilang-bolt-{self._component}-{self._task}",
                                        daemon=True)
        self._thread.start()

    def execute(self, tup: Tuple) -> None:
        with self._started:
            # restarting: wait for the new subprocess (bounded) rather than fail at once
            self._started.wait_for(lambda: self._process is not None or self._closing.is_set(), self._timeout)
            process = self._process
            if process is not None:
                tuple_id = str(next(self._ids))
                self._pending[tuple_id] = tup
        if process is None:
            self._collector.fail(tup)  # still restarting (or closing): the spout replays it
            return
        message = {"id": tuple_id, "comp": tup.source_component, "stream": tup.source_stream_id,
                   "task": tup.source_task, "tuple": tup.values}
        while not process.wait_for_room(self._max_pending, self._heartbeat_secs):
            if time.monotonic() - process.last_heard > self._timeout:
                # stdin is full and nothing comes back: hung. The reader thread restarts it
                # (and fails this tuple with the other pending ones).
                process.kill(f"did not answer within topology.subprocess.timeout.secs ({self._timeout:g}s)")
        try:
            process.send(message)
        except (TypeError, ValueError) as e:
            with self._lock:
                unsent = self._pending.pop(tuple_id, None)
            if unsent is not None:
                self._collector.report_error(ShellProcessError(
                    f"{self._describe}: tuple {tup.values!r} cannot be sent as {self.serializer}: {e}"))
                self._collector.fail(tup)

    def cleanup(self) -> None:
        self._closing.set()
        with self._started:
            process, self._process = self._process, None
            self._started.notify_all()
        if process is not None:
            process.kill("topology killed")
        self._thread.join(5)

    # -- the bolt's thread: what the subprocess says, heartbeats, restarts ---------------

    def _launch(self) -> ShellProcess:
        process = ShellProcess(self.command, get_serializer(self.serializer), self._describe)
        process.launch(self._conf, self._context, self._timeout)
        return process

    def _run(self) -> None:
        next_heartbeat = time.monotonic() + self._heartbeat_secs
        while not self._closing.is_set():
            try:
                next_heartbeat = self._step(next_heartbeat)
            except Exception as e:  # noqa: BLE001 - the bolt's only link to its subprocess must not die
                self._collector.report_error(e)

    def _step(self, next_heartbeat: float) -> float:
        """Handle one message (or none, if the heartbeat is due first); send the heartbeat
        when due; kill a subprocess silent for too long. Returns when the next heartbeat is due."""
        process = self._process
        if process is None:
            self._restart()
            return next_heartbeat
        event = process.receive(max(0.0, next_heartbeat - time.monotonic()))
        if event.__class__ is Exited:
            if not self._closing.is_set():
                self._replace(process, event.reason)
            return next_heartbeat
        if event is not None:
            try:
                self._handle(process, event)
            except Exception as e:  # noqa: BLE001 - a bad message, or what it made the collector raise: never fatal
                self._collector.report_error(ShellProcessError(f"{self._describe}: {e}"))
        now = time.monotonic()
        if now >= next_heartbeat:
            process.send({"id": f"heartbeat-{next(self._ids)}", "comp": None, "stream": HEARTBEAT_STREAM,
                          "task": -1, "tuple": []})
            next_heartbeat = now + self._heartbeat_secs
        if now - process.last_heard > self._timeout:
            process.kill(f"did not answer within topology.subprocess.timeout.secs ({self._timeout:g}s)")
        return next_heartbeat

    def _replace(self, process: ShellProcess, reason: str) -> None:
        """The subprocess ended: report it, fail its pending inputs, start another."""
        with self._lock:
            if self._process is not process:
                return
            self._process = None
            pending, self._pending = self._pending, {}
        process.kill(reason)  # reaps it; a no-op for one already killed
        self._collector.report_error(ShellProcessError(
            f"{self._describe} ended; {len(pending)} pending input tuple(s) failed; restarting. "
            f"{process.exit_report()}"))
        for tup in pending.values():
            self._collector.fail(tup)
        self._restart()

    def _restart(self) -> None:
        """Start a new subprocess; on failure, report and try again after a pause."""
        if self._closing.wait(RESTART_BACKOFF_SECS):  # a subprocess that dies at once must not spin
            return
        try:
            process = self._launch()
        except ShellProcessError as e:
            self._collector.report_error(e)
            return
        with self._started:
            if self._closing.is_set():
                process.kill("topology killed")
            else:
                self._process = process
                self._started.notify_all()

    def _handle(self, process: ShellProcess, msg: Any) -> None:
        command = command_of(msg)
        if command == "emit":
            self._emit(process, msg)
        elif command in ("ack", "fail"):
            with self._lock:
                tup = self._pending.pop(_tuple_id(msg.get("id")), None)
            if tup is None:
                raise ProtocolError(f"{command} of id {msg.get('id')!r}, which is not pending (unknown, or already "
                                    "acked or failed)")
            (self._collector.ack if command == "ack" else self._collector.fail)(tup)
        elif command == "sync":
            pass  # the answer to a heartbeat: receiving it moved last_heard
        else:
            self._shared_command(msg)

    def _emit(self, process: ShellProcess, msg: dict[str, Any]) -> None:
        stream, direct_task = msg.get("stream") or "default", msg.get("task")
        tasks: list[int] = []
        try:
            anchors = self._anchors(msg)
            if direct_task:  # Storm's task 0 means a regular emit
                self._collector.emit_direct(direct_task, msg["tuple"], anchors, stream)
            else:
                tasks = self._collector.emit(msg["tuple"], anchors, stream)
        except Exception as e:  # noqa: BLE001 - invalid emit: reported, no task got it
            self._collector.report_error(ShellProcessError(f"{self._describe}: emit {msg!r} failed: {e}"))
        if not direct_task and msg.get("need_task_ids", True):  # Storm's default; sent even after a
            process.send(list(tasks))  # bad emit, or the subprocess would wait for them until killed

    def _anchors(self, msg: dict[str, Any]) -> list[Tuple]:
        anchors = []
        with self._lock:
            for anchor_id in msg.get("anchors") or ():
                anchor = self._pending.get(_tuple_id(anchor_id))
                if anchor is None:
                    raise ProtocolError(f"emit anchored to id {anchor_id!r}, which is not pending (unknown, or "
                                        "already acked or failed)")
                anchors.append(anchor)
        return anchors


def _tuple_id(value: Any) -> str:
    """An id the subprocess sent back: one of ours is a string (anything else is no key)."""
    if not isinstance(value, str):
        raise ProtocolError(f"tuple id {value!r} is not a string")
    return value
