"""Effectively-once state in every interleaving the search reaches: the checkpoint protocol
run by tests/checkpoint_sim.py's scheduler, which Hypothesis drives.

Each example draws the input (a backlog: every line there from the start), then up to
``STEPS`` steps: which executor runs, which link delivers its next payload (payloads of
different links in any order), when a worker is killed (and what of its links survives) and
restarted, when pending trees time out. After every step the committed counts must be the
counts of exactly the lines below the committed positions; after the steps, with every
worker restarted and run fairly, everything must end up committed, exactly.

The search aims kills at steps of each of the checkpoint spout's barriers (INITSTATE,
PREPARE, COMMIT, ROLLBACK) on each kind of worker (the one with the checkpoint spout, one
with a spout task and a count task, one with bolts only); whatever it draws,
:func:`test_a_kill_at_a_step_of_each_phase_on_each_worker` kills each of them at the first
steps of each barrier on a fair schedule. The search is derandomized: the same examples every
run.

Without the receive path's incarnation rule (a dead run's leftovers dropped once its next run
is heard from, see squall.runtime.messaging.incarnation) the search finds the over-count users saw
(:func:`test_without_the_incarnation_rule_the_search_finds_the_over_count`);
:func:`test_a_dead_spout_workers_leftovers_after_its_next_runs_rollback` is that interleaving,
written out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from checkpoint_sim import Simulation, simulated_time

pytestmark = pytest.mark.timeout(600)

STEPS = 400
PHASES = ("INITSTATE", "PREPARE", "COMMIT", "ROLLBACK")
# how often each kind of step is drawn (the search still reaches any order): mostly whole
# rounds and deliveries, so that checkpoints complete between the kills
WEIGHTS = {"round": 6, "deliver": 2, "run": 1, "send": 1, "timeout": 1, "restart": 2, "kill": 1}
MAX_KILLS = 2
SEARCH = settings(max_examples=400, deadline=None, derandomize=True, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

LINES = st.lists(st.lists(st.text("abcd ", min_size=1, max_size=6), min_size=3, max_size=30),
                 min_size=2, max_size=2)
# up to two kills, each of a worker, that many steps into a phase (the checkpoint spout's
# barrier in flight is of that action)
KILLS = st.lists(st.tuples(st.sampled_from(PHASES), st.integers(0, 2), st.integers(0, 15)), max_size=2)


@pytest.fixture(autouse=True, scope="module")
def harness():
    """The harness's clock; quiet (the protocol logs every rollback and superseded barrier:
    thousands of lines here)."""
    logging.disable(logging.WARNING)
    with simulated_time():
        yield
    logging.disable(logging.NOTSET)


def explore(data: st.DataObject, drop_stale: bool) -> None:
    sim = Simulation(data.draw(LINES, label="lines"), drop_stale=drop_stale, seed=data.draw(st.integers(0, 3)))
    kills = data.draw(KILLS, label="kills: (phase, worker, steps into it)")
    random_kills = MAX_KILLS - len(kills)  # and kills whenever the search draws them
    held: dict[tuple[int, int], int] = {}  # a dead run -> steps until its leftovers may be read
    for _ in range(STEPS):
        if kills and sim.phase() == kills[0][0] and sim.runs[kills[0][1]] is not None and kills[0][2] == 0:
            _, worker, _ = kills.pop(0)
            action = ("kill", worker)
        else:
            if kills and sim.phase() == kills[0][0]:  # count the steps taken in the phase
                kills[0] = (*kills[0][:2], max(kills[0][2] - 1, 0))
            actions = [a for a in sim.actions() if (a[0] != "kill" or random_kills)
                       and not (a[0] == "deliver" and held.get(a[1][:2]))]
            kinds = sorted({a[0] for a in actions})
            kind = data.draw(st.sampled_from([k for k in kinds for _ in range(WEIGHTS[k])]))
            action = data.draw(st.sampled_from([a for a in actions if a[0] == kind]))
            random_kills -= kind == "kill"
        if action[0] == "kill":
            # a busy receiver reads the dead run's leftovers at once, a little later, much later or
            # only once the steps are over
            held[(action[1], sim.runs[action[1]].run)] = data.draw(st.sampled_from([0, 20, 100, STEPS]))
        held = {run: steps - 1 for run, steps in held.items() if steps > 1}
        note(f"{sim.phase():>9}: {action}")
        sim.step(action, keep=lambda n: data.draw(st.integers(0, n)))
        sim.check()
    assert sim.drain(), f"not everything committed: {sim.committed()}"


@pytest.mark.slow
@SEARCH
@given(st.data())
def test_committed_state_is_exact_in_every_interleaving(data):
    explore(data, drop_stale=True)


def fair_steps(sim: Simulation, until: Callable[[], bool], limit: int = 5000) -> None:
    """Take every enabled step in turn (runs, sends, deliveries: no kill, restart or timeout),
    checking the invariant, until ``until()`` holds after a step."""
    for _ in range(limit):
        for action in [a for a in sim.actions() if a[0] in ("run", "send", "deliver")]:
            if action[0] != "deliver" or sim.links[action[1]]:
                sim.step(action)
                sim.check()
                if until():
                    return
    raise AssertionError(f"not reached in {limit} passes")


@pytest.mark.parametrize("steps_into", [0, 3])
@pytest.mark.parametrize("worker", [0, 1, 2], ids=["checkpoint-spout worker", "spout+count worker", "bolts worker"])
@pytest.mark.parametrize("phase", PHASES)
def test_a_kill_at_a_step_of_each_phase_on_each_worker(phase, worker, steps_into):
    """Whatever the search draws, a kill lands at the first steps of every barrier on every
    kind of worker: a fair schedule, the kill, the restart; exact counts all along and at the end."""
    sim = Simulation([["a b", "c", "d a", "b b"] * 8, ["c d", "a", "b c"] * 8])
    if phase == "ROLLBACK":  # a rollback happens after a restart: worker 2's, during a PREPARE
        fair_steps(sim, lambda: sim.phase() == "PREPARE")
        sim.step(("kill", 2))
        sim.step(("restart", 2))
    seen = []
    fair_steps(sim, lambda: sim.phase() == phase and len(seen.append(0) or seen) > steps_into)
    sim.step(("kill", worker), keep=lambda n: n // 2)
    fair_steps(sim, lambda: True, limit=30)  # the others go on a little first
    assert sim.drain(), f"not everything committed: {sim.committed()}"


@pytest.mark.slow
def test_without_the_incarnation_rule_the_search_finds_the_over_count():
    @settings(SEARCH, phases=[Phase.generate])  # no shrinking: finding it is the point
    @given(st.data())
    def search(data):
        explore(data, drop_stale=False)

    with pytest.raises(AssertionError, match="counted too often"):
        search()


@pytest.mark.parametrize("drop_stale", [False, True], ids=["leftovers delivered", "leftovers dropped"])
def test_a_dead_spout_workers_leftovers_after_its_next_runs_rollback(drop_stale):
    """The interleaving users hit: worker 1 (a spout task and a count task) is killed while
    lines it emitted wait, unread, at the splits' workers; its next run asks for a rollback,
    and its spout task's ROLLBACK barrier and replayed lines reach a split before those
    leftovers. Delivered, the leftovers are counted after the rollback, and again when the
    spout replays them: committed counts above the truth."""
    lines = [["a b", "c", "d a"] * 20, ["b c", "a", "c c"] * 20]
    sim = Simulation(lines, drop_stale=drop_stale)
    while sim.committed()[0] is None:  # INITSTATE done, a first checkpoint committed
        assert not sim.rounds(1)
    for _ in range(3):  # worker 1's spout task emits; its worker sends; nothing is read yet
        sim.step(("round", 1))
    assert any(payloads for (source, _, _), payloads in sim.links.items() if source == 1)
    sim.step(("kill", 1))  # every payload it sent stays at its receiver
    sim.step(("restart", 1))
    leftovers = {link for link, payloads in sim.links.items() if link[:2] == (1, 0) and payloads}
    for _ in range(6):  # the rollback it asks for: everything moves but the leftovers, still unread
        for index in range(3):
            sim.step(("round", index))
        for link in [link for link, payloads in sim.links.items() if payloads and link not in leftovers]:
            while sim.links[link]:
                sim.step(("deliver", link))
    if drop_stale:
        assert sim.drain()
    else:
        with pytest.raises(AssertionError, match="counted too often"):
            sim.drain()


def test_a_restarted_worker_asks_for_the_rollback_at_once():
    """A restarted worker's request for a rollback leaves at once, though nothing flows to it
    that would flush its executors (it used to wait for the barrier in flight to time out)."""
    sim = Simulation([["a b", "c"], ["b"]])
    assert sim.rounds(50)  # everything committed: nothing flows any more
    sim.step(("kill", 2))
    sim.step(("restart", 2))
    sim.step(("send", 2))
    assert sim.links.get((2, 1, 0)), "no request for a rollback reached the checkpoint spout's worker"
    assert sim.drain()
