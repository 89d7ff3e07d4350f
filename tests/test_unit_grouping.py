"""The groupers of squall.runtime.grouping called directly, many times over, without a topology:
the statistical and exact properties of each algorithm (tests/test_grouping.py checks the
groupings end to end on running topologies, and the process-independent hash)."""

from __future__ import annotations

import collections
import random

import cloudpickle
import pytest

from squall.api.errors import EmitError
from squall.api.grouping import CUSTOM, DIRECT, LOCAL_OR_SHUFFLE, CustomStreamGrouping, GlobalStreamId, GroupingSpec
from squall.runtime.grouping import (
    AllGrouper, FieldsGrouper, GlobalGrouper, LoadAwareShuffleGrouper, NoneGrouper, PartialKeyGrouper, ShuffleGrouper,
    make_grouper,
)
from squall.api.tuple import Fields

TARGETS = [12, 3, 40, 7, 25, 9, 18]  # task ids are not contiguous, nor given in order
STREAM = GlobalStreamId("src", "default")


def choices(grouper, values_seq) -> list[int]:
    """The single task chosen for each values list."""
    out = []
    for values in values_seq:
        chosen = grouper.choose(values)
        assert len(chosen) == 1, chosen
        out.append(chosen[0])
    return out


def fields_grouper(targets=TARGETS) -> FieldsGrouper:
    return FieldsGrouper(list(targets), Fields("k", "n"), Fields("k"))


def partial_key_grouper(targets=TARGETS) -> PartialKeyGrouper:
    return PartialKeyGrouper(list(targets), Fields("k", "n"), Fields("k"))


# -- shuffle -----------------------------------------------------------------------------------------


class Loads(dict):
    """A load-aware grouper's ``load``: task -> load (0.0 when not set)."""

    def __call__(self, task: int) -> float:
        return self.get(task, 0.0)


def one_pass(grouper: LoadAwareShuffleGrouper) -> collections.Counter:
    """How often each target comes up in one pass over the grouper's current ring."""
    return collections.Counter(choices(grouper, [[0]] * grouper.ring_size))


@pytest.mark.parametrize("loads", [{}, {3: 0.5, 40: 0.2, 7: 0.49}, dict.fromkeys(TARGETS, 1.0)],
                         ids=["idle", "at-most-half-full", "all-full"])
def test_load_aware_shuffle_with_equal_weights_is_storms_shuffle(loads):
    k = len(TARGETS)
    seq = choices(LoadAwareShuffleGrouper(TARGETS, random.Random(3), Loads(loads)), [[0]] * (5 * k))
    assert all(sorted(seq[i:i + k]) == sorted(TARGETS) for i in range(len(seq) - k + 1))  # a permutation
    assert all(seq[i] == seq[i + k] for i in range(len(seq) - k))


@pytest.mark.parametrize("load, weight", [(0.0, 100), (0.5, 100), (0.625, 75), (0.75, 50), (0.999, 1), (1.0, 0)])
def test_load_aware_shuffle_weighs_a_target_by_its_spare_capacity(load, weight):
    counts = one_pass(LoadAwareShuffleGrouper([8, 2, 5], random.Random(0), Loads({8: load})))
    assert counts[8] * 100 == counts[2] * weight and counts[2] == counts[5]


def test_load_aware_shuffle_keeps_its_ring_while_every_target_is_full():
    loads = Loads({8: 1.0, 2: 1.0})
    grouper = LoadAwareShuffleGrouper([8, 2], random.Random(0), loads, refresh_secs=0.0)
    assert set(one_pass(grouper).values()) == {grouper.ring_size // 2}  # nothing known yet: equal shares
    loads[2] = 0.0
    one_pass(grouper)
    assert set(one_pass(grouper)) == {2}  # only 2 has room
    loads[2] = 1.0  # now both are full: 2 filled last, and stays the choice
    one_pass(grouper)
    assert set(one_pass(grouper)) == {2}


def test_load_aware_shuffle_never_chooses_a_target_that_filled_since_the_weights_were_taken():
    loads = Loads({8: 0.999})
    # the ring's weights stay as taken
    grouper = LoadAwareShuffleGrouper([8, 2, 5], random.Random(2), loads, refresh_secs=3600.0)
    assert one_pass(grouper)[8] == grouper.ring_size // 201  # weight 1 against 100 and 100
    loads[8] = 1.0  # full now: its share goes to the others, although the ring still has it
    counts = one_pass(grouper) + one_pass(grouper)
    assert counts[8] == 0 and counts[2] + counts[5] == 2 * grouper.ring_size
    loads[8] = 0.999  # room again
    assert one_pass(grouper)[8] == grouper.ring_size // 201


def test_load_aware_shuffle_reads_no_load_per_choice_when_every_target_is_loaded():
    # every target over half full (a saturated stream): no target is better than the ring says
    loads = Loads({8: 0.9, 2: 0.999})
    loads.reads = 0

    def counting(task: int) -> float:
        loads.reads += 1
        return loads(task)

    grouper = LoadAwareShuffleGrouper([8, 2], random.Random(2), counting, refresh_secs=3600.0)
    loads.reads = 0  # those of the first weighing
    counts = one_pass(grouper)
    assert counts[8] == 20 * counts[2] and loads.reads == 0


def test_load_aware_shuffle_weighs_anew_after_a_pass():
    loads = Loads()
    grouper = LoadAwareShuffleGrouper([8, 2], random.Random(1), loads, refresh_secs=0.0)
    assert set(one_pass(grouper).values()) == {grouper.ring_size // 2}
    loads[2] = 0.75  # half way between half full (weight 100) and full (weight 0)
    one_pass(grouper)  # the pass that ends with the new weights
    counts = one_pass(grouper)
    assert counts[2] * 100 == counts[8] * 50
    loads.clear()
    one_pass(grouper)
    assert set(one_pass(grouper).values()) == {grouper.ring_size // 2}  # back to equal shares


def test_make_grouper_is_load_aware_for_shuffle_and_local_or_shuffle_given_a_load():
    spec = GroupingSpec("shuffle")
    assert type(make_grouper(spec, context=StubContext(1), stream=STREAM, targets=[4, 5], output_fields=Fields("k"),
                             local_tasks=set(), rng=random.Random(0), load=Loads())) is LoadAwareShuffleGrouper
    assert type(make_grouper(GroupingSpec("local_or_shuffle"), context=StubContext(1), stream=STREAM, targets=[4, 5],
                             output_fields=Fields("k"), local_tasks={4, 5}, rng=random.Random(0),
                             load=Loads())) is LoadAwareShuffleGrouper
    # without a load (topology.disable.loadaware.messaging), or with a single target: plain shuffle
    assert type(make_grouper(spec, context=StubContext(1), stream=STREAM, targets=[4, 5], output_fields=Fields("k"),
                             local_tasks=set(), rng=random.Random(0))) is ShuffleGrouper
    assert type(make_grouper(spec, context=StubContext(1), stream=STREAM, targets=[4], output_fields=Fields("k"),
                             local_tasks=set(), rng=random.Random(0), load=Loads())) is ShuffleGrouper


@pytest.mark.parametrize("targets", [[5], [8, 2], TARGETS, list(range(100, 131))], ids=["1", "2", "7", "31"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shuffle_is_round_robin_over_one_permutation_of_every_target(targets, seed):
    k, n = len(targets), 6
    seq = choices(ShuffleGrouper(targets, random.Random(seed)), [[i] for i in range(k * n)])
    first = seq[:k]
    assert sorted(first) == sorted(targets)  # a permutation of the targets...
    assert seq == first * n  # ...repeated: each target exactly n times, k apart
    assert collections.Counter(seq) == {t: n for t in targets}


def test_shuffle_permutation_depends_on_the_rng():
    orders = {tuple(choices(ShuffleGrouper(TARGETS, random.Random(seed)), [[0]] * len(TARGETS)))
              for seed in range(30)}
    assert len(orders) > 20, "every emitter would send its first tuples to the same tasks"
    firsts = collections.Counter(order[0] for order in orders)
    assert len(firsts) >= 5, firsts


# -- fields ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_key", [lambda i: f"user-{i}", lambda i: i * 7919, lambda i: (i % 13, f"d{i}")],
                         ids=["str", "int", "tuple"])
def test_fields_spreads_many_keys_evenly_and_keeps_each_on_one_task(make_key):
    grouper = fields_grouper()
    keys = [make_key(i) for i in range(7000)]
    first = choices(grouper, [[k, 0] for k in keys])
    # again, from this grouper (cached) and from a fresh one (another emitter): the same task
    assert choices(grouper, [[k, 1] for k in keys]) == first
    assert choices(fields_grouper(), [[k, 2] for k in reversed(keys)]) == first[::-1]
    load = collections.Counter(first)
    assert set(load) == set(TARGETS)
    mean = len(keys) / len(TARGETS)
    assert all(abs(c - mean) < 0.15 * mean for c in load.values()), load


@pytest.mark.parametrize("a, b", [
    (2**70, float(2**70)),
    (-(2**64), float(-(2**64))),
    (0, -0.0),
    (b"key", bytearray(b"key")),
    ({1, 2}, frozenset({2.0, True})),
    ([b"k", {True}], [bytearray(b"k"), frozenset({1})]),
], ids=["big-int-float", "big-negative", "negative-zero", "bytearray", "set-frozenset", "nested"])
def test_fields_equal_values_of_other_types_hash_alike(a, b):
    assert a == b
    targets = range(1, 12)
    assert choices(fields_grouper(targets), [[a, 0]]) == choices(fields_grouper(targets), [[b, 0]])


def test_fields_a_key_without_a_stable_hash_is_refused_naming_its_type():
    with pytest.raises(TypeError, match="a grouping key value of type complex has no stable hash"):
        fields_grouper().choose([1j, 0])


# -- partial key -------------------------------------------------------------------------------------


def split_key() -> str:
    """A key whose two candidate tasks differ (for 1 key in 7 they coincide): a fresh grouper
    sends it to its first candidate, then to the other, less loaded one."""
    return next(key for key in (f"hot-{i}" for i in range(100))
                if len(set(choices(partial_key_grouper(), [[key, 0], [key, 1]]))) == 2)


def skewed_keys(seed: int, n: int = 8000) -> list[str]:
    """Half the stream is one hot key, the rest 2000 cold keys."""
    rng = random.Random(seed)
    keys = [split_key()] * (n // 2) + [f"cold-{rng.randrange(2000)}" for _ in range(n // 2)]
    rng.shuffle(keys)
    return keys


def test_partial_key_sends_a_key_to_at_most_two_tasks_and_balances_a_hot_key():
    keys = skewed_keys(1)
    per_key: dict = collections.defaultdict(collections.Counter)
    for key, task in zip(keys, choices(partial_key_grouper(), [[k, 0] for k in keys])):
        per_key[key][task] += 1
    assert all(len(tasks) <= 2 for tasks in per_key.values()), [k for k, t in per_key.items() if len(t) > 2]
    load: collections.Counter = collections.Counter()
    for tasks in per_key.values():
        load.update(tasks)
    hot = per_key[split_key()]
    # fields grouping would give one task the whole hot key (half the stream); here its two
    # tasks share it, and the load of every task stays below 60% of it
    assert len(hot) == 2 and max(load.values()) < 0.6 * sum(hot.values()), (hot, load)
    a, b = hot.values()
    assert abs(a - b) < 0.1 * sum(hot.values()), hot


def test_partial_key_emitters_with_different_loads_agree_on_a_keys_two_tasks():
    # each emitter has its own counts, so may pick either candidate: never a third task
    union: dict = collections.defaultdict(set)
    for seed in range(8):
        grouper = partial_key_grouper()
        keys = skewed_keys(seed, 2000)
        for key, task in zip(keys, choices(grouper, [[k, seed] for k in keys])):
            union[key].add(task)
    assert all(len(tasks) <= 2 for tasks in union.values())
    assert len(union[split_key()]) == 2


# -- all, global, none -------------------------------------------------------------------------------


def test_all_is_every_target_every_time():
    grouper = AllGrouper(TARGETS)
    assert grouper.fanout == len(TARGETS)
    for i in range(20):
        assert grouper.choose([i]) == sorted(TARGETS)


def test_global_is_the_lowest_target_every_time():
    for targets in (TARGETS, [9], [30, 2, 2000]):
        assert set(choices(GlobalGrouper(targets), [[i] for i in range(20)])) == {min(targets)}


def test_none_picks_only_targets_all_of_them_evenly_and_depends_on_the_rng_only():
    seq = choices(NoneGrouper(TARGETS, random.Random(42)), [[i] for i in range(7000)])
    load = collections.Counter(seq)
    assert set(load) == set(TARGETS)
    assert all(abs(c - 1000) < 150 for c in load.values()), load
    # not round-robin: the same task twice in a row happens
    assert any(a == b for a, b in zip(seq, seq[1:]))
    # the values do not matter, the rng does
    assert choices(NoneGrouper(TARGETS, random.Random(42)), [["x"]] * 7000) == seq
    assert choices(NoneGrouper(TARGETS, random.Random(43)), [[0]] * 7000) != seq


# -- make_grouper: local or shuffle, direct, custom --------------------------------------------------


class StubContext:
    """What make_grouper asks a TopologyContext: the emitting task."""

    def __init__(self, task_id: int) -> None:
        self.task_id = task_id

    def get_this_task_id(self) -> int:
        return self.task_id


def grouper_for(spec: GroupingSpec, targets=TARGETS, local_tasks=(), seed: int = 0, task: int = 1):
    return make_grouper(spec, context=StubContext(task), stream=STREAM, targets=list(targets),
                        output_fields=Fields("v"), local_tasks=set(local_tasks), rng=random.Random(seed))


@pytest.mark.parametrize("local_tasks, expected", [
    ({3, 25, 99}, {3, 25}),  # the targets in this worker (99 is not a target)
    ({40}, {40}),
    (set(), set(TARGETS)),  # none in this worker: every target
    ({99, 100}, set(TARGETS)),
], ids=["two-local", "one-local", "no-local-task", "only-non-targets-local"])
def test_local_or_shuffle_round_robins_over_the_local_targets_if_any(local_tasks, expected):
    grouper = grouper_for(GroupingSpec(LOCAL_OR_SHUFFLE), local_tasks=local_tasks)
    seq = choices(grouper, [[i] for i in range(len(expected) * 5)])
    assert collections.Counter(seq) == {t: 5 for t in expected}


def test_direct_has_no_grouper_and_an_unknown_kind_is_refused():
    assert grouper_for(GroupingSpec(DIRECT)) is None
    with pytest.raises(ValueError, match="unknown grouping type 'sideways'"):
        grouper_for(GroupingSpec("sideways"))


class Scripted(CustomStreamGrouping):
    """Returns, for values [i], ``answers[i]``; records its calls in ``calls`` (the copy
    make_grouper unpickles is not this instance: the answers travel with it)."""

    calls: list = []

    def __init__(self, answers: list) -> None:
        self.answers = answers

    def prepare(self, context, stream, target_tasks) -> None:
        Scripted.calls.append(("prepare", context.get_this_task_id(), stream, list(target_tasks)))

    def choose_tasks(self, task_id, values):
        Scripted.calls.append(("choose", task_id, list(values)))
        return self.answers[values[0]]


def custom(answers: list) -> GroupingSpec:
    return GroupingSpec(CUSTOM, custom=cloudpickle.dumps(Scripted(answers)))


def test_custom_is_prepared_once_with_the_sorted_targets_and_its_choices_are_kept():
    Scripted.calls = []
    grouper = grouper_for(custom([[3], (40, 7), {25}, list(TARGETS)]), task=8)
    assert [grouper.choose([i]) for i in range(4)] == [[3], [40, 7], [25], TARGETS]
    assert Scripted.calls == [("prepare", 8, STREAM, sorted(TARGETS)),
                              *[("choose", 8, [i]) for i in range(4)]]


@pytest.mark.parametrize("answer", [[9999], [3, 9999], [], None], ids=["not-a-target", "partly", "empty", "none"])
def test_custom_choosing_anything_but_a_non_empty_subset_names_the_grouping(answer):
    grouper = grouper_for(custom([[3], answer]))
    assert grouper.choose([0]) == [3]
    with pytest.raises(EmitError) as error:
        grouper.choose([1])
    message = str(error.value)
    assert message.startswith("custom grouping Scripted on src:default chose "), message
    assert str(sorted(TARGETS)) in message
