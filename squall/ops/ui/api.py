"""Storm UI's REST API, as JSON documents built from what Nimbus knows.

Field names and types are Storm UI's (``docs/STORM-UI-REST-API.md`` in Storm), so that scripts
written against Storm UI read Squall's: counts are integers, latencies and capacity are strings
of a number with three decimals, times are seconds. A topology's id is its name (a Squall
topology is known by its name alone). Fields that describe what Squall has no notion of
(resource-aware scheduling, nimbus replication, log viewers) keep Storm's names with neutral
values (``false``, ``0``, ``1``, ``""``), so that clients looking for them find them.

Every builder is a pure function of a :class:`TopologyView` (one topology's info, structure,
config and windowed figures): the HTTP layer (:mod:`squall.ops.ui.server`) fetches the view, turns
:class:`ApiError` into an HTTP status, and renders config values JSON has no type for (a class)
as their repr.
"""

from __future__ import annotations

import math
import re
import time
import zlib
from dataclasses import dataclass
from typing import Any

import msgspec

import squall
from squall.api.config import Config, config_table
from squall.api.errors import error_headline
from squall.api.system_ids import is_system_id
from squall.api.storm_topology import StormTopology
from squall.cluster.stats_history import ALL_TIME, COUNTERS, FINE_SECS, WINDOWS, window_pretty
from squall.runtime.messaging.schema import TupleSample
from squall.runtime.info import ErrorInfo, ExecutorInfo, ExecutorPlace, TopologyInfo, WorkerInfo
from squall.runtime.stats import since_restart


class ApiError(Exception):
    """A request the API refuses: ``status`` is the HTTP status, the message names what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class TopologyView:
    """What the API shows of one topology at one moment."""

    info: TopologyInfo  # Nimbus.topology_info
    topology: StormTopology
    conf: dict[str, Any]
    windows: dict[int | None, dict[str, tuple[float, ...]]]  # window -> component -> COUNTERS

    @property
    def name(self) -> str:
        return self.info.name


def _uptime(secs: float) -> str:
    """Storm UI's ``uptime``: "1d 2h 3m 4s", leading zero units left out."""
    return window_pretty(int(secs))


def _ms(total_secs: float, count: float) -> str:
    return f"{1000.0 * total_secs / count:.3f}" if count else "0.000"


def _window_param(window: int | None) -> str:
    return ALL_TIME if window is None else str(window)


def _executors(view: TopologyView) -> list[tuple[WorkerInfo, ExecutorPlace]]:
    """(worker, executor) pairs of the topology's workers."""
    return [(w, e) for w in view.info.workers for e in w.executors]


def _totals(view: TopologyView) -> tuple[int, int, int]:
    """Workers, executors and tasks of the topology (ackers included, as Storm counts them)."""
    pairs = _executors(view)
    return len(view.info.workers), len(pairs), sum(len(e.tasks) for _, e in pairs)


def topology_summary_entry(view: TopologyView) -> dict[str, Any]:
    """One element of ``/api/v1/topology/summary``'s ``topologies``."""
    workers, executors, tasks = _totals(view)
    info = view.info
    return {
        "id": view.name, "encodedId": view.name, "name": view.name, "status": info.status,
        "uptime": _uptime(info.uptime_secs), "uptimeSeconds": int(info.uptime_secs),
        "tasksTotal": tasks, "workersTotal": workers, "executorsTotal": executors, "replicationCount": 1,
        "requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0, "requestedTotalMem": 0.0, "requestedCpu": 0.0,
        "assignedMemOnHeap": 0.0, "assignedMemOffHeap": 0.0, "assignedTotalMem": 0.0, "assignedCpu": 0.0,
    }


def topology_summary(views: list[TopologyView]) -> dict[str, Any]:
    """``GET /api/v1/topology/summary``."""
    return {"topologies": [topology_summary_entry(v) for v in views], "schedulerDisplayResource": False}


def cluster_summary(views: list[TopologyView]) -> dict[str, Any]:
    """``GET /api/v1/cluster/summary``."""
    return cluster_summary_of([topology_summary_entry(v) for v in views])


def cluster_summary_of(topologies: list[dict[str, Any]]) -> dict[str, Any]:
    """The cluster summary of the topologies' summary entries: this machine is the one
    supervisor; its slots are the running topologies' workers."""
    used = sum(t["workersTotal"] for t in topologies)
    return {
        "stormVersion": f"squall {squall.__version__}", "supervisors": 1, "topologies": len(topologies),
        "slotsTotal": used, "slotsUsed": used, "slotsFree": 0,
        "executorsTotal": sum(t["executorsTotal"] for t in topologies),
        "tasksTotal": sum(t["tasksTotal"] for t in topologies),
        "schedulerDisplayResource": False, "totalMem": 0.0, "totalCpu": 0.0, "availMem": 0.0, "availCpu": 0.0,
        "memAssignedPercentUtil": 0.0, "cpuAssignedPercentUtil": 0.0,
    }


def _figures(view: TopologyView, window: int | None, component: str) -> dict[str, float]:
    values = view.windows[window].get(component)
    return dict(zip(COUNTERS, values)) if values else dict.fromkeys(COUNTERS, 0.0)


def _stream_counts(view: TopologyView, window: int | None, spouts: bool, sys: bool) -> dict[str, Any]:
    """Emitted, transferred, acked and failed of the topology's spouts (or all components) in
    ``window``, and the spouts' complete latency: Storm's ``topologyStats`` element. Squall's own
    components count only with ``sys`` (Storm UI's "Show System Stats"): the checkpoint spout's
    barriers are not the user's tuples."""
    sums = dict.fromkeys(COUNTERS, 0.0)
    for cid, spec in view.topology.components.items():
        if (is_system_id(cid) and not sys) or (spouts and not spec.is_spout):
            continue
        for key, value in _figures(view, window, cid).items():
            sums[key] += value
    return sums


def _error_fields(view: TopologyView, component: str) -> dict[str, Any]:
    summary = view.info.components.get(component)
    errors = summary.errors if summary is not None else []
    if not errors:
        return {"lastError": "", "lastErrorHeadline": "", "errorHost": "", "errorPort": None, "errorWorkerLogLink": "",
                "errorTime": None, "errorLapsedSecs": None}
    last = errors[-1]
    host, port = _task_location(view, last.task)
    return {"lastError": last.error, "lastErrorHeadline": error_headline(last.error),
            "errorHost": host, "errorPort": port, "errorWorkerLogLink": "",
            "errorTime": int(last.time), "errorLapsedSecs": max(0, int(time.time() - last.time))}


def _task_location(view: TopologyView, task: int) -> tuple[str, int | None]:
    """The host and port of the worker running ``task``."""
    for worker, executor in _executors(view):
        if task in executor.tasks:
            return worker.host or "127.0.0.1", worker.port
    return "", None


def _component_entry(view: TopologyView, cid: str, window: int | None) -> dict[str, Any]:
    spec = view.topology.components[cid]
    summary = view.info.components[cid]
    f = _figures(view, window, cid)
    executors = sum(1 for _, e in _executors(view) if e.component == cid)
    entry: dict[str, Any] = {
        "encodedId": cid, "executors": executors, "tasks": spec.num_tasks,
        "emitted": int(f["emitted"]), "transferred": int(f["transferred"]),
        "acked": int(f["acked"]), "failed": int(f["failed"]),
        "requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0, "requestedCpu": 0.0,
    }
    if spec.is_spout:
        entry["spoutId"] = cid
        entry["completeLatency"] = _ms(f["complete_secs"], f["complete_count"])
    else:
        entry["boltId"] = cid
        entry["executed"] = int(f["executed"])
        entry["executeLatency"] = _ms(f["execute_secs"], f["executed"])
        entry["processLatency"] = _ms(f["process_secs"], f["process_count"])
        entry["capacity"] = f"{summary.capacity or 0.0:.3f}"
        if spec.operations is not None:  # Squall's addition: a Streams API bolt's operations
            entry["operations"] = spec.operations
    entry.update(_error_fields(view, cid))
    return entry


def _window_stats(view: TopologyView, cid: str | None, sys: bool = False) -> list[dict[str, Any]]:
    """One element per Storm window: the topology's (``cid`` None; Squall's components with
    ``sys``) or one component's counts."""
    out = []
    for window in WINDOWS:
        if cid is None:
            f = _stream_counts(view, window, spouts=True, sys=sys)
            every = _stream_counts(view, window, spouts=False, sys=sys)
            f["emitted"], f["transferred"] = every["emitted"], every["transferred"]
        else:
            f = _figures(view, window, cid)
        stats = {"windowPretty": window_pretty(window), "window": _window_param(window),
                 "emitted": int(f["emitted"]), "transferred": int(f["transferred"]),
                 "acked": int(f["acked"]), "failed": int(f["failed"])}
        if cid is None or view.topology.components[cid].is_spout:
            stats["completeLatency"] = _ms(f["complete_secs"], f["complete_count"])
        else:
            stats["executed"] = int(f["executed"])
            stats["executeLatency"] = _ms(f["execute_secs"], f["executed"])
            stats["processLatency"] = _ms(f["process_secs"], f["process_count"])
        out.append(stats)
    return out


def _workers(view: TopologyView) -> list[dict[str, Any]]:
    uptime = view.info.uptime_secs
    out = []
    for worker in view.info.workers:
        counts: dict[str, int] = {}
        for executor in worker.executors:
            counts[executor.component] = counts.get(executor.component, 0) + len(executor.tasks)
        out.append({
            "topologyId": view.name, "topologyName": view.name, "supervisorId": "localhost",
            "host": worker.host or "127.0.0.1", "port": worker.port, "pid": worker.pid,
            "executorsTotal": len(worker.executors), "componentNumTasks": counts,
            "uptime": _uptime(uptime), "uptimeSeconds": int(uptime), "workerLogLink": "",
            "assignedMemOnHeap": 0.0, "assignedMemOffHeap": 0.0, "assignedCpu": 0.0,
        })
    return out


def topology_page(view: TopologyView, window: int | None, sys: bool = False) -> dict[str, Any]:
    """``GET /api/v1/topology/:id?window=...&sys=...``: with ``sys`` (Storm UI's "Show System
    Stats"), Squall's own components (:func:`~squall.api.system_ids.is_system_id`) are in the totals
    and the tables too."""
    conf = view.conf
    shown = [cid for cid in view.topology.components if sys or not is_system_id(cid)]
    return {
        **topology_summary_entry(view),
        "window": _window_param(window), "windowHint": window_pretty(window),
        "msgTimeout": conf.get(Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS),
        "debug": bool(conf.get(Config.TOPOLOGY_DEBUG, False)), "samplingPct": 0.0,
        "schedulerDisplayResource": False,
        "topologyStats": _window_stats(view, None, sys),
        "spouts": [_component_entry(view, cid, window) for cid in shown if view.topology.components[cid].is_spout],
        "bolts": [_component_entry(view, cid, window) for cid in shown
                  if not view.topology.components[cid].is_spout],
        "workers": _workers(view),
        "configuration": {key: _redacted(key, value) for key, value in sorted(conf.items())},
        # Squall's additions: each key's doc, the last errors of the components, and their
        # current run's figures where a worker restart or a rebalance made them differ
        "configurationDocs": [{**row, "value": _redacted(row["key"], row["value"])} for row in config_table(conf)],
        "lastErrors": _last_errors(view, shown),
        "currentRun": [{"component": cid, **{k: getattr(now, k) for k in ("emitted", "transferred", "acked", "failed")}}
                       for cid, now in since_restart(view.info).items() if cid in shown],
        # and the autoscaler's decisions, newest first (None: no autoscaler)
        "autoscale": None if view.info.autoscale is msgspec.UNSET else [
            {"time": int(d.time * 1000), "action": d.action, "workers": d.workers, "executors": d.executors,
             "reason": d.reason} for d in reversed(view.info.autoscale)],
    }


def _last_errors(view: TopologyView, components: list[str]) -> list[dict[str, Any]]:
    """The 20 latest errors of ``components``, newest first; the same text of the same component
    is one entry (its latest occurrence, with the count of all) however the component's list
    interleaves it with others."""
    folded: dict[tuple[str, str], dict[str, Any]] = {}
    for cid in components:
        for error in view.info.components[cid].errors:  # oldest first: the last one seen wins
            key, entry = (cid, error.error), {"component": cid, **_error(view, error)}
            if key in folded:
                entry["count"] += folded[key]["count"]
            folded[key] = entry
    return sorted(folded.values(), key=lambda e: e["errorTime"], reverse=True)[:20]


def component_page(view: TopologyView, cid: str, window: int | None) -> dict[str, Any]:
    """``GET /api/v1/topology/:id/component/:component?window=...``."""
    spec = view.topology.components.get(cid)
    if spec is None:
        raise ApiError(404, f"topology {view.name!r} has no component {cid!r}")
    summary = view.info.components[cid]
    entry = _component_entry(view, cid, window)
    page: dict[str, Any] = {
        "id": cid, "encodedId": cid, "name": view.name, "topologyId": view.name, "encodedTopologyId": view.name,
        "topologyStatus": view.info.status, "componentType": "spout" if spec.is_spout else "bolt",
        "executors": entry["executors"], "tasks": entry["tasks"],
        "window": _window_param(window), "windowHint": window_pretty(window),
        "debug": bool(view.conf.get(Config.TOPOLOGY_DEBUG, False)), "samplingPct": 0.0, "eventLogLink": "",
        "profilingAndDebuggingCapable": False, "profileActionEnabled": False, "profilerActive": [],
        "requestedMemOnHeap": 0.0, "requestedMemOffHeap": 0.0, "requestedCpu": 0.0,
        "schedulerDisplayResource": False, "user": "",
        "componentErrors": [_error(view, e) for e in reversed(summary.errors)],
        # per stream and per executor: all time (the windows are the component's, above)
        "outputStats": [{"stream": stream, "emitted": counts.emitted, "transferred": counts.transferred}
                        for stream, counts in summary.streams.items() if not stream.startswith("__")],
        "executorStats": [_executor_stats(view, spec.is_spout, e) for e in summary.executors],
        # Squall's additions: the user metrics (squall.api.metrics2), aggregated and per task
        "userMetrics": summary.user_metrics,
        "taskUserMetrics": {str(task): t.user_metrics for task, t in summary.tasks.items()},
    }
    if spec.is_spout:
        page["spoutSummary"] = _window_stats(view, cid)
    else:
        page["boltStats"] = _window_stats(view, cid)
        if spec.operations is not None:
            page["operations"] = spec.operations
        inputs = [(src, stream, grouping) for (src, stream), grouping in spec.inputs.items()
                  if not src.startswith("__")]
        page["inputStats"] = [{"component": src, "encodedComponentId": src, "stream": stream,
                               "grouping": grouping.type} for src, stream, grouping in inputs]
        if len(inputs) == 1:  # the bolt's figures are its one input's (not counted per input stream)
            page["inputStats"][0].update({key: entry[key] for key in (
                "executed", "acked", "failed", "executeLatency", "processLatency")})
    return page


def _executor_stats(view: TopologyView, spout: bool, executor: ExecutorInfo) -> dict[str, Any]:
    """An element of the component page's ``executorStats``: Storm's id ``[first-last]`` task."""
    tasks = executor.tasks
    host, port = _task_location(view, tasks[0]) if tasks else ("", None)
    uptime = view.info.uptime_secs
    stats = {"id": f"[{tasks[0]}-{tasks[-1]}]" if tasks else "[]", "host": host, "port": port,
             "uptime": _uptime(uptime), "uptimeSeconds": int(uptime), "workerLogLink": "",
             "emitted": executor.emitted, "transferred": executor.transferred,
             "acked": executor.acked, "failed": executor.failed}
    if spout:
        stats["completeLatency"] = f"{executor.complete_latency_ms or 0.0:.3f}"
    else:
        stats.update(executed=executor.executed or 0, capacity=f"{executor.capacity or 0.0:.3f}",
                     executeLatency=f"{executor.execute_latency_ms:.3f}",
                     processLatency=f"{executor.process_latency_ms:.3f}")
    return stats


def _error(view: TopologyView, error: ErrorInfo) -> dict[str, Any]:
    host, port = _task_location(view, error.task)
    return {"error": error.error, "headline": error_headline(error.error), "errorTime": int(error.time * 1000),
            "errorHost": host, "errorPort": port, "errorLapsedSecs": max(0, int(time.time() - error.time)),
            "errorWorkerLogLink": "", "task": error.task, "count": error.count}


def visualization(view: TopologyView, window: int | None) -> dict[str, Any]:
    """``GET /api/v1/topology/:id/visualization``: Storm UI's graph data, keyed by component:
    ``:type``, ``:capacity``, ``:latency``, ``:transferred``, ``:inputs`` (each
    ``:component``, ``:stream``, ``:sani-stream``, ``:grouping``)."""
    out = {}
    for cid, spec in view.topology.components.items():
        if cid.startswith("__"):
            continue
        entry = _component_entry(view, cid, window)
        out[cid] = {
            ":type": "spout" if spec.is_spout else "bolt",
            ":capacity": float(entry.get("capacity", 0.0)),
            ":latency": float(entry["completeLatency"] if spec.is_spout else entry["processLatency"]),
            ":transferred": entry["transferred"],
            ":link": f"/component.html?topology_id={view.name}&id={cid}",
            ":inputs": [{":component": src, ":stream": stream, ":sani-stream": _sanitize(stream),
                         ":grouping": grouping.type}
                        for (src, stream), grouping in spec.inputs.items() if not src.startswith("__")],
        }
    return out


#: The shortest interval a point of the live plots covers.
MIN_INTERVAL_SECS = FINE_SECS / 2


def series(view: TopologyView, recent: list[tuple[float, dict[str, tuple[float, ...]]]]) -> dict[str, Any]:
    """``GET /api/v1/topology/:id/series`` (Squall's; what the live plots draw): per interval
    between consecutive samples of the last ten minutes, ``t`` (seconds before now, <= 0), the
    user's spouts' emitted and acked tuples/s and complete latency, and per component ``emitted``
    and ``executed`` tuples/s, ``capacity`` (time in execute over the interval, per executor) and
    ``latency`` (ms: complete for spouts, process for bolts)."""
    executors: dict[str, int] = {}
    for _, executor in _executors(view):
        executors[executor.component] = executors.get(executor.component, 0) + 1
    # the user's components: the checkpoint spout's barriers are no throughput, as in the totals
    user = [cid for cid in view.topology.components if not is_system_id(cid)]
    spouts = [cid for cid in user if view.topology.components[cid].is_spout]
    now = recent[-1][0] if recent else 0.0
    # every read of the topology may add a sample, and a rate over a sliver of time is noise
    # (the executors' counters move in steps): intervals of at least MIN_INTERVAL_SECS
    samples: list[tuple[float, dict[str, tuple[float, ...]]]] = []
    for sample in recent:
        if len(samples) > 1 and sample[0] - samples[-1][0] < MIN_INTERVAL_SECS:
            samples[-1] = sample  # the last interval, stretched to this sample
        elif not samples or sample[0] - samples[-1][0] >= MIN_INTERVAL_SECS:
            samples.append(sample)
    points = []
    for (t0, before), (t1, after) in zip(samples, samples[1:]):
        secs = t1 - t0
        components = {}
        for cid in user:
            zero = (0.0,) * len(COUNTERS)
            d = {k: max(0.0, a - b) for k, a, b in zip(COUNTERS, after.get(cid, zero), before.get(cid, zero))}
            spout = view.topology.components[cid].is_spout
            components[cid] = {
                "emitted": d["emitted"] / secs, "executed": d["executed"] / secs, "acked": d["acked"] / secs,
                "capacity": min(1.0, d["execute_secs"] / secs / max(1, executors.get(cid, 1))),
                "latency": float(_ms(d["complete_secs"], d["complete_count"]) if spout
                                 else _ms(d["process_secs"], d["process_count"])),
            }
        acked = sum(components[cid]["acked"] for cid in spouts)
        latency = [components[cid]["latency"] for cid in spouts if components[cid]["acked"]]
        points.append({"t": round(t1 - now, 3), "emitted": sum(components[cid]["emitted"] for cid in spouts),
                       "acked": acked, "completeLatency": max(latency, default=0.0), "components": components})
    return {"points": points}


_SECRET = re.compile(r"password|passwd|secret|token|credential|auth", re.IGNORECASE)


def _redacted(key: str, value: Any) -> Any:
    """``value`` with what a key names as secret (a state provider's password, say) replaced by
    "REDACTED", at any depth, as Storm UI redacts its auth payload: reads of the UI need no
    token on 127.0.0.1, so other users of the machine may see the rest."""
    if _SECRET.search(key):
        return "REDACTED"
    if isinstance(value, dict):
        return {k: _redacted(str(k), v) for k, v in value.items()}
    return value


def _sanitize(stream: str) -> str:
    """A stream id usable as an identifier in the page (Storm UI's ``:sani-stream``): the same
    in every process, so not ``hash``."""
    return "".join(c if c.isalnum() else "_" for c in stream) + f"{zlib.crc32(stream.encode()) % 1000}"


def rebalance_options(body: Any) -> tuple[int | None, dict[str, int] | None]:
    """(numWorkers, executors) of a rebalance's JSON body, Storm UI's
    ``{"rebalanceOptions": {"numWorkers": N, "executors": {"component": P}}}`` (numbers may be
    strings of digits, as Storm takes them); ApiError 400 naming the option at fault."""
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object with rebalanceOptions, got {body!r}")
    options = body.get("rebalanceOptions", {})
    if not isinstance(options, dict):
        raise ApiError(400, f"rebalanceOptions must be an object, got {options!r}")
    num_workers = options.get("numWorkers")
    if num_workers is not None:
        num_workers = _count(num_workers, "rebalanceOptions.numWorkers")
    executors = options.get("executors")
    if executors is not None:
        if not isinstance(executors, dict):
            raise ApiError(400, f"rebalanceOptions.executors must be an object, got {executors!r}")
        executors = {str(c): _count(p, f"rebalanceOptions.executors.{c}") for c, p in executors.items()}
    return num_workers, executors


def _count(value: Any, option: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ApiError(400, f"{option} must be an integer >= 1, got {value!r}")
    return value


def operation(name: str, op: str) -> dict[str, Any]:
    """The answer to a POST: ``{"topologyOperation", "topologyId", "status": "success"}``."""
    return {"topologyOperation": op, "topologyId": name, "status": "success"}


def sampling_fields(percent: float, secs_left: float) -> dict[str, Any]:
    """The component page's sampling fields: Storm's ``debug`` and ``samplingPct``, and
    Squall's ``samplingSecsLeft``."""
    return {"debug": percent > 0, "samplingPct": percent, "samplingSecsLeft": round(secs_left, 1)}


def samples_page(samples: list[TupleSample]) -> dict[str, Any]:
    """``GET /api/v1/topology/:id/component/:component/samples`` (Squall's): the tuples sampled,
    oldest first: time (seconds since the epoch), stream, task, values."""
    return {"samples": [{"time": s.time, "stream": s.stream, "task": s.task, "values": s.values} for s in samples]}


def number(what: str, text: str) -> float:
    """``text`` as a finite number, else a 400 naming ``what``."""
    try:
        value = float(text)
    except ValueError:
        raise ApiError(400, f"{what} must be a number, not {text!r}") from None
    if not math.isfinite(value):
        raise ApiError(400, f"{what} must be a finite number, not {text!r}")
    return value


def worker_port(worker: str) -> int:
    """The port of a worker named ``host:port`` (Storm's ``host-port``: either separator)."""
    port = re.split(r"[:-]", worker)[-1]
    if not port.isdigit():
        raise ApiError(400, f"a worker is host:port, not {worker!r}")
    return int(port)
