"""Checkpoints behind a backlog: a stateful spout emits without message ids, so
``topology.max.spout.pending`` does not bound it, and with all its input waiting it used to push
the whole backlog into the queues; every checkpoint barrier then waited behind it, and with a
slow count no checkpoint committed until the backlog drained (or the barriers timed out and
rolled back). A stateful spout's records in flight are bounded now (about
``topology.state.spout.inflight.ms`` of downstream throughput), so checkpoints keep committing
while a slow count drains a backlog.

Progress is asserted with generous deadlines, never speed: how soon and how often commits come
is measured by ``benchmarks/checkpoint_backlog.py``.
"""

from __future__ import annotations

import os
import random
import sys
import time
from collections import Counter

import pytest

from squall import LocalCluster, TopologyBuilder
from squall.api.system_ids import CHECKPOINT_COMPONENT
from squall.connectors.files import StatefulDirectorySpout
from squall.testing import committed_state, wait_until
from directory_spouts import dirs, write
from wordcount_state import counts_of

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
import stateful_wordcount as swc  # noqa: E402 - the example's components; workers import it too

# one word a record (a record is one input of the count), counted at 400 records/s: ~15 s of the
# count's work, all waiting at submit. The spout reads up to 100 records (its records_per_call) per
# next_tuple, ~250 ms of that work, so a bound checked between calls keeps about as much in flight.
RECORDS = 6000
SECS_PER_RECORD = 0.0025


class SlowCount(swc.WordCount):
    """The example's count, sleeping before each word (a slow store); ``metrics["counted"]`` says
    how far it got."""

    def prepare(self, conf, context, collector) -> None:
        super().prepare(conf, context, collector)
        self.metrics = {"counted": 0}

    def execute(self, tup) -> None:
        time.sleep(SECS_PER_RECORD)  # the slow store (the component's behaviour), not a wait
        super().execute(tup)
        self.metrics["counted"] += 1


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_checkpoints_keep_committing_while_a_slow_count_drains_a_backlog(tmp_path):
    src, kw = dirs(tmp_path)
    rng = random.Random(7)
    records = [rng.choice(swc.WORDS) for _ in range(RECORDS)]
    write(src / "words.txt", records)  # the whole input there before submit
    expected, size = Counter(records), os.path.getsize(src / "words.txt")
    builder = TopologyBuilder()
    builder.set_spout("lines", StatefulDirectorySpout(str(src), **kw))
    builder.set_bolt("split", swc.SplitLine(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", SlowCount()).fields_grouping("split", ["word"])
    topology = builder.create_topology()
    # a barrier stuck behind the backlog (~15 s) times out, and its checkpoint fails
    conf = {"topology.workers": 2, "topology.state.checkpoint.interval.ms": 300, "topology.message.timeout.secs": 10,
            "worker.heartbeat.frequency.secs": 0.1, "topology.state.provider": "sqlite",
            "topology.state.provider.config": {"path": str(tmp_path / "state")}}

    def committed_offset() -> int:
        return sum(s.get("offset", 0) for s in committed_state("backlog", topology, "lines", conf).values())

    positions: list[int] = []  # the committed read positions, each past the one before

    with LocalCluster(processes=True) as cluster:
        cluster.submit_topology("backlog", conf, topology)

        def three_commits_or_half_counted() -> bool:
            offset = committed_offset()
            if offset > (positions[-1] if positions else 0):
                positions.append(offset)
            count = cluster.get_topology_info("backlog")["components"]["count"]
            return len(positions) >= 3 or count.get("metrics", {}).get("counted", 0) >= RECORDS / 2

        wait_until(three_commits_or_half_counted, timeout=60, interval=0.05,
                   message="three commits, or half of the records counted")
        assert len(positions) >= 3 and positions[-1] < size, (
            f"checkpoints stalled behind the backlog: before half of the {RECORDS} records were counted, the committed "
            f"read position advanced {len(positions)} time(s) {positions} (of {size} bytes)")
        wait_until(lambda: committed_offset() == size, timeout=60, interval=0.1, message="the whole file committed")
        components = cluster.get_topology_info("backlog")["components"]
    assert counts_of("backlog", topology, conf) == expected
    # every barrier's tree completed: none timed out, so no INITSTATE or ROLLBACK was sent again
    assert components[CHECKPOINT_COMPONENT]["failed"] == 0
    assert {cid: c["errors"] for cid, c in components.items() if c["errors"]} == {}
