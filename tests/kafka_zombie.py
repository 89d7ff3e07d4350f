"""A zombie exactly-once Kafka sink, as a process of its own (run by
tests/test_kafka_exactly_once_broker.py): it writes one epoch, its checkpoint commits, and as
it publishes the epoch it stops itself (SIGSTOP) after its records were sent and before its
transaction commits — a worker paused past its timeout. The test replaces it, then continues it
(SIGCONT); it prints how its commit ended and exits.

    python kafka_zombie.py SERVERS TOPIC STATE_DIR NAME
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from squall.api.state.provider import provider_for
from squall.connectors.kafka import KafkaBolt, KafkaConnectorError
from squall.testing import BoltHarness

LAYOUT = {"bolt": 1}  # the harness's sink: component "bolt", one task


def sink(servers: str, topic: str, state_dir: str, name: str) -> BoltHarness:
    """The sink's task of topology ``name`` (state in SQLite under ``state_dir``), started as after
    a (re)start: the recovery barrier played."""
    conf = {"topology.state.provider": "sqlite", "topology.state.provider.config": {"path": state_dir}}
    provider = provider_for(conf, name)
    provider.check(LAYOUT)  # what a submit does first
    provider.close()
    bolt = KafkaBolt(servers, topic, mapper=lambda t: (t.values[0], t.values[1]), exactly_once=True,
                     marker_topic=f"{topic}.markers")
    h = BoltHarness(bolt, {"count": ["key", "message"]}, conf=conf, name=name)
    h.rollback()
    return h


class StopBeforeCommit:
    """The sink's producer, stopping its process once its records are sent, before the commit."""

    def __init__(self, producer: Any) -> None:
        self._producer = producer

    def commit_transaction(self, *args: Any) -> None:
        self._producer.flush()  # the epoch's records are in the broker's log, uncommitted
        os.kill(os.getpid(), signal.SIGSTOP)
        self._producer.commit_transaction(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)


def main(servers: str, topic: str, state_dir: str, name: str) -> None:
    h = sink(servers, topic, state_dir, name)
    for word in ("zombie-a", "zombie-b"):
        h.feed([word, "1"], tracked=False)
    h.bolt._producer = StopBeforeCommit(h.bolt._producer)
    try:
        h.checkpoint()
    except KafkaConnectorError as e:
        print(f"refused: {e}", flush=True)
        return
    print("committed", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
