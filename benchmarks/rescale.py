"""A stateful bolt's tasks grown while input flows (issue 49): how long processing pauses.

The topology: examples/stateful_wordcount.py (its file spout keeps its position, split, the
stateful count with 2 tasks), on 2 worker processes of this machine, the spout paced at
``--rate`` lines a second, a checkpoint every ``--interval-ms``. Mid-stream, one rebalance:

* **baseline**: ``executors={"split": 1}``, Storm's rebalance (executors within the tasks, no
  state moved): what stopping and starting the workers costs;
* **grown**: ``executors={"count": 4}``, past the count's 2 tasks: its tasks grow to 4 and its
  committed state is dealt to them by key group (squall rebalance -e count=4).

Each is run ``--runs`` times; the pause is the time from the rebalance call until the count's
executed figure moves again after the call returned (the new workers run; sampled every 20 ms
from the heartbeats, every 50 ms, after 100 ms for the old workers' last ones): an upper bound,
by up to ~150 ms. Once the
whole file is committed, the counts must be the input's (exact). Printed: each pause, the median
of each kind, grown / baseline, and the target: grown <= interval + 3 s.

Reproduce:  python benchmarks/rescale.py [--runs 3] [--rate 3000] [--interval-ms 1000]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's components (the workers import it too)

from squall import LocalCluster  # noqa: E402
from squall.testing import committed_state, wait_until  # noqa: E402

LINES = 60_000


def conf(state_dir: str, interval_ms: int) -> dict[str, Any]:
    return {"topology.workers": 2, "supervisor.slots.ports": [], "topology.acker.executors": 2,
            "topology.state.provider": "sqlite", "topology.state.provider.config": {"path": state_dir},
            "topology.state.checkpoint.interval.ms": interval_ms, "worker.heartbeat.frequency.secs": 0.05}


def executed(cluster: LocalCluster, name: str) -> int:
    return cluster.get_topology_info(name)["components"]["count"]["executed"]


def one_run(root: str, path: str, kind: str, rate: float, interval_ms: int) -> float:
    """The pause of one rebalance of ``kind``; raises if the counts end inexact."""
    state = os.path.join(root, f"state-{kind}-{time.monotonic_ns()}")
    config = conf(state, interval_ms)
    name = f"rescale-{kind}"
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology(name, config, swc.build(path, counters=2, lines_per_sec=rate))
        wait_until(lambda: executed(cluster, name) > rate * 3, timeout=60, interval=0.05,
                   message="three seconds of input counted")
        executors = {"count": 4} if kind == "grown" else {"split": 1}
        called = time.monotonic()
        cluster.rebalance(name, wait_secs=0, executors=executors)  # returns once the new workers run
        time.sleep(0.1)  # two heartbeats: what the old workers did is all in the figures
        before = executed(cluster, name)
        wait_until(lambda: executed(cluster, name) > before, timeout=60, interval=0.02,
                   message="the count executing again")
        pause = time.monotonic() - called
        after = swc.build(path, counters=4 if kind == "grown" else 2)
        wait_until(lambda: sum(s.get("offset", 0) for s in committed_state(name, after, "lines", config).values())
                   == os.path.getsize(path), timeout=300, interval=0.2, message="the whole file committed")
        counts: collections.Counter[str] = collections.Counter()
        for task in committed_state(name, after, "count", config).values():
            counts.update(task)
        cluster.kill_topology(name, 0)
    with open(path) as f:
        expected = collections.Counter(word for line in f for word in line.split())
    if counts != expected:
        raise AssertionError(f"{kind}: the committed counts are not the input's: "
                             f"{sum((counts - expected).values())} over, {sum((expected - counts).values())} under")
    return pause


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=float, default=3000.0, help="lines a second (default %(default)s)")
    parser.add_argument("--interval-ms", type=int, default=1000, help="checkpoint interval (default %(default)s)")
    args = parser.parse_args()
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="squall-rescale-", dir=shm) as root:
        path = swc.make_input(os.path.join(root, "words.txt"), LINES)
        pauses: dict[str, list[float]] = {"baseline": [], "grown": []}
        for _ in range(args.runs):
            for kind in pauses:  # in turn: the machine's drift hits both alike
                pauses[kind].append(one_run(root, path, kind, args.rate, args.interval_ms))
                print(f"  {kind:8} pause {pauses[kind][-1]:.2f} s (counts exact)", flush=True)
    base, grown = statistics.median(pauses["baseline"]), statistics.median(pauses["grown"])
    target = args.interval_ms / 1000 + 3
    print(f"baseline (executors within the tasks): median pause {base:.2f} s")
    print(f"grown (count 2 -> 4 tasks, state dealt): median pause {grown:.2f} s, {grown / base:.2f}x the baseline; "
          f"target <= interval + 3 s = {target:.1f} s: {'met' if grown <= target else 'NOT MET'}; counts exact")
    print("reproduce: python benchmarks/rescale.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
