"""Effectively-once state across crashes, the headline of squall.api.stateful: a stateful spout
over a file -> split -> a stateful count (examples/stateful_wordcount.py), whose committed
counts must equal the counts of the file exactly after

* ``kill -9`` of a bolt's worker process twice and of the spout's worker once, mid-stream
  (state in SQLite, the default of ``squall run``), and of a bolt's worker with the state in a
  real Redis;
* killing the whole topology mid-stream and submitting it again under the same name;
* (tests/test_spark_clusters.py) ``kill -9`` of a Spark worker's Python process.

The spout is paced so that the kills land mid-file.
"""

from __future__ import annotations

import os
import signal
import socket
import sys

import pytest

from helpers import connects
from redis_server import redis_server  # noqa: F401  (a fixture)
from squall import Config, LocalCluster
from squall.api.state import StateProviderError
from squall.testing import wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's components; workers import it too
from wordcount_state import (  # noqa: E402
    committed_offset, counts_of, crash_conf, wait_for_offset, words,  # noqa: F401  (words: a fixture)
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.processes]

LINES_PER_SEC = 2_000


def worker_pids(cluster, name: str) -> list[tuple[int, set[str]]]:
    """(pid, components) of each worker."""
    return [(w["pid"], {e["component"] for e in w["executors"]}) for w in cluster.get_topology_info(name)["workers"]]


def kill_9_mid_stream(conf: Config, words, kills: tuple[str, ...]) -> list[int]:  # noqa: F811
    """Run the word count in worker processes, ``kill -9`` the worker of the bolt ("bolt") or
    of the spout ("spout") in turn as the committed offset passes 15%, 35%, 55%... of the
    file, check that the counts are exact at the end; the workers' restarts."""
    path, size, expected = words
    topology = swc.build(path, lines_per_sec=LINES_PER_SEC)
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("crash", conf, topology)
        pids = worker_pids(cluster, "crash")
        index_of = {"bolt": next(i for i, (_, comps) in enumerate(pids) if "count" in comps and "lines" not in comps),
                    "spout": next(i for i, (_, comps) in enumerate(pids) if "lines" in comps)}
        for n, kill in enumerate(kills):
            wait_for_offset("crash", topology, conf, 0.15 + 0.2 * n, size)
            index = index_of[kill]
            pid = worker_pids(cluster, "crash")[index][0]
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: worker_pids(cluster, "crash")[index][0] not in (pid, None), timeout=20,
                       message=f"worker {index} restarted")
        assert committed_offset("crash", topology, conf) < size, "the last kill was not mid-stream"
        wait_for_offset("crash", topology, conf, 1.0, size)
        assert counts_of("crash", topology, conf) == expected
        restarts = [w["restarts"] for w in cluster.get_topology_info("crash")["workers"]]
        return [restarts[index_of[kill]] for kill in kills]


def test_kill_9_of_bolt_and_spout_workers_leaves_the_exact_counts(tmp_path, words):  # noqa: F811
    assert kill_9_mid_stream(crash_conf(tmp_path / "state"), words, ("bolt", "bolt", "spout")) == [2, 2, 1]


def test_kill_9_with_the_state_in_redis_leaves_the_exact_counts(redis_server, words):  # noqa: F811
    conf = crash_conf(None, **{"topology.state.provider": "redis",
                               "topology.state.provider.config": redis_server.config(key_prefix="crash-test")})
    assert kill_9_mid_stream(conf, words, ("bolt", "spout")) == [1, 1]


def test_an_unreachable_redis_is_reported_at_submit_within_seconds(words, monkeypatch):  # noqa: F811
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        conf = crash_conf(None, **{"topology.state.provider": "redis",
                                   "topology.state.provider.config": {"port": port}})
        with LocalCluster(processes=True) as cluster:
            tries = connects(monkeypatch)
            with pytest.raises(StateProviderError, match=rf"cannot reach Redis at 127.0.0.1:{port}"):
                cluster.submit_topology("unreachable", conf, swc.build(words[0]))
            # tried once, by the submission's check in this process: none of the retries redis-py backs off between
            assert tries.count(("127.0.0.1", port)) == 1
            assert "unreachable" not in cluster.get_topologies()


def test_killed_and_submitted_again_it_resumes_with_the_exact_counts(tmp_path, words):  # noqa: F811
    path, size, expected = words
    topology, conf = swc.build(path, lines_per_sec=LINES_PER_SEC), crash_conf(tmp_path / "state")
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("again", conf, topology)
        wait_for_offset("again", topology, conf, 0.3, size)
        cluster.kill_topology("again", wait_secs=0)
        wait_until(lambda: "again" not in cluster.get_topologies(), message="killed")
        stopped_at = committed_offset("again", topology, conf)
        assert 0.3 * size <= stopped_at < size
        cluster.submit_topology("again", conf, topology)
        wait_for_offset("again", topology, conf, 1.0, size)
        assert counts_of("again", topology, conf) == expected
