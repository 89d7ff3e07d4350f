"""Topologies' figures in Prometheus' terms: a ``prometheus_client`` collector over
:class:`~squall.runtime.info.TopologyInfo` (what the UI server's ``/metrics`` endpoint serves).

Families (every sample labelled ``topology``; names sanitized to ``[a-zA-Z0-9_]``):

* ``squall_topology_uptime_seconds``; ``squall_topology_status`` (1, labelled ``status``);
* per component (labels ``component``, ``type`` = spout/bolt) and per executor (labels
  ``component``, ``executor`` = Storm's ``[first-last]`` task range), the built-in figures:
  ``squall_component_emitted_total``, ``..._transferred_total``, ``..._acked_total``,
  ``..._failed_total``, ``..._executed_total`` (bolts), ``..._execute_latency_seconds`` and
  ``..._process_latency_seconds`` (bolts), ``..._complete_latency_seconds`` (spouts),
  ``..._capacity`` (bolts); the same as ``squall_executor_*``. Latencies are the means since
  the start, as ``topology_info``'s;
* ``squall_component_metric`` (label ``metric``): components' own counters (a connector's);
* user metrics, per task (labels ``component``, ``task``), as ``squall_user_<name>``: a
  counter or gauge as a gauge (Dropwizard counters may go down, so a counter is no Prometheus
  counter: Prometheus' own Dropwizard exporter does the same), a meter as a counter
  (``_total``), a histogram as a summary (quantiles 0.5 ... 0.999 over its window, ``_count``
  and ``_sum`` over all values), a timer as a summary in seconds, ``squall_user_<name>_seconds``.
  Two names that sanitize alike: the first (by component, task) is exposed, the other is not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from msgspec import UNSET
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from squall.api.errors import NotAliveError
from squall.api.metrics2.metrics import PERCENTILES
from squall.runtime.info import Figures, TopologyInfo

if TYPE_CHECKING:
    from squall.cluster.nimbus import Nimbus

_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_QUANTILES = tuple((name, str(q)) for name, q in PERCENTILES)
# (field of Figures, family suffix, Prometheus type, scale)
_BUILTINS = (
    ("emitted", "emitted", "counter", 1), ("transferred", "transferred", "counter", 1),
    ("acked", "acked", "counter", 1), ("failed", "failed", "counter", 1), ("executed", "executed", "counter", 1),
    ("execute_latency_ms", "execute_latency_seconds", "gauge", 0.001),
    ("process_latency_ms", "process_latency_seconds", "gauge", 0.001),
    ("complete_latency_ms", "complete_latency_seconds", "gauge", 0.001),
    ("capacity", "capacity", "gauge", 1),
)


def sanitize(name: str) -> str:
    return _INVALID.sub("_", name)


def cluster_infos(cluster: Nimbus) -> Callable[[], list[TopologyInfo]]:
    """A source of infos for :class:`SquallCollector`: every topology of ``cluster`` (a
    :class:`~squall.LocalCluster` or any Nimbus), skipping one killed meanwhile."""
    def infos() -> list[TopologyInfo]:
        out = []
        for name in cluster.get_topologies():
            try:
                out.append(cluster.topology_info(name))
            except NotAliveError:
                continue
        return out
    return infos


class _Families:
    """The families of one collection, by name: a sample whose family exists with another type,
    or whose labels are taken already, is left out."""

    def __init__(self) -> None:
        self.families: dict[str, Metric] = {}
        self._labels: dict[str, list[str]] = {}  # family name -> its label names
        self._seen: set[tuple[str, tuple[str, ...]]] = set()

    def family(self, name: str, kind: str, doc: str, labels: list[str]) -> Metric | None:
        family = self.families.get(name)
        if family is None:
            if kind == "counter":
                family = CounterMetricFamily(name, doc, labels=labels)
            elif kind == "gauge":
                family = GaugeMetricFamily(name, doc, labels=labels)
            else:
                family = Metric(name, doc, kind)
            self.families[name], self._labels[name] = family, labels
        return family if family.type == kind and self._labels[name] == labels else None

    def add(self, name: str, kind: str, doc: str, labels: dict[str, str], value: float) -> None:
        family = self.family(name, kind, doc, list(labels))
        if family is not None and self._first(name, labels):
            family.add_metric(list(labels.values()), value)

    def add_summary(self, name: str, doc: str, labels: dict[str, str], figures: dict[str, Any]) -> None:
        family = self.family(name, "summary", doc, list(labels))
        if family is None or not self._first(name, labels):
            return
        for key, quantile in _QUANTILES:
            family.add_sample(name, {**labels, "quantile": quantile}, figures.get(key, 0.0))
        family.add_sample(f"{name}_count", labels, figures.get("count", 0))
        family.add_sample(f"{name}_sum", labels, figures.get("sum", 0.0))

    def _first(self, name: str, labels: dict[str, str]) -> bool:
        key = (name, tuple(labels.values()))
        if key in self._seen:
            return False
        self._seen.add(key)
        return True


class SquallCollector:
    """A ``prometheus_client`` collector of the topologies ``infos()`` returns (see
    :func:`cluster_infos`). Register it on a ``CollectorRegistry`` or use :func:`exposition`."""

    def __init__(self, infos: Callable[[], Iterable[TopologyInfo]]) -> None:
        self._infos = infos

    def describe(self) -> list[Metric]:
        return []  # the families depend on the running topologies: none to declare up front

    def collect(self) -> Iterator[Metric]:
        families = _Families()
        for info in self._infos():
            _topology_families(families, info)
        yield from families.families.values()


def exposition(infos: Callable[[], Iterable[TopologyInfo]]) -> bytes:
    """The Prometheus text exposition of the topologies ``infos()`` returns."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SquallCollector(infos))
    return generate_latest(registry)


def _topology_families(families: _Families, info: TopologyInfo) -> None:
    topology = info.name
    families.add("squall_topology_uptime_seconds", "gauge", "Seconds since the topology was submitted",
                 {"topology": topology}, info.uptime_secs)
    families.add("squall_topology_status", "gauge", "1 for the topology's status (ACTIVE, INACTIVE, KILLED, FAILED)",
                 {"topology": topology, "status": info.status}, 1)
    for component, summary in info.components.items():
        _builtin_samples(families, "component", {"topology": topology, "component": component, "type": summary.type},
                         summary)
        for executor in summary.executors:
            tasks = executor.tasks or [0]
            labels = {"topology": topology, "component": component, "executor": f"[{tasks[0]}-{tasks[-1]}]"}
            _builtin_samples(families, "executor", labels, executor)
        for metric, value in (summary.metrics or {}).items():
            families.add("squall_component_metric", "gauge", "A component's own counter (a connector's)",
                         {"topology": topology, "component": component, "metric": str(metric)}, value)
        for task, task_summary in summary.tasks.items():
            labels = {"topology": topology, "component": component, "task": str(task)}
            for name, figures in task_summary.user_metrics.items():
                _user_samples(families, name, labels, figures)


def _builtin_samples(families: _Families, level: str, labels: dict[str, str], figures: Figures) -> None:
    for key, suffix, kind, scale in _BUILTINS:
        value = getattr(figures, key)
        if value is not UNSET:  # a spout's executed, a bolt's complete latency
            families.add(f"squall_{level}_{suffix}", kind, f"Storm UI's {key} per {level}", labels, value * scale)


def _user_samples(families: _Families, name: str, labels: dict[str, str], figures: dict[str, Any]) -> None:
    family = f"squall_user_{sanitize(name)}"
    kind = figures.get("type")
    doc = f"user {kind} {name!r} per task"
    if kind == "counter":
        families.add(family, "gauge", doc, labels, figures.get("count", 0))
    elif kind == "gauge":
        families.add(family, "gauge", doc, labels, figures.get("value", 0))
    elif kind == "meter":
        families.add(family, "counter", doc, labels, figures.get("count", 0))
    elif kind == "histogram":
        families.add_summary(family, doc, labels, figures)
    elif kind == "timer":
        families.add_summary(f"{family}_seconds", doc, labels, figures)
