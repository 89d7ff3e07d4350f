"""The public ways into a running topology that tests and tools use: tracked topologies and
wait_idle (Storm's trackedWait), the executors and runner of a topology, the typed
TopologyInfo beside get_topology_info's dicts, and Config's key constants."""

from __future__ import annotations

import msgspec
import pytest

from helpers import WAIT, BasicSink, feeder_builder
from squall import Config, LocalCluster, NotAliveError, Spout, TopologyBuilder
from squall.cluster.runner import TopologyRunner
from squall.runtime.info import ComponentInfo, TopologyInfo


def test_wait_idle_returns_once_every_fed_tuple_is_processed(cluster):
    feeder, builder = feeder_builder(["word"])
    builder.set_bolt("sink", BasicSink(), 2).shuffle_grouping("spout")
    cluster.submit_topology("tracked", {}, builder.create_topology(), tracked=True)
    for i in range(200):
        feeder.feed([f"w{i}"], msg_id=i)
    cluster.wait_idle("tracked", WAIT)
    # nothing is queued or running anywhere: every tree is complete at this instant, no waiting
    assert sorted(feeder.acked) == list(range(200)) and feeder.failed == []
    assert cluster.get_topology_info("tracked")["components"]["sink"]["executed"] == 200
    assert {e.component for e in cluster.executors("tracked")} >= {"spout", "sink"}


class Countdown(Spout):
    """Emits 5, 4, ... 1 and then nothing; it has no is_exhausted()."""

    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.left = collector, 5

    def next_tuple(self):
        if self.left:
            self.collector.emit([self.left], msg_id=self.left)
            self.left -= 1


def test_a_spout_without_is_exhausted_is_done_when_it_emits_nothing(cluster):
    builder = TopologyBuilder()
    builder.set_spout("countdown", Countdown())
    builder.set_bolt("sink", BasicSink()).shuffle_grouping("countdown")
    cluster.submit_topology("countdown", {}, builder.create_topology(), tracked=True)
    cluster.wait_idle("countdown", WAIT)
    info = cluster.topology_info("countdown")
    assert info.components["sink"].executed == 5 and info.components["countdown"].acked == 5
    assert info.components["countdown"].errors == []


def test_wait_idle_names_what_still_runs_and_refuses_an_untracked_topology(cluster):
    feeder, builder = feeder_builder(["word"])
    builder.set_bolt("sink", BasicSink()).shuffle_grouping("spout")
    cluster.submit_topology("plain", {}, builder.create_topology())
    with pytest.raises(ValueError, match=r"topology 'plain' is not tracked: submit it with .*tracked=True"):
        cluster.wait_idle("plain")
    with pytest.raises(NotAliveError, match="'missing'"):
        cluster.wait_idle("missing")
    cluster.submit_topology("quiet", {}, builder.create_topology(), tracked=True)
    cluster.deactivate("quiet")
    with pytest.raises(ValueError, match="topology 'quiet' is INACTIVE: wait_idle needs it ACTIVE"):
        cluster.wait_idle("quiet")


def test_tracking_needs_in_process_workers():
    _, builder = feeder_builder(["word"])
    with LocalCluster(processes=True) as cluster, pytest.raises(ValueError, match="in-process workers"):
        cluster.submit_topology("t", {}, builder.create_topology(), tracked=True)


def test_the_runner_and_the_typed_info(cluster):
    feeder, builder = feeder_builder(["word"])
    builder.set_bolt("sink", BasicSink()).shuffle_grouping("spout")
    cluster.submit_topology("typed", {}, builder.create_topology(), tracked=True)
    feeder.feed(["cow"], msg_id=1)
    cluster.wait_idle("typed", WAIT)
    assert isinstance(cluster.runner("typed"), TopologyRunner)
    info = cluster.topology_info("typed")
    assert isinstance(info, TopologyInfo) and isinstance(info.components["sink"], ComponentInfo)
    assert info.components["sink"].executed == 1 and info.components["spout"].acked == 1
    # get_topology_info is the same as plain dicts, a spout without a bolt's figures
    as_dict = cluster.get_topology_info("typed")
    assert as_dict["components"]["sink"]["executed"] == 1
    assert "executed" not in as_dict["components"]["spout"] and "complete_latency_ms" in as_dict["components"]["spout"]
    assert msgspec.convert(as_dict, TopologyInfo).components.keys() == info.components.keys()


def test_config_key_constants_and_a_misspelt_one():
    assert Config.TOPOLOGY_WORKERS == "topology.workers"
    with pytest.raises(AttributeError, match="Config has no key constant 'TOPOLOGY_WORKER'; did you mean "
                                             "TOPOLOGY_WORKERS?"):
        Config.TOPOLOGY_WORKER  # noqa: B018
