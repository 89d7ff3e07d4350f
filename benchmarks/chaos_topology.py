"""The chaos run's topology (benchmarks/chaos.py runs it with ``squall run``):

    StatefulKafkaSpout x2 --shuffle--> split x2 --fields(word)--> count x2 --shuffle--> KafkaBolt x2

The spout keeps its offsets in the checkpointed state; the count is examples/stateful_wordcount.py's
``RunningCount``, which emits ``(word, n)`` for the n-th ``word``; the sink is the exactly-once
``KafkaBolt``: each checkpoint epoch's records in one transaction, published once the checkpoint
commits. So a ``read_committed`` reader of the output must see each ``(word, n)`` once for n = 1 ..
(occurrences of ``word`` in the input), whatever the faults.

The broker and topics come from the environment: ``CHAOS_KAFKA`` (bootstrap servers),
``CHAOS_IN``, ``CHAOS_OUT``; the autoscaler's bounds from ``CHAOS_MAX_WORKERS``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
from stateful_wordcount import RunningCount, SplitLine  # noqa: E402 - the example's split and count

from squall import TopologyBuilder  # noqa: E402
from squall.connectors.kafka import KafkaBolt, KafkaRecord, KafkaSpoutConfig, StatefulKafkaSpout  # noqa: E402


def as_line(record: KafkaRecord) -> list[Any]:
    return [record.value]


def build(servers: str, source: str, sink: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("lines", StatefulKafkaSpout(KafkaSpoutConfig(servers, topics=[source], group_id="chaos",
                                                                   translator=as_line, output_fields=["line"])), 2)
    builder.set_bolt("split", SplitLine(), 2).set_num_tasks(4).shuffle_grouping("lines")
    builder.set_bolt("count", RunningCount(), 2).set_num_tasks(4).fields_grouping("split", ["word"])
    builder.set_bolt("sink", KafkaBolt(servers, sink, mapper=lambda t: (t.values[0], str(t.values[1])),
                                       exactly_once=True, marker_topic=f"{sink}.markers"), 2) \
        .set_num_tasks(4).shuffle_grouping("count")
    return builder.create_topology()


topology = build(os.environ.get("CHAOS_KAFKA", "127.0.0.1:9092"), os.environ.get("CHAOS_IN", "chaos-in"),
                 os.environ.get("CHAOS_OUT", "chaos-out"))

config = {
    "topology.workers": 2,
    "topology.state.checkpoint.interval.ms": 500,
    "topology.message.timeout.secs": 10,
    "worker.heartbeat.frequency.secs": 0.5,
    "supervisor.worker.timeout.secs": 4,
    "topology.autoscale.enabled": True,
    "topology.autoscale.max.workers": int(os.environ.get("CHAOS_MAX_WORKERS", "3")),
    "topology.autoscale.window.secs": 10,
    "topology.autoscale.cooldown.secs": 30,
}
