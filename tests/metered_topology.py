"""A topology whose bolts register every kind of user metric (``Metered``), and a run of it
fed and acked, for the tests of the metrics and of the UI.

(Test modules import this, not each other.)"""

from __future__ import annotations

from helpers import feeder_builder
from squall import Bolt, Config, TopologyBuilder
from squall.testing import wait_until


class Metered(Bolt):
    """Per input: counter "processed" +1, timer "work" times the histogram "values" taking the
    input's value, meter "marks" +2; gauge "one" is 1 per task."""

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.processed = context.register_counter("processed")
        self.work = context.register_timer("work")
        self.values = context.register_histogram("values")
        self.marks = context.register_meter("marks")
        context.register_gauge("one", lambda: 1)
        # registering again (same type) gives the same object
        assert context.register_counter("processed") is self.processed
        assert context.get_registered_metric_by_name("work") is self.work

    def execute(self, tup):
        self.processed.inc()
        with self.work.time():
            self.values.update(tup.values[0])
        self.marks.mark(2)
        self.collector.ack(tup)


def metered_topology(feeder_or_spout, metered_par=2, metered_tasks=4):
    b = TopologyBuilder()
    b.set_spout("spout", feeder_or_spout)
    b.set_bolt("metered", Metered(), metered_par).set_num_tasks(metered_tasks).shuffle_grouping("spout")
    b.set_bolt("single", Metered()).shuffle_grouping("spout")
    return b.create_topology()


def run_metered(cluster, n: int, conf: dict | None = None) -> None:
    """Submit the metered topology as "t", feed it 1..n and wait until each is acked."""
    feeder, _ = feeder_builder()
    cluster.submit_topology("t", conf or Config(), metered_topology(feeder))
    for v in range(1, n + 1):
        feeder.feed([v], msg_id=v)
    wait_until(lambda: len(feeder.acked) == n, message="every tuple acked")
