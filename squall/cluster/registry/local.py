"""The local registry: this machine's running topologies, one private file per topology.

Each ``squall run`` / ``squall submit`` process writes its entry (:class:`~squall.cluster.registry.
Registration` as JSON) to :func:`registry_dir` before it submits the topology (the UI's address
and token once it serves them), and removes it when it stops. An entry whose process is gone
(``kill -9``, a crash, a closed terminal) is stale: readers ignore and remove it.

The entries hold the control sockets' key pairs, so only their owner may read them: each is a
file of mode 0600 in a directory of mode 0700, and an entry that others could have written or
read (wrong owner or mode) is ignored.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import logging
import os
import stat
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

from squall.api.config import squall_home
from squall.api.errors import AlreadyAliveError, NotAliveError
from squall.cluster.registry import MALFORMED, Registration
from squall.runtime.info import TopologyInfo
from squall.utils.processes import process_alive

log = logging.getLogger("squall.registry")

_SUFFIX = ".json"


def registry_dir() -> Path:
    """Where running topologies are registered: ``run`` in :func:`~squall.api.config.squall_home`."""
    return squall_home() / "run"


def _path(name: str) -> Path:
    # any topology name maps to one safe file name ("/" included), and back
    return registry_dir() / (urllib.parse.quote(name, safe="") + _SUFFIX)


def _read(path: Path) -> Registration | None:
    """The entry at ``path``; None if there is none, it cannot be read (treated as stale), or
    it is not this user's own private file (another user could have planted or read it)."""
    try:
        with open(path) as f:
            info = os.fstat(f.fileno())
            if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
                log.warning("ignoring registry entry %s: not a private file of this user", path)
                return None
            return Registration.from_json(json.load(f))
    except (OSError, *MALFORMED):
        return None


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serializes the registry's read-check-write sequences between processes: without it,
    two ``squall run`` of one name could both find the name free, and a reader removing a
    stale entry could remove the live entry that just replaced it."""
    directory = registry_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)  # an older or hand-made directory: its entries hold control keys
    with open(directory / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield  # the lock goes with the file's closing


def _write(path: Path, entry: Registration) -> None:
    """Write ``entry`` at ``path`` atomically (temp file, then ``os.replace``), holding the lock."""
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    # created private: the control keys are in it
    with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        json.dump(entry.to_json(), f)
    os.replace(temp, path)


def _drop_if_stale(path: Path) -> None:
    with _locked():
        existing = _read(path)  # read again: it may have been replaced since
        if existing is None or not process_alive(existing.pid):
            with contextlib.suppress(OSError):  # e.g. another user's file in a shared directory
                path.unlink(missing_ok=True)


class LocalRegistry:
    """The registry of this machine's user (see the module's docstring); every method
    reads ``SQUALL_HOME`` anew."""

    where = "on this machine"

    def register(self, entry: Registration) -> None:
        path = _path(entry.name)
        with _locked():
            existing = _read(path)
            if existing is not None and process_alive(existing.pid):
                raise AlreadyAliveError(
                    f"topology {entry.name!r} is already running on this machine (pid {existing.pid}); "
                    f"'squall kill {entry.name}' stops it"
                )
            _write(path, entry)

    def publish_ui(self, name: str, url: str, token: str) -> None:
        path = _path(name)
        with _locked():
            existing = _read(path)
            if existing is not None and existing.pid == os.getpid():
                _write(path, dataclasses.replace(existing, ui=url, ui_token=token))

    def unregister(self, name: str) -> None:
        path = _path(name)
        with _locked():
            existing = _read(path)
            if existing is not None and existing.pid == os.getpid():
                path.unlink()

    def running(self) -> list[Registration]:
        try:
            paths = list(registry_dir().glob("*" + _SUFFIX))
        except OSError:  # none yet, or another user's
            return []
        live = []
        for path in paths:
            entry = _read(path)
            if entry is not None and process_alive(entry.pid):
                live.append(entry)
            else:
                _drop_if_stale(path)
        return sorted(live, key=lambda e: e.name)

    def lookup(self, name: str) -> Registration:
        path = _path(name)
        entry = _read(path)
        if entry is None or not process_alive(entry.pid):
            with contextlib.suppress(OSError):  # another user's registry: nothing of it is ours to drop
                if path.exists():
                    _drop_if_stale(path)
            raise NotAliveError(
                f"no topology named {name!r} is running on this machine (squall list shows those that are)"
            )
        return entry

    def publish_state(self, name: str, info: TopologyInfo) -> None:
        """Nothing: on one machine the topology's process answers for its state itself."""

    def close(self) -> None:
        """Nothing: every call opens what it needs."""
