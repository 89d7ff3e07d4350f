"""One multilang subprocess: launch, handshake, message pipes, death and kill (Storm's
``ShellProcess``).

Threads, so that nobody waits on a subprocess that stopped reading or writing:

* a reader turns stdout into messages on an inbox (it never waits for anything but the
  pipe, so the subprocess can always write, which keeps it reading its stdin);
* a writer sends queued messages to stdin (:meth:`ShellProcess.send` never blocks);
* a third drains stderr, keeping its last lines for error reports (a full stderr pipe would
  otherwise stop the subprocess).

The process ends by :meth:`ShellProcess.kill` (SIGKILL by pid), by its own exit, or by a
stream the reader cannot decode; the inbox then yields one :class:`Exited` and nothing more.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

from squall.multilang.serializer import ProtocolError, Serializer

# Lines of stderr kept for error reports.
_STDERR_LINES = 20
# How long kill waits for the process to be reaped and for stderr's last lines.
_REAP_SECS = 2.0


class ShellProcessError(RuntimeError):
    """A multilang subprocess could not start, died, hung or broke the protocol."""


class Exited:
    """The inbox's last event: the subprocess is gone (or no longer understood)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def plain(value: Any) -> Any:
    """``value`` with everything JSON cannot carry turned into its repr (for the handshake's
    conf and context, which hold whatever the user configured)."""
    return json.loads(json.dumps(value, default=repr))


class ShellProcess:
    """A subprocess speaking the multilang protocol; thread-safe.

    ``describe`` names it in errors (component, task, command).
    """

    def __init__(self, command: list[str], serializer: Serializer, describe: str) -> None:
        self.command = command
        self.serializer = serializer
        self.describe = describe
        self.pid: int | None = None  # the pid the subprocess announced in the handshake
        self.last_heard = time.monotonic()  # when the last message arrived (the heartbeat clock)
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._out: collections.deque[bytes] = collections.deque()
        self._out_cond = threading.Condition()
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES)
        self._reason: str | None = None  # why it ended, once it did
        self._killed = False
        self._popen: subprocess.Popen[bytes] | None = None
        self._pid_dir: str | None = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle -----------------------------------------------------------------------

    def launch(self, conf: dict[str, Any], context: dict[str, Any], timeout: float) -> int:
        """Start the subprocess in the current directory and do the handshake: send
        ``{"conf", "pidDir", "context"}``, wait up to ``timeout`` seconds for ``{"pid"}``.

        Blocks the caller for the handshake only. Returns the pid; on failure kills what was
        started and raises :class:`ShellProcessError` with the stderr tail.
        """
        self._pid_dir = tempfile.mkdtemp(prefix="squall-multilang-")
        # a Python subprocess imports what the worker can (a streamparse project's src/, say),
        # as Storm's subprocesses find their code in the topology's resources
        paths = [os.path.abspath(p or os.curdir) for p in sys.path]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}
        try:
            self._popen = subprocess.Popen(self.command, cwd=os.getcwd(), stdin=subprocess.PIPE, env=env,
                                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
        except OSError as e:
            self.kill(f"could not be started: {e}")
            raise ShellProcessError(f"{self.describe}: cannot start {self.command}: {e}") from e
        for name, target in (("reader", self._read), ("writer", self._write), ("stderr", self._drain_stderr)):
            thread = threading.Thread(target=target, name=f"multilang-{name}-{self._popen.pid}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self.send({"conf": plain(conf), "pidDir": self._pid_dir, "context": plain(context)})
        reply = self.receive(timeout)
        if isinstance(reply, dict) and isinstance(reply.get("pid"), int):
            self.pid = reply["pid"]
            return self.pid
        if reply is None:
            self.kill(f"did not answer the handshake within {timeout:g}s")
        elif not isinstance(reply, Exited):
            self.kill(f"answered the handshake with {reply!r} instead of {{'pid': ...}}")
        raise ShellProcessError(f"{self.describe}: handshake failed: {self.exit_report()}")

    def kill(self, reason: str) -> None:
        """End the subprocess (SIGKILL to its pid and to the announced pid, if another),
        stop the threads, remove the pid directory. Idempotent; the first reason stays."""
        with self._out_cond:
            if self._reason is None:
                self._reason = reason
            first, self._killed = not self._killed, True
            self._out_cond.notify_all()
        if not first:
            return
        popen = self._popen
        if popen is not None:
            if popen.returncode is None:  # not reaped yet, so its pid is still its own
                for pid in {popen.pid, self.pid} - {None}:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except (ProcessLookupError, PermissionError):
                        pass  # already gone, or not ours
            try:
                popen.wait(_REAP_SECS)
            except subprocess.TimeoutExpired:
                pass
            for thread in self._threads:
                if thread is not threading.current_thread():
                    thread.join(_REAP_SECS)  # the readers end at EOF: stderr's tail is complete
            for pipe in (popen.stdin, popen.stdout, popen.stderr):
                try:
                    pipe.close()
                except OSError:
                    pass
        if self._pid_dir is not None:
            shutil.rmtree(self._pid_dir, ignore_errors=True)

    def exit_report(self) -> str:
        """Why the process ended, its exit code and its last stderr lines."""
        code = self._popen.poll() if self._popen is not None else None
        tail = "".join(self._stderr).rstrip() or "(empty)"
        return f"{self._reason or 'running'} (exit code {code}); stderr tail:\n{tail}"

    # -- messages ------------------------------------------------------------------------

    def send(self, message: Any) -> None:
        """Queue ``message`` for the subprocess; never blocks. Raises ``TypeError`` or
        ``ValueError`` when the serializer cannot encode it. Dropped once the process ended."""
        data = self.serializer.encode(message)
        with self._out_cond:
            if self._reason is None:
                self._out.append(data)
                self._out_cond.notify()

    def wait_for_room(self, limit: int, timeout: float) -> bool:
        """Wait until fewer than ``limit`` messages are queued for the subprocess, or it
        ended (True), or ``timeout`` passed (False)."""
        with self._out_cond:
            return self._out_cond.wait_for(lambda: len(self._out) < limit or self._reason is not None, timeout)

    def receive(self, timeout: float) -> Any:
        """The next message (a dict, if the subprocess follows the protocol), a
        :class:`ProtocolError` for a malformed one, :class:`Exited` once the process is gone,
        or None if nothing came within ``timeout`` seconds (0: do not wait)."""
        try:
            event = self._inbox.get(timeout=timeout) if timeout > 0 else self._inbox.get_nowait()
        except queue.Empty:
            return None
        if isinstance(event, Exited):
            self._inbox.put(event)  # every later receive says so too
        return event

    # -- threads -------------------------------------------------------------------------

    def _read(self) -> None:
        fd = self._popen.stdout.fileno()
        decoder = self.serializer.decoder()
        reason = "exited"
        try:
            while True:
                data = os.read(fd, 1 << 16)
                if not data:
                    break
                messages = decoder.feed(data)
                if messages:
                    self.last_heard = time.monotonic()
                    for message in messages:
                        self._inbox.put(message)
        except ProtocolError as e:
            reason = f"broke the protocol: {e}"
        except OSError:
            pass  # the pipe was closed by kill
        with self._out_cond:
            if self._reason is None:
                self._reason = reason
            self._out_cond.notify_all()  # the writer stops, wait_for_room returns
        self._inbox.put(Exited(self._reason))

    def _write(self) -> None:
        stdin = self._popen.stdin
        while True:
            with self._out_cond:
                self._out_cond.wait_for(lambda: self._out or self._reason is not None)
                if self._reason is not None:
                    return
                data = b"".join(self._out)  # one write for everything queued meanwhile
                self._out.clear()
                self._out_cond.notify_all()  # room for wait_for_room
            try:
                view = memoryview(data)
                while view:
                    view = view[stdin.write(view):]
            except (OSError, ValueError):
                return  # broken pipe: the reader sees the end and says why

    def _drain_stderr(self) -> None:
        for line in self._popen.stderr:
            self._stderr.append(line.decode(errors="replace"))
