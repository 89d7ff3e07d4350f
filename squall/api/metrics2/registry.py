"""A task's user metrics by name (what ``TopologyContext.register_*`` fill), and their roll-up
per component for ``get_topology_info``.

Aggregation over a component's tasks (``components[c]["user_metrics"]``; each task's own
figures are in ``components[c]["tasks"][task]["user_metrics"]``):

* counter: the counts summed; gauge: the values summed (per-task values are in ``tasks``);
* meter: counts and rates summed;
* histogram and timer: counts and sums summed, ``min`` the least, ``max`` the greatest,
  ``mean`` weighted by each task's count, ``stddev`` and every percentile the greatest over
  the tasks — an **upper bound** of the component's percentile, not the percentile of the
  merged values (which no task's window alone knows); a timer's rates are summed.

A name registered with different types by different tasks is aggregated as the type the
lowest task gave it; the others' figures are left out of the aggregate (not of ``tasks``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from squall.api.metrics2.metrics import (
    MAX_METRICS_PER_TASK, MAX_NAME_LENGTH, PERCENTILES, Counter, Gauge, Histogram, Meter, Metric, Timer,
)

_SUMMED = ("count", "sum", "value", "mean_rate", "m1_rate", "m5_rate", "m15_rate")
_GREATEST = ("max", "stddev", *(name for name, _ in PERCENTILES))


class MetricRegistry:
    """The user metrics of one task. ``register`` is rare and locked; ``snapshot`` is read by
    the reporting thread while the task updates its metrics."""

    def __init__(self, component: str, task: int) -> None:
        self.component = component
        self.task = task
        self._metrics: dict[str, Metric] = {}
        self._lock = threading.Lock()

    def __bool__(self) -> bool:
        return bool(self._metrics)

    def get(self, name: str) -> Metric | None:
        return self._metrics.get(name)

    def register(self, name: str, metric_type: type[Metric], make: Callable[[], Metric] | None = None) -> Metric:
        """The metric called ``name``: the one registered before, if it is a ``metric_type``,
        else a new one (``make()``, default ``metric_type()``). Raises ValueError for a bad name,
        a name registered with another type, or one metric too many."""
        where = f"component {self.component!r} task {self.task}"
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME_LENGTH:
            raise ValueError(f"{where}: a metric name is a string of 1 to {MAX_NAME_LENGTH} characters, "
                             f"got {name!r}")
        with self._lock:
            metric = self._metrics.get(name)
            if metric is None:
                if len(self._metrics) >= MAX_METRICS_PER_TASK:
                    raise ValueError(f"{where}: cannot register metric {name!r}: a task may register at most "
                                     f"{MAX_METRICS_PER_TASK} metrics")
                metric = self._metrics[name] = make() if make is not None else metric_type()
            elif type(metric) is not metric_type:
                raise ValueError(f"{where}: metric {name!r} is already registered as a {metric.kind}, "
                                 f"not a {metric_type.kind}")
        return metric

    def snapshot(self) -> dict[str, dict[str, Any]]:
        """name -> the metric's snapshot (see :mod:`squall.api.metrics2.metrics`), leaving out the
        metrics that have no number to report."""
        out = {}
        for name, metric in list(self._metrics.items()):
            figures = metric.snapshot()
            if figures is not None:
                out[name] = figures
        return out


METRIC_TYPES: dict[str, type[Metric]] = {cls.kind: cls for cls in (Counter, Gauge, Histogram, Meter, Timer)}


def user_metrics_summary(per_task: dict[int, dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The component's aggregate of its tasks' user metrics (task -> name -> snapshot), as the
    module's docstring says."""
    totals: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}  # histogram/timer name -> the count its mean is weighted by so far
    for task in sorted(per_task):
        for name, figures in per_task[task].items():
            total = totals.get(name)
            if total is None:
                totals[name] = dict(figures)
                counts[name] = figures.get("count", 0)
                continue
            if total.get("type") != figures.get("type"):
                continue
            _merge(total, figures, counts, name)
    return totals


def _merge(total: dict[str, Any], figures: dict[str, Any], counts: dict[str, int], name: str) -> None:
    if "mean" in total:  # a histogram or timer: its window's figures
        before, more = counts[name], figures.get("count", 0)
        counts[name] = before + more
        if more and not before:  # the tasks so far recorded nothing: their zeros are no bound
            total.update((key, figures.get(key, 0.0)) for key in ("min", "mean", *_GREATEST))
        elif more:
            total["mean"] = (total["mean"] * before + figures.get("mean", 0.0) * more) / (before + more)
            total["min"] = min(total["min"], figures.get("min", total["min"]))
            for key in _GREATEST:
                total[key] = max(total[key], figures.get(key, total[key]))
    for key in _SUMMED:
        if key in total:
            total[key] += figures.get(key, 0)


def executor_tasks(snapshot: dict[str, Any]) -> Iterable[int]:
    """The tasks of an executor's snapshot: its ``tasks``, else those it reports metrics of."""
    return snapshot.get("tasks") or snapshot.get("user_metrics", {}).keys()
