"""``ShellSpout``: a spout whose logic runs in a subprocess speaking Storm's multilang protocol."""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

from squall.api.spout import Spout
from squall.multilang.protocol import RESTART_BACKOFF_SECS, ShellComponent, command_of
from squall.multilang.serializer import ProtocolError, get_serializer
from squall.multilang.shell_process import Exited, ShellProcess, ShellProcessError

if TYPE_CHECKING:
    from squall.api.collector import ISpoutOutputCollector
    from squall.api.context import TopologyContext

log = logging.getLogger("squall.multilang")

# How long next_tuple waits for the subprocess's "sync" before it returns (the executor
# calls it again soon; the command stays outstanding meanwhile).
NEXT_WAIT_SECS = 0.05


class ShellSpout(ShellComponent, Spout):
    """Runs ``command *args`` (one subprocess per task) as a spout over the multilang protocol.

    ``outputs`` and ``serializer`` as for :class:`~squall.multilang.ShellBolt`.

    Contract (every method runs on the executor thread, as any spout's):

    * ``open`` starts the subprocess in the current directory and does the handshake
      (blocking up to ``topology.subprocess.timeout.secs``; raises if that fails).
    * ``next_tuple`` sends ``next`` (unless the previous one is still unanswered) and handles
      the emits, logs and errors that follow until the ``sync``, waiting at most
      ``NEXT_WAIT_SECS``: it never blocks longer.
    * ``ack``/``fail``/``activate``/``deactivate`` send the command and handle what has
      already arrived, without waiting; their answers are handled by later calls.
    * Tuples the subprocess emits with an ``id`` are tracked; Squall's ``ack``/``fail`` of
      them reach the subprocess as ``ack``/``fail`` with that id.
    * A subprocess that exits, or does not answer for ``topology.subprocess.timeout.secs``
      while a command waits on it: an error is recorded naming the component, the task and
      the stderr tail; it is killed and a new one started. The ids it emitted that were
      still pending are sent to the new one as ``fail`` (a spout reading a durable source
      replays them); Squall's later ack or fail of those tuples is dropped.
    * ``close`` kills the subprocess by pid.
    """

    def open(self, conf: dict[str, Any], context: TopologyContext, collector: ISpoutOutputCollector) -> None:
        self._collector = collector
        self._set_up(conf, context)
        # Squall's msg id of a tracked emit is (generation, seq): the generation tells the
        # subprocess that emitted it, seq finds the subprocess's own id (which may be anything)
        self._generation = 0
        self._seqs = itertools.count()
        self._ids: dict[int, Any] = {}  # seq -> the subprocess's id, for this generation's pending emits
        self._outstanding = 0  # commands sent whose "sync" has not come yet
        self._next_sent = False  # a "next" is among them
        self._waiting_since = 0.0  # when _outstanding last went from 0 to 1
        self._orphans: list[Any] = []  # ids a dead subprocess left pending, to fail to its successor
        self._last_start = time.monotonic()
        self._process: ShellProcess | None = self._launch()  # raises: a spout that cannot start fails the start

    def next_tuple(self) -> None:
        process = self._live_process()
        if process is None:
            return
        if not self._next_sent:
            self._command(process, {"command": "next"})
            self._next_sent = True
        self._pump(process, NEXT_WAIT_SECS)

    def ack(self, msg_id: Any) -> None:
        self._settle("ack", msg_id)

    def fail(self, msg_id: Any) -> None:
        self._settle("fail", msg_id)

    def activate(self) -> None:
        self._simple_command("activate")

    def deactivate(self) -> None:
        self._simple_command("deactivate")

    def close(self) -> None:
        if self._process is not None:
            self._process.kill("topology killed")
            self._process = None

    # -- commands and answers ------------------------------------------------------------

    def _settle(self, command: str, msg_id: tuple[int, int]) -> None:
        generation, seq = msg_id
        if generation != self._generation:
            return  # emitted by a subprocess that died; its successor was told "fail" at restart
        sub_id = self._ids.pop(seq)
        process = self._live_process()
        if process is not None:
            self._command(process, {"command": command, "id": sub_id})
            self._pump(process, 0)

    def _simple_command(self, command: str) -> None:
        process = self._live_process()
        if process is not None:
            self._command(process, {"command": command})
            self._pump(process, 0)

    def _command(self, process: ShellProcess, message: dict[str, Any]) -> None:
        if not self._outstanding:
            self._waiting_since = time.monotonic()
        self._outstanding += 1
        process.send(message)

    def _pump(self, process: ShellProcess, wait: float) -> None:
        """Handle what the subprocess sent, until every command is answered, nothing more
        came within ``wait`` seconds, or the subprocess ended or hung (then replace it)."""
        deadline = time.monotonic() + wait
        while self._process is process:
            event = process.receive(max(0.0, deadline - time.monotonic()))
            if event is None:
                if (self._outstanding
                        and time.monotonic() - max(process.last_heard, self._waiting_since) > self._timeout):
                    process.kill(f"did not answer within topology.subprocess.timeout.secs ({self._timeout:g}s)")
                    continue  # the Exited event follows
                return
            if event.__class__ is Exited:
                self._replace(process, event.reason)
                return
            try:
                self._handle(process, event)
            except Exception as e:  # noqa: BLE001 - a bad message, or what it made the collector raise: never fatal
                self._collector.report_error(ShellProcessError(f"{self._describe}: {e}"))
            if not self._outstanding and wait:
                return  # "next" answered: next_tuple is done

    def _handle(self, process: ShellProcess, msg: Any) -> None:
        command = command_of(msg)
        if command == "sync":
            if not self._outstanding:
                raise ProtocolError("sync while no command was waiting for one")
            self._outstanding -= 1
            self._waiting_since = time.monotonic()  # the next command's wait starts now
            if not self._outstanding:
                self._next_sent = False
        elif command == "emit":
            self._emit(process, msg)
        else:
            self._shared_command(msg)

    def _emit(self, process: ShellProcess, msg: dict[str, Any]) -> None:
        msg_id = None
        if msg.get("id") is not None:
            seq = next(self._seqs)
            self._ids[seq] = msg["id"]
            msg_id = (self._generation, seq)
        stream, direct_task = msg.get("stream") or "default", msg.get("task")
        tasks: list[int] = []
        try:
            if direct_task:  # Storm's task 0 means a regular emit
                self._collector.emit_direct(direct_task, msg["tuple"], stream, msg_id)
            else:
                tasks = self._collector.emit(msg["tuple"], stream, msg_id)
        except Exception as e:  # noqa: BLE001 - invalid emit: Squall fails its msg id
            self._collector.report_error(ShellProcessError(f"{self._describe}: emit {msg!r} failed: {e}"))
        if not direct_task and msg.get("need_task_ids", True):  # Storm's default is to send them
            process.send(list(tasks))

    # -- death and restart ---------------------------------------------------------------

    def _live_process(self) -> ShellProcess | None:
        """The running subprocess, starting a new one if it is gone and the backoff has passed."""
        if self._process is None and time.monotonic() - self._last_start >= RESTART_BACKOFF_SECS:
            try:
                self._process = self._launch()
            except ShellProcessError as e:
                self._collector.report_error(e)
                return None
            for sub_id in self._orphans:  # the ids its predecessor left pending
                self._command(self._process, {"command": "fail", "id": sub_id})
            self._orphans = []
        return self._process

    def _launch(self) -> ShellProcess:
        self._last_start = time.monotonic()
        process = ShellProcess(self.command, get_serializer(self.serializer), self._describe)
        process.launch(self._conf, self._context, self._timeout)
        return process

    def _replace(self, process: ShellProcess, reason: str) -> None:
        """The subprocess ended: report it and forget its state; ``_live_process`` starts the next."""
        process.kill(reason)
        self._process = None
        orphans = list(self._ids.values())
        self._collector.report_error(ShellProcessError(
            f"{self._describe} ended; its {len(orphans)} pending tuple id(s) will be failed to its successor; "
            f"restarting. {process.exit_report()}"))
        self._generation += 1
        self._ids = {}
        self._outstanding = 0
        self._next_sent = False
        self._orphans += orphans
