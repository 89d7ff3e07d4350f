"""The users' guide (``docs/``, MkDocs with the Material theme): it builds with
``mkdocs build --strict`` (no broken link or anchor, no page out of the ``nav``), every code
block of every page runs (tests/doc_runner.py says how), and it says how to install every
extra."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from doc_runner import DOCS, PAGES, SHELLS, PAGE_TIMEOUT, page_blocks, run_page
from helpers import REPO


def _marks(page: str) -> list:
    """``processes`` for a page that starts worker processes or multilang subprocesses (CI runs
    those one at a time), none for the others (run in the quick passes)."""
    code = "".join(b.code for b in page_blocks(page) if b.skip is None)
    shell = "".join(b.code for b in page_blocks(page) if b.skip is None and b.lang in SHELLS)
    starts_processes = (re.search(r"squall (run|submit)\b(?!.*--in-process)", shell)
                        or re.search(r"processes=True|ShellBolt\(|ShellSpout\(", code))
    return [pytest.mark.processes, pytest.mark.timeout(PAGE_TIMEOUT + 30)] if starts_processes else \
        [pytest.mark.timeout(PAGE_TIMEOUT + 30)]


@pytest.mark.parametrize("page", [pytest.param(p, marks=_marks(p), id=p) for p in PAGES])
def test_every_block_of_the_page_runs(page, tmp_path):
    run_page(page, tmp_path / "page")


@pytest.mark.timeout(120)
def test_the_guide_builds_with_mkdocs_strict(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", f"{REPO}/mkdocs.yml",
                           "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=110,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "index.html").exists()


def test_the_install_page_gives_the_command_of_every_extra():
    extras = tomllib.loads((Path(REPO) / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    page = (DOCS / "install.md").read_text()
    missing = [name for name in extras if f'pip install -e ".[{name}]"' not in page]
    assert not missing, f"docs/install.md does not say how to install the extras {missing}"
