"""What the UI costs: word count throughput with the UI server running and polled, against the
same run without it; and how fast the REST topology page answers for a 50-component topology.

1. **Overhead.** benchmarks/wordcount.py's topology (in-process workers, acking on) in a
   ``LocalCluster``, once with a ``UiServer`` on 127.0.0.1 and a client fetching what an open
   topology page fetches (the topology page, its visualization and its plots' series) and the
   component page of the busiest bolt, every --refresh seconds (the page itself refreshes every
   2), once without; the variants alternate, the best of --runs counts. Target (issue 14): the
   UI costs <= 3% of the throughput.
2. **Latency.** A topology of one spout and 49 bolts (a chain, acking on) runs while
   --requests GETs of ``/api/v1/topology/:id`` are timed one after the other; target: p99 <= 100 ms.

Reproduce:
    python benchmarks/ui.py [--sentences 200000] [--runs 3] [--refresh 1.0] [--requests 300]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
import urllib.request

from wordcount import make_sentences, timed_run

from squall import BasicBolt, Config, LocalCluster, TopologyBuilder
from squall.testing import FeederSpout
from squall.ops.ui.server import UiServer

TOKEN = "benchmark"
OVERHEAD_TARGET = 0.03
P99_TARGET_MS = 100.0


def fetch(url: str) -> None:
    with urllib.request.urlopen(url, timeout=10) as response:
        response.read()


class PagePoller:
    """Fetches an open topology page's documents every ``refresh`` seconds until stopped."""

    def __init__(self, base: str, refresh: float) -> None:
        # what the topology page fetches on each refresh (and a component page besides)
        self.urls = [f"{base}/api/v1/topology/bench", f"{base}/api/v1/topology/bench/visualization",
                     f"{base}/api/v1/topology/bench/series", f"{base}/api/v1/topology/bench/component/count"]
        self.refresh = refresh
        self.polls = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            for url in self.urls:
                try:
                    fetch(url)
                except OSError:
                    pass  # the topology is not submitted yet, or already killed
            self.polls += 1
            self._stop.wait(self.refresh)

    def __enter__(self) -> PagePoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def overhead(sentences: list[str], words: int, runs: int, refresh: float) -> tuple[float, float, int]:
    polls = 0

    def with_ui() -> float:
        nonlocal polls
        with LocalCluster() as cluster, UiServer(cluster, TOKEN, port=0) as ui, PagePoller(ui.url, refresh) as poller:
            rate = timed_run(sentences, words, acking=True, workers=1, cluster=cluster)[1]
            polls += poller.polls
        return rate

    plain = ui = 0.0
    for _ in range(runs):  # alternating, so both meet the same conditions; the best run counts
        plain = max(plain, timed_run(sentences, words, acking=True, workers=1)[1])
        ui = max(ui, with_ui())
    return plain, ui, polls


class Pass(BasicBolt):
    outputs = ["v"]

    def execute(self, tup, collector):
        collector.emit(tup.values)


def page_latency(requests: int) -> list[float]:
    builder = TopologyBuilder()
    feeder = FeederSpout(["v"])
    builder.set_spout("spout", feeder)
    previous = "spout"
    for i in range(49):
        builder.set_bolt(f"bolt-{i}", Pass()).shuffle_grouping(previous)
        previous = f"bolt-{i}"
    with LocalCluster() as cluster, UiServer(cluster, TOKEN, port=0) as ui:
        cluster.submit_topology("bench", Config().set_num_workers(2), builder.create_topology())
        for i in range(1000):
            feeder.feed([i], msg_id=i)
        url = f"{ui.url}/api/v1/topology/bench"
        fetch(url)  # the first request imports and warms up
        times = []
        for _ in range(requests):
            start = time.perf_counter()
            fetch(url)
            times.append(1000 * (time.perf_counter() - start))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--refresh", type=float, default=1.0, help="seconds between page refreshes (default 1)")
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()

    sentences = make_sentences(args.sentences)
    words = sum(len(s.split()) for s in sentences)
    plain, ui, polls = overhead(sentences, words, args.runs, args.refresh)
    cost = 1 - ui / plain
    print(f"word count, acking on, best of {args.runs} alternating runs: without UI {plain:,.0f} words/s, "
          f"with the UI polled every {args.refresh:g}s ({polls} page loads) {ui:,.0f} words/s: "
          f"cost {100 * cost:.1f}% (target <= {100 * OVERHEAD_TARGET:.0f}%: "
          f"{'met' if cost <= OVERHEAD_TARGET else 'NOT MET'})")
    times = page_latency(args.requests)
    p50, p99 = statistics.median(times), statistics.quantiles(times, n=100)[98]
    print(f"GET /api/v1/topology/:id, 50 components, {args.requests} requests: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
          f"(target p99 <= {P99_TARGET_MS:.0f} ms: {'met' if p99 <= P99_TARGET_MS else 'NOT MET'})")
    print("reproduce: python benchmarks/ui.py " + " ".join(
        f"--{k} {v}" for k, v in vars(args).items()))


if __name__ == "__main__":
    main()
