"""Squall: Apache Storm's real-time computation model in Python.

Write spouts and bolts, join them with stream groupings into a topology — with a
``TopologyBuilder`` or declared as a ``Topology`` subclass — and run it with Storm's guarantees
(acking, timeouts, replay) on this machine or on a Spark cluster.

The names below load on first use (PEP 562): ``import squall.api.tuple`` or ``from squall import
Bolt`` loads no daemon, transport or cluster; ``from squall import LocalCluster`` does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from squall.compiled import install_source_finder
from squall.moved import install_moved_finder

install_source_finder()  # before any other squall module is imported: it decides compiled or pure
install_moved_finder()  # the paths modules had before the layers (configs and pickles name them)

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(["BasicBolt", "Bolt"], "squall.api.bolt"),
    **dict.fromkeys(["BasicOutputCollector", "OutputCollector", "SpoutOutputCollector"], "squall.runtime.executor.collector"),
    "OutputFieldsDeclarer": "squall.api.component",
    "Config": "squall.api.config",
    "TopologyContext": "squall.api.context",
    **dict.fromkeys(["Grouping", "Topology"], "squall.api.dsl"),
    **dict.fromkeys(["AlreadyAliveError", "EmitError", "FailedException", "InvalidTopologyError", "NotAliveError",
                     "SecurityError", "SerializationError", "TopologySetupError"], "squall.api.errors"),
    **dict.fromkeys(["CustomStreamGrouping", "GlobalStreamId"], "squall.api.grouping"),
    "LocalCluster": "squall.cluster.local_cluster",
    **dict.fromkeys(["ShellBolt", "ShellSpout"], "squall.multilang"),
    "Spout": "squall.api.spout",
    "KeyValueState": "squall.api.state",
    **dict.fromkeys(["IStatefulBolt", "StatefulBolt", "StatefulComponent", "StatefulSpout"], "squall.api.stateful"),
    "StormTopology": "squall.api.storm_topology",
    "TopologyBuilder": "squall.api.topology",
    **dict.fromkeys(["Fields", "Tuple", "Values"], "squall.api.tuple"),
    **dict.fromkeys(["TwoPhaseCommitSink", "WriteAheadSink"], "squall.api.two_phase_commit"),
    **dict.fromkeys(["BaseWindowedBolt", "Count", "Duration", "StatefulWindowedBolt", "TupleWindow"],
                    "squall.api.windowing"),
}

__all__ = [
    "AlreadyAliveError", "BaseWindowedBolt", "BasicBolt", "BasicOutputCollector", "Bolt", "Config", "Count",
    "CustomStreamGrouping", "Duration", "EmitError", "FailedException", "Fields", "GlobalStreamId", "Grouping",
    "IStatefulBolt", "InvalidTopologyError", "KeyValueState", "LocalCluster", "NotAliveError", "OutputCollector",
    "OutputFieldsDeclarer", "SecurityError", "SerializationError", "ShellBolt", "ShellSpout", "Spout",
    "SpoutOutputCollector", "StatefulBolt", "StatefulComponent", "StatefulSpout", "StatefulWindowedBolt",
    "StormTopology", "Topology", "TopologyBuilder", "TopologyContext", "TopologySetupError", "Tuple", "TupleWindow",
    "TwoPhaseCommitSink", "Values", "WriteAheadSink", "__version__",
]

# what type checkers and IDEs see; tests/test_api.py checks that it, __all__ and _EXPORTS agree
if TYPE_CHECKING:
    from squall.api.bolt import BasicBolt, Bolt
    from squall.api.component import OutputFieldsDeclarer
    from squall.api.config import Config
    from squall.api.context import TopologyContext
    from squall.api.dsl import Grouping, Topology
    from squall.api.errors import (
        AlreadyAliveError, EmitError, FailedException, InvalidTopologyError, NotAliveError, SecurityError,
        SerializationError, TopologySetupError,
    )
    from squall.api.grouping import CustomStreamGrouping, GlobalStreamId
    from squall.api.spout import Spout
    from squall.api.state import KeyValueState
    from squall.api.stateful import IStatefulBolt, StatefulBolt, StatefulComponent, StatefulSpout
    from squall.api.storm_topology import StormTopology
    from squall.api.topology import TopologyBuilder
    from squall.api.tuple import Fields, Tuple, Values
    from squall.api.two_phase_commit import TwoPhaseCommitSink, WriteAheadSink
    from squall.api.windowing import BaseWindowedBolt, Count, Duration, StatefulWindowedBolt, TupleWindow
    from squall.cluster.local_cluster import LocalCluster
    from squall.multilang import ShellBolt, ShellSpout
    from squall.runtime.executor.collector import BasicOutputCollector, OutputCollector, SpoutOutputCollector


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'squall' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # the next access is a plain lookup
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
