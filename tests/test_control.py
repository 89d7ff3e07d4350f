"""Controlling running topologies from another terminal: ``squall list``, ``squall kill``,
``squall activate`` and ``squall deactivate`` against real ``squall run`` processes.

Every test points ``SQUALL_HOME`` at its own directory, so its registry of running topologies
is private. Each ``squall run`` writes its output to files under ``tmp_path`` (nothing to
drain) and is killed, by pid, when the test ends if it still runs. Whether a registry entry
is gone is checked on the file itself: the registry's readers remove stale entries, which
would hide one left behind.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
from command_line import Run
from helpers import settled, squall_cli, stays

from squall.ops import control
from squall.cluster.registry.local import LocalRegistry
from squall.runtime.info import to_dict
from squall.testing import wait_until

pytestmark = pytest.mark.processes

NAME = "counting"

# A spout counting up (reliable, throttled by max spout pending) into a bolt that acks. The
# spout's open leaves a file named by its pid in MARKS: which processes got as far as running it.
TOPOLOGY_FILE = """
import os
import time

from squall import BasicBolt, Config, Spout, TopologyBuilder


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0
        open(os.path.join({marks!r}, f"opened-{{os.getpid()}}"), "w").close()

    def next_tuple(self):
        self.n += 1
        self.collector.emit([self.n], msg_id=self.n)
        time.sleep(0.001)  # the spout's own pace (the topology under test): a steady trickle


class Sink(BasicBolt):
    def execute(self, tup, collector):
        pass


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("sink", Sink()).shuffle_grouping("numbers")
topology = builder.create_topology()
config = Config().set_num_workers(1).set_max_spout_pending(100)
"""

FAILING_FILE = """
from squall import Bolt, Spout, TopologyBuilder


class Quiet(Spout):
    outputs = ["n"]

    def next_tuple(self):
        pass


class Broken(Bolt):
    def prepare(self, conf, context, collector):
        raise RuntimeError("no database")

    def execute(self, tup):
        pass


builder = TopologyBuilder()
builder.set_spout("quiet", Quiet())
builder.set_bolt("broken", Broken()).shuffle_grouping("quiet")
topology = builder.create_topology()
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    """This test's SQUALL_HOME, for the commands it runs and for squall.ops.control in this process."""
    path = tmp_path / "home"
    monkeypatch.setenv("SQUALL_HOME", str(path))
    return path


@pytest.fixture
def topology_file(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    path = tmp_path / f"{NAME}.py"
    path.write_text(TOPOLOGY_FILE.format(marks=str(marks)))
    return path


@pytest.fixture
def start(tmp_path, home, topology_file):
    """``start(*args)`` starts ``squall run <topology file> *args``; every run still going at
    the end of the test is killed by its pid."""
    runs: list[Run] = []

    def start_run(*args: str, file=topology_file) -> Run:
        run = Run(tmp_path, [str(file), *args])
        runs.append(run)
        return run

    yield start_run
    for run in runs:
        if run.proc.poll() is None:
            run.proc.kill()
        run.proc.wait()


def list_rows(cwd) -> dict[str, dict[str, str]]:
    """``squall list`` as {name: {column: value}}."""
    proc = squall_cli("list", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header = lines[0].split()
    assert header == ["name", "status", "mode", "uptime", "pid"], proc.stdout
    rows = {}
    for line in lines[1:]:
        # the uptime may hold spaces ("1m 5s"); the modes of these tests hold none
        name, status, mode, *uptime, pid = line.split()
        rows[name] = {"status": status, "mode": mode, "uptime": " ".join(uptime), "pid": pid}
    return rows


def list_output(cwd) -> str:
    proc = squall_cli("list", cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def info(name: str = NAME) -> dict:
    return to_dict(control.info(LocalRegistry(), name))


def spout_emitted() -> int:
    return info()["components"]["numbers"]["emitted"]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def entry_path(home, name: str = NAME):
    return home / "run" / f"{name}.json"


# -- tests -------------------------------------------------------------------------------------------


def test_list_shows_the_running_topology(start, home, tmp_path):
    run = start("--in-process")
    run.wait_running()
    rows = list_rows(tmp_path)
    assert set(rows) == {NAME}
    assert rows[NAME]["status"] == "ACTIVE"
    assert rows[NAME]["mode"] == "in-process"
    assert rows[NAME]["pid"] == str(run.pid)
    assert re.fullmatch(r"(\d+m )?\d+s", rows[NAME]["uptime"]), rows
    entry = json.loads(entry_path(home).read_text())
    assert entry["name"] == NAME and entry["pid"] == run.pid and entry["mode"] == "in-process"
    assert re.fullmatch(r"tcp://127\.0\.0\.1:\d+", entry["address"])  # loopback only
    assert abs(entry["started"] - time.time()) < 60


def test_deactivate_stops_the_spouts_and_activate_resumes_them(start, tmp_path):
    run = start("--in-process")
    run.wait_running()
    wait_until(lambda: spout_emitted() > 0, timeout=5, message="the spout emitting")

    proc = squall_cli("deactivate", NAME, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert info()["status"] == "INACTIVE"
    assert list_rows(tmp_path)[NAME]["status"] == "INACTIVE"
    emitted = settled(spout_emitted, "the spout's emitted count")
    # the topology runs in the `squall run` process: only its figures show that nothing is emitted
    stays(lambda: spout_emitted() == emitted, secs=1.0, what="no emits while inactive")

    proc = squall_cli("activate", NAME, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert info()["status"] == "ACTIVE"
    assert list_rows(tmp_path)[NAME]["status"] == "ACTIVE"
    wait_until(lambda: spout_emitted() > emitted, timeout=5, message="the spout emitting again")


def test_squall_stacks_prints_each_workers_threads_and_refuses_an_unknown_worker(start, tmp_path):
    run = start("--in-process")
    run.wait_running()
    port = info()["workers"][0]["port"]
    proc = squall_cli("stacks", NAME, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"== worker 127.0.0.1:{port} of topology {NAME!r}\nThread ")
    assert "in next_tuple" in proc.stdout or "run_once" in proc.stdout, proc.stdout[-2000:]
    one = squall_cli("stacks", NAME, f"127.0.0.1:{port}", cwd=tmp_path)
    assert one.returncode == 0 and one.stdout.count("== worker ") == 1, one.stderr
    refused = squall_cli("stacks", NAME, "1", cwd=tmp_path)
    assert refused.returncode != 0 and refused.stderr.strip().count("\n") == 0
    assert f"topology {NAME!r} has no worker on port 1" in refused.stderr


def test_kill_with_no_wait_returns_once_squall_run_has_printed_its_summary_and_exited(start, home, tmp_path):
    # as processes: the worker processes must go too
    run = start("-c", "supervisor.slots.ports=[]")
    run.wait_running()
    workers = [int(p) for p in re.findall(r"\(pid (\d+)\)", run.stderr())]
    assert workers and run.pid not in workers

    proc = squall_cli("kill", NAME, "-w", "0", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"killed topology {NAME!r}" in proc.stderr
    # the reply came after the summary and after the entry was removed
    assert not entry_path(home).exists()
    text = run.stderr()
    assert "killed by squall kill" in text and f"stopping {NAME!r}" in text, text
    assert re.search(r"^numbers\s+spout\s+1\s", text, re.MULTILINE), text
    assert run.proc.wait(timeout=10) == 0, run.stderr()
    assert "Traceback" not in run.stderr()
    assert [pid for pid in workers if alive(pid)] == []
    assert list_output(tmp_path) == "no topologies running on this machine"


def test_kill_waits_the_message_timeout_with_the_spouts_deactivated(start, tmp_path):
    run = start("--in-process", "-c", "topology.message.timeout.secs=4")
    run.wait_running()
    wait_until(lambda: spout_emitted() > 0, timeout=5, message="the spout emitting")
    started = time.monotonic()
    killer = subprocess.Popen([sys.executable, "-m", "squall", "kill", NAME], stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path)
    try:
        # Storm's status while a kill waits
        wait_until(lambda: info()["status"] == "KILLED", timeout=5, message="status KILLED")
        assert list_rows(tmp_path)[NAME]["status"] == "KILLED"
        refused = squall_cli("activate", NAME, cwd=tmp_path)
        assert refused.returncode == 2 and "being killed" in refused.stderr, refused.stderr
        emitted = settled(spout_emitted, "the spout's emitted count")
        # the topology runs in the `squall run` process: only its figures show that nothing is emitted
        stays(lambda: spout_emitted() == emitted, secs=0.3, what="no emits while being killed")
        _, err = killer.communicate(timeout=30)
    finally:
        if killer.poll() is None:
            killer.kill()
        killer.wait()
    assert killer.returncode == 0, err
    assert time.monotonic() - started >= 4.0
    assert run.proc.wait(timeout=10) == 0
    assert "waiting 4s for pending tuples" in run.stderr()


def test_a_second_run_of_a_running_name_fails_before_submitting(start, home, tmp_path):
    first = start("--in-process")
    first.wait_running()
    second = squall_cli("run", str(tmp_path / f"{NAME}.py"), "--in-process", cwd=tmp_path)
    assert second.returncode == 2
    assert f"topology {NAME!r} is already running on this machine (pid {first.pid})" in second.stderr, \
        second.stderr
    assert os.listdir(tmp_path / "marks") == [f"opened-{first.pid}"]  # its spout never opened
    assert json.loads(entry_path(home).read_text())["pid"] == first.pid
    assert first.proc.poll() is None
    assert list_rows(tmp_path)[NAME]["status"] == "ACTIVE"


def test_unknown_names_are_errors(home, tmp_path):
    assert list_output(tmp_path) == "no topologies running on this machine"
    message = "no topology named 'nope' is running on this machine (squall list shows those that are)"
    for args in (["kill", "nope"], ["kill", "nope", "-w", "0"], ["activate", "nope"], ["deactivate", "nope"]):
        proc = squall_cli(*args, cwd=tmp_path)
        assert proc.returncode == 2, (args, proc.stderr)
        assert message in proc.stderr, (args, proc.stderr)
        assert "killing" not in proc.stderr


def test_an_entry_whose_process_is_gone_is_ignored_and_removed(start, home, tmp_path):
    def write_stale() -> None:
        entry_path(home).parent.mkdir(parents=True, exist_ok=True)
        entry_path(home).write_text(json.dumps({"name": NAME, "pid": dead_pid(), "address": "tcp://127.0.0.1:9",
                                                "mode": "in-process", "started": time.time() - 100}))

    write_stale()
    assert list_output(tmp_path) == "no topologies running on this machine"
    assert not entry_path(home).exists()

    write_stale()
    proc = squall_cli("kill", NAME, "-w", "0", cwd=tmp_path)
    assert proc.returncode == 2 and f"no topology named {NAME!r}" in proc.stderr, proc.stderr
    assert not entry_path(home).exists()

    # a new run takes the name over, and leaves no entry behind when its --duration is up
    write_stale()
    run = start("--in-process", "--duration", "0.5")
    assert run.proc.wait(timeout=30) == 0, run.stderr()
    assert not entry_path(home).exists()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_the_entry_is_removed_when_squall_run_is_stopped_by_a_signal(start, home, signum):
    run = start("--in-process")
    run.wait_running()
    assert entry_path(home).exists()
    os.kill(run.pid, signum)
    assert run.proc.wait(timeout=20) == 0, run.stderr()
    assert f"stopping {NAME!r}" in run.stderr()
    assert not entry_path(home).exists()


def test_the_entry_is_removed_when_the_topology_fails_to_start(start, home, tmp_path):
    path = tmp_path / "failing.py"
    path.write_text(FAILING_FILE)
    run = start("--in-process", "--name", NAME, file=path)
    assert run.proc.wait(timeout=30) != 0
    assert "no database" in run.stderr()
    assert not entry_path(home).exists()


def test_squall_run_serves_the_rest_api_whose_posts_need_the_token_its_owner_can_derive(start, home, tmp_path):
    from squall.ops.ui.server import ui_token
    from ui_client import call

    run = start("-c", "ui.port=0")
    run.wait_running()
    wait_until(lambda: "UI and REST API at" in run.stderr(), timeout=10, message="the UI's URL printed")
    url, token = re.search(r"UI and REST API at (http://127\.0\.0\.1:\d+)/\?token=(\w+)", run.stderr()).groups()
    # the owner of the registry entry derives the token from the control secret
    assert token == ui_token(LocalRegistry().lookup(NAME).secret)
    status, page, _ = call(f"{url}/api/v1/topology/{NAME}")
    assert status == 200 and page["name"] == NAME and page["status"] == "ACTIVE"
    assert page["spouts"][0]["spoutId"] == "numbers"

    kill = f"{url}/api/v1/topology/{NAME}/kill/0"
    assert call(kill, "POST")[0] == 401
    assert run.proc.poll() is None
    status, answer, _ = call(kill, "POST", {"Authorization": f"Bearer {token}"})
    assert (status, answer["topologyOperation"]) == (200, "kill")
    # the kill is squall run's own: it prints the summary and exits
    assert run.proc.wait(timeout=30) == 0, run.stderr()
    assert "killed by squall kill" in run.stderr() and not entry_path(home).exists()


def test_rebalance_restarts_the_worker_processes_with_the_new_assignment(start, tmp_path):
    run = start("-c", "supervisor.slots.ports=[]", "-c", "ui.port=0")
    run.wait_running()
    wait_until(lambda: spout_emitted() > 0, timeout=10)
    (worker,) = info()["workers"]

    for bad, culprit in ((["-e", "numbers=2"], "executors of 'numbers' must be an integer from 1 to its 1 task"),
                         (["-e", "nope=1"], "no component 'nope'")):
        proc = squall_cli("rebalance", NAME, "-w", "0", *bad, cwd=tmp_path)
        assert proc.returncode != 0 and culprit in proc.stderr, proc.stderr
    proc = squall_cli("rebalance", NAME, "-w", "0.5", "-n", "2", cwd=tmp_path)
    assert proc.returncode == 0 and "rebalancing topology 'counting'" in proc.stderr, proc.stderr

    def rebalanced() -> bool:
        now = info()
        return now["status"] == "ACTIVE" and len(now["workers"]) == 2 and now["components"]["numbers"]["acked"] > 0

    wait_until(rebalanced, timeout=60, message="two new worker processes, acking again")
    pids = {w["pid"] for w in info()["workers"]}
    assert worker["pid"] not in pids and not alive(worker["pid"])
    # the spout's task kept its id; its figures count from the restart
    acked = info()["components"]["numbers"]["acked"]
    wait_until(lambda: info()["components"]["numbers"]["acked"] > acked + 10, timeout=20)


def test_monitor_prints_the_spouts_throughput_every_interval(start, tmp_path):
    run = start()
    run.wait_running()
    bad = squall_cli("monitor", NAME, "-m", "nope", cwd=tmp_path)
    assert bad.returncode == 2 and "no component 'nope'" in bad.stderr
    out = tmp_path / "monitor.out"
    with open(out, "w") as sink:
        monitor = subprocess.Popen([sys.executable, "-m", "squall", "monitor", NAME, "-i", "0.3"], stdout=sink,
                                   stderr=subprocess.STDOUT, cwd=tmp_path)
    def lines() -> list[list[str]]:
        return [line.split() for line in out.read_text().splitlines()[1:]]

    try:  # the figures come with the workers' heartbeats (every second): some intervals see none
        wait_until(lambda: any(int(line[5]) > 0 for line in lines()), timeout=20, message="a line with emits")
    finally:
        monitor.kill()
        monitor.wait()
    assert out.read_text().split()[:4] == ["topology", "component", "parallelism", "stream"]
    for name, component, parallelism, stream, millis, emitted, throughput in lines():
        assert (name, component, parallelism, stream) == (NAME, "numbers", "1", "default")
        assert 250 <= float(millis) < 5000
        assert float(throughput) == pytest.approx(int(emitted) / float(millis), rel=0.01, abs=0.002)


def test_squall_ui_shows_and_steers_every_topology_of_the_machine(start, tmp_path):
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families
    from ui_client import call

    run = start("-c", "ui.port=0")
    run.wait_running()
    wait_until(lambda: LocalRegistry().lookup(NAME).ui is not None, timeout=10, message="the UI published")
    err = tmp_path / "ui.err"
    with open(err, "w") as sink:
        ui = subprocess.Popen([sys.executable, "-m", "squall", "ui", "--port", "0"], stderr=sink, cwd=tmp_path)
    try:
        wait_until(lambda: "UI of the topologies running on this machine at" in err.read_text(), timeout=20)
        url, token = re.search(r"at (http://127\.0\.0\.1:\d+)/\?token=(\w+)", err.read_text()).groups()

        assert [t["name"] for t in call(url + "/api/v1/topology/summary")[1]["topologies"]] == [NAME]
        assert call(url + "/api/v1/cluster/summary")[1]["topologies"] == 1
        status, page, _ = call(f"{url}/api/v1/topology/{NAME}?window=600")  # relayed to squall run's UI
        assert status == 200 and page["name"] == NAME and page["window"] == "600"
        assert page["spouts"][0]["spoutId"] == "numbers"
        assert call(url + "/api/v1/topology/nope")[0] == 404
        with urllib.request.urlopen(url + "/metrics", timeout=10) as response:  # text, not JSON
            families = {f.name for f in text_string_to_metric_families(response.read().decode())}
        assert "squall_component_emitted" in families

        deactivate = f"{url}/api/v1/topology/{NAME}/deactivate"
        assert call(deactivate, "POST")[0] == 401  # this UI's own token is needed
        assert info()["status"] == "ACTIVE"
        status, answer, _ = call(deactivate, "POST", {"Authorization": f"Bearer {token}"})
        assert (status, answer["topologyOperation"]) == (200, "deactivate")
        assert info()["status"] == "INACTIVE"
    finally:
        ui.kill()
        ui.wait()
