"""A worker process: one worker of a topology in an OS process of its own.

Started by the local supervisor as ``python -m squall.cluster.worker_process --master ADDR
--worker N`` with the topology's link keys as one line of JSON on its stdin, or by a Spark
barrier task calling :func:`run` with the keys from its closure: keys never travel over a
socket. It talks to the topology master (:mod:`squall.cluster.master`) over one ZeroMQ DEALER
socket, authenticated and encrypted with those keys (:mod:`squall.runtime.messaging.security`), in the
messages of :mod:`squall.runtime.messaging.schema`:

1. ``hello`` (pid) → the master answers ``bootstrap`` (the pickled topology, config and
   assignment: unpickled only because the master proved it holds the topology's keys);
2. it binds its worker port and says ``bound``; the others' addresses come
   from the master (``peers``, now and whenever a worker restarts elsewhere) or, in a Spark
   barrier stage, from an exchange among the workers;
3. it starts its executors (open/prepare) and says ``ready``, or ``setup_error`` with the
   traceback and exits;
4. then, every ``worker.heartbeat.frequency.secs``, a ``heartbeat`` with every executor's
   figures and the errors recorded since the last one; it obeys ``activate``,
   ``deactivate`` and ``kill`` (stop the executors, calling close/cleanup, say ``stopped``
   with the final figures, and exit).

Workers of one host exchange their payloads over Unix sockets
(:mod:`squall.runtime.messaging.same_host`), workers of different hosts over ZeroMQ.
Its control thread (the main thread) also logs refused connections. A message from the master that
does not fit its schema is logged and dropped. It exits when its parent (the supervisor) is
gone, and — fail-fast — with code 1 after a last heartbeat when a thread of its worker died
(:attr:`Worker.failure`), so that it is restarted.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle
import msgspec
import zmq

from squall.api.config import Config
from squall.runtime.cluster_state import TopologyState
from squall.runtime.messaging import schema
from squall.runtime.messaging.incarnation import incarnation
from squall.runtime.messaging.security import LinkKeys, LinkSecurity
from squall.runtime.messaging.zmq_transport import LOOPBACK, ZmqTransport
from squall.runtime.sampling import thread_stacks
from squall.runtime.worker import Worker

log = logging.getLogger("squall.worker")

# How often the control thread looks whether its parent is alive and a heartbeat is due (the
# master's messages, refused connections and the worker's failure wake it at once).
_CONTROL_TICK_SECS = 0.1


class _ComponentStartError(RuntimeError):
    """A component's open/prepare raised: the message names the component and the cause."""


class _ForwardingState(TopologyState):
    """Keeps errors until the next heartbeat carries them to the master."""

    def __init__(self) -> None:
        super().__init__()
        self.unsent: list[dict[str, Any]] = []

    def report_error(self, component: str, task: int, text: str, when: float | None = None,
                     count: int = 1) -> None:
        when = time.time() if when is None else when
        super().report_error(component, task, text, when, count)
        text = text[:schema.MAX_TEXT]
        with self._lock:
            last = self.unsent[-1] if self.unsent else None
            if last is not None and (last.component, last.error) == (component, text):  # one report for a run
                self.unsent[-1] = schema.ErrorReport(component, task, text, when, last.count + count)
            else:
                self.unsent.append(schema.ErrorReport(component, task, text, when, count))

    def take_unsent(self) -> list[schema.ErrorReport]:
        with self._lock:
            unsent, self.unsent = self.unsent, []
        return unsent


Peers = dict[int, tuple[str, int, int]]  # worker index -> (host, port, run)


def _figures(worker: Worker) -> list[schema.ExecutorReport]:
    return msgspec.convert(worker.executor_snapshots(), list[schema.ExecutorReport])


class _Killed(Exception):
    """The master said ``kill`` before this worker was ready."""


class _Control:
    def __init__(self, master: str, index: int, generation: int, keys: LinkKeys | None) -> None:
        self.deferred: list[schema.MasterMessage] = []  # commands that came while setting up
        self.context = zmq.Context()
        self.security = LinkSecurity(self.context, keys, f"worker {index}")
        self.socket = self.context.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.IDENTITY, f"{index}/{generation}".encode())
        self.socket.setsockopt(zmq.LINGER, 2000)
        self.security.client(self.socket)
        self.socket.connect(master)

    def send(self, message: schema.WorkerMessage) -> None:
        self.socket.send(schema.encode(message))

    def receive(self, timeout: float) -> schema.MasterMessage | None:
        """The next well-formed message within ``timeout``; malformed ones are logged and dropped."""
        deadline = time.monotonic() + timeout
        while self.socket.poll(max(0.0, deadline - time.monotonic()) * 1000):
            data = self.socket.recv()
            try:
                return schema.decode(data, schema.MasterMessage)
            except schema.MalformedMessage as e:
                log.warning("dropped a malformed message from the master: %s", e)
        return None

    def expect(self, kind: type[schema.MasterMessage], timeout: float, parent: int) -> Any:
        """The next message of type ``kind``; others are kept for later (``kill`` raises _Killed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self.receive(0.1)
            if message is not None:
                if isinstance(message, kind):
                    return message
                if isinstance(message, schema.Kill):
                    raise _Killed
                self.deferred.append(message)
            if os.getppid() != parent:
                raise SystemExit("the supervisor is gone")
        raise TimeoutError(f"no {kind.__name__.lower()!r} from the master within {timeout}s")

    def close(self) -> None:
        """Close the socket (after up to 2 s for what is queued) and the context: a Spark
        task's Python process lives on after its worker."""
        self.socket.close(linger=2000)
        self.security.close()
        self.context.term()


def run(master: str, index: int, keys: LinkKeys | None, generation: int = 0, host: str = LOOPBACK,
        exchange_peers: Callable[[tuple[str, int, int]], Peers] | None = None) -> int:
    """Be worker ``index`` of the topology whose master listens at ``master`` until the
    master says ``kill`` (return 0), the parent process dies or a thread of the worker dies
    (return 1); return 1 at once if the worker cannot start (the master hears the cause).
    ``keys`` are the topology's link keys (None: links not secure). Listens on ``host``.
    ``exchange_peers`` takes this worker's (host, port, run) and returns every
    worker's, blocking until all have called it; None: the master sends them."""
    parent = os.getppid()
    control = _Control(master, index, generation, keys)
    control.send(schema.Hello(os.getpid()))
    worker: Worker | None = None
    transport: ZmqTransport | None = None
    state = _ForwardingState()
    started = ready = False
    try:
        boot = control.expect(schema.Bootstrap, 60, parent)
        name, topology, conf, assignment, active, restarts = cloudpickle.loads(boot.payload)
        # the process is the worker's: its threads (executors, receive, transfer) hand the GIL
        # to each other this often
        sys.setswitchinterval(conf[Config.TOPOLOGY_WORKER_GIL_SWITCH_INTERVAL_SECS])
        transport = ZmqTransport(control.context, index, control.security, host,
                                 conf[Config.TOPOLOGY_RECEIVER_BUFFER_SIZE], incarnation(generation, restarts), name)
        # spouts start once every executor of this worker is ready (Storm's active worker): a
        # topology's own failure comes after the master heard this worker is ready
        worker = Worker(name, topology, conf, assignment, index, transport, state, False, restarts > 0)
        port = transport.bind(assignment.workers[index].port)
        control.send(schema.Bound(host, port))
        if exchange_peers is not None:
            transport.set_peers(exchange_peers((host, port, transport.run)))
        else:
            transport.set_peers(control.expect(schema.Peers, 60, parent).peers)
        worker.start()
        started = True
        failures = worker.wait_ready(conf[Config.SUPERVISOR_WORKER_START_TIMEOUT_SECS])
        if failures:
            executor, error = failures[0]
            raise _ComponentStartError(
                f"component {executor.component!r} (task {executor.task_ids[0]}) failed to start: "
                f"{type(error).__name__}: {error}"
            ) from error
        # what set-up made (modules, the topology, components) lives as long as the process:
        # out of the collector's sight, a full collection scans only what the tuples made
        gc.freeze()
    except _Killed:
        code = 0
    except BaseException as e:  # noqa: BLE001 - whatever it is, the master must hear the cause
        summary = (str(e) if isinstance(e, _ComponentStartError) else f"{type(e).__name__}: {e}").splitlines()
        control.send(schema.SetupFailed((summary or [type(e).__name__])[0][:schema.MAX_TEXT],
                                        "".join(traceback.format_exception(e))[:schema.MAX_TEXT]))
        code = 1
    else:
        ready = True
        control.send(schema.Ready())
        if active:
            worker.set_active(True)
        room_read, room_write = os.pipe()  # closed once no executor can signal on it
        os.set_blocking(room_write, False)
        worker.on_failure = lambda: _wake(room_write)
        code = _serve(control, worker, transport, state, conf, parent, room_read)
    if started:
        worker.stop()
    if ready:
        os.close(room_read)
        os.close(room_write)
    if transport is not None:
        transport.close()
    if ready and code == 0:
        control.send(schema.Stopped(_figures(worker), state.take_unsent()))
    control.close()
    return code


def _wake(room_write: int) -> None:
    """Wake the control thread (the worker failed)."""
    try:
        os.write(room_write, b"r")
    except BlockingIOError:
        pass  # the control thread has wake-ups pending already


def _serve(control: _Control, worker: Worker, transport: ZmqTransport, state: _ForwardingState,
           conf: dict[str, Any], parent: int, room_read: int) -> int:
    poller = zmq.Poller()
    poller.register(control.socket, zmq.POLLIN)
    poller.register(room_read, zmq.POLLIN)
    for monitor in control.security.monitors:
        poller.register(monitor, zmq.POLLIN)
    heartbeat_every = conf[Config.WORKER_HEARTBEAT_FREQUENCY_SECS]
    next_heartbeat = 0.0
    commands, control.deferred = control.deferred, []
    while True:
        wait = min(_CONTROL_TICK_SECS, next_heartbeat - time.monotonic())
        events = dict(poller.poll(max(0.0, wait) * 1000))
        if room_read in events:
            os.read(room_read, 4096)
        if control.socket in events:
            while (message := control.receive(0)) is not None:
                commands.append(message)
        for monitor in control.security.monitors:
            if monitor in events:
                control.security.log_refusals(monitor)
        for message in commands:
            if isinstance(message, schema.Kill):
                return 0
            if isinstance(message, (schema.Activate, schema.Deactivate)):
                worker.set_active(isinstance(message, schema.Activate))
            elif isinstance(message, schema.Peers):
                transport.set_peers(message.peers)
            elif isinstance(message, schema.Sample):
                worker.set_sampling(message.component, message.percent, message.secs)
            elif isinstance(message, schema.DumpStacks):
                control.send(schema.Stacks(thread_stacks()))
        commands.clear()
        if worker.failure is not None:
            # fail-fast: the master hears why, and the supervisor (or Spark) restarts this worker
            control.send(schema.Heartbeat(_figures(worker), state.take_unsent(), worker.take_samples()))
            return 1
        now = time.monotonic()
        if now >= next_heartbeat:
            next_heartbeat = now + heartbeat_every
            control.send(schema.Heartbeat(_figures(worker), state.take_unsent(), worker.take_samples()))
        if os.getppid() != parent:
            return 1  # the supervisor died: nobody would stop this worker


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="squall-worker")
    parser.add_argument("--master", required=True)
    parser.add_argument("--worker", type=int, required=True)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the supervisor's to handle
    keys = LinkKeys.from_json(sys.stdin.readline())  # from the supervisor, never from a socket
    return run(args.master, args.worker, keys)


if __name__ == "__main__":
    sys.exit(main())
