"""Feeds a topology's metrics consumers (:mod:`squall.api.metrics2.consumer`, whose docstring
says what they get and when): :class:`MetricsReporter` resolves and checks the registrations at
submit, prepares the consumers, and hands them every task's data points every bucket from a
thread of its own, so that a slow consumer never holds back a tuple."""

from __future__ import annotations

import importlib
import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from squall.api.config import Config
from squall.api.errors import TopologySetupError
from squall.api.metrics2.consumer import (
    STORM_LOGGING_CONSUMER, ConsumerContext, DataPoint, LoggingMetricsConsumer, TaskInfo,
)
from squall.api.metrics2.registry import executor_tasks
from squall.runtime.info import WorkerInfo

DEFAULT_BUCKET_SECS = 60

log = logging.getLogger("squall.metrics2")

# the built-in figures as data points: (name, figure) for counts, (name, seconds, count) for latencies
_COUNTS = (("__emit-count", "emitted"), ("__transfer-count", "transferred"), ("__ack-count", "acked"),
           ("__fail-count", "failed"))
_BOLT_LATENCIES = (("__execute-latency", "execute_secs", "executed"),
                   ("__process-latency", "process_secs", "process_count"))
_SPOUT_LATENCIES = (("__complete-latency", "complete_secs", "complete_count"),)


_ALIASES = {STORM_LOGGING_CONSUMER: LoggingMetricsConsumer}


def consumer_class(name: Any) -> type:
    """The class a registration's ``class`` names; ValueError naming the key and the class."""
    if isinstance(name, type):
        return name
    if not isinstance(name, str) or not name:
        raise ValueError(f"topology.metrics.consumer.register: 'class' must name a metrics consumer class, "
                         f"got {name!r}")
    if name in _ALIASES:
        return _ALIASES[name]
    module_name, _, attribute = name.partition(":") if ":" in name else name.rpartition(".")
    try:
        found = getattr(importlib.import_module(module_name), attribute) if module_name and attribute else None
    except ImportError as e:
        raise ValueError(f"topology.metrics.consumer.register: unknown metrics consumer class {name!r} ({e})") from None
    except AttributeError:
        found = None
    if not isinstance(found, type):
        raise ValueError(f"topology.metrics.consumer.register: unknown metrics consumer class {name!r} "
                         "(expected 'package.module:Class', 'package.module.Class' or "
                         f"{STORM_LOGGING_CONSUMER!r})")
    return found


@dataclass
class _Registration:
    cls: type
    argument: Any
    parallelism: int
    component_id: str


def registrations(conf: dict[str, Any]) -> list[_Registration]:
    """The consumers ``conf`` registers, their classes resolved; ValueError for a bad one."""
    entries = conf.get(Config.TOPOLOGY_METRICS_CONSUMER_REGISTER) or []
    if not isinstance(entries, (list, tuple)):
        raise ValueError("topology.metrics.consumer.register: expected a list of "
                         f"{{'class': ..., 'parallelism.hint': ..., "
                         f"'argument': ...}}, got {entries!r}")
    out: list[_Registration] = []
    seen: dict[str, int] = {}
    for entry in entries:
        if not isinstance(entry, dict) or "class" not in entry:
            raise ValueError("topology.metrics.consumer.register: each registration is a dict with a 'class', "
                             f"got {entry!r}")
        cls = consumer_class(entry["class"])
        parallelism = entry.get("parallelism.hint", 1)
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError("topology.metrics.consumer.register: 'parallelism.hint' of "
                             f"{entry['class']!r} must be a positive "
                             f"integer, got {parallelism!r}")
        for method in ("prepare", "handle_data_points", "cleanup"):
            if not callable(getattr(cls, method, None)):
                raise ValueError("topology.metrics.consumer.register: metrics consumer class "
                                 f"{entry['class']!r} has no {method}()")
        label = entry["class"] if isinstance(entry["class"], str) else f"{cls.__module__}.{cls.__qualname__}"
        seen[label] = seen.get(label, 0) + 1
        component_id = f"__metrics_{label}" + (f"#{seen[label]}" if seen[label] > 1 else "")
        out.append(_Registration(cls, entry.get("argument"), parallelism, component_id))
    return out


def bucket_secs(conf: dict[str, Any]) -> float:
    secs = conf.get(Config.TOPOLOGY_BUILTIN_METRICS_BUCKET_SIZE_SECS, DEFAULT_BUCKET_SECS)
    if isinstance(secs, bool) or not isinstance(secs, (int, float)) or not secs > 0:
        raise ValueError("config 'topology.builtin.metrics.bucket.size.secs' must be a positive number of seconds, "
                         f"got {secs!r}")
    return float(secs)


def data_points(figures: dict[str, dict[str, Any]]) -> list[DataPoint]:
    """A task's user metrics (name -> snapshot) as data points (see the module's docstring)."""
    points = []
    for name, snapshot in figures.items():
        kind = snapshot.get("type")
        if kind == "counter":
            points.append(DataPoint(name, snapshot["count"]))
        elif kind == "gauge":
            points.append(DataPoint(name, snapshot["value"]))
        else:
            points.extend(DataPoint(f"{name}.{key}", value) for key, value in snapshot.items() if key != "type")
    return points


class MetricsReporter:
    """Feeds one topology's consumers (see the module's docstring): made at submit (ValueError
    for a bad registration or bucket size); :meth:`prepare` before the workers start,
    :meth:`start` once they run, :meth:`stop` once they stopped.

    ``kinds`` maps a component to ``"spout"`` or ``"bolt"``."""

    def __init__(self, topology_name: str, conf: dict[str, Any], kinds: dict[str, str]) -> None:
        self._name = topology_name
        self._conf = conf
        self._kinds = kinds
        self._snapshots: Callable[[], list[tuple[str, dict[str, Any]]]] = list
        self._workers: Callable[[], list[WorkerInfo]] = list
        self._registrations = registrations(conf)
        self.interval = bucket_secs(conf)
        self._consumers: list[list[Any]] = []  # per registration, its instances
        self._previous: dict[tuple[str, int], dict[str, Any]] = {}  # (component, first task) -> figures
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # one report at a time (the thread's, or stop's last one)

    def __bool__(self) -> bool:
        return bool(self._registrations)

    def prepare(self) -> None:
        """Make and prepare the consumers; if one raises, clean up those prepared and raise
        :class:`~squall.api.errors.TopologySetupError` naming it (as a component's failed prepare
        stops the topology's start)."""
        for registration in self._registrations:
            instances: list[Any] = []
            self._consumers.append(instances)
            for index in range(registration.parallelism):
                try:
                    consumer = registration.cls()
                    consumer.prepare(self._conf, registration.argument,
                                     ConsumerContext(self._name, registration.component_id, index,
                                                     registration.parallelism))
                except Exception as e:
                    self.stop(final_report=False)
                    raise TopologySetupError(
                        f"topology {self._name!r}: metrics consumer {registration.component_id!r} failed to "
                        f"prepare: {type(e).__name__}: {e}") from e
                instances.append(consumer)

    def start(self, snapshots: Callable[[], list[tuple[str, dict[str, Any]]]],
              workers: Callable[[], list[WorkerInfo]]) -> None:
        """Report every interval, from a thread of its own, the figures ``snapshots()`` returns:
        (component, executor snapshot) pairs, each snapshot with its ``tasks`` and
        ``user_metrics`` (see :meth:`squall.runtime.executor.executor.Executor.stats_snapshot`), on the
        workers ``workers()`` describes."""
        self._snapshots, self._workers = snapshots, workers
        self._thread = threading.Thread(target=self._run, name=f"metrics-{self._name}", daemon=True)
        self._thread.start()

    def stop(self, final_report: bool = True) -> None:
        """Stop the thread, give the consumers the figures once more (``final_report``), then
        ``cleanup()`` each."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        if final_report and self._consumers:
            self.report()
        for instances in self._consumers:
            for consumer in instances:
                self._call(consumer, "cleanup")
        self._consumers = []

    def _run(self) -> None:
        while not self._stopping.wait(self.interval):
            self.report()

    def report(self) -> None:
        """Hand every task's data points of this bucket to the consumers."""
        with self._lock:
            try:
                batches = self._task_points()
            except Exception:  # noqa: BLE001 - the reporting thread must go on
                log.exception("topology %r: collecting the metrics consumers' data points failed", self._name)
                return
            for task_info, points in batches:
                for instances in self._consumers:
                    consumer = instances[task_info.src_task_id % len(instances)]
                    self._call(consumer, "handle_data_points", task_info, list(points))  # each its own list

    def _call(self, consumer: Any, method: str, *args: Any) -> None:
        try:
            getattr(consumer, method)(*args)
        except Exception:  # noqa: BLE001 - a consumer's failure is logged, never fatal
            log.exception("topology %r: metrics consumer %s.%s raised", self._name, type(consumer).__name__, method)

    def _task_points(self) -> list[tuple[TaskInfo, list[DataPoint]]]:
        local = socket.gethostname()
        where: dict[int, tuple[str, int]] = {}
        for worker in self._workers():
            host = worker.host or local
            for executor in worker.executors:
                for task in executor.tasks:
                    where[task] = (host, worker.port)
        now = int(time.time())
        out = []
        for component, snapshot in self._snapshots():
            tasks = sorted(executor_tasks(snapshot))
            user = snapshot.get("user_metrics", {})
            for i, task in enumerate(tasks):
                points = self._builtin_points(component, task, snapshot) if i == 0 else []
                points.extend(data_points(user.get(task, {})))
                if points:
                    host, port = where.get(task, (local, 0))
                    out.append((TaskInfo(host, port, component, task, now, self.interval), points))
        return out

    def _builtin_points(self, component: str, task: int, snapshot: dict[str, Any]) -> list[DataPoint]:
        """The executor's built-in figures of this bucket (differences from the last report; a
        figure that went down — a restarted worker — counts from zero)."""
        before = self._previous.get((component, task), {})
        self._previous[(component, task)] = snapshot

        def delta(key: str) -> float:
            now, then = snapshot.get(key, 0), before.get(key, 0)
            return now - then if now >= then else now

        kind = self._kinds.get(component, "bolt")
        points = [DataPoint(name, delta(key)) for name, key in _COUNTS]
        if kind == "bolt":
            points.append(DataPoint("__execute-count", delta("executed")))
        for name, secs, count in _BOLT_LATENCIES if kind == "bolt" else _SPOUT_LATENCIES:
            n = delta(count)
            points.append(DataPoint(name, round(1000.0 * delta(secs) / n, 4) if n else 0.0))
        return points
