"""Control of running topologies from another terminal, or another host: what ``squall list``,
``squall kill``, ``squall activate``, ``squall deactivate`` and ``squall rebalance`` talk to.

Storm's commands ask Nimbus, which knows every topology of the cluster. Squall has no
long-lived daemon: each ``squall run`` (or ``squall submit``) process is the Nimbus of its one
topology. So that process

* registers the topology in a :mod:`registry <squall.cluster.registry>` (this machine's, or the
  cluster's in ZooKeeper) before it is submitted, with its control address and keys, and
  removes the entry when it stops;
* answers control requests at that address, a ZeroMQ socket bound to 127.0.0.1 unless
  ``storm.local.hostname`` names another address (:class:`ControlServer`).

The commands find a topology's address in the registry and send it a request
(:func:`request`, :func:`kill`).

Only holders of the registry entry can control or read a topology: the control socket is a
ZeroMQ CURVE server (:mod:`squall.runtime.messaging.security`) with a key pair of its own, generated
when the topology registers and kept in its entry only (a private file, or a ZooKeeper node
under a digest ACL). A client without it is refused before any byte it sends is decoded.

On the wire, requests and replies are the control schemas of :mod:`squall.runtime.messaging.schema`:
``info``, ``activate``, ``deactivate``, ``kill`` (with ``wait_secs``), ``rebalance``, ``stacks``;
replies say ``ok``, or carry the ``error``. A request that does not fit is answered with an error and logged.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from types import TracebackType
from typing import Any, Self

import zmq

from squall.api.errors import NotAliveError
from squall.cluster.master import STACKS_TIMEOUT_SECS
from squall.cluster.registry import Registration, Registry
from squall.runtime.info import TopologyInfo
from squall.runtime.messaging import schema
from squall.runtime.messaging.security import LinkKeys, LinkSecurity

log = logging.getLogger("squall.control")

# How long a client waits for the reply to info, activate or deactivate: each is one call on
# the cluster, which returns at once.
REPLY_TIMEOUT_SECS = 5.0
# A kill's reply comes once the topology is gone: after its wait, stopping the workers may
# take a while more (worker processes get a grace period to run close/cleanup).
KILL_MARGIN_SECS = 30.0
# How often the server thread looks up from its socket to see whether it must close.
_POLL_MS = 100
# How long closing the server may take to deliver the replies to pending kills.
_LINGER_MS = 1000


class ControlError(RuntimeError):
    """A control request failed: the topology replied with an error, or did not reply in time."""


# -- the client --------------------------------------------------------------------------------


def request(registry: Registry, name: str, message: schema.ControlRequest,
            timeout: float = REPLY_TIMEOUT_SECS) -> schema.ControlReply:
    """Send ``message`` (e.g. ``schema.InfoRequest()``) to the topology ``name`` of ``registry``
    and return its reply, whose ``ok`` is true.

    Blocks until the reply comes, at most ``timeout`` seconds. Raises ``NotAliveError`` if
    no such topology is registered, ``ControlError`` if it replied with an error or did not
    reply in time."""
    entry = registry.lookup(name)
    context = zmq.Context()
    security = LinkSecurity(context, entry.keys, f"the control client of {name!r}")
    socket = context.socket(zmq.REQ)
    socket.setsockopt(zmq.LINGER, 0)  # an unanswered request must not hold up our exit
    try:
        security.client(socket)
        socket.connect(entry.address)
        socket.send(schema.encode(message))
        if not socket.poll(timeout * 1000):
            where = f" on {entry.host}" if entry.host else ""
            raise ControlError(f"topology {name!r} did not answer at {entry.address} within {timeout:g}s "
                               f"(its process: pid {entry.pid}{where})")
        try:
            reply = schema.decode(socket.recv(), schema.ControlReply)
        except schema.MalformedMessage as e:
            raise ControlError(f"topology {name!r} sent a malformed reply: {e}") from None
    finally:
        socket.close()
        security.close()
        context.term()
    if not reply.ok:
        raise ControlError(reply.error or f"topology {name!r}: the request failed")
    return reply


def info(registry: Registry, name: str) -> TopologyInfo:
    """The topology's ``topology_info`` (its status is KILLED while a kill is under way)."""
    reply = request(registry, name, schema.InfoRequest())
    if reply.info is None:
        raise ControlError(f"topology {name!r} answered without its info")
    return reply.info


def stacks(registry: Registry, name: str, worker: int | None = None) -> dict[str, str]:
    """Every thread's Python stack in the topology's worker on port ``worker`` (None: in each
    of its workers), by ``host:port`` (Storm UI's JStack, from a terminal)."""
    reply = request(registry, name, schema.StacksRequest(worker), timeout=REPLY_TIMEOUT_SECS + STACKS_TIMEOUT_SECS)
    return reply.stacks or {}


def activate(registry: Registry, name: str) -> None:
    """Activate the topology's spouts (``storm activate``)."""
    request(registry, name, schema.ActivateRequest())


def deactivate(registry: Registry, name: str) -> None:
    """Deactivate the topology's spouts: ``next_tuple`` is no longer called (``storm deactivate``)."""
    request(registry, name, schema.DeactivateRequest())


def kill(registry: Registry, name: str, wait_secs: float | None = None) -> None:
    """Kill the topology ``name`` as ``storm kill -w`` does: its spouts are deactivated,
    pending tuple trees get ``wait_secs`` (default: the topology's
    ``topology.message.timeout.secs``) to complete, then its workers are stopped.

    Returns once the topology is gone and its process has printed its summary. Raises as
    :func:`request` does."""
    if wait_secs is None:
        # the client's timeout depends on the wait, and only the topology knows its default
        wait_secs = request(registry, name, schema.InfoRequest()).message_timeout_secs
    request(registry, name, schema.KillRequest(wait_secs), timeout=wait_secs + KILL_MARGIN_SECS)


def rebalance(registry: Registry, name: str, wait_secs: float | None = None, num_workers: int | None = None,
              executors: dict[str, int] | None = None) -> None:
    """Rebalance the topology as ``storm rebalance`` does (see
    :meth:`~squall.cluster.nimbus.Nimbus.rebalance`): returns once the topology took the options,
    while it deactivates, waits and restarts its workers. Raises as :func:`request` does (an
    option at fault is named in the error)."""
    request(registry, name, schema.RebalanceRequest(wait_secs, num_workers, executors))


# -- the server --------------------------------------------------------------------------------


class ControlServer:
    """Registers the topology ``name`` running on ``cluster`` in ``registry`` and answers
    control requests for it, from entering the block until leaving it.

    Enter it *before* submitting the topology: entering raises ``AlreadyAliveError`` if
    another process runs a topology of that name, so nothing is submitted twice. Leaving it
    removes the registry entry, on every way out.

    Requests are served by a daemon thread, one at a time:

    * ``info``: ``{"info": cluster.topology_info(name), "message_timeout_secs": ...}``;
      while a kill is under way the status is ``KILLED``, as in Storm;
    * ``activate`` / ``deactivate``: the cluster's, refused while a kill is under way;
    * ``rebalance``: the cluster's ``start_rebalance`` (options checked, the rest on a thread);
    * ``kill``: sets :attr:`kill_requested` and :attr:`kill_wait_secs`, and that is all. The
      process serving the topology watches the event and does the kill itself, so that it
      can print its summary and exit normally; the reply is sent when the block is left,
      i.e. when the topology is gone. Meanwhile other requests are still answered (the
      socket is a ROUTER, not a REP, so that one reply can be held back); a second kill
      gets its reply at the same time as the first.

    A request that fails, or does not fit its schema, gets an error reply; the thread goes on
    serving. Only holders of the entry's keys get through (see the module's docstring);
    refused connections are logged.

    ``message_timeout_secs`` is the topology's ``topology.message.timeout.secs``: a kill's
    default wait. ``secure`` is its ``topology.messaging.secure``. ``host`` is the address the
    socket listens on and is registered at (its ``storm.local.hostname``; default 127.0.0.1).
    """

    def __init__(self, cluster: Any, name: str, mode: str, message_timeout_secs: float, registry: Registry,
                 secure: bool = True, host: str | None = None) -> None:
        self.cluster = cluster
        self.registry = registry
        self.host = host or "127.0.0.1"
        self.name = name
        self.mode = mode
        self.message_timeout_secs = message_timeout_secs
        self.kill_requested = threading.Event()
        self.kill_wait_secs = message_timeout_secs  # set with kill_requested
        self._keys = LinkKeys.generate() if secure else None
        self._context = zmq.Context()
        self._security = LinkSecurity(self._context, self._keys, f"the control socket of topology {name!r}")
        self._socket = self._context.socket(zmq.ROUTER)
        self._security.server(self._socket, "control port")
        self._closing = threading.Event()
        self._kill_clients: list[bytes] = []  # identities of the clients waiting for the kill
        self._outcome = schema.ControlReply(ok=True)  # the kill's reply, once the block is left
        self._thread = threading.Thread(target=self._serve, name=f"control-{name}", daemon=True)

    def __enter__(self) -> Self:
        port = self._socket.bind_to_random_port(f"tcp://{self.host}")  # this machine only, unless told
        keys = self._keys
        try:
            self.registry.register(Registration(self.name, os.getpid(), f"tcp://{self.host}:{port}", self.mode,
                                                time.time(), keys and keys.public, keys and keys.secret))
        except BaseException:
            self._close()
            raise
        self._thread.start()
        return self

    @property
    def keys(self) -> LinkKeys | None:
        """The control socket's key pair (None when the topology's links are not secure)."""
        return self._keys

    def publish_ui(self, url: str, token: str) -> None:
        """Record where the topology's UI is served, for ``squall ui``."""
        self.registry.publish_ui(self.name, url, token)

    def request_kill(self, wait_secs: float | None) -> None:
        """Ask the serving process to kill the topology after ``wait_secs`` (default: the message
        timeout), as ``squall kill`` does; a second request changes nothing."""
        if not self.kill_requested.is_set():
            self.kill_wait_secs = self.message_timeout_secs if wait_secs is None else wait_secs
            self.kill_requested.set()

    def _close(self) -> None:
        self._socket.close(linger=_LINGER_MS)  # long enough for the kill replies to go out
        self._security.close()
        self._context.term()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        # gone from the registry before any kill is answered: a client that sees its kill
        # return sees the name free
        self.registry.unregister(self.name)
        if exc is not None:
            self._outcome = schema.ControlReply(
                ok=False, error=f"topology {self.name!r} stopped on {type(exc).__name__}: {exc}")
        self._closing.set()
        # bounded: a thread stuck in a cluster call must not keep this process from exiting
        self._thread.join(_POLL_MS / 1000 + _LINGER_MS / 1000 + 5.0)

    def _serve(self) -> None:
        poller = zmq.Poller()
        poller.register(self._socket, zmq.POLLIN)
        for monitor in self._security.monitors:
            poller.register(monitor, zmq.POLLIN)
        try:
            while not self._closing.is_set():
                events = dict(poller.poll(_POLL_MS))
                for monitor in self._security.monitors:
                    if monitor in events:
                        self._security.log_refusals(monitor)
                if self._socket not in events:
                    continue
                frames = self._socket.recv_multipart()
                if len(frames) != 3 or frames[1] != b"":
                    log.warning("control socket of %r: dropped a message that is not a request", self.name)
                    continue  # not a REQ client's envelope: there is no one to answer
                client, _, payload = frames
                reply = self._handle(client, payload)
                if reply is not None:
                    self._socket.send_multipart([client, b"", schema.encode(reply)])
            for client in self._kill_clients:
                self._socket.send_multipart([client, b"", schema.encode(self._outcome)])
        finally:
            self._close()

    def _handle(self, client: bytes, payload: bytes) -> schema.ControlReply | None:
        """The reply to one request, or None for a kill (answered when leaving)."""
        try:
            message = schema.decode(payload, schema.ControlRequest)
        except schema.MalformedMessage as e:
            log.warning("control socket of %r: malformed request: %s", self.name, e)
            return schema.ControlReply(ok=False, error=f"topology {self.name!r}: malformed request: {e}")
        try:
            match message:
                case schema.KillRequest(wait_secs=wait_secs):
                    self.request_kill(wait_secs)
                    self._kill_clients.append(client)
                    return None
                case schema.InfoRequest():
                    info = self.cluster.topology_info(self.name)
                    if self.kill_requested.is_set():
                        info.status = "KILLED"
                    return schema.ControlReply(ok=True, info=info, message_timeout_secs=self.message_timeout_secs)
                case schema.StacksRequest(worker=port):
                    workers = self.cluster.topology_info(self.name).workers
                    if port is not None:
                        workers = [w for w in workers if w.port == port]
                        if not workers:
                            raise ValueError(f"topology {self.name!r} has no worker on port {port}")
                    return schema.ControlReply(ok=True, stacks={
                        f"{w.host or '127.0.0.1'}:{w.port}": self.cluster.dump_stacks(self.name, w.port)
                        for w in workers})
                case _:
                    if self.kill_requested.is_set():
                        raise NotAliveError(f"topology {self.name!r} is being killed")
                    if isinstance(message, schema.RebalanceRequest):
                        self.cluster.start_rebalance(self.name, message.wait_secs, message.num_workers,
                                                     message.executors)
                    elif isinstance(message, schema.ActivateRequest):
                        self.cluster.activate(self.name)
                    else:
                        self.cluster.deactivate(self.name)
                    return schema.ControlReply(ok=True)
        except NotAliveError as e:  # its message names the topology
            return schema.ControlReply(ok=False, error=str(e))
        except Exception as e:  # noqa: BLE001 - a bad request must not stop the server
            return schema.ControlReply(ok=False, error=f"topology {self.name!r}: {type(e).__name__}: {e}")
