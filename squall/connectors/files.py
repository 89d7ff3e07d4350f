"""Files: a spout that consumes a directory (Storm's ``HdfsSpout``), its stateful form (its
position in the topology's checkpoints: effectively once) and a bolt that writes rotated files
(Storm's ``HdfsBolt``), on a local or mounted path.

:class:`DirectorySpout` contract
--------------------------------

* **Claiming.** A task works on one file at a time. It claims a file by creating
  ``<lock_dir>/<name>.lock`` with ``O_CREAT|O_EXCL``, so several tasks (and topologies) can
  share one directory: a file is read by the task holding its lock. Names starting with ``.``
  or ending with ``ignore_suffix`` (``.ignore``: files still being written) are skipped; drop
  files in complete (write elsewhere, then rename into ``source_dir``).
* **Emitting.** Each record is emitted with ``msg_id = (file name, byte offset of the
  record)``: reliable. ``text`` emits ``[line]`` (newline stripped), ``jsonl`` emits
  ``[record]`` (a dict; blank lines skipped), ``csv`` emits ``fields`` (taken from the header
  by name, or by position without a header) or ``[record]`` (a dict keyed by the header).
  At most ``records_per_call`` records are read per ``next_tuple`` (it never blocks), and none
  while ``max_outstanding`` (Storm's ``hdfsspout.max.outstanding``, 10000) are pending.
* **Acking.** ``fail(msg_id)`` re-emits that record (kept in memory while pending). The file
  is moved to ``archive_dir`` (and its lock removed) only when it was read to the end and
  every tuple from it was acked; until then the task reads no other file.
* **Committing.** The lock file is appended a JSON line ``{"owner", "task", "offset",
  "time"}`` every ``commit_frequency_count`` acks or ``commit_frequency_secs`` seconds (and at
  least every ``lock_timeout_secs / 3`` as a heartbeat). ``offset`` is the start of the lowest
  un-acked record (everything before it is acked), never beyond it.
* **Crash.** If a task dies (``kill -9``), its lock stops being heartbeated: after
  ``lock_timeout_secs`` (Storm's ``hdfsspout.lock.timeout.sec``, 60) any task takes it over,
  and the task that restarts with the same topology/component/task id takes it over at once.
  Reading resumes at the committed offset: records after it may be emitted twice,
  none is lost (at-least-once). The takeover itself is guarded by ``<name>.lock.takeover``
  (``O_EXCL``); a task that finds its lock taken over drops the file without archiving it.
  A task deactivated for longer than ``lock_timeout_secs`` loses its file the same way.
  A lock written by a :class:`StatefulDirectorySpout` (its entries say ``"stateful": true``)
  is never taken over by age: only the task whose checkpoints hold its position goes on.
* **Bad files.** A file that cannot be decoded (bad UTF-8, a bad JSON line, a CSV row that
  does not fit) is moved to ``bad_dir`` as a whole, as Storm does, with ``<name>.error``
  beside it giving the reason; the error is logged with the file name and reported as an
  error of the component. Tuples of it still pending are forgotten (their acks are ignored).
* A ``source_dir`` that does not exist makes ``open`` raise ``FileNotFoundError`` naming it.

:class:`StatefulDirectorySpout` contract
----------------------------------------

The same spout (options, readers, claiming, bad files, metrics) as a
:class:`~squall.api.stateful.StatefulSpout`: its read position is part of the topology's
checkpoints, so with stateful bolts downstream the committed state counts every record of
every file exactly once (*effectively once*), across ``kill -9`` of any worker and a
resubmission under the same name. Like any stateful topology it needs ackers and checkpoints
(``topology.state.checkpoint.interval.ms`` below ``topology.message.timeout.secs``, a
durable ``topology.state.provider`` for worker processes). Bolts that are not stateful see the
records after the last commit again after a rollback.

* **The checkpoint.** Each task's state holds ``file`` (the file it reads, or None),
  ``offset`` (the byte offset of its next record) and ``ended`` (``{name: None | reason}``:
  files read to their end, or up to a record that cannot be decoded, not yet moved).
* **Emitting.** Records are emitted without message ids (``fail`` never replays): a rollback
  returns every task to the last commit and :meth:`~StatefulDirectorySpout.init_state` seeks
  back to the ``offset`` committed with the bolts' state.
* **Archiving.** A file read to its end moves into ``ended`` and keeps its lock (no task
  claims it again); the task reads its next file meanwhile. The file moves to ``archive_dir``
  in ``pre_commit`` of the first checkpoint whose state has it in ``ended``: the checkpoint
  spout records the commit before it sends COMMIT, so no rollback can return to a state that
  still reads it. A bad file moves to ``bad_dir`` (with ``<name>.error``) the same way, at that
  commit: the records before the bad one are emitted, once, as by :class:`DirectorySpout`.
* **Rollback and restart.** ``init_state`` (at start and after every rollback) gets the
  committed state: it moves the files in its ``ended`` still in ``source_dir``, removes this
  task's locks of files not in its state (what was read of them was rolled back: they are read
  again from their start, by any task), and reopens ``file`` at ``offset``, taking its lock
  back at once from the earlier run of this task that held it (a restarted worker).
* **Locks** are never taken over by age (see *Crash* above), so a task's files wait for that
  task (its topology resubmitted under the same name resumes them). To give its files to
  other tasks for good, remove the topology's state and the locks.

:class:`FileBolt` contract
--------------------------

* Each input is written to ``<output_dir>/<prefix><component>-<task>-<n>-<millis><ext>.tmp``;
  the file is renamed without ``.tmp`` when it is rotated or at ``cleanup``: a reader that
  skips ``.tmp`` files sees complete files only.
* ``jsonl`` writes one JSON object (``{field: value}``) per line, ``csv`` one row per tuple
  (header once per file), ``parquet`` one row group per sync (pyarrow; extra ``parquet``).
* **Acking.** jsonl/csv inputs are acked when synced: every ``sync_every`` tuples or
  ``sync_secs`` seconds (tick tuples), and (``sync_on_idle``, the default) whenever the bolt
  has executed all the input that had arrived (a group commit: its spouts may be held back
  by ``topology.max.spout.pending`` until these acks come, and then no more input arrives);
  the file is flushed and ``os.fsync``-ed, then the buffered inputs are acked. A Parquet
  file is readable only once closed (its footer), so parquet inputs are acked when their
  file is rotated or closed: give it a rotation shorter than ``topology.message.timeout.secs``.
* **Failing.** An input that cannot be written (not JSON-serializable, a value CSV/Parquet
  cannot hold, a missing field) is failed with ``report_error`` naming the component and the
  reason; a write or sync error fails every input not yet synced.
* **Crash.** Inputs not yet synced were not acked: they are replayed. A ``.tmp`` file this
  task left behind is completed at the next ``prepare`` (jsonl/csv: up to its last whole line;
  parquet: unreadable without its footer, so removed - its inputs were never acked).

Both keep counters in ``self.metrics`` (a dict): the spouts ``records_read``, ``files_done``,
``bad_files``, ``errors``, ``replayed``, ``locks_taken_over``, ``locks_lost``; the bolt
``records_written``, ``files_done``, ``syncs``, ``errors``.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from squall.api.bolt import Bolt
from squall.api.config import Config
from squall.api.spout import Spout
from squall.api.stateful import StatefulSpout

if TYPE_CHECKING:
    from squall.api.state import KeyValueState

log = logging.getLogger(__name__)

__all__ = ["DirectorySpout", "FileBolt", "SizeRotation", "StatefulDirectorySpout", "TimeRotation"]

_READERS = ("text", "jsonl", "csv")


class BadFileError(ValueError):
    """A record of a file could not be decoded."""


#: what reading a record that cannot be decoded raises: its file is bad
_DECODE_ERRORS = (BadFileError, UnicodeDecodeError, ValueError, csv.Error)


def _describe(error: BaseException) -> str:
    """Why a file is bad, as written to its ``.error`` file."""
    return f"{type(error).__name__}: {error}"


def _read_lock(path: str) -> dict[str, Any] | None:
    """The last complete JSON line of a lock file (None when it has none yet)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - 4096))  # the tail: lock files only grow
            data = f.read()
    except FileNotFoundError:
        return None
    for line in reversed(data.split(b"\n")):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            return entry
    return None


def _append(path: str, entry: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, (json.dumps(entry) + "\n").encode())
    finally:
        os.close(fd)


def _free_name(directory: str, name: str) -> str:
    """``directory/name``, or a suffixed name if that exists already (never overwrite)."""
    target = os.path.join(directory, name)
    n = 1
    while os.path.exists(target):
        target = os.path.join(directory, f"{name}.{n}")
        n += 1
    return target


class DirectorySpout(Spout):
    """Consumes the files of ``source_dir``, one record per tuple, at least once (see the
    module docstring for the full contract)."""

    keeps_position = True  # what is acked is not read again: acks wait for the commit of stateful bolts

    def __init__(self, source_dir: str, *, archive_dir: str, bad_dir: str, lock_dir: str | None = None,
                 reader: str = "text", glob: str = "*", fields: list[str] | None = None, csv_header: bool = True,
                 ignore_suffix: str = ".ignore", records_per_call: int = 100, lock_timeout_secs: float = 60,
                 commit_frequency_count: int = 20000, commit_frequency_secs: float = 10,
                 max_outstanding: int = 10000, poll_secs: float = 0.1) -> None:
        if reader not in _READERS:
            raise ValueError(f"DirectorySpout: reader must be one of {_READERS}, got {reader!r}")
        if fields is not None and reader != "csv":
            raise ValueError("DirectorySpout: fields= is for the csv reader")
        self.source_dir = os.fspath(source_dir)
        self.archive_dir = os.fspath(archive_dir)
        self.bad_dir = os.fspath(bad_dir)
        self.lock_dir = os.fspath(lock_dir) if lock_dir is not None else os.path.join(self.source_dir, ".lock")
        self.reader = reader
        self.glob = glob
        self.fields = list(fields) if fields else None
        self.csv_header = csv_header
        self.ignore_suffix = ignore_suffix
        self.records_per_call = records_per_call
        self.lock_timeout_secs = lock_timeout_secs
        self.commit_frequency_count = commit_frequency_count
        self.commit_frequency_secs = commit_frequency_secs
        self.max_outstanding = max_outstanding
        self.poll_secs = poll_secs
        if reader == "text":
            self.outputs = ["line"]
        elif reader == "csv" and self.fields:
            self.outputs = list(self.fields)
        else:
            self.outputs = ["record"]

    # -- lifecycle ------------------------------------------------------------------------------

    def open(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        if not os.path.isdir(self.source_dir):
            raise FileNotFoundError(f"DirectorySpout: source directory {self.source_dir!r} does not exist: "
                                    f"create it, or check source_dir=")
        _make_dirs("DirectorySpout", archive_dir=self.archive_dir, bad_dir=self.bad_dir, lock_dir=self.lock_dir)
        self.collector = collector
        self.task = (f"{getattr(context, 'topology_name', '')}:{context.get_this_component_id()}:"
                     f"{context.get_this_task_id()}")
        self.owner = uuid.uuid4().hex
        self.metrics = {"records_read": 0, "files_done": 0, "bad_files": 0, "errors": 0, "replayed": 0,
                        "locks_taken_over": 0, "locks_lost": 0}
        self._next_scan = 0.0
        self._reset_file()

    def _reset_file(self) -> None:
        self.current: str | None = None  # name of the claimed file
        self.file: io.BufferedReader | None = None
        self.eof = False
        self.pending: dict[int, list[Any]] = {}  # record offset -> values, in emission order
        self.retry: list[int] = []
        self.header: list[str] | None = None
        self.committed = 0
        self._acks_since_commit = 0
        self._last_commit = time.monotonic()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
            self.file = None

    # -- the spout ------------------------------------------------------------------------------

    def next_tuple(self) -> None:
        if self.current is None:
            now = time.monotonic()
            if now < self._next_scan:
                return
            if not self._claim():
                self._next_scan = now + self.poll_secs
                return
        if self._maybe_commit():  # lost the lock
            return
        budget = self.records_per_call
        while self.retry and budget > 0:
            offset = self.retry.pop(0)
            if offset in self.pending:
                self.collector.emit(self.pending[offset], msg_id=(self.current, offset))
                self.metrics["replayed"] += 1
                budget -= 1
        while not self.eof and budget > 0 and len(self.pending) < self.max_outstanding:
            try:
                record = self._read_record()
            except _DECODE_ERRORS as e:
                self._bad_file(e)
                return
            if record is None:
                self.eof = True
                break
            self.metrics["records_read"] += 1
            self._emit(*record)
            budget -= 1
        if self.eof and not self.pending:
            self._done()

    def _emit(self, offset: int, values: list[Any]) -> None:
        """Emit the record at byte ``offset`` of the current file, tracked: kept until acked."""
        self.pending[offset] = values
        self.collector.emit(values, msg_id=(self.current, offset))

    def ack(self, msg_id: Any) -> None:
        name, offset = msg_id
        if name != self.current or self.pending.pop(offset, None) is None:
            return  # a tuple of a file this task no longer holds (bad file, lost lock)
        self._acks_since_commit += 1

    def fail(self, msg_id: Any) -> None:
        name, offset = msg_id
        if name == self.current and offset in self.pending:
            self.retry.append(offset)

    # -- reading --------------------------------------------------------------------------------

    def _read_line(self) -> tuple[int, bytes] | None:
        assert self.file is not None
        offset = self.read_offset  # kept here: a buffered file's tell() is a system call per line
        line = self.file.readline()
        self.read_offset += len(line)
        return None if not line else (offset, line)

    def _read_record(self) -> tuple[int, list[Any]] | None:
        while True:
            got = self._read_line()
            if got is None:
                return None
            offset, raw = got
            text = raw.decode("utf-8")
            if self.reader == "text":
                return offset, [text[:-1] if text.endswith("\n") else text]
            if self.reader == "jsonl":
                if not text.strip():
                    continue
                try:
                    return offset, [json.loads(text)]
                except ValueError as e:
                    raise BadFileError(f"bad JSON at byte {offset}: {e}") from None
            row = self._csv_row(text)
            if row is None:
                continue
            return offset, self._csv_values(row, offset)

    def _csv_row(self, first: str) -> list[str] | None:
        """One CSV record starting with line ``first`` (reading more lines for quoted newlines)."""
        text = first
        while True:
            try:
                rows = list(csv.reader(io.StringIO(text), strict=True))
            except csv.Error:
                more = self._read_line()  # an open quote: the record goes on on the next line
                if more is None:
                    raise
                text += more[1].decode("utf-8")
                continue
            return rows[0] if rows else None

    def _csv_values(self, row: list[str], offset: int) -> list[Any]:
        if self.header is not None:
            if len(row) != len(self.header):
                raise BadFileError(f"CSV row at byte {offset} has {len(row)} values, the header {len(self.header)}")
            record = dict(zip(self.header, row))
            return [record[f] for f in self.fields] if self.fields else [record]
        if self.fields:
            if len(row) != len(self.fields):
                raise BadFileError(f"CSV row at byte {offset} has {len(row)} values, fields are {self.fields}")
            return list(row)
        return [row]

    def _open_at(self, offset: int) -> None:
        self.file = open(os.path.join(self.source_dir, self.current), "rb")  # type: ignore[arg-type]
        if self.reader == "csv" and self.csv_header:
            row = self._csv_row(self.file.readline().decode("utf-8"))
            if row is None:
                raise BadFileError("CSV file without a header row")
            self.header = row
            missing = [f for f in self.fields or () if f not in row]
            if missing:
                raise BadFileError(f"CSV header {row} lacks fields {missing}")
            offset = max(offset, self.file.tell())
        self.file.seek(offset)
        self.read_offset = self.committed = offset

    # -- claiming -------------------------------------------------------------------------------

    def _lock_path(self, name: str) -> str:
        return os.path.join(self.lock_dir, name + ".lock")

    def _candidates(self) -> list[str]:
        names = []
        for name in sorted(os.listdir(self.source_dir)):
            if name.startswith(".") or (self.ignore_suffix and name.endswith(self.ignore_suffix)):
                continue
            if fnmatch.fnmatch(name, self.glob) and os.path.isfile(os.path.join(self.source_dir, name)):
                names.append(name)
        return names

    def _claim(self) -> bool:
        """Take over an abandoned lock, or lock a new file; True when a file is claimed."""
        return self._take_over() or self._lock_new()

    def _lock_new(self) -> bool:
        for name in self._candidates():
            if self._lock(name) and self._start(name, 0):
                return True
        return False

    def _lock(self, name: str) -> bool:
        """Create the lock of ``name`` (``O_EXCL``); False if it exists or the file is gone."""
        path = self._lock_path(name)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        try:
            os.write(fd, (json.dumps(self._entry(0)) + "\n").encode())
        finally:
            os.close(fd)
        if not os.path.exists(os.path.join(self.source_dir, name)):
            os.unlink(path)  # archived by another task between our listing and our lock
            return False
        return True

    def _locked_names(self) -> list[str]:
        """The names of the files that have a lock, in order."""
        return [lock[: -len(".lock")] for lock in sorted(os.listdir(self.lock_dir)) if lock.endswith(".lock")]

    def _take_over(self) -> bool:
        for name in self._locked_names():
            offset = self._take_lock(name)
            if offset is None:
                continue
            log.warning("DirectorySpout %s: took over the lock of %r (resuming at byte %d)", self.task, name, offset)
            if self._start(name, offset):
                return True
        return False

    def _may_take(self, entry: dict[str, Any] | None, age: float) -> bool:
        """Whether this task may take over a lock whose last entry is ``entry``, written ``age``
        seconds ago: one of an earlier run of this task (restarted), or one abandoned for
        ``lock_timeout_secs`` - unless a :class:`StatefulDirectorySpout` wrote it: that file's
        position is in its task's checkpoints, so only that task may go on with it."""
        mine = entry is not None and entry.get("task") == self.task and entry.get("owner") != self.owner
        return mine or (age >= self.lock_timeout_secs and not (entry or {}).get("stateful"))

    def _takeable(self, path: str) -> tuple[bool, dict[str, Any] | None]:
        """(whether :meth:`_may_take` the lock at ``path``, its last entry); False if it is gone."""
        entry = _read_lock(path)
        try:
            age = time.time() - os.stat(path).st_mtime
        except FileNotFoundError:
            return False, None
        return self._may_take(entry, age), entry

    def _take_lock(self, name: str) -> int | None:
        """Take over the lock of ``name`` if :meth:`_may_take` allows it; the offset its last
        entry committed, or None when it was not taken (not allowed, another task taking it over
        at the same time, or its file gone: the stale lock is then removed). The takeover is
        guarded by ``<lock>.takeover`` (``O_EXCL``), so that one task at most takes it."""
        path = self._lock_path(name)
        if not self._takeable(path)[0]:
            return None
        guard = path + ".takeover"
        try:
            os.close(os.open(guard, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        except FileExistsError:
            try:  # a guard left by a task that died while taking over
                if time.time() - os.stat(guard).st_mtime > self.lock_timeout_secs:
                    os.unlink(guard)
            except FileNotFoundError:
                pass
            return None
        try:
            may, entry = self._takeable(path)  # read again under the guard
            if not may:
                return None
            if not os.path.exists(os.path.join(self.source_dir, name)):
                os.unlink(path)  # its file was archived; the owner died before unlocking
                return None
            offset = int(entry.get("offset", 0)) if entry else 0
            _append(path, self._entry(offset, taken_from=entry.get("owner") if entry else None))
        finally:
            try:
                os.unlink(guard)
            except FileNotFoundError:
                pass
        self.metrics["locks_taken_over"] += 1
        return offset

    def _start(self, name: str, offset: int) -> bool:
        self._reset_file()
        self.current = name
        try:
            self._open_at(offset)
        except FileNotFoundError:
            self._release()
            return False
        except _DECODE_ERRORS as e:
            self._bad_file(e)
            return False
        return True

    def _entry(self, offset: int, **more: Any) -> dict[str, Any]:
        return {"owner": self.owner, "task": self.task, "offset": offset, "time": time.time(), **more}

    # -- committing and finishing ---------------------------------------------------------------

    def position(self) -> int:
        """The offset up to which every record of the current file is acked."""
        if self.pending:
            return next(iter(self.pending))
        assert self.file is not None
        return self.read_offset

    def _maybe_commit(self) -> bool:
        """Commit if due; True when the lock turned out to be lost (the file is dropped)."""
        now = time.monotonic()
        due = (self._acks_since_commit >= self.commit_frequency_count
               or (self._acks_since_commit and now - self._last_commit >= self.commit_frequency_secs)
               or now - self._last_commit >= self.lock_timeout_secs / 3)
        return due and not self._commit()

    def _commit(self) -> bool:
        """Append the position to the lock file; False (and the file dropped) if the lock is not ours."""
        assert self.current is not None
        path = self._lock_path(self.current)
        entry = _read_lock(path)
        if entry is None or entry.get("owner") != self.owner:
            log.warning("DirectorySpout %s: the lock of %r was taken over; leaving the file", self.task, self.current)
            self.metrics["locks_lost"] += 1
            self.close()
            self._reset_file()
            return False
        self.committed = self.position()
        _append(path, self._entry(self.committed))
        self._acks_since_commit = 0
        self._last_commit = time.monotonic()
        return True

    def _release(self) -> None:
        self.close()
        if self.current is not None:
            self._unlock(self.current)
        self._reset_file()

    def _unlock(self, name: str) -> None:
        try:
            os.unlink(self._lock_path(name))
        except FileNotFoundError:
            pass

    def _done(self) -> None:
        """The current file was read to its end and all its tuples were acked."""
        assert self.current is not None
        self.close()
        self._archive(self.current)
        self._release()

    def _archive(self, name: str) -> None:
        """Move ``name`` from ``source_dir`` to ``archive_dir`` (its lock is the caller's)."""
        try:
            os.replace(os.path.join(self.source_dir, name), _free_name(self.archive_dir, name))
            self.metrics["files_done"] += 1
        except FileNotFoundError:
            log.error("DirectorySpout %s: %r vanished from %s before it could be archived",
                      self.task, name, self.source_dir)
            self.metrics["errors"] += 1

    def _bad_file(self, error: BaseException) -> None:
        """A record of the current file (or its CSV header) cannot be decoded."""
        assert self.current is not None
        self.close()
        self._move_bad(self.current, _describe(error))
        self._release()

    def _move_bad(self, name: str, reason: str) -> None:
        """Move ``name`` whole to ``bad_dir`` with ``<name>.error`` giving ``reason``, and report
        it (its lock is the caller's)."""
        log.error("DirectorySpout %s: bad file %r moved to %s: %s", self.task, name, self.bad_dir, reason)
        target = _free_name(self.bad_dir, name)
        try:
            os.replace(os.path.join(self.source_dir, name), target)
            with open(target + ".error", "w") as f:
                f.write(reason + "\n")
        except OSError as e:
            log.error("DirectorySpout %s: could not move bad file %r: %s", self.task, name, e)
        self.metrics["bad_files"] += 1
        self.metrics["errors"] += 1
        try:
            self.collector.report_error(BadFileError(f"{name}: {reason} (moved to {self.bad_dir})"))
        except Exception:  # noqa: BLE001 - reporting must not stop the spout
            pass


class StatefulDirectorySpout(DirectorySpout, StatefulSpout):
    """A :class:`DirectorySpout` whose read position is in the topology's checkpoints: with
    stateful bolts downstream, *effectively once* - the committed state counts every record
    exactly once across crashes of any worker (the module docstring has the full contract).

    Each task's state holds ``file`` (the file it reads, or None), ``offset`` (the byte offset
    of its next record to emit) and ``ended`` (``{name: None | reason}``: the files it read to
    their end, or up to a record that cannot be decoded, not yet moved). Records are emitted
    without message ids; a rollback, not a fail, brings them back. A file moves to
    ``archive_dir`` (a bad one to ``bad_dir``) at the commit of the first checkpoint whose state
    has it in ``ended``, never before: a rollback never needs a moved file. Same arguments,
    readers and ``metrics`` as :class:`DirectorySpout`; the topology needs what any stateful
    topology needs (ackers, checkpoints, a durable state provider for worker processes).
    """

    # -- the position in the state ----------------------------------------------------------------

    def init_state(self, state: KeyValueState) -> None:
        """Return to the position ``state`` holds (after ``open``, and after every rollback).

        ``state`` is the last committed one, so the files it says ended are moved now; this
        task's other locks are released (what was read of those files since was rolled back: they
        are read again from their start, by any task); its ``file`` is reopened at ``offset``,
        the lock taken back from the earlier run of this task that held it (a restart).
        """
        self.state = state
        self._prepared: tuple[int, dict[str, str | None]] | None = None  # (txid, its "ended")
        self.close()
        self._reset_file()
        name, ended = state.get("file"), state.get("ended", {})
        for locked in self._locked_names():
            entry = _read_lock(self._lock_path(locked))
            if entry is None or entry.get("task") != self.task or locked == name:
                continue
            if locked in ended and os.path.exists(os.path.join(self.source_dir, locked)):
                self._retire(locked, ended[locked])
            else:  # rolled back, or moved at the commit just before a crash
                self._unlock(locked)
        if ended:
            state.put("ended", {})
        if name is None:
            return
        offset = int(state.get("offset", 0))
        if self._reclaim(name) and self._start(name, offset):
            log.info("StatefulDirectorySpout %s: resuming %r at byte %d", self.task, name, offset)
        elif state.get("file") == name:  # not ended as bad by _start: gone, or another task's
            log.error("StatefulDirectorySpout %s: cannot resume %r at byte %d (its file is gone or another task "
                      "holds its lock); the rest of it is not read", self.task, name, offset)
            self.metrics["errors"] += 1
            state.put("file", None)

    def _reclaim(self, name: str) -> bool:
        """Whether this task holds the lock of ``name``, taken back from an earlier run of this
        task (or made again, if it was removed) if need be."""
        entry = _read_lock(self._lock_path(name))
        if entry is not None and entry.get("owner") == self.owner:
            return True  # a rollback in this run: still ours
        return self._take_lock(name) is not None or self._lock(name)

    def pre_prepare(self, txid: int) -> None:
        self._prepared = (txid, dict(self.state.get("ended", {})))

    def pre_commit(self, txid: int) -> None:
        """The checkpoint spout records ``txid`` as committed before it sends this COMMIT, so
        from here on no rollback returns to a state before it: the files its state says ended
        are moved (this task's own fold of ``txid`` comes after this hook; a task that dies
        first folds it when it recovers, since ``txid`` is committed)."""
        if self._prepared is None or self._prepared[0] != txid:
            return  # not ours to act on: a rollback came between the PREPARE and this COMMIT
        ended = self._prepared[1]
        self._prepared = None  # a COMMIT sent again moves nothing twice
        for name, reason in ended.items():
            self._retire(name, reason)
        if ended:
            self.state.put("ended", {n: r for n, r in self.state.get("ended", {}).items() if n not in ended})

    def _retire(self, name: str, reason: str | None) -> None:
        """Move a file whose end is committed to ``archive_dir`` (``reason`` None) or to
        ``bad_dir``, then remove its lock."""
        if reason is None:
            self._archive(name)
        else:
            self._move_bad(name, reason)
        self._unlock(name)

    # -- DirectorySpout's steps, kept in the state ----------------------------------------------------

    def _entry(self, offset: int, **more: Any) -> dict[str, Any]:
        # marks the lock as bound to this task's checkpoints: no other task takes it over by age
        return super()._entry(offset, stateful=True, **more)

    def _start(self, name: str, offset: int) -> bool:
        if not super()._start(name, offset):
            return False
        self.state.put("file", name)
        self.state.put("offset", self.position())  # past a CSV header
        return True

    def _emit(self, offset: int, values: list[Any]) -> None:
        self.collector.emit(values)  # untracked: the checkpoints make it reliable
        # nothing is ever pending here, so the position is the offset of the next record
        self.state.put("offset", self.position())

    def _done(self) -> None:
        self._end(None)

    def _bad_file(self, error: BaseException) -> None:
        # moved at the commit, not now: a rollback to before this record reads the file again
        self._end(_describe(error))

    def _end(self, reason: str | None) -> None:
        """The current file ends here (``reason``: why it is bad, or None): noted in the state,
        the file kept (with its lock) until a checkpoint saying so is committed."""
        name = self.current
        assert name is not None
        self.close()
        self.state.put("ended", {**self.state.get("ended", {}), name: reason})
        self.state.put("file", None)
        self._reset_file()


# -- writing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SizeRotation:
    """Rotate the file once it holds ``bytes`` bytes (Storm's ``FileSizeRotationPolicy``;
    counted as written, in characters for CSV, which are bytes for ASCII text)."""

    bytes: int


@dataclass(frozen=True)
class TimeRotation:
    """Rotate the file ``secs`` seconds after it was opened (Storm's ``TimedRotationPolicy``)."""

    secs: float


_EXTENSIONS = {"jsonl": ".jsonl", "csv": ".csv", "parquet": ".parquet"}
_CSV_TYPES = (str, int, float, bool, type(None))


def _make_dirs(connector: str, **settings: str) -> None:
    """Create the directories of ``settings`` (setting name -> path); a failure names the setting."""
    for setting, path in settings.items():
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise type(e)(f"{connector}: cannot create {setting} {path!r}: {e.strerror}") from e


class FileBolt(Bolt):
    """Writes its inputs to rotated files; acks them once synced (see the module docstring)."""

    blocking = True  # fsync: an executor thread of its own, not the worker's cooperative one

    def __init__(self, output_dir: str, *, format: str = "jsonl", fields: list[str] | None = None,
                 rotation: SizeRotation | TimeRotation | None = None, sync_every: int = 1000,
                 sync_secs: float | None = 1.0, sync_on_idle: bool = True, prefix: str = "") -> None:
        if format not in _EXTENSIONS:
            raise ValueError(f"FileBolt: format must be one of {sorted(_EXTENSIONS)}, got {format!r}")
        if format == "parquet":
            from squall.connectors import require

            require("pyarrow", "parquet", "FileBolt(format='parquet')")
        self.output_dir = os.fspath(output_dir)
        self.format = format
        self.fields = list(fields) if fields else None
        self.rotation = rotation
        self.sync_every = max(1, sync_every)
        self.sync_secs = sync_secs
        self.sync_on_idle = sync_on_idle
        self.prefix = prefix

    def get_component_configuration(self) -> dict[str, Any] | None:
        ticks = [s for s in (self.sync_secs, getattr(self.rotation, "secs", None)) if s]
        return {Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS: min(ticks)} if ticks else None

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        _make_dirs("FileBolt", output_dir=self.output_dir)
        self.collector = collector
        self.component = context.get_this_component_id()
        self.base = f"{self.prefix}{self.component}-{context.get_this_task_id()}-"
        self.metrics = {"records_written": 0, "files_done": 0, "syncs": 0, "errors": 0}
        self.rotation_count = 0
        self.path: str | None = None
        self.unsynced: list[Any] = []  # inputs written, not yet acked
        self.rows: list[dict[str, Any]] = []  # parquet: rows not yet in a row group
        self._recover()

    def _recover(self) -> None:
        """Complete (or, parquet, remove) the ``.tmp`` files an earlier run of this task left."""
        for name in os.listdir(self.output_dir):
            if not (name.startswith(self.base) and name.endswith(".tmp")):
                continue
            path = os.path.join(self.output_dir, name)
            if self.format == "parquet":
                os.unlink(path)
                continue
            with open(path, "rb+") as f:
                data = f.read()
                f.truncate(data.rfind(b"\n") + 1)
            os.replace(path, path[: -len(".tmp")])

    # -- files ------------------------------------------------------------------------------------

    def _open(self, fields: list[str]) -> None:
        self.rotation_count += 1
        name = f"{self.base}{self.rotation_count}-{int(time.time() * 1000)}{_EXTENSIONS[self.format]}"
        self.path = os.path.join(self.output_dir, name + ".tmp")
        self.opened = time.monotonic()
        self.file_fields = fields
        self.writer: Any = None
        self.schema: Any = None
        if self.format == "parquet":
            self.out = None
            return
        self.out = open(self.path, "w", newline="", encoding="utf-8")
        self.written = 0  # what was written to it: a text file's tell() costs too much per tuple
        if self.format == "csv":
            self.writer = csv.writer(self.out)
            self.written += self.writer.writerow(fields)

    def _close(self) -> None:
        """Sync, complete the current file (rename without ``.tmp``) and ack what it holds."""
        if self.path is None:
            return
        self._sync(final=True)
        if self.path is None:  # the sync failed
            return
        if self.out is not None:
            self.out.close()
        if self.writer is not None and self.format == "parquet":
            self.writer.close()
        if os.path.exists(self.path):
            os.replace(self.path, self.path[: -len(".tmp")])
            self.metrics["files_done"] += 1
        self.path = None
        self._ack_all()

    def _ack_all(self) -> None:
        for tup in self.unsynced:
            self.collector.ack(tup)
        self.unsynced = []

    def _fail_all(self, error: BaseException) -> None:
        self.metrics["errors"] += 1
        self.collector.report_error(OSError(f"FileBolt {self.component!r}: writing {self.path!r} failed: {error}"))
        for tup in self.unsynced:
            self.collector.fail(tup)
        self.unsynced = []
        self.rows = []
        for f in (self.out, self.writer if self.format == "parquet" else None):
            try:
                if f is not None:
                    f.close()
            except Exception:  # noqa: BLE001
                pass
        self.path = None  # the next input opens a new file; the broken one stays .tmp

    def _sync(self, final: bool = False) -> None:
        if self.path is None:
            return
        try:
            if self.format == "parquet":
                if self.rows:
                    self._write_row_group()
            elif self.out is not None:
                self.out.flush()
                os.fsync(self.out.fileno())
        except Exception as e:  # noqa: BLE001
            self._fail_all(e)
            return
        self.metrics["syncs"] += 1
        if self.format != "parquet":
            self._ack_all()

    def _write_row_group(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema)
        self.writer.write_table(table)
        self.rows = []

    def _size(self) -> int:
        if self.format == "parquet":
            return os.path.getsize(self.path) if self.path and os.path.exists(self.path) else 0
        return self.written if self.out is not None else 0

    def _rotate_if_due(self) -> None:
        if self.path is None or self.rotation is None:
            return
        if isinstance(self.rotation, SizeRotation):
            due = self._size() >= self.rotation.bytes
        else:
            due = time.monotonic() - self.opened >= self.rotation.secs
        if due:
            self._close()

    # -- the bolt ---------------------------------------------------------------------------------

    def _reject(self, tup: Any, reason: str) -> None:
        self.metrics["errors"] += 1
        self.collector.report_error(ValueError(f"FileBolt {self.component!r}: cannot write {tup.values!r}: {reason}"))
        self.collector.fail(tup)

    def execute(self, tup: Any) -> None:
        if tup.is_tick():
            if self.path is not None:
                if self.sync_secs and (self.rows if self.format == "parquet" else self.unsynced):
                    self._sync()
                self._rotate_if_due()
            return
        fields = self.fields or list(tup.fields)
        try:
            record = {f: tup.get_value_by_field(f) for f in fields} if self.fields else dict(zip(fields, tup.values))
        except (KeyError, ValueError, IndexError) as e:
            self._reject(tup, f"it lacks a field of {fields}: {e}")
            return
        if self.format == "jsonl":
            try:
                line = json.dumps(record, allow_nan=False) + "\n"
            except (TypeError, ValueError) as e:
                self._reject(tup, f"not JSON-serializable: {e}")
                return
        elif self.format == "csv":
            bad = [f for f, v in record.items() if not isinstance(v, _CSV_TYPES)]
            if bad:
                self._reject(tup, f"fields {bad} are not CSV values (str, int, float, bool, None)")
                return
        elif self.format == "parquet" and self.path is not None and list(record) != self.file_fields:
            self._reject(tup, f"its fields {list(record)} differ from the file's {self.file_fields}")
            return
        if self.path is None:
            self._open(fields)
        try:
            if self.format == "jsonl":
                self.written += self.out.write(line)  # json.dumps writes ASCII: characters are bytes
            elif self.format == "csv":
                if list(record) != self.file_fields:
                    self._reject(tup, f"its fields {list(record)} differ from the file's {self.file_fields}")
                    return
                self.written += self.writer.writerow(record.values())
            else:
                import pyarrow as pa

                try:  # check the row against the file's schema (its first row's) to fail this input alone
                    row = pa.Table.from_pylist([record], schema=self.schema)
                except Exception as e:  # noqa: BLE001
                    self._reject(tup, f"does not fit the Parquet schema {self.schema}: {e}")
                    return
                if self.schema is None:
                    self.schema = row.schema
                self.rows.append(record)
        except Exception as e:  # noqa: BLE001
            self.unsynced.append(tup)
            self._fail_all(e)
            return
        self.unsynced.append(tup)
        self.metrics["records_written"] += 1
        if len(self.unsynced if self.format != "parquet" else self.rows) >= self.sync_every:
            self._sync()
        self._rotate_if_due()

    def finish_batch(self) -> None:
        # group commit: input ran dry, so the spouts may be waiting for these acks
        # (max spout pending): sync now rather than at sync_every or the next tick
        if self.sync_on_idle and self.unsynced and self.format != "parquet":
            self._sync()

    def cleanup(self) -> None:
        self._close()
