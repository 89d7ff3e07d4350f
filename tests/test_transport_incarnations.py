"""What a killed worker process left unread never arrives after its new run's payloads (over
ZeroMQ, and over the same-host link, where the dead run's connection may be read after the new one's).

ZeroMQ keeps a pipe per connection and takes turns between them: a sender killed with
payloads still unread at the receiver has them read *between* the payloads of the process
that replaced it. Checkpoint barriers need each channel in order (see
:mod:`squall.runtime.messaging.incarnation`), so the transport drops them. The sender here is a real
process, ``kill -9``-ed with its payloads queued, then replaced by one of the next
incarnation, as a supervisor replaces a worker.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import zmq

from squall.runtime.messaging.backpressure import CreditGrants, Credits
from squall.runtime.messaging.incarnation import Incarnations, incarnation
from squall.runtime.messaging.security import LinkKeys, LinkSecurity
from squall.runtime.messaging.zmq_transport import PAYLOAD_HEADER, ZmqTransport
from squall.testing import wait_until
from squall.utils.batch_queue import BatchQueue, Bell

pytestmark = pytest.mark.timeout(60)

# a worker (index 0) that sends ``count`` payloads tagged with its run, then waits to be killed
SENDER = textwrap.dedent("""
    import sys, time, zmq
    from squall.runtime.messaging.security import LinkKeys, LinkSecurity
    from squall.runtime.messaging.zmq_transport import ZmqTransport
    port, run, count, same_host = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    context = zmq.Context()
    transport = ZmqTransport(context, 0, LinkSecurity(context, LinkKeys.from_json(sys.stdin.readline()), "sender"),
                             buffered_payloads=8, incarnation=run, same_host=same_host)
    transport.bind(None)
    transport.set_peers({1: ("127.0.0.1", port, 0)})
    for i in range(count):
        transport.send(1, f"{run}:{i}:".encode() + bytes(4000), 0)
        while transport.send_backlog():
            time.sleep(0.001)
    print("sent", flush=True)
    time.sleep(600)
""")


def start_sender(keys: LinkKeys, port: int, run: int, count: int, same_host: bool) -> subprocess.Popen:
    sender = subprocess.Popen([sys.executable, "-c", SENDER, str(port), str(run), str(count), str(int(same_host))],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    sender.stdin.write(keys.to_json() + "\n")
    sender.stdin.flush()
    return sender


@pytest.mark.parametrize("same_host", [False, True], ids=["zeromq", "same-host link"])
def test_a_killed_senders_unread_payloads_are_dropped_once_its_next_run_is_heard(same_host):
    keys = LinkKeys.generate()
    context = zmq.Context()
    security = LinkSecurity(context, keys, "receiver")
    receiver = ZmqTransport(context, 1, security, buffered_payloads=8, same_host=same_host)
    receiver.bind(None)
    receiver.register(1, None, None, Bell())
    got: list[tuple[int, int]] = []

    def read() -> None:
        got.extend(tuple(map(int, p.split(b":")[:2])) for _, _, p in receiver.receive(1, 0.05))

    old = start_sender(keys, receiver.port, incarnation(0, 0), 300, same_host)
    new = None
    try:
        wait_until(lambda: read() or len(got) >= 5, timeout=20, message="the first run's payloads")
        old.kill()  # kill -9, with payloads still queued for the receiver
        old.wait()
        # nothing is read until the second run has sent all it sends (its payloads fit in the
        # buffers between the two): then both runs' pipes hold payloads
        new = start_sender(keys, receiver.port, incarnation(0, 1), 10, same_host)
        assert new.stdout.readline() == "sent\n"
        wait_until(lambda: read() or sum(run == 1 for run, _ in got) == 10, timeout=20,
                   message="every payload of the second run")
    finally:
        for process in (old, new):
            if process is not None:
                process.kill()
                process.wait()
        receiver.close()
        security.close()
        context.term()
    first_new = next(i for i, (run, _) in enumerate(got) if run == 1)
    assert all(run == 1 for run, _ in got[first_new:]), got[first_new:first_new + 20]
    # each run's payloads in the order sent, none twice
    for run in (0, 1):
        sequence = [i for r, i in got if r == run]
        assert sequence == sorted(set(sequence))


def test_a_payload_without_the_header_is_dropped_and_the_receiver_goes_on():
    context = zmq.Context()
    security = LinkSecurity(context, None, "receiver")
    receiver = ZmqTransport(context, 1, security)
    receiver.bind(None)
    sock = context.socket(zmq.PUSH)
    sock.linger = 0
    sock.connect(f"tcp://127.0.0.1:{receiver.port}")
    try:
        sock.send(b"one frame")
        sock.send_multipart([b"short", b"payload"])
        sock.send_multipart([PAYLOAD_HEADER.pack(0, 0), b"good"])
        got: list[tuple[int, int, bytes]] = []
        wait_until(lambda: got.extend(receiver.receive(1, 0.05)) or got, timeout=10)
        assert got == [(0, 0, b"good")]
    finally:
        sock.close()
        receiver.close()
        security.close()
        context.term()


def test_incarnations_admit_the_newest_run_of_each_worker_only():
    seen = Incarnations(receiver=9)
    assert seen.admit(0, incarnation(0, 0))
    assert seen.admit(1, incarnation(0, 3))  # workers are independent
    assert seen.admit(0, incarnation(0, 1))
    assert not seen.admit(0, incarnation(0, 0))
    assert seen.admit(0, incarnation(0, 1))
    assert seen.admit(0, incarnation(1, 0))  # a relaunched generation outranks every restart
    assert not seen.admit(0, incarnation(0, 7))
    assert seen.dropped() == 2


def test_a_new_run_told_by_the_master_voids_the_dead_runs_leftovers_before_it_sends_anything():
    """The master names each worker's run in ``peers`` as soon as it binds: from then on the
    receiver drops the dead run's payloads, though none of the new run has arrived yet (a
    checkpoint's rollback may reach the receiver through another worker first)."""
    context = zmq.Context()
    security = LinkSecurity(context, None, "receiver")
    receiver = ZmqTransport(context, 1, security, same_host=False)
    queue = BatchQueue(8, "q")
    grants = CreditGrants({2: queue}, 8, lambda: None)
    credits = Credits(1, 0, {1: 1, 2: 2}, {1: 0, 2: 1}, {2: queue}, 2, 8, 8)
    try:
        receiver.bind(None)
        receiver.register(1, grants, credits, Bell())
        receiver.set_peers({0: ("127.0.0.1", 1, incarnation(0, 0)), 1: ("127.0.0.1", receiver.port, 0)})
        assert grants.deliver(0, incarnation(0, 0), [(queue, ["from run 0"])], {})
        receiver.set_peers({0: ("127.0.0.1", 1, incarnation(0, 1)), 1: ("127.0.0.1", receiver.port, 0)})
        assert not grants.deliver(0, incarnation(0, 0), [(queue, ["left by run 0"])], {})
        assert queue.take_all(0) == [["from run 0"]]
        assert [(peer, run) for peer, run, _ in grants.take_changes({0})] == [(0, incarnation(0, 1))]
    finally:
        receiver.close()
        security.close()
        context.term()
