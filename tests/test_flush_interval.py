"""A batch waits at most ``topology.batch.flush.interval.millis`` before it is handed on.

A slow bolt takes a queueful of batches at once (its spout hands each tuple on alone:
``topology.producer.batch.size`` 1). What it emits while it works through them reaches the next
bolt within the interval, not at the end of the queueful; with a long interval, the first emit
waits for the whole queueful (a lower bound the sleeps guarantee).
"""

from __future__ import annotations

import time

import pytest

from squall import BasicBolt, Config, LocalCluster, Spout, TopologyBuilder
from squall.testing import wait_until

pytestmark = pytest.mark.timeout(60)

TUPLES = 40
EXECUTE_SECS = 0.005  # so the whole queueful takes 200 ms at least
ARRIVED: list[tuple[int, float, float]] = []  # (n, emitted at, executed downstream at)


class Burst(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        if self.n < TUPLES:
            self.collector.emit([self.n])
            self.n += 1


class Slow(BasicBolt):
    outputs = ["n", "at"]

    def execute(self, tup, collector):
        time.sleep(EXECUTE_SECS)
        collector.emit([tup["n"], time.perf_counter()])


class Arrival(BasicBolt):
    def execute(self, tup, collector):
        ARRIVED.append((tup["n"], tup["at"], time.perf_counter()))


def delays(flush_millis: float | None) -> list[float]:
    """How long each of Slow's emits waited before Arrival executed it."""
    ARRIVED.clear()
    builder = TopologyBuilder()
    builder.set_spout("burst", Burst())
    builder.set_bolt("slow", Slow()).shuffle_grouping("burst")
    builder.set_bolt("arrival", Arrival()).shuffle_grouping("slow")
    conf = Config()
    conf[Config.TOPOLOGY_PRODUCER_BATCH_SIZE] = 1
    if flush_millis is not None:
        conf[Config.TOPOLOGY_BATCH_FLUSH_INTERVAL_MILLIS] = flush_millis
    with LocalCluster() as cluster:
        cluster.submit_topology("flush", conf, builder.create_topology())
        wait_until(lambda: len(ARRIVED) == TUPLES, timeout=30, message="every emit arrived")
    assert [n for n, _, _ in ARRIVED] == list(range(TUPLES))
    return [arrived - emitted for _, emitted, arrived in ARRIVED]


def test_what_a_slow_bolt_emits_is_handed_on_within_the_interval():
    waited = delays(None)  # the default, 1 ms
    # each emit is handed on after the batch that made it; 0.1 s leaves room for a loaded machine
    # and is half of what a whole queueful takes
    assert max(waited) < 0.1, waited


def test_a_long_interval_lets_a_turn_hold_its_output():
    waited = delays(10_000)
    # the first emit waited for the rest of the queueful the bolt had taken
    assert waited[0] >= (TUPLES - 1) * EXECUTE_SECS * 0.9, waited[:3]


def test_the_interval_must_be_positive():
    builder = TopologyBuilder()
    builder.set_spout("burst", Burst())
    conf = Config()
    conf[Config.TOPOLOGY_BATCH_FLUSH_INTERVAL_MILLIS] = 0
    with LocalCluster() as cluster, pytest.raises(ValueError, match="topology.batch.flush.interval.millis"):
        cluster.submit_topology("flush", conf, builder.create_topology())
