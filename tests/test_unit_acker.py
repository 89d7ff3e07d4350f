"""The acker's logic (squall.runtime.acker.Acker) driven directly, without a topology: XOR trees that
complete in any message order (acks may overtake the init), fails, timeout resets and the
forgetting of trees by rotation.

``Tree`` plays the executors' part: it builds a random tuple tree the way spouts and bolts
anchor (a random 64-bit edge id per anchored emit, XOR-ed into the child's id and into what
the parent reports when it is acked) and yields the messages the acker gets: an init and acks
(each a row of an ``__ack_batch``: Storm's ``__ack_init`` and ``__ack_ack``), fails. ``Driven``
feeds them to an Acker one at a time and records what it tells the spouts, completions included.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from squall.runtime.executor.ack_ledger import RoundAcks
from squall.runtime.acker import Acker, RootIds, acker_for
from squall.api.system_ids import ACK_BATCH, ACK_FAIL, ACK_RESET_TIMEOUT, ACKED_BATCH

SPOUT_TASK = 5
INIT, ACK = "init", "ack"  # a row of an ack batch: a tree's init (with its spout task), or an ack


class Spouts:
    """The acker's ``send``: what it told which spout task, in order."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, str, list]] = []

    def __call__(self, task: int, stream: str, values: list) -> None:
        self.sent.append((task, stream, list(values)))

    def told(self, stream: str) -> list[tuple[int, int]]:
        """(spout task, root) of every message sent on ``stream``."""
        return [(task, values[0]) for task, s, values in self.sent if s == stream]


@pytest.fixture
def spouts() -> Spouts:
    return Spouts()


class Driven:
    """An Acker fed one message at a time (an init or an ack as a one-row ``__ack_batch``); what
    it tells the spouts lands in ``spouts``, each completed tree as ``(task, ACKED_BATCH, [root])``."""

    def __init__(self, spouts: Spouts) -> None:
        self.spouts = spouts
        self.acker = Acker(spouts)

    def execute(self, kind: str, values: list) -> None:
        if kind == INIT:
            self.batch([values[0]], [values[1]], [values[2]])
        elif kind == ACK:
            self.batch([values[0]], [values[1]], [-1])
        else:
            self.acker.execute(kind, values)
            self._collect()

    def batch(self, roots: list, vals: list, spout_tasks: list) -> None:
        self.acker.execute(ACK_BATCH, [roots, vals, spout_tasks])
        self._collect()

    def _collect(self) -> None:
        for task, roots in self.acker.take_completed().items():
            self.spouts.sent.extend((task, ACKED_BATCH, [root]) for root in roots)

    def rotate(self) -> None:
        self.acker.rotate()

    def __len__(self) -> int:
        return len(self.acker)


@pytest.fixture
def acker(spouts) -> Driven:
    return Driven(spouts)


def edge(rng: random.Random) -> int:
    return rng.getrandbits(64)


class Tree:
    """A random tuple tree of about ``size`` tuples rooted at one spout tuple, and the acker
    messages its processing makes: the init, then one ack per tuple."""

    def __init__(self, rng: random.Random, size: int, spout_task: int = SPOUT_TASK) -> None:
        self.root = rng.getrandbits(64)
        self.spout_task = spout_task
        # the spout emits to 1..3 tasks: one edge id each, XOR-ed into the init value
        children = [edge(rng) for _ in range(rng.randint(1, 3))]
        init_val = 0
        for e in children:
            init_val ^= e
        self.init = (INIT, [self.root, init_val, spout_task])
        self.acks: list[tuple[str, list]] = []
        todo = list(children)
        made = len(children)
        while todo:
            tuple_id = todo.pop(rng.randrange(len(todo)))
            # a bolt processing this tuple emits anchored children, then acks it
            ack_val = tuple_id
            for _ in range(rng.randint(0, 3) if made < size else 0):
                e = edge(rng)
                ack_val ^= e
                todo.append(e)
                made += 1
            self.acks.append((ACK, [self.root, ack_val]))

    def messages(self, rng: random.Random | None = None) -> list[tuple[str, list]]:
        """The init and every ack; shuffled with ``rng`` (the init may come after acks)."""
        out = [self.init, *self.acks]
        if rng is not None:
            rng.shuffle(out)
        return out

    def failing(self, rng: random.Random, failed: int | None = None) -> list[tuple[str, list]]:
        """The messages when the bolt of the ``failed``-th ack (random if None) fails its
        tuple instead: that ack becomes a fail; shuffled with ``rng``."""
        i = rng.randrange(len(self.acks)) if failed is None else failed
        out = [self.init, *self.acks[:i], (ACK_FAIL, [self.root]), *self.acks[i + 1:]]
        rng.shuffle(out)
        return out


def feed(acker: Driven, messages) -> None:
    for stream, values in messages:
        acker.execute(stream, values)


@pytest.mark.parametrize("seed", range(20))
def test_a_tree_is_acked_once_only_after_its_last_message_whatever_the_order(acker, spouts, seed):
    rng = random.Random(seed)
    tree = Tree(rng, size=rng.randint(1, 40))
    messages = tree.messages(rng)
    for stream, values in messages[:-1]:
        acker.execute(stream, values)
        assert spouts.sent == [], f"acked before the tree was complete: {stream}"
        assert len(acker) == 1
    acker.execute(*messages[-1])
    assert spouts.sent == [(SPOUT_TASK, ACKED_BATCH, [tree.root])]
    assert len(acker) == 0


def test_acks_before_the_init_complete_the_tree_when_the_init_arrives(acker, spouts):
    rng = random.Random(1)
    tree = Tree(rng, size=10)
    feed(acker, tree.acks)  # every bolt acked before the spout's init reached the acker
    assert spouts.sent == [] and len(acker) == 1
    acker.execute(*tree.init)
    assert spouts.told(ACKED_BATCH) == [(SPOUT_TASK, tree.root)]
    assert len(acker) == 0


def test_an_incomplete_tree_is_not_acked(acker, spouts):
    tree = Tree(random.Random(2), size=12)
    assert len(tree.acks) > 1
    feed(acker, [tree.init, *tree.acks[:-1]])
    assert spouts.sent == []
    assert len(acker) == 1


def test_an_init_with_value_zero_is_acked_at_once(acker, spouts):
    # XOR of no edge ids: nothing to wait for
    acker.execute(INIT, [77, 0, 3])
    assert spouts.sent == [(3, ACKED_BATCH, [77])]
    assert len(acker) == 0


@pytest.mark.parametrize("seed", range(10))
def test_a_failed_tuple_fails_its_tree_once_and_it_is_never_acked(acker, spouts, seed):
    rng = random.Random(seed)
    tree = Tree(rng, size=8)
    # wherever the fail lands (before the init included), the spout is told once, at the
    # first moment both the fail and the init have arrived
    messages = tree.failing(rng)
    seen_init = seen_fail = False
    for stream, values in messages:
        acker.execute(stream, values)
        seen_init |= stream == INIT
        seen_fail |= stream == ACK_FAIL
        expected = [(SPOUT_TASK, ACK_FAIL, [tree.root])] if seen_init and seen_fail else []
        assert spouts.sent == expected, (stream, seen_init, seen_fail)
    # and the tree is gone, though its other acks may have come after the fail
    feed(acker, [(ACK, [tree.root, 0])])
    assert spouts.told(ACKED_BATCH) == []


def test_a_fail_wins_over_an_xor_that_completes(acker, spouts):
    # every ack and a fail arrive before the init: the value returns to 0 with the init,
    # but the tree failed
    tree = Tree(random.Random(11), size=6)
    feed(acker, [*tree.acks, (ACK_FAIL, [tree.root]), tree.init])
    assert spouts.sent == [(SPOUT_TASK, ACK_FAIL, [tree.root])]
    assert len(acker) == 0


def test_a_fail_reaches_the_spout_task_of_its_tree(acker, spouts):
    acker.execute(INIT, [1, 0xABC, 11])
    acker.execute(INIT, [2, 0xDEF, 12])
    acker.execute(ACK_FAIL, [2])
    assert spouts.sent == [(12, ACK_FAIL, [2])]
    acker.execute(ACK, [1, 0xABC])
    assert spouts.sent[1:] == [(11, ACKED_BATCH, [1])]
    assert len(acker) == 0


# -- timeouts: rotation forgets, reset_timeout restarts ------------------------------------------


def test_a_tree_survives_one_rotation_and_completes(acker, spouts):
    tree = Tree(random.Random(4), size=6)
    acker.execute(*tree.init)
    acker.rotate()
    assert len(acker) == 1 and spouts.sent == []
    feed(acker, tree.acks)
    assert spouts.told(ACKED_BATCH) == [(SPOUT_TASK, tree.root)]


def test_a_tree_is_forgotten_silently_at_the_second_rotation(acker, spouts):
    tree = Tree(random.Random(5), size=6)
    acker.execute(*tree.init)
    acker.rotate()
    acker.rotate()
    assert len(acker) == 0
    assert spouts.sent == []  # the spout times the tree out on its own clock
    # its late acks complete nothing: the init (and the spout task) are gone
    feed(acker, tree.acks)
    assert spouts.sent == []


def test_reset_timeout_tells_the_spout_and_restarts_the_expiry(acker, spouts):
    rng = random.Random(6)
    kept, dropped = Tree(rng, size=6), Tree(rng, size=6, spout_task=9)
    acker.execute(*kept.init)
    acker.execute(*dropped.init)
    acker.rotate()
    acker.execute(ACK_RESET_TIMEOUT, [kept.root])
    assert spouts.sent == [(SPOUT_TASK, ACK_RESET_TIMEOUT, [kept.root])]
    acker.rotate()  # the second rotation since both inits: only the reset tree is left
    assert len(acker) == 1
    feed(acker, kept.acks + dropped.acks)
    assert spouts.told(ACKED_BATCH) == [(SPOUT_TASK, kept.root)]
    assert 9 not in {task for task, _, _ in spouts.sent}


def test_reset_timeout_before_the_init_is_not_sent_but_keeps_the_acks(acker, spouts):
    tree = Tree(random.Random(7), size=5)
    feed(acker, tree.acks)
    acker.execute(ACK_RESET_TIMEOUT, [tree.root])  # spout task not known yet: nobody to tell
    assert spouts.sent == []
    acker.execute(*tree.init)
    assert spouts.sent == [(SPOUT_TASK, ACKED_BATCH, [tree.root])]


def test_reset_timeout_of_a_tree_that_is_gone_tells_nobody(acker, spouts):
    acker.execute(INIT, [3, 0, SPOUT_TASK])  # acked at once
    spouts.sent.clear()
    acker.execute(ACK_RESET_TIMEOUT, [3])
    assert spouts.sent == []


def test_stray_entries_from_late_acks_are_forgotten_by_rotation(acker, spouts):
    tree = Tree(random.Random(8), size=4)
    feed(acker, tree.messages())
    assert len(acker) == 0
    acker.execute(ACK, [tree.root, 123])  # a duplicate ack after completion
    assert len(acker) == 1 and spouts.told(ACKED_BATCH) == [(SPOUT_TASK, tree.root)]
    acker.rotate()
    acker.rotate()
    assert len(acker) == 0


# -- many trees ------------------------------------------------------------------------------------


def test_many_interleaved_trees_each_get_exactly_their_outcome(acker, spouts):
    rng = random.Random(9)
    trees = [Tree(rng, size=rng.randint(1, 25), spout_task=rng.choice([4, 5, 6])) for _ in range(200)]
    failed = {t.root for t in rng.sample(trees, 40)}
    queues = [t.failing(rng) if t.root in failed else t.messages(rng) for t in trees]
    # interleave: take the next message of a random tree until all are delivered
    while queues:
        i = rng.randrange(len(queues))
        acker.execute(*queues[i].pop(0))
        if not queues[i]:
            queues.pop(i)

    assert sorted(spouts.told(ACKED_BATCH)) == sorted((t.spout_task, t.root) for t in trees if t.root not in failed)
    assert sorted(spouts.told(ACK_FAIL)) == sorted((t.spout_task, t.root) for t in trees if t.root in failed)
    assert len(spouts.sent) == len(trees)  # exactly one outcome per tree
    # acks that came after their tree's fail left entries without a spout task: rotation
    # forgets them, silently
    assert 0 < len(acker) <= len(failed)
    acker.rotate()
    acker.rotate()
    assert len(acker) == 0 and len(spouts.sent) == len(trees)


class DictAcker:
    """The acker's algorithm as Storm writes it (``Acker.java``), over dicts: a RotatingMap of
    two buckets of ``[val, spout task, failed]``; a new tree goes into the newest bucket, a
    fail or a reset moves it there. The reference the C tables are checked against."""

    def __init__(self, send) -> None:
        self.send = send
        self.buckets: list[dict[int, list]] = [{}, {}]

    def _get(self, root: int, put: bool) -> list:
        for bucket in self.buckets:
            if root in bucket:
                entry = bucket[root]
                if put:  # RotatingMap.put: into the newest bucket, out of the others
                    del bucket[root]
                    self.buckets[0][root] = entry
                return entry
        entry = self.buckets[0][root] = [0, -1, False]
        return entry

    def step(self, kind: str, root: int, val: int = 0, task: int = -1) -> None:
        entry = self._get(root, put=kind != ACK_BATCH)
        if kind == ACK_BATCH:
            entry[0] ^= val
            if task >= 0:
                entry[1] = task
        elif kind == ACK_FAIL:
            entry[2] = True
        elif entry[1] >= 0:  # a reset, told to a known spout task
            self.send(entry[1], ACK_RESET_TIMEOUT, [root])
        if entry[1] >= 0 and (entry[2] or entry[0] == 0):
            for bucket in self.buckets:
                bucket.pop(root, None)
            self.send(entry[1], ACK_FAIL if entry[2] else ACKED_BATCH, [root])

    def rotate(self) -> None:
        self.buckets = [{}, self.buckets[0]]


STEPS = st.lists(st.tuples(st.sampled_from(["init", "ack", "fail", "reset", "rotate"]),
                           st.integers(0, 5), st.sampled_from([0, 1, 2, 2**63, 2**64 - 1, 12345]),
                           st.integers(0, 2)), max_size=120)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(STEPS)
def test_the_acker_tells_each_spout_what_the_dict_version_of_storms_algorithm_tells_it(steps):
    # random inits, acks, fails, resets and rotations over a few trees (values that cancel and
    # values of all 64 bits): the same messages, in the same order, and the same trees left
    ours, reference = Spouts(), Spouts()
    driven, model = Driven(ours), DictAcker(reference)
    roots = [0, 1, 2**63, 2**64 - 1, 7, 2**40]
    for kind, i, val, task in steps:
        root = roots[i]
        if kind == "init":
            driven.execute(INIT, [root, val, SPOUT_TASK + task])
            model.step(ACK_BATCH, root, val, SPOUT_TASK + task)
        elif kind == "ack":
            driven.execute(ACK, [root, val])
            model.step(ACK_BATCH, root, val)
        elif kind == "rotate":
            driven.rotate()
            model.rotate()
        else:
            stream = ACK_FAIL if kind == "fail" else ACK_RESET_TIMEOUT
            driven.execute(stream, [root])
            model.step(stream, root)
        assert ours.sent == reference.sent
        assert len(driven) == sum(map(len, model.buckets))


def test_the_acker_of_a_tree_is_chosen_by_its_root():
    tasks = [7, 8, 9]
    assert [acker_for(root, tasks) for root in range(6)] == [7, 8, 9, 7, 8, 9]
    assert acker_for(2**64 - 1, tasks) == tasks[(2**64 - 1) % 3]
    assert acker_for(12345, [4]) == 4


# -- RoundAcks: a cooperative thread's inits and acks, combined per round ------------------------


def play_round(messages: list[tuple[str, list]]) -> tuple[RoundAcks, list, list]:
    """Put ``messages`` (inits and acks; the rest goes to the acker directly) into a RoundAcks
    the way collectors do, flush it, and return it with what went to the acker and which
    trees completed locally."""
    acks = RoundAcks()
    for stream, values in messages:
        if stream == INIT:
            acks.init(*values)
        else:  # an ack, as collectors combine them
            acks.acks.xor(values[0], values[1])
    to_ackers, by_spout = acks.take()
    to_acker = [(ACK, [root, val]) if task == -1 else (INIT, [root, val, task]) for root, val, task in to_ackers]
    completed = [(task, root) for task, roots in by_spout.items() for root in roots]
    return acks, to_acker, completed


def test_a_tree_whose_init_and_acks_all_meet_in_the_round_completes_without_the_acker():
    rng = random.Random(7)
    trees = [Tree(rng, size=12, spout_task=SPOUT_TASK + i % 3) for i in range(50)]
    messages = [m for tree in trees for m in tree.messages()]
    rng.shuffle(messages)
    acks, to_acker, completed = play_round(messages)
    assert to_acker == []
    assert sorted(completed) == sorted((tree.spout_task, tree.root) for tree in trees)
    assert len(acks.acks) == 0 and len(acks.inits) == 0


@pytest.mark.parametrize("seed", range(20))
def test_a_tree_split_over_rounds_and_workers_completes_once_at_its_acker(spouts, seed):
    # a round has the init and some acks, another worker's round the others: the acker gets
    # each part combined, and acks the spout once, in any order of arrival
    rng = random.Random(seed)
    tree = Tree(rng, size=10)
    messages = tree.messages(rng)
    cut = rng.randrange(1, len(messages))
    parts = [play_round(messages[:cut]), play_round(messages[cut:])]
    acker = Driven(spouts)
    sent = [m for _, to_acker, _ in parts for m in to_acker]
    rng.shuffle(sent)
    for stream, values in sent:
        acker.execute(stream, values)
    local = [c for _, _, completed in parts for c in completed]
    assert spouts.told(ACKED_BATCH) + local == [(SPOUT_TASK, tree.root)]
    for stream, values in sent:  # what reaches the acker is an init or an ack, never a zero ack
        assert stream == INIT or (stream == ACK and values[1] != 0)


def test_a_tree_with_a_failed_tuple_never_completes_in_the_round_and_its_acker_fails_it(spouts):
    rng = random.Random(3)
    tree = Tree(rng, size=8)
    messages = tree.failing(rng)
    fail = [m for m in messages if m[0] == ACK_FAIL]
    _, to_acker, completed = play_round([m for m in messages if m[0] != ACK_FAIL])
    assert completed == []  # the failed tuple's edge is never acked: the tree cannot add up to 0
    acker = Driven(spouts)
    for stream, values in [*fail, *to_acker]:  # the fail went to the acker directly, maybe first
        acker.execute(stream, values)
    assert spouts.told(ACK_FAIL) == [(SPOUT_TASK, tree.root)] and spouts.told(ACKED_BATCH) == []


@pytest.mark.parametrize("seed", range(10))
def test_an_ack_batch_settles_the_trees_its_messages_would(seed):
    """ACK_BATCH (an executor's inits and acks of one flush, combined per tree) against the same
    messages one by one: the same spouts hear of the same trees."""
    rng = random.Random(seed)
    trees = [Tree(rng, size=8, spout_task=SPOUT_TASK + i % 2) for i in range(30)]
    messages = [m for tree in trees for m in tree.messages()]
    rng.shuffle(messages)
    one_by_one, batched = Spouts(), Spouts()
    single, batching = Driven(one_by_one), Driven(batched)
    for stream, values in messages:
        single.execute(stream, values)
    for start in range(0, len(messages), 17):  # flushes of 17 messages
        batch: dict[int, tuple[int, int]] = {}
        for stream, values in messages[start:start + 17]:
            val, task = batch.get(values[0], (0, -1))
            batch[values[0]] = (val ^ values[1], values[2] if stream == INIT else task)
        batching.batch(list(batch), [val for val, _ in batch.values()], [task for _, task in batch.values()])
    assert sorted(batched.told(ACKED_BATCH)) == sorted(one_by_one.told(ACKED_BATCH)) == \
        sorted((tree.spout_task, tree.root) for tree in trees)
    assert len(single) == len(batching) == 0


# -- root ids --------------------------------------------------------------------------------------


@pytest.mark.parametrize("ackers, local", [
    ([10, 11, 12], {11}), ([10, 11, 12, 13, 14], {10, 14}), ([7, 8], {7, 8}), ([7, 8], set()), ([4], {4}),
], ids=["one-of-three", "two-of-five", "all-local", "none-local", "single"])
@pytest.mark.parametrize("high_bit", [0, 1 << 63], ids=["plain", "high-bit"])
def test_a_new_root_is_tracked_by_a_local_acker_and_keeps_its_high_bit(ackers, local, high_bit):
    roots = RootIds(ackers, frozenset(local))
    roots.high_bit = high_bit
    # random draws, and those at the ends of the range (where moving to a local acker's
    # remainder could cross 2**63 or reach 2**64)
    draws = [random.Random(i).getrandbits(63) for i in range(2000)] + [0, 1, 2, (1 << 63) - 1, (1 << 63) - 2]
    chosen = set()
    for bits in draws:
        root = roots.from_bits(bits)
        assert 0 <= root < 1 << 64 and root & (1 << 63) == high_bit, (bits, root)
        chosen.add(acker_for(root, ackers))
    assert chosen == (set(local) or set(ackers))  # every local acker gets trees; any when none is local
