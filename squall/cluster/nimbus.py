"""Nimbus: submits, controls and describes topologies, whatever runs their workers.

:class:`Nimbus` holds what Storm's Nimbus does for a cluster — names, statuses, assignment,
activate/deactivate/kill, ``get_topology_info`` — over a *runner* per topology that owns the
workers: threads of this process (:class:`~squall.cluster.local_cluster.LocalCluster`), worker
processes of this machine, or tasks of a Spark barrier job
(:class:`~squall.cluster.spark.SparkCluster`). What a runner does is the
:class:`~squall.cluster.runner.TopologyRunner` protocol; what the topology's figures become
beside it (counts across rebalances, their history, the metrics consumers) is its
:class:`~squall.cluster.monitor.TopologyMonitor`.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
import types
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, Self

from squall.api.config import Config, checked_config
from squall.api.defaults import POSITIVE
from squall.api.dsl import Topology, as_storm_topology
from squall.api.errors import AlreadyAliveError, InvalidTopologyError, NotAliveError
from squall.api.state.provider import StateProviderError, provider_for
from squall.api.system_ids import CHECKPOINT_COMPONENT
from squall.api.storm_topology import ComponentSpec, StormTopology
from squall.api.windowing.checks import check_topology_windows
from squall.cluster.autoscale_controller import AutoscaleController, settings_of
from squall.cluster.monitor import TopologyMonitor
from squall.cluster.runner import TopologyRunner
from squall.cluster.stats_history import Totals
from squall.runtime.assignment import Assignment, acker_layout, assign
from squall.runtime.cluster_state import TopologyState
from squall.runtime.info import AutoscaleDecision, TopologyInfo, to_dict
from squall.runtime.messaging.schema import TupleSample
from squall.runtime.sampling import MAX_SAMPLING_SECS, SAMPLES_KEPT
from squall.utils import time as clock

log = logging.getLogger("squall.nimbus")

ACTIVE, INACTIVE, KILLED, FAILED, REBALANCING = "ACTIVE", "INACTIVE", "KILLED", "FAILED", "REBALANCING"


@dataclass
class _Running:
    name: str
    topology: StormTopology
    conf: dict[str, Any]
    state: TopologyState
    runner: TopologyRunner
    #: figures across rebalances, their history, the metrics consumers
    monitor: TopologyMonitor
    status: str = ACTIVE
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: held by a rebalance while it swaps the runner, and by a kill: one waits for the other
    transition: threading.Lock = field(default_factory=threading.Lock)
    #: component -> (percent, until on the cluster clock) of its sampling; the tuples sampled
    sampling: dict[str, tuple[float, float]] = field(default_factory=dict)
    samples: collections.deque[TupleSample] = field(
        default_factory=lambda: collections.deque(maxlen=SAMPLES_KEPT))
    #: when (time.monotonic) it was last rebalanced (-inf: never); its autoscaler, when enabled
    rebalanced_at: float = float("-inf")
    autoscaler: AutoscaleController | None = None


class Nimbus(ABC):
    """Topologies by name, and the Storm cluster API over them. Use it as a context
    manager: leaving the block kills every topology."""

    #: whether the workers run in this process (what the 'memory' state provider needs)
    in_process = False

    def __init__(self) -> None:
        self._topologies: dict[str, _Running] = {}
        self._lock = threading.Lock()
        #: called as ``(name, topology, conf)`` after a rebalance dealt a stateful bolt's state to
        #: more tasks (task ids moved): ``squall run`` records the state settings again
        self.on_state_rescaled: Callable[[str, StormTopology, dict[str, Any]], None] | None = None

    @abstractmethod
    def _make_runner(self, name: str, topology: StormTopology, conf: dict[str, Any], assignment: Assignment,
                     state: TopologyState) -> TopologyRunner:
        """The runner that will own this topology's workers (not started yet)."""

    def _configure(self, conf: dict[str, Any]) -> dict[str, Any]:
        """The topology's merged config as this cluster runs it (a hook for subclasses)."""
        return conf

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    # -- submission -----------------------------------------------------------------

    def submit_topology(
        self, name: str, conf: dict[str, Any] | None, topology: StormTopology | type[Topology]
    ) -> None:
        """Start ``topology`` under ``name``; returns once every open/prepare has run.

        ``topology`` is a :class:`StormTopology` (``TopologyBuilder.create_topology()``) or a
        :class:`~squall.Topology` subclass, whose ``create_topology()`` runs with ``conf``
        merged over its ``config``.

        Raises ``AlreadyAliveError`` if the name is taken, ``ValueError`` naming a bad
        config key, and :class:`TopologySetupError` if an open/prepare raised. A key that
        looks like a setting but is none gets a warning (:func:`squall.api.config.checked_config`).
        """
        self._submit(name, conf, topology, TopologyState())

    def _submit(self, name: str, conf: dict[str, Any] | None, topology: StormTopology | type[Topology],
                state: TopologyState) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"topology name must be a non-empty string, got {name!r}")
        topology, conf = as_storm_topology(topology, conf)
        if not isinstance(topology, StormTopology):
            raise InvalidTopologyError(
                f"topology {name!r}: expected a StormTopology (TopologyBuilder.create_topology()) or a "
                f"squall.Topology subclass, got {type(topology).__name__}"
            )
        merged = checked_config(name, conf, {cid: spec.conf for cid, spec in topology.components.items()})
        with self._lock:
            if name in self._topologies:
                raise AlreadyAliveError(f"topology {name!r} is already alive")
            merged = self._configure(merged)
            if topology.checkpointed:
                check_state(name, topology, merged, self.in_process)
            check_topology_windows(name, topology, merged)
            if merged[Config.TOPOLOGY_AUTOSCALE_ENABLED]:
                try:
                    settings_of(merged)
                except ValueError as e:
                    raise InvalidTopologyError(f"topology {name!r}: {e}") from None
            assignment = assign(topology, merged)
            monitor = TopologyMonitor(name, topology, merged)
            monitor.prepare()
            runner = self._make_runner(name, topology, merged, assignment, state)
            running = _Running(name, topology, merged, state, runner, monitor)
            self._topologies[name] = running
        try:
            runner.start()
        except BaseException:
            with self._lock:
                self._topologies.pop(name, None)
            monitor.stop(final_report=False)
            raise
        # uptime counts from the workers' readiness; through ``running``: a rebalance swaps runners
        monitor.start(lambda: running.runner)
        if merged[Config.TOPOLOGY_AUTOSCALE_ENABLED]:
            running.autoscaler = AutoscaleController(self, name, merged)
            running.autoscaler.start()

    def autoscale_slots(self, name: str) -> int | None:
        """The task slots the cluster can give topology ``name``'s workers now, for the
        autoscaler; None: no limit but ``topology.autoscale.max.workers`` (this machine's
        worker processes)."""
        return None

    def last_rebalance(self, name: str) -> float:
        """When (``time.monotonic``) topology ``name`` was last rebalanced; -inf if never."""
        return self._get(name).rebalanced_at

    def autoscale_decisions(self, name: str) -> list[AutoscaleDecision]:
        """The autoscaler's last decisions, oldest first (none when it is off)."""
        autoscaler = self._get(name).autoscaler
        return list(autoscaler.decisions) if autoscaler is not None else []

    def status(self, name: str) -> str:
        """ACTIVE, INACTIVE, REBALANCING, KILLED or FAILED."""
        return self._status(self._get(name))

    def _get(self, name: str) -> _Running:
        try:
            return self._topologies[name]
        except KeyError:
            raise NotAliveError(f"topology {name!r} is not alive") from None

    def runner(self, name: str) -> TopologyRunner:
        """The runner that owns topology ``name``'s workers now (a rebalance replaces it), for
        tests and tools that look at them; ``NotAliveError`` if no such topology runs."""
        return self._get(name).runner

    # -- control ------------------------------------------------------------------------

    def activate(self, name: str) -> None:
        running = self._get(name)
        with running.lock:
            if running.status == INACTIVE:
                running.status = ACTIVE
                running.runner.set_active(True)

    def deactivate(self, name: str) -> None:
        running = self._get(name)
        with running.lock:
            if running.status == ACTIVE:
                running.status = INACTIVE
                running.runner.set_active(False)

    # -- a look inside (Storm UI's Debug and JStack) ---------------------------------------

    def set_sampling(self, name: str, component: str, percent: float, secs: float) -> None:
        """Sample ``percent`` (0 < percent <= 100; 0 stops) of ``component``'s emitted tuples
        for ``secs`` (1 to 3600) seconds, in every worker, without a restart (Storm UI's Debug).
        ``ValueError`` naming the component or the value at fault."""
        running = self._get(name)
        if component not in running.topology.components:
            raise ValueError(f"topology {name!r} has no component {component!r}")
        if not 0 <= percent <= 100:
            raise ValueError(f"sampling: the percentage must be between 0 and 100, not {percent!r}")
        if percent and not 1 <= secs <= MAX_SAMPLING_SECS:
            raise ValueError(f"sampling: the duration must be between 1 and {MAX_SAMPLING_SECS:g} s, not {secs!r}")
        with running.lock:
            if percent:
                running.sampling[component] = (percent, clock.now() + secs)
            else:
                running.sampling.pop(component, None)
            running.runner.set_sampling(component, percent, secs)

    def sampling(self, name: str, component: str) -> tuple[float, float]:
        """(percent, seconds left) of ``component``'s sampling; (0, 0) when none runs."""
        percent, until = self._get(name).sampling.get(component, (0.0, 0.0))
        left = until - clock.now()
        return (percent, left) if left > 0 else (0.0, 0.0)

    def samples(self, name: str, component: str) -> list[TupleSample]:
        """The tuples of ``component`` sampled lately (at most SAMPLES_KEPT of the topology's,
        oldest first)."""
        running = self._get(name)
        with running.lock:
            running.samples.extend(running.runner.take_samples())
            return [s for s in running.samples if s.component == component]

    def dump_stacks(self, name: str, port: int) -> str:
        """Every thread's Python stack in topology ``name``'s worker on ``port`` (Storm UI's
        JStack). ``ValueError`` for no such worker, ``TimeoutError`` when it does not answer."""
        return self._get(name).runner.dump_stacks(port)

    def rebalance(self, name: str, wait_secs: float | None = None, num_workers: int | None = None,
                  executors: dict[str, int] | None = None, cpu_loads: dict[str, float] | None = None) -> None:
        """Storm's rebalance: the spouts are deactivated, ``wait_secs`` (default: the message
        timeout) let pending trees complete, every worker is stopped (close/cleanup run), and
        the topology starts again on ``num_workers`` workers with ``executors`` (component ->
        executors; at most its task count, which never changes), then returns to its previous
        activation. Task ids stay as they were, so a fields grouping sends every key to the same
        task; what the executors kept in memory is gone, as in Storm (state kept in checkpoints
        is restored); the figures count on (``current`` starts again from 0). Returns once the
        topology runs again. ``cpu_loads`` (component -> an executor's CPU in percent of a core,
        as ``set_cpu_load``) places the executors by load: the autoscaler's measure.

        Past Storm: a stateful bolt of a location keeping key groups may get more executors than
        tasks, up to its key groups: its tasks grow to as many, the state committed last is dealt
        to them by key group (see :mod:`squall.api.state.key_groups`), and what followed that
        checkpoint is done again from the stateful spouts' committed positions.

        Raises ``ValueError`` naming the option at fault (an unknown component, a parallelism
        above the task count, a number of workers below 1) before anything changes, or (a state
        that cannot be dealt anew, such as entries without a key group) once the topology runs
        again as it was; ``NotAliveError`` for a topology that is not running (or is being killed)."""
        running = self._get(name)
        topology, conf = _rebalanced(running, num_workers, executors, cpu_loads)
        refused: StateProviderError | None = None
        previous_layout = running.topology.state_layout
        with running.transition:
            with running.lock:
                if running.status not in (ACTIVE, INACTIVE) or self._status(running) == FAILED:
                    raise NotAliveError(f"topology {name!r} is {self._status(running)}: it cannot be rebalanced")
                previous, running.status = running.status, REBALANCING
            try:
                if previous == ACTIVE:
                    running.runner.set_active(False)
                wait = conf[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS] if wait_secs is None else wait_secs
                if wait > 0 and not clock.is_simulating():
                    time.sleep(wait)
                running.runner.stop()
                running.monitor.retire(running.runner)
                if topology.state_layout != running.topology.state_layout:
                    try:
                        claim_state(name, topology, conf)  # a stateful bolt's tasks grew: its state dealt anew
                    except StateProviderError as e:  # nothing changed: it starts again as it was
                        refused, topology, conf = e, running.topology, running.conf
                runner = self._make_runner(name, topology, conf, assign(topology, conf), running.state)
                if previous == INACTIVE:
                    runner.set_active(False)  # before start: its spouts start deactivated
                running.topology, running.conf, running.runner = topology, conf, runner
                runner.start()
            except BaseException:
                running.status = FAILED
                raise
            finally:
                running.rebalanced_at = time.monotonic()  # the autoscaler's cool-down starts again
            running.status = previous
        if refused is not None:
            raise ValueError(f"rebalance of topology {name!r}: {refused}") from refused
        if self.on_state_rescaled is not None and topology.state_layout != previous_layout:
            self.on_state_rescaled(name, topology, conf)

    def start_rebalance(self, name: str, wait_secs: float | None = None, num_workers: int | None = None,
                        executors: dict[str, int] | None = None, cpu_loads: dict[str, float] | None = None) -> None:
        """:meth:`rebalance` on a thread of its own, as Storm's Nimbus takes a rebalance: the
        options are checked now (ValueError, NotAliveError), the rest happens after this call
        returns; the topology's status is REBALANCING meanwhile (FAILED should it not restart)."""
        running = self._get(name)
        _rebalanced(running, num_workers, executors, cpu_loads)
        if running.status not in (ACTIVE, INACTIVE):
            raise NotAliveError(f"topology {name!r} is {running.status}: it cannot be rebalanced")

        def rebalance() -> None:
            try:
                self.rebalance(name, wait_secs, num_workers, executors, cpu_loads)
            except Exception:  # noqa: BLE001 - nobody waits for this thread: say it here
                log.exception("rebalance of topology %r failed", name)

        threading.Thread(target=rebalance, name=f"rebalance-{name}", daemon=True).start()

    def kill_topology(self, name: str, wait_secs: float | None = None) -> None:
        """Deactivate the spouts, wait ``wait_secs`` (default: the message timeout) for
        pending trees to finish, then stop every executor (calling close/cleanup).
        Returns once the topology is gone; its name can then be reused.

        Under :func:`~squall.testing.simulated_time` the wait is skipped: nothing would
        move the clock while this call blocks the test."""
        self.kill_topology_and_get_info(name, wait_secs)

    def kill_topology_and_get_info(self, name: str, wait_secs: float | None = None) -> dict[str, Any]:
        """:meth:`kill_topology_and_info` as plain dicts and lists (as :meth:`get_topology_info`)."""
        return to_dict(self.kill_topology_and_info(name, wait_secs))

    def kill_topology_and_info(self, name: str, wait_secs: float | None = None) -> TopologyInfo:
        """:meth:`kill_topology`, returning the topology's final :meth:`topology_info`:
        taken once every worker has stopped, so its figures are the executors' last, counting
        what they did between the last heartbeat and their close/cleanup. Its status is
        ``FAILED`` if the topology had failed when the kill began, else ``KILLED``.

        Squall's addition to Storm's API, whose Nimbus forgets a killed topology: what
        ``squall run`` and ``squall submit`` print at exit."""
        running = self._get(name)
        with running.transition, running.lock:  # after a rebalance under way
            if running.status == KILLED:
                raise NotAliveError(f"topology {name!r} is already being killed")
            final_status = FAILED if self._status(running) == FAILED else KILLED
            previous, running.status = running.status, KILLED
        if wait_secs is None:
            wait_secs = running.conf[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
        if previous == ACTIVE:
            running.runner.set_active(False)
        if wait_secs > 0 and not clock.is_simulating():
            time.sleep(wait_secs)
        self._stop(running)
        return self._info(running, final_status)

    def _stop(self, running: _Running) -> None:
        running.status = KILLED
        if running.autoscaler is not None:
            running.autoscaler.stop()
        running.runner.stop()
        running.monitor.stop()  # the consumers get the final figures
        with self._lock:
            self._topologies.pop(running.name, None)

    def shutdown(self) -> None:
        """Kill every topology at once (no wait)."""
        for name in list(self._topologies):
            try:
                self.kill_topology(name, wait_secs=0)
            except NotAliveError:
                pass

    def get_topologies(self) -> list[str]:
        return list(self._topologies)

    # -- introspection ------------------------------------------------------------------

    def topology_info(self, name: str) -> TopologyInfo:
        """Status, workers/executors/tasks and per-component statistics and errors (Storm's
        ``getTopologyInfo``): what the REST API, Prometheus and the command line read."""
        running = self._get(name)
        return self._info(running, self._status(running))

    def get_topology_info(self, name: str) -> dict[str, Any]:
        """:meth:`topology_info` as plain dicts and lists (its fields' names are the keys)."""
        return to_dict(self.topology_info(name))

    @staticmethod
    def _status(running: _Running) -> str:
        """``FAILED`` once the runner gave up on the topology (unless it is being killed), else
        the status activate/deactivate/kill set."""
        return FAILED if running.runner.failure and running.status != KILLED else running.status

    def get_topology_conf(self, name: str) -> dict[str, Any]:
        """The topology's merged config (Storm's ``getTopologyConf``)."""
        return dict(self._get(name).conf)

    def get_topology(self, name: str) -> StormTopology:
        """The topology as submitted (Storm's ``getTopology``)."""
        return self._get(name).topology

    def get_window_totals(self, name: str, windows: tuple[int | None, ...]) -> dict[int | None, Totals]:
        """Per window (seconds, None for all time), each component's cumulative figures over that
        window (see :mod:`squall.cluster.stats_history`): what Storm UI's windows show."""
        running = self._get(name)
        return running.monitor.window_totals(running.runner, windows)

    def get_recent_totals(self, name: str) -> list[tuple[float, Totals]]:
        """(time, each component's cumulative figures) over the last ten minutes, oldest first,
        the last taken now: what the UI's live plots draw."""
        running = self._get(name)
        return running.monitor.recent_totals(running.runner)

    @staticmethod
    def _info(running: _Running, status: str) -> TopologyInfo:
        info = running.monitor.topology_info(running.runner, running.topology, running.state, status)
        if running.autoscaler is not None:
            info.autoscale = list(running.autoscaler.decisions)
        return info


def _rebalanced(running: _Running, num_workers: int | None, executors: dict[str, int] | None,
                cpu_loads: dict[str, float] | None = None) -> tuple[StormTopology, dict[str, Any]]:
    """The topology and config ``running`` gets from a rebalance to ``num_workers`` workers,
    ``executors`` (component -> executors) and ``cpu_loads`` (component -> an executor's CPU in
    percent of a core); ValueError naming the option at fault."""
    where = f"rebalance of topology {running.name!r}"
    if num_workers is not None and (isinstance(num_workers, bool) or not isinstance(num_workers, int)
                                    or num_workers < 1):
        raise ValueError(f"{where}: numWorkers must be an integer >= 1, got {num_workers!r}")
    components = dict(running.topology.components)
    key_groups = running.conf.get(Config.TOPOLOGY_STATE_KEY_GROUPS) if running.topology.checkpointed else None
    for cid, parallelism in (executors or {}).items():
        spec = components.get(cid)
        if spec is None or cid.startswith("__"):
            known = sorted(c for c in components if not c.startswith("__"))
            raise ValueError(f"{where}: executors: no component {cid!r} (components: {known})")
        most = spec.most_executors(key_groups)  # a stateful bolt's tasks may grow: its state is dealt anew
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or not 1 <= parallelism <= most:
            if most == spec.num_tasks:
                raise ValueError(f"{where}: executors of {cid!r} must be an integer from 1 to its {spec.num_tasks} "
                                 f"task(s) (tasks are fixed at submission; set_num_tasks raises them), got "
                                 f"{parallelism!r}")
            raise ValueError(f"{where}: executors of stateful bolt {cid!r} must be an integer from 1 to its {most} "
                             f"key groups (topology.state.key.groups), got {parallelism!r}")
        tasks = max(spec.num_tasks, parallelism)
        components[cid] = dataclasses.replace(spec, parallelism=parallelism, num_tasks=tasks)
    for cid, load in (cpu_loads or {}).items():
        spec = components.get(cid)
        if spec is None or not POSITIVE.accepts(load):
            raise ValueError(f"{where}: cpu_loads: {cid!r} must be a component and its load a number > 0, "
                             f"got {load!r}")
        components[cid] = dataclasses.replace(
            spec, conf=types.MappingProxyType({**spec.conf, Config.TOPOLOGY_COMPONENT_CPU_PCORE_PERCENT: load}))
    conf = dict(running.conf)
    if num_workers is not None:
        conf[Config.TOPOLOGY_WORKERS] = num_workers
    # the ackers keep their tasks, so that every task keeps its id (ids are numbered over all)
    conf[Config.TOPOLOGY_ACKER_TASKS] = acker_layout(running.conf)[0] or None
    return dataclasses.replace(running.topology, components=types.MappingProxyType(components)), conf


def check_state(name: str, topology: StormTopology, conf: dict[str, Any], in_process: bool) -> None:
    """A checkpointed topology needs ackers and an interval below the message timeout (a
    checkpoint is a tracked tuple), and a state provider every worker can reach, whose location
    holds no other topology's state. An exactly-once sink fed by a spout whose position is not
    in the checkpoints is refused; a stateful bolt fed by a spout that keeps no position gets a
    warning (``squall.nimbus``). Claims the location (:func:`claim_state`)."""
    for sink, spout in _upstream_spouts(topology, lambda spec: spec.exactly_once, lambda spout: not spout.stateful):
        raise InvalidTopologyError(
            f"topology {name!r}: exactly-once sink {sink!r} is fed by spout {spout!r}, whose position is not in the "
            "checkpoints, so after a crash it would emit again what the sink already wrote; make it a StatefulSpout "
            "(StatefulKafkaSpout, StatefulDirectorySpout, ...), or drop exactly_once")
    where = f"topology {name!r} has stateful components {sorted(topology.state_layout)}"
    if conf[Config.TOPOLOGY_ACKER_EXECUTORS] == 0:
        raise InvalidTopologyError(f"{where}: its checkpoints are tracked tuples, so 'topology.acker.executors' "
                                   "cannot be 0")
    key_groups = conf[Config.TOPOLOGY_STATE_KEY_GROUPS]
    for spec in topology.bolts:
        if spec.stateful and key_groups is not None and spec.num_tasks > key_groups:
            raise InvalidTopologyError(
                f"topology {name!r}: stateful bolt {spec.id!r} has {spec.num_tasks} tasks, more than its "
                f"{key_groups} key groups (topology.state.key.groups), each kept by one task: raise "
                "topology.state.key.groups (when its state location is first claimed), or give it fewer tasks")
    interval, timeout = conf[Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL], conf[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS]
    if interval >= timeout * 1000:
        raise InvalidTopologyError(f"{where}: its checkpoints are tracked tuples, so "
                                   f"'topology.state.checkpoint.interval.ms' ({interval}) must be below the message "
                                   f"timeout ({timeout} s)")
    provider = provider_for(conf, name)
    try:
        if provider.name == "memory" and not in_process:
            raise StateProviderError(
                f"{where}: the 'memory' state provider keeps state in one process, and this cluster runs its workers "
                "as processes of their own; use 'sqlite' (a directory every worker can reach) or 'redis' "
                "(topology.state.provider)"
            )
    finally:
        provider.close()
    claim_state(name, topology, conf)
    for bolt, spout in _upstream_spouts(topology, lambda spec: spec.stateful, lambda spout: not spout.keeps_position):
        log.warning("topology %r: stateful bolt %r is fed by spout %r, which keeps no position (Spout.keeps_position): "
                    "after a restart it reads its input again, on top of the state the bolt restores; make it a "
                    "StatefulSpout, or read from a broker", name, bolt, spout)


def claim_state(name: str, topology: StormTopology, conf: dict[str, Any]) -> None:
    """Claim the state location for ``topology``'s stateful components, before any of its
    workers starts (a changed task count deals their state anew; ``topology.state.allow.dropped``
    lets it delete the state of a component the topology no longer has), and set
    ``topology.state.key.groups`` in ``conf`` to the key groups it keeps (see
    :meth:`~squall.api.state.StateProvider.claim`)."""
    provider = provider_for(conf, name)
    try:
        conf[Config.TOPOLOGY_STATE_KEY_GROUPS] = provider.claim(topology.state_layout,
                                                                conf[Config.TOPOLOGY_STATE_KEY_GROUPS],
                                                                bool(conf.get(Config.TOPOLOGY_STATE_ALLOW_DROPPED)))
    finally:
        provider.close()


def _upstream_spouts(topology: StormTopology, bolts: Callable[[ComponentSpec], bool],
                     spouts: Callable[[ComponentSpec], bool]) -> list[tuple[str, str]]:
    """(bolt, spout upstream of it), for each bolt and spout such that ``bolts(bolt)`` and
    ``spouts(spout)`` hold, sorted."""
    components = topology.components
    pairs = []
    for bolt, spec in components.items():
        if spec.is_spout or not bolts(spec):
            continue
        seen, todo = set(), [source for source, _ in spec.inputs]
        while todo:
            source = todo.pop()
            if source in seen or source not in components or source == CHECKPOINT_COMPONENT:
                continue  # the checkpoint spout and __system feed every stateful bolt: not its input
            seen.add(source)
            upstream = components[source]
            if upstream.is_spout:
                if spouts(upstream):
                    pairs.append((bolt, source))
            else:
                todo.extend(s for s, _ in upstream.inputs)
    return sorted(pairs)
