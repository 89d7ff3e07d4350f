"""The autoscaler on worker processes (squall.cluster.autoscale_controller): a bolt costing
~100 µs a tuple, input rising past one worker: it scales up to two workers, the busy bolt
spread over them; input falling back: after the cool-down it scales down again. Each decision
is logged with its reason. (Its decisions as a pure function: tests/test_unit_autoscaler.py.)"""

from __future__ import annotations

import pytest

import time

from process_topologies import BusyBolt, PacedSpout, pconf
from squall import InvalidTopologyError, LocalCluster, TopologyBuilder
from squall.ops.ui.server import UiServer
from squall.testing import committed_state, wait_until
from ui_client import TOKEN, call
from wordcount_state import counts_of, expected_counts, spout_done, state_conf, swc

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]


def autoscaled(extra: dict | None = None) -> dict:
    conf = pconf({"topology.autoscale.enabled": True, "topology.autoscale.max.workers": 2,
                  "topology.autoscale.window.secs": 3, "topology.autoscale.cooldown.secs": 6,
                  "topology.autoscale.interval.secs": 0.5, "topology.max.spout.pending": 500,
                  "worker.heartbeat.frequency.secs": 0.2, "supervisor.slots.ports": [], **(extra or {})}, workers=1)
    return conf


def test_it_scales_up_when_input_rises_past_one_worker_and_down_when_it_falls(tmp_path):
    rate = tmp_path / "rate"
    rate.write_text("fast")
    builder = TopologyBuilder()
    builder.set_spout("numbers", PacedSpout(str(rate)))
    builder.set_bolt("busy", BusyBolt(0.0001), 1).set_num_tasks(2).shuffle_grouping("numbers")
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("elastic", autoscaled(), builder.create_topology())

        def workers() -> int:
            return len(cluster.get_topology_info("elastic")["workers"])

        def busy_executors() -> int:
            return len(cluster.get_topology_info("elastic")["components"]["busy"]["executors"])

        wait_until(lambda: workers() == 2 and busy_executors() == 2, timeout=40,
                   message="scaled up to two workers, the busy bolt on both")
        (up,) = cluster.autoscale_decisions("elastic")
        assert (up.action, up.workers, up.executors) == ("scale-up", 2, {"busy": 2}), up
        assert "saturated for 3s" in up.reason and "busiest busy" in up.reason

        rate.write_text("slow")
        wait_until(lambda: workers() == 1, timeout=40, message="scaled down to one worker")
        down = cluster.autoscale_decisions("elastic")[-1]
        assert down.action == "scale-down" and down.workers == 1, down
        assert len(cluster.autoscale_decisions("elastic")) == 2, "one decision each way"
        assert cluster.get_topology_info("elastic")["components"]["numbers"]["failed"] == 0
        # the decision log, newest first, on the topology page (and in get_topology_info)
        assert [d["action"] for d in cluster.get_topology_info("elastic")["autoscale"]] == ["scale-up", "scale-down"]
        with UiServer(cluster, TOKEN, port=0) as ui:
            status, page, _ = call(ui.url + "/api/v1/topology/elastic")
        assert status == 200 and [d["action"] for d in page["autoscale"]] == ["scale-down", "scale-up"]
        assert page["autoscale"][1]["executors"] == {"busy": 2} and "saturated" in page["autoscale"][1]["reason"]


class BusyWordCount(swc.WordCount):
    """The example's stateful count, costing ``secs`` of CPU a word (a busy loop)."""

    def __init__(self, secs: float = 0.0002) -> None:
        self.secs = secs

    def execute(self, tup):
        end = time.perf_counter() + self.secs
        while time.perf_counter() < end:
            pass
        super().execute(tup)


def test_it_grows_a_stateful_bolt_submitted_with_one_task_and_its_counts_stay_exact(tmp_path):
    path = swc.make_input(str(tmp_path / "words.txt"), 40_000)
    builder = TopologyBuilder()
    builder.set_spout("lines", swc.FileSpout(path))
    builder.set_bolt("split", swc.SplitLine()).shuffle_grouping("lines")
    builder.set_bolt("count", BusyWordCount()).fields_grouping("split", ["word"])  # one task
    topology = builder.create_topology()
    conf = autoscaled(state_conf(**{"topology.state.provider": "sqlite",
                                    "topology.state.provider.config": {"path": str(tmp_path / "state")},
                                    "topology.max.spout.pending": None}))
    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("grown", conf, topology)
        wait_until(lambda: len(cluster.get_topology_info("grown")["components"]["count"]["executors"]) == 2,
                   timeout=60, message="the stateful count grown to two executors")
        up = cluster.autoscale_decisions("grown")[0]
        assert (up.action, up.workers, up.executors.get("count")) == ("scale-up", 2, 2), up
        two = TopologyBuilder()  # the topology as the rebalance made it: its state read with two tasks
        two.set_spout("lines", swc.FileSpout(path))
        two.set_bolt("split", swc.SplitLine()).shuffle_grouping("lines")
        two.set_bolt("count", BusyWordCount(), 2).fields_grouping("split", ["word"])
        grown = two.create_topology()
        assert cluster.get_topology_info("grown")["components"]["count"]["num_tasks"] == 2
        wait_until(lambda: spout_done("grown", grown, conf, path), timeout=90, interval=0.2,
                   message="the whole file committed")
        assert counts_of("grown", grown, conf) == expected_counts(path)
        assert all(committed_state("grown", grown, "count", conf).values())  # both tasks hold words


def test_bad_autoscale_settings_are_refused_at_submission():
    builder = TopologyBuilder()
    builder.set_spout("numbers", PacedSpout("/nonexistent"))
    with LocalCluster() as cluster:
        with pytest.raises(InvalidTopologyError, match=r"topology 'bad': autoscale: min workers 3 and max workers 2"):
            cluster.submit_topology("bad", {"topology.autoscale.enabled": True, "topology.autoscale.min.workers": 3,
                                            "topology.autoscale.max.workers": 2}, builder.create_topology())
