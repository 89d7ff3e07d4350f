"""The streamparse quickstart word count, natively and over Storm's multilang protocol.

``sparse quickstart wordcount`` makes the project (in a temporary directory); its topology,
unchanged, runs three ways in the same run, each on worker processes
(``LocalCluster(processes=True)``, as ``squall run``):

* natively: the pystorm components run in the workers (squall.streamparse);
* over multilang with JSON, and with msgpack: each component task is a
  ``python -m streamparse.run`` subprocess, as on Storm (squall.multilang).

The quickstart's spout never ends: each variant runs ``--warmup`` seconds, then the words its
count bolt executed in the next ``--seconds`` give its tuples/s. The best of ``--runs``.

Reproduce:  python benchmarks/sparse_quickstart.py [--seconds 5] [--runs 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time

from squall import LocalCluster
from squall.streamparse.project import project_config
from squall.streamparse.topology import from_streamparse


def quickstart(directory: str) -> str:
    sparse = os.path.join(os.path.dirname(sys.executable), "sparse")
    subprocess.run([sparse, "quickstart", "wordcount"], cwd=directory, check=True, capture_output=True,
                   env={**os.environ, "LEIN_ROOT": "1"})
    return os.path.join(directory, "wordcount")


def words_per_second(topology, config: dict, warmup: float, seconds: float) -> float:
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("wordcount", {**config, "worker.heartbeat.frequency.secs": 0.1,
                                              "supervisor.slots.ports": []}, topology)
        executed = lambda: cluster.get_topology_info("wordcount")["components"]["count_bolt"]["executed"]  # noqa: E731
        time.sleep(warmup)
        start, t0 = executed(), time.monotonic()
        time.sleep(seconds)
        return (executed() - start) / (time.monotonic() - t0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5, help="measured seconds of each variant")
    parser.add_argument("--warmup", type=float, default=2, help="seconds before measuring")
    parser.add_argument("--runs", type=int, default=2, help="runs of each variant; the best counts")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="squall-sparse-") as directory:
        measure(quickstart(directory), args)
    print("reproduce: python benchmarks/sparse_quickstart.py " + " ".join(sys.argv[1:]))


def measure(project: str, args: argparse.Namespace) -> None:
    sys.path.insert(0, os.path.join(project, "src"))  # as sparse run (and squall run) have it
    spec = importlib.util.spec_from_file_location("quickstart_topology", os.path.join(project, "topologies",
                                                                                       "wordcount.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    variants = {
        "native": from_streamparse(module.WordCount, project_config(project)),
        "multilang, JSON": from_streamparse(module.WordCount, {"serializer": "json"}, multilang=True),
        "multilang, msgpack": from_streamparse(module.WordCount, {"serializer": "msgpack"}, multilang=True),
    }
    best = dict.fromkeys(variants, 0.0)
    for _ in range(args.runs):  # alternate, so that all meet the same conditions on this shared machine
        for label, (topology, config) in variants.items():
            best[label] = max(best[label], words_per_second(topology, config, args.warmup, args.seconds))
    print(f"streamparse quickstart word count (spout -> count bolt x2, fields grouping), worker processes, "
          f"best of {args.runs} x {args.seconds:g} s; load average {os.getloadavg()[0]:.1f}")
    for label, rate in best.items():
        print(f"  {label:<20} {rate:>10,.0f} words/s   native / this: {best['native'] / rate:6.1f}x")
    print(f"  native / multilang JSON: {best['native'] / best['multilang, JSON']:.1f}x (target >= 50x)")


if __name__ == "__main__":
    main()
