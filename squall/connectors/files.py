"""Files: a spout that consumes a directory (Storm's ``HdfsSpout``), its stateful form (its
position in the topology's checkpoints: effectively once) and a bolt that writes rotated files
(Storm's ``HdfsBolt``), or, in its exactly-once mode, one part per checkpoint that becomes
visible when the checkpoint commits; on a local or mounted path.

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
  and the task that restarts with the same topology, component and place in the component (its
  index, kept when other components' task counts change) takes it over at once.
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
* A ``source_dir`` with no file to read at the first scan (none matches ``glob``) is said in
  one warning, by the component's first task: ``DirectorySpout t:files:3: no file matches
  '*.txt' in /data/in: nothing to emit until one appears`` (with the files there that ``glob``
  leaves out, if any). Files that appear later are read without a word.

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

* Each input is written to ``<output_dir>/<prefix><component>-<task>-<n>-<millis><ext>.tmp``
  (``task``: the task's index in its component);
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
  file is rotated or closed (and ``fsync``-ed): give it a rotation shorter than
  ``topology.message.timeout.secs``.
* **Failing.** An input that cannot be written (not JSON-serializable, a value CSV/Parquet
  cannot hold, a missing field) is failed with ``report_error`` naming the component and the
  reason; a write or sync error fails every input not yet synced.
* **Crash.** Inputs not yet synced were not acked: they are replayed. A ``.tmp`` file this
  task left behind is completed at the next ``prepare`` (jsonl/csv: up to its last whole line;
  parquet: unreadable without its footer, so removed - its inputs were never acked).

FileBolt exactly-once mode
--------------------------

``FileBolt(output_dir, ..., exactly_once=True)`` makes :class:`ExactlyOnceFileBolt`, a
:class:`~squall.api.two_phase_commit.TwoPhaseCommitSink`: its files commit with the topology's
checkpoints (which it turns on), and every spout upstream must be a stateful spout (such as
:class:`StatefulDirectorySpout`: its position in the same checkpoints).

* **Parts.** Each task writes the inputs of a checkpoint epoch (those between two PREPARE
  barriers), if it has any, into one part: same formats, records and refusals as above, created
  as ``<output_dir>/.<prefix><component>-<task>-<token><ext>.pending`` (``token``: 12 random hex
  digits, new for each attempt: a txid rolled back is written again into another part). A reader
  that skips names starting with ``.`` (as :class:`DirectorySpout` does) sees none of it.
* **Prepare.** At the PREPARE barrier of checkpoint ``txid`` the part is completed (flushed and
  ``fsync``-ed; Parquet: its footer written), its directory ``fsync``-ed, and ``[pending name,
  final name]`` kept in the task's state in that checkpoint.
* **Commit.** Once checkpoint ``txid`` commits (its COMMIT barrier), the part is renamed
  (``os.replace``: it appears whole) to ``<prefix><component>-<txid>-<task>-<token><ext>``,
  ``txid`` zero-padded to 12 digits so that names sort by epoch, and the directory is
  ``fsync``-ed. Committing again is harmless: a pending part gone with its final name there was
  committed already. The inputs' acks reach the spouts at that commit.
* **Rollback and restart.** The open part is closed and removed, and so are the prepared parts
  of checkpoints that did not commit; the parts the committed checkpoint holds are renamed into
  place, if they are not yet (a crash between the checkpoint's commit and the bolt's); then
  every other pending part of this task in ``output_dir`` (a crashed run's) is removed. The
  spouts replay what the removed parts held, from their committed positions. ``cleanup``
  removes the open part; prepared parts wait for the next start.
* **Guarantee.** The committed parts hold every input exactly once, across ``kill -9`` of any
  worker, failed checkpoints, and a resubmission under the same name (the state kept). The
  parts are recognised by prefix, component and task id: topologies sharing ``output_dir``
  need distinct component names or ``prefix``.
* **Failing.** A record that cannot be written fails its input (reported, naming the
  component). An I/O error fails the input, and the checkpoint at its PREPARE: the topology
  rolls back and the epoch is written again.
* **Options.** ``rotation`` is refused (ValueError): the checkpoints roll the parts, so
  ``topology.state.checkpoint.interval.ms`` is the rotation. ``sync_every`` is the records per
  Parquet row group (held in memory until then); ``sync_secs`` and ``sync_on_idle`` do nothing.
* **Cost.** A record is visible about one checkpoint interval after it arrives (up to an
  interval plus the checkpoint's round trip); one part per task per checkpoint with input (many
  small files at short intervals), each with one ``fsync`` of its file and two of the directory.

Both keep counters in ``self.metrics`` (a dict): the spouts ``records_read``, ``files_done``,
``bad_files``, ``errors``, ``replayed``, ``locks_taken_over``, ``locks_lost``; the bolt
``records_written``, ``files_done``, ``syncs``, ``errors`` (exactly-once: ``syncs`` counts the
parts prepared, ``files_done`` those committed).
"""

from __future__ import annotations

import csv
import fnmatch
import io
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from squall.api.bolt import Bolt
from squall.api.config import Config
from squall.api.spout import Spout
from squall.api.stateful import StatefulSpout
from squall.api.two_phase_commit import TwoPhaseCommitSink
from squall.connectors import ExactlyOnceOption

if TYPE_CHECKING:
    from squall.api.state import KeyValueState

log = logging.getLogger(__name__)

__all__ = ["DirectorySpout", "ExactlyOnceFileBolt", "FileBolt", "SizeRotation", "StatefulDirectorySpout",
           "TimeRotation"]

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
        where = f"{getattr(context, 'topology_name', '')}:{context.get_this_component_id()}"
        self.task = f"{where}:{context.get_this_task_id()}"  # in messages
        # in its locks: its place in the component, as its state is kept (other components' task
        # counts may change, and with them its task id)
        self.place = f"{where}:{context.get_this_task_index()}"
        self.owner = uuid.uuid4().hex
        self.metrics = {"records_read": 0, "files_done": 0, "bad_files": 0, "errors": 0, "replayed": 0,
                        "locks_taken_over": 0, "locks_lost": 0}
        self._next_scan = 0.0
        # the empty-source notice is the component's to give, once: its first task says it
        # (every task looks at the same directory), at its first scan
        index = getattr(context, "get_this_task_index", None)
        self._scanned = index is not None and index() != 0
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
            claimed = self._claim()
            if not self._scanned:
                self._scanned = True
                if not claimed:
                    self._say_if_empty()
            if not claimed:
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

    def _say_if_empty(self) -> None:
        """Log a warning when ``source_dir`` holds no file this spout would read (a wrong
        ``source_dir`` or ``glob`` would otherwise show only as 0 emitted), naming the files
        there that ``glob`` leaves out, if any. Called once, at the first scan."""
        if self._candidates():
            return  # files to read, held by other tasks for now
        left_out = [name for name in sorted(os.listdir(self.source_dir))
                    if not name.startswith(".") and not (self.ignore_suffix and name.endswith(self.ignore_suffix))
                    and os.path.isfile(os.path.join(self.source_dir, name))]
        others = (f" ({len(left_out)} other file(s) there, such as {left_out[0]!r}, do not match glob=)"
                  if left_out else "")
        log.warning("%s %s: no file matches %r in %s%s: nothing to emit until one appears",
                    type(self).__name__, self.task, self.glob, self.source_dir, others)

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
        mine = entry is not None and entry.get("task") == self.place and entry.get("owner") != self.owner
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
        return {"owner": self.owner, "task": self.place, "offset": offset, "time": time.time(), **more}

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
            if entry is None or entry.get("task") != self.place or locked == name:
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


class _Unwritable(ValueError):
    """A record a part cannot hold (the message says why); nothing of it was written."""


def _json_encoder() -> Callable[[Any], str]:
    """``json.dumps(record, allow_nan=False)`` as a function whose encoder is built once:
    json.dumps builds one at each call, most of its cost for a record of a few fields. It is the
    C encoder json.dumps itself builds, so the text and the errors are the same; where it is
    missing, or does not give json.dumps' text, json.dumps' own way. Not for several threads:
    one per file."""
    reference = json.JSONEncoder(allow_nan=False)
    make = json.encoder.c_make_encoder
    if make is None:
        return reference.encode
    markers: dict[int, Any] = {}  # the circular-reference check's: what is being encoded
    try:
        chunks = make(markers, reference.default, json.encoder.encode_basestring_ascii, None,
                      reference.key_separator, reference.item_separator, False, False, False)
    except TypeError:  # another Python's C encoder takes other arguments
        return reference.encode

    def encode(record: Any) -> str:
        try:
            return "".join(chunks(record, 0))
        except BaseException:
            markers.clear()  # an encoding cut short leaves its objects: later ones would look circular
            raise

    probe = {"a": [1, 2.5, "\u00e9\n", None, True], "b": {"c": -1e300}}
    return encode if encode(probe) == reference.encode(probe) else reference.encode


def _fsync_dir(path: str) -> None:
    """Make the files created and renamed in directory ``path`` durable (their entries)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: str) -> bool:
    """Remove ``path`` if it is there; whether it was."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True


class _Part:
    """One file :class:`FileBolt` writes, in ``format``, at ``path``: what both of its forms
    share (the checks that refuse one record, writing, syncing, completing).

    The file is created by the first record it takes (Parquet: by its first row group), so a
    part whose records were all refused leaves nothing on disk (``created``). :meth:`write`
    raises :class:`_Unwritable` for a record it refuses, having written nothing of it; any other
    error of :meth:`write`, :meth:`sync` or :meth:`close` is an I/O failure, after which the part
    is only good to :meth:`abandon`.
    """

    def __init__(self, path: str, format: str) -> None:
        self.path = path
        self.format = format
        self.created = False
        self.fields: list[str] | None = None  # the first record's: the CSV header, the Parquet columns
        self.schema: Any = None  # Parquet: the first record's
        self.rows: list[dict[str, Any]] = []  # Parquet: records not in a row group yet
        self.out: Any = None  # JSON lines, CSV: the open text file
        self.writer: Any = None  # a csv.writer over ``out``, or pyarrow's ParquetWriter
        self.written = 0  # characters written to ``out``: a text file's tell() costs too much per record
        self.dumps = _json_encoder() if format == "jsonl" else None

    @property
    def size(self) -> int:
        """What was written (JSON lines, CSV: characters, which are bytes for ASCII text)."""
        if self.format == "parquet":
            return os.path.getsize(self.path) if self.created else 0
        return self.written

    @property
    def buffered(self) -> int:
        """Parquet records held in memory, not in a row group yet (always 0 for text formats)."""
        return len(self.rows)

    def write(self, record: dict[str, Any]) -> None:
        """Add ``record`` (field -> value), or raise :class:`_Unwritable` saying why it cannot be."""
        if self.format == "jsonl":
            try:
                line = self.dumps(record) + "\n"
            except (TypeError, ValueError) as e:
                raise _Unwritable(f"not JSON-serializable: {e}") from None
            out = self.out if self.out is not None else self._text(record)
            self.written += out.write(line)  # the encoder writes ASCII: characters are bytes
        elif self.format == "csv":
            bad = [f for f, v in record.items() if not isinstance(v, _CSV_TYPES)]
            if bad:
                raise _Unwritable(f"fields {bad} are not CSV values (str, int, float, bool, None)")
            self._check_fields(record)
            self._text(record)
            try:  # the row is built, then written in one call: these leave nothing of it in the file
                self.written += self.writer.writerow(record.values())
            except (UnicodeEncodeError, csv.Error) as e:
                raise _Unwritable(f"not a CSV row: {e}") from None
        else:
            import pyarrow as pa

            self._check_fields(record)
            try:  # against the part's schema (its first record's), to refuse this record alone
                row = pa.Table.from_pylist([record], schema=self.schema)
            except Exception as e:  # noqa: BLE001 - pyarrow raises several kinds
                raise _Unwritable(f"does not fit the Parquet schema {self.schema}: {e}") from None
            if self.schema is None:
                self.schema, self.fields = row.schema, list(record)
            self.rows.append(record)

    def _check_fields(self, record: dict[str, Any]) -> None:
        if self.fields is not None and list(record) != self.fields:
            raise _Unwritable(f"its fields {list(record)} differ from the file's {self.fields}")

    def _text(self, first: dict[str, Any]) -> Any:
        """The open text file, created for ``first``, the first record (CSV: its header)."""
        if self.out is None:
            self.out = open(self.path, "w", newline="", encoding="utf-8")
            self.created = True
            if self.format == "csv":
                self.fields = list(first)
                self.writer = csv.writer(self.out)
                self.written += self.writer.writerow(self.fields)
        return self.out

    def sync(self) -> None:
        """JSON lines, CSV: make what was written durable (flushed, ``fsync``-ed). Parquet: write
        the buffered records as a row group (the file is readable, and durable, once closed)."""
        if self.format == "parquet":
            self._write_row_group()
        elif self.out is not None:
            self.out.flush()
            os.fsync(self.out.fileno())

    def close(self) -> None:
        """Complete the file durably: synced and closed (Parquet: the last row group and the
        footer written, then ``fsync``-ed)."""
        if self.format != "parquet":
            if self.out is not None:
                self.sync()
                self.out.close()
            return
        self._write_row_group()
        if self.writer is not None:
            self.writer.close()
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def abandon(self) -> None:
        """Close what is open, ignoring errors: the part is given up (after a failure)."""
        self.rows = []
        for f in (self.out, self.writer if self.format == "parquet" else None):
            try:
                if f is not None:
                    f.close()
            except Exception:  # noqa: BLE001 - given up: its own error was reported, or it is discarded
                pass

    def _write_row_group(self) -> None:
        if not self.rows:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        if self.writer is None:
            self.writer = pq.ParquetWriter(self.path, self.schema)
            self.created = True
        self.writer.write_table(table)
        self.rows = []


class FileBolt(ExactlyOnceOption, Bolt):
    """Writes its inputs to rotated files; acks them once synced. ``exactly_once=True`` makes
    :class:`ExactlyOnceFileBolt` instead: one part per task and checkpoint, visible once the
    checkpoint commits (see the module docstring for both contracts)."""

    blocking = True  # fsync: an executor thread of its own, not the worker's cooperative one

    def __init__(self, output_dir: str, *, format: str = "jsonl", fields: list[str] | None = None,
                 rotation: SizeRotation | TimeRotation | None = None, sync_every: int = 1000,
                 sync_secs: float | None = 1.0, sync_on_idle: bool = True, prefix: str = "",
                 exactly_once: bool = False) -> None:
        # exactly_once is ExactlyOnceOption.__new__'s: it chose the class
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
        self._start(context, collector)
        self.rotation_count = 0
        self.part: _Part | None = None  # the file being written
        self.opened = 0.0  # when it was opened (monotonic): TimeRotation
        self.unsynced: list[Any] = []  # inputs written, not yet acked
        self._recover()

    def _start(self, context: Any, collector: Any) -> None:
        """What both forms do at ``prepare``."""
        _make_dirs("FileBolt", output_dir=self.output_dir)
        self.collector = collector
        self.component = context.get_this_component_id()
        self.task = context.get_this_task_index()  # as its state is kept: other task counts may change
        self.base = f"{self.prefix}{self.component}-{self.task}-"
        self.metrics = {"records_written": 0, "files_done": 0, "syncs": 0, "errors": 0}

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

    def _record(self, tup: Any) -> dict[str, Any]:
        """What is written for ``tup``: ``fields`` (or the tuple's own) -> its values; raises
        :class:`_Unwritable` when it lacks one of ``fields``."""
        if self.fields is None:
            return dict(zip(tup.fields, tup.values))
        try:
            return {f: tup.get_value_by_field(f) for f in self.fields}
        except (KeyError, ValueError, IndexError) as e:
            raise _Unwritable(f"it lacks a field of {self.fields}: {e}") from None

    # -- files ------------------------------------------------------------------------------------

    def _open_part(self) -> _Part:
        self.rotation_count += 1
        name = f"{self.base}{self.rotation_count}-{int(time.time() * 1000)}{_EXTENSIONS[self.format]}"
        self.part = _Part(os.path.join(self.output_dir, name + ".tmp"), self.format)
        self.opened = time.monotonic()
        return self.part

    def _close(self) -> None:
        """Complete the current file (synced, renamed without ``.tmp``) and ack what it holds."""
        part = self.part
        if part is None:
            return
        try:
            part.close()
        except Exception as e:  # noqa: BLE001
            self._fail_all(e)
            return
        self.metrics["syncs"] += 1
        if part.created:
            os.replace(part.path, part.path[: -len(".tmp")])
            self.metrics["files_done"] += 1
        self.part = None
        self._ack_all()

    def _ack_all(self) -> None:
        for tup in self.unsynced:
            self.collector.ack(tup)
        self.unsynced = []

    def _fail_all(self, error: BaseException) -> None:
        self.metrics["errors"] += 1
        path = self.part.path if self.part is not None else None
        self.collector.report_error(OSError(f"FileBolt {self.component!r}: writing {path!r} failed: {error}"))
        for tup in self.unsynced:
            self.collector.fail(tup)
        self.unsynced = []
        if self.part is not None:
            self.part.abandon()
        self.part = None  # the next input opens a new file; the broken one stays .tmp

    def _sync(self) -> None:
        if self.part is None:
            return
        try:
            self.part.sync()
        except Exception as e:  # noqa: BLE001
            self._fail_all(e)
            return
        self.metrics["syncs"] += 1
        if self.format != "parquet":  # a Parquet file is readable once closed only
            self._ack_all()

    def _rotate_if_due(self) -> None:
        if self.part is None or self.rotation is None:
            return
        if isinstance(self.rotation, SizeRotation):
            due = self.part.size >= self.rotation.bytes
        else:
            due = time.monotonic() - self.opened >= self.rotation.secs
        if due:
            self._close()

    # -- the bolt ---------------------------------------------------------------------------------

    def _reject(self, tup: Any, reason: str) -> None:
        self.metrics["errors"] += 1
        self.collector.report_error(ValueError(f"FileBolt {self.component!r}: cannot write {tup.values!r}: {reason}"))
        self.collector.fail(tup)

    def _waiting(self) -> int:
        """What a sync would settle: Parquet records not in a row group, or inputs not acked."""
        return (self.part.buffered if self.part is not None else 0) if self.format == "parquet" else len(self.unsynced)

    def execute(self, tup: Any) -> None:
        if tup.is_tick():
            if self.part is not None:
                if self.sync_secs and self._waiting():
                    self._sync()
                self._rotate_if_due()
            return
        try:
            record = self._record(tup)
            (self.part or self._open_part()).write(record)
        except _Unwritable as e:
            self._reject(tup, str(e))
            return
        except Exception as e:  # noqa: BLE001 - the file is broken: what it holds unsynced fails
            self.unsynced.append(tup)
            self._fail_all(e)
            return
        self.unsynced.append(tup)
        self.metrics["records_written"] += 1
        if self._waiting() >= self.sync_every:
            self._sync()
        self._rotate_if_due()

    def finish_batch(self) -> None:
        # group commit: input ran dry, so the spouts may be waiting for these acks
        # (max spout pending): sync now rather than at sync_every or the next tick
        if self.sync_on_idle and self.unsynced and self.format != "parquet":
            self._sync()

    def cleanup(self) -> None:
        self._close()


# -- FileBolt's exactly-once form ------------------------------------------------------------------

_TOKEN_DIGITS = 12  # hex digits of the token naming one attempt at an epoch's part
_TXID_DIGITS = 12  # a final name's txid, zero-padded: the names sort by epoch


@dataclass
class _Epoch:
    """The transaction of :class:`ExactlyOnceFileBolt`: one epoch's pending part."""

    part: _Part
    token: str  # in the part's pending and final names: unique to this attempt at the epoch
    error: BaseException | None = None  # the I/O failure that broke the part: its checkpoint fails


class ExactlyOnceFileBolt(FileBolt, TwoPhaseCommitSink[_Epoch, "list[str] | None"]):
    """:class:`FileBolt`'s exactly-once form, made by ``FileBolt(..., exactly_once=True)``: each
    task writes the inputs of each checkpoint epoch into a pending part, renamed into place once
    the checkpoint commits (the module docstring's *FileBolt exactly-once mode*).

    Takes FileBolt's options but ``rotation`` (a ValueError: the checkpoints roll the parts).
    ``sync_every`` is the records per Parquet row group; ``sync_secs`` and ``sync_on_idle`` do
    nothing (the checkpoint's PREPARE syncs). ``metrics``: ``records_written``, ``syncs``
    (parts prepared), ``files_done`` (parts committed), ``errors``.
    """

    def __init__(self, output_dir: str, **options: Any) -> None:
        if options.get("rotation") is not None:
            raise ValueError("FileBolt(exactly_once=True): rotation= does not apply: a part is completed at "
                             "each checkpoint, so topology.state.checkpoint.interval.ms is the rotation; "
                             "leave rotation unset")
        super().__init__(output_dir, **options)

    # FileBolt comes first in the MRO: its execute would run; the two-phase contract's runs
    # instead (it acks, and the runtime holds the acks until the checkpoint commits)
    execute = TwoPhaseCommitSink.execute

    def get_component_configuration(self) -> dict[str, Any] | None:
        return None  # no tick tuples: the checkpoints sync

    def prepare(self, conf: dict[str, Any], context: Any, collector: Any) -> None:
        TwoPhaseCommitSink.prepare(self, conf, context, collector)
        self._start(context, collector)
        self._writing: _Epoch | None = None  # the open transaction, for cleanup
        # this task's pending parts, and no other component's or task's ("a-1-" is a prefix of
        # component "a-1"'s names, but a token of hex digits never holds a "-")
        self._pending_name = re.compile(re.escape(f".{self.base}") + f"[0-9a-f]{{{_TOKEN_DIGITS}}}"
                                        + re.escape(f"{_EXTENSIONS[self.format]}.pending"))

    # nothing to sync at the end of a batch (the PREPARE syncs): Bolt's, which the executor skips
    finish_batch = Bolt.finish_batch

    def cleanup(self) -> None:
        # the open part is in no checkpoint: the spouts replay its inputs from their committed
        # positions. Prepared parts stay: a committed checkpoint may hold them (the next start commits them)
        writing = getattr(self, "_writing", None)  # None too if prepare never ran
        if writing is not None:
            self.abort_transaction(writing)

    # -- the two-phase contract --------------------------------------------------------------------

    def begin_transaction(self) -> _Epoch:
        token = uuid.uuid4().hex[:_TOKEN_DIGITS]
        path = os.path.join(self.output_dir, f".{self.base}{token}{_EXTENSIONS[self.format]}.pending")
        self._writing = _Epoch(_Part(path, self.format), token)
        return self._writing

    def write(self, transaction: _Epoch, tup: Any) -> None:
        """Write ``tup``'s record into the epoch's pending part. A record the format refuses
        raises ValueError naming the component; an I/O error raises OSError and breaks the
        part: the checkpoint fails at its PREPARE, and the epoch is written again."""
        part = transaction.part
        if transaction.error is not None:
            raise OSError(f"FileBolt {self.component!r}: {part.path!r} failed earlier in this epoch "
                          f"({transaction.error}): its checkpoint fails, and the epoch is written again")
        try:
            part.write(self._record(tup))
            if part.buffered >= self.sync_every:
                part.sync()  # a Parquet row group: bounds the records held in memory
        except _Unwritable as e:
            self.metrics["errors"] += 1
            raise _Unwritable(f"FileBolt {self.component!r}: {e}") from None
        except Exception as e:  # noqa: BLE001 - any failure of the file breaks the part
            transaction.error = e
            self.metrics["errors"] += 1
            raise OSError(f"FileBolt {self.component!r}: writing {part.path!r} failed: {e}") from e
        self.metrics["records_written"] += 1

    def prepare_transaction(self, transaction: _Epoch, txid: int) -> list[str] | None:
        """Complete the pending part durably (the file and its directory entry ``fsync``-ed).
        The handle: ``[pending name, final name]`` in ``output_dir``; None when the epoch's
        records were all refused (no part)."""
        part = transaction.part
        if transaction.error is not None:
            raise OSError(f"FileBolt {self.component!r}: cannot prepare {part.path!r} for checkpoint {txid}: "
                          f"a write failed: {transaction.error}")
        try:
            part.close()
            if part.created:
                _fsync_dir(self.output_dir)
        except Exception as e:  # noqa: BLE001 - named; the rollback removes the part
            raise OSError(f"FileBolt {self.component!r}: cannot complete {part.path!r} for checkpoint {txid}: "
                          f"{e}") from e
        self._writing = None
        if not part.created:
            return None
        self.metrics["syncs"] += 1
        final = (f"{self.prefix}{self.component}-{txid:0{_TXID_DIGITS}d}-{self.task}-{transaction.token}"
                 f"{_EXTENSIONS[self.format]}")
        return [os.path.basename(part.path), final]

    def commit_transaction(self, handle: list[str] | None, txid: int) -> None:
        """Rename the pending part to its final name (atomic), then ``fsync`` the directory.
        Idempotent: a pending part already gone, its final name there, was committed before."""
        if handle is None:
            return
        pending, final = (os.path.join(self.output_dir, name) for name in handle)
        try:
            os.replace(pending, final)
        except FileNotFoundError:
            if not os.path.exists(final):  # not ours to re-create: a reader took it, or it was removed
                log.warning("FileBolt %r: the part of checkpoint %d is neither pending (%r) nor in place (%r): "
                            "moved or removed after its commit?", self.component, txid, pending, final)
            return
        _fsync_dir(self.output_dir)
        self.metrics["files_done"] += 1

    def abort_transaction(self, transaction: _Epoch) -> None:
        transaction.part.abandon()
        _remove(transaction.part.path)
        if self._writing is transaction:
            self._writing = None

    def abort_prepared(self, handle: list[str] | None) -> None:
        if handle is not None:
            _remove(os.path.join(self.output_dir, handle[0]))

    def recover(self, pending: list[tuple[int, list[str] | None]]) -> None:
        """Commit the parts the committed checkpoint holds, then remove this task's other
        pending parts: a crashed run's, which no committed checkpoint covers."""
        keep = {handle[0] for _, handle in pending if handle is not None}
        try:
            super().recover(pending)
        finally:
            for name in os.listdir(self.output_dir):
                if name not in keep and self._pending_name.fullmatch(name):
                    _remove(os.path.join(self.output_dir, name))
                    log.info("FileBolt %r: removed %r, a part no committed checkpoint holds (its inputs are "
                             "replayed)", self.component, name)


FileBolt.exactly_once_form = ExactlyOnceFileBolt
