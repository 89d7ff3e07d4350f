"""squall.cluster.spark.slots.slots_cap: the most task slots Spark's settings let an application
have, so that a cluster capped below a topology's workers is refused at once (the waiting itself
runs against real clusters: test_spark.py, test_spark_clusters.py, test_hosts.py)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyspark")

from squall.cluster.spark.slots import slots_cap  # noqa: E402


@pytest.mark.parametrize(("master", "conf", "cap"), [
    ("local", {}, (1, "")),
    ("local[4]", {}, (4, "")),
    ("local[4]", {"spark.task.cpus": "2"}, (2, "")),
    ("local[*]", {}, (os.cpu_count(), "")),
    ("local[3,2]", {}, (3, "")),
    ("local-cluster[2,3,1024]", {}, (6, "")),
    ("local-cluster[2,3,1024]", {"spark.task.cpus": "2"}, (2, "")),
])
def test_a_master_on_this_machine_has_the_slots_its_url_says(master, conf, cap):
    # no setting named: the master's URL, in the refusal already, says it
    assert slots_cap(master, conf) == cap


def test_a_standalone_cluster_is_capped_only_by_spark_cores_max():
    assert slots_cap("spark://h:7077", {}) is None  # as many as its workers have, and workers may join
    assert slots_cap("spark://h:7077", {"spark.cores.max": "3"}) == (3, "spark.cores.max=3")
    assert slots_cap("spark://h:7077", {"spark.cores.max": "6", "spark.task.cpus": "2"}) == (3, "spark.cores.max=6")
    # 7 cores in executors of 3: two executors, each running one task of 2 cpus
    assert slots_cap("spark://a:7077,b:7077", {"spark.cores.max": "7", "spark.executor.cores": "3",
                                               "spark.task.cpus": "2"}) == (
        2, "spark.cores.max=7, spark.executor.cores=3")


@pytest.mark.parametrize("master", ["yarn", "k8s://https://api:6443"])
def test_yarn_and_kubernetes_start_the_executors_their_settings_ask_for(master):
    # Spark's defaults there: 2 executors of 1 core
    assert slots_cap(master, {}) == (2, "spark.executor.instances=2, spark.executor.cores=1")
    assert slots_cap(master, {"spark.executor.instances": "5", "spark.executor.cores": "4", "spark.task.cpus": "2"}) == (
        10, "spark.executor.instances=5, spark.executor.cores=4")
