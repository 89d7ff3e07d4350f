"""The transport between worker processes: ZeroMQ over TCP.

A worker listens on its host's address: 127.0.0.1 for worker processes of this machine,
the executor's address inside a Spark task. Each worker binds

* a PULL socket on its worker port (from ``supervisor.slots.ports``, or an ephemeral port
  when that one is taken or the list is empty) on which its receive thread takes payloads;
* a PUB socket on an ephemeral port (its backpressure port) on which it publishes the credit
  it grants the other workers (see :mod:`squall.runtime.messaging.backpressure`).

and connects a PUSH socket to every other worker's port (used by its transfer thread only)
and a SUB socket to every other worker's PUB (read by its control thread only). Every one
of them is secured by the worker's :class:`~squall.runtime.messaging.security.LinkSecurity`: only the
topology's own workers get through (another topology's traffic on a re-used port included),
and a credit message that does not fit its schema is logged and dropped. Nothing is sent to
a worker before it grants credit (workers publish their grants every 0.1 s and when they
hear of a new peer run; grants that change in between travel with the tuples), so a worker
that starts or restarts is not flooded. ZeroMQ
reconnects by itself when a peer restarts on the same port and queues what is sent
meanwhile (up to its high-water mark); a peer that comes back on another port is
reconnected when the master announces the new address.

Payloads to a worker of the same host (the same network namespace) do not take ZeroMQ: they
go over a Unix socket that the workers' own threads write and read
(:mod:`squall.runtime.messaging.same_host`); credit announcements still use the PUB/SUB ports.

A payload travels as two frames: a header naming the sending worker and its incarnation,
then the batch. What a dead run of a worker left unread is dropped once its new run is heard
from (see :mod:`squall.runtime.messaging.incarnation`).
"""

from __future__ import annotations

import collections
import errno
import logging
import struct
import threading
import time
from typing import TYPE_CHECKING, Any

import zmq

from squall.runtime.messaging import schema
from squall.runtime.messaging.incarnation import Incarnations
from squall.runtime.messaging.same_host import SameHostLinks
from squall.runtime.messaging.security import LinkSecurity
from squall.runtime.messaging.transport import Received, Transport
from squall.utils.batch_queue import Bell

if TYPE_CHECKING:
    from squall.runtime.messaging.backpressure import CreditGrants, Credits

log = logging.getLogger("squall.transport")

LOOPBACK = "127.0.0.1"
# How often a worker republishes its grants even when they did not change (a subscriber that
# just connected misses earlier messages).
_REPUBLISH_SECS = 0.1
# How soon changed grants are published (those the transfer path keeps until it has something to
# send with them, or a quarter window: a peer waiting for a few tuples' credit gets them then).
_CHANGED_SECS = 0.005
# The kernel's buffers of a link, each side: what a peer sends while this worker's thread is
# busy elsewhere waits there (and in ZeroMQ's high-water marks); credit bounds it, and they are
# kept small (the kernel's default on loopback grows to megabytes).
_SOCKET_BUFFER_BYTES = 64 * 1024
# A payload's first frame: the sending worker's index and incarnation.
PAYLOAD_HEADER = struct.Struct("<IQ")


def endpoint(host: str, port: int) -> str:
    return f"tcp://{host}:{port}"


class ZmqTransport(Transport):
    def __init__(self, context: zmq.Context, index: int, security: LinkSecurity, host: str = LOOPBACK,
                 buffered_payloads: int = 8, incarnation: int = 0, topology: str = "",
                 same_host: bool = True) -> None:
        self._context = context
        self._index = index
        self.run = incarnation
        self._header = PAYLOAD_HEADER.pack(index, incarnation)
        self._incarnations = Incarnations(index)
        self._security = security
        self.host = host
        # payloads ZeroMQ holds per link on each side (topology.receiver.buffer.size): past
        # that, a sender keeps a backlog (bounded by its credit)
        self._hwm = buffered_payloads
        self._pull = context.socket(zmq.PULL)
        self._pull.setsockopt(zmq.RCVHWM, buffered_payloads)
        self._pull.setsockopt(zmq.RCVBUF, _SOCKET_BUFFER_BYTES)
        security.server(self._pull, "worker port")
        self._pub = context.socket(zmq.PUB)
        security.server(self._pub, "backpressure port")
        self._sub = context.socket(zmq.SUB)
        security.client(self._sub)
        self._sub.setsockopt(zmq.SUBSCRIBE, b"")
        self._pollers: dict[Bell | None, zmq.Poller] = {}  # the reading thread's (see _wait_poller_now)
        self.port = 0
        self.bp_port = 0
        # peers: worker index -> (host, port, backpressure port); written by the control thread
        self._peers: dict[int, tuple[str, int, int]] = {}
        self._peers_version = 0
        self._peers_lock = threading.Lock()
        self._push: dict[int, tuple[zmq.Socket, str]] = {}  # transfer thread only: socket, endpoint
        self._push_version = -1
        self._backlog: dict[int, collections.deque[bytes]] = {}  # transfer thread only
        self._sub_endpoints: dict[int, str] = {}  # control thread only
        self._grants: CreditGrants | None = None
        self._credits: Credits | None = None
        self._bell: Bell | None = None
        # the workers of this host: payloads to them bypass ZeroMQ (squall.runtime.messaging.same_host);
        # same_host False: every peer over TCP (tests of the TCP path)
        self._same_host = SameHostLinks(index, incarnation, topology, security.keys, self._link_ready, same_host)
        self._wait_version = -1
        self._published_version = (-1, -1)  # the grants' heard_version and version
        self._published_at = 0.0

    # -- set-up (worker process main thread / control thread) -------------------------

    def bind(self, preferred_port: int | None) -> tuple[int, int]:
        """Bind the worker port (``preferred_port``, or an ephemeral one if it is taken or
        None) and the backpressure port; return both."""
        self.port = 0
        if preferred_port:
            try:
                self._pull.bind(endpoint(self.host, preferred_port))
                self.port = preferred_port
            except zmq.ZMQError as e:
                if e.errno != errno.EADDRINUSE:
                    raise
        if not self.port:
            self.port = self._pull.bind_to_random_port(f"tcp://{self.host}")
        self.bp_port = self._pub.bind_to_random_port(f"tcp://{self.host}")
        self._same_host.bind(self.host, self.port)  # before the peers hear of this address
        return self.port, self.bp_port

    def register(self, worker: int, grants: CreditGrants, credits: Credits, bell: Bell) -> None:
        self._grants, self._credits, self._bell = grants, credits, bell
        self._wait_poller_now(bell)  # the bell's pipe made now, before any thread rings it

    def _link_ready(self) -> None:
        # a same-host link was made or accepted (another thread): the data path takes it up
        if self._bell is not None:
            self._bell.ring()

    def _wait_poller_now(self, bell: Bell | None) -> zmq.Poller:
        """The reading thread's poller: the worker port, the same-host links and ``bell``."""
        if self._wait_version != self._same_host.version:
            self._wait_version = self._same_host.version
            self._pollers = {}
        poller = self._pollers.get(bell)
        if poller is None:
            poller = self._pollers[bell] = zmq.Poller()
            poller.register(self._pull, zmq.POLLIN)
            for fd in self._same_host.fds():
                poller.register(fd, zmq.POLLIN)
            if bell is not None:
                poller.register(bell.fileno(), zmq.POLLIN)
        return poller

    def set_peers(self, peers: dict[int, tuple[str, int, int]]) -> None:
        """The other workers' addresses (control thread). A peer whose address changed is
        reconnected (it restarted: its new run announces itself)."""
        with self._peers_lock:
            changed = {i for i, addr in peers.items() if self._peers.get(i) != addr}
            self._peers = {i: tuple(addr) for i, addr in peers.items() if i != self._index}
            self._peers_version += 1
        self._same_host.set_peers({i: (host, port) for i, (host, port, _) in self._peers.items()})
        for i in changed:
            old = self._sub_endpoints.pop(i, None)
            if old is not None:
                self._sub.disconnect(old)
        for i, (host, _, bp_port) in self._peers.items():
            if i not in self._sub_endpoints:
                self._sub_endpoints[i] = endpoint(host, bp_port)
                self._sub.connect(self._sub_endpoints[i])

    # -- data path ----------------------------------------------------------------------

    def _sync_push_sockets(self) -> None:
        with self._peers_lock:
            if self._push_version == self._peers_version:
                return
            peers, self._push_version = dict(self._peers), self._peers_version
        for i, (host, port, _) in peers.items():
            address = endpoint(host, port)
            current = self._push.get(i)
            if current is not None and current[1] == address:
                continue
            if current is not None:
                current[0].close(linger=0)
            sock = self._context.socket(zmq.PUSH)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SNDHWM, self._hwm)
            sock.setsockopt(zmq.SNDBUF, _SOCKET_BUFFER_BYTES)
            self._security.client(sock)
            sock.connect(address)
            self._push[i] = (sock, address)

    def send(self, dest_worker: int, payload: bytes, source_worker: int) -> None:
        """Send from the transfer thread, without waiting: what ZeroMQ cannot take now (the
        peer is down, or far behind) waits in that peer's backlog, so other peers are not held
        up. Backlogs are bounded by credit: a peer that restarts is sent nothing until it
        grants some."""
        if self._same_host.links_to(dest_worker):
            self._same_host.send(dest_worker, payload)
            return
        self._sync_push_sockets()
        backlog = self._backlog.get(dest_worker)
        if backlog:
            backlog.append(payload)
            self.send_backlog()
        elif not self._try_send(dest_worker, payload):
            self._backlog.setdefault(dest_worker, collections.deque()).append(payload)

    def send_backlog(self) -> bool:
        """Retry the backlogs (transfer thread); True while some remain."""
        self._sync_push_sockets()
        pending = self._same_host.flush()
        for dest, backlog in self._backlog.items():
            while backlog and self._try_send(dest, backlog[0]):
                backlog.popleft()
            pending = pending or bool(backlog)
        return pending

    def _try_send(self, dest_worker: int, payload: bytes) -> bool:
        target = self._push.get(dest_worker)
        if target is None:
            return False
        try:
            # copied: cheaper than a zero-copy frame for payloads this size; both frames or neither
            target[0].send_multipart((self._header, payload), zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def receive(self, worker: int, timeout: float) -> list[Received]:
        payloads: list[Received] = []
        if timeout:
            self._wait_poller_now(None).poll(timeout * 1000)
        self._same_host.receive(payloads)
        if payloads:
            admit = self._incarnations.admit
            payloads = [p for p in payloads if admit(p[0], p[1])]
        # the socket's own flags say whether anything waits (a poll costs more, and this is
        # called every round of a busy worker)
        if not self._pull.getsockopt(zmq.EVENTS) & zmq.POLLIN:
            return payloads
        # at most what ZeroMQ buffers: a peer sending as fast as this reads does not keep the
        # reader here
        for _ in range(2 * self._hwm):
            try:
                frames = self._pull.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            if len(frames) != 2 or len(frames[0]) != PAYLOAD_HEADER.size:
                log.warning("worker %d dropped a malformed payload (%d frames)", self._index, len(frames))
                continue
            sender, run = PAYLOAD_HEADER.unpack(frames[0])
            if self._incarnations.admit(sender, run):
                payloads.append((sender, run, frames[1]))
        return payloads

    def wait(self, worker: int, bell: Bell, timeout: float) -> None:
        self._wait_poller_now(bell).poll(timeout * 1000)
        bell.disarm()

    # -- credit (control thread) ------------------------------------------------------------

    def publish_credit(self) -> None:
        """Publish this worker's grants (control thread, every few milliseconds): at once if it
        heard of a new peer run, else if they changed and were not published for a tick (what
        the transfer path did not send yet), else every 0.1 s."""
        if not self._peers or self._grants is None:
            return  # a single worker: nobody to tell
        now = time.monotonic()
        versions = (self._grants.heard_version, self._grants.version)
        since = now - self._published_at
        if (versions[0] != self._published_version[0] or since >= _REPUBLISH_SECS
                or (versions[1] != self._published_version[1] and since >= _CHANGED_SECS)):
            grants = {peer: schema.CreditGrant(run, credit) for peer, (run, credit) in self._grants.state().items()}
            self._pub.send(schema.encode(schema.Credit(self._index, self.run, grants)))
            self._published_version, self._published_at = versions, now

    def announce(self) -> None:
        """Publish this run without granting anything (every 0.1 s; while the worker starts):
        the peers learn of it and grant it credit, so that its executors may send as they start
        up (a restarted worker's request for a rollback); nothing is sent to it before
        :meth:`publish_credit` grants credit, once it is ready."""
        now = time.monotonic()
        if self._peers and now - self._published_at >= _REPUBLISH_SECS:
            self._pub.send(schema.encode(schema.Credit(self._index, self.run, {})))
            self._published_at = now

    def read_credit(self) -> None:
        """Take the peers' announcements: their runs, and the credit they grant this worker."""
        while True:
            try:
                data = self._sub.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message = schema.decode(data, schema.Credit)
            except schema.MalformedMessage as e:
                log.warning("worker %d dropped a malformed credit message: %s", self._index, e)
                continue
            if message.worker in self._peers and self._grants is not None and self._credits is not None:
                self._grants.heard(message.worker, message.run)
                mine = message.grants.get(self._index)
                self._credits.update(message.worker, message.run, None if mine is None else (mine.run, mine.credit))

    @property
    def sub_socket(self) -> Any:
        return self._sub

    def close(self) -> None:
        """Close every socket; the worker's threads must have stopped."""
        self._same_host.close()
        for sock, _ in self._push.values():
            sock.close(linger=0)
        for sock in (self._pull, self._pub, self._sub):
            sock.close(linger=0)
