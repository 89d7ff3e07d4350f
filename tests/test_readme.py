"""The README: every code block of it runs or is marked (as the guide's, tests/doc_runner.py),
its topology runs as written, its test command is what CI runs, and its links lead into the
guide."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers import REPO
from doc_runner import page_blocks, run_page


@pytest.mark.timeout(120)
def test_every_block_of_the_readme_runs_and_its_topology_counts_words(tmp_path):
    printed = run_page("README.md", tmp_path / "readme")
    counted = re.fullmatch(r"([\d,]+) words counted\n", printed)
    assert counted and int(counted[1].replace(",", "")) >= 100_000, printed


def test_the_readme_test_command_is_what_ci_runs():
    """The README's test block and .ci/run run the same commands (.ci/run installs quietly)."""
    test_block = next(b for b in page_blocks("README.md") if "pytest" in b.code)
    commands = [line for line in test_block.code.splitlines() if line and not line.startswith("#")]
    ci = [line.replace("pip install -q ", "pip install ")
          for line in (Path(REPO) / ".ci" / "run").read_text().splitlines()[-len(commands):]]
    assert ci == commands


def test_the_readme_links_lead_into_the_guide():
    text = (Path(REPO) / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert any(link.startswith("docs/") for link in links)
    missing = [link for link in links if not link.startswith("http") and not (Path(REPO) / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"
