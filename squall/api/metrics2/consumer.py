"""Metrics consumers (Storm's ``IMetricsConsumer``): what ``topology.metrics.consumer.register``
names gets every task's data points every ``topology.builtin.metrics.bucket.size.secs``.

A registration is Storm's ``{"class": ..., "parallelism.hint": 1, "argument": None}``. ``class``
is ``"package.module:Class"`` or ``"package.module.Class"`` (or the class itself), or Storm's
``org.apache.storm.metric.LoggingMetricsConsumer``, which is :class:`LoggingMetricsConsumer`.
A consumer has Storm's three methods in snake_case (:class:`MetricsConsumer`); ``parallelism.hint``
instances are made, each getting the tasks whose id modulo the hint is its index.

Storm runs consumers as bolts fed by every task; Squall runs them in the process that collects
the workers' figures (the one that submitted the topology: the :class:`LocalCluster`'s, or the
Spark driver), in a thread of their own (:mod:`squall.cluster.metrics_reporter`), so a slow
consumer never holds back a tuple. Data points per task, every bucket:

* the task's user metrics (``TopologyContext.register_*``): a counter as ``name`` (its count), a
  gauge as ``name`` (its value), histograms, meters and timers as one point per figure,
  ``name.count``, ``name.p99``, ``name.m1_rate``... (timers in seconds);
* the built-in figures, on the first task of each executor (Squall counts per executor), as
  Storm names them: ``__emit-count``, ``__transfer-count``, ``__ack-count``, ``__fail-count``,
  ``__execute-count`` (bolts) — counts of the bucket, as Storm's — and ``__execute-latency``,
  ``__process-latency`` (bolts) and ``__complete-latency`` (spouts), the bucket's mean in
  milliseconds. Storm's values are maps by stream; these are totals over the streams.

When the topology is killed, the consumers get the last figures once more, then ``cleanup()``.
A consumer that raises is logged and goes on getting data points.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, NamedTuple

STORM_LOGGING_CONSUMER = "org.apache.storm.metric.LoggingMetricsConsumer"


@dataclass(frozen=True)
class TaskInfo:
    """Where and when data points come from (Storm's ``IMetricsConsumer.TaskInfo``)."""

    src_worker_host: str
    src_worker_port: int
    src_component_id: str
    src_task_id: int
    timestamp: int  # seconds since the epoch
    update_interval_secs: float


class DataPoint(NamedTuple):
    """One figure (Storm's ``IMetricsConsumer.DataPoint``)."""

    name: str
    value: Any


@dataclass(frozen=True)
class ConsumerContext:
    """What a consumer is told of its place (Storm hands its bolt's ``TopologyContext``)."""

    topology_name: str
    component_id: str  # Storm's "__metrics_<class>", with "#2"... for a class registered again
    index: int  # among the registration's parallelism.hint instances
    parallelism: int


class MetricsConsumer:
    """Storm's ``IMetricsConsumer`` in snake_case; subclass it (or just have the methods)."""

    def prepare(self, conf: dict[str, Any], argument: Any, context_info: ConsumerContext) -> None:
        """Called once, before the first data points; ``argument`` is the registration's."""

    def handle_data_points(self, task_info: TaskInfo, data_points: list[DataPoint]) -> None:
        """One task's data points of one bucket."""

    def cleanup(self) -> None:
        """Called once, after the last data points (the topology was killed)."""


class LoggingMetricsConsumer(MetricsConsumer):
    """Logs every data point to the ``squall.metrics2.LoggingMetricsConsumer`` logger at INFO, one
    tab-separated line each, as Storm's ``LoggingMetricsConsumer`` writes them to metrics.log:
    ``timestamp  host:port  task:component  name  value``."""

    logger = logging.getLogger("squall.metrics2.LoggingMetricsConsumer")

    def handle_data_points(self, task_info: TaskInfo, data_points: list[DataPoint]) -> None:
        header = (f"{task_info.timestamp}\t{task_info.src_worker_host:>15}:{task_info.src_worker_port:<4}\t"
                  f"{task_info.src_task_id:>3}:{task_info.src_component_id:<11}\t")
        for point in data_points:
            self.logger.info("%s%-30s\t%s", header, point.name, point.value)
