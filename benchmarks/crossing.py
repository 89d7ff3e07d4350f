"""What a tuple costs to cross from one worker to another, transport by transport, without a topology.

A sender hands word tuples (one string each, as the word count's split emits) to a receiver in
batches of 1, 100 and 1,000, through each transport Squall has:

* ``queue``: the in-process hand-off between executors (a ``BatchQueue`` between two threads;
  no encoding: the local tier hands over the tuples themselves);
* ``same-host``: two processes over the same-host link (``squall.runtime.messaging.same_host``:
  a Unix socket written and read by the two threads themselves), payloads encoded and decoded as
  between workers (``tuple_batch``);
* ``zmq``: two processes over ZeroMQ PUSH/PULL with CURVE, as between hosts (the worker port's
  framing: a header frame, then the payload).

For each it prints the CPU both sides spend per tuple (user + system of the whole processes,
ZeroMQ's I/O threads included, from ``getrusage`` over the transfer), that CPU above the
in-process queue's (what crossing costs above a local hand-off), the voluntary context switches
per batch (wake-ups: a thread that slept and was woken), and the tuples per second. The sender
waits when the receiver is behind (the queue's bound, the socket's buffer, ZeroMQ's high-water
mark), as a worker waits for credit.

Reproduce (a quiet machine; the figures of each row come from one run, the best of ``--runs``):
    python benchmarks/crossing.py [--tuples 300000] [--batches 1,100,1000] [--transports queue,same-host,zmq]
                                  [--runs 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import select
import socket
import sys
import tempfile
import threading
import time
import zmq

from squall.runtime.messaging import tuple_batch
from squall.runtime.messaging.same_host import InboundLink, OutboundLink, accept_handshake, connect, link_key
from squall.runtime.messaging.security import LinkKeys, LinkSecurity
from squall.runtime.messaging.zmq_transport import PAYLOAD_HEADER
from squall.utils.batch_queue import BatchQueue

WORDS = ["the", "cow", "jumped", "over", "moon", "an", "apple", "a", "day", "keeps", "doctor", "away"]
TRANSPORTS = ("queue", "same-host", "zmq")


def usage() -> tuple[float, int]:
    """This process's CPU seconds (every thread's) and voluntary context switches so far."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime, r.ru_nvcsw


def batches(tuples: int, size: int) -> list[list[list[str]]]:
    values = [[WORDS[i % len(WORDS)]] for i in range(size)]
    return [values] * (tuples // size)


def encode(values: list[list[str]]) -> bytes:
    """A batch as a worker's transfer path encodes it (inside the timed loop: the sender pays it)."""
    return tuple_batch.encode([tuple_batch.TupleGroup(1, "default", [3] * len(values), values, None)])


def count(payload: bytes) -> int:
    return sum(len(group.tasks) for group in tuple_batch.decode(payload))


# -- the sides, each in a process of its own ----------------------------------------------------

def same_host_receiver(path: str, key: bytes, expected: int, report) -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    report.send("listening")
    sock, _ = listener.accept()
    sender, run = accept_handshake(sock, key)
    link = InboundLink(sock, sender, run)
    got, start = 0, None
    while got < expected:
        payloads: list[bytes] = []
        if not link.read(payloads):
            raise SystemExit("the sender closed the link early")
        if not payloads:
            select.select([link], [], [])
            continue
        if start is None:
            start = usage()
        for payload in payloads:
            got += count(payload)
    end = usage()
    report.send((end[0] - start[0], end[1] - start[1]))
    link.close()
    listener.close()


def same_host_sender(path: str, key: bytes, tuples: int, size: int, report) -> None:
    link = OutboundLink(connect(path, key, 0, 0), path)
    work = batches(tuples, size)
    start = usage()
    for values in work:
        link.send(encode(values))
        while link.busy and link.flush():
            select.select([], [link.sock], [])
    end = usage()
    report.send((end[0] - start[0], end[1] - start[1]))
    report.recv()  # stay until the receiver is done (closing early would cut the link)
    link.close()


def zmq_receiver(keys_json: str, expected: int, report) -> None:
    context = zmq.Context()
    security = LinkSecurity(context, LinkKeys.from_json(keys_json), "receiver")
    pull = context.socket(zmq.PULL)
    pull.setsockopt(zmq.RCVHWM, 8)
    security.server(pull, "worker port")
    port = pull.bind_to_random_port("tcp://127.0.0.1")
    report.send(port)
    got, start = 0, None
    while got < expected:
        header, payload = pull.recv_multipart()
        if start is None:
            start = usage()
        PAYLOAD_HEADER.unpack(header)
        got += count(payload)
    end = usage()
    report.send((end[0] - start[0], end[1] - start[1]))
    pull.close(linger=0)
    security.close()
    context.term()


def zmq_sender(keys_json: str, port: int, tuples: int, size: int, report) -> None:
    context = zmq.Context()
    security = LinkSecurity(context, LinkKeys.from_json(keys_json), "sender")
    push = context.socket(zmq.PUSH)
    push.setsockopt(zmq.SNDHWM, 8)
    security.client(push)
    push.connect(f"tcp://127.0.0.1:{port}")
    header = PAYLOAD_HEADER.pack(0, 0)
    work = batches(tuples, size)
    push.send_multipart((header, tuple_batch.encode([])))  # no tuples: the handshake, out of the timing
    start = usage()
    for values in work:
        push.send_multipart((header, encode(values)))
    end = usage()
    report.send((end[0] - start[0], end[1] - start[1]))
    report.recv()
    push.close(linger=0)
    security.close()
    context.term()


def run_queue(tuples: int, size: int) -> tuple[float, float, int]:
    """(seconds, CPU seconds, voluntary switches) of the in-process hand-off."""
    q = BatchQueue(1024)
    work = batches(tuples, size)

    def produce() -> None:
        for values in work:
            q.put(values, len(values))

    got = 0
    start, t0 = usage(), time.perf_counter()
    producer = threading.Thread(target=produce)
    producer.start()
    while got < len(work) * size:
        for values in q.take_all(1.0):
            got += len(values)
    producer.join()
    end, t1 = usage(), time.perf_counter()
    return t1 - t0, end[0] - start[0], end[1] - start[1]


def run_processes(kind: str, tuples: int, size: int) -> tuple[float, float, int]:
    """(seconds, CPU seconds of both sides, voluntary switches of both) across two processes."""
    ctx = multiprocessing.get_context("spawn")
    expected = (tuples // size) * size
    recv_report, recv_end = ctx.Pipe()
    send_report, send_end = ctx.Pipe()
    with tempfile.TemporaryDirectory(prefix="squall-crossing-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None) \
            as tmp:
        if kind == "same-host":
            path, key = os.path.join(tmp, "link.sock"), link_key("crossing", None)
            receiver = ctx.Process(target=same_host_receiver, args=(path, key, expected, recv_end))
            receiver.start()
            assert recv_report.recv() == "listening"
            sender = ctx.Process(target=same_host_sender, args=(path, key, tuples, size, send_end))
        else:
            keys = LinkKeys.generate().to_json()
            receiver = ctx.Process(target=zmq_receiver, args=(keys, expected, recv_end))
            receiver.start()
            port = recv_report.recv()
            sender = ctx.Process(target=zmq_sender, args=(keys, port, tuples, size, send_end))
        t0 = time.perf_counter()
        sender.start()
        sent = send_report.recv()
        received = recv_report.recv()
        elapsed = time.perf_counter() - t0
        send_report.send("done")
        for process in (sender, receiver):
            process.join(30)
    return elapsed, sent[0] + received[0], sent[1] + received[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tuples", type=int, default=300_000, help="tuples per run at batch sizes 100 and over")
    parser.add_argument("--batches", default="1,100,1000")
    parser.add_argument("--transports", default=",".join(TRANSPORTS))
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    transports = [t for t in args.transports.split(",") if t]
    unknown = set(transports) - set(TRANSPORTS)
    if unknown:
        parser.error(f"unknown transport(s) {sorted(unknown)}; choose from {', '.join(TRANSPORTS)}")
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; best of {args.runs} runs per row")
    print(f"{'transport':<10} {'batch':>6} {'tuples/s':>12} {'CPU µs/tuple':>13} {'above queue':>12} "
          f"{'wake-ups/batch':>15}")
    for size in (int(b) for b in args.batches.split(",")):
        tuples = args.tuples if size >= 100 else args.tuples // 20  # a tuple per batch is slow
        base = None
        for kind in transports:
            best = None
            for _ in range(args.runs):
                secs, cpu, switches = run_queue(tuples, size) if kind == "queue" else run_processes(kind, tuples, size)
                if best is None or cpu < best[1]:
                    best = (secs, cpu, switches)
            secs, cpu, switches = best
            n = (tuples // size) * size
            per_tuple = cpu / n * 1e6
            if kind == "queue":
                base = per_tuple
            above = "" if base is None or kind == "queue" else f"{per_tuple - base:+.2f}"
            print(f"{kind:<10} {size:>6} {n / secs:>12,.0f} {per_tuple:>13.2f} {above:>12} "
                  f"{switches / (n // size):>15.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
