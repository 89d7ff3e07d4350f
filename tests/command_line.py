"""What the tests of the command line share: a ``squall run`` in the background (``Run``) and
the SQUALL_HOME of a user with a squall.yaml of their own (``user_home``).

(Test modules import this, not each other.)"""

from __future__ import annotations

import signal
import subprocess
import sys

import yaml

from squall.testing import wait_until


class Run:
    """A ``squall run`` in the background; its stdout and stderr go to files."""

    def __init__(self, tmp_path, args: list[str]) -> None:
        index = len(list(tmp_path.glob("run-*.err")))
        self.err_path = tmp_path / f"run-{index}.err"
        with open(tmp_path / f"run-{index}.out", "w") as out, open(self.err_path, "w") as err:
            # SIGINT as a terminal gives it, even when these tests run in a background job (which
            # ignores it, and Python then never turns it into KeyboardInterrupt)
            self.proc = subprocess.Popen([sys.executable, "-m", "squall", "run", *args], stdout=out, stderr=err,
                                         cwd=tmp_path, start_new_session=True,
                                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_running(self) -> None:
        """Until the topology is submitted (its 'running' line is out)."""
        wait_until(lambda: "running, workers" in self.stderr() or self.proc.poll() is not None, timeout=30,
                   message="squall run started")
        assert self.proc.poll() is None, self.stderr()


def user_home(tmp_path, name: str, conf: dict) -> str:
    """The SQUALL_HOME of a user whose squall.yaml holds ``conf``."""
    home = tmp_path / name
    home.mkdir()
    (home / "squall.yaml").write_text(yaml.safe_dump(conf))
    return str(home)
