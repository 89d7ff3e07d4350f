"""Exactly-once output to a database: a sink of your own on the two-phase contract, here into
SQLite (Python's standard library). The template for a sink to any store with transactions.

    lines (stateful spout) --shuffle--> split --fields(word)--> count (stateful bolt)
        --shuffle--> rows (SQLiteSink: exactly once)

* ``count`` emits ``(word, count)``, ``count`` being n as it counts the n-th ``word``;
* ``rows`` is a :class:`~squall.WriteAheadSink`: each checkpoint epoch's rows are kept in its
  state and inserted once the checkpoint commits, in one SQLite transaction that also records
  the epoch (txid) as this task's last, so an epoch inserted before a crash is skipped after it.

Kill a worker with ``kill -9`` while it runs: the table still ends up with each ``(word, n)``
once. Rows appear a checkpoint interval (1 s) after their input.

    squall run examples/exactly_once_sqlite.py --duration 20
    python examples/exactly_once_sqlite.py          # what the table holds, top 10

The input is stateful_wordcount.py's; the database is $SQUALL_OUTPUT_DB (default
/tmp/squall-exactly-once.sqlite).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from squall import Config, TopologyBuilder, WriteAheadSink
from stateful_wordcount import FileSpout, RunningCount, SplitLine, default_input

DATABASE = os.environ.get("SQUALL_OUTPUT_DB", "/tmp/squall-exactly-once.sqlite")


class SQLiteSink(WriteAheadSink):
    """Inserts each input's ``columns`` as a row of ``table`` in the SQLite database at
    ``path``, exactly once. ``squall_epochs`` beside it holds each task's last inserted epoch."""

    def __init__(self, path: str, table: str, columns: list[str]) -> None:
        self.path, self.table, self.columns = path, table, list(columns)

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)  # the contract's own set-up first
        # transactions by hand; used by the executor's thread, which need not be this one
        self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute(f"CREATE TABLE IF NOT EXISTS {self.table} ({', '.join(self.columns)})")
        self.db.execute("CREATE TABLE IF NOT EXISTS squall_epochs (task TEXT PRIMARY KEY, txid INTEGER NOT NULL)")
        # unique per topology, component and task: the marker of this task's epochs
        self.task = f"{context.topology_name}/{context.get_this_component_id()}/{context.get_this_task_id()}"

    def record(self, tup: Any) -> list[Any]:
        return [tup.get_value_by_field(column) for column in self.columns]

    def publish(self, txid: int, records: list[Any]) -> None:
        self.db.execute("BEGIN IMMEDIATE")  # the write lock now: the check and the insert are one step
        try:
            done = self.db.execute("SELECT txid FROM squall_epochs WHERE task = ?", (self.task,)).fetchone()
            if done is None or done[0] < txid:
                marks = ", ".join("?" * len(self.columns))
                self.db.executemany(f"INSERT INTO {self.table} VALUES ({marks})", records)
                self.db.execute("INSERT OR REPLACE INTO squall_epochs VALUES (?, ?)", (self.task, txid))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise

    def cleanup(self) -> None:
        self.db.close()


def build(path: str, database: str) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("lines", FileSpout(path))
    builder.set_bolt("split", SplitLine(), 2).shuffle_grouping("lines")
    builder.set_bolt("count", RunningCount(), 2).fields_grouping("split", ["word"])
    builder.set_bolt("rows", SQLiteSink(database, "counts", ["word", "count"]), 2).shuffle_grouping("count")
    return builder.create_topology()


topology = build(default_input(), DATABASE)
config = Config().set_num_workers(2)

if __name__ == "__main__":
    with sqlite3.connect(DATABASE) as db:
        rows = db.execute("SELECT word, MAX(count), COUNT(*) FROM counts GROUP BY word ORDER BY 2 DESC").fetchall()
    print(f"{sum(r[2] for r in rows)} rows; each word's rows 1..n exactly once: {all(r[1] == r[2] for r in rows)}; "
          f"top 10: {[(w, n) for w, n, _ in rows[:10]]}")
