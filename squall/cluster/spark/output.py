"""What the workers of a Spark topology print reaches the driver's terminal, as under ``squall run``.

A Spark task's Python process writes its stdout and stderr to its executor's log (on an
embedded master, the driver JVM's output: ``spark-driver.log`` under ``squall submit``), where a
user running a topology would not look for a bolt's ``print``. So while a barrier task runs a
worker (:func:`forward_output`), the task's ``sys.stdout`` and ``sys.stderr`` are streams that
send what is written to them, line by line, to the topology master's :class:`OutputRelay` on
the driver, which writes it to the driver's own ``sys.stdout`` / ``sys.stderr``: what a
component prints (and what the worker logs, Python's last-resort handler writing to
``sys.stderr``) shows where the topology was submitted.

* **The link** is a ZeroMQ PUSH socket of the task connected to the relay's PULL socket, secured
  as the topology's other links (:mod:`squall.runtime.messaging.security`: CURVE with the
  topology's keys, which reach the task in its closure): only the topology's own processes
  can write to the terminal, and the lines travel encrypted. Each message is ``[stream,
  text]``, ``stream`` being ``b"out"`` or ``b"err"``.
* **Lines.** A stream sends its text up to its last newline as it comes, and the rest on
  ``flush`` (``print(..., flush=True)``), when it holds over :data:`MAX_PENDING` characters, and
  when the worker ends; lines of one stream keep their order, those of several workers
  interleave by line, not within one.
* **Never blocking the worker.** A message that cannot be queued at once (the driver is
  unreachable and :data:`QUEUED_MESSAGES` wait already) is written to the task's own stream
  instead (the executor's log): printing never waits for the driver. So is what is written
  once the worker ended (a thread of the user's still printing), and what is written to the
  streams' file descriptors directly (``fileno()`` is the original stream's: ``faulthandler``,
  C extensions). What is queued when the driver is gone for good is lost with the link (the
  driver is the topology's master: its workers stop too).
* **The end.** When the worker returns, the streams are put back and the socket lingers up to
  :data:`LINGER_SECS` for what is queued. The relay, closed after the job (see
  :meth:`OutputRelay.close`), writes what still arrives until the link is quiet, so the workers'
  last lines (a bolt's ``cleanup``) come before the run's summary.
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

import zmq

from squall.runtime.messaging.security import LinkKeys, LinkSecurity

log = logging.getLogger("squall.master")

#: the streams a message may name, and the driver's stream each is written to
STREAMS = {b"out": "stdout", b"err": "stderr"}
#: characters a stream holds without a newline before it sends them anyway
MAX_PENDING = 64 * 1024
#: messages a task's socket queues for the driver before it writes to its own streams instead
QUEUED_MESSAGES = 10_000
#: how long a task's socket may take to send what it queued once its worker ended
LINGER_SECS = 2.0
#: how long the link must stay quiet, when the relay closes, before it stops reading; and the most
#: it reads for
QUIET_SECS = 0.2
DRAIN_SECS = 3.0
_POLL_MS = 100


class OutputRelay:
    """The driver's end: a PULL socket on ``bind_host`` (workers connect to :attr:`address`, on
    ``host``), secured with ``keys`` (None: plain TCP), and a thread that writes each message to
    this process's ``sys.stdout`` or ``sys.stderr`` (looked up at each write), flushed. ``name``
    (the topology's) is for the log. :meth:`close` when its topology's workers are gone."""

    def __init__(self, keys: LinkKeys | None, host: str, bind_host: str, name: str) -> None:
        self._context = zmq.Context()
        self._security = LinkSecurity(self._context, keys, f"the output relay of topology {name!r}")
        self._socket = self._context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._security.server(self._socket, "output port")
        self.address = f"tcp://{host}:{self._socket.bind_to_random_port(f'tcp://{bind_host}')}"
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"output-relay-{name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Write what still arrives until the link has been quiet for :data:`QUIET_SECS` (at
        most :data:`DRAIN_SECS`), then close the socket. Calling it again does nothing."""
        if self._closing.is_set():
            return
        self._closing.set()
        self._thread.join()
        self._socket.close(linger=0)
        self._security.close()
        self._context.term()

    def _run(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        for monitor in self._security.monitors:
            poller.register(monitor, zmq.POLLIN)
        drain_until = quiet_since = None
        while True:
            events = dict(poller.poll(_POLL_MS if drain_until is None else int(QUIET_SECS * 1000 / 4)))
            for monitor in self._security.monitors:
                if monitor in events:
                    self._security.log_refusals(monitor)
            now = time.monotonic()
            if self._socket in events:
                self._write_all()
                quiet_since = now
            if self._closing.is_set():
                if drain_until is None:
                    drain_until, quiet_since = now + DRAIN_SECS, now
                if now - quiet_since >= QUIET_SECS or now >= drain_until:
                    return

    def _write_all(self) -> None:
        """Write every message waiting on the socket."""
        while True:
            try:
                frames = self._socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if len(frames) != 2 or frames[0] not in STREAMS:
                log.warning("the output relay dropped a message of %d frame(s) it cannot read", len(frames))
                continue
            stream = getattr(sys, STREAMS[frames[0]])
            text = frames[1].decode("utf-8", errors="replace")
            try:
                if stream.isatty() and sys.stderr.isatty():
                    text = "\r\x1b[K" + text  # over the status line `squall submit` keeps on the terminal
                stream.write(text)
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stdout: keep reading, or the workers' queues fill
                pass


class _Link:
    """A task's PUSH socket to the relay, shared by its two streams (one thread at a time)."""

    def __init__(self, address: str, keys: LinkKeys | None) -> None:
        self._lock = threading.Lock()
        self._context = zmq.Context()
        self._security = LinkSecurity(self._context, keys, "a worker's output")
        self._socket = self._context.socket(zmq.PUSH)
        self._socket.setsockopt(zmq.SNDHWM, QUEUED_MESSAGES)
        self._security.client(self._socket)
        self._socket.connect(address)
        self._closed = False

    def send(self, stream: bytes, text: str) -> bool:
        """Queue ``text`` for the relay without waiting; False when it cannot be (closed, or the
        queue is full)."""
        with self._lock:
            if self._closed:
                return False
            try:
                self._socket.send_multipart([stream, text.encode("utf-8", errors="backslashreplace")], zmq.NOBLOCK)
                return True
            except zmq.ZMQError:  # Again: the queue is full
                return False

    def close(self) -> None:
        """Send what is queued (up to :data:`LINGER_SECS`), then close."""
        with self._lock:
            self._closed = True
            self._socket.close(linger=int(LINGER_SECS * 1000))
        self._security.close()
        self._context.term()


class _RelayStream(io.TextIOBase):
    """A text stream that sends its lines over ``link`` as ``stream``; what cannot be sent goes
    to ``original``, whose file descriptor it also gives as its own."""

    def __init__(self, link: _Link, stream: bytes, original: TextIO | None) -> None:
        super().__init__()
        self._link, self._stream, self._original = link, stream, original
        self._pending = ""
        self._lock = threading.Lock()  # several threads of the worker print

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "backslashreplace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        if self._original is None:
            raise io.UnsupportedOperation("fileno")
        return self._original.fileno()

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        with self._lock:
            self._pending += text
            end = self._pending.rfind("\n") + 1
            if not end and len(self._pending) > MAX_PENDING:
                end = len(self._pending)
            if end:
                chunk, self._pending = self._pending[:end], self._pending[end:]
                self._send(chunk)
        return len(text)

    def flush(self) -> None:
        with self._lock:
            chunk, self._pending = self._pending, ""
            if chunk:
                self._send(chunk)

    def _send(self, chunk: str) -> None:
        if not self._link.send(self._stream, chunk):
            try:
                self._original.write(chunk)
                self._original.flush()
            except Exception:  # noqa: BLE001 - printing must not fail the worker
                pass


@contextlib.contextmanager
def forward_output(address: str, keys: LinkKeys | None) -> Iterator[None]:
    """Within it, this process's ``sys.stdout`` and ``sys.stderr`` send what is written to
    them to the :class:`OutputRelay` at ``address`` (secured with ``keys``), as the module's
    docstring says; on the way out, what they hold is sent and the original streams are put
    back. For a Spark task's worker: its Python process lives on for other tasks."""
    link = _Link(address, keys)
    originals: tuple[Any, Any] = (sys.stdout, sys.stderr)
    streams = (_RelayStream(link, b"out", originals[0]), _RelayStream(link, b"err", originals[1]))
    sys.stdout, sys.stderr = streams
    try:
        yield
    finally:
        sys.stdout, sys.stderr = originals
        for stream in streams:
            stream.flush()
        link.close()  # later writes, from threads still printing, go to the originals
