"""Squall: Apache Storm's real-time computation model in Python.

Write spouts and bolts, join them with stream groupings into a topology — with a
``TopologyBuilder`` or declared as a ``Topology`` subclass — and run it with Storm's guarantees
(acking, timeouts, replay) on this machine or on a Spark cluster.
"""

from squall.compiled import install_source_finder

install_source_finder()  # before any other squall module is imported: it decides compiled or pure

from squall.bolt import BasicBolt, Bolt
from squall.collector import BasicOutputCollector, OutputCollector, SpoutOutputCollector
from squall.component import OutputFieldsDeclarer
from squall.config import Config
from squall.context import TopologyContext
from squall.dsl import Grouping, Topology
from squall.errors import (
    AlreadyAliveError, EmitError, FailedException, InvalidTopologyError, NotAliveError, SecurityError,
    SerializationError, TopologySetupError,
)
from squall.grouping import CustomStreamGrouping, GlobalStreamId
from squall.local_cluster import LocalCluster
from squall.multilang import ShellBolt, ShellSpout
from squall.spout import Spout
from squall.state import KeyValueState
from squall.stateful import IStatefulBolt, StatefulBolt, StatefulComponent, StatefulSpout
from squall.topology import StormTopology, TopologyBuilder
from squall.tuple import Fields, Tuple, Values
from squall.windowing import BaseWindowedBolt, Count, Duration, StatefulWindowedBolt, TupleWindow

__version__ = "0.1.0"

__all__ = [
    "AlreadyAliveError", "BaseWindowedBolt", "BasicBolt", "BasicOutputCollector", "Bolt", "Config", "Count",
    "CustomStreamGrouping", "Duration", "EmitError", "FailedException", "Fields", "GlobalStreamId", "Grouping",
    "IStatefulBolt", "InvalidTopologyError", "KeyValueState", "LocalCluster", "NotAliveError", "OutputCollector",
    "OutputFieldsDeclarer", "SecurityError", "SerializationError", "ShellBolt", "ShellSpout", "Spout",
    "SpoutOutputCollector", "StatefulBolt", "StatefulComponent", "StatefulSpout", "StatefulWindowedBolt",
    "StormTopology", "Topology", "TopologyBuilder", "TopologyContext", "TopologySetupError", "Tuple", "TupleWindow",
    "Values", "__version__",
]
