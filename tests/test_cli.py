"""The ``squall`` command's input checks (topology files that do not compile or raise, bad
``--master`` and ``--duration``: one line, exit status 2, the traceback only with
``--verbose``), its final summary, and what ``squall plan`` says about links and values.

Most tests call :func:`squall.ops.cli.main` in this process; one runs ``python -m squall`` to see
the whole of what a user sees."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap

import pytest

from helpers import REPO, BasicSink, logged, record, squall_cli, summary_row
from squall import Config, LocalCluster, Spout, TopologyBuilder, compiled
from squall.ops.cli import main
from squall.ops.command.plan import CONFIG_HEADER
from squall.ops.command.serve import serve_topology
from squall.cluster.spark_master_url import check_spark_master
from squall.cluster.nimbus import Nimbus
from squall.testing import wait_until

PLAN_FILE = """
from squall import BasicBolt, Spout, TopologyBuilder


class Words(Spout):
    outputs = ["word"]

    def next_tuple(self):
        pass


class Sink(BasicBolt):
    def execute(self, tup, collector):
        pass


builder = TopologyBuilder()
builder.set_spout("words", Words())
builder.set_bolt("sink", Sink(), 2).shuffle_grouping("words")
topology = builder.create_topology()
"""


def write(tmp_path, text: str, name: str = "topo.py") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def line_of(path: str, text: str) -> int:
    """The number of the first line of the file ``path`` that contains ``text``."""
    with open(path) as f:
        return next(number for number, line in enumerate(f, 1) if text in line)


# -- topology files that do not load ---------------------------------------------------------------


@pytest.mark.parametrize("source, culprit, error", [
    ("x = 1\ndef f(:\n    pass\n", "def f(:", "SyntaxError: invalid syntax"),
    ("x = 1\nif x:\npass\n", "pass", "IndentationError: expected an indented block after 'if' statement on line 2"),
    ("import os\nimport no_such_module_for_squall\n", "import no_such",
     "ModuleNotFoundError: No module named 'no_such_module_for_squall'"),
    ("def build():\n    return undefined_name\n\n\ntopology = build()\n", "return undefined_name",
     "NameError: name 'undefined_name' is not defined"),
    ("import os\n\nraise RuntimeError()\n", "raise", "RuntimeError"),
], ids=["syntax", "indentation", "import", "name-in-a-function", "bare-exception"])
def test_a_file_that_does_not_load_is_one_line_naming_file_and_line(tmp_path, capsys, source, culprit, error):
    path = write(tmp_path, source)
    assert main(["plan", path]) == 2
    assert capsys.readouterr().err == f"squall: error: {path}:{line_of(path, culprit)}: {error}\n"


def test_an_error_in_a_module_the_file_imports_names_the_import_and_the_module(tmp_path, capsys):
    write(tmp_path, "def broken(:\n", "broken_helper_for_squall.py")
    path = write(tmp_path, "import sys\nsys.path.insert(0, %r)\nimport broken_helper_for_squall\n" % str(tmp_path))
    try:
        assert main(["plan", path]) == 2
    finally:
        sys.modules.pop("broken_helper_for_squall", None)
    assert capsys.readouterr().err == (f"squall: error: {path}:3: SyntaxError: invalid syntax "
                                       "(broken_helper_for_squall.py, line 1)\n")


@pytest.mark.parametrize("flag_first", [True, False], ids=["squall -v plan", "squall plan -v"])
def test_verbose_prints_the_traceback_before_the_line(tmp_path, capsys, flag_first):
    path = write(tmp_path, "def build():\n    return undefined_name\n\n\ntopology = build()\n")
    argv = ["-v", "plan", path] if flag_first else ["plan", path, "--verbose"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n"), err
    assert f'File "{path}", line 2, in build' in err  # the file's own frames
    assert err.endswith(f"squall: error: {path}:2: NameError: name 'undefined_name' is not defined\n")


@pytest.mark.parametrize("mode", [["--in-process"], pytest.param([], marks=pytest.mark.processes)],
                         ids=["in-process", "processes"])
def test_a_failed_open_still_exits_1_in_one_line_its_traceback_only_with_verbose(tmp_path, capsys, mode):
    path = write(tmp_path, """
        from squall import Spout, TopologyBuilder


        class Broken(Spout):
            outputs = ["x"]

            def open(self, conf, context, collector):
                raise OSError("no source")

            def next_tuple(self):
                pass


        builder = TopologyBuilder()
        builder.set_spout("broken", Broken())
        topology = builder.create_topology()
    """)
    assert main(["run", path, *mode, "--name", "broken-open"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("squall: error: topology 'broken-open': ") and line.endswith(
        "component 'broken' (task 2) failed to start: OSError: no source"), line
    assert main(["run", path, *mode, "--name", "broken-open", "-v"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):\n")
    assert f'File "{path}", line {line_of(path, "raise OSError")}, in open' in err, err


def test_the_command_line_user_sees_one_line_and_status_2(tmp_path):
    path = write(tmp_path, "x = 1\ndef f(:\n    pass\n")
    proc = squall_cli("run", path, "--in-process", cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (2, "", f"squall: error: {path}:2: SyntaxError: "
                                                                  "invalid syntax\n")


@pytest.mark.parametrize("file_name, neighbour, culprit", [
    ("numbers.py", None, "{path}"),  # the first hour's case: decimal, hence msgspec, imports numbers
    ("topo.py", "queue.py", "{tmp_path}/queue.py (next to {path})"),
    ("topo.py", "decimal", "{tmp_path}/decimal (next to {path})"),  # a package
])
def test_a_module_named_like_the_standard_librarys_is_refused_in_one_line_before_any_worker(
        tmp_path, file_name, neighbour, culprit):
    path = write(tmp_path, PLAN_FILE, file_name)
    if neighbour == "queue.py":
        write(tmp_path, "x = 1\n", neighbour)
    elif neighbour is not None:
        (tmp_path / neighbour).mkdir()
        (tmp_path / neighbour / "__init__.py").write_text("")
    proc = squall_cli("run", path, "--duration", "5")  # not from its directory: `python -m` would import from there
    name = (neighbour or file_name).removesuffix(".py")
    assert (proc.returncode, proc.stderr) == (2, f"squall: error: {culprit.format(path=path, tmp_path=tmp_path)} "
                                                 f"has the name of the standard library's module {name!r}, which it "
                                                 f"would replace in the workers: rename it\n")


PICKY_FILE = """
from squall import BasicBolt, Spout, TopologyBuilder


class Numbers(Spout):
    outputs = ["n"]

    def open(self, conf, context, collector):
        self.collector, self.n = collector, 0

    def next_tuple(self):
        if self.n < 3:
            self.n += 1
            self.collector.emit([self.n])


class Picky(BasicBolt):
    def execute(self, tup, collector):
        if tup.values[0] % {every} == 0:
            raise ValueError(f"picky about {{tup.values[0]}}")


builder = TopologyBuilder()
builder.set_spout("numbers", Numbers())
builder.set_bolt("picky", Picky()).shuffle_grouping("numbers")
topology = builder.create_topology()
"""


@pytest.mark.parametrize("mode", [["--in-process"], pytest.param([], marks=pytest.mark.processes)],
                         ids=["in-process", "processes"])
def test_a_component_failing_every_tuple_is_said_once_with_its_file_and_line_and_exits_1(tmp_path, mode):
    path = write(tmp_path, PICKY_FILE.format(every=1), "picky.py")
    proc = squall_cli("run", path, "--duration", "3", *mode, cwd=tmp_path)
    err = proc.stderr
    # the first error of its kind as it happens, its traceback naming the user's file and line
    assert err.count("squall: error in 'picky' (task 3); further ones of this kind are counted:\n") == 1, err
    assert f'File "{path}", line {line_of(path, "raise ValueError")}, in execute' in err, err
    assert "<dynamic-code>" not in err
    assert "\n3 error(s) in 'picky'; the last (task 3):" in err  # the true count
    assert (proc.returncode, err.splitlines()[-1]) == (
        1, "squall: topology 'picky' did no work: 'picky' failed every tuple it got; see the errors above")


def test_other_errors_exit_0_unless_fail_on_error(tmp_path):
    path = write(tmp_path, PICKY_FILE.format(every=2), "picky.py")
    assert squall_cli("run", path, "--duration", "2", "--in-process", cwd=tmp_path).returncode == 0
    strict = squall_cli("run", path, "--duration", "2", "--in-process", "--fail-on-error", cwd=tmp_path)
    assert (strict.returncode, strict.stderr.splitlines()[-1]) == (
        1, "squall: topology 'picky' reported 1 error(s) (--fail-on-error); see above")


def test_squall_run_says_where_the_state_comes_from_and_fresh_drops_it(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("the cow jumped over the moon\n" * 2000)
    env = {**os.environ, "SQUALL_HOME": str(tmp_path / "home"), "SQUALL_WORDS_FILE": str(words)}
    where = re.escape(str(tmp_path / "home" / "state" / "stateful_wordcount"))  # SQUALL_HOME's, by default
    commit = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(checkpoint \d+\)"

    def run(*more: str) -> str:
        proc = squall_cli("run", os.path.join(REPO, "examples", "stateful_wordcount.py"), "--in-process",
                          "--duration", "2", "-c", "topology.state.checkpoint.interval.ms=100", *more, env=env)
        assert proc.returncode == 0, proc.stderr
        return proc.stderr

    assert re.search(rf"^squall: starting 'stateful_wordcount' with empty state in {where}$", run(), re.M)
    assert re.search(rf"^squall: resuming 'stateful_wordcount' from the state committed at {commit} in {where} "
                     r"\(--fresh starts over\)$", run(), re.M)
    assert re.search(rf"^squall: --fresh: dropping the state of 'stateful_wordcount' in {where} \(committed at "
                     rf"{commit}\)\nsquall: starting 'stateful_wordcount' with empty state in {where}$",
                     run("--fresh"), re.M)
    plain = squall_cli("run", write(tmp_path, PLAN_FILE), "--fresh", env=env)
    assert (plain.returncode, plain.stderr) == (2, "squall: error: --fresh: topology 'topo' has no stateful "
                                                   "component: it keeps no state to drop\n")


TWO_COUNTS_FILE = """
import os, sys
sys.path.insert(0, {examples!r})
from squall import TopologyBuilder
from stateful_wordcount import FileSpout, SplitLine, WordCount, config, default_input

builder = TopologyBuilder()
builder.set_spout("lines", FileSpout(default_input()))
builder.set_bolt("split", SplitLine(), 2).shuffle_grouping("lines")
builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
if os.environ.get("WITH_TALLY"):  # a second stateful bolt, which the next version drops
    builder.set_bolt("tally", WordCount()).fields_grouping("split", ["word"])
topology = builder.create_topology()
"""


def test_a_version_without_a_stateful_bolt_is_refused_naming_it_unless_its_state_may_be_dropped(tmp_path):
    words = tmp_path / "words.txt"
    words.write_text("the cow jumped over the moon\n" * 2000)
    env = {**os.environ, "SQUALL_HOME": str(tmp_path / "home"), "SQUALL_WORDS_FILE": str(words)}
    path = write(tmp_path, TWO_COUNTS_FILE.format(examples=os.path.join(REPO, "examples")), "counts.py")

    def run(*more: str, tally: bool = False) -> Any:
        return squall_cli("run", path, "--in-process", "--duration", "2", "-c",
                          "topology.state.checkpoint.interval.ms=100", *more,
                          env={**env, "WITH_TALLY": "1"} if tally else env)

    first = run(tally=True)
    assert first.returncode == 0, first.stderr
    refused = run()
    assert refused.returncode != 0
    assert re.search(r"it holds the state of 'tally' \(1 task\(s\)\), which this topology no longer has: keep "
                     r"the component's id .* --allow-dropped-state", refused.stderr), refused.stderr
    allowed = run("--allow-dropped-state")
    assert allowed.returncode == 0, allowed.stderr
    assert re.search(r"^squall: resuming 'counts' from the state committed at ", allowed.stderr, re.M)
    assert "dropping the state of component 'tally'" in allowed.stderr
    again = run()  # 'tally' is gone from the location: nothing to refuse
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("master, slots", [("local[1]", 1), ("local", 1), ("local-cluster[1,1,512]", 1)])
def test_a_local_master_with_too_few_slots_is_refused_before_spark_starts(tmp_path, capsys, monkeypatch, master,
                                                                           slots):
    path = write(tmp_path, PLAN_FILE)
    launched = []

    def launch(popen, args, *more, **options):  # Spark's JVM, or the `java -version` that looks for it
        launched.append(args)
        raise OSError("no process may start in this test")

    monkeypatch.setattr(subprocess.Popen, "__init__", launch)
    assert main(["submit", path, "--master", master, "-c", "topology.workers=2"]) == 2
    assert capsys.readouterr().err == (f"squall: error: topology 'topo' needs 2 Spark task slots (one per worker: "
                                       f"topology.workers=2) but --master {master} has {slots}; lower "
                                       f"topology.workers or give the master more (local[2])\n")
    assert launched == []  # no JVM was started


def test_a_state_store_out_of_reach_is_one_line_and_status_1(tmp_path):
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        port = closed.getsockname()[1]
        proc = squall_cli("run", os.path.join(REPO, "examples", "stateful_wordcount.py"), "--in-process",
                          "--duration", "2", "-c", "topology.state.provider=redis",
                          "-c", f'topology.state.provider.config={{"port": {port}, "timeout_secs": 1}}',
                          env={**os.environ, "SQUALL_HOME": str(tmp_path)})
    assert proc.returncode == 1, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith(f"squall: error: state provider 'redis': cannot reach Redis at 127.0.0.1:{port}: "), line


# -- bad arguments -------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "-inf", "soon"])
def test_a_duration_that_is_not_seconds_is_one_argparse_line(tmp_path, capsys, value):
    path = write(tmp_path, PLAN_FILE)
    with pytest.raises(SystemExit) as exit_:
        main(["run", path, "--in-process", f"--duration={value}"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"squall run: error: argument --duration: expected a number of seconds "
                                       f">= 0, got {value!r}\n")


def test_a_bad_master_fails_before_the_file_is_loaded_or_spark_started(tmp_path, capsys):
    # the file does not exist: the master is refused while the arguments are read
    with pytest.raises(SystemExit) as exit_:
        main(["submit", str(tmp_path / "missing.py"), "--master", "foo://bar"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("squall submit: error: argument --master: 'foo://bar' is not a Spark master URL; "
                          "expected local, local[N], local[*]"), err
    assert err.count("\n") == 1


@pytest.mark.parametrize("url", [
    "local", "local[1]", "local[*]", "local[4,2]", "local[*, 3]", "local-cluster[2,1,1024]",
    "local-cluster[ 2 , 1 , 512 ]", "spark://host:7077", "spark://a:7077,b:7078", "spark://10.0.0.1:7077", "yarn",
    "k8s://example.org:6443", "k8s://https://example.org:6443", "k8s://http://127.0.0.1:8080",
])
def test_the_masters_spark_takes_are_taken(url):
    assert check_spark_master(url) == url


@pytest.mark.parametrize("url, reason", [
    ("foo://bar", "is not a Spark master URL"),
    ("local[abc]", "is not a Spark master URL"),
    ("local[0]", "needs at least 1 thread"),
    ("local-cluster[2,1]", "is not a Spark master URL"),
    ("local-cluster[0,1,1024]", "needs numbers >= 1"),
    ("spark://host", "got 'host'"),
    ("spark://host:port", "got 'host:port'"),
    ("spark://a:7077,", "got ''"),
    ("spark://host:7077/path", "got 'host:7077/path'"),
    ("yarn-client", "is not a Spark master URL"),
    ("k8s://", "the Kubernetes API server"),
    ("k8s://ftp://host", "the Kubernetes API server"),
    ("mesos://host:5050", "Spark 4 dropped Mesos support"),
])
def test_the_masters_spark_refuses_are_refused_saying_why(url, reason):
    with pytest.raises(ValueError, match="^" + re.escape(repr(url))) as error:
        check_spark_master(url)
    assert reason in str(error.value) and "\n" not in str(error.value)


# -- the final summary ------------------------------------------------------------------------------


class CountingSpout(Spout):
    """Emits as fast as it may, and records at close what it emitted and saw acked."""

    outputs = ["n"]

    def __init__(self, key: str) -> None:
        self.key = key

    def open(self, conf, context, collector):
        self.collector, self.emitted, self.acked = collector, 0, 0

    def next_tuple(self):
        self.collector.emit([self.emitted], msg_id=self.emitted)
        self.emitted += 1

    def ack(self, msg_id):
        self.acked += 1

    def close(self):
        record(self.key, {"emitted": self.emitted, "acked": self.acked})


def test_the_info_a_kill_returns_counts_up_to_the_spouts_close(key):
    builder = TopologyBuilder()
    builder.set_spout("counting", CountingSpout(key))
    builder.set_bolt("sink", BasicSink()).shuffle_grouping("counting")
    with LocalCluster() as cluster:
        cluster.submit_topology("final", Config().set_max_spout_pending(50), builder.create_topology())
        wait_until(lambda: cluster.get_topology_info("final")["components"]["counting"]["acked"] >= 1000, 10)
        info = cluster.kill_topology_and_get_info("final", wait_secs=0)
        assert cluster.get_topologies() == []
    [seen] = logged(key)
    spout = info["components"]["counting"]
    assert info["status"] == "KILLED"
    assert (spout["emitted"], spout["acked"]) == (seen["emitted"], seen["acked"])
    assert info["components"]["sink"]["acked"] >= seen["acked"]  # every tree acked was acked by the sink


@pytest.mark.processes
def test_squall_run_prints_the_figures_the_spout_had_at_its_close(tmp_path):
    seen_path = tmp_path / "seen.json"
    path = write(tmp_path, f"""
        import json

        from squall import BasicBolt, Config, Spout, TopologyBuilder


        class Counting(Spout):
            outputs = ["n"]

            def open(self, conf, context, collector):
                self.collector, self.emitted, self.acked = collector, 0, 0

            def next_tuple(self):
                self.collector.emit([self.emitted], msg_id=self.emitted)
                self.emitted += 1

            def ack(self, msg_id):
                self.acked += 1

            def close(self):
                with open({str(seen_path)!r}, "w") as f:
                    json.dump({{"emitted": self.emitted, "acked": self.acked}}, f)


        class Sink(BasicBolt):
            def execute(self, tup, collector):
                pass


        builder = TopologyBuilder()
        builder.set_spout("counting", Counting())
        builder.set_bolt("sink", Sink()).shuffle_grouping("counting")
        topology = builder.create_topology()
        config = Config().set_max_spout_pending(50)
    """)
    proc = squall_cli("run", path, "--in-process", "--duration", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = summary_row(proc.stderr, "counting")
    # component type tasks emitted transferred acked ...
    printed = {"emitted": int(row[3].replace(",", "")), "acked": int(row[5].replace(",", ""))}
    seen = json.loads(seen_path.read_text())
    assert printed == seen and seen["acked"] > 0, proc.stderr


class StubRunner:
    """A runner without workers that fails as soon as it starts, as one whose workers could not be
    restarted: what Nimbus makes of a FAILED topology."""

    def __init__(self) -> None:
        self.failure: str | None = None
        self.stopped = False

    def start(self) -> None:
        self.failure = "worker 0 could not be restarted"

    def set_active(self, active: bool) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True

    def workers_info(self) -> list[dict]:
        return []

    def executor_snapshots(self) -> list[tuple[str, dict]]:
        return []


class StubCluster(Nimbus):
    def _make_runner(self, name, topology, conf, assignment, state) -> StubRunner:
        self.runner = StubRunner()
        return self.runner


def small_topology():
    builder = TopologyBuilder()
    builder.set_spout("counting", CountingSpout("unused"))
    builder.set_bolt("sink", BasicSink()).shuffle_grouping("counting")
    return builder.create_topology()


def test_the_info_a_kill_returns_says_failed_if_the_topology_had_failed():
    with StubCluster() as cluster:
        cluster.submit_topology("failing", {}, small_topology())
        assert cluster.get_topology_info("failing")["status"] == "FAILED"
        info = cluster.kill_topology_and_get_info("failing", wait_secs=0)
        assert info["status"] == "FAILED" and cluster.runner.stopped and cluster.get_topologies() == []


def test_squall_run_of_a_failed_topology_prints_its_final_summary_and_returns_1(capsys):
    with StubCluster() as cluster:
        assert serve_topology(cluster, "failing", small_topology(), {}, None, "nowhere") == 1
        assert cluster.runner.stopped
    err = capsys.readouterr().err
    assert "\ncounting             spout " in err
    assert err.endswith("squall: topology 'failing' FAILED; see the last error above\n"), err


# -- squall plan: links and values ------------------------------------------------------------------

LINKS_SECURE = "links: authenticated and encrypted (ZeroMQ CURVE, a key pair per topology)"
LINKS_OPEN = "links: NOT authenticated or encrypted (topology.messaging.secure=false)"
VALUES_REFUSED = ("values of other types: refused at emit (topology.fall.back.on.java.serialization=false); "
                  "msgpack types and registered serializers travel")
VALUES_PICKLED = ("values of other types: pickled (cloudpickle) over authenticated links "
                  "(topology.fall.back.on.java.serialization=true); msgpack types and registered serializers travel")


@pytest.mark.parametrize("overrides, config, expected", [
    ([], "", [LINKS_SECURE, VALUES_REFUSED]),
    (["-c", "topology.messaging.secure=false"], "", [LINKS_OPEN, VALUES_REFUSED]),
    ([], "config = {'topology.fall.back.on.java.serialization': True}\n", [LINKS_SECURE, VALUES_PICKLED]),
], ids=["defaults", "insecure", "pickle-fallback"])
def test_plan_shows_the_links_and_the_fate_of_other_values_after_the_executors(tmp_path, capsys, overrides, config,
                                                                               expected):
    assert main(["plan", write(tmp_path, PLAN_FILE + config), *overrides]) == 0
    lines = capsys.readouterr().out.splitlines()
    config_at = lines.index(CONFIG_HEADER)
    assert lines[config_at - 3:config_at] == [*expected, compiled.describe()]
    assert lines[0].startswith("worker 0 ")
    assert all(line.startswith(("worker ", "  executor ")) for line in lines[:config_at - 3])


def test_plan_refuses_the_pickle_fallback_over_open_links(tmp_path, capsys):
    path = write(tmp_path, PLAN_FILE)
    assert main(["plan", path, "-c", "topology.fall.back.on.java.serialization=true",
                 "-c", "topology.messaging.secure=false"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("squall: error: ") and "topology.messaging.secure" in err and err.count("\n") == 1
