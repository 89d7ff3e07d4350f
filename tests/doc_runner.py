"""Runs the code blocks of a page of the users' guide (``docs/``) or of the README, for
tests/test_docs.py and tests/test_readme.py.

A page is one session, run in a subprocess in a directory of its own (``examples/`` reachable
there, ``SQUALL_HOME`` private), its blocks in order:

- a ``python`` block is executed, all of a page's in one namespace; a block with a title
  (```` ```python title="first.py" ````) is that file instead: written to the page's directory
  and compiled, for a later block to run or import (it must name it);
- a ``sh`` / ``bash`` block: each of its commands, which must be a ``squall`` or ``python``
  command, runs there and must exit 0 (``--duration`` capped at 2 s);
- a ``yaml`` block is parsed, and its keys must be Squall settings;
- a block right after ``<!-- doc-test: skip REASON -->`` is not run (installing packages, a
  Spark cluster, a broker, a transcript...).

Any other block fails the page, and so does a code block the page renders that this parser did
not see (an indented one, say): no block is skipped silently.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import markdown
import yaml

from helpers import REPO

DOCS = Path(REPO) / "docs"
PAGES = sorted(p.relative_to(REPO).as_posix() for p in DOCS.rglob("*.md"))
SKIP = re.compile(r"<!--\s*doc-test:\s*skip\b\s*(.*?)\s*-->")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
SHELLS = {"sh", "bash", "shell"}
RUNNABLE_COMMAND = re.compile(r"(squall|python)( |$)")
MAX_DURATION = 2  # seconds: a `squall run ... --duration 10` of the guide runs for 2 in the test
PAGE_TIMEOUT = 150  # seconds for a whole page (its subprocess)


@dataclass
class Block:
    page: str  # path relative to the repository
    line: int  # the line of its first line of code (1-based)
    lang: str
    title: str | None
    code: str
    skip: str | None  # the reason given in its doc-test: skip mark, if it has one


def page_blocks(page: str) -> list[Block]:
    """The fenced code blocks of ``page`` (a path relative to the repository), in order."""
    lines = (Path(REPO) / page).read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = opening["indent"], opening["fence"], opening["info"].strip()
        closing = re.compile(rf"^ {{0,{len(indent) + 3}}}{fence[0]}{{{len(fence)},}}\s*$")
        end = next((j for j in range(i + 1, len(lines)) if closing.match(lines[j])), None)
        assert end is not None, f"{page}:{i + 1}: a code block that is never closed"
        code = "\n".join(line[len(indent):] if line.startswith(indent) else line.lstrip()
                         for line in lines[i + 1:end]) + "\n"
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = SKIP.search(before)
        if mark:
            assert mark[1], f"{page}:{i + 1}: a doc-test: skip mark must say why"
        title = re.search(r'title="([^"]*)"', info)
        blocks.append(Block(page, i + 2, info.split()[0] if info else "", title and title[1], code,
                            mark[1] if mark else None))
        i = end + 1
    return blocks


def markdown_extensions() -> list:
    """The Markdown extensions mkdocs.yml configures, as Python-Markdown takes them."""
    config = yaml.safe_load((Path(REPO) / "mkdocs.yml").read_text())
    names, configs = [], {}
    for entry in config.get("markdown_extensions", []):
        if isinstance(entry, dict):
            (name, options), = entry.items()
            names.append(name)
            configs[name] = options or {}
        else:
            names.append(entry)
    return [names, configs]


def check_every_block_is_seen(page: str, blocks: list[Block]) -> None:
    """The page renders exactly the code blocks :func:`page_blocks` found."""
    names, configs = markdown_extensions()
    html = markdown.markdown((Path(REPO) / page).read_text(), extensions=names, extension_configs=configs)
    rendered = len(re.findall(r"<pre[ >]", html))
    assert rendered == len(blocks), (f"{page}: renders {rendered} code blocks, the doc tests see {len(blocks)} "
                                     f"(an indented code block? use a fenced one)")


def shell_commands(block: Block) -> list[str]:
    """The commands of a shell block (continued lines joined, comments left out); each must be a
    ``squall`` or ``python`` command."""
    commands = []
    for command in re.sub(r"\\\n\s*", " ", block.code).splitlines():
        command = command.strip()
        if not command or command.startswith("#"):
            continue
        assert RUNNABLE_COMMAND.match(command), (
            f"{block.page}:{block.line}: the doc tests run only squall and python commands, not {command!r}: "
            f"mark the block <!-- doc-test: skip REASON --> if it cannot run in a test")
        commands.append(re.sub(r"--duration\s+(\d+(?:\.\d+)?)",
                               lambda m: f"--duration {min(float(m[1]), MAX_DURATION):g}", command))
    return commands


def steps_of(blocks: list[Block], directory: Path) -> list[dict]:
    """What the page's session runs, in order; titled blocks written to ``directory``, yaml checked."""
    from squall.api.defaults import KEYS

    steps = []
    for n, block in enumerate(blocks):
        where = f"{block.page}:{block.line}"
        if block.skip is not None:
            continue
        if block.lang in ("python", "py") and block.title:
            compile(block.code, where, "exec")
            later = "".join(b.code for b in blocks[n + 1:] if b.skip is None)
            stem = block.title.removesuffix(".py")
            assert re.search(rf"\b{re.escape(stem)}\b", later), f"{where}: no later block runs {block.title}"
            (directory / block.title).write_text(block.code)
        elif block.lang in ("python", "py"):
            steps.append({"kind": "python", "where": where, "line": block.line, "page": block.page,
                          "code": block.code})
        elif block.lang in SHELLS:
            steps.append({"kind": "shell", "where": where, "commands": shell_commands(block)})
        elif block.lang == "yaml":
            settings = yaml.safe_load(block.code)
            assert isinstance(settings, dict), f"{where}: not a mapping"
            unknown = sorted(set(settings) - set(KEYS))
            assert not unknown, f"{where}: not Squall settings: {unknown}"
        else:
            raise AssertionError(f"{where}: a {block.lang or 'plain'} block the doc tests cannot run: run it, or "
                                 f"mark it <!-- doc-test: skip REASON -->")
    return steps


DRIVER = r'''
import json, subprocess, sys, time

namespace = {"__name__": "__main__"}
for step in json.load(open(sys.argv[1])):
    if step["kind"] == "python":  # line numbers as in the page, for tracebacks
        exec(compile("\n" * (step["line"] - 1) + step["code"], step["page"], "exec"), namespace)
        continue
    for command in step["commands"]:
        started = time.monotonic()
        done = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=90)
        print(f"$ {command}  # {step['where']}, {time.monotonic() - started:.1f} s\n{done.stdout}{done.stderr}",
              file=sys.stderr, flush=True)
        if done.returncode != 0:
            sys.exit(f"{step['where']}: {command!r} exited with status {done.returncode}")
'''


def run_page(page: str, directory: Path) -> str:
    """Run every block of ``page`` (see the module's docstring) in ``directory``; its
    Python blocks' standard output."""
    blocks = page_blocks(page)
    check_every_block_is_seen(page, blocks)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "examples").symlink_to(Path(REPO) / "examples")
    steps = steps_of(blocks, directory)
    if not steps:
        return ""
    (directory / "steps.json").write_text(json.dumps(steps))
    (directory / "doc_session.py").write_text(DRIVER)
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
           "SQUALL_HOME": str(directory / "squall-home")}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "doc_session.py", "steps.json"], cwd=directory, env=env,
                          capture_output=True, text=True, timeout=PAGE_TIMEOUT)
    assert done.returncode == 0, f"{page}'s blocks failed after {time.monotonic() - started:.1f} s:\n{done.stderr}"
    return done.stdout
