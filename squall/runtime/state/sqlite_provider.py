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

    topology.sqlite                          the claim (topology name, layout, key groups, each component's
                                             generation), the committed txid and its time
    tasks/<component>/g<gen>-<index>.sqlite  one task's store: its base, prepared delta, their txids and key groups

A task is found by its index among its component's tasks, in the component's current
*generation*. A changed task count (see :mod:`squall.api.state.key_groups`) writes the
component's state anew, dealt by key group, as the next generation; the claim's one write then
makes it current, and the files of other generations are removed. A location claimed before key
groups keeps ``tasks/<component>-<task id>.sqlite`` files and its layout.

One file per task, so that the workers' tasks never wait on each other's write lock, and a
task's prepare and commit are each one transaction of its own file, atomic and durable by
SQLite's write-ahead log (WAL). Every file is in WAL mode, where a transaction that commits
costs appends to the log and no fsync under NORMAL, and readers never block the writer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from squall.api.state.key_groups import DEFAULT_KEY_GROUPS
from squall.api.state.provider import (
    Commit, StateProvider, StateProviderError, TaskStore, check_key_groups, check_rescale, name_mismatch,
    prepared_is_committed, regroup,
)

log = logging.getLogger("squall.state")

# How long a transaction waits for another process's write lock on the same file before it
# fails; only topology.sqlite is shared (submit's check, the checkpoint spout's commits).
_BUSY_TIMEOUT_SECS = 5.0

_SYNCHRONOUS = ("NORMAL", "FULL")

_TOPOLOGY_SCHEMA = """
CREATE TABLE IF NOT EXISTS topology (
    id INTEGER PRIMARY KEY CHECK (id = 0),  -- one row: the location's claim
    name TEXT NOT NULL,
    layout TEXT NOT NULL                    -- JSON: stateful component id -> number of tasks
);
"""
# columns added since the first version: a location made before gets them on first use
_TOPOLOGY_COLUMNS = [
    ("topology", "committed", "INTEGER"),      # the committed txid; NULL before the first commit
    ("topology", "committed_at", "REAL"),      # when (epoch seconds); NULL before, or in older files
    ("topology", "key_groups", "INTEGER"),     # the stateful bolts' key groups; NULL: none
    ("topology", "generations", "TEXT"),       # JSON: component -> its files' generation; NULL: by task id
]

_TASK_SCHEMA = """
CREATE TABLE IF NOT EXISTS base (key BLOB PRIMARY KEY, value BLOB NOT NULL) WITHOUT ROWID;
-- the prepared delta, in the order written: the puts, then the deletes (value NULL). No key
-- index: the delta is written once and read whole, and appending rows is what is cheapest.
CREATE TABLE IF NOT EXISTS prepared (key BLOB NOT NULL, value BLOB);
CREATE TABLE IF NOT EXISTS txids (id INTEGER PRIMARY KEY CHECK (id = 0), base INTEGER, prepared INTEGER);
INSERT OR IGNORE INTO txids VALUES (0, NULL, NULL);
"""
# each entry's key group (NULL: none)
_TASK_COLUMNS = [("base", "key_group", "INTEGER"), ("prepared", "key_group", "INTEGER")]

_UNREAD = object()

# Connections a forked child inherited: SQLite forbids using them in the child, and closing one
# there could release locks the parent holds, so they are kept open (and unused) until exit.
_INHERITED: list[sqlite3.Connection] = []


class _Database:
    """One SQLite file, connected lazily by the process using it. The connection may pass
    from one thread to another (the callers use it from one thread at a time)."""

    def __init__(self, path: Path, schema: str, columns: list[tuple[str, str, str]], synchronous: str,
                 where: str) -> None:
        self._path = path
        self._schema = schema
        self._columns = columns  # (table, column, type): added to a file made without them
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
            for table, column, kind in self._columns:
                if column not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
                    conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
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


def _safe_name(component: str) -> str:
    """A file name that is safe on any filesystem and unique per component: its id lowercased
    with other characters than ``[a-z0-9_.-]`` replaced, plus a hash of the exact id when that
    changed it (so that "Count" and "count", "a/b" and "a_b" differ even where file names are
    case-insensitive)."""
    safe = re.sub(r"[^a-z0-9_.-]", "_", component.lower())[:64]
    if safe != component:
        safe += "~" + hashlib.sha256(component.encode()).hexdigest()[:16]
    return safe


# a task's file in its component's directory, and the WAL files beside it
_GENERATION_FILE = re.compile(r"g(\d+)-\d+\.sqlite(-wal|-shm)?")


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
        return {key: value for key, (value, _) in self.entries(committed).items()}

    def entries(self, committed: int | None) -> dict[bytes, tuple[bytes, int | None]]:
        """What :meth:`read` returns, each value with its key group."""
        # one read transaction: a snapshot, which the task's writes (if it runs) do not block
        with self._db.transaction("reading the state", write=False) as conn:
            rows = conn.execute("SELECT key, value, key_group FROM base")
            content = {key: (value, group) for key, value, group in rows}
            if prepared_is_committed(_prepared_txid(conn), committed):
                for key, value, group in conn.execute("SELECT key, value, key_group FROM prepared ORDER BY rowid"):
                    if value is None:
                        content.pop(key, None)
                    else:
                        content[key] = (value, group)
        return content

    def restore(self, committed: int | None, content: dict[bytes, tuple[bytes, int]]) -> None:
        """Make ``content`` the committed state of txid ``committed`` (a new generation's)."""
        with self._db.transaction("writing the state dealt to this task") as conn:
            conn.execute("DELETE FROM base")
            conn.execute("DELETE FROM prepared")
            conn.executemany("INSERT INTO base VALUES (?, ?, ?)", ((k, v, g) for k, (v, g) in content.items()))
            conn.execute("UPDATE txids SET base = ?, prepared = NULL", (committed,))

    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes],
                groups: dict[bytes, int] | None = None) -> None:
        groups = groups or {}
        with self._db.transaction(f"preparing txid {txid}") as conn:
            conn.execute("DELETE FROM prepared")
            conn.executemany("INSERT INTO prepared VALUES (?, ?, ?)",
                             ((key, value, groups.get(key)) for key, value in puts.items()))
            # after the puts: a key both put and deleted is deleted (as the in-memory provider's
            # fold does), by _fold and read both
            conn.executemany("INSERT INTO prepared VALUES (?, NULL, NULL)", ((key,) for key in deletes))
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
    conn.execute("INSERT OR REPLACE INTO base SELECT key, value, key_group FROM prepared WHERE value IS NOT NULL")
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
        self._topology = _Database(self._path / "topology.sqlite", _TOPOLOGY_SCHEMA, _TOPOLOGY_COLUMNS, synchronous,
                                   self._where)
        # component -> the generation of its files, read from the claim when first needed; None:
        # a location claimed before key groups (files by task id)
        self._generations: Any = _UNREAD

    @property
    def location(self) -> str:
        return str(self._path)

    def check(self, layout: dict[str, int]) -> None:
        self.claim(layout, DEFAULT_KEY_GROUPS)

    def claim(self, layout: dict[str, int], key_groups: int | None, allow_dropped: bool = False) -> int | None:
        with self._topology.transaction("claiming the location for this topology") as conn:
            row = conn.execute("SELECT name, layout, key_groups, generations, committed FROM topology").fetchone()
            if row is None:
                generations: dict[str, int] | None = dict.fromkeys(layout, 0)
                conn.execute("INSERT INTO topology (id, name, layout, key_groups, generations) VALUES (0, ?, ?, ?, ?)",
                             (self.topology_name, json.dumps(layout, sort_keys=True), key_groups,
                              json.dumps(generations, sort_keys=True)))
                claimed = key_groups
            elif row[0] != self.topology_name:
                raise StateProviderError(name_mismatch(self, row[0]))
            elif row[3] is None:  # claimed before key groups: by task id, its layout for good
                check_rescale(self, json.loads(row[1]), layout, None)
                generations, claimed = None, None
            else:
                found, generations, claimed, committed = json.loads(row[1]), json.loads(row[3]), row[2], row[4]
                check_key_groups(self, claimed, key_groups)
                changed, dropped = check_rescale(self, found, layout, claimed, allow_dropped)
                for component in changed:
                    generations[component] = self._rescale(component, found[component], layout[component],
                                                            generations[component], committed, claimed)
                added = [c for c in layout if c not in found]
                for component in added:  # empty: what a component dropped before left, if a crash did
                    self._remove_other_generations(component)
                    generations[component] = 0
                for component in dropped:
                    del generations[component]
                if changed or added or dropped:
                    conn.execute("UPDATE topology SET layout = ?, generations = ?",
                                 (json.dumps(layout, sort_keys=True), json.dumps(generations, sort_keys=True)))
                for component in dropped:  # its files go once the claim no longer names it
                    log.warning("%s: dropping the state of component %r, which topology %r no longer has "
                                "(topology.state.allow.dropped)", self._where, component, self.topology_name)
        self._generations = generations
        try:
            _make_dirs(self._path / "tasks")
            for component, generation in (generations or {}).items():
                self._remove_other_generations(component, generation)
            kept = {_safe_name(c) for c in generations} if generations is not None else None
            for entry in (self._path / "tasks").iterdir() if kept is not None else ():
                if entry.is_dir() and entry.name not in kept:
                    shutil.rmtree(entry)  # a dropped component's
        except OSError as e:
            raise StateProviderError(f"{self._where}: cannot prepare the tasks' directory: {e}") from e
        return claimed

    def _rescale(self, component: str, found: int, tasks: int, generation: int, committed: int | None,
                 key_groups: int) -> int:
        """Deal ``component``'s committed state, from ``found`` tasks of ``generation``, to
        ``tasks`` tasks of the next generation, which is returned (current once the claim says so)."""
        contents = []
        for index in range(found):
            store = self._store(component, generation, index)
            try:
                contents.append(store.entries(committed))
            finally:
                store.close()
        dealt = regroup(self, component, contents, tasks, key_groups)
        following = generation + 1
        self._remove_other_generations(component, generation, following)  # an attempt that crashed
        for index, content in enumerate(dealt):
            store = self._store(component, following, index)
            try:
                store.restore(committed, content)
            finally:
                store.close()
        return following

    def _remove_other_generations(self, component: str, *keep: int) -> None:
        """Remove the files of ``component``'s generations but ``keep`` (left by a rescale)."""
        directory = self._path / "tasks" / _safe_name(component)
        if directory.exists():
            for entry in directory.iterdir():
                match = _GENERATION_FILE.fullmatch(entry.name)
                if match is not None and int(match.group(1)) not in keep:
                    entry.unlink()

    def _store(self, component: str, generation: int | None, task: int) -> _SqliteTaskStore:
        """The store of task ``task`` (an index in ``generation``; an id without generations)."""
        if generation is None:
            path = self._path / "tasks" / f"{_safe_name(component)}-{task}.sqlite"
        else:
            path = self._path / "tasks" / _safe_name(component) / f"g{generation}-{task}.sqlite"
        return _SqliteTaskStore(_Database(path, _TASK_SCHEMA, _TASK_COLUMNS, self._synchronous,
                                          f"{self._where} (component {component!r} task {task})"))

    def task_store(self, component: str, task: int, index: int) -> TaskStore:
        if self._generations is _UNREAD:
            with self._topology.transaction("reading the claim", write=False) as conn:
                row = conn.execute("SELECT generations FROM topology").fetchone()
            self._generations = json.loads(row[0]) if row is not None and row[0] is not None else None
        generations = self._generations
        if generations is None:
            return self._store(component, None, task)
        if component not in generations:
            raise StateProviderError(f"{self._where}: it holds no state of component {component!r} (claimed for "
                                     f"{sorted(generations)})")
        return self._store(component, generations[component], index)

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
            conn.execute("UPDATE topology SET committed = ?, committed_at = ?", (txid, time.time()))

    def last_commit(self) -> Commit | None:
        if not (self._path / "topology.sqlite").exists():  # reading must not create the location
            return None
        with self._topology.transaction("reading the last commit", write=False) as conn:
            row = conn.execute("SELECT name, committed, committed_at FROM topology").fetchone()
        if row is None:
            return None
        if row[0] != self.topology_name:
            raise StateProviderError(name_mismatch(self, row[0]))
        return None if row[1] is None else Commit(row[1], row[2])

    def key_groups(self) -> int | None:
        if not (self._path / "topology.sqlite").exists():  # reading must not create the location
            return None
        with self._topology.transaction("reading the key groups", write=False) as conn:
            row = conn.execute("SELECT key_groups FROM topology").fetchone()
        return None if row is None else row[0]

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
