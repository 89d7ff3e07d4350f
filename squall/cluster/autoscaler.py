"""The autoscaler's decisions (Flink's autoscaler and Heron's Dhalion, for a Squall topology):
what parallelism per component and how many workers, from what the topology shows.

:func:`decide` is a pure function of the observations of the last ``window_secs`` (each
component's busy time, queue fill and, for spouts, their lag), the settings and the time since
the last rebalance; the controller that feeds it and applies its answer by rebalance lives in
:mod:`squall.cluster.autoscale_controller`.

**The model.** A worker is a process, hence one interpreter lock: however many executors it
runs, it does at most one second of Python work per second. So the load that matters is the
*busy time*: a component's ``capacity`` (the busiest executor's share of time in execute) times
its executors is the executor-seconds of work it does per second, and their sum over the
components is the load of the topology, in workers' worth of work. A worker is saturated when
its share of that load nears 1.

* **Scale up** when, in every observation of the window, the load per worker is at least
  ``scale_up_utilization``, or a bolt's capacity is at least that with its input queue
  filling, or a spout's lag grows: workers = ceil(load × headroom / ``target_utilization``),
  at least one more, where ``headroom`` (>= 1) is how much more input than output arrives
  (the lag's growth against the throughput), since a saturated worker hides the demand.
* **Scale down** when, in every observation of the window, the load per worker is at most
  ``scale_down_utilization`` and no lag grows: workers = ceil(load / ``target_utilization``).
* Workers stay within ``[min_workers, max_workers]`` and the task slots there are; a busy
  component (:data:`BUSY_LOAD`: a fifth of a worker's work or more) gets an executor per
  worker, up to its task count, so that its work spreads over them; the others keep theirs.
* **Never flap**: nothing within ``cooldown_secs`` of the last rebalance (the autoscaler's or
  a user's), and a change only when every observation of the window (``window_secs``) agrees.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

HOLD, SCALE_UP, SCALE_DOWN = "hold", "scale-up", "scale-down"


@dataclass(frozen=True)
class ComponentLoad:
    """One component as observed: ``capacity`` (0..1, the busiest executor's share of time in
    execute or next_tuple), ``queue_fill`` (0..1, its fullest input queue), ``executed`` (its
    tuples per second), and for a spout its ``lag`` (records behind its source: Kafka's
    consumer lag, Redis' pending entries; None when it does not say) and ``lag_growth``
    (records per second, positive when falling behind)."""

    component: str
    executors: int
    tasks: int
    capacity: float
    spout: bool = False
    queue_fill: float = 0.0
    executed: float = 0.0
    lag: float | None = None
    lag_growth: float = 0.0

    @property
    def load(self) -> float:
        """Executor-seconds of work per second (workers' worth)."""
        return self.capacity * self.executors


@dataclass(frozen=True)
class Observation:
    """The topology at ``time`` (seconds, any monotonic clock): its workers and components."""

    time: float
    workers: int
    components: tuple[ComponentLoad, ...]

    @property
    def load(self) -> float:
        return sum(c.load for c in self.components)

    @property
    def per_worker(self) -> float:
        return self.load / max(1, self.workers)


@dataclass(frozen=True)
class Settings:
    """``topology.autoscale.*`` (see squall/api/defaults.py for each key's doc)."""

    min_workers: int = 1
    max_workers: int = 4
    target_utilization: float = 0.7
    scale_up_utilization: float = 0.85
    scale_down_utilization: float = 0.35
    window_secs: float = 15.0
    cooldown_secs: float = 60.0
    #: task slots the cluster has for this topology's workers (Spark's), None: no limit
    slots: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise ValueError(f"autoscale: min workers {self.min_workers} and max workers {self.max_workers} must "
                             "satisfy 1 <= min <= max")
        if not 0 < self.scale_down_utilization < self.target_utilization < self.scale_up_utilization <= 1:
            raise ValueError(f"autoscale: utilizations must satisfy 0 < scale down ({self.scale_down_utilization}) "
                             f"< target ({self.target_utilization}) < scale up ({self.scale_up_utilization}) <= 1")
        if self.window_secs <= 0 or self.cooldown_secs < 0:
            raise ValueError("autoscale: the window must be > 0 s and the cool-down >= 0 s")


@dataclass(frozen=True)
class Decision:
    """What to do: ``action`` (hold, scale-up, scale-down), the workers and executors per
    component to rebalance to (those that change), and why, in a sentence."""

    action: str
    workers: int
    executors: dict[str, int] = field(default_factory=dict)
    reason: str = ""
    #: the slots limited the workers below what the load asked for
    limited: bool = False
    #: component -> an executor's measured CPU after the change, in percent of a core: the
    #: rebalance places the executors by it (``topology.component.cpu.pcore.percent``)
    cpu_loads: dict[str, float] = field(default_factory=dict)


def decide(history: list[Observation], settings: Settings, since_rebalance: float) -> Decision:
    """The decision for the observations of the last ``settings.window_secs`` (oldest first;
    the last is now) when the last rebalance was ``since_rebalance`` seconds ago."""
    if not history:
        return Decision(HOLD, 0, reason="nothing observed yet")
    now = history[-1]
    if since_rebalance < settings.cooldown_secs:
        return Decision(HOLD, now.workers, reason=f"cooling down: {since_rebalance:.0f}s since the last rebalance "
                                                  f"(cool-down {settings.cooldown_secs:g}s)")
    window = [o for o in history if o.time >= now.time - settings.window_secs]
    if now.time - history[0].time < settings.window_secs:
        return Decision(HOLD, now.workers, reason=f"observing: {now.time - history[0].time:.0f}s of the "
                                                  f"{settings.window_secs:g}s window seen")
    ceiling = settings.max_workers if settings.slots is None else min(settings.max_workers, settings.slots)
    if all(_saturated(o, settings) for o in window):
        headroom = max(1.0, min(_headroom(o) for o in window))
        wanted = max(now.workers + 1, _ceil(now.load * headroom / settings.target_utilization))
        workers = min(wanted, ceiling)
        if workers <= now.workers:
            why = f"the slots there are ({settings.slots})" if settings.slots is not None and \
                settings.slots < settings.max_workers else f"the most workers allowed ({settings.max_workers})"
            return Decision(HOLD, now.workers, reason=f"saturated ({_describe(now)}) but limited by {why}",
                            limited=True)
        return _rebalance(SCALE_UP, now, workers, settings,
                          f"saturated for {settings.window_secs:g}s ({_describe(now)}): {now.workers} -> {workers} "
                          "workers", limited=workers < wanted)
    if all(_idle(o, settings) for o in window):
        workers = max(settings.min_workers, _ceil(max(o.load for o in window) / settings.target_utilization))
        if workers < now.workers:
            return _rebalance(SCALE_DOWN, now, workers, settings,
                              f"under {settings.scale_down_utilization:g} a worker for {settings.window_secs:g}s "
                              f"({_describe(now)}): {now.workers} -> {workers} workers")
    return Decision(HOLD, now.workers, reason=f"steady ({_describe(now)})")


def _saturated(o: Observation, settings: Settings) -> bool:
    """Needs more workers: the workers busy, or a bolt busy with its queue filling, or a lag growing."""
    return (o.per_worker >= settings.scale_up_utilization
            or any(not c.spout and c.capacity >= settings.scale_up_utilization and c.queue_fill >= 0.5
                   for c in o.components)
            or any(c.spout and c.lag_growth > 0 and c.lag for c in o.components))


def _idle(o: Observation, settings: Settings) -> bool:
    return o.per_worker <= settings.scale_down_utilization and not any(c.lag_growth > 0 for c in o.components)


def _headroom(o: Observation) -> float:
    """How much more arrives than is processed: (throughput + lag growth) / throughput of the
    spouts (1 when nothing says)."""
    spouts = [c for c in o.components if c.spout]
    done = sum(c.executed for c in spouts)
    growth = sum(max(0.0, c.lag_growth) for c in spouts)
    return (done + growth) / done if done > 0 else 1.0


def _rebalance(action: str, now: Observation, workers: int, settings: Settings, reason: str,
               limited: bool = False) -> Decision:
    """The decision to rebalance to ``workers``: a busy component gets an executor per worker
    (up to its tasks), or back down to its share when scaling down."""
    executors = {}
    for c in now.components:
        if c.load >= BUSY_LOAD or (action == SCALE_DOWN and c.executors > workers):
            wanted = min(c.tasks, max(workers, _ceil(c.load / settings.target_utilization))
                         if action == SCALE_UP else max(1, min(c.executors, workers)))
            if wanted != c.executors:
                executors[c.component] = wanted
    # what each executor does now, shared among its new number: placed by it, no worker is the
    # busiest by placement alone (a spout's worker need not also take half of a busy bolt)
    cpu_loads = {c.component: round(max(MIN_CPU_PERCENT, 100 * c.load / executors.get(c.component, c.executors)), 1)
                 for c in now.components}
    return Decision(action, workers, executors, reason, limited, cpu_loads)


#: a component doing at least this much of a worker's work is spread over the workers: left on
#: one, it would keep that worker the busiest
BUSY_LOAD = 0.2
#: the least CPU an executor is placed as (percent of a core): idle now is not free later
MIN_CPU_PERCENT = 1.0


def _ceil(x: float) -> int:
    """The ceiling of ``x``, a float computed from others (3.0000000000000004 is 3)."""
    return math.ceil(x - 1e-9)


def _describe(o: Observation) -> str:
    busiest = max(o.components, key=lambda c: c.capacity, default=None)
    text = f"load {o.load:.2f} workers' worth on {o.workers}"
    if busiest is not None:
        text += f", busiest {busiest.component} at capacity {busiest.capacity:.2f}"
    lags = [c for c in o.components if c.lag]
    if lags:
        text += ", lag " + ", ".join(f"{c.component} {c.lag:,.0f} ({c.lag_growth:+,.0f}/s)" for c in lags)
    return text
