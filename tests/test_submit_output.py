"""What the workers print under ``squall submit`` reaches the terminal, as under ``squall run``:
a bolt's ``print`` on the driver's stdout, what it writes to ``sys.stderr`` or logs (and the last
lines, printed in ``cleanup``) on the driver's stderr before the run's summary, none of it in Spark's
log file (squall/cluster/spark/output.py). One real ``python -m squall submit`` on ``local[2]``;
before it, the relay alone, between this process and a worker-like subprocess (no Spark)."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap

import pytest

from helpers import squall_cli
from squall.cluster.spark.output import OutputRelay
from squall.runtime.messaging.security import LinkKeys

pytestmark = pytest.mark.timeout(150)

WORKER = """
import sys

from squall.cluster.spark.output import forward_output
from squall.runtime.messaging.security import LinkKeys

with forward_output(sys.argv[1], LinkKeys.from_json(sys.argv[2])):
    print("one")
    print("two, in", end=" ")
    print("two writes")
    print("partial", end="", flush=True)
    print("to stderr", file=sys.stderr)
    relayed = sys.stdout
relayed.write("after the worker ended\\n")  # a thread still printing: to this process's own stdout
"""


def worker(address: str, keys: LinkKeys) -> subprocess.CompletedProcess:
    """A process that prints through :func:`forward_output` to ``address`` with ``keys``."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(WORKER), address, keys.to_json()],
                          capture_output=True, text=True, timeout=30)


def test_the_relay_writes_a_workers_lines_on_this_process_stdout_and_stderr(capsys):
    keys = LinkKeys.generate()
    relay = OutputRelay(keys, "127.0.0.1", "127.0.0.1", "printing")
    try:
        proc = worker(relay.address, keys)
    finally:
        relay.close()  # after the worker's end: what it sent last is written first
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "after the worker ended\n", "")
    assert capsys.readouterr() == ("one\ntwo, in two writes\npartial", "to stderr\n")


def test_the_relay_refuses_a_process_without_the_topologys_keys(capsys, caplog):
    relay = OutputRelay(LinkKeys.generate(), "127.0.0.1", "127.0.0.1", "printing")
    try:
        proc = worker(relay.address, LinkKeys.generate())  # another topology's keys
    finally:
        relay.close()
    assert proc.returncode == 0, proc.stderr
    assert capsys.readouterr() == ("", "")  # nothing of it written
    assert any("the output relay of topology 'printing' refused a connection" in r.getMessage()
               for r in caplog.records)


TOPOLOGY = """
import logging
import sys

from squall import BasicBolt, Config, Spout, TopologyBuilder


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        if self.n < 10:
            self.n += 1
            self.collector.emit([self.n])


class Printer(BasicBolt):
    def prepare(self, conf, context):
        self.task = context.get_this_task_id()
        logging.getLogger("printer").warning("printer task %d prepared", self.task)

    def execute(self, tup, collector):
        print(f"printed {tup.values[0]}")
        if tup.values[0] == 10:
            print("to stderr: the tenth", file=sys.stderr)

    def cleanup(self):
        print(f"cleanup of task {self.task}", file=sys.stderr)


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("printer", Printer(), 2).shuffle_grouping("numbers")
topology = builder.create_topology()
config = Config().set_num_workers(2)
"""


@pytest.mark.spark
def test_what_the_workers_print_reaches_the_terminal_not_sparks_log(tmp_path):
    pytest.importorskip("pyspark")
    path = tmp_path / "printing.py"
    path.write_text(TOPOLOGY)
    proc = squall_cli("submit", str(path), "--master", "local[2]", "--duration", "3", cwd=tmp_path, timeout=140)
    err = proc.stderr
    assert proc.returncode == 0, err
    assert sorted(proc.stdout.splitlines(), key=lambda line: int(line.split()[1])) == [
        f"printed {n}" for n in range(1, 11)], proc.stdout  # each line once, whole
    assert err.count("to stderr: the tenth\n") == 1, err
    assert len(re.findall(r"^printer task \d+ prepared$", err, re.M)) == 2, err  # what the workers log
    summary = err.index("\ncomponent ")
    cleanups = [m.start() for m in re.finditer(r"^cleanup of task \d+$", err, re.M)]
    assert len(cleanups) == 2 and max(cleanups) < summary, err  # both workers' last lines, before the summary
    driver_log = re.search(r"^squall: Spark's own log goes to (\S+) \(-v shows it here\)$", err, re.M)[1]
    with open(driver_log) as f:
        spark_log = f.read()
    assert not [text for text in ("printed", "to stderr", "cleanup of task", "prepared") if text in spark_log]
