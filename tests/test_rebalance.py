"""Storm's rebalance (Nimbus.rebalance, the REST call, ``squall rebalance``): deactivate, wait,
restart the workers with the new assignment, return to the previous activation. Tasks keep
their ids, so a fields grouping keeps every key on its task; no acked message is lost."""

from __future__ import annotations

import collections

import pytest

from squall import Bolt, Config, TopologyBuilder
from squall.ops.command.report import format_summary
from squall.api.errors import NotAliveError
from squall.testing import FeederSpout, wait_until
from squall.ops.ui.server import UiServer

from helpers import logged, record
from process_topologies import Split
from ui_client import AUTH, TOKEN, call

SENTENCES = ["the cow jumped over the moon", "an apple a day keeps the doctor away",
             "four score and seven years ago", "snow white and the seven dwarfs", "i am at two with nature"]


class CountOnTask(Bolt):
    """Records (word, task) for every word, then acks: the counts and where each key went."""

    outputs: list[str] = []

    def __init__(self, key):
        self.key = key

    def prepare(self, conf, context, collector):
        self.collector, self.task = collector, context.get_this_task_id()

    def execute(self, tup):
        record(self.key, (tup.values[0], self.task))
        self.collector.ack(tup)


def wordcount(key):
    feeder = FeederSpout(["sentence"])
    builder = TopologyBuilder()
    builder.set_spout("sentences", feeder)
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", CountOnTask(key), 2).set_num_tasks(4).fields_grouping("split", ["word"])
    return feeder, builder.create_topology()


def feed(feeder, ids):
    for i in ids:
        feeder.feed([SENTENCES[i % len(SENTENCES)]], msg_id=i)


def executors(cluster, component):
    return sorted(tuple(e["tasks"]) for w in cluster.get_topology_info("wc")["workers"] for e in w["executors"]
                  if e["component"] == component)


def test_rebalance_to_two_workers_and_back_and_to_four_executors_loses_and_moves_nothing(cluster, key):
    feeder, topology = wordcount(key)
    cluster.submit_topology("wc", Config().set_max_spout_pending(50), topology)
    tasks_before = {c: executors(cluster, c) for c in ("sentences", "split", "count", "__acker")}
    assert len(cluster.get_topology_info("wc")["workers"]) == 1

    feed(feeder, range(0, 300))
    wait_until(lambda: len(feeder.acked) >= 100, timeout=10)
    cluster.rebalance("wc", wait_secs=1.0, num_workers=2)  # while tuples are in flight
    info = cluster.get_topology_info("wc")
    assert info["status"] == "ACTIVE" and len(info["workers"]) == 2
    feed(feeder, range(300, 600))
    wait_until(lambda: len(feeder.acked) == 600, timeout=10)  # so that the next run's acks are the rest
    cluster.rebalance("wc", wait_secs=1.0, num_workers=1, executors={"count": 4})
    assert len(cluster.get_topology_info("wc")["workers"]) == 1
    assert executors(cluster, "count") == [(t,) for ts in tasks_before["count"] for t in ts]  # 4 executors, same tasks
    feed(feeder, range(600, 900))
    wait_until(lambda: len(feeder.acked) == 900, timeout=20, message="every sentence acked")
    # the figures count across both rebalances; the current run's stand beside them
    words = [w for i in range(900) for w in SENTENCES[i % len(SENTENCES)].split()]
    components = lambda: cluster.get_topology_info("wc")["components"]  # noqa: E731
    wait_until(lambda: components()["count"]["executed"] == len(words), timeout=10, message="every word counted")
    spout = components()["sentences"]
    assert (spout["acked"], spout["current"]["acked"]) == (900, 300)
    assert "\nsince the last worker restart or rebalance: sentences emitted 300 acked 300 failed 0; " in \
        format_summary(cluster.topology_info("wc"))
    assert spout["streams"]["default"]["emitted"] >= 900

    # every message id acked exactly once, none failed, as without a rebalance
    assert sorted(feeder.acked) == list(range(900)) and feeder.failed == []
    # the counts are exact: no word lost or counted twice
    seen = logged(key)
    assert collections.Counter(w for w, _ in seen) == collections.Counter(words)
    # every word stayed on one task: task ids did not change
    tasks_of_word = collections.defaultdict(set)
    for word, task in seen:
        tasks_of_word[word].add(task)
    assert all(len(tasks) == 1 for tasks in tasks_of_word.values()), tasks_of_word
    assert sorted(t for ts in executors(cluster, "count") for t in ts) == \
        sorted(t for ts in tasks_before["count"] for t in ts)
    for component in ("sentences", "split", "__acker"):
        assert sorted(t for ts in executors(cluster, component) for t in ts) == \
            sorted(t for ts in tasks_before[component] for t in ts), component


def test_a_deactivated_topology_stays_deactivated(cluster, key):
    feeder, topology = wordcount(key)
    cluster.submit_topology("wc", Config(), topology)
    cluster.deactivate("wc")
    cluster.rebalance("wc", wait_secs=0, num_workers=2)
    assert cluster.get_topology_info("wc")["status"] == "INACTIVE"
    feed(feeder, range(10))
    cluster.activate("wc")
    wait_until(lambda: sorted(feeder.acked) == list(range(10)), timeout=10)


@pytest.mark.parametrize("options, culprit", [
    ({"executors": {"count": 5}}, "executors of 'count' must be an integer from 1 to its 4 task(s)"),
    ({"executors": {"count": 0}}, "executors of 'count'"),
    ({"executors": {"nope": 1}}, "no component 'nope'"),
    ({"executors": {"__acker": 2}}, "no component '__acker'"),
    ({"num_workers": 0}, "numWorkers must be an integer >= 1"),
    ({"cpu_loads": {"count": 0}}, "cpu_loads: 'count' must be a component and its load a number > 0, got 0"),
    ({"cpu_loads": {"nope": 50}}, "cpu_loads: 'nope' must be a component"),
])
def test_bad_options_are_refused_naming_them_before_anything_changes(cluster, key, options, culprit):
    _, topology = wordcount(key)
    cluster.submit_topology("wc", Config(), topology)
    before = executors(cluster, "count")
    with pytest.raises(ValueError, match="rebalance of topology 'wc'") as refused:
        cluster.rebalance("wc", wait_secs=0, **options)
    assert culprit in str(refused.value)
    with pytest.raises(ValueError):
        cluster.start_rebalance("wc", 0, **options)
    assert cluster.get_topology_info("wc")["status"] == "ACTIVE" and executors(cluster, "count") == before
    with pytest.raises(NotAliveError):
        cluster.rebalance("other", wait_secs=0)


def test_the_rest_call_takes_storm_uis_options(cluster, key):
    feeder, topology = wordcount(key)
    cluster.submit_topology("wc", Config(), topology)
    with UiServer(cluster, TOKEN, port=0) as ui:
        url = ui.url + "/api/v1/topology/wc/rebalance/0"
        good = b'{"rebalanceOptions": {"numWorkers": 2, "executors": {"count": "4"}}, "callback": "foo"}'
        status, _, _ = call(url, "POST", {"Content-Type": "application/json"}, good)
        assert status == 401
        for body, culprit in ((b'{"rebalanceOptions": {"numWorkers": "two"}}', "rebalanceOptions.numWorkers"),
                              (b'{"rebalanceOptions": {"executors": {"count": 9}}}', "executors of 'count'"),
                              (b'{"rebalanceOptions": {"executors": {"count": -1}}}', "rebalanceOptions.executors.count"),
                              (b"not json", "not JSON")):
            status, answer, _ = call(url, "POST", AUTH, body)
            assert status == 400 and culprit in answer["errorMessage"], (body, answer)
        status, answer, _ = call(url, "POST", AUTH, good)
        assert (status, answer) == (200, {"topologyOperation": "rebalance", "topologyId": "wc", "status": "success"})
    wait_until(lambda: cluster.get_topology_info("wc")["status"] == "ACTIVE"
               and len(cluster.get_topology_info("wc")["workers"]) == 2, timeout=20)
    assert len(executors(cluster, "count")) == 4
    feed(feeder, range(20))
    wait_until(lambda: sorted(feeder.acked) == list(range(20)), timeout=10)


def test_a_stateful_topology_resumes_from_its_committed_state(cluster, tmp_path):
    """The example's stateful word count: rebalanced mid-stream to two workers, its committed
    counts are exact (the executors' memory is gone; the checkpointed state is not)."""
    from wordcount_state import counts_of, expected_counts, spout_done, state_conf, swc, wait_for_commit_of_all

    path = swc.make_input(str(tmp_path / "words.txt"), 3000)
    topology = swc.build(path, lines_per_sec=1000)  # 3 s of input
    conf = state_conf()
    cluster.submit_topology("swc", conf, topology)
    wait_until(lambda: sum(counts_of("swc", topology, conf).values()) > 0, timeout=10, message="a first commit")
    assert not spout_done("swc", topology, conf, path)  # mid-stream
    cluster.rebalance("swc", wait_secs=0.5, num_workers=2)
    assert len(cluster.get_topology_info("swc")["workers"]) == 2
    wait_for_commit_of_all("swc", topology, conf, path)
    assert counts_of("swc", topology, conf) == expected_counts(path)
