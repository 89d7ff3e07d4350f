"""The autoscaler's decisions (squall.cluster.autoscaler.decide) as a pure function of what it
observed: scale up when saturated for the whole window, down when idle for it, never within the
cool-down, never on a window that disagrees, within the bounds and the slots."""

from __future__ import annotations

import pytest

from squall.cluster.autoscaler import HOLD, SCALE_DOWN, SCALE_UP, ComponentLoad, Observation, Settings, decide

SETTINGS = Settings(min_workers=1, max_workers=4, window_secs=10, cooldown_secs=60)


def observations(workers: int, count_capacity: float, count_executors: int = 1, secs: float = 12,
                 queue_fill: float = 0.9, lag_growth: float = 0.0, executed: float = 1000.0) -> list[Observation]:
    """One observation a second for ``secs``: a spout and a count bolt (4 tasks) at a capacity."""
    return [Observation(float(t), workers, (
        ComponentLoad("spout", workers, 4, 0.05, spout=True, executed=executed, lag=5000 if lag_growth else None,
                      lag_growth=lag_growth),
        ComponentLoad("count", count_executors, 4, count_capacity, queue_fill=queue_fill)))
        for t in range(int(secs) + 1)]


def test_a_saturated_worker_for_the_whole_window_scales_up_and_spreads_the_busy_bolt():
    decision = decide(observations(1, 1.0), SETTINGS, since_rebalance=120)
    assert (decision.action, decision.workers, decision.executors) == (SCALE_UP, 2, {"count": 2})
    assert "saturated for 10s" in decision.reason and "busiest count at capacity 1.00" in decision.reason


def test_a_rebalance_carries_each_executors_measured_cpu_for_placement():
    # the count's work (a whole worker's) shared by its 2 new executors; the spout's as it was (5%
    # of a core on 1 executor); nothing below 1% (idle now is not free later)
    decision = decide(observations(1, 1.0), SETTINGS, since_rebalance=120)
    assert decision.cpu_loads == {"spout": 5.0, "count": 50.0}
    idle = decide(observations(2, 0.004, count_executors=2, queue_fill=0.0), SETTINGS, since_rebalance=120)
    assert idle.action == SCALE_DOWN and idle.cpu_loads["count"] == 1.0


def test_nothing_happens_in_the_cool_down_or_before_a_whole_window_is_seen():
    assert decide(observations(1, 1.0), SETTINGS, since_rebalance=30).action == HOLD
    assert "cooling down: 30s" in decide(observations(1, 1.0), SETTINGS, since_rebalance=30).reason
    short = decide(observations(1, 1.0, secs=5), SETTINGS, since_rebalance=120)
    assert short.action == HOLD and "observing: 5s of the 10s window" in short.reason
    assert decide([], SETTINGS, since_rebalance=120).action == HOLD


def test_a_window_that_disagrees_holds():
    history = observations(1, 1.0)
    history[6] = observations(1, 0.5, queue_fill=0.0)[6]  # one calm second
    assert decide(history, SETTINGS, since_rebalance=120).action == HOLD


def test_no_flapping_after_scaling_up_the_spread_load_is_steady():
    # the work of one saturated worker spread over two: half a worker each
    decision = decide(observations(2, 0.5, count_executors=2, queue_fill=0.1), SETTINGS, since_rebalance=120)
    assert decision.action == HOLD and decision.reason.startswith("steady")


def test_an_idle_topology_scales_down_and_its_busy_bolt_follows():
    decision = decide(observations(2, 0.15, count_executors=2, queue_fill=0.0), SETTINGS, since_rebalance=120)
    assert (decision.action, decision.workers, decision.executors) == (SCALE_DOWN, 1, {"spout": 1, "count": 1})
    # never below the minimum
    assert decide(observations(1, 0.1, queue_fill=0.0), SETTINGS, since_rebalance=120).action == HOLD


def test_a_growing_lag_scales_up_by_how_much_more_arrives_than_is_processed():
    # the spout falls behind by as much as it processes: twice the load, in workers
    decision = decide(observations(1, 1.0, lag_growth=1000.0), SETTINGS, since_rebalance=120)
    assert (decision.action, decision.workers) == (SCALE_UP, 3)
    assert "lag spout 5,000 (+1,000/s)" in decision.reason


def test_the_bounds_and_the_slots_limit_the_workers_and_say_so():
    at_most_two = Settings(max_workers=2, window_secs=10, cooldown_secs=60)
    assert decide(observations(1, 1.0, lag_growth=1000.0), at_most_two, 120).workers == 2
    full = decide(observations(2, 1.0, count_executors=2), at_most_two, 120)
    assert full.action == HOLD and full.limited and "the most workers allowed (2)" in full.reason
    one_slot = Settings(max_workers=4, window_secs=10, cooldown_secs=60, slots=1)
    limited = decide(observations(1, 1.0), one_slot, 120)
    assert limited.action == HOLD and limited.limited and "limited by the slots there are (1)" in limited.reason


def test_a_busy_bolt_never_gets_more_executors_than_tasks():
    history = [Observation(float(t), 1, (ComponentLoad("count", 1, 1, 1.0, queue_fill=0.9),)) for t in range(12)]
    decision = decide(history, SETTINGS, 120)
    assert (decision.action, decision.workers, decision.executors) == (SCALE_UP, 2, {})


@pytest.mark.parametrize("kwargs,message", [
    ({"min_workers": 3, "max_workers": 2}, "1 <= min <= max"),
    ({"target_utilization": 0.9}, "scale down .* < target .* < scale up"),
    ({"window_secs": 0}, "window must be > 0 s"),
])
def test_bad_settings_are_refused_saying_which(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Settings(**kwargs)


def test_squall_monitor_prints_each_new_decision_once(capsys):
    from squall.ops.cli import _autoscale_lines
    from squall.runtime.info import AutoscaleDecision, TopologyInfo

    decisions = [AutoscaleDecision(time=100.0, action=SCALE_UP, workers=2, executors={"count": 2},
                                   reason="saturated for 10s"),
                 AutoscaleDecision(time=200.0, action=SCALE_DOWN, workers=1, executors={}, reason="idle for 10s")]
    info = TopologyInfo(name="t", status="ACTIVE", uptime_secs=1, workers=[], components={}, autoscale=decisions)
    assert _autoscale_lines(info, 150.0) == 200.0
    assert _autoscale_lines(info, 200.0) == 200.0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 1 and out[0].endswith("scale-down to 1 workers: idle for 10s")
    assert _autoscale_lines(TopologyInfo(name="t", status="ACTIVE", uptime_secs=1, workers=[], components={}),
                            0.0) == 0.0
