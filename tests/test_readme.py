"""The README's own code: its first topology runs as written."""

from __future__ import annotations

import re
import subprocess
import sys

from helpers import REPO


def readme_block(after: str) -> str:
    """The first ```python block of the README after the line ``after``."""
    text = open(f"{REPO}/README.md").read()
    return re.search(r"```python\n(.*?)```", text[text.index(after):], re.S)[1]


def test_the_first_topology_of_the_readme_runs_as_written(tmp_path):
    path = tmp_path / "first.py"
    path.write_text(readme_block("## A topology"))
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    counted = re.fullmatch(r"([\d,]+) words counted\n", done.stdout)
    assert counted and int(counted[1].replace(",", "")) > 0, done.stdout
