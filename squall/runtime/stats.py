"""The roll-up per component of the executors' statistics (what Storm's UI shows).

What one executor counts, and how, is :mod:`squall.runtime.executor.executor_stats`.
"""

from __future__ import annotations

from typing import Any

from msgspec import UNSET

from squall.api.metrics2.registry import user_metrics_summary
from squall.runtime.info import ComponentInfo, ExecutorInfo, Figures, StreamCounts, TaskMetrics, TopologyInfo

#: the most entries of an executor's components' own ``metrics`` a heartbeat carries
MAX_COMPONENT_METRICS = 1000
OMITTED_METRICS = "omitted_metrics"  # how many names did not fit


# The figures of an executor's snapshot that add up over its runs (the rest, capacity and the
# user metrics, describe its current run).
_CUMULATIVE = ("emitted", "transferred", "acked", "failed", "executed", "execute_secs", "process_secs",
               "process_count", "complete_secs", "complete_count")


def carry_over(earlier: dict[str, Any] | None, current: dict[str, Any] | None) -> dict[str, Any]:
    """One executor's figures counted over its runs: ``earlier`` (what its previous runs did, in
    a snapshot's shape, or None) added to ``current`` (its current run's snapshot, or None while
    it is not running: then ``earlier`` alone, at capacity 0). Counts, times and the per-stream
    counts add up; capacity, the components' own ``metrics`` (gauges among them, such as a
    lag) and the user metrics are the current run's."""
    if earlier is None or current is None:
        figures = dict(current if current is not None else earlier or {})
        if current is None:
            figures.update(capacity=0.0, metrics={}, user_metrics={})
        return figures
    figures = dict(current)
    for key in _CUMULATIVE:
        figures[key] = earlier[key] + current[key]
    streams = dict(earlier.get("streams", {}))
    for stream, (emitted, transferred) in current.get("streams", {}).items():
        before = streams.get(stream, (0, 0))
        streams[stream] = (before[0] + emitted, before[1] + transferred)
    figures["streams"] = streams
    return figures


def current_run(current: dict[str, Any] | None) -> dict[str, Any]:
    """The figures of an executor's current run alone (zeros while it is not running): what
    ``get_topology_info`` shows as the current job's, beside the cumulative ones."""
    keys = (*_CUMULATIVE, "capacity")
    return {key: current[key] for key in keys} if current is not None else dict.fromkeys(keys, 0)


def retire(retired: dict[str, Any] | None, figures: dict[str, Any]) -> dict[str, Any]:
    """A component's figures from runs that are over (a rebalance replaced them), with an
    executor's final ``figures`` added: the counts, times and per-stream counts only."""
    counts = {key: figures[key] for key in _CUMULATIVE}
    counts["streams"] = dict(figures.get("streams", {}))
    counts["capacity"] = 0.0
    return counts if retired is None else carry_over(retired, counts)


def _ms(total_secs: float, count: int) -> float:
    return round(1000.0 * total_secs / count, 4) if count else 0.0


def component_metrics(instances: list[Any]) -> dict[str, float]:
    """The sum over ``instances`` (an executor's tasks) of their ``metrics`` dicts: a
    component's own counters (a connector's records read, errors...; numbers, or dicts of
    numbers such as lag per partition, flattened to ``"lag.topic:0"``). Read racily from the
    executor's thread, as the other figures; a dict growing meanwhile is read next time. At
    most :data:`MAX_COMPONENT_METRICS` names: past that, the plain counters, the first names
    from dicts, and ``omitted_metrics``."""
    totals: dict[str, float] = {}
    nested: set[str] = set()  # the names from dicts of numbers (a lag per partition)
    for instance in instances:
        metrics = getattr(instance, "metrics", None)
        if not isinstance(metrics, dict):
            continue
        try:
            items = list(metrics.items())
            for name, value in items:
                inner = list(value.items()) if isinstance(value, dict) else [(None, value)]
                for sub, number in inner:
                    if isinstance(number, (int, float)) and not isinstance(number, bool):
                        key = str(name) if sub is None else f"{name}.{sub}"
                        totals[key] = totals.get(key, 0) + number
                        if sub is not None:
                            nested.add(key)
        except RuntimeError:  # changed size while read: next heartbeat
            continue
    if len(totals) > MAX_COMPONENT_METRICS:
        # a heartbeat carries at most this many (see squall.runtime.messaging.schema): the plain counters,
        # then the first names from dicts, and how many were left out, rather than no heartbeat
        kept = sorted(totals, key=lambda k: (k in nested, k))[:MAX_COMPONENT_METRICS - 1]
        totals = {**{k: totals[k] for k in kept}, OMITTED_METRICS: len(totals) - len(kept)}
    return totals


def since_restart(info: TopologyInfo) -> dict[str, Figures]:
    """Component -> its figures since the last worker restart or rebalance (``current``), for
    the components where they differ from those of the topology's whole life."""
    return {cid: c.current for cid, c in info.components.items()
            if any(getattr(c.current, k) != getattr(c, k) for k in ("emitted", "transferred", "acked", "failed"))}


def component_summary(kind: str, parallelism: int, num_tasks: int, snapshots: list[dict[str, Any]],
                      retired: dict[str, Any] | None = None) -> ComponentInfo:
    """Roll the executors' snapshots of one component up into a :class:`ComponentInfo`: the
    built-in figures and connector counters (``metrics``) summed, also per output stream
    (``streams``), with what ``retired`` runs did (see :func:`retire`); the current run's
    figures alone (``current``: since the last restart or rebalance, from each snapshot's
    ``run`` when it has one); the user metrics aggregated (``user_metrics``, see
    :mod:`squall.api.metrics2.registry`) and per task (``tasks``); and each executor's own
    figures (``executors``). Errors are the cluster's to add."""
    counted = snapshots if retired is None else [*snapshots, retired]
    metrics: dict[str, float] = {}
    for snapshot in snapshots:
        for name, value in snapshot.get("metrics", {}).items():
            metrics[name] = metrics.get(name, 0) + value
    streams: dict[str, StreamCounts] = {}
    for snapshot in counted:
        for stream, (emitted, transferred) in snapshot.get("streams", {}).items():
            counts = streams.setdefault(stream, StreamCounts(emitted=0, transferred=0))
            counts.emitted += emitted
            counts.transferred += transferred
    per_task: dict[int, dict[str, dict[str, Any]]] = {}
    for snapshot in snapshots:
        per_task.update(dict.fromkeys(snapshot.get("tasks", ()), {}))
        per_task.update(snapshot.get("user_metrics", {}))
    return ComponentInfo(
        type=kind, parallelism=parallelism, num_tasks=num_tasks,
        **_figures(kind, counted),
        current=Figures(**_figures(kind, [s.get("run", s) for s in snapshots])),
        metrics=metrics or UNSET,
        streams=streams,
        user_metrics=user_metrics_summary(per_task),
        tasks={task: TaskMetrics(user_metrics=per_task[task]) for task in sorted(per_task)},
        executors=[ExecutorInfo(tasks=list(s.get("tasks", ())), **_figures(kind, [s])) for s in snapshots],
    )


def _figures(kind: str, snapshots: list[dict[str, Any]]) -> dict[str, Any]:
    """The built-in figures of ``snapshots`` (one component's executors), summed: the fields
    of a :class:`Figures`."""
    total = lambda key: sum(s[key] for s in snapshots)  # noqa: E731
    out: dict[str, Any] = {
        "emitted": total("emitted"),
        "transferred": total("transferred"),
        "acked": total("acked"),
        "failed": total("failed"),
        "execute_latency_ms": _ms(total("execute_secs"), total("executed")),
        "process_latency_ms": _ms(total("process_secs"), total("process_count")),
    }
    if kind == "spout":
        out["complete_latency_ms"] = _ms(total("complete_secs"), total("complete_count"))
    else:
        out["executed"] = total("executed")
        out["capacity"] = round(max((s["capacity"] for s in snapshots), default=0.0), 4)
    return out
