"""The "did no work" rule of ``squall run`` / ``squall submit`` for spouts: a spout that emitted
nothing and reported errors (its ``next_tuple`` raises on every call) ends the run with status 1
and one line naming it, as a bolt that fails every tuple does (tests/test_cli.py); a spout that
raises now and then but emits, and one that emits nothing and reports nothing (an empty source),
leave the status 0.

Each case is a real ``python -m squall run`` of a topology file, as a CI smoke test would run it."""

from __future__ import annotations

import re
import textwrap

import pytest

from helpers import squall_cli, summary_row

pytestmark = pytest.mark.timeout(60)

TOPOLOGY = """
from squall import BasicBolt, Spout, TopologyBuilder


class Source(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.calls = collector, 0

    def next_tuple(self):
        self.calls += 1
{body}


class Sink(BasicBolt):
    def execute(self, tup, collector):
        pass


builder = TopologyBuilder()
builder.set_spout("source", Source())
builder.set_bolt("sink", Sink()).shuffle_grouping("source")
topology = builder.create_topology()
"""

RAISES_ALWAYS = """
        raise ConnectionError("source unreachable")
"""
RAISES_SOMETIMES = """
        if self.calls % 2:
            raise ConnectionError("a hiccup")
        if self.calls <= 20:
            self.collector.emit([self.calls])
"""
EMPTY = """
        pass
"""

NO_WORK = re.compile(r"squall: topology 'dead' did no work: 'source' emitted nothing and reported "
                     r"[\d,]+ error\(s\); see the errors above")


def run(tmp_path, body: str, *mode: str):
    """``squall run`` of the topology whose spout's ``next_tuple`` goes on with ``body``, for 2 s."""
    path = tmp_path / "dead.py"
    path.write_text(TOPOLOGY.format(body=textwrap.indent(textwrap.dedent(body).strip("\n"), " " * 8)))
    return squall_cli("run", str(path), "--duration", "2", *mode, cwd=tmp_path)


@pytest.mark.parametrize("mode", [["--in-process"], pytest.param([], marks=pytest.mark.processes)],
                         ids=["in-process", "processes"])
def test_a_spout_that_raises_on_every_call_and_emits_nothing_did_no_work(tmp_path, mode):
    proc = run(tmp_path, RAISES_ALWAYS, *mode)
    err = proc.stderr
    assert "squall: error in 'source' (task " in err and "ConnectionError: source unreachable" in err, err
    assert summary_row(err, "source")[3] == "0"  # emitted
    assert proc.returncode == 1, err
    assert NO_WORK.fullmatch(err.splitlines()[-1]), err
    reported = int(re.search(r"'source' emitted nothing and reported ([\d,]+) error", err)[1].replace(",", ""))
    assert reported > 1  # every call raised, not only the first
    assert re.search(rf"^{reported:,} error\(s\) in 'source'", err, re.M), err  # the summary's count


@pytest.mark.parametrize("body", [RAISES_SOMETIMES, EMPTY], ids=["raises-sometimes-but-emits", "empty-source"])
def test_a_spout_that_emitted_or_reported_nothing_did_its_work(tmp_path, body):
    proc = run(tmp_path, body, "--in-process")
    err = proc.stderr
    assert "did no work" not in err
    assert proc.returncode == 0, err
    emitted, errors = int(summary_row(err, "source")[3].replace(",", "")), "error(s) in 'source'" in err
    assert (emitted, errors) == ((10, True) if body is RAISES_SOMETIMES else (0, False)), err
