"""squall.utils.processes: a process's own directories, and what a dead process left behind."""

from __future__ import annotations

import os
import subprocess
import sys

from squall.utils.processes import process_alive, process_dir


def test_process_dir_removes_the_directories_of_dead_processes_only(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    pid = int(dead.stdout)
    assert not process_alive(pid)
    left = tmp_path / f"{pid}-0123456789ab"
    (left / "sub").mkdir(parents=True)  # a killed driver's, with its content
    alive = tmp_path / f"{os.getppid()}-0123456789ab"
    alive.mkdir()
    other = tmp_path / "not-a-pid"
    other.mkdir()
    mine = process_dir(tmp_path)
    assert mine.parent == tmp_path and mine.name.startswith(f"{os.getpid()}-") and mine.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([mine.name, alive.name, other.name])
    assert process_dir(tmp_path) != mine  # a second one of the same process
