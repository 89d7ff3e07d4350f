"""The same-host link between worker processes (squall.runtime.messaging.same_host) under the wire's faults.

Real sockets in the user's private directory, real processes for the peers that die: garbage
and peers without the topology's key are refused before anything they send is read as a
payload; a peer killed in the middle of a payload leaves nothing behind; a receiver that
restarts is linked again; another user cannot attach.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import pytest
import zmq

from squall.runtime.messaging.same_host import (
    MAX_PAYLOAD, HandshakeError, SameHostLinks, accept_handshake, connect, link_key, socket_path, topology_tag,
)
from squall.runtime.messaging.security import LinkKeys, LinkSecurity
from squall.runtime.messaging.zmq_transport import ZmqTransport
from squall.testing import wait_until
from squall.utils.batch_queue import Bell

pytestmark = pytest.mark.timeout(60)

HOST = "127.0.0.1"


@pytest.fixture
def keys() -> LinkKeys:
    return LinkKeys.generate()


@pytest.fixture
def receiver(keys):
    """Worker 1 of topology 't', listening as if its TCP port were 1 (nothing listens there)."""
    links = SameHostLinks(1, 0, "t", keys)
    assert links.bind(HOST, 1)
    yield links
    links.close()


def received(links: SameHostLinks, got: list, n: int) -> bool:
    links.receive(got)
    return len(got) >= n


def frame(payload: bytes) -> bytes:
    return struct.pack("<I", len(payload)) + payload


def test_the_socket_is_the_users_alone(receiver):
    mode = os.stat(receiver.path).st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    directory = os.stat(os.path.dirname(receiver.path))
    assert directory.st_uid == os.getuid() and stat.S_IMODE(directory.st_mode) == 0o700


def test_payloads_arrive_whole_and_in_order_with_the_senders_identity(receiver, keys):
    sender = SameHostLinks(0, 7, "t", keys)
    try:
        assert sender.set_peers({1: (HOST, 1)}) == {1}
        payloads = [bytes([i]) * (i * 997) for i in range(1, 60)]  # up to ~58 kB each
        payloads.insert(30, os.urandom(1 << 20))  # larger than the reader's buffer: it grows
        for payload in payloads:
            sender.send(1, payload)
        got: list = []
        wait_until(lambda: (sender.flush() and False) or received(receiver, got, len(payloads)), timeout=10)
        assert [p for _, _, p in got] == payloads
        assert {(s, r) for s, r, _ in got} == {(0, 7)}
    finally:
        sender.close()


def test_a_peer_of_another_topology_or_without_the_key_is_refused_and_the_listener_goes_on(receiver, keys, caplog):
    caplog.set_level(logging.WARNING, "squall.transport")
    with pytest.raises(OSError):
        connect(receiver.path, link_key("t", LinkKeys.generate()), 0, 0)
    wait_until(lambda: "refused a same-host link" in caplog.text, timeout=10)
    # garbage instead of a handshake
    raw = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    raw.connect(receiver.path)
    raw.sendall(b"GET / HTTP/1.0\r\n\r\n" + bytes(100))
    wait_until(lambda: caplog.text.count("refused a same-host link") >= 2, timeout=10)
    raw.close()
    got: list = []
    receiver.receive(got)
    assert got == [] and receiver.fds() == []
    # the topology's own peer still gets through
    sock = connect(receiver.path, link_key("t", keys), 0, 0)
    sock.setblocking(True)
    sock.sendall(frame(b"hello"))
    wait_until(lambda: received(receiver, got, 1), timeout=10)
    assert got == [(0, 0, b"hello")]
    sock.close()


def test_a_frame_over_the_limit_drops_the_link(receiver, keys, caplog):
    caplog.set_level(logging.WARNING, "squall.transport")
    sock = connect(receiver.path, link_key("t", keys), 2, 0)
    sock.setblocking(True)
    sock.sendall(frame(b"first") + struct.pack("<I", MAX_PAYLOAD + 1) + bytes(1000))
    got: list = []
    wait_until(lambda: received(receiver, got, 1) and not receiver.fds(), timeout=10)
    assert got == [(2, 0, b"first")]
    assert "over" in caplog.text and "dropped the link" in caplog.text
    sock.close()


# a peer that sends one whole payload and half of another, then waits to be killed
HALF_SENDER = textwrap.dedent("""
    import struct, sys, time
    from squall.runtime.messaging.same_host import connect
    sock = connect(sys.argv[1], bytes.fromhex(sys.argv[2]), 0, int(sys.argv[3]))
    sock.setblocking(True)
    sock.sendall(struct.pack("<I", 5) + b"whole" + struct.pack("<I", 1000) + b"half" * 100)
    print("sent", flush=True)
    time.sleep(600)
""")


def test_a_sender_killed_in_the_middle_of_a_payload_leaves_no_corrupt_batch(receiver, keys):
    key = link_key("t", keys).hex()
    peer = subprocess.Popen([sys.executable, "-c", HALF_SENDER, receiver.path, key, "0"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert peer.stdout.readline() == "sent\n"
        got: list = []
        wait_until(lambda: received(receiver, got, 1), timeout=10)
        peer.send_signal(signal.SIGKILL)
        peer.wait()
        wait_until(lambda: received(receiver, got, 0) and not receiver.fds(), timeout=10,
                   message="the dead sender's link closed")
        assert got == [(0, 0, b"whole")]  # the half payload went with the link
    finally:
        peer.kill()
        peer.wait()
    # the sender's next run links anew
    sock = connect(receiver.path, link_key("t", keys), 0, 1)
    sock.setblocking(True)
    sock.sendall(frame(b"next run"))
    wait_until(lambda: received(receiver, got, 2), timeout=10)
    assert got[1] == (0, 1, b"next run")
    sock.close()


def test_a_restarted_receiver_is_linked_again(keys):
    first = SameHostLinks(1, 0, "t", keys)
    sender = SameHostLinks(0, 0, "t", keys)
    second = None
    try:
        assert first.bind(HOST, 1)
        sender.set_peers({1: (HOST, 1)})
        sender.send(1, b"to the first run")
        got: list = []
        wait_until(lambda: (sender.flush() and False) or received(first, got, 1), timeout=10)
        first.close()  # the receiver dies...
        second = SameHostLinks(1, 1, "t", keys)  # ...and its next run listens at the same address
        assert second.bind(HOST, 1)
        later: list = []

        def arrived() -> bool:
            sender.send(1, b"later")  # the first ones break the old link; then a new one is made
            sender.flush()
            return received(second, later, 1)

        wait_until(arrived, timeout=10, interval=0.02)
        assert {p for _, _, p in later} == {b"later"}
    finally:
        sender.close()
        if second is not None:
            second.close()


def test_a_peer_without_a_socket_here_is_not_linked(receiver, keys):
    sender = SameHostLinks(0, 0, "t", keys)
    other_topology = SameHostLinks(0, 0, "u", keys)
    try:
        # another port (no worker listens there on this host), and another topology's view
        assert sender.set_peers({1: (HOST, 1), 2: (HOST, 2)}) == {1}
        assert other_topology.set_peers({1: (HOST, 1)}) == set()
        assert not SameHostLinks(0, 0, "t", keys, enabled=False).set_peers({1: (HOST, 1)})
    finally:
        sender.close()
        other_topology.close()


def test_another_user_cannot_attach(keys):
    if os.getuid() != 0:  # as tests/netbed.py: CI runs as root and must never skip this
        if os.environ.get("CI") == "true":
            pytest.fail("CI must run this test as root (a peer of another user)")
        pytest.skip("needs root to run a peer as another user (CI runs as root)")
    # a listener that other users can reach (the real one's directory would stop them sooner)
    directory = tempfile.mkdtemp(prefix="squall-open-")
    os.chmod(directory, 0o755)
    path = os.path.join(directory, "open.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.settimeout(10)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen(1)
    script = (f"import os, socket; os.setgid(65534); os.setuid(65534); s = socket.socket(socket.AF_UNIX); "
              f"s.connect({path!r}); s.recv(100)")
    peer = subprocess.Popen([sys.executable, "-c", script])
    try:
        sock, _ = listener.accept()
        with pytest.raises(HandshakeError, match="user 65534"):
            accept_handshake(sock, link_key("t", keys))
        sock.close()
    finally:
        peer.kill()
        peer.wait()
        listener.close()
        shutil.rmtree(directory)


def test_a_killed_workers_socket_file_is_removed_when_a_worker_starts_and_a_live_one_kept(receiver, keys):
    directory = os.path.dirname(receiver.path)
    stale = os.path.join(directory, f"{topology_tag('t', keys)}-{HOST}-3.sock")
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(stale)
    dead.close()  # as kill -9 leaves it: the file stays, no socket is bound to it
    assert os.path.exists(stale)
    starting = SameHostLinks(2, 0, "t", keys)
    try:
        assert starting.bind(HOST, 4)
        assert not os.path.exists(stale)
        assert os.path.exists(receiver.path) and os.path.exists(starting.path)
    finally:
        starting.close()


def test_socket_names_fit_and_differ_per_topology(keys):
    a, b = topology_tag("word count/1", keys), topology_tag("word count/1", LinkKeys.generate())
    assert a != b and "/" not in a and not a.startswith("-") and not topology_tag("", None).startswith("-")
    assert len(socket_path("/tmp/squall-0/4026531840", a, "255.255.255.255", 65535)) < 108


def test_two_workers_linking_to_each_other_at_once_both_get_through(keys):
    workers = [SameHostLinks(i, 0, "t", keys) for i in (0, 1)]
    try:
        for i, links in enumerate(workers):
            assert links.bind(HOST, 10 + i)
        for i, links in enumerate(workers):
            links.set_peers({1 - i: (HOST, 11 - i)})
            links.send(1 - i, f"from {i}".encode())
        got: list[list] = [[], []]

        def both() -> bool:
            for i, links in enumerate(workers):
                links.flush()
                links.receive(got[i])
            return all(got)

        wait_until(both, timeout=10)
        assert got == [[(1, 0, b"from 1")], [(0, 0, b"from 0")]]
    finally:
        for links in workers:
            links.close()


def test_a_sender_with_a_backlog_waits_for_the_link_to_take_more_not_polling(keys):
    context = zmq.Context()
    security = LinkSecurity(context, keys, "t")
    receiver = ZmqTransport(context, 1, security, topology="t")
    sender = ZmqTransport(context, 0, security, topology="t")
    bell = Bell()
    try:
        receiver.bind(None)
        sender.bind(None)
        sender.set_peers({1: (HOST, receiver.port, 0)})
        payload = os.urandom(4 << 20)  # far more than the link's buffers hold
        sender.send(1, payload, 0)
        wait_until(lambda: sender.send_backlog() and sender._same_host.blocked()[0], timeout=10,
                   message="linked, the rest of the payload waiting")
        assert sender._same_host.blocked()[1] is None, "no retry due: the link is up"

        bell.arm()
        started = time.monotonic()
        sender.wait_sendable(bell, 0.3)
        assert time.monotonic() - started >= 0.29, "nothing was read: the sender had no reason to wake"

        got: list = []
        reading = threading.Event()

        def read() -> None:
            reading.set()
            while not got:
                got.extend(receiver.receive(1, 0.05))

        reader = threading.Thread(target=read)
        reader.start()
        reading.wait(10)
        while sender.send_backlog():
            bell.arm()
            started = time.monotonic()
            sender.wait_sendable(bell, 30)
            assert time.monotonic() - started < 10, "woken by the link taking more, not by the timeout"
        reader.join(10)
        assert [p for _, _, p in got] == [payload]
    finally:
        sender.close()
        receiver.close()
        bell.close()
        security.close()
        context.term()
