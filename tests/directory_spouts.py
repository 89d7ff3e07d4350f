"""What the tests of the directory spouts share: the directories a DirectorySpout is given, a
file written as a producer would, and a spout opened by hand on a recording collector.

(Test modules import this, not each other.)"""

from __future__ import annotations

import os


class FakeContext:
    def __init__(self, task: int = 1, component: str = "files", topology: str = "t") -> None:
        self.task, self.component, self.topology_name = task, component, topology

    def get_this_component_id(self) -> str:
        return self.component

    def get_this_task_id(self) -> int:
        return self.task

    def get_this_task_index(self) -> int:
        return self.task - 1  # fake tasks are numbered from 1, as a component's only tasks


class FakeCollector:
    def __init__(self) -> None:
        self.emitted: list[tuple[list, object]] = []
        self.acked: list = []
        self.failed: list = []
        self.errors: list[BaseException] = []

    def emit(self, values, msg_id=None, **_):
        self.emitted.append((values, msg_id))

    def ack(self, tup):
        self.acked.append(tup)

    def fail(self, tup):
        self.failed.append(tup)

    def report_error(self, error):
        self.errors.append(error)


def dirs(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    return src, {"archive_dir": str(tmp_path / "archive"), "bad_dir": str(tmp_path / "bad"),
                 "lock_dir": str(tmp_path / "locks")}


def write(path, lines) -> None:
    tmp = str(path) + ".ignore"  # written beside, renamed in complete (ignored meanwhile)
    with open(tmp, "w") as f:
        f.writelines(line + "\n" for line in lines)
    os.replace(tmp, path)


def opened(spout, task=1, collector=None):
    collector = collector or FakeCollector()
    spout.open({}, FakeContext(task), collector)
    return spout, collector


def drain(spout, calls=50):
    for _ in range(calls):
        spout.next_tuple()
