"""``squall state NAME``: what a stateful topology committed, read with the state settings its
run recorded (or a topology file's).

The quick tests read the state examples/stateful_wordcount.py commits over a small input, in
SQLite and in Redis, started as ``squall run`` starts it (its settings recorded by
``announce_state``) on an in-process cluster. The processes test runs ``squall run`` itself,
kill -9 of a worker, a stop and a second run that resumes, and reads the counts with
``python -m squall state`` once it is stopped."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import stat
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from command_line import Run
from helpers import REPO, squall_cli
from redis_server import redis_server  # noqa: F401  (a fixture)
from squall import LocalCluster
from squall.api.config import squall_home
from squall.ops.cli import _file_topology, build_parser, main
from squall.ops.command import UsageError
from squall.ops.command.state import announce_state, record_rescaled, recorded_settings, settings_path
from squall.ops.command.state_report import state_report
from squall.testing import wait_until

sys.path.insert(0, os.path.join(REPO, "examples"))
import stateful_wordcount  # noqa: E402 - the example's input maker

EXAMPLE = os.path.join(REPO, "examples", "stateful_wordcount.py")
LINES = 2000  # ~12,000 words: "the" alone is counted more than 1,000 times


def words_of(path: Path) -> Counter:
    return Counter(path.read_text().split())


def committed_counts(name: str) -> Counter:
    """The counts topology ``name`` committed (empty before its first commit), as ``squall
    state NAME --component count --json`` gives them, summed over the count's tasks."""
    try:
        report = json.loads(state_report(recorded_settings(name), "count", as_json=True))
    except UsageError:  # nothing committed yet
        return Counter()
    counts: Counter = Counter()
    for task in report["tasks"]:
        counts.update({entry["key"]: entry["value"] for entry in task["entries"]})
    return counts


@contextlib.contextmanager
def counted(name: str, words_file: Path, *conf: str) -> Iterator[None]:
    """The example counting ``words_file`` under ``name`` with ``-c`` settings ``conf``, started as
    ``squall run`` starts it (its state settings recorded) on an in-process cluster, until its
    committed counts are those of the file; then stopped."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SQUALL_WORDS_FILE", str(words_file))  # the example reads its input from there
        args = build_parser().parse_args(["run", EXAMPLE, "--name", name, "-c", "topology.acker.executors=1",
                                          "-c", "topology.state.checkpoint.interval.ms=100", *conf])
        _, topology, config = _file_topology(args)
        announce_state(name, topology, config, fresh=False)
        with LocalCluster() as cluster:
            cluster.submit_topology(name, config, topology)
            expected = words_of(words_file)
            wait_until(lambda: committed_counts(name) == expected, timeout=30, interval=0.1,
                       message="the counts of the whole input committed")
            yield


def state(capsys, *args: str) -> tuple[int, str, str]:
    """``squall state ARGS`` run in this process: its exit status, stdout and stderr."""
    status = main(["state", *args])
    out, err = capsys.readouterr()
    return status, out, err


@pytest.fixture(scope="module")
def words_file(tmp_path_factory) -> Path:
    return Path(stateful_wordcount.make_input(str(tmp_path_factory.mktemp("input") / "words.txt"), LINES))


@pytest.fixture(scope="module")
def sqlite_name(words_file) -> str:
    """A topology that committed the counts of ``words_file`` to SQLite (squall run's default) and stopped."""
    name = f"state-{uuid.uuid4().hex[:8]}"
    with counted(name, words_file):
        pass
    return name


@pytest.mark.timeout(60)
def test_the_overview_gives_the_last_commit_and_each_stateful_components_keys(sqlite_name, words_file, capsys):
    status, out, err = state(capsys, sqlite_name)
    assert status == 0 and err == ""
    lines = out.splitlines()
    location = squall_home() / "state" / sqlite_name
    assert lines[0] == f"topology {sqlite_name!r}: state provider 'sqlite' at {location}"
    assert re.fullmatch(r"last commit: \d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(checkpoint [\d,]+\), \d+s ago", lines[1])
    assert lines[2] == "key groups: 128 (task i of a stateful bolt's n holds groups i*128//n to (i+1)*128//n - 1)"
    assert lines[4].split() == ["component", "tasks", "keys", "keys", "by", "task"]
    rows = {line.split()[0]: line for line in lines[5:]}
    assert sorted(rows) == ["count", "lines"]  # the stateful ones, not split
    count = re.fullmatch(r"count\s+2\s+(\d+)\s+(\d+): (\d+), (\d+): (\d+)", rows["count"])
    assert count, rows["count"]
    total, _, first, _, second = map(int, count.groups())
    assert total == first + second == len(words_of(words_file))
    assert re.fullmatch(r"lines\s+1\s+1\s+\d+: 1", rows["lines"])


@pytest.mark.timeout(60)
def test_after_a_rebalance_grew_the_counts_tasks_the_state_is_read_from_all_of_them(words_file, capsys):
    name = f"state-{uuid.uuid4().hex[:8]}"
    args = build_parser().parse_args(["run", EXAMPLE, "--name", name, "-c", "topology.acker.executors=1",
                                      "-c", "topology.state.checkpoint.interval.ms=100"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SQUALL_WORDS_FILE", str(words_file))
        _, topology, config = _file_topology(args)
        announce_state(name, topology, config, fresh=False)
        with LocalCluster() as cluster:
            cluster.on_state_rescaled = record_rescaled  # as squall run sets it
            cluster.submit_topology(name, config, topology)
            cluster.rebalance(name, wait_secs=0, executors={"count": 3})
            wait_until(lambda: committed_counts(name) == words_of(words_file), timeout=30, interval=0.1,
                       message="the counts of the whole input committed, on 3 tasks")
    capsys.readouterr()
    status, out, _ = state(capsys, name)
    count = next(line for line in out.splitlines() if line.startswith("count"))
    assert status == 0 and re.match(r"count\s+3\s+\d+\s+\d+: \d+, \d+: \d+, \d+: \d+$", count), count


@pytest.mark.timeout(60)
def test_a_components_values_are_its_committed_counts_in_text_and_json(sqlite_name, words_file, capsys):
    expected = words_of(words_file)
    status, out, _ = state(capsys, sqlite_name, "--component", "count", "--json")
    assert status == 0
    report = json.loads(out)
    assert report["topology"] == sqlite_name and report["provider"] == "sqlite" and report["component"] == "count"
    assert isinstance(report["txid"], int) and report["committed_at"] > 0 and report["key_groups"] == 128
    assert [task["task"] for task in report["tasks"]] == recorded_settings(sqlite_name).tasks["count"]
    counts: Counter = Counter()
    for task in report["tasks"]:
        assert task["keys"] == len(task["entries"])
        counts.update({entry["key"]: entry["value"] for entry in task["entries"]})
    assert counts == expected

    status, out, _ = state(capsys, sqlite_name, "--component", "count")
    assert status == 0
    assert expected["the"] >= 1000
    assert f'  "the": {expected["the"]:,}' in out.splitlines()  # human numbers
    assert len([line for line in out.splitlines() if line.startswith("  ")]) == len(expected)


@pytest.mark.timeout(60)
def test_one_key_is_read_as_json_or_as_a_string(sqlite_name, words_file, capsys):
    expected = words_of(words_file)
    status, out, _ = state(capsys, sqlite_name, "--component", "count", "--key", "the")
    assert status == 0
    assert re.search(rf'^component \'count\', key "the":\n  task \d+: {expected["the"]:,}$', out, re.MULTILINE), out
    for key in ("the", '"the"'):
        status, out, _ = state(capsys, sqlite_name, "--component", "count", "--key", key, "--json")
        assert status == 0
        report = json.loads(out)
        assert report["key"] == "the" and [task["value"] for task in report["tasks"]] == [expected["the"]]
    # the spout's state: its byte offset, at the end of the input
    status, out, _ = state(capsys, sqlite_name, "--component", "lines", "--key", "offset", "--json")
    assert status == 0
    assert [task["value"] for task in json.loads(out)["tasks"]] == [words_file.stat().st_size]


@pytest.mark.timeout(60)
def test_a_topology_file_gives_the_same_settings_as_the_recorded_ones(sqlite_name, words_file, capsys, monkeypatch):
    monkeypatch.setenv("SQUALL_WORDS_FILE", str(words_file))
    recorded = state(capsys, sqlite_name, "--component", "count", "--json")
    from_file = state(capsys, sqlite_name, "--component", "count", "--json", "--topology", EXAMPLE,
                      "-c", "topology.acker.executors=1")
    assert recorded[0] == from_file[0] == 0
    assert json.loads(recorded[1]) == json.loads(from_file[1])


@pytest.mark.timeout(60)
def test_the_recorded_settings_are_private_to_the_user(sqlite_name):
    path = settings_path(sqlite_name)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    record = json.loads(path.read_text())
    assert record["provider"] == "sqlite"
    assert record["provider_config"] == {"path": str(squall_home() / "state" / sqlite_name)}
    assert set(record["tasks"]) == {"count", "lines"}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("args, message", [
    (["never-run"], "no state known for topology 'never-run': no settings recorded in {home}/state-settings; run it "
                    "with squall run/submit first, or give --topology FILE"),
    (["{name}", "--component", "split"], "topology '{name}' has no stateful component 'split' (its stateful "
                                         "components: count, lines)"),
    (["{name}", "--component", "count", "--key", "nope"],
     "component 'count' of topology '{name}' has no key \"nope\" in the state committed at checkpoint {txid}"),
    (["{name}", "--component", "count", "--key", "5"],
     "component 'count' of topology '{name}' has no key 5 in the state committed at checkpoint {txid} (--key is "
     "read as JSON: the string is --key '\"5\"')"),
    (["{name}", "--key", "the"], "--key needs --component: the key of which component's state?"),
    (["{name}", "-c", "topology.workers=1"], "-c and --checkpoint-dir go with --topology FILE: without it, the "
                                             "settings the last run of '{name}' recorded are used"),
    (["wc", "--topology", os.path.join(REPO, "examples", "wordcount.py")],
     "topology 'wc' has no stateful component: it keeps no state"),
    (["other", "--topology", EXAMPLE], "topology 'other' has committed nothing yet to state provider 'sqlite' at "
                                       "{home}/state/other: its first checkpoint commits once it runs (every "
                                       "topology.state.checkpoint.interval.ms)"),
    (["{name}", "--topology", EXAMPLE, "-c", "topology.state.provider=memory"],
     "topology '{name}' keeps its state in the memory of its process (topology.state.provider 'memory'): no other "
     "process can read it"),
])
def test_each_refusal_is_one_line_with_status_2(sqlite_name, words_file, capsys, monkeypatch, args, message):
    monkeypatch.setenv("SQUALL_WORDS_FILE", str(words_file))
    txid = json.loads(state(capsys, sqlite_name, "--json")[1])["txid"]
    fill = {"name": sqlite_name, "home": squall_home(), "txid": f"{txid:,}"}
    status, out, err = state(capsys, *(arg.format(**fill) for arg in args))
    assert (status, out, err) == (2, "", f"squall: error: {message.format(**fill)}\n")
    assert not (squall_home() / "state" / "other").exists(), "reading created the location"


@pytest.mark.timeout(60)
def test_the_state_in_redis_is_read_with_the_recorded_settings(redis_server, words_file, capsys):  # noqa: F811
    name = f"state-redis-{uuid.uuid4().hex[:8]}"
    with counted(name, words_file, "-c", "topology.state.provider=redis",
                 "-c", f"topology.state.provider.config={json.dumps(redis_server.config())}"):
        status, out, _ = state(capsys, name)  # while it runs
        assert status == 0
        assert out.splitlines()[0] == (f"topology {name!r}: state provider 'redis' at 127.0.0.1:{redis_server.port} "
                                       f"db 0, keys squall:{name}:*")
        assert out.splitlines()[2] == "key groups: none (a key goes to its hash modulo the task count: task counts " \
                                      "are fixed)"
    status, out, _ = state(capsys, name, "--component", "count", "--json")
    assert status == 0
    counts: Counter = Counter()
    for task in json.loads(out)["tasks"]:
        counts.update({entry["key"]: entry["value"] for entry in task["entries"]})
    assert counts == words_of(words_file)


# -- squall run, kill -9, a second run ---------------------------------------------------------------


@pytest.fixture
def runs(tmp_path) -> Iterator[list[Run]]:
    """The ``squall run``s a test starts; those still going at its end are stopped (their workers with them)."""
    started: list[Run] = []
    yield started
    for run in started:
        if run.proc.poll() is None:
            run.proc.send_signal(signal.SIGTERM)
            try:
                run.proc.wait(timeout=20)
            except Exception:  # noqa: BLE001 - stuck: killed, whatever it was
                run.proc.kill()
                run.proc.wait()


@pytest.mark.processes
@pytest.mark.timeout(90)
def test_after_kill_9_and_a_second_run_squall_state_prints_the_counts_of_the_input(tmp_path, monkeypatch, runs):
    words = Path(stateful_wordcount.make_input(str(tmp_path / "words.txt"), 100_000))  # ~3 s of counting
    expected = words_of(words)
    monkeypatch.setenv("SQUALL_WORDS_FILE", str(words))
    name = f"state-kill9-{uuid.uuid4().hex[:8]}"
    args = [EXAMPLE, "--name", name, "-c", "supervisor.slots.ports=[]", "-c", "ui.port=0"]

    def stop(run: Run) -> None:
        run.proc.send_signal(signal.SIGTERM)
        assert run.proc.wait(timeout=30) == 0, run.stderr()

    first = Run(tmp_path, args)
    runs.append(first)
    first.wait_running()
    workers = [int(pid) for pid in re.findall(r"\(pid (\d+)\)", first.stderr())]
    assert len(workers) == 2, first.stderr()
    wait_until(lambda: committed_counts(name), timeout=30, interval=0.1, message="a first commit with counts")
    os.kill(workers[-1], signal.SIGKILL)
    wait_until(lambda: "died with exit code -9" in first.stderr(), timeout=20, message="the worker's death seen")
    stop(first)

    second = Run(tmp_path, args)
    runs.append(second)
    second.wait_running()
    assert f"squall: resuming {name!r} from the state committed at" in second.stderr()
    wait_until(lambda: committed_counts(name) == expected, timeout=40, interval=0.2,
               message="the counts of the whole input committed")
    stop(second)

    done = squall_cli("state", name, "--component", "count", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    counts: Counter = Counter()
    for task in json.loads(done.stdout)["tasks"]:
        counts.update({entry["key"]: entry["value"] for entry in task["entries"]})
    assert counts == expected
    done = squall_cli("state", name, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert re.search(rf"^count\s+2\s+{len(expected)}\s", done.stdout, re.MULTILINE), done.stdout
