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

With the exactly-once sink (``Simulation(..., sink=True)``: a two-phase sink ``out`` fed by
``split``, writing into an outside store) the output is checked too: after every step the
visible words are covered by the committed state (never beyond the words of the lines below
the committed positions, no part visible twice), and in the end they are all the words,
exactly. :func:`test_a_sink_worker_killed_at_each_failure_point_of_the_two_phase_commit` kills
a sink task's worker at each failure point of the protocol (issue 37);
:func:`test_the_sinks_output_is_exact_in_every_interleaving` is the search with the sink.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, Phase, given, note, settings
from hypothesis import strategies as st

from checkpoint_sim import CooperativeWordSink, Crash, Simulation, WordSink, simulated_time
from squall.api.two_phase_commit import PENDING_KEY

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


def explore(data: st.DataObject, drop_stale: bool, sink: bool = False) -> None:
    sim = Simulation(data.draw(LINES, label="lines"), drop_stale=drop_stale, seed=data.draw(st.integers(0, 3)),
                     sink=sink)
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


# -- the exactly-once sink ----------------------------------------------------------------------

# long enough for checkpoints 0, 1 and 2 on a fair schedule: the failure points of 1 are mid-stream
SINK_LINES = [["a b", "c", "d a", "b b"] * 20, ["c d", "a", "b c"] * 20]
FAILURE_POINTS = ("before PREPARE", "after PREPARE", "after the checkpoint's commit", "inside the sink's commit",
                  "after the sink's commit")


def _sink(sim: Simulation, index: int) -> tuple[int, int, WordSink | None]:
    """(worker, task id, the live instance or None) of sink task ``index``."""
    task = sim.assignment.component_tasks["out"][index]
    worker = sim.assignment.task_worker[task]
    return worker, task, next((s for s in sim.sink_tasks(worker) if s.task == task), None)


def _at(sim: Simulation, point: str, index: int) -> bool:
    """Whether sink task ``index`` is at ``point`` (one of :data:`FAILURE_POINTS` but "inside the
    sink's commit", which a crash marks), with an earlier epoch of its already visible (what a
    replay could make visible again)."""
    _, task, sink = _sink(sim, index)
    prefix = f"task{task}-"
    committed = sim.provider.committed()
    if sink is None or committed is None or not any(p.startswith(prefix) for p in sim.store.visible_parts):
        return False
    pending = [sim.store.txids[p] for p in sim.store.pending if p.startswith(prefix)]
    if point == "before PREPARE":  # words in the open transaction, the PREPARE on its way to the task
        return (sink.open is not None and bool(sink.open["words"]) and sim.phase() == "PREPARE"
                and not any(txid > committed for txid in pending))
    if point == "after PREPARE":  # a part prepared, its checkpoint not committed
        return any(txid > committed for txid in pending)
    if point == "after the checkpoint's commit":  # its checkpoint committed, the part still pending
        return any(txid <= committed for txid in pending)
    if point == "after the sink's commit":  # visible, but the committed state still lists its handle: the
        # task ran the COMMIT, whose tree is not complete yet
        return sim.phase() == "COMMIT" and any(handle in sim.store.visible_parts
                                               for _, handle in sim.task_state("out", task).get(PENDING_KEY, ()))
    raise ValueError(point)


@pytest.mark.parametrize("sink_class", [WordSink, CooperativeWordSink], ids=["blocking sink", "cooperative sink"])
@pytest.mark.parametrize("index", [0, 1], ids=["sink task 0", "sink task 1"])
@pytest.mark.parametrize(("point", "steps_into", "killed"), [
    (point, steps, killed) for point in FAILURE_POINTS
    for steps in ([0] if point == "inside the sink's commit" else [0, 3])
    for killed in (["its worker"] if point == "inside the sink's commit" else ["its worker", "another worker"])])
def test_a_sink_worker_killed_at_each_failure_point_of_the_two_phase_commit(point, steps_into, killed, index,
                                                                             sink_class):
    """Issue 37: on a fair schedule, the worker of a sink task is killed (``kill -9``) at a
    failure point of the two-phase commit (``steps_into``: at the first step there, or at the
    fourth; a crash marks the one inside the commit), the others go on a little, it restarts;
    the visible output never goes beyond the committed state, and ends up exactly every word once.
    ``killed``: the sink task's worker, or worker 1 (a spout task, a split and a count task, no
    sink task): then the sink task lives on, and the rollback the restart asks for recovers it
    in place (``abort_prepared`` of its uncommitted part, ``recover`` of the committed ones).

    * before PREPARE: the task's open transaction holds words (lost; the spout replays them);
    * after PREPARE: a part of the task is pending, its checkpoint not committed (dropped by
      the recovery, or committed by it if the checkpoint completed without the dead worker);
    * after the checkpoint's commit: a part is pending though its checkpoint is committed
      (the sink's executor has not run that COMMIT): the recovery commits it;
    * inside the sink's commit: the commit makes the part visible, then the process dies in
      it (:class:`~checkpoint_sim.Crash`): the recovery commits it again, which changes nothing;
    * after the sink's commit: the part is visible, the committed state still lists its handle
      (its removal is recorded with the next checkpoint): likewise.
    """
    sim = Simulation(SINK_LINES, sink=True, sink_class=sink_class)
    worker, task, _ = _sink(sim, index)
    if point == "inside the sink's commit":
        fair_steps(sim, lambda: _at(sim, "after the checkpoint's commit", index))  # the next commit crashes
        sim.store.crash_in_commit.add(task)
        with pytest.raises(Crash):
            fair_steps(sim, lambda: False)
        assert sim.phase() == "COMMIT"
        crashed = sim.store.visible_parts[-1]
    else:
        seen = []
        fair_steps(sim, lambda: _at(sim, point, index) and len(seen.append(0) or seen) > steps_into)
    prefix = f"task{task}-"
    committed = sim.provider.committed()
    pending = {p: sim.store.txids[p] for p in sim.store.pending if p.startswith(prefix)}
    listed = [handle for _, handle in sim.task_state("out", task).get(PENDING_KEY, ())]
    if killed == "another worker":
        assert worker != 1 and not sim.sink_tasks(1)
        worker = 1
    sim.step(("kill", worker), keep=lambda n: n // 2)
    sim.check()
    taken = []
    fair_steps(sim, lambda: len(taken.append(0) or taken) >= 20)  # the others go on a little first
    assert sim.drain(), f"not everything committed: {sim.committed()}"  # and the output is exact
    assert sim.store.pending == {}, f"parts left pending: {sim.store.pending}"
    commits = [entry for entry in sim.store.log if entry[0] == "commit"]
    if point == "after the checkpoint's commit":  # committed by the restarted task's recovery
        for part in [p for p, txid in pending.items() if txid <= committed]:
            assert part in sim.store.visible_parts
    elif point in ("inside the sink's commit", "after the sink's commit"):
        parts = [crashed] if point == "inside the sink's commit" else [
            handle for handle in listed if handle in sim.store.visible_parts]
        assert parts
        for part in parts:  # committed again by the recovery: nothing changed
            calls = [made_visible for _, _, handle, _, made_visible in commits if handle == part]
            assert calls[0] and len(calls) >= 2 and not any(calls[1:]), (part, calls)


@pytest.mark.slow
@settings(SEARCH, max_examples=200)
@given(st.data())
def test_the_sinks_output_is_exact_in_every_interleaving(data):
    """The search, with the exactly-once sink: its output checked after every step and at the end."""
    explore(data, drop_stale=True, sink=True)
