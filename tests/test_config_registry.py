"""The configuration registry (squall/api/defaults.py): every key defined once with its default,
validator and doc; bad values named; unknown keys warned about at submit and by ``squall plan``,
the topology's own keys left alone; ``squall plan`` and ``config_table`` show the docs."""

from __future__ import annotations

import ast
import logging
import pathlib
import re

import pytest

from helpers import BasicSink, feeder_builder
from squall import Config, TopologyBuilder
from squall.ops.cli import main
from squall.ops.command.plan import CONFIG_HEADER
from squall.api.config import checked_config, config_table, merged_config
from squall.api.defaults import DEFAULTS, KEYS, STORM_KEYS_NOT_USED, ConfigKey, integer
from squall.testing import wait_until
from squall.api.windowing import Count, Duration
from squall.api.windowing.config import WindowConfig

SQUALL = pathlib.Path(__file__).resolve().parent.parent / "squall"
REGISTRY_FILES = ("api/defaults.py", "api/config.py")  # where keys are defined, as strings


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "squall.config" and r.levelno == logging.WARNING]


# -- the registry ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(KEYS))
def test_every_key_has_a_one_line_doc_and_a_validator_its_default_passes(name):
    key = KEYS[name]
    assert key.name == name
    assert key.doc and "\n" not in key.doc and len(key.doc) <= 100, key.doc
    key.check(name, key.default)  # raises if the default is not valid
    with pytest.raises(ValueError) as info:
        key.check(name, object())
    assert str(info.value).startswith(f"config {name!r} must be "), info.value


def test_defaults_are_the_registry_defaults_but_the_per_component_keys():
    assert DEFAULTS == {name: key.default for name, key in KEYS.items() if not key.component_only}
    assert {name for name, key in KEYS.items() if key.component_only} == set(WindowConfig().to_conf())


def test_every_key_has_its_config_constant_storms_spelling_included():
    for name, key in KEYS.items():
        assert getattr(Config, key.constant) == name
    assert Config.TOPOLOGY_WORKERS == "topology.workers"
    assert Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL == "topology.state.checkpoint.interval.ms"
    assert Config.TOPOLOGY_BOLTS_SLIDING_INTERVAL_COUNT == "topology.bolts.window.sliding.interval.count"


def test_every_key_is_read_by_squall():
    """No key is registered that nothing reads: each is named (by its string or its Config
    constant) somewhere in squall/ besides the registry and Config's setters."""
    sources = "\n".join(path.read_text() for path in SQUALL.rglob("*.py")
                        if path.relative_to(SQUALL).as_posix() not in REGISTRY_FILES)
    unread = [name for name, key in KEYS.items() if name not in sources and f".{key.constant}" not in sources]
    assert unread == []


def test_squall_names_every_key_by_its_config_constant():
    """One spelling per key: outside the registry, squall/ names a registered key only as
    ``Config.<CONSTANT>``, never as a string (messages and docstrings may quote it)."""
    spelled = []
    for path in SQUALL.rglob("*.py"):
        if path.relative_to(SQUALL).as_posix() in REGISTRY_FILES:
            continue
        tree = ast.parse(path.read_text())
        quoted = {id(n) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for n in ast.walk(node)}
        quoted |= {id(node.body[0].value) for node in ast.walk(tree)
                   if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                   and node.body and isinstance(node.body[0], ast.Expr)}
        spelled += [f"{path.relative_to(SQUALL)}:{node.lineno}: {node.value!r}" for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and node.value in KEYS and id(node) not in quoted]
    assert spelled == [], "use Config.<CONSTANT> for these keys:\n" + "\n".join(spelled)


@pytest.mark.parametrize("name", sorted(STORM_KEYS_NOT_USED))
def test_the_keys_read_by_nothing_are_gone(name):
    assert name not in KEYS and name not in DEFAULTS
    assert not hasattr(Config, name.upper().replace(".", "_"))


def test_a_key_cannot_have_a_default_its_validator_refuses_or_a_long_doc():
    with pytest.raises(ValueError, match="config 'x.size' must be an integer >= 1, got 0"):
        ConfigKey("x.size", 0, integer(1), "Size.")
    with pytest.raises(ValueError, match="one line"):
        ConfigKey("x.size", 1, integer(1), "Size.\nMore.")


# -- validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, value, what", [
    ("topology.workers", 0, "an integer >= 1"),
    # ZeroMQ delivers nothing through a CURVE link's receive buffer of 1 (tests/test_acking_properties.py
    # runs 2, the least, across worker processes)
    ("topology.receiver.buffer.size", 1, "an integer >= 2"),
    ("topology.max.spout.pending", "10", "None or an integer >= 1"),
    ("topology.message.timeout.secs", float("nan"), "a number > 0"),
    ("topology.debug", "yes", "true or false"),  # no validator before the registry
    ("supervisor.slots.ports", [6700, 70000], "a list of port numbers (1 to 65535)"),
    ("topology.kryo.register", ["com.example.Point"], "a list of (class, serializer) pairs"),
    ("topology.state.provider", "", "None or a non-empty string"),
    ("topology.worker.gc.thresholds", [1, 2, 3, 4], "None or a list of 1 to 3 integers >= 0"),
])
def test_a_bad_value_is_refused_naming_the_key_what_it_takes_and_the_value(name, value, what):
    with pytest.raises(ValueError) as info:
        merged_config({name: value})
    assert str(info.value).startswith(f"config {name!r} must be {what}")
    assert str(info.value).endswith(f"got {value!r}")


def test_a_bad_component_value_names_the_component():
    with pytest.raises(ValueError, match=r"^component 'count': config 'topology.tick.tuple.freq.secs' must be"):
        checked_config("t", {}, {"count": {"topology.tick.tuple.freq.secs": 0}})


# -- unknown keys ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name, expected", [
    ("topology.worker", "topology 't': config key 'topology.worker' is not a Squall setting; "
                        "did you mean 'topology.workers'?"),
    ("topolgy.max.spout.pending", "did you mean 'topology.max.spout.pending'?"),
    ("supervisor.childopts", "topology 't': config key 'supervisor.childopts' is not a Squall setting: "
                             "Squall does not use it"),
    ("topology.stats.sample.rate", "not a Squall setting: Squall measures latencies on the first tuple"),
    ("storm.zookeeper.auth.payload", "from storm.zookeeper.auth.file (mode 0600), never from a config"),
])
def test_a_key_that_looks_like_a_setting_but_is_none_is_warned_about(caplog, name, expected):
    with caplog.at_level(logging.WARNING, logger="squall.config"):
        checked_config("t", {name: 2}, {})
    (message,) = warnings_of(caplog)
    assert expected in message


def test_the_topologys_own_keys_and_registered_ones_are_not_warned_about(caplog):
    window = WindowConfig(length=Duration(5), sliding=Count(2), timestamp_field="ts").to_conf()
    with caplog.at_level(logging.WARNING, logger="squall.config"):
        checked_config("t", {"my.app.rate": 3, "my.workers": 2, "kafka.topic": "x", "topology.workers": 2},
                       {"windowed": window, "count": {"topology.tick.tuple.freq.secs": 1, "db.url": "x"}})
    assert warnings_of(caplog) == []


def test_submit_warns_about_the_topologys_and_a_components_unknown_keys(cluster, caplog):
    feeder, builder = feeder_builder(["word"])
    builder.set_bolt("sink", BasicSink()).shuffle_grouping("spout").add_configuration(
        "topology.tick.tuple.freq.sec", 5)
    with caplog.at_level(logging.WARNING, logger="squall.config"):
        cluster.submit_topology("typos", {"topology.max.spout.pendng": 10, "app.mode": "fast"},
                                builder.create_topology())
    assert warnings_of(caplog) == [
        "topology 'typos': config key 'topology.max.spout.pendng' is not a Squall setting; "
        "did you mean 'topology.max.spout.pending'?",
        "topology 'typos', component 'sink': config key 'topology.tick.tuple.freq.sec' is not a Squall "
        "setting; did you mean 'topology.tick.tuple.freq.secs'?",
    ]
    # a warning, not an error: the topology runs
    assert cluster.get_topology_info("typos")["status"] == "ACTIVE"


# -- an implemented key ----------------------------------------------------------------------------


def test_topology_debug_off_logs_no_emit(cluster, caplog):
    """topology.debug on logs every emit (tests/test_api.py); off, none is logged."""
    feeder, builder = feeder_builder(["word"], spout_id="words")
    with caplog.at_level(logging.DEBUG, logger="squall.executor"):
        cluster.submit_topology("quiet", Config().set_debug(False), builder.create_topology())
        feeder.feed(["hello"], msg_id=1)
        wait_until(lambda: feeder.acked == [1], timeout=5)  # emitted (and its tree completed) by then
    assert not [r for r in caplog.records if "'hello'" in r.getMessage()]


# -- the table and squall plan ---------------------------------------------------------------------


def test_config_table_rows_registered_keys_in_order_then_the_topologys_own():
    rows = config_table(merged_config({"topology.workers": 3, "b.key": 1, "a.key": 2}))
    assert [row["key"] for row in rows] == [*DEFAULTS, "a.key", "b.key"]
    workers, acker = rows[0], rows[1]
    assert workers == {"key": "topology.workers", "value": 3, "default": 1, "doc": KEYS["topology.workers"].doc,
                       "changed": True, "registered": True, "storm": True}
    assert acker["changed"] is False and acker["value"] is None
    assert rows[-1] == {"key": "b.key", "value": 1, "default": None, "doc": "", "changed": True,
                        "registered": False, "storm": False}


PLAN_FILE = """
from squall import BasicBolt, Spout, TopologyBuilder


class Words(Spout):
    outputs = ["word"]

    def next_tuple(self):
        pass


builder = TopologyBuilder()
builder.set_spout("words", Words())
topology = builder.create_topology()
config = {"topology.workers": 2, "app.rate": 5}
"""


def test_squall_plan_shows_every_key_its_value_a_mark_when_changed_and_its_doc(tmp_path, capsys, caplog):
    path = tmp_path / "words.py"
    path.write_text(PLAN_FILE)
    with caplog.at_level(logging.WARNING, logger="squall.config"):
        assert main(["plan", str(path), "-c", "topology.debug=true", "-c", "topology.worker=3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    table = lines[lines.index(CONFIG_HEADER) + 1:]
    assert len(table) == len(DEFAULTS) + 2  # app.rate and the typo
    by_key = {line[4:].split()[0]: line for line in table}

    def shown(mark, key, value):
        return re.fullmatch(rf"  {re.escape(mark)} {re.escape(key)} +{value} +{re.escape(KEYS[key].doc)}", by_key[key])

    assert shown("*", "topology.workers", "2") and shown("*", "topology.debug", "true")
    assert shown(" ", "topology.message.timeout.secs", "30") and shown(" ", "topology.acker.executors", "null")
    assert re.fullmatch(r"  \* app\.rate +5", by_key["app.rate"])
    assert warnings_of(caplog) == ["topology 'words': config key 'topology.worker' is not a Squall setting; "
                                   "did you mean 'topology.workers'?"]


def test_each_run_gets_a_log_directory_and_only_the_newest_are_kept(tmp_path, monkeypatch):
    from squall.api.config import run_log_dir

    monkeypatch.setenv("SQUALL_HOME", str(tmp_path))
    runs = [run_log_dir("word/count", retained=3) for _ in range(5)]
    parent = tmp_path / "logs" / "word%2Fcount"
    assert all(run.parent == parent for run in runs)
    assert sorted(parent.iterdir()) == sorted(runs[-3:])  # the two oldest removed
