"""The link between worker processes of one host: Unix stream sockets, driven by the workers' own threads.

ZeroMQ moves a payload between two workers through two I/O threads (the sender's and the
receiver's), each woken per message, and CURVE seals every frame: on one host that costs more
CPU than the tuples it carries. Here the worker's transfer path writes a payload straight into a
Unix socket and its reading thread (the cooperative thread, or the receive thread) reads it
straight out: no thread in between, and no wake-up unless the reader sleeps in its poll (the
kernel wakes only a waiting reader). ``benchmarks/crossing.py`` measures it beside ZeroMQ.

**Who is on this host.** A worker listens on ``<tmp>/squall-<uid>/<netns>/<topology>-<host>-<port>.sock``
(:func:`socket_path`), named after its TCP address and the network namespace it runs in; a
worker that starts removes the files no socket is bound to any more (left by killed workers). A
peer is on this host when that file exists in this worker's namespace directory (two network
namespaces are two hosts, as on the multi-host test bed, even with one file system). Nothing
to configure: a peer without the file is reached over TCP, for good (a peer address is linked
one way only, so one sender's payloads to one receiver never take two paths and overtake each
other).

**Who may attach.** The directory is the user's own (0700, checked: owned by this user, not a
link), the socket file 0600; the acceptor checks the peer's user (``SO_PEERCRED``), then both
sides prove they hold the topology's secret without sending it: HMAC-SHA256 over both sides'
random nonces, keyed with a key derived from the topology's link keys
(:func:`link_key`). Nothing a peer sends is decoded before it has proven it, and what it sends
afterwards is only ever decoded as :mod:`squall.runtime.messaging.tuple_batch` payloads (no
pickle). The handshake names the sender's worker index and incarnation, so payloads carry no
header.

**Framing and faults.** A payload travels as a 4-byte length and the bytes. A sender killed
mid-payload leaves a partial frame and then end-of-file: the reader drops the partial frame with
the connection, so no corrupt batch is ever delivered; a frame longer than
:data:`MAX_PAYLOAD` is a protocol fault: logged, the connection dropped. A receiver killed or
restarted breaks the link: the sender drops what it had not written (the dead run's credit is void
with it, see :mod:`squall.runtime.messaging.backpressure`) and connects again, every
:data:`RETRY_SECS`, keeping new payloads meanwhile (bounded by the credit the new run grants).

**Threads.** Handshakes may wait on a peer, so the data path never makes them: a worker's
acceptor thread answers incoming connections and its connector thread makes outgoing ones (two
threads, so that two workers linking to each other at once never wait on each other). They hand
finished links over through deques and ring the data path's bell. Neither dies of a peer's fault:
every connection's error is logged and that connection closed.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import hmac
import itertools
import logging
import os
import queue
import re
import select
import socket
import struct
import tempfile
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from squall.runtime.messaging.security import LinkKeys

log = logging.getLogger("squall.transport")

_MAGIC = b"SQLHOST1"
_NONCE = 16
_MAC = 32
_IDENTITY = struct.Struct("<IQ")  # the sending worker's index and incarnation
_CLIENT_HELLO = len(_MAGIC) + _NONCE + _IDENTITY.size + _MAC
_FRAME = struct.Struct("<I")
#: the largest payload a link carries (a longer frame is a protocol fault)
MAX_PAYLOAD = 64 << 20
#: how long a handshake may take before either side gives up on that connection
HANDSHAKE_SECS = 2.0
#: how soon a sender tries again to link to a peer that could not be reached
RETRY_SECS = 0.1
# what the reader asks of the socket at once; a larger frame grows its buffer
_READ_BYTES = 256 * 1024
# reads per connection per receive call: a peer sending as fast as this worker reads does not
# keep the reader on its link
_READS_PER_CALL = 4
# buffers one sendmsg writes at most (well under the kernel's IOV_MAX of 1024)
_IOV_MAX = 64
_PEERCRED = struct.Struct("3i")  # pid, uid, gid
# how often the acceptor looks at its stop flag
_STOP_POLL_SECS = 0.2


def _namespace_dir() -> str | None:
    """This user's directory for this network namespace's sockets, made if needed; None (with a
    warning) when it cannot be trusted or made: the workers then talk over TCP only."""
    try:
        netns = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return None
    base = os.path.join(tempfile.gettempdir(), f"squall-{os.getuid()}")
    try:
        for path in (base, os.path.join(base, str(netns))):
            try:
                os.mkdir(path, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(path)
            if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
                log.warning("not linking workers of this host through %s: it is not a directory of this user's "
                            "alone (mode %o, owner %d); they talk over TCP", path, st.st_mode & 0o777, st.st_uid)
                return None
    except OSError as e:
        log.warning("not linking workers of this host through %s (%s); they talk over TCP", base, e)
        return None
    return os.path.join(base, str(netns))


def topology_tag(topology: str, keys: LinkKeys | None) -> str:
    """A file-name-safe tag of the topology (a digest of its name and public key, then the name):
    two topologies' workers never reach each other's sockets by name."""
    seed = f"{topology}\0{'' if keys is None else keys.public}".encode()
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", topology)[:24]
    return hashlib.sha256(seed).hexdigest()[:12] + (f"-{name}" if name else "")


def _remove_stale_sockets(directory: str) -> None:
    """Remove the socket files in ``directory`` that no socket is bound to any more (a worker
    killed with ``kill -9`` leaves its file): the kernel lists this network namespace's bound
    Unix sockets in /proc/net/unix, each from the moment it is bound."""
    try:
        # the files first: one made after the list was read would be taken for a dead one (its
        # peers would then reach its worker over TCP, still correct)
        entries = list(os.scandir(directory))
        with open("/proc/net/unix") as f:  # Num RefCount Protocol Flags Type St Inode [Path]
            bound = {fields[7] for fields in (line.rstrip("\n").split(None, 7) for line in f) if len(fields) == 8}
    except OSError:
        return
    for entry in entries:
        if entry.name.endswith(".sock") and entry.path not in bound:
            try:
                os.unlink(entry.path)
            except OSError:
                pass  # another worker removed it first


def socket_path(directory: str, tag: str, host: str, port: int) -> str:
    return os.path.join(directory, f"{tag}-{host}-{port}.sock")


def link_key(topology: str, keys: LinkKeys | None) -> bytes:
    """The handshake's HMAC key: derived from the topology's secret link key (never sent); with
    links not secure (``topology.messaging.secure`` false) from the topology's name, which
    proves only which topology a peer belongs to."""
    secret = topology if keys is None else keys.secret
    return hashlib.sha256(b"squall same-host link\0" + secret.encode()).digest()


def _mac(key: bytes, role: bytes, *parts: bytes) -> bytes:
    return hmac.new(key, role + b"".join(parts), hashlib.sha256).digest()


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed during the handshake")
        data += chunk
    return data


class HandshakeError(ConnectionError):
    """A peer that did not prove it belongs to the topology, or broke the protocol."""


def accept_handshake(sock: socket.socket, key: bytes) -> tuple[int, int]:
    """The listening side's handshake on a new connection (blocking, ``HANDSHAKE_SECS`` at most):
    the peer's (worker index, incarnation) once it proved it holds ``key``; raises
    :class:`HandshakeError` (or ``OSError``) otherwise."""
    sock.settimeout(HANDSHAKE_SECS)
    _, uid, _ = _PEERCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEERCRED.size))
    if uid != os.getuid():
        raise HandshakeError(f"a process of user {uid}, not this worker's")
    server_nonce = os.urandom(_NONCE)
    sock.sendall(_MAGIC + server_nonce)
    hello = _recv_exact(sock, _CLIENT_HELLO)
    magic, rest = hello[:len(_MAGIC)], hello[len(_MAGIC):]
    client_nonce, identity, mac = rest[:_NONCE], rest[_NONCE:_NONCE + _IDENTITY.size], rest[-_MAC:]
    if magic != _MAGIC or not hmac.compare_digest(mac, _mac(key, b"c", server_nonce, client_nonce, identity)):
        raise HandshakeError("it did not prove it holds the topology's key")
    sock.sendall(_mac(key, b"s", client_nonce, server_nonce))
    sock.setblocking(False)
    index, run = _IDENTITY.unpack(identity)
    return index, run


def connect(path: str, key: bytes, index: int, run: int) -> socket.socket:
    """Connect to the worker listening at ``path`` as ``run`` of worker ``index`` (blocking,
    ``HANDSHAKE_SECS`` at most): a non-blocking socket once both sides proved they hold ``key``;
    raises ``OSError`` (:class:`HandshakeError` for a listener that could not prove it)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(HANDSHAKE_SECS)
        sock.connect(path)
        greeting = _recv_exact(sock, len(_MAGIC) + _NONCE)
        if greeting[:len(_MAGIC)] != _MAGIC:
            raise HandshakeError("not a Squall worker's link")
        server_nonce, client_nonce = greeting[len(_MAGIC):], os.urandom(_NONCE)
        identity = _IDENTITY.pack(index, run)
        sock.sendall(_MAGIC + client_nonce + identity + _mac(key, b"c", server_nonce, client_nonce, identity))
        if not hmac.compare_digest(_recv_exact(sock, _MAC), _mac(key, b"s", client_nonce, server_nonce)):
            raise HandshakeError("the listener did not prove it holds the topology's key")
        sock.setblocking(False)
        return sock
    except BaseException:
        sock.close()
        raise


class InboundLink:
    """A connection from one run of a peer worker, read by one thread (non-blocking)."""

    __slots__ = ("sock", "sender", "run", "_buffer", "_view", "_filled")

    def __init__(self, sock: socket.socket, sender: int, run: int) -> None:
        self.sock = sock
        self.sender = sender
        self.run = run
        self._buffer = bytearray(_READ_BYTES)
        self._view = memoryview(self._buffer)
        self._filled = 0

    def fileno(self) -> int:
        return self.sock.fileno()

    def read(self, out: list[bytes]) -> bool:
        """Append the whole payloads that arrived to ``out``, without waiting; False once the
        link is closed (end of file, an error or a protocol fault: a partial payload is dropped
        with it)."""
        for _ in range(_READS_PER_CALL):
            try:
                n = self.sock.recv_into(self._view[self._filled:])
            except BlockingIOError:
                return True
            except OSError as e:
                log.info("link from worker %d (run %d) broke: %s", self.sender, self.run, e)
                return False
            if n == 0:
                return False
            self._filled += n
            if not self._frames(out):
                return False
            if self._filled < len(self._buffer):
                return True  # the socket had no more than that
        return True

    def _frames(self, out: list[bytes]) -> bool:
        buffer, filled, offset = self._buffer, self._filled, 0
        while filled - offset >= 4:
            (size,) = _FRAME.unpack_from(buffer, offset)
            if size > MAX_PAYLOAD:
                log.warning("link from worker %d (run %d) sent a frame of %d bytes, over %d: dropped the link",
                            self.sender, self.run, size, MAX_PAYLOAD)
                return False
            end = offset + 4 + size
            if end > filled:
                if end - offset > len(buffer):  # a payload larger than the buffer: make room for it
                    self._grow(end - offset)
                    buffer = self._buffer
                break
            out.append(self._view[offset + 4:end].tobytes())  # one copy: the buffer is reused
            offset = end
        if offset:
            rest = filled - offset
            buffer[:rest] = buffer[offset:filled]
            self._filled = rest
        return True

    def _grow(self, size: int) -> None:
        grown = bytearray(size)
        grown[:self._filled] = self._buffer[:self._filled]
        self._buffer, self._view = grown, memoryview(grown)

    def close(self) -> None:
        self._view.release()
        self.sock.close()


class OutboundLink:
    """A connection to one run of a peer worker, written by the transfer thread only
    (non-blocking: what the socket cannot take now waits here, bounded by credit)."""

    __slots__ = ("sock", "path", "_pending")

    def __init__(self, sock: socket.socket, path: str) -> None:
        self.sock = sock
        self.path = path
        self._pending: collections.deque[memoryview] = collections.deque()

    def send(self, payload: bytes) -> None:
        """Write ``payload`` (or keep it for :meth:`flush`); raises ``OSError`` when the link broke."""
        header = _FRAME.pack(len(payload))
        if self._pending:
            self._pending.append(memoryview(header))
            self._pending.append(memoryview(payload))
            self.flush()
            return
        try:
            sent = self.sock.sendmsg((header, payload))
        except BlockingIOError:
            sent = 0
        if sent < len(header) + len(payload):
            if sent < len(header):
                self._pending.append(memoryview(header)[sent:])
                self._pending.append(memoryview(payload))
            else:
                self._pending.append(memoryview(payload)[sent - len(header):])

    @property
    def busy(self) -> bool:
        """Whether part of what was sent still waits to be written."""
        return bool(self._pending)

    def flush(self) -> bool:
        """Write what waits; True while some still does. Raises ``OSError`` when the link broke."""
        pending = self._pending
        while pending:
            try:
                sent = self.sock.sendmsg(list(itertools.islice(pending, _IOV_MAX)))
            except BlockingIOError:
                return True
            while sent:
                head = pending[0]
                if sent >= len(head):
                    sent -= len(head)
                    pending.popleft()
                else:
                    pending[0] = head[sent:]
                    sent = 0
        return False

    def close(self) -> None:
        self._pending.clear()
        self.sock.close()


class SameHostLinks:
    """A worker's links to the workers of its host (see the module's docstring).

    Call :meth:`bind` once, from the thread that sets the worker up; :meth:`set_peers` from the
    control thread; :meth:`send` and :meth:`flush` from the transfer path's thread;
    :meth:`receive` and :meth:`fds` from the reading thread; :meth:`close` once those stopped.
    ``on_link()`` is called by the acceptor or connector thread when a link is ready (wake the data path).
    """

    def __init__(self, index: int, run: int, topology: str, keys: LinkKeys | None,
                 on_link: Callable[[], None] = lambda: None, enabled: bool = True) -> None:
        self._index = index
        self._run = run
        self._key = link_key(topology, keys)
        self._tag = topology_tag(topology, keys)
        self._on_link = on_link
        self._directory = _namespace_dir() if enabled else None
        self._listener: socket.socket | None = None
        self.path: str | None = None
        self._acceptor: threading.Thread | None = None
        self._connector: threading.Thread | None = None
        self._stopping = False
        # control thread -> transfer thread: peer -> its socket's path (replaced whole)
        self._plan: dict[int, str] = {}
        # transfer thread
        self._out: dict[int, OutboundLink] = {}
        self._waiting: dict[int, collections.deque[bytes]] = {}  # payloads for peers not linked yet
        self._next_try: dict[int, float] = {}
        self._asked: set[int] = set()  # peers the connector thread is linking to
        # transfer thread -> connecting thread: (peer, path), None to stop; connecting thread -> transfer
        # thread: (peer, path, socket or None)
        self._to_connect: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()
        self._connected: collections.deque[tuple[int, str, socket.socket | None]] = collections.deque()
        # acceptor thread -> reading thread
        self._accepted: collections.deque[InboundLink] = collections.deque()
        self._in: list[InboundLink] = []  # reading thread
        #: grows when the reading thread's links change (its poller is rebuilt)
        self.version = 0

    # -- set-up ---------------------------------------------------------------------------

    def bind(self, host: str, port: int) -> bool:
        """Listen for this host's workers, beside the TCP address ``host:port``; False (TCP only)
        when this host gives no private directory or the path does not fit a socket's name."""
        if self._directory is None:
            return False
        path = socket_path(self._directory, self._tag, host, port)
        _remove_stale_sockets(self._directory)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            try:
                os.unlink(path)  # a killed run's of this address: no live worker holds it, as this one holds the port
            except FileNotFoundError:
                pass
            listener.bind(path)
            os.chmod(path, 0o600)
            listener.listen(64)
        except OSError as e:
            listener.close()
            log.warning("worker %d: no same-host link at %s (%s); it talks over TCP", self._index, path, e)
            return False
        listener.setblocking(False)
        self._listener, self.path = listener, path
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"worker-{self._index}-link-accept",
                                          daemon=True)
        self._acceptor.start()
        return True

    def set_peers(self, peers: dict[int, tuple[str, int]]) -> set[int]:
        """Which of ``peers`` (index -> TCP host and port) are on this host: those whose socket
        file is in this namespace's directory. Returns them; the others are TCP's."""
        if self._directory is None:
            return set()
        plan = dict(self._plan)
        for peer, (host, port) in peers.items():
            path = socket_path(self._directory, self._tag, host, port)
            if peer == self._index:
                continue
            if plan.get(peer) != path:
                plan.pop(peer, None)
                if os.path.exists(path):
                    plan[peer] = path
        self._plan = plan
        return set(plan)

    # -- the transfer thread ----------------------------------------------------------------

    def links_to(self, peer: int) -> bool:
        return peer in self._plan

    def send(self, peer: int, payload: bytes) -> None:
        """Write ``payload`` to ``peer`` (one of :meth:`set_peers`'s), or keep it until the link is up."""
        link = self._out.get(peer)
        if link is not None and link.path == self._plan.get(peer) and not self._waiting.get(peer):
            try:
                link.send(payload)
                return
            except OSError as e:
                self._broken(peer, link, e)
        self._waiting.setdefault(peer, collections.deque()).append(payload)
        self.flush()

    def flush(self) -> bool:
        """Write what waits, make the links it waits for; True while something still waits."""
        self._take_connected()
        waiting = False
        for peer, link in list(self._out.items()):
            if link.path != self._plan.get(peer):
                link.close()  # the peer moved (restarted elsewhere): its next run is linked anew
                del self._out[peer]
                continue
            try:
                queued = self._waiting.get(peer)
                while queued and not link.busy:
                    link.send(queued.popleft())
                waiting = link.flush() or bool(queued) or waiting
            except OSError as e:
                self._broken(peer, link, e)
        now = time.monotonic()
        for peer, queued in self._waiting.items():
            if queued and peer not in self._out:
                path = self._plan.get(peer)
                if path is None:  # the peer moved where TCP reaches it: this was for its dead run
                    queued.clear()
                    continue
                waiting = True
                if peer not in self._asked and now >= self._next_try.get(peer, 0.0):
                    self._asked.add(peer)
                    if self._connector is None:
                        self._connector = threading.Thread(target=self._connect_loop, daemon=True,
                                                           name=f"worker-{self._index}-link-connect")
                        self._connector.start()
                    self._to_connect.put((peer, path))
        return waiting

    def blocked(self) -> tuple[list[int], float | None]:
        """What :meth:`flush` waits for: the sockets that must become writable, and the seconds
        until it must try again to link to a peer (None: no retry due; a link being made calls
        ``on_link``)."""
        fds = [link.sock.fileno() for link in self._out.values() if link.busy]
        now, retry = time.monotonic(), None
        for peer, queued in self._waiting.items():
            if queued and peer not in self._out and peer not in self._asked:
                due = max(0.0, self._next_try.get(peer, 0.0) - now)
                retry = due if retry is None else min(retry, due)
        return fds, retry

    def _broken(self, peer: int, link: OutboundLink, error: OSError) -> None:
        # the receiver died: what it had not read died with it, as what this worker had not written
        log.info("worker %d: the link to worker %d broke (%s); linking again", self._index, peer, error)
        link.close()
        del self._out[peer]
        self._waiting.pop(peer, None)
        self._next_try[peer] = time.monotonic() + RETRY_SECS

    def _take_connected(self) -> None:
        while self._connected:
            peer, path, sock = self._connected.popleft()
            self._asked.discard(peer)
            if sock is None:
                self._next_try[peer] = time.monotonic() + RETRY_SECS
            elif path != self._plan.get(peer):
                sock.close()
            else:
                old = self._out.pop(peer, None)
                if old is not None:
                    old.close()
                self._out[peer] = OutboundLink(sock, path)

    # -- the reading thread -----------------------------------------------------------------

    def receive(self, out: list[tuple[int, int, bytes]]) -> None:
        """Append every whole payload that arrived, as (sender, its run, payload), without waiting."""
        if self._accepted:
            while self._accepted:
                self._in.append(self._accepted.popleft())
            self.version += 1
        closed = None
        for link in self._in:
            payloads: list[bytes] = []
            alive = link.read(payloads)
            sender, run = link.sender, link.run
            for payload in payloads:
                out.append((sender, run, payload))
            if not alive:
                closed = closed or []
                closed.append(link)
        if closed:
            for link in closed:
                self._in.remove(link)
                link.close()
            self.version += 1

    def fds(self) -> list[int]:
        """The reading thread's sockets, to poll (with :meth:`receive` called when one is readable)."""
        return [link.fileno() for link in self._in]

    # -- the acceptor and connector threads ----------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stopping:
            try:
                if select.select([self._listener], [], [], _STOP_POLL_SECS)[0]:
                    self._accept()
            except Exception:  # noqa: BLE001 - a peer's fault must not end the links of this worker
                if not self._stopping:
                    log.exception("worker %d: the same-host link acceptor hit an error; it goes on", self._index)

    def _connect_loop(self) -> None:
        while (request := self._to_connect.get()) is not None:
            try:
                self._connect(*request)
            except Exception:  # noqa: BLE001 - as above
                log.exception("worker %d: the same-host link connector hit an error; it goes on", self._index)

    def _connect(self, peer: int, path: str) -> None:
        try:
            sock: socket.socket | None = connect(path, self._key, self._index, self._run)
        except OSError as e:
            level = logging.WARNING if isinstance(e, HandshakeError) else logging.DEBUG
            log.log(level, "worker %d could not link to worker %d at %s: %s", self._index, peer, path, e)
            sock = None
        self._connected.append((peer, path, sock))
        self._on_link()

    def _accept(self) -> None:
        assert self._listener is not None
        try:
            sock, _ = self._listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        try:
            sender, run = accept_handshake(sock, self._key)
        except OSError as e:
            sock.close()
            log.warning("worker %d refused a same-host link: %s", self._index, e)
            return
        self._accepted.append(InboundLink(sock, sender, run))
        self._on_link()

    def close(self) -> None:
        """Stop the acceptor and connector threads, close every link and remove the socket file."""
        self._stopping = True
        self._to_connect.put(None)
        for thread in (self._acceptor, self._connector):
            if thread is not None:
                thread.join(HANDSHAKE_SECS + _STOP_POLL_SECS + 1)
        for link in self._out.values():
            link.close()
        for link in self._in + list(self._accepted):
            link.close()
        while self._connected:
            sock = self._connected.popleft()[2]
            if sock is not None:
                sock.close()
        if self._listener is not None:
            self._listener.close()
            try:
                os.unlink(self.path)
            except OSError as e:
                if e.errno != errno.ENOENT:
                    log.debug("could not remove %s: %s", self.path, e)
