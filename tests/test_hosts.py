"""Squall on a Spark standalone cluster spread over hosts: the multi-host test bed (``netbed``).

Three hosts, each a network namespace of its own on one private bridge: the Spark master and
the driver (``squall submit``, as a user runs it) on host 0, with Redis and ZooKeeper where a
test needs them, and a one-core worker on each of hosts 1 and 2. The driver's environment is a
user's shell: no Spark or PySpark variables, and a PATH whose ``python3`` is not the
virtualenv's. The hosts share this machine's file system, so they share the interpreter's path,
as hosts provisioned alike do.

Needs root; CI runs these (see ``netbed.require_bed``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
from collections import Counter

import pytest

pytest.importorskip("pyspark")

from netbed import Bed, SparkBed, bed_unavailable, listeners, require_bed, slow_executor_java  # noqa: E402
from spark_standalone import java_executable, spark_unavailable_reason  # noqa: E402
from squall.api.state import StateProviderError  # noqa: E402
from squall.testing import RedisServer, wait_until  # noqa: E402
from command_line import user_home  # noqa: E402
from process_topologies import put_messages, read_lines  # noqa: E402
from spark_helpers import WORDLIB  # noqa: E402
from wordcount_state import (  # noqa: E402
    committed_offset, counts_of, expected_counts, swc,  # swc: examples/stateful_wordcount.py
)
from zookeeper_server import ZooKeeperServer, write_credentials  # noqa: E402

pytestmark = [pytest.mark.hosts, pytest.mark.spark, pytest.mark.timeout(180)]

WORKER_HOSTS = {Bed.address(1), Bed.address(2)}

TOPOLOGY = """
import json, os, socket, sys
from squall import BasicBolt, Config, TopologyBuilder
from wordlib import Lines  # a module next to this file: shipped to the executors

LINES = {lines!r}
OUT = {out!r}

def this_host():
    # the address this host reaches the bed's other hosts from
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(({master!r}, 9))
        return s.getsockname()[0]

class Split(BasicBolt):
    outputs = ["word", "host"]

    def prepare(self, conf, context):
        self.host = this_host()

    def execute(self, tup, collector):
        for word in tup.values[0].split():
            collector.emit([word, self.host])

class Count(BasicBolt):
    def prepare(self, conf, context):
        self.host, self.task = this_host(), context.get_this_task_id()
        self.counts, self.senders = {{}}, set()

    def execute(self, tup, collector):
        word, sender = tup.values
        self.counts[word] = self.counts.get(word, 0) + 1
        self.senders.add(sender)

    def cleanup(self):
        with open(os.path.join(OUT, f"count-{{self.task}}.json"), "w") as f:
            json.dump({{"host": self.host, "python": sys.executable, "counts": self.counts,
                       "senders": sorted(self.senders)}}, f)

builder = TopologyBuilder()
builder.set_spout("lines", Lines(LINES))
builder.set_bolt("split", Split(), 2).shuffle_grouping("lines")
builder.set_bolt("count", Count(), 2).fields_grouping("split", ["word"])
topology = builder.create_topology()
config = Config().set_num_workers(2)
"""


@pytest.fixture(scope="module")
def spark_bed(tmp_path_factory):
    require_bed()
    why = spark_unavailable_reason()
    if why is not None:
        pytest.skip(why)
    bed = Bed(3)
    try:
        cluster = SparkBed(bed, str(tmp_path_factory.mktemp("spark-bed")))
        cluster.wait_for_workers(WORKER_HOSTS)
        yield cluster
    finally:
        bed.close()


def lines_of(n: int) -> list[str]:
    words = [f"w{i}" for i in range(50)]
    return [" ".join(words[(i * 7 + j * 3) % 50] for j in range(5)) for i in range(n)]


def submit(cluster: SparkBed, topology_file, *args: str, env: dict[str, str] | None = None, duration: float = 8,
           timeout: float = 120, while_running=None) -> subprocess.CompletedProcess:
    """``squall submit`` on host 0 as a user runs it, to its end; ``while_running(process)`` is
    called once it started."""
    argv = [sys.executable, "-m", "squall", "submit", str(topology_file), "--master", cluster.master_url,
            "--conf", f"spark.driver.host={Bed.address(0)}", "--duration", str(duration),
            "-c", "worker.heartbeat.frequency.secs=0.5", *args]
    # files, not pipes: nobody reads them while it runs, and a full pipe would stall the driver
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        process = cluster.bed.start(0, argv, env=env or cluster.driver_env(), stdout=out, stderr=err, text=True)
        try:
            if while_running is not None:
                try:
                    while_running(process)
                except Exception as e:
                    process.kill()
                    process.wait()
                    err.seek(0)
                    raise AssertionError(f"{e}; squall submit's stderr ends: {err.read()[-3000:]}") from e
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(argv, process.returncode, out.read(), err.read())


def squall_worker_on(bed: Bed, host: int) -> bool:
    """A Python process (a Squall worker: Spark's own daemons are Java) listens on ``host``."""
    return any(program.startswith("python") for _, program in listeners(bed, host))


def write_topology(tmp_path, lines: list[str]):
    out = tmp_path / "out"
    out.mkdir()
    path = tmp_path / "hosts_wordcount.py"
    (tmp_path / "wordlib.py").write_text(WORDLIB)
    path.write_text(TOPOLOGY.format(lines=lines, out=str(out), master=Bed.address(0)))
    return path, out


def test_a_topology_spans_two_hosts_its_executors_running_the_drivers_python(spark_bed, tmp_path):
    lines = lines_of(3000)
    path, out = write_topology(tmp_path, lines)
    bed, listening = spark_bed.bed, {}

    def look(process) -> None:  # while the topology runs: who listens where, on every host
        both = lambda: squall_worker_on(bed, 1) and squall_worker_on(bed, 2)  # noqa: E731
        # a submit that ended (or failed) first is reported below with its output
        wait_until(lambda: process.poll() is not None or both(), timeout=60, interval=0.3,
                   message="a Squall worker listens on each worker host")
        if process.poll() is None:
            listening.update({host: listeners(bed, host) for host in range(3)})

    done = submit(spark_bed, path, while_running=look)
    assert done.returncode == 0, done.stderr[-3000:]
    assert listening, f"squall submit ended before a Squall worker listened on each worker host: {done.stderr[-3000:]}"
    files = [json.loads(p.read_text()) for p in out.iterdir()]
    assert len(files) == 2, files
    # every line's words counted once, each word by one task (fields grouping across hosts)
    assert sum((Counter(f["counts"]) for f in files), Counter()) == Counter(w for line in lines for w in line.split())
    assert not set(files[0]["counts"]) & set(files[1]["counts"])
    # one worker on each worker host, and words crossed between them in both directions
    assert {f["host"] for f in files} == WORKER_HOSTS
    assert all(set(f["senders"]) == WORKER_HOSTS for f in files), files
    # the executors ran the driver's interpreter, though no variable or setting named it
    assert {f["python"] for f in files} == {sys.executable}
    # nothing listened on every interface: Spark's daemons, its executors, the driver (its web
    # UI included) and Squall's workers each on their host's address, or on loopback
    for host, sockets in listening.items():
        for address, program in sockets:
            ip = address.rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
            assert ip in (Bed.address(host), "127.0.0.1"), (host, address, program, listening)


def test_an_executor_without_squalls_dependencies_fails_in_one_line_naming_module_host_and_fix(spark_bed, tmp_path):
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    path, _ = write_topology(tmp_path, lines_of(10))
    done = submit(spark_bed, path, "--conf", f"spark.pyspark.python={bare}/bin/python")
    assert done.returncode == 1
    [line] = [line for line in done.stderr.splitlines() if line.startswith("squall: error:")]
    assert f"the executors' Python ({bare}/bin/python) on 10.77.0." in line
    # whichever of Squall's dependencies the executors import first
    assert re.search(r"has no module '(cloudpickle|msgspec|msgpack|zmq)'", line), line
    assert "--archives env.tar.gz#env" in line, line
    assert "Traceback" not in done.stderr and "PythonException" not in done.stderr, done.stderr[-3000:]


WAITING_FOR_EXECUTORS = "waiting for Spark executors"


@pytest.mark.timeout(360)
def test_executors_slow_to_register_are_waited_for_and_a_capped_cluster_is_refused_at_once(spark_bed, tmp_path):
    """Each worker host launches its executor's JVM 20 s late, as a container being scheduled or a
    loaded host would. A cluster capped below the topology's workers is refused at once, without
    waiting; otherwise the driver waits for the executors, says so once, and the topology runs."""
    spark_bed.restart_workers(slow_executor_java(str(tmp_path / "slow-java"), 20, java_executable()))
    try:
        lines = lines_of(1000)
        path, out = write_topology(tmp_path, lines)
        capped = submit(spark_bed, path, "--conf", "spark.cores.max=1")
        assert capped.returncode == 1, capped.stderr[-3000:]
        [line] = [line for line in capped.stderr.splitlines() if line.startswith("squall: error:")]
        assert line == (f"squall: error: topology 'hosts_wordcount' needs 2 Spark task slots (one per worker: "
                        f"topology.workers=2) but the cluster ({spark_bed.master_url}) has 1 (spark.cores.max=1); "
                        f"lower topology.workers or give the cluster more executors or cores"), capped.stderr[-3000:]
        assert WAITING_FOR_EXECUTORS not in capped.stderr
        spark_bed.wait_for_no_application()
        # Spark's bound on the wait, raised as a user would for a cluster slower than its 30 s default
        done = submit(spark_bed, path, "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=2min",
                      timeout=240)
        assert done.returncode == 0, done.stderr[-3000:]
        waiting = [line for line in done.stderr.splitlines() if WAITING_FOR_EXECUTORS in line]
        assert waiting == ["topology 'hosts_wordcount': waiting for Spark executors: 0 of 2 task slots registered "
                           "(for up to 120s: spark.scheduler.maxRegisteredResourcesWaitingTime)"], done.stderr[-3000:]
        files = [json.loads(p.read_text()) for p in out.iterdir()]
        assert {f["host"] for f in files} == WORKER_HOSTS
        assert sum((Counter(f["counts"]) for f in files), Counter()) == Counter(w for ln in lines for w in ln.split())
    finally:
        spark_bed.wait_for_no_application()
        spark_bed.restart_workers()


def test_too_few_task_slots_are_refused_once_the_executors_had_their_time(spark_bed, tmp_path):
    """Two one-core workers and no cap (no spark.cores.max): more workers could join, so the driver
    waits Spark's bound (its two executors register meanwhile), then refuses."""
    path, _ = write_topology(tmp_path, lines_of(10))
    done = submit(spark_bed, path, "-c", "topology.workers=3",
                  "--conf", "spark.scheduler.maxRegisteredResourcesWaitingTime=20s")
    assert done.returncode == 1, done.stderr[-3000:]
    waiting = [line for line in done.stderr.splitlines() if WAITING_FOR_EXECUTORS in line]
    assert len(waiting) == 1 and re.fullmatch(r"topology 'hosts_wordcount': waiting for Spark executors: [0-2] of 3 "
                                              r"task slots registered \(for up to 20s: "
                                              r"spark.scheduler.maxRegisteredResourcesWaitingTime\)", waiting[0]), \
        done.stderr[-3000:]
    [line] = [line for line in done.stderr.splitlines() if line.startswith("squall: error:")]
    assert line.endswith(f"needs 3 Spark task slots (one per worker: topology.workers=3) but the cluster "
                         f"({spark_bed.master_url}) has 2 after waiting 20s for its executors to register "
                         f"(spark.scheduler.maxRegisteredResourcesWaitingTime); lower topology.workers or give the "
                         f"cluster more executors or cores"), line


def pack_squall_env(tmp_path) -> str:
    """A virtualenv with what Squall's workers import, packed with the standard library (as
    venv-pack would): env.tar.gz, whose bin/python runs where it is unpacked."""
    env = tmp_path / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env)], check=True)
    site = next((env / "lib").glob("python3*")) / "site-packages"
    here = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "zmq")))
    wanted = ("zmq", "pyzmq", "msgspec", "msgpack", "cloudpickle")
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(env, arcname=".", filter=lambda info: info)
        for name in os.listdir(here):
            if name.split("-")[0].split(".")[0].lower() in wanted:
                tar.add(os.path.join(here, name), arcname=os.path.join(".", os.path.relpath(site, env), name))
    return str(archive)


def test_a_packed_virtualenv_shipped_with_archives_runs_the_workers(spark_bed, tmp_path):
    archive = pack_squall_env(tmp_path)
    lines = lines_of(500)
    path, out = write_topology(tmp_path, lines)
    # spark.pyspark.python from spark-defaults.conf, as a cluster's admin would set it
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("# the packed env, unpacked in each executor's directory\n"
                                                  "spark.pyspark.python   ./env/bin/python\n")
    done = submit(spark_bed, path, "--archives", f"{archive}#env",
                  env=spark_bed.driver_env(SPARK_CONF_DIR=str(conf_dir)))
    assert done.returncode == 0, done.stderr[-3000:]
    files = [json.loads(p.read_text()) for p in out.iterdir()]
    assert sum((Counter(f["counts"]) for f in files), Counter()) == Counter(w for line in lines for w in line.split())
    # each worker ran the archive's Python, unpacked in its executor's directory
    assert len(files) == 2 and all(f["python"].endswith("/env/bin/python") for f in files), files
    assert not any(f["python"] == sys.executable for f in files)


RELIABLE_TOPOLOGY = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from process_topologies import at_least_once_topology

topology, config = at_least_once_topology(Path({root!r}), {first!r})
config = {{**config, "topology.workers": 2, "worker.heartbeat.frequency.secs": 0.5}}
"""


@pytest.mark.parametrize("fault", ["host killed", "link cut"])
def test_losing_a_worker_host_reassigns_over_the_host_left_then_grows_back_and_loses_nothing(spark_bed, tmp_path,
                                                                                            fault):
    """The host dies (kill -9 of everything on it, its Spark worker started again later), or its
    link is cut for longer than the worker timeout (its processes run on, unreachable, until the
    link comes back): either way the topology goes on over the host left, then grows back."""
    first = [f"m{i:04d}" for i in range(1500)]
    path = tmp_path / "reliable.py"
    path.write_text(RELIABLE_TOPOLOGY.format(tests=os.path.dirname(__file__), root=str(tmp_path), first=first))
    bed = spark_bed.bed
    lose, restore = ((lambda: bed.kill_host(2), lambda: spark_bed.start_worker(2)) if fault == "host killed"
                     else (lambda: bed.cut(2), lambda: bed.mend(2)))
    stderr = tempfile.TemporaryFile("w+")  # a file, not a pipe: read at the end, a full pipe would stall the driver
    driver = bed.start(0, [sys.executable, "-m", "squall", "submit", str(path), "--master", spark_bed.master_url,
                           "--conf", f"spark.driver.host={Bed.address(0)}", "-c", "supervisor.worker.timeout.secs=6"],
                       env=spark_bed.driver_env(), stdout=subprocess.DEVNULL, stderr=stderr, text=True)

    def sunk() -> set[str]:
        return {line.split()[0] for line in read_lines(tmp_path, "sink-")}

    try:
        wait_until(lambda: len(sunk()) >= 50, timeout=90, interval=0.2, message="50 messages through the sink")
        assert squall_worker_on(bed, 1) and squall_worker_on(bed, 2)
        lose()
        at_loss = len(sunk())
        assert at_loss < len(first), "the loss was not mid-stream"
        # Storm's answer: the executors go to the slot that is left, within the targets' 30 s
        wait_until(lambda: len(sunk()) >= at_loss + 100, timeout=30, interval=0.2,
                   message="processing resumed on the host left")
        if fault == "host killed":
            assert squall_worker_on(bed, 1) and not squall_worker_on(bed, 2)
        restore()  # the host comes back
        wait_until(lambda: squall_worker_on(bed, 2), timeout=60, interval=0.5,
                   message="the topology grown back to a worker on each host")
        second = [f"n{i:04d}" for i in range(100)]
        put_messages(tmp_path, second)
        wanted = set(first) | set(second)
        wait_until(lambda: set(os.listdir(tmp_path / "done")) == wanted, timeout=90, interval=0.2,
                   message="every message acked (moved to done/)")
        assert sunk() == wanted  # nothing lost
        assert squall_worker_on(bed, 1) and squall_worker_on(bed, 2)
    finally:
        os.killpg(driver.pid, signal.SIGTERM)  # as `timeout` or a supervisor stops it: the whole group
        driver.wait(timeout=60)
        with stderr:
            stderr.seek(0)
            err = stderr.read()
    assert "resubmitting its Spark job on 1 worker(s) (requested: 2)" in err, err[-3000:]
    assert "growing back from 1" in err, err[-3000:]
    # the driver's JVM is not in that group: Squall stopped the topology in order, then Spark
    assert driver.returncode == 0 and "squall: stopping 'reliable'" in err and "Traceback" not in err, err[-3000:]


STATEFUL_TOPOLOGY = """
import sys
sys.path.insert(0, {examples!r})
import stateful_wordcount as swc  # a module of the driver's: shipped to the executors

topology = swc.build({path!r}, lines_per_sec={rate})
config = {{"topology.workers": 2, "topology.state.provider": "redis",
          "topology.state.provider.config": {{"host": {redis!r}, "port": 6379}},
          "topology.state.checkpoint.interval.ms": 200, "topology.message.timeout.secs": 5,
          "worker.heartbeat.frequency.secs": 0.5}}
"""


def zookeeper_on(bed: Bed, host: int, directory) -> ZooKeeperServer:
    """ZooKeeper serving on ``host``'s address, port 2181."""
    server = ZooKeeperServer(directory, host=Bed.address(host), port=2181)
    with open(directory / "zookeeper.log", "w") as log:
        bed.start(host, server.argv(), stdout=log, stderr=subprocess.STDOUT)
    probe = f"import socket; socket.create_connection(({server.host!r}, {server.port}), timeout=1)"
    server.wait_ready(lambda: bed.run(host, [sys.executable, "-c", probe]).returncode == 0)
    return server


def squall_on(bed: Bed, host: int, home: str, *args: str) -> subprocess.CompletedProcess:
    """A ``squall`` command run on ``host`` by the user of ``home``."""
    return bed.run(host, ["env", f"SQUALL_HOME={home}", sys.executable, "-m", "squall", *args], timeout=60)


def test_stateful_counts_stay_exact_across_a_lost_host_and_a_killed_driver(spark_bed, tmp_path):
    """State in Redis on host 0, reached over the bed by the workers (and over its unix socket by
    this test): kill -9 of a worker host, then of the driver, then the same submission again.
    The cluster state is in ZooKeeper on host 0: the topology is listed and killed from host 1 by
    a user holding the credentials, and refused to one who does not."""
    bed, redis_dir = spark_bed.bed, tmp_path / "redis"
    redis_dir.mkdir()
    socket_path = str(redis_dir / "redis.sock")
    bed.start(0, [RedisServer.executable(), "--bind", Bed.address(0), "--port", "6379", "--unixsocket", socket_path,
                  "--save", "", "--appendonly", "no", "--dir", str(redis_dir)],
              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    zookeeper = zookeeper_on(bed, 0, tmp_path / "zookeeper")
    cluster = {"storm.zookeeper.servers": [Bed.address(0)],
               "storm.zookeeper.auth.file": str(write_credentials(tmp_path / "zk.auth"))}
    # the driver's user advertises its control socket on host 0's address
    driver_home = user_home(tmp_path, "driver", {**cluster, "storm.local.hostname": Bed.address(0)})
    operator = user_home(tmp_path, "operator", cluster)
    stranger = user_home(tmp_path, "stranger", {**cluster, "storm.zookeeper.auth.file": str(
        write_credentials(tmp_path / "guess.auth", "squall:guess"))})
    words = swc.make_input(str(tmp_path / "words.txt"), 15_000)
    size, expected = os.path.getsize(words), expected_counts(words)
    path = tmp_path / "bedcount.py"
    path.write_text(STATEFUL_TOPOLOGY.format(examples=os.path.join(os.path.dirname(__file__), "..", "examples"),
                                             path=words, rate=1000, redis=Bed.address(0)))
    topology = swc.build(words)  # its layout, to read the committed state
    # as submitted (the task ids follow from the workers: one acker each), but through the socket
    state = {"topology.workers": 2, "topology.state.provider": "redis",
             "topology.state.provider.config": {"unix_socket_path": socket_path}}
    wait_until(lambda: os.path.exists(socket_path), timeout=10, message="Redis listening")

    def start_driver(log: str) -> subprocess.Popen:
        with open(tmp_path / log, "w") as out:
            return bed.start(0, [sys.executable, "-m", "squall", "submit", str(path), "--master", spark_bed.master_url,
                                 "--conf", f"spark.driver.host={Bed.address(0)}"],
                             env=spark_bed.driver_env(SQUALL_HOME=driver_home), stdout=subprocess.DEVNULL, stderr=out)

    def offset() -> int:
        try:
            return committed_offset("bedcount", topology, state)
        except StateProviderError:  # not claimed yet: the driver claims the location at submit
            return -1

    def committed(fraction: float) -> None:
        wait_until(lambda: offset() >= fraction * size, timeout=90, interval=0.2,
                   message=f"{fraction:.0%} of the file committed")

    driver = start_driver("driver-1.log")
    committed(0.15)
    listed = squall_on(bed, 1, operator, "list")
    assert listed.returncode == 0 and f"{driver.pid}" in listed.stdout, listed
    refused = squall_on(bed, 1, stranger, "list")
    assert refused.returncode == 2 and f"ZooKeeper {zookeeper.servers}/squall refuses access" in refused.stderr, \
        refused
    bed.kill_host(2)
    committed(0.35)  # on the host left
    os.killpg(driver.pid, signal.SIGKILL)  # the driver (its JVM ends with it: its stdin closes)
    driver.wait()
    assert offset() < size, "the driver's kill was not mid-stream"
    spark_bed.start_worker(2)
    spark_bed.wait_for_workers(WORKER_HOSTS)
    spark_bed.wait_for_no_application()  # the killed driver's executors gone
    # the same name again, though the killed driver's ZooKeeper session may not have expired yet
    driver = start_driver("driver-2.log")
    try:
        committed(1.0)
        assert counts_of("bedcount", topology, state) == expected
        killed = squall_on(bed, 1, operator, "kill", "bedcount", "-w", "0")
        assert killed.returncode == 0, killed
        driver.wait(60)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    assert driver.returncode == 0, (tmp_path / "driver-2.log").read_text()[-3000:]
    assert "killed by squall kill" in (tmp_path / "driver-2.log").read_text()


def test_without_root_the_bed_says_why(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert bed_unavailable() == "the bed needs root (ip netns add)"
