"""State and checkpoints (squall.api.stateful, squall.api.checkpoint_spout, squall.runtime.executor.checkpointing)
in-process: effectively-once counts, rollbacks, Storm's hooks and acks, and the errors a
checkpointed topology gets at submit. Crashes of worker processes and Spark are in
tests/test_state_recovery.py.

The topology is examples/stateful_wordcount.py's (a stateful file spout, split, a stateful
count) over a small file made here; its committed state is read with
``squall.testing.committed_state``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any

import pytest

from squall import BasicBolt, InvalidTopologyError, LocalCluster, TopologyBuilder
from squall.api.grouping import ALL
from squall.api.state import InMemoryStateProvider, StateProviderError
from squall.api.stateful import StatefulBolt, StatefulSpout
from squall.api.system_ids import CHECKPOINT_COMPONENT, CHECKPOINT_STREAM
from squall.testing import FeederSpout, committed_state, wait_until
from redis_server import redis_server  # noqa: F401  (a fixture)
from wordcount_state import counts_of, expected_counts, state_conf as conf, swc, wait_for_commit_of_all

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def words_file(tmp_path):
    return swc.make_input(str(tmp_path / "words.txt"), 3000)


# -- wiring ----------------------------------------------------------------------------------------


def test_create_topology_adds_the_checkpoint_spout_and_barrier_subscriptions(words_file):
    topology = swc.build(words_file)
    assert topology.checkpointed and topology.state_layout == {"lines": 1, "count": 2}
    assert list(topology.components)[0] == CHECKPOINT_COMPONENT
    comps = topology.components
    assert comps["lines"].inputs[(CHECKPOINT_COMPONENT, CHECKPOINT_STREAM)].type == ALL
    assert comps["split"].inputs[("lines", CHECKPOINT_STREAM)].type == ALL
    assert comps["count"].inputs[("split", CHECKPOINT_STREAM)].type == ALL
    assert all(CHECKPOINT_STREAM in c.outputs for c in comps.values())
    plain = TopologyBuilder()
    plain.set_spout("s", FeederSpout(["v"]))
    assert not plain.create_topology().checkpointed


def test_checkpoint_stream_and_component_ids_are_reserved():
    class Declares(BasicBolt):
        outputs = {CHECKPOINT_STREAM: ["x"]}

    builder = TopologyBuilder()
    builder.set_spout("s", FeederSpout(["v"]))
    builder.set_bolt("count", swc.WordCount()).shuffle_grouping("s")
    builder.set_bolt("bad", Declares()).shuffle_grouping("s")
    with pytest.raises(InvalidTopologyError, match=r"component 'bad': stream id '\$checkpoint' is reserved"):
        builder.create_topology()


def test_a_cycle_is_refused_in_a_checkpointed_topology():
    class Again(BasicBolt):
        outputs = {"default": ["word"], "again": ["word"]}

    builder = TopologyBuilder()
    builder.set_spout("s", FeederSpout(["word"]))
    builder.set_bolt("a", Again()).shuffle_grouping("s").shuffle_grouping("count")
    builder.set_bolt("count", swc.WordCount()).shuffle_grouping("a")
    with pytest.raises(InvalidTopologyError, match=r"components 'a' -> 'count' -> 'a' form a cycle"):
        builder.create_topology()


# -- effectively once ------------------------------------------------------------------------------


class Numbers(StatefulSpout):
    """0, 1, ... ``total - 1`` at ``per_sec``, the next one in its state."""

    outputs = ["n"]

    def __init__(self, total: int, per_sec: float = 5000) -> None:
        self.total, self.per_sec = total, per_sec

    def open(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state, self.next = state, state.get("next", 0)
        self.resumed_at, self.resumed_from = time.monotonic(), self.next

    def next_tuple(self):
        due = self.resumed_from + int((time.monotonic() - self.resumed_at) * self.per_sec)
        for n in range(self.next, min(due, self.total, self.next + 50)):
            self.collector.emit([n])
            self.next = n + 1
            self.state.put("next", self.next)


class Keys(StatefulBolt):
    """Each number a key of its own: a checkpoint losing a task's delta loses keys for good."""

    def prepare(self, conf, context, collector):
        self.collector = collector

    def init_state(self, state):
        self.state = state

    def execute(self, tup):
        self.state.put(tup.values[0], True)
        self.collector.ack(tup)


def numbers_topology(total: int, executors: int = 1, tasks: int = 1):
    builder = TopologyBuilder()
    builder.set_spout("numbers", Numbers(total))
    builder.set_bolt("keys", Keys(), executors).set_num_tasks(tasks).shuffle_grouping("numbers")
    return builder.create_topology()


def wait_for_every_number(name, topology, conf, total, timeout=30.0):
    def done():
        nexts = committed_state(name, topology, "numbers", conf).values()
        return sum(s.get("next", 0) for s in nexts) == total
    wait_until(done, timeout=timeout, interval=0.05, message="every number committed")
    keys = [k for state in committed_state(name, topology, "keys", conf).values() for k in state]
    assert sorted(keys) == list(range(total))


def test_executors_of_several_tasks_align_on_each_task_channel():
    topology = numbers_topology(3000, executors=2, tasks=5)
    with LocalCluster() as cluster:
        cluster.submit_topology("tasks", conf(), topology)
        wait_for_every_number("tasks", topology, conf(), 3000)


class FlakyCommitProvider(InMemoryStateProvider):
    """Its third ``set_committed`` raises: before writing or, with ``LANDED``, after."""

    LANDED = False
    calls = 0

    def set_committed(self, txid):
        FlakyCommitProvider.calls += 1
        if FlakyCommitProvider.calls == 3:
            if FlakyCommitProvider.LANDED:
                super().set_committed(txid)
            raise StateProviderError(f"recording txid {txid} timed out")
        super().set_committed(txid)


@pytest.mark.parametrize("landed", [False, True], ids=["not-written", "written"])
def test_a_commit_point_that_raises_is_settled_by_asking_the_provider(landed, monkeypatch):
    monkeypatch.setattr(FlakyCommitProvider, "LANDED", landed)
    monkeypatch.setattr(FlakyCommitProvider, "calls", 0)
    topology = numbers_topology(3000, executors=2)
    flaky, name = conf(**{"topology.state.provider": f"{__name__}:FlakyCommitProvider"}), f"flaky-{landed}"
    with LocalCluster() as cluster:
        cluster.submit_topology(name, flaky, topology)
        wait_for_every_number(name, topology, flaky, 3000)

        def settled() -> bool:
            errors = cluster.get_topology_info(name)["components"][CHECKPOINT_COMPONENT]["errors"]
            return FlakyCommitProvider.calls > 3 and any("timed out" in e["error"] for e in errors)

        # LANDED: the commit that raised may be the one that committed the last numbers; it is reported
        # only once set_committed raised, after its write, and the next commit comes a checkpoint later
        wait_until(settled, message="the raising commit reported, and a commit after it")


@pytest.mark.parametrize("workers", [1, 2])
def test_counts_are_exact(words_file, workers):
    topology, c = swc.build(words_file), conf(**{"topology.workers": workers})
    with LocalCluster() as cluster:
        cluster.submit_topology(f"exact{workers}", c, topology)
        wait_for_commit_of_all(f"exact{workers}", topology, c, words_file)
        assert counts_of(f"exact{workers}", topology, c) == expected_counts(words_file)


def test_the_status_line_counts_the_users_components_and_streams_not_the_checkpoints(words_file):
    from squall.ops.command.report import status_line
    from squall.runtime.info import to_dict

    topology, c = swc.build(words_file), conf()
    with LocalCluster() as cluster:
        cluster.submit_topology("status", c, topology)
        wait_for_commit_of_all("status", topology, c, words_file)
        typed = cluster.topology_info("status")
    info = to_dict(typed)
    components = info["components"]
    assert components[CHECKPOINT_COMPONENT]["acked"] > 0  # its barriers' trees: not the user's
    user_emitted = sum(components[cid]["streams"].get("default", {}).get("emitted", 0)
                       for cid in ("lines", "split", "count"))
    assert user_emitted > 0
    assert f"| emitted {user_emitted:,} | spout acked 0 failed 0 | errors 0" in status_line(typed)


class FlakyCount(swc.WordCount):
    """Fails the prepare of its first checkpoints (task of index 0)."""

    def __init__(self, failures: int) -> None:
        self.failures = failures

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.first = context.get_this_task_index() == 0

    def pre_prepare(self, txid):
        if self.first and self.failures:
            self.failures -= 1
            raise RuntimeError(f"prepare of {txid} refused")


def paced_topology(words_file: str, count: swc.WordCount):
    """The example's topology, paced (so that checkpoints happen mid-file), with ``count``."""
    builder = TopologyBuilder()
    builder.set_spout("lines", swc.FileSpout(words_file, lines_per_sec=6000))
    builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", count, 2).fields_grouping("split", ["word"])
    return builder.create_topology(), conf()


def test_a_failed_checkpoint_rolls_back_and_counts_stay_exact(words_file):
    topology, c = paced_topology(words_file, FlakyCount(failures=3))
    with LocalCluster() as cluster:
        cluster.submit_topology("flaky", c, topology)
        wait_for_commit_of_all("flaky", topology, c, words_file)
        assert counts_of("flaky", topology, c) == expected_counts(words_file)
        errors = cluster.get_topology_info("flaky")["components"]["count"]["errors"]
        assert sum(e["count"] for e in errors) == 3 and all("refused" in e["error"] for e in errors)


class PutsUnstorable(swc.WordCount):
    """Puts a value no serializer takes, once (the rollback removes it)."""

    def prepare(self, conf, context, collector):
        super().prepare(conf, context, collector)
        self.pending_bad = context.get_this_task_index() == 0

    def execute(self, tup):
        if self.pending_bad:
            self.pending_bad = False
            self.counts.put("bad key", object())
        super().execute(tup)


def test_an_unstorable_value_fails_the_checkpoint_naming_component_and_key(words_file):
    topology, c = paced_topology(words_file, PutsUnstorable())
    with LocalCluster() as cluster:
        cluster.submit_topology("unstorable", c, topology)
        wait_for_commit_of_all("unstorable", topology, c, words_file)
        # rolled back, then went on: exact counts, and the bad value never committed
        assert counts_of("unstorable", topology, c) == expected_counts(words_file)
        errors = cluster.get_topology_info("unstorable")["components"]["count"]["errors"]
        assert len(errors) == 1
        assert "component 'count' task" in errors[0]["error"] and "key 'bad key'" in errors[0]["error"]


def test_a_topology_submitted_again_resumes_from_its_last_commit(tmp_path, words_file):
    topology, c = swc.build(words_file), conf()
    expected = expected_counts(words_file)
    with LocalCluster() as cluster:
        cluster.submit_topology("again", c, topology)
        wait_for_commit_of_all("again", topology, c, words_file)
        cluster.kill_topology("again", wait_secs=0)
        wait_until(lambda: "again" not in cluster.get_topologies(), message="killed")
        # the same components over an empty file: only init_state's committed state can hold counts
        empty = tmp_path / "empty.txt"
        empty.write_text("")
        again = swc.build(str(empty))
        cluster.submit_topology("again", c, again)
        wait_until(lambda: counts_of("again", again, c) == expected, message="committed counts kept")
        # the spout resumed at its committed offset (past this file's end): nothing was read again
        assert counts_of("again", again, c) == expected


# -- Storm's hooks and acks --------------------------------------------------------------------------


class Hooked(StatefulBolt):
    """Keeps the values it sees in its state and logs its hooks to a file; a checkpoint whose
    state holds "boom" fails."""

    def __init__(self, log_path: str) -> None:
        self.log_path = log_path

    def prepare(self, conf, context, collector):
        self.collector = collector

    def _log(self, *entry) -> None:
        with open(self.log_path, "a") as f:
            f.write(" ".join(map(str, entry)) + "\n")

    def init_state(self, state):
        self.state = state
        self._log("init_state", sorted(state.keys()))

    def pre_prepare(self, txid):
        self._log("pre_prepare", txid)
        if "boom" in self.state:
            raise RuntimeError("boom")

    def pre_commit(self, txid):
        self._log("pre_commit", txid)

    def pre_rollback(self):
        self._log("pre_rollback")

    def execute(self, tup):
        self.state.put(tup.values[0], True)
        self.collector.ack(tup)


def test_plain_reliable_spout_gets_acks_after_the_commit_and_fails_on_rollback(tmp_path):
    log = tmp_path / "hooks.log"
    feeder = FeederSpout(["v"])
    builder = TopologyBuilder()
    builder.set_spout("feed", feeder)
    builder.set_bolt("hooked", Hooked(str(log))).shuffle_grouping("feed")
    topology = builder.create_topology()
    c = conf(**{"topology.state.checkpoint.interval.ms": 300})
    with LocalCluster() as cluster:
        cluster.submit_topology("hooks", c, topology)
        wait_until(lambda: "pre_commit" in log.read_text() if log.exists() else False, message="a first commit")
        feeder.feed(["a"], msg_id="a")
        wait_until(lambda: feeder.acked == ["a"], message="a acked")
        lines = log.read_text().splitlines()
        # init_state with the (empty) committed state came first; "a" was acked after a commit that holds it
        assert lines[0] == "init_state []"
        assert any(line.startswith("pre_commit") for line in lines[lines.index("init_state []") + 1:])
        state = committed_state("hooks", topology, "hooked", c)
        assert list(state.values()) == [{"a": True}]
        # a failed checkpoint rolls the state back and fails the tuples it held: the spout replays them
        feeder.feed(["boom"], msg_id="boom")
        wait_until(lambda: feeder.failed == ["boom"], message="boom failed")
        lines = log.read_text().splitlines()
        assert lines[-2:] == ["pre_rollback", "init_state ['a']"]
        assert feeder.acked == ["a"]


class LateCheckpointProvider(InMemoryStateProvider):
    """Holds the checkpoint spout's ``open`` (its first ``committed``) until ``started()`` is
    true, for at most a second: the spouts' first tuples would go before the first barrier."""

    started: Any = None

    def committed(self):
        started, LateCheckpointProvider.started = LateCheckpointProvider.started, None
        if started is not None:
            with contextlib.suppress(TimeoutError):
                wait_until(started, timeout=1.0, interval=0.01)
        return super().committed()


def test_a_start_fails_no_tuple_of_a_plain_reliable_spout(tmp_path, monkeypatch):
    """Storm holds a stateful bolt's tuples until its state is initialised: a start replays
    nothing, so no failure shows (it once showed "failed 200" at every start)."""
    feeder = FeederSpout(["n"])
    for n in range(500):  # waiting when the topology starts
        feeder.feed([n], msg_id=n)
    monkeypatch.setattr(LateCheckpointProvider, "started", lambda: len(feeder._channel.queue) < 500)
    builder = TopologyBuilder()
    builder.set_spout("numbers", feeder)
    builder.set_bolt("keys", Hooked(str(tmp_path / "hooks.log")), 2).shuffle_grouping("numbers")
    c = conf(**{"topology.state.provider": f"{__name__}:LateCheckpointProvider"})
    c.set_num_workers(2).set_max_spout_pending(200)
    with LocalCluster() as cluster:
        cluster.submit_topology("start", c, builder.create_topology())
        wait_until(lambda: len(feeder.acked) == 500, message="every number acked")
        assert feeder.failed == []
        assert cluster.get_topology_info("start")["components"]["numbers"]["failed"] == 0


def test_a_stateful_bolt_fed_by_a_spout_that_keeps_no_position_is_warned_about_at_submit(caplog, words_file):
    builder = TopologyBuilder()
    builder.set_spout("plain", FeederSpout(["line"]))  # reads its input again from the start after a restart
    builder.set_bolt("split", swc.SplitLine()).shuffle_grouping("plain")
    builder.set_bolt("count", swc.WordCount()).fields_grouping("split", ["word"])
    with caplog.at_level(logging.WARNING, logger="squall.nimbus"), LocalCluster() as cluster:
        cluster.submit_topology("plainfed", conf(), builder.create_topology())
        cluster.submit_topology("positioned", conf(), swc.build(words_file))  # a StatefulSpout: nothing to say
    assert [r.getMessage() for r in caplog.records if r.name == "squall.nimbus"] == [
        "topology 'plainfed': stateful bolt 'count' is fed by spout 'plain', which keeps no position "
        "(Spout.keeps_position): after a restart it reads its input again, on top of the state the bolt restores; "
        "make it a StatefulSpout, or read from a broker"]


def test_acker_executors_zero_and_a_long_interval_are_refused_at_submit(words_file):
    topology = swc.build(words_file)
    with LocalCluster() as cluster:
        with pytest.raises(InvalidTopologyError, match=r"stateful components \['count', 'lines'\].*acker.executors"):
            cluster.submit_topology("noackers", conf(**{"topology.acker.executors": 0}), topology)
        with pytest.raises(InvalidTopologyError, match=r"interval.ms' \(5000\) must be below the message timeout"):
            cluster.submit_topology("slow", conf(**{"topology.state.checkpoint.interval.ms": 5000}), topology)
        assert cluster.get_topologies() == []


def test_a_state_location_holding_a_component_the_topology_no_longer_has_is_refused_naming_it(words_file):
    with LocalCluster() as cluster:
        cluster.submit_topology("layout", conf(), swc.build(words_file, counters=2))
        cluster.kill_topology("layout", wait_secs=0)
        wait_until(lambda: "layout" not in cluster.get_topologies(), message="killed")
        builder = TopologyBuilder()
        builder.set_spout("lines", swc.FileSpout(words_file))
        builder.set_bolt("split", swc.SplitLine()).shuffle_grouping("lines")
        builder.set_bolt("tally", swc.WordCount()).fields_grouping("split", ["word"])
        with pytest.raises(StateProviderError, match=r"it holds the state of 'count' \(2 task\(s\)\), which this "
                                                     r"topology no longer has"):
            cluster.submit_topology("layout", conf(), builder.create_topology())
        assert cluster.get_topologies() == []


class Tap(BasicBolt):
    """A stateless bolt that reads the words and emits nothing."""

    def execute(self, tup, collector):
        pass


@pytest.mark.parametrize("provider", ["sqlite", "redis"])
def test_a_stateless_bolt_added_that_moves_the_task_ids_leaves_the_counts_exact(tmp_path, request, provider):
    if provider == "redis":
        config = request.getfixturevalue("redis_server").config(key_prefix=f"moved:{tmp_path.name}")
    else:
        config = {"path": str(tmp_path / "state")}
    path = swc.make_input(str(tmp_path / "words.txt"), 3000)
    state = conf(**{"topology.state.provider": provider, "topology.state.provider.config": config})
    first = swc.build(path, counters=2, lines_per_sec=3000)
    builder = TopologyBuilder()  # the same, and "a-tap", which sorts first: every task id moves up
    builder.set_spout("lines", swc.FileSpout(path))
    builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", swc.WordCount(), 2).fields_grouping("split", ["word"])
    builder.set_bolt("a-tap", Tap()).shuffle_grouping("split")
    moved = builder.create_topology()
    with LocalCluster() as cluster:
        cluster.submit_topology("moved", state, first)
        wait_until(lambda: sum(counts_of("moved", first, state).values()) > 2000, timeout=30, interval=0.05,
                   message="some counts committed")
        cluster.kill_topology("moved", wait_secs=0)
        wait_until(lambda: "moved" not in cluster.get_topologies(), message="killed")
        assert set(committed_state("moved", moved, "count", state)) != set(committed_state("moved", first, "count",
                                                                                            state))
        cluster.submit_topology("moved", state, moved)
        wait_for_commit_of_all("moved", moved, state, path)
        assert counts_of("moved", moved, state) == expected_counts(path)


def test_a_state_location_of_another_topology_is_refused_at_submit(tmp_path, words_file):
    sqlite = {"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(tmp_path / "s")}}
    with LocalCluster() as cluster:
        cluster.submit_topology("first", conf(**sqlite), swc.build(words_file))
        cluster.kill_topology("first", wait_secs=0)
        wait_until(lambda: "first" not in cluster.get_topologies(), message="killed")
        with pytest.raises(StateProviderError, match=r"'sqlite' at .*/s: it holds the state of topology 'first', "
                                                     r"not of 'second'"):
            cluster.submit_topology("second", conf(**sqlite), swc.build(words_file))
        assert cluster.get_topologies() == []


def test_the_memory_provider_is_refused_for_worker_processes(words_file):
    with LocalCluster(processes=True) as cluster:
        with pytest.raises(StateProviderError, match="'memory' state provider keeps state in one process"):
            cluster.submit_topology("mem", conf(), swc.build(words_file))
