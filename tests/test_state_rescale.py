"""Key groups and a stateful bolt's task count changed between two submits (issue 49):
squall.api.state.key_groups as pure functions, the fields grouping that follows them, the
providers' rescale of a location (memory, sqlite) and its refusals, and the stateful word count
(examples/stateful_wordcount.py) run with 2, then 3, then 1 count tasks, exact each time."""

from __future__ import annotations

import collections
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from squall import LocalCluster, TopologyBuilder
from squall.api.state import StateProviderError
from squall.api.state.key_groups import DEFAULT_KEY_GROUPS, key_group, owned, owner
from squall.api.state.provider import provider_for
from squall.api.tuple import Fields
from squall.runtime.grouping import FieldsGrouper, key_hash
from squall.testing import committed_state, wait_until
from wordcount_state import counts_of, expected_counts, spout_done, state_conf, swc

pytestmark = pytest.mark.timeout(120)


# -- key groups, as pure functions ----------------------------------------------------------------

@given(st.integers(1, 4096).flatmap(lambda groups: st.tuples(st.just(groups), st.integers(1, groups))))
def test_every_group_is_owned_by_one_task_whose_range_is_contiguous(layout):
    groups, tasks = layout
    ranges = [owned(i, tasks, groups) for i in range(tasks)]
    assert [g for r in ranges for g in r] == list(range(groups))  # each group once, in task order
    assert all(len(r) >= 1 for r in ranges) and max(map(len, ranges)) - min(map(len, ranges)) <= 1
    assert all(owner(g, tasks, groups) == i for i, r in enumerate(ranges) for g in r)


@given(st.lists(st.one_of(st.text(max_size=8), st.integers(-2**63, 2**64 - 1)), min_size=1, max_size=3),
       st.integers(1, 512), st.integers(1, 8))
def test_a_key_keeps_its_group_whatever_the_task_count_and_goes_to_its_owner(key, groups, tasks):
    tasks = min(tasks, groups)
    group = key_group(key_hash(key), groups)
    assert 0 <= group < groups
    targets = [10 + 3 * i for i in range(tasks)]
    fields = Fields(*[f"f{i}" for i in range(len(key))])
    assert FieldsGrouper(targets, fields, fields, groups).choose(list(key)) == [targets[owner(group, tasks, groups)]]


def test_keys_that_differ_in_a_few_bits_spread_over_the_groups():
    # a CRC alone would put every one of these in the first half of 128 groups (one task of 2)
    halves = collections.Counter(owner(key_group(key_hash([c]), 128), 2, 128) for c in "abcdefghijklmnop")
    assert min(halves.values()) >= 4


# -- the providers ----------------------------------------------------------------------------------

@pytest.fixture(params=["memory", "sqlite"])
def make(request, tmp_path):
    name, made = f"rescale-{uuid.uuid4().hex[:8]}", []

    def make() -> Any:
        config = {"path": str(tmp_path / "state")} if request.param == "sqlite" else {}
        provider = provider_for({"topology.state.provider": request.param,
                                 "topology.state.provider.config": config}, name)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


def _key(word: str) -> bytes:
    return msgpack.packb(word)


def _write(provider: Any, tasks: int, words: list[str], txid: int, keyed: bool = True) -> None:
    """Commit checkpoint ``txid`` of ``count``: each word's count, in the task owning its group."""
    stores = [provider.task_store("count", 100 + i, i) for i in range(tasks)]
    by_task: list[dict[bytes, bytes]] = [{} for _ in range(tasks)]
    groups: list[dict[bytes, int]] = [{} for _ in range(tasks)]
    for n, word in enumerate(words):
        group = key_group(key_hash([word]), DEFAULT_KEY_GROUPS)
        index = owner(group, tasks, DEFAULT_KEY_GROUPS)
        by_task[index][_key(word)] = msgpack.packb(n)
        if keyed:
            groups[index][_key(word)] = group
    for store, puts, kept in zip(stores, by_task, groups):
        store.prepare(txid, puts, [], kept)
    provider.set_committed(txid)
    for store in stores:
        store.commit(txid)
        store.close()


def _contents(provider: Any, tasks: int) -> list[dict[str, int]]:
    committed = provider.committed()
    stores = [provider.task_store("count", 0, i) for i in range(tasks)]
    return [{msgpack.unpackb(k): msgpack.unpackb(v) for k, v in store.read(committed).items()} for store in stores]


WORDS = [f"word{i}" for i in range(300)]


def test_a_new_task_count_deals_each_group_to_its_new_owner(make):
    assert make().claim({"count": 2, "lines": 1}, DEFAULT_KEY_GROUPS) == DEFAULT_KEY_GROUPS
    _write(make(), 2, WORDS, 1)
    for tasks in (3, 1, 4):
        provider = make()
        assert provider.claim({"count": tasks, "lines": 1}, DEFAULT_KEY_GROUPS) == DEFAULT_KEY_GROUPS
        contents = _contents(make(), tasks)
        assert {w: n for c in contents for w, n in c.items()} == {w: n for n, w in enumerate(WORDS)}
        for index, content in enumerate(contents):  # each word where the fields grouping sends it now
            assert all(owner(key_group(key_hash([w]), DEFAULT_KEY_GROUPS), tasks, DEFAULT_KEY_GROUPS) == index
                       for w in content)
        assert make().committed() == 1


def test_a_checkpoint_prepared_but_not_committed_does_not_move(make):
    make().claim({"count": 2}, DEFAULT_KEY_GROUPS)
    _write(make(), 2, WORDS[:10], 1)
    provider = make()
    store = provider.task_store("count", 0, 0)
    store.prepare(2, {_key("late"): msgpack.packb(1)}, [], {_key("late"): 5})  # txid 2 never committed
    store.close()
    make().claim({"count": 3}, DEFAULT_KEY_GROUPS)
    assert "late" not in {w for c in _contents(make(), 3) for w in c}


def test_state_without_key_groups_keeps_its_task_count_named_in_one_line(make):
    make().claim({"count": 2}, DEFAULT_KEY_GROUPS)
    _write(make(), 2, ["offset"], 1, keyed=False)
    with pytest.raises(StateProviderError, match=r"component 'count' cannot change its task count \(2 -> 3\): its "
                                                 r"state key 'offset' was not put while executing an input of a fields "
                                                 r"grouping .* submit it with 2 task\(s\)$"):
        make().claim({"count": 3}, DEFAULT_KEY_GROUPS)
    assert make().claim({"count": 2}, DEFAULT_KEY_GROUPS) == DEFAULT_KEY_GROUPS  # the same count still runs


def test_a_key_that_two_tasks_hold_is_refused_rather_than_one_lost(make):
    make().claim({"count": 2}, DEFAULT_KEY_GROUPS)
    provider = make()
    for index in range(2):  # each task's own running total, put while executing its inputs
        store = provider.task_store("count", 0, index)
        store.prepare(1, {_key("total"): msgpack.packb(10 + index)}, [], {_key("total"): index * 100})
        store.close()
    provider.set_committed(1)
    with pytest.raises(StateProviderError, match=r"'count' cannot change its task count \(2 -> 3\): its tasks 0 and 1 "
                                                 r"\(by index\) both hold state key 'total'"):
        make().claim({"count": 3}, DEFAULT_KEY_GROUPS)


def test_other_key_groups_and_more_tasks_than_groups_are_refused(make):
    make().claim({"count": 2}, 16)
    with pytest.raises(StateProviderError, match=r"keep 16 key groups.* asks for 128 \(topology.state.key.groups\)"):
        make().claim({"count": 2}, 128)
    with pytest.raises(StateProviderError, match=r"'count' cannot have 17 tasks: its state has 16 key groups"):
        make().claim({"count": 17}, 16)


def _sums(provider: Any) -> dict[str, int]:
    committed = provider.committed()
    store = provider.task_store("sum", 0, 0)
    try:
        return {msgpack.unpackb(k): msgpack.unpackb(v) for k, v in store.read(committed).items()}
    finally:
        store.close()


def test_a_component_added_starts_empty_and_one_dropped_is_refused_naming_it_unless_allowed(make, tmp_path):
    make().claim({"count": 2}, DEFAULT_KEY_GROUPS)
    _write(make(), 2, WORDS, 1)
    counts = _contents(make(), 2)
    assert sum(map(len, counts)) == len(WORDS)
    provider = make()
    assert provider.claim({"count": 2, "sum": 1}, DEFAULT_KEY_GROUPS) == DEFAULT_KEY_GROUPS  # an added bolt
    assert _contents(provider, 2) == counts and _sums(provider) == {}
    store = provider.task_store("sum", 0, 0)
    store.prepare(2, {_key("total"): msgpack.packb(7)}, [], {_key("total"): 3})
    provider.set_committed(2)
    store.commit(2)
    store.close()

    with pytest.raises(StateProviderError, match=r"it holds the state of 'sum' \(1 task\(s\)\), which this "
                                                 r"topology no longer has: keep the component's id .*"
                                                 r"--allow-dropped-state \(topology.state.allow.dropped\)"):
        make().claim({"count": 2}, DEFAULT_KEY_GROUPS)
    assert _sums(make()) == {"total": 7}  # refused: nothing changed
    assert make().claim({"count": 2}, DEFAULT_KEY_GROUPS, allow_dropped=True) == DEFAULT_KEY_GROUPS
    again = make()
    assert _contents(again, 2) == counts  # the kept component kept its state
    if again.name == "sqlite":
        assert sorted(p.name for p in (tmp_path / "state" / "tasks").iterdir()) == ["count"]
    again.claim({"count": 2, "sum": 1}, DEFAULT_KEY_GROUPS)
    assert _sums(again) == {}  # added back: its old state was deleted


def test_a_sqlite_location_claimed_before_key_groups_keeps_its_tasks_by_id(tmp_path):
    state = tmp_path / "state"
    (state / "tasks").mkdir(parents=True)
    with sqlite3.connect(state / "topology.sqlite") as conn:  # as Squall made it before key groups
        conn.execute("CREATE TABLE topology (id INTEGER PRIMARY KEY CHECK (id = 0), name TEXT NOT NULL, "
                     "layout TEXT NOT NULL, committed INTEGER, committed_at REAL)")
        conn.execute("INSERT INTO topology VALUES (0, 'old', ?, 3, NULL)", (json.dumps({"count": 2}),))
    with sqlite3.connect(state / "tasks" / "count-5.sqlite") as conn:  # task id 5's file
        conn.execute("CREATE TABLE base (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID")
        conn.execute("CREATE TABLE prepared (key BLOB NOT NULL, value BLOB)")
        conn.execute("CREATE TABLE txids (id INTEGER PRIMARY KEY CHECK (id = 0), base INTEGER, prepared INTEGER)")
        conn.execute("INSERT INTO txids VALUES (0, 3, NULL)")
        conn.execute("INSERT INTO base VALUES (?, ?)", (_key("a"), msgpack.packb(7)))
    conf = {"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(state)}}
    provider = provider_for(conf, "old")
    assert provider.claim({"count": 2}, DEFAULT_KEY_GROUPS) is None  # routed by task count, as it was written
    assert provider.task_store("count", 5, 1).load(3) == {_key("a"): msgpack.packb(7)}
    with pytest.raises(StateProviderError, match=r"'count' cannot change its task count \(2 -> 3\): this location "
                                                 r"keeps no key groups"):
        provider_for(conf, "old").claim({"count": 3}, DEFAULT_KEY_GROUPS)
    provider.close()


def test_a_rescale_that_died_before_its_claim_leaves_the_location_as_it_was(tmp_path, monkeypatch):
    from squall.runtime.state import sqlite_provider

    conf = {"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": str(tmp_path)}}
    provider_for(conf, "t").claim({"count": 2}, DEFAULT_KEY_GROUPS)
    _write(provider_for(conf, "t"), 2, WORDS, 1)
    written = []

    def dies(self, committed, content):  # the process dies after writing one task of the next generation
        if written:
            raise SystemExit("killed")
        written.append(1)
        original(self, committed, content)

    original = sqlite_provider._SqliteTaskStore.restore
    monkeypatch.setattr(sqlite_provider._SqliteTaskStore, "restore", dies)
    with pytest.raises(SystemExit):
        provider_for(conf, "t").claim({"count": 3}, DEFAULT_KEY_GROUPS)
    monkeypatch.undo()
    again = provider_for(conf, "t")
    assert again.claim({"count": 2}, DEFAULT_KEY_GROUPS) == DEFAULT_KEY_GROUPS  # still 2 tasks, the old files
    assert sorted(p.name for p in (tmp_path / "tasks" / "count").glob("*.sqlite")) == ["g0-0.sqlite", "g0-1.sqlite"]
    assert {w for c in _contents(again, 2) for w in c} == set(WORDS)
    again.claim({"count": 3}, DEFAULT_KEY_GROUPS)
    assert sorted(p.name for p in (tmp_path / "tasks" / "count").glob("*.sqlite")) == [f"g1-{i}.sqlite"
                                                                                       for i in range(3)]
    assert {w for c in _contents(again, 3) for w in c} == set(WORDS)


# -- the stateful word count with 2, 3, then 1 count tasks --------------------------------------------

@pytest.mark.parametrize("provider", ["memory", "sqlite"])
def test_the_word_count_resubmitted_with_other_count_tasks_stays_exact(tmp_path, provider):
    path = swc.make_input(str(tmp_path / "words.txt"), 3000)
    name = f"rescaled-{provider}"
    settings = {"path": str(tmp_path / "state")} if provider == "sqlite" else {}
    conf = state_conf(**{"topology.state.provider": provider, "topology.state.provider.config": settings})
    with LocalCluster() as cluster:
        def run(counters: int, until: Any, lines_per_sec: float | None = None) -> Any:
            topology = swc.build(path, counters=counters, lines_per_sec=lines_per_sec)
            cluster.submit_topology(name, conf, topology)
            wait_until(until(topology), timeout=60, interval=0.05, message=f"the run with {counters} count tasks")
            cluster.kill_topology(name, wait_secs=0)
            wait_until(lambda: name not in cluster.get_topologies(), message="killed")
            return topology

        # stopped mid-stream: the next run resumes from its last commit, with 3 tasks
        run(2, lambda t: lambda: sum(counts_of(name, t, conf).values()) > 2000, lines_per_sec=3000)
        for counters, more in ((3, 0), (1, 1000)):
            if more:
                swc.make_input(str(tmp_path / "more.txt"), more, seed=counters)
                with open(path, "a") as f, open(tmp_path / "more.txt") as extra:
                    f.write(extra.read())
            topology = run(counters, lambda t: lambda: spout_done(name, t, conf, path))
            assert counts_of(name, topology, conf) == expected_counts(path)
            by_task = committed_state(name, topology, "count", conf)
            tasks = sorted(by_task)
            for task, counts in by_task.items():  # each word in the one task its key group routes it to
                assert all(tasks[owner(key_group(key_hash([w]), DEFAULT_KEY_GROUPS), counters,
                                       DEFAULT_KEY_GROUPS)] == task for w in counts)


def test_a_spout_keeps_its_task_count_and_the_refusal_names_it(tmp_path):
    path = swc.make_input(str(tmp_path / "words.txt"), 500)
    conf = state_conf(**{"topology.state.provider": "sqlite",
                         "topology.state.provider.config": {"path": str(tmp_path / "s")}})
    with LocalCluster() as cluster:
        topology = swc.build(path)
        cluster.submit_topology("spouts", conf, topology)
        wait_until(lambda: spout_done("spouts", topology, conf, path), timeout=60, message="the whole file committed")
        cluster.kill_topology("spouts", wait_secs=0)
        wait_until(lambda: "spouts" not in cluster.get_topologies(), message="killed")
        builder = TopologyBuilder()
        builder.set_spout("lines", swc.FileSpout(path), 2)
        builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("lines")
        builder.set_bolt("count", swc.WordCount(), 2).fields_grouping("split", ["word"])
        with pytest.raises(StateProviderError, match=r"component 'lines' cannot change its task count \(1 -> 2\): "
                                                     r"its state key 'offset'"):
            cluster.submit_topology("spouts", conf, builder.create_topology())


# -- a Streams API pipeline upgraded ---------------------------------------------------------------

def _streams_counts(path: str, filtered: bool, parallelism: int) -> Any:
    """examples/streams_wordcount.py's pipeline; ``filtered``: its next version, with a filter
    added before the count (the operations fuse into the same bolts, so they keep their ids)."""
    import streams_wordcount as s

    from squall.streams import StreamBuilder

    builder = StreamBuilder()
    words = builder.new_stream(swc.FileSpout(path)).flat_map(s.split)
    if filtered:
        words = words.filter(str.isalpha)
    words.repartition(parallelism).map_to_pair(s.one).update_state_by_key(0, s.Add())
    return builder.build()


COUNTS = "bolt3"  # the update_state_by_key's bolt, after split's and the repartition's


def test_a_streams_pipeline_upgraded_with_a_filter_and_more_count_tasks_keeps_its_counts(tmp_path):
    path = swc.make_input(str(tmp_path / "words.txt"), 2000)
    conf = state_conf(**{"topology.state.provider": "sqlite",
                         "topology.state.provider.config": {"path": str(tmp_path / "state")}})

    def counts(topology: Any) -> collections.Counter:
        total: collections.Counter = collections.Counter()
        for task in committed_state("upgraded", topology, COUNTS, conf).values():
            total.update(task)
        return total

    def lines_done(topology: Any) -> bool:
        states = committed_state("upgraded", topology, "spout1", conf)
        return sum(s.get("offset", 0) for s in states.values()) == Path(path).stat().st_size

    with LocalCluster() as cluster:
        for filtered, parallelism in ((False, 2), (True, 3)):
            topology = _streams_counts(path, filtered, parallelism)
            assert topology.state_layout == {"spout1": 1, COUNTS: parallelism}  # the same ids, each version
            cluster.submit_topology("upgraded", conf, topology)
            wait_until(lambda: lines_done(topology), timeout=60, interval=0.05, message="the whole file committed")
            cluster.kill_topology("upgraded", wait_secs=0)
            wait_until(lambda: "upgraded" not in cluster.get_topologies(), message="killed")
            assert counts(topology) == expected_counts(path)
            with open(path, "a") as f:  # the next version reads on
                f.write("the cow jumped over the moon\n" * 50)


def _named_counts(path: str, repartitioned: bool, named: bool = True) -> Any:
    """The same pipeline, its spout and count named; ``repartitioned``: its next version, with
    the words lowered in a bolt of their own before the count (a bolt added in between)."""
    import streams_wordcount as s

    from squall.streams import StreamBuilder

    builder = StreamBuilder()
    lines = builder.new_stream(swc.FileSpout(path))
    words = (lines.name("lines") if named else lines).flat_map(s.split)
    if repartitioned:
        words = words.repartition(2).map(str.lower)
    counts = words.map_to_pair(s.one).update_state_by_key(0, s.Add())
    if named:
        counts.name("counts")
    return builder.build()


def test_named_streams_operations_keep_their_state_when_a_bolt_is_added_before_them_and_count_tasks_change(tmp_path):
    path = swc.make_input(str(tmp_path / "words.txt"), 2000)  # lower-case words: lowering changes none
    conf = state_conf(**{"topology.state.provider": "sqlite",
                         "topology.state.provider.config": {"path": str(tmp_path / "state")}})
    first, upgraded = _named_counts(path, False), _named_counts(path, True)
    assert (first.state_layout, upgraded.state_layout) == ({"lines": 1, "counts": 1}, {"lines": 1, "counts": 2})
    assert sorted(c for c in upgraded.components if c[0].isalpha()) == ["bolt1", "bolt2", "counts", "lines"]
    # unnamed, the count's bolt would be renumbered, its state left behind (and refused)
    assert _named_counts(path, False, named=False).state_layout == {"spout1": 1, "bolt2": 1}
    assert _named_counts(path, True, named=False).state_layout == {"spout1": 1, "bolt3": 2}

    def lines_done(topology: Any) -> bool:
        states = committed_state("named", topology, "lines", conf)
        return sum(s.get("offset", 0) for s in states.values()) == Path(path).stat().st_size

    with LocalCluster() as cluster:
        for topology in (first, upgraded):
            cluster.submit_topology("named", conf, topology)
            wait_until(lambda: lines_done(topology), timeout=60, interval=0.05, message="the whole file committed")
            cluster.kill_topology("named", wait_secs=0)
            wait_until(lambda: "named" not in cluster.get_topologies(), message="killed")
            counts: collections.Counter = collections.Counter()
            for task in committed_state("named", topology, "counts", conf).values():
                counts.update(task)
            assert counts == expected_counts(path)
            with open(path, "a") as f:  # the next version reads on
                f.write("the cow jumped over the moon\n" * 50)
        with pytest.raises(StateProviderError, match=r"it holds the state of 'counts' \(2 task\(s\)\), 'lines' "
                                                     r"\(1 task\(s\)\), which this topology no longer has"):
            cluster.submit_topology("named", conf, _named_counts(path, True, named=False))


# -- while it runs: squall rebalance -e past the task count --------------------------------------------

def test_a_rebalance_grows_a_stateful_bolts_tasks_while_input_flows_and_the_counts_stay_exact(tmp_path):
    path = swc.make_input(str(tmp_path / "words.txt"), 3000)
    conf = state_conf(**{"topology.state.provider": "sqlite",
                         "topology.state.provider.config": {"path": str(tmp_path / "state")}})
    topology = swc.build(path, counters=2, lines_per_sec=2000)
    with LocalCluster() as cluster:
        cluster.submit_topology("grown", conf, topology)
        wait_until(lambda: sum(counts_of("grown", topology, conf).values()) > 3000, timeout=60, interval=0.05,
                   message="some counts committed")
        with pytest.raises(ValueError, match=r"executors of 'lines' must be an integer from 1 to its 1 task"):
            cluster.rebalance("grown", wait_secs=0, executors={"lines": 2})  # a spout's tasks stay
        with pytest.raises(ValueError, match=r"executors of stateful bolt 'count' must be an integer from 1 to its "
                                             r"128 key groups"):
            cluster.rebalance("grown", wait_secs=0, executors={"count": 129})
        cluster.rebalance("grown", wait_secs=0, executors={"count": 4})
        grown = swc.build(path, counters=4)
        assert cluster.get_topology_info("grown")["status"] == "ACTIVE"
        wait_until(lambda: spout_done("grown", grown, conf, path), timeout=60, interval=0.05,
                   message="the whole file committed after the rebalance")
        assert counts_of("grown", grown, conf) == expected_counts(path)
        by_task = committed_state("grown", grown, "count", conf)
        assert len(by_task) == 4 and all(by_task.values())  # the keys spread over the 4 tasks


class CountingCheckpoints(swc.WordCount):
    """A word count that also counts its checkpoints, in a put outside ``execute``: no key group."""

    def pre_prepare(self, txid: int) -> None:
        self.counts.put("$checkpoints", self.counts.get("$checkpoints", 0) + 1)


def test_a_rebalance_refused_by_the_state_leaves_the_topology_running_as_it_was(tmp_path):
    path = swc.make_input(str(tmp_path / "words.txt"), 1000)
    conf = state_conf(**{"topology.state.provider": "sqlite",
                         "topology.state.provider.config": {"path": str(tmp_path / "state")}})
    builder = TopologyBuilder()
    builder.set_spout("lines", swc.FileSpout(path))
    builder.set_bolt("split", swc.SplitLine()).shuffle_grouping("lines")
    builder.set_bolt("count", CountingCheckpoints(), 2).fields_grouping("split", ["word"])
    topology = builder.create_topology()
    with LocalCluster() as cluster:
        cluster.submit_topology("refused", conf, topology)
        wait_until(lambda: any("$checkpoints" in state
                               for state in committed_state("refused", topology, "count", conf).values()),
                   timeout=60, interval=0.05, message="a checkpoint counted")
        with pytest.raises(ValueError, match=r"rebalance of topology 'refused': .*component 'count' cannot change its "
                                             r"task count \(2 -> 3\): its state key '\$checkpoints'"):
            cluster.rebalance("refused", wait_secs=0, executors={"count": 3})
        assert cluster.get_topology_info("refused")["status"] == "ACTIVE"
        wait_until(lambda: spout_done("refused", topology, conf, path), timeout=60, interval=0.05,
                   message="the whole file committed, on 2 count tasks")
        counts = counts_of("refused", topology, conf)
        del counts["$checkpoints"]
        assert counts == expected_counts(path)
