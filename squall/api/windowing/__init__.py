"""Windowed bolts (Storm's windowing): a bolt that processes windows of tuples — the last n
tuples or the last span of time, sliding or tumbling, in processing time or event time — and
its stateful kind, whose windows are checkpointed.

Write a :class:`BaseWindowedBolt` (or :class:`StatefulWindowedBolt`), configure its window
with ``with_window(Count(n) | Duration(secs), sliding)`` and the other ``with_*`` methods, and
give it to ``TopologyBuilder.set_bolt`` as any bolt. See :mod:`squall.api.windowing.bolt` for the
contract, :mod:`squall.api.windowing.manager` for which tuples form each window, and
:mod:`squall.api.windowing.checks` for what is checked before the topology runs.
"""

from squall.api.windowing.bolt import BaseWindowedBolt, StatefulWindowedBolt, TupleWindow, WindowedOutputCollector
from squall.api.windowing.config import Count, Duration, WindowConfig

IWindowedBolt = BaseWindowedBolt
IStatefulWindowedBolt = StatefulWindowedBolt

__all__ = [
    "BaseWindowedBolt", "Count", "Duration", "IStatefulWindowedBolt", "IWindowedBolt", "StatefulWindowedBolt",
    "TupleWindow", "WindowConfig", "WindowedOutputCollector",
]
