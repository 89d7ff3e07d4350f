"""The transport between worker processes: ZeroMQ over TCP.

A worker listens on its host's address: 127.0.0.1 for worker processes of this machine,
the executor's address inside a Spark task. Each worker binds a PULL socket on its worker port
(from ``supervisor.slots.ports``, or an ephemeral port when that one is taken or the list is
empty) on which its reading thread takes payloads, and connects a PUSH socket to every other
worker's port (used by its transfer path only). Every one of them is secured by the worker's
:class:`~squall.runtime.messaging.security.LinkSecurity`: only the topology's own workers get
through (another topology's traffic on a re-used port included). The credit a worker grants
the others travels in its payloads to them, and nothing but a greeting (see
:mod:`squall.runtime.messaging.backpressure`) is sent to a worker before it grants credit, so a
worker that starts or restarts is not flooded. ZeroMQ reconnects by itself when a peer restarts
on the same port and queues what is sent meanwhile (up to its high-water mark); a peer that
comes back on another port is reconnected, and greeted, when the master announces the new
address.

Payloads to a worker of the same host (the same network namespace) do not take ZeroMQ: they
go over a Unix socket that the workers' own threads write and read
(:mod:`squall.runtime.messaging.same_host`).

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
from typing import TYPE_CHECKING

import zmq

from squall.runtime.messaging.incarnation import Incarnations
from squall.runtime.messaging.same_host import SameHostLinks
from squall.runtime.messaging.security import LinkSecurity
from squall.runtime.messaging.transport import Received, Transport
from squall.utils.batch_queue import Bell

if TYPE_CHECKING:
    from squall.runtime.messaging.backpressure import CreditGrants, Credits

log = logging.getLogger("squall.transport")

LOOPBACK = "127.0.0.1"
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
        self._pollers: dict[Bell | None, zmq.Poller] = {}  # the reading thread's (see _wait_poller_now)
        self.port = 0
        # peers: worker index -> (host, port); written by the control thread
        self._peers: dict[int, tuple[str, int]] = {}
        self._peers_version = 0
        self._peers_lock = threading.Lock()
        self._push: dict[int, tuple[zmq.Socket, str]] = {}  # transfer thread only: socket, endpoint
        self._push_version = -1
        self._backlog: dict[int, collections.deque[bytes]] = {}  # transfer thread only
        self._grants: CreditGrants | None = None
        self._credits: Credits | None = None
        self._bell: Bell | None = None
        self._send_bell: Bell | None = None  # the transfer thread's, if it waits apart (wait_sendable)
        # the workers of this host: payloads to them bypass ZeroMQ (squall.runtime.messaging.same_host);
        # same_host False: every peer over TCP (tests of the TCP path)
        self._same_host = SameHostLinks(index, incarnation, topology, security.keys, self._link_ready, same_host)
        self._wait_version = -1

    # -- set-up (worker process main thread / control thread) -------------------------

    def bind(self, preferred_port: int | None) -> int:
        """Bind the worker port (``preferred_port``, or an ephemeral one if it is taken or
        None) and return it."""
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
        self._same_host.bind(self.host, self.port)  # before the peers hear of this address
        return self.port

    def register(self, worker: int, grants: CreditGrants, credits: Credits, bell: Bell) -> None:
        self._grants, self._credits, self._bell = grants, credits, bell
        self._wait_poller_now(bell)  # the bell's pipe made now, before any thread rings it

    def _link_ready(self) -> None:
        # a same-host link was made or accepted (another thread): the data path takes it up
        for bell in (self._bell, self._send_bell):
            if bell is not None:
                bell.ring()

    def _wait_poller_now(self, bell: Bell | None) -> zmq.Poller:
        """The reading thread's poller: the worker port, the same-host links and ``bell``."""
        if self._wait_version != self._same_host.version:
            self._wait_version = self._same_host.version
            self._pollers = {}
        poller = self._pollers.get(bell)
        if poller is None:
            poller = self._pollers[bell] = self._read_poller(bell)
        return poller

    def _read_poller(self, bell: Bell | None) -> zmq.Poller:
        """A new poller of what the reading thread reads, and ``bell``."""
        poller = zmq.Poller()
        poller.register(self._pull, zmq.POLLIN)
        for fd in self._same_host.fds():
            poller.register(fd, zmq.POLLIN)
        if bell is not None:
            poller.register(bell.fileno(), zmq.POLLIN)
        return poller

    def set_peers(self, peers: dict[int, tuple[str, int, int]]) -> None:
        """The other workers' addresses and runs (control thread). A peer new, or at a new
        address, is (re)connected and greeted: this run's grants, or a payload without any, go
        to it with the transfer path's next payloads. A new run of a peer is heard of at once:
        what its dead run left unread is dropped from now on (not only once a payload of the new
        run arrives), and the credit that run held is void."""
        addresses = {i: (host, port) for i, (host, port, _) in peers.items() if i != self._index}
        with self._peers_lock:
            changed = {i for i, addr in addresses.items() if self._peers.get(i) != addr}
            self._peers = addresses
            self._peers_version += 1
        self._same_host.set_peers(self._peers)
        if self._grants is None or self._credits is None:
            return
        for i, (_, _, run) in peers.items():
            if i != self._index:
                self._grants.heard(i, run)
                self._credits.update(i, run, None)
        if changed:
            self._grants.greet(changed)

    # -- data path ----------------------------------------------------------------------

    def _sync_push_sockets(self) -> None:
        with self._peers_lock:
            if self._push_version == self._peers_version:
                return
            peers, self._push_version = dict(self._peers), self._peers_version
        for i, (host, port) in peers.items():
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

    def wait(self, worker: int, bell: Bell, timeout: float, backlog: bool = False) -> None:
        if backlog:  # this thread sends too: what the backlog waits for wakes it as well
            poller = self._read_poller(bell)
            timeout = self._wait_sendable(poller, timeout)
        else:
            poller = self._wait_poller_now(bell)
        poller.poll(timeout * 1000)
        bell.disarm()

    def wait_sendable(self, bell: Bell, timeout: float) -> None:
        self._send_bell = bell
        poller = zmq.Poller()
        poller.register(bell.fileno(), zmq.POLLIN)
        poller.poll(self._wait_sendable(poller, timeout) * 1000)
        bell.disarm()

    def _wait_sendable(self, poller: zmq.Poller, timeout: float) -> float:
        """Register on ``poller`` what the backlogs wait for (a link writable again); return
        ``timeout``, or less if a same-host link must be tried again sooner."""
        for dest, backlog in self._backlog.items():
            if backlog and dest in self._push:
                poller.register(self._push[dest][0], zmq.POLLOUT)
        fds, retry = self._same_host.blocked()
        for fd in fds:
            poller.register(fd, zmq.POLLOUT)
        return timeout if retry is None else min(timeout, retry)

    def close(self) -> None:
        """Close every socket; the worker's threads must have stopped."""
        self._same_host.close()
        for sock, _ in self._push.values():
            sock.close(linger=0)
        self._pull.close(linger=0)
