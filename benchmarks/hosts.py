"""Spark across hosts against Spark on one host: is a second host worth it?

benchmarks/scaling.py's shape (spout x2 -> split x2 on shuffle -> count x2 on fields, 2
workers, acking off and on) on the multi-host test bed of tests/netbed.py: a Spark standalone
master and the driver on host 0, one worker of one core on each of hosts 1 and 2, each host a
network namespace of this machine. Against it, in the same run and alternating with it, the
same topology on ``local[2]`` (both workers in the driver's JVM), its driver on host 0 too.
Words/s in steady state (after the first 10% of the words); the best of ``--runs``.

The hosts share this machine's two cores, so this measures what crossing hosts costs (the
bed's veth links and bridge, Spark's standalone scheduling, executors in JVMs of their own),
not what more machines add: README *Sizing a cluster* models that.

Needs root (network namespaces) and pyspark. Reproduce (quiet machine, nothing else running):
    sudo python benchmarks/hosts.py [--sentences 300000] [--runs 2] [--acking off|on|both]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))


def drive(master: str, sentences: int, acking: bool) -> None:
    """On host 0: run the shape once on ``master``, print its words/s as JSON."""
    from netbed import Bed
    from scaling import measure
    from wordcount import make_sentences, plain_loop

    from squall.cluster.spark import SparkCluster

    lines = make_sentences(sentences)
    words = plain_loop(lines)[0]
    conf = {"spark.driver.host": Bed.address(0)} if master.startswith("spark://") else {}
    with SparkCluster(master, spark_conf=conf) as cluster:
        rate, cpu = measure(lines, words, 2, acking, cluster)
    print(json.dumps({"rate": rate, "cpu": cpu}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=300_000)
    parser.add_argument("--runs", type=int, default=2, help="runs of each variant; the best counts (default 2)")
    parser.add_argument("--acking", choices=["off", "on", "both"], default="both")
    parser.add_argument("--drive", metavar="MASTER", help=argparse.SUPPRESS)  # the driver's side, on host 0
    args = parser.parse_args()
    if args.drive:
        drive(args.drive, args.sentences, args.acking == "on")
        return
    from netbed import Bed, SparkBed, bed_unavailable

    why = bed_unavailable()
    if why is not None:
        sys.exit(f"hosts.py: {why}")
    bed = Bed(3)
    try:
        with tempfile.TemporaryDirectory(prefix="squall-hosts-") as base:
            spark = SparkBed(bed, base)
            spark.wait_for_workers({Bed.address(1), Bed.address(2)})
            print(f"hosts: the scaling shape, {args.sentences:,} sentences, 2 workers, best of {args.runs}; "
                  f"words/s after the first 10%")
            for acking in ([False, True] if args.acking == "both" else [args.acking == "on"]):
                best: dict[str, float] = {}
                for _ in range(args.runs):
                    for label, master in (("2 hosts", spark.master_url), ("local[2]", "local[2]")):
                        argv = [sys.executable, os.path.abspath(__file__), "--drive", master, "--sentences",
                                str(args.sentences), "--acking", "on" if acking else "off"]
                        done = bed.run(0, argv, timeout=900)
                        if done.returncode != 0:
                            sys.exit(f"hosts.py: the {label} run failed:\n{done.stderr[-3000:]}")
                        rate = json.loads(done.stdout.strip().splitlines()[-1])["rate"]
                        best[label] = max(best.get(label, 0.0), rate)
                flag = "on " if acking else "off"
                for label, rate in best.items():
                    print(f"  acking {flag} {label:<10} {rate:>10,.0f} words/s")
                print(f"  acking {flag} 2 hosts / local[2]: {best['2 hosts'] / best['local[2]']:.2f}x (target >= 0.9x)")
    finally:
        bed.close()
    print("reproduce: sudo python benchmarks/hosts.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
