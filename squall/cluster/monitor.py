"""What one topology's figures become beside its runner: :class:`TopologyMonitor`.

Nimbus keeps one per topology, from submit to kill. It holds what outlives a runner: the
figures of the runners that rebalances replaced (so counts go on across a rebalance), the
history of the totals that Storm UI's windows and the live plots read
(:mod:`squall.cluster.stats_history`), and the feed of the topology's metrics consumers
(:mod:`squall.cluster.metrics_reporter`). It reads the runner through
:class:`~squall.cluster.runner.TopologyRunner` only, and every read may add a history sample.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.api.storm_topology import StormTopology
from squall.cluster.metrics_reporter import MetricsReporter
from squall.cluster.runner import TopologyRunner
from squall.cluster.stats_history import StatsHistory, Totals, totals_of
from squall.runtime.cluster_state import TopologyState
from squall.runtime.info import ErrorInfo, TopologyInfo
from squall.runtime.stats import component_summary, retire
from squall.utils import time as clock


class TopologyMonitor:
    """Figures, history and metrics consumers of topology ``name``. Made at submit: raises
    ``ValueError`` for a bad metrics consumer registration or bucket size."""

    def __init__(self, name: str, topology: StormTopology, conf: dict[str, Any]) -> None:
        self.name = name
        self.history = StatsHistory(clock.now())
        self._reporter = MetricsReporter(name, conf, {cid: "spout" if spec.is_spout else "bolt"
                                                      for cid, spec in topology.components.items()})
        #: per component, what the runners that rebalances replaced did (see runtime.stats.retire)
        self._retired: dict[str, dict[str, Any]] = {}

    def prepare(self) -> None:
        """Prepare the metrics consumers, before the workers start; raises
        :class:`~squall.api.errors.TopologySetupError` naming one that failed."""
        self._reporter.prepare()

    def start(self, runner: Callable[[], TopologyRunner]) -> None:
        """The workers run (``runner()``: the current runner, which a rebalance replaces): uptime
        and the history count from now, and the consumers get their data points."""
        self.history.started = clock.now()
        if self._reporter:
            self._reporter.start(lambda: runner().executor_snapshots(), lambda: runner().workers_info())

    def retire(self, runner: TopologyRunner) -> None:
        """Keep the figures of ``runner``, stopped because a rebalance replaces it."""
        for component, figures in runner.executor_snapshots():
            self._retired[component] = retire(self._retired.get(component), figures)

    def stop(self, final_report: bool = True) -> None:
        """The topology is gone: the consumers get the final figures (``final_report``), then
        their ``cleanup``."""
        self._reporter.stop(final_report)

    def topology_info(self, runner: TopologyRunner, topology: StormTopology, state: TopologyState,
                      status: str) -> TopologyInfo:
        """The topology as of now, with ``status``: the figures are the runner's snapshots with
        what the runners before its rebalances did, and each component's current run alone
        (``current``); the errors are ``state``'s."""
        snapshots: dict[str, list[dict[str, Any]]] = {}
        pairs = runner.executor_snapshots()
        for component, snapshot in pairs:
            snapshots.setdefault(component, []).append(snapshot)
        now = clock.now()
        self.history.record(now, totals_of([*pairs, *self._retired.items()]))
        components = {}
        for cid, spec in topology.components.items():
            summary = component_summary("spout" if spec.is_spout else "bolt", spec.parallelism, spec.num_tasks,
                                        snapshots.get(cid, []), self._retired.get(cid))
            summary.errors = [ErrorInfo(**e) for e in state.errors(cid)]
            summary.error_count = state.error_count(cid)
            components[cid] = summary
        return TopologyInfo(name=self.name, status=status, uptime_secs=max(0.0, now - self.history.started),
                            workers=runner.workers_info(), components=components)

    def window_totals(self, runner: TopologyRunner, windows: tuple[int | None, ...]) -> dict[int | None, Totals]:
        """Per window (seconds, None for all time), each component's cumulative figures over it."""
        now, totals = self._sample(runner)
        return {window: self.history.window(now, totals, window) for window in windows}

    def recent_totals(self, runner: TopologyRunner) -> list[tuple[float, Totals]]:
        """(time, each component's cumulative figures) over the last ten minutes, oldest first,
        the last taken now."""
        now, totals = self._sample(runner)
        return self.history.recent(now, totals)

    def _sample(self, runner: TopologyRunner) -> tuple[float, Totals]:
        now = clock.now()
        totals = totals_of([*runner.executor_snapshots(), *self._retired.items()])
        self.history.record(now, totals)
        return now, totals
