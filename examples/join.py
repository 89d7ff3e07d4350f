"""A streaming join with multi-anchoring and named streams (Storm's SingleJoinExample).

    genders (spout) --fields(id)--+
                                  +--> join --"adults"--> print
    ages    (spout) --fields(id)--+        --"minors"--> print

* Both spouts are reliable (message ids). ``join`` holds each half until the other half
  with the same id arrives, then emits the joined tuple **anchored to both inputs**: a
  person's two spout tuples are acked only when the joined tuple is processed, and
  failing it fails both.
* ``join`` declares two streams, ``adults`` and ``minors``; ``print`` subscribes to both
  and tells them apart by ``tup.source_stream_id``.

Run it:  squall run examples/join.py --duration 5
"""

from __future__ import annotations

import random

from squall import Bolt, Config, Spout, TopologyBuilder


class PersonFieldSpout(Spout):
    """Emits (id, <field>) for ids 0..count-1 in a shuffled order, reliably."""

    def __init__(self, field: str, count: int, make_value):
        self.field = field
        self.count = count
        self.make_value = make_value

    def declare_output_fields(self, declarer):
        declarer.declare(["id", self.field])

    def open(self, conf, context, collector):
        self.collector = collector
        self.todo = list(range(self.count))
        random.Random(self.field).shuffle(self.todo)

    def next_tuple(self):
        if self.todo:
            person = self.todo.pop()
            self.collector.emit([person, self.make_value(person)], msg_id=person)

    def fail(self, msg_id):
        self.todo.append(msg_id)  # replay

    def is_exhausted(self):
        return not self.todo


class JoinBolt(Bolt):
    """Joins the two halves of each person; the output is anchored to both."""

    streams = {"adults": ["id", "gender", "age"], "minors": ["id", "gender", "age"]}

    def declare_output_fields(self, declarer):
        for stream, fields in self.streams.items():
            declarer.declare_stream(stream, fields)

    def prepare(self, conf, context, collector):
        self.collector = collector
        self.halves: dict[int, object] = {}

    def execute(self, tup):
        other = self.halves.pop(tup["id"], None)
        if other is None:
            self.halves[tup["id"]] = tup
            return  # acked together with its partner
        gender_tup, age_tup = (tup, other) if "gender" in tup.fields else (other, tup)
        stream = "adults" if age_tup["age"] >= 18 else "minors"
        self.collector.emit([tup["id"], gender_tup["gender"], age_tup["age"]], anchors=[gender_tup, age_tup],
                            stream=stream)
        self.collector.ack(gender_tup)
        self.collector.ack(age_tup)


class PrintBolt(Bolt):
    def prepare(self, conf, context, collector):
        self.collector = collector

    def execute(self, tup):
        print(f"{tup.source_stream_id:>6}: person {tup['id']} is {tup['gender']}, {tup['age']}", flush=True)
        self.collector.ack(tup)


def gender(person: int) -> str:
    return "female" if person % 2 else "male"


def age(person: int) -> int:
    return 5 + (person * 7) % 60


def build(count: int = 20):
    builder = TopologyBuilder()
    builder.set_spout("genders", PersonFieldSpout("gender", count, gender))
    builder.set_spout("ages", PersonFieldSpout("age", count, age))
    builder.set_bolt("join", JoinBolt(), 2) \
        .fields_grouping("genders", ["id"]) \
        .fields_grouping("ages", ["id"])
    builder.set_bolt("print", PrintBolt()) \
        .shuffle_grouping("join", "adults") \
        .shuffle_grouping("join", "minors")
    return builder.create_topology()


topology = build()
config = Config().set_num_workers(2)
