"""Storm's metrics v2 in snake_case: user metrics a task registers on its
:class:`~squall.TopologyContext` (``register_counter``, ``register_gauge``,
``register_histogram``, ``register_meter``, ``register_timer``), reported per task and per
component in ``get_topology_info``, handed to metrics consumers
(``topology.metrics.consumer.register``) and exposed to Prometheus
(:mod:`squall.ops.prometheus`)."""

from squall.api.metrics2.consumer import ConsumerContext, DataPoint, LoggingMetricsConsumer, MetricsConsumer, TaskInfo
from squall.api.metrics2.metrics import Counter, Gauge, Histogram, Meter, Metric, Timer, TimerContext
from squall.api.metrics2.registry import MetricRegistry

__all__ = [
    "ConsumerContext", "Counter", "DataPoint", "Gauge", "Histogram", "LoggingMetricsConsumer", "Meter", "Metric",
    "MetricRegistry", "MetricsConsumer", "TaskInfo", "Timer", "TimerContext",
]
