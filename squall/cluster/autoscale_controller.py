"""The autoscaler's controller: a thread per topology with ``topology.autoscale.enabled``, in
the process that runs the topology (its Nimbus), that every ``topology.autoscale.interval.secs``
observes the topology, asks :func:`squall.cluster.autoscaler.decide` and applies a change by
rebalance (state and acks kept, as any rebalance). Each change it makes, and each time it holds
because it is limited (by ``max.workers`` or the slots), is logged: :attr:`decisions` (the UI's
topology page and ``squall monitor`` show them) and the ``squall.autoscale`` logger.

What it observes, per component: its busy time over the last interval (execute or next_tuple
seconds per second, from the figures the UI plots), its executors and tasks, its executed rate
and, for a spout that reports a ``lag`` metric (Kafka's consumer lag per partition, Redis'
pending entries), that lag and how fast it grows.

A component gets at most as many executors as it has tasks, but for a stateful bolt whose
state location keeps key groups: its tasks may grow to its key groups, the rebalance dealing its
committed state to them (see :meth:`squall.cluster.nimbus.Nimbus.rebalance`). Should that
rebalance be refused (state that cannot be dealt anew, such as entries without a key group:
the topology then runs on as it was), the bolt keeps its task count from then on, and a
warning says so.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import replace
from typing import Any, Protocol

from squall.api.config import Config
from squall.api.errors import NotAliveError
from squall.api.storm_topology import StormTopology
from squall.api.system_ids import is_system_id
from squall.cluster.autoscaler import HOLD, ComponentLoad, Decision, Observation, Settings, decide
from squall.cluster.stats_history import COUNTERS, Totals
from squall.runtime.info import AutoscaleDecision, TopologyInfo

log = logging.getLogger("squall.autoscale")

#: the decisions kept for the UI and squall monitor
DECISIONS_KEPT = 50
_EXECUTED, _EXECUTE_SECS = COUNTERS.index("executed"), COUNTERS.index("execute_secs")


class Cluster(Protocol):
    """What the controller needs of the Nimbus that runs the topology."""

    def status(self, name: str) -> str: ...

    def topology_info(self, name: str) -> TopologyInfo: ...

    def get_topology(self, name: str) -> StormTopology: ...

    def get_recent_totals(self, name: str) -> list[tuple[float, Totals]]: ...

    def last_rebalance(self, name: str) -> float: ...

    def autoscale_slots(self, name: str) -> int | None: ...

    def start_rebalance(self, name: str, wait_secs: float | None = None, num_workers: int | None = None,
                        executors: dict[str, int] | None = None, cpu_loads: dict[str, float] | None = None) -> None: ...


def settings_of(conf: dict[str, Any]) -> Settings:
    """The autoscaler's settings from a topology's merged config (``ValueError`` naming the
    keys at fault)."""
    return Settings(
        min_workers=conf[Config.TOPOLOGY_AUTOSCALE_MIN_WORKERS], max_workers=conf[Config.TOPOLOGY_AUTOSCALE_MAX_WORKERS],
        target_utilization=conf[Config.TOPOLOGY_AUTOSCALE_TARGET_UTILIZATION],
        scale_up_utilization=conf[Config.TOPOLOGY_AUTOSCALE_SCALE_UP_UTILIZATION],
        scale_down_utilization=conf[Config.TOPOLOGY_AUTOSCALE_SCALE_DOWN_UTILIZATION],
        window_secs=conf[Config.TOPOLOGY_AUTOSCALE_WINDOW_SECS], cooldown_secs=conf[Config.TOPOLOGY_AUTOSCALE_COOLDOWN_SECS])


class AutoscaleController:
    """Observes topology ``name`` of ``nimbus`` and rebalances it (see the module). Started by
    Nimbus after the topology starts, stopped when it is killed. The task slots the cluster
    can give the workers (Spark's) are asked at each look (``Nimbus.autoscale_slots``)."""

    def __init__(self, nimbus: Cluster, name: str, conf: dict[str, Any]) -> None:
        self.settings = settings_of(conf)
        self._nimbus = nimbus
        self._name = name
        self._interval = conf[Config.TOPOLOGY_AUTOSCALE_INTERVAL_SECS]
        self._wait = min(conf[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS], REBALANCE_WAIT_SECS)
        self._history: collections.deque[Observation] = collections.deque()
        self._lags: dict[str, tuple[float, float]] = {}  # spout -> (time, lag) last seen
        self._key_groups = conf.get(Config.TOPOLOGY_STATE_KEY_GROUPS)  # as the state location keeps them
        self._tasks: dict[str, int] = {}  # component -> its tasks, as last observed
        self._growing: dict[str, tuple[int, float]] = {}  # stateful bolt -> (tasks asked, when) by a scale-up
        self._fixed: set[str] = set()  # stateful bolts whose growth a rebalance refused
        self.decisions: collections.deque[AutoscaleDecision] = collections.deque(maxlen=DECISIONS_KEPT)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"autoscale-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.step()
            except NotAliveError:
                return  # killed meanwhile
            except Exception:  # noqa: BLE001 - the topology runs on; the next look may do better
                log.exception("topology %r: the autoscaler's look failed", self._name)

    def step(self) -> Decision | None:
        """One look: observe, decide, and rebalance if the decision says so."""
        if self._nimbus.status(self._name) != "ACTIVE":
            self._history.clear()  # deactivated, or a rebalance under way: nothing to size
            return None
        observation = self.observe()
        if observation is None:
            return None
        history = self._history
        history.append(observation)
        keep = self.settings.window_secs + 2 * self._interval
        while history and history[0].time < observation.time - keep:
            history.popleft()
        since = time.monotonic() - self._nimbus.last_rebalance(self._name)
        settings = replace(self.settings, slots=self._nimbus.autoscale_slots(self._name))
        decision = decide(list(history), settings, since)
        if decision.action == HOLD:
            if decision.limited and not (self.decisions and self.decisions[-1].reason == decision.reason):
                self._log(decision)
            return decision
        self._log(decision)
        history.clear()  # what comes after the rebalance is a new topology
        for cid, executors in decision.executors.items():
            if executors > self._tasks.get(cid, executors):
                self._growing[cid] = (executors, time.monotonic())
        self._nimbus.start_rebalance(self._name, self._wait, decision.workers, decision.executors or None,
                                     decision.cpu_loads or None)
        return decision

    def observe(self) -> Observation | None:
        """The topology now: None until two samples of its figures a second apart exist."""
        nimbus, name = self._nimbus, self._name
        recent = nimbus.get_recent_totals(name)
        if len(recent) < 2:
            return None
        t1, after = recent[-1]
        t0, before = next(((t, s) for t, s in reversed(recent[:-1]) if t1 - t >= min(1.0, self._interval)),
                          recent[0])
        secs = t1 - t0
        if secs <= 0:
            return None
        info = nimbus.topology_info(name)
        topology = nimbus.get_topology(name)
        self._tasks = {cid: spec.num_tasks for cid, spec in topology.components.items()}
        self._check_growth(nimbus.last_rebalance(name))
        now = time.monotonic()
        components = []
        for cid, component in info.components.items():
            if is_system_id(cid):
                continue
            executors = max(1, len(component.executors))
            zero = (0.0,) * len(COUNTERS)
            a, b = after.get(cid, zero), before.get(cid, zero)
            busy = max(0.0, a[_EXECUTE_SECS] - b[_EXECUTE_SECS]) / secs
            executed = max(0.0, a[_EXECUTED] - b[_EXECUTED]) / secs
            spout = topology.components[cid].is_spout
            lag, growth = (self._lag(cid, component.user_metrics, now) if spout else (None, 0.0))
            components.append(ComponentLoad(cid, executors, self._most(topology, cid), min(1.0, busy / executors),
                                            spout=spout, executed=executed, lag=lag, lag_growth=growth))
        return Observation(now, len(info.workers), tuple(components))

    def _most(self, topology: StormTopology, cid: str) -> int:
        """The most executors ``cid`` may get (as a rebalance allows), but a stateful bolt whose
        growth was refused keeps its tasks."""
        spec = topology.components[cid]
        key_groups = self._key_groups if topology.checkpointed and cid not in self._fixed else None
        return spec.most_executors(key_groups)

    def _check_growth(self, rebalanced_at: float) -> None:
        """Once the rebalance a scale-up started is over: a stateful bolt whose tasks did not
        grow as asked was refused (the rebalance logged why), and keeps its tasks from now on."""
        for cid, (asked, at) in list(self._growing.items()):
            if self._tasks.get(cid, asked) >= asked:
                del self._growing[cid]
            elif rebalanced_at >= at:
                del self._growing[cid]
                self._fixed.add(cid)
                log.warning("topology %r: the autoscaler could not grow stateful bolt %r past its %d task(s) (the "
                            "rebalance was refused: see above); it keeps them from now on", self._name, cid,
                            self._tasks.get(cid, 0))

    def _lag(self, spout: str, metrics: dict[str, Any], now: float) -> tuple[float | None, float]:
        """A spout's ``lag`` user metric (a number, or numbers by partition) and its growth."""
        figures = metrics.get("lag")
        if figures is None:
            return None, 0.0
        values = figures.get("value", figures) if isinstance(figures, dict) else figures
        lag = float(sum(v for v in values.values() if isinstance(v, (int, float)))) if isinstance(values, dict) \
            else float(values) if isinstance(values, (int, float)) else None
        if lag is None:
            return None, 0.0
        last = self._lags.get(spout)
        self._lags[spout] = (now, lag)
        growth = (lag - last[1]) / (now - last[0]) if last is not None and now > last[0] else 0.0
        return lag, growth

    def _log(self, decision: Decision) -> None:
        self.decisions.append(AutoscaleDecision(time=time.time(), action=decision.action, workers=decision.workers,
                                                 executors=dict(decision.executors), reason=decision.reason))
        log.info("topology %r: autoscaler %s: %s%s", self._name, decision.action, decision.reason,
                 f"; executors {decision.executors}" if decision.executors else "")


#: the most a rebalance the autoscaler starts waits for pending trees (the message timeout if shorter)
REBALANCE_WAIT_SECS = 2.0
