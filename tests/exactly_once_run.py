"""End to end exactly-once output under ``kill -9``, for any exactly-once sink:

    stateful spout x2 --shuffle--> split x2 --fields(word)--> count x2 --shuffle--> sink x2

on 3 worker processes, the count stateful and emitting ``[word, n]`` as it counts the n-th
``word``. Whatever the kills replay, the output a committed reader sees must hold each
``(word, n)`` for n = 1 .. (occurrences of word in the input) exactly once: a record twice is
a duplicate (an epoch made visible twice, or a replay of what was committed), one missing is
a loss. :func:`run` kills the worker of each named component mid-stream, waits for its
restart, optionally stops the topology and submits it again under the same name, then waits
for the whole output and compares. The input comes in parts, one more after each kill (and
the stop): every kill lands while half a part's output is still to come, never after the end,
however fast the machine.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from squall import LocalCluster, TopologyBuilder
from squall.api.spout import Spout
from squall.api.storm_topology import StormTopology
from squall.api.system_ids import CHECKPOINT_COMPONENT
from squall.testing import wait_until
from test_checkpoint_kill9 import Source, all_up, layout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's split and count; workers import it too


class SlowCount(swc.RunningCount):
    """The example's count, slowed, so that the kills land mid-stream on any machine."""

    def __init__(self, secs_per_word: float) -> None:
        self.secs_per_word = secs_per_word

    def execute(self, tup: Any) -> None:
        time.sleep(self.secs_per_word)  # the component's slowness, not a wait
        super().execute(tup)


def build(spout: Spout, sink: Any, secs_per_word: float = 0.002) -> StormTopology:
    builder = TopologyBuilder()
    builder.set_spout("spout", spout, 2)
    builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("spout")
    builder.set_bolt("count", SlowCount(secs_per_word), 2).fields_grouping("split", ["word"])
    builder.set_bolt("sink", sink, 2).shuffle_grouping("count")
    return builder.create_topology()


def expected(words: Counter) -> Counter:
    """Each ``(word, n)`` the sink must hold, once, for an input of ``words``."""
    return Counter((word, n) for word, total in words.items() for n in range(1, total + 1))


def parts(kills: Sequence[str], stop_and_rerun: bool = False) -> int:
    """The parts :func:`run` needs the input in: one for each kill and the stop, and the last."""
    return len(kills) + stop_and_rerun + 1


def conf(provider_config: dict[str, Any], ports: list[int], interval_ms: int = 200) -> dict[str, Any]:
    """Worker processes, SQLite state at ``provider_config``, frequent checkpoints; ``ports``:
    fixed, so that a restarted worker binds its old port again."""
    return {
        "topology.workers": 3,
        "topology.state.provider": "sqlite",
        "topology.state.provider.config": provider_config,
        "topology.state.checkpoint.interval.ms": interval_ms,
        "topology.message.timeout.secs": 10,
        "worker.heartbeat.frequency.secs": 0.05,
        "supervisor.worker.timeout.secs": 5,
        "supervisor.worker.start.timeout.secs": 20,
        "supervisor.slots.ports": ports,
    }


def worker_of(cluster: LocalCluster, name: str, component: str) -> int:
    """The index of the first worker running ``component`` (``checkpoint``: the checkpoint spout)."""
    wanted = CHECKPOINT_COMPONENT if component == "checkpoint" else component
    return next(i for i, (_, components) in enumerate(layout(cluster, name)) if wanted in components)


def check(output: Sequence[Any], want: Counter) -> None:
    """``output`` (``(word, n)`` records) holds each of ``want`` exactly once."""
    got = Counter(tuple(r) for r in output)
    twice = {r: n for r, n in got.items() if n > 1}
    missing = want - got
    unexpected = got - want - Counter({r: n - 1 for r, n in twice.items()})
    assert not twice and not missing and not unexpected, (
        f"{len(output)} records for {sum(want.values())} expected: {len(twice)} duplicated (e.g. "
        f"{sorted(twice.items())[:5]}), {len(missing)} missing (e.g. {sorted(missing)[:5]}), "
        f"{len(unexpected)} unexpected (e.g. {sorted(unexpected)[:5]})")


def run(topology: StormTopology, topology_conf: dict[str, Any], read: Callable[[], list[Any]], source: Source,
        kills: Sequence[str], stop_and_rerun: bool = False, name: str = "eo", timeout: float = 120) -> dict[str, Any]:
    """Submit, then for each of ``kills`` (component ids, or ``checkpoint``) once half of the
    output of the part of ``source`` just released is visible (``read()``: the committed output
    so far), ``kill -9`` the worker running it, wait for its replacement to report and release
    the next part; then (``stop_and_rerun``) after half of that part's output, kill the topology,
    submit it again and release the last part; wait until as many records as expected are
    visible, and check them exactly. ``source`` holds its input in :func:`parts` parts, the first
    released. Checks, at every read, that nothing visible is duplicated. Returns what happened
    (for a benchmark's lines)."""
    assert source.parts == parts(kills, stop_and_rerun), (
        f"the source's input is in {source.parts} parts; {parts(kills, stop_and_rerun)} wanted")
    want = expected(source.whole)
    total = sum(want.values())
    report: dict[str, Any] = {"kills": []}
    before = 0  # the words released before the latest part

    def visible_at_least(records: float) -> bool:
        output = read()
        got = Counter(tuple(r) for r in output)
        duplicated = [r for r, n in got.items() if n > 1]
        assert not duplicated, f"records visible twice: {duplicated[:5]}"
        return len(output) >= records

    def halfway(what: str) -> None:
        nonlocal before
        middle = (before + source.released) / 2
        wait_until(lambda: visible_at_least(middle), timeout=timeout,
                   message=f"{middle / total:.0%} of the output visible before {what}")
        before = source.released

    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology(name, topology_conf, topology)
        wait_until(lambda: all_up(cluster, name, 0, None), timeout=60, message="every executor reporting")
        for component in kills:
            halfway(f"killing {component!r}'s worker")
            index = worker_of(cluster, name, component)
            pid = layout(cluster, name)[index][0]
            visible = len(read()) / total
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: all_up(cluster, name, index, pid), timeout=60,  # noqa: B023
                       message=f"worker {index} ({component}) restarted")
            report["kills"].append({"component": component, "worker": index, "visible": visible})
            source.release()
        if stop_and_rerun:
            halfway("the stop")
            cluster.kill_topology(name, wait_secs=0)
            wait_until(lambda: name not in cluster.get_topologies(), message=f"topology {name!r} killed")
            report["stopped_at"] = len(read()) / total
            cluster.submit_topology(name, topology_conf, topology)
            source.release()
        wait_until(lambda: visible_at_least(total), timeout=timeout, message="the whole output visible")
        report["restarts"] = [w["restarts"] for w in cluster.get_topology_info(name)["workers"]]
    check(read(), want)
    return report
