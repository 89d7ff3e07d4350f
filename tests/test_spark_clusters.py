"""Topologies on Spark clusters with separate executor JVMs, loopback only:
``local-cluster[2,1,1024]`` (two executor JVMs started by the driver) and a standalone master
and worker started by the test from the pip package (``spark_standalone``).

Each class shares one SparkCluster (one driver session: PySpark allows one per process).
Components come from ``process_topologies`` (see test_spark.py).
"""

from __future__ import annotations

import os
import signal
from collections import Counter

import pytest

pyspark = pytest.importorskip("pyspark")

from spark_standalone import descendants, is_loopback, listening_addresses, spark_standalone  # noqa: E402, F401
from squall import TopologySetupError  # noqa: E402
import squall.cluster.spark.slots as spark_slots  # noqa: E402
from squall.cluster.spark import SparkCluster  # noqa: E402
from squall.testing import wait_until  # noqa: E402
from process_topologies import at_least_once_topology, put_messages, read_lines, sentences, wordcount  # noqa: E402
from spark_helpers import run_wordcount, sconf, spark_workers  # noqa: E402
from wordcount_state import (  # noqa: E402
    committed_offset, counts_of, crash_conf, swc, wait_for_offset, words,  # noqa: F401  (words: a fixture)
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.spark]  # the first test of a class also pays for the cluster's start


def check_wordcount(cluster: SparkCluster, tmp_path) -> None:
    lines = sentences(300, seed=11)
    assert run_wordcount(cluster, lines, tmp_path, sconf()) == Counter(w for line in lines for w in line.split())


@pytest.fixture(scope="class")
def on_local_cluster():
    with SparkCluster("local-cluster[2,1,1024]", spark_conf={"spark.ui.enabled": "false"}) as cluster:
        work = os.path.join(os.path.dirname(pyspark.__file__), "work", cluster.spark.sparkContext.applicationId)
        yield cluster
    assert not os.path.exists(work), "the executors' work directory was left in SPARK_HOME"


@pytest.fixture(scope="class")
def on_standalone(spark_standalone):  # noqa: F811 - the fixture imported above
    conf = spark_standalone.session_conf()
    with SparkCluster(conf.pop("spark.master"), spark_conf=conf) as cluster:
        yield cluster


class TestLocalCluster:
    @pytest.fixture
    def cluster(self, on_local_cluster):
        return on_local_cluster

    def test_wordcount_counts_like_process_mode(self, cluster, tmp_path):
        check_wordcount(cluster, tmp_path)

    def test_more_workers_than_the_cluster_has_slots_is_refused_at_once(self, cluster, monkeypatch):
        # its size caps it (2 executors of 1 core): no wait for executors could help, so none (here one would
        # outlast the test's timeout)
        monkeypatch.setattr(spark_slots, "registration_wait_secs", lambda spark_context: 3600.0)
        with pytest.raises(TopologySetupError, match=r"needs 3 Spark task slots .* \(local-cluster\[2,1,1024\]\) has "
                                                     r"2; lower topology.workers"):
            cluster.submit_topology("big", sconf(workers=3), wordcount(sentences(10)))

    def test_workers_run_in_separate_executors_and_listen_on_loopback_only(self, cluster):
        cluster.submit_topology("wc", sconf(), wordcount(sentences(10_000)))
        ws = spark_workers(cluster, "wc")
        pids = [w["pid"] for w in ws]
        # a worker is a Python process of its own executor JVM: their parents differ
        parents = {int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1]) for pid in pids}
        assert len(parents) == 2
        everything = [os.getpid(), *descendants(os.getpid())]
        listening = [addr for found in listening_addresses(everything).values() for addr, _ in found]
        assert {w["port"] for w in ws} <= {port for found in listening_addresses(pids).values() for _, port in found}
        assert listening and all(is_loopback(a) for a in listening), listening
        cluster.kill_topology("wc", wait_secs=0)

    def test_kill_9_of_a_worker_resubmits_the_job_and_loses_no_message(self, cluster, tmp_path):
        first = [f"m{i:04d}" for i in range(100)]
        topology, settings = at_least_once_topology(tmp_path, first)
        cluster.submit_topology("alo", sconf(settings), topology)
        before = spark_workers(cluster, "alo")
        wait_until(lambda: len(read_lines(tmp_path, "sink-")) >= 20, timeout=15, interval=0.01,
                   message="20 messages through the sink")
        os.kill(before[0]["pid"], signal.SIGKILL)
        wait_until(lambda: all(w["restarts"] == 1 and w["port"] for w in spark_workers(cluster, "alo")),
                   timeout=40, interval=0.05, message="the Spark job resubmitted")
        second = [f"n{i:04d}" for i in range(20)]
        put_messages(tmp_path, second)
        wanted = set(first) | set(second)
        wait_until(lambda: set(os.listdir(tmp_path / "done")) == wanted, timeout=30, interval=0.05,
                   message="every message acked (moved to done/)")
        assert {line.split()[0] for line in read_lines(tmp_path, "sink-")} == wanted
        cluster.kill_topology("alo", wait_secs=0)

    def test_kill_9_of_a_worker_restores_every_stateful_task_and_the_counts_are_exact(self, cluster, tmp_path, words):
        path, size, expected = words
        topology = swc.build(path, lines_per_sec=4000)
        conf = crash_conf(tmp_path / "state", **{k: v for k, v in sconf().items() if k != "topology.workers"})
        conf["topology.workers"] = 2
        cluster.submit_topology("sstate", conf, topology)
        wait_for_offset("sstate", topology, conf, 0.3, size)
        pid = spark_workers(cluster, "sstate")[0]["pid"]
        os.kill(pid, signal.SIGKILL)
        wait_until(lambda: all(w["restarts"] == 1 and w["port"] for w in spark_workers(cluster, "sstate")),
                   timeout=40, interval=0.05, message="the Spark job resubmitted")
        assert committed_offset("sstate", topology, conf) < size, "the kill was not mid-stream"
        wait_for_offset("sstate", topology, conf, 1.0, size)
        assert counts_of("sstate", topology, conf) == expected
        cluster.kill_topology("sstate", wait_secs=0)


class TestStandalone:
    @pytest.fixture
    def cluster(self, on_standalone):
        return on_standalone

    def test_wordcount_counts_like_process_mode(self, cluster, tmp_path):
        check_wordcount(cluster, tmp_path)

    def test_more_workers_than_the_cluster_has_slots_fails_fast_saying_how_many(self, cluster):
        # refused at once by Squall's own check (its message), the cluster capped by spark.cores.max: not by a
        # barrier job submitted to wait for slots that never come
        with pytest.raises(TopologySetupError, match=r"needs 3 Spark task slots .* has 2 \(spark.cores.max=2\);"):
            cluster.submit_topology("big", sconf(workers=3), wordcount(sentences(10)))
