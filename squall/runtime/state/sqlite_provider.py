"""The SQLite state provider: a topology's state in a directory of this machine (the default
durable provider; Python's own ``sqlite3``, nothing to install or run).

``topology.state.provider.config``:

* ``path`` (required): the state's directory, created if needed. Every worker of the topology
  must see it at that path (one machine, or a shared local-disk mount; not NFS, where SQLite's
  locks and WAL do not work). A relative path is relative to each process's working directory.
* ``synchronous``: ``"NORMAL"`` (the default) or ``"FULL"``. With NORMAL, what a method wrote
  when it returns survives the crash of any process (kill -9 included) but not a power loss or
  an OS crash; FULL survives those too, at the cost of an fsync per write.

Layout of ``path``::

    topology.sqlite                        the claim (topology name, layout), the committed txid and its time
    tasks/<component>-<task>.sqlite        one task's store: its base, prepared delta and their txids

One file per task, so that the workers' tasks never wait on each other's write lock, and a
task's prepare and commit are each one transaction of its own file, atomic and durable by
SQLite's write-ahead log (WAL). Every file is in WAL mode, where a transaction that commits
costs appends to the log and no fsync under NORMAL, and readers never block the writer.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from squall.api.state.provider import (
    Commit, StateProvider, StateProviderError, TaskStore, name_mismatch, prepared_is_committed, verify_claim,
)

# How long a transaction waits for another process's write lock on the same file before it
# fails; only topology.sqlite is shared (submit's check, the checkpoint spout's commits).
_BUSY_TIMEOUT_SECS = 5.0

_SYNCHRONOUS = ("NORMAL", "FULL")

_TOPOLOGY_SCHEMA = """
CREATE TABLE IF NOT EXISTS topology (
    id INTEGER PRIMARY KEY CHECK (id = 0),  -- one row: the location's claim
    name TEXT NOT NULL,
    layout TEXT NOT NULL,                   -- JSON: stateful component id -> number of tasks
    committed INTEGER,                      -- the committed txid; NULL before the first commit
    committed_at REAL                       -- when (epoch seconds); NULL before, or in older files
);
"""
# a location made before committed_at existed gets it on first use
_ADD_COMMITTED_AT = "ALTER TABLE topology ADD COLUMN committed_at REAL"

_TASK_SCHEMA = """
CREATE TABLE IF NOT EXISTS base (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
-- the prepared delta, in the order written: the puts, then the deletes (value NULL). No key
-- index: the delta is written once and read whole, and appending rows is what is cheapest.
CREATE TABLE IF NOT EXISTS prepared (key BLOB NOT NULL, value BLOB);
CREATE TABLE IF NOT EXISTS txids (id INTEGER PRIMARY KEY CHECK (id = 0), base INTEGER, prepared INTEGER);
INSERT OR IGNORE INTO txids VALUES (0, NULL, NULL);
"""

# Connections a forked child inherited: SQLite forbids using them in the child, and closing one
# there could release locks the parent holds, so they are kept open (and unused) until exit.
_INHERITED: list[sqlite3.Connection] = []


class _Database:
    """One SQLite file, connected lazily by the process using it. The connection may pass
    from one thread to another (the callers use it from one thread at a time)."""

    def __init__(self, path: Path, schema: str, synchronous: str, where: str) -> None:
        self._path = path
        self._schema = schema
        self._synchronous = synchronous
        self.where = where  # "state provider 'sqlite' at /dir", for messages
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    @contextmanager
    def transaction(self, what: str, write: bool = True) -> Iterator[sqlite3.Connection]:
        """A transaction, committed when the block ends and rolled back if it raises. A write
        transaction takes the file's write lock at once (BEGIN IMMEDIATE): taking it later, on
        the first write, could fail with "database is locked" without waiting. SQLite and OS
        errors become :class:`StateProviderError` saying ``what`` failed."""
        try:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.rollback()
                raise
        except (sqlite3.Error, OSError) as e:
            raise StateProviderError(f"{self.where}: {what} failed: {e}") from e

    def _connection(self) -> sqlite3.Connection:
        pid = os.getpid()
        if self._conn is not None and self._pid == pid:
            return self._conn
        self.close()
        created = not self._path.exists()
        _make_dirs(self._path.parent)
        conn = sqlite3.connect(self._path, timeout=_BUSY_TIMEOUT_SECS, isolation_level=None,
                               check_same_thread=False)
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode != "wal":
                raise StateProviderError(f"{self.where}: {self._path} cannot be put in WAL mode (it stays in {mode!r})")
            conn.execute(f"PRAGMA synchronous={self._synchronous}")
            conn.executescript(self._schema)
        except BaseException:
            conn.close()
            raise
        if created:
            _sync_dir(self._path.parent)
        self._conn, self._pid = conn, pid
        return conn

    def close(self) -> None:
        if self._conn is not None:
            if self._pid == os.getpid():
                self._conn.close()
            else:
                _INHERITED.append(self._conn)
        self._conn = None


def _make_dirs(path: Path) -> None:
    """``mkdir -p``, syncing each new directory's entry into its parent: the files below
    would not survive a power loss without it (FULL's promise); it costs once per directory."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for directory in reversed(missing):
        directory.mkdir(exist_ok=True)
        _sync_dir(directory.parent)


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _task_file_name(component: str, task: int) -> str:
    """A file name that is safe on any filesystem and unique per (component, task): the
    component id lowercased with other characters than ``[a-z0-9_.-]`` replaced, plus a hash
    of the exact id when that changed it (so that "Count" and "count", "a/b" and "a_b" differ
    even where file names are case-insensitive). The task id, last, cannot contain a "-"."""
    safe = re.sub(r"[^a-z0-9_.-]", "_", component.lower())[:64]
    if safe != component:
        safe += "~" + hashlib.sha256(component.encode()).hexdigest()[:16]
    return f"{safe}-{task}.sqlite"


class _SqliteTaskStore(TaskStore):
    """A task's store: its own SQLite file, whose prepare, commit, load and read are
    one transaction each."""

    def __init__(self, db: _Database) -> None:
        self._db = db

    def load(self, committed: int | None) -> dict[bytes, bytes]:
        with self._db.transaction("loading the state") as conn:
            prepared = _prepared_txid(conn)
            if prepared_is_committed(prepared, committed):
                _fold(conn, prepared)
            return dict(conn.execute("SELECT key, value FROM base"))

    def read(self, committed: int | None) -> dict[bytes, bytes]:
        # one read transaction: a snapshot, which the task's writes (if it runs) do not block
        with self._db.transaction("reading the state", write=False) as conn:
            content = dict(conn.execute("SELECT key, value FROM base"))
            if prepared_is_committed(_prepared_txid(conn), committed):
                for key, value in conn.execute("SELECT key, value FROM prepared ORDER BY rowid"):
                    if value is None:
                        content.pop(key, None)
                    else:
                        content[key] = value
        return content

    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes]) -> None:
        with self._db.transaction(f"preparing txid {txid}") as conn:
            conn.execute("DELETE FROM prepared")
            conn.executemany("INSERT INTO prepared VALUES (?, ?)", puts.items())
            # after the puts: a key both put and deleted is deleted (as the in-memory provider's
            # fold does), by _fold and read both
            conn.executemany("INSERT INTO prepared VALUES (?, NULL)", ((key,) for key in deletes))
            conn.execute("UPDATE txids SET prepared = ?", (txid,))

    def commit(self, txid: int) -> None:
        with self._db.transaction(f"committing txid {txid}") as conn:
            if _prepared_txid(conn) == txid:
                _fold(conn, txid)

    def close(self) -> None:
        self._db.close()


def _prepared_txid(conn: sqlite3.Connection) -> int | None:
    return conn.execute("SELECT prepared FROM txids").fetchone()[0]


def _fold(conn: sqlite3.Connection, txid: int) -> None:
    """Fold the prepared delta (of ``txid``) into the base, within the caller's transaction."""
    conn.execute("INSERT OR REPLACE INTO base SELECT key, value FROM prepared WHERE value IS NOT NULL")
    conn.execute("DELETE FROM base WHERE key IN (SELECT key FROM prepared WHERE value IS NULL)")
    conn.execute("DELETE FROM prepared")
    conn.execute("UPDATE txids SET base = ?, prepared = NULL", (txid,))


class SqliteStateProvider(StateProvider):
    """Durable state in a local directory (see the module's documentation for the config
    and the files)."""

    name = "sqlite"

    def __init__(self, topology_name: str, config: dict[str, Any]) -> None:
        super().__init__(topology_name, config)
        path = config.get("path")
        if not path:
            raise StateProviderError(
                "state provider 'sqlite' needs a directory for the state: set topology.state.provider.config "
                "to {'path': '/some/dir'}"
            )
        synchronous = str(config.get("synchronous", "NORMAL")).upper()
        if synchronous not in _SYNCHRONOUS:
            raise StateProviderError(
                f"state provider 'sqlite': synchronous = {config['synchronous']!r}; use 'NORMAL' (survives the crash "
                "of any process) or 'FULL' (also survives a power loss)"
            )
        self._path = Path(path).expanduser().absolute()
        self._synchronous = synchronous
        self._where = f"state provider {self.name!r} at {self._path}"
        self._topology = _Database(self._path / "topology.sqlite", _TOPOLOGY_SCHEMA, synchronous, self._where)

    @property
    def location(self) -> str:
        return str(self._path)

    def check(self, layout: dict[str, int]) -> None:
        with self._topology.transaction("claiming the location for this topology") as conn:
            row = conn.execute("SELECT name, layout FROM topology").fetchone()
            if row is None:
                conn.execute("INSERT INTO topology (id, name, layout) VALUES (0, ?, ?)",
                             (self.topology_name, json.dumps(layout, sort_keys=True)))
            else:
                verify_claim(self, row[0], json.loads(row[1]), layout)
        try:
            _make_dirs(self._path / "tasks")
        except OSError as e:
            raise StateProviderError(f"{self._where}: cannot create the tasks' directory: {e}") from e

    def task_store(self, component: str, task: int) -> TaskStore:
        path = self._path / "tasks" / _task_file_name(component, task)
        return _SqliteTaskStore(
            _Database(path, _TASK_SCHEMA, self._synchronous, f"{self._where} (component {component!r} task {task})")
        )

    def committed(self) -> int | None:
        with self._topology.transaction("reading the committed txid", write=False) as conn:
            row = conn.execute("SELECT name, committed FROM topology").fetchone()
        found = None if row is None else row[0]
        if found != self.topology_name:
            raise StateProviderError(name_mismatch(self, found))
        return row[1]

    def set_committed(self, txid: int) -> None:
        with self._topology.transaction(f"committing txid {txid}") as conn:
            row = conn.execute("SELECT name FROM topology").fetchone()
            found = row[0] if row else None
            if found != self.topology_name:
                raise StateProviderError(name_mismatch(self, found))
            try:
                conn.execute("UPDATE topology SET committed = ?, committed_at = ?", (txid, time.time()))
            except sqlite3.OperationalError:  # an older location: no committed_at yet
                conn.execute(_ADD_COMMITTED_AT)
                conn.execute("UPDATE topology SET committed = ?, committed_at = ?", (txid, time.time()))

    def last_commit(self) -> Commit | None:
        if not (self._path / "topology.sqlite").exists():  # reading must not create the location
            return None
        with self._topology.transaction("reading the last commit", write=False) as conn:
            try:
                row = conn.execute("SELECT name, committed, committed_at FROM topology").fetchone()
            except sqlite3.OperationalError:  # an older location: no committed_at
                row = conn.execute("SELECT name, committed, NULL FROM topology").fetchone()
        if row is None:
            return None
        if row[0] != self.topology_name:
            raise StateProviderError(name_mismatch(self, row[0]))
        return None if row[1] is None else Commit(row[1], row[2])

    def drop(self) -> None:
        if not (self._path / "topology.sqlite").exists():
            return
        self.last_commit()  # raises if the location is another topology's
        self._topology.close()
        try:
            if (self._path / "tasks").exists():
                shutil.rmtree(self._path / "tasks")
            for suffix in ("", "-wal", "-shm"):
                (self._path / f"topology.sqlite{suffix}").unlink(missing_ok=True)
        except OSError as e:
            raise StateProviderError(f"{self._where}: cannot drop the state: {e}") from e

    def close(self) -> None:
        self._topology.close()
