"""This machine's processes, as the daemons see them: whether one is alive, and directories a
process owns that outlive it only until the next process looks (a driver killed with
``kill -9`` cleans nothing up itself)."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine is alive (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, but another user's
        return True
    return True


def process_dir(parent: Path) -> Path:
    """A new directory of this process in ``parent`` (named ``PID-RANDOM``), made after removing
    those of processes no longer alive. Remove it when done; a process that dies leaves it to
    the next call."""
    parent.mkdir(parents=True, exist_ok=True)
    for old in parent.iterdir():
        pid = old.name.split("-", 1)[0]
        if old.is_dir() and pid.isdigit() and not process_alive(int(pid)):
            shutil.rmtree(old, ignore_errors=True)
    mine = parent / f"{os.getpid()}-{uuid.uuid4().hex[:12]}"
    mine.mkdir()
    return mine
