"""The state providers (memory, SQLite, Redis) against the StateProvider/TaskStore contract:
round trips, recovery to a committed txid, deletes, idempotent commits, durability across a
new provider object and across a killed process, and check's refusals."""

from __future__ import annotations

import json
import re
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from helpers import connects
from redis_server import redis_client_module, redis_server  # noqa: F401  (a fixture)
from squall.api.state.provider import Commit, StateProvider, StateProviderError, provider_for
from squall.testing import RedisServer

pytestmark = pytest.mark.timeout(30)

LAYOUT = {"count": 2, "sum": 1}

MakeProvider = Callable[..., StateProvider]


def _config(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """A config of provider ``kind`` for a location of this test's own."""
    if kind == "sqlite":
        return {"path": str(tmp_path / "state")}
    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return server.config(key_prefix=f"test:{uuid.uuid4().hex}")
    return {}


@pytest.fixture
def topology() -> str:
    """A topology name of this test's own (the memory provider's locations are per name, per process)."""
    return f"topology-{uuid.uuid4().hex}"


def _maker(kind: str, config: dict[str, Any], topology: str) -> Iterator[MakeProvider]:
    made: list[StateProvider] = []

    def make(name: str = topology, **more: Any) -> StateProvider:
        """A new provider object of the location (``more``: other config)."""
        conf = {"topology.state.provider": kind, "topology.state.provider.config": {**config, **more}}
        provider = provider_for(conf, name)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        provider.close()


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make(request: pytest.FixtureRequest, tmp_path: Path, topology: str) -> Iterator[MakeProvider]:
    yield from _maker(request.param, _config(request.param, request, tmp_path), topology)


@pytest.fixture(params=["sqlite", "redis"])
def make_durable(request: pytest.FixtureRequest, tmp_path: Path, topology: str) -> Iterator[MakeProvider]:
    """Like ``make``, for the providers whose state outlives the process."""
    yield from _maker(request.param, _config(request.param, request, tmp_path), topology)


def _checkpoint(provider: StateProvider, store: Any, txid: int, puts: dict[bytes, bytes],
                deletes: list[bytes] = ()) -> None:
    """A whole checkpoint of one task, in the order the checkpoint spout takes it."""
    store.prepare(txid, puts, list(deletes))
    provider.set_committed(txid)
    store.commit(txid)


# -- the contract, for every provider ------------------------------------------------------

def test_round_trip(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    assert store.load(None) == {}
    _checkpoint(provider, store, 1, {b"a": b"1", b"b": b"2"})
    _checkpoint(provider, store, 2, {b"b": b"3", b"c": b"\x00\xff"}, [b"a"])
    store.close()

    again = make()
    assert again.committed() == 2
    assert again.task_store("count", 0, 0).load(2) == {b"b": b"3", b"c": b"\x00\xff"}


def test_load_folds_a_prepared_delta_up_to_the_committed_txid(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    _checkpoint(provider, store, 1, {b"a": b"1", b"b": b"2"})
    store.prepare(2, {b"b": b"20"}, [b"a"])
    provider.set_committed(2)  # the commit point passed, the task's commit never came

    assert make().task_store("count", 0, 0).load(2) == {b"b": b"20"}
    assert store.load(2) == {b"b": b"20"}  # folded once: loading again changes nothing


def test_load_keeps_a_prepared_delta_past_the_committed_txid_unfolded(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    _checkpoint(provider, store, 1, {b"a": b"1"})
    store.prepare(2, {b"a": b"2", b"b": b"2"}, [])
    # the task restarts and loads while the other tasks are still finishing checkpoint 2

    assert store.load(1) == {b"a": b"1"}
    assert make().task_store("count", 0, 0).load(1) == {b"a": b"1"}
    provider.set_committed(2)  # they finished it: the recovery to txid 2 must see this task's part
    assert store.load(2) == {b"a": b"2", b"b": b"2"}


def test_an_uncommitted_delta_is_replaced_by_the_next_prepare(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    _checkpoint(provider, store, 1, {b"a": b"1"})
    store.prepare(2, {b"a": b"2", b"b": b"2"}, [])  # checkpoint 2 failed: rolled back to 1
    assert store.load(1) == {b"a": b"1"}
    _checkpoint(provider, store, 2, {b"c": b"3"})  # checkpoint 2 taken again

    assert store.load(2) == {b"a": b"1", b"c": b"3"}


def test_read_is_what_load_would_return_changing_nothing(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    _checkpoint(provider, store, 1, {b"a": b"1", b"b": b"1"})
    store.prepare(2, {b"b": b"2", b"c": b"2"}, [b"a"])
    outside = make().task_store("count", 0, 0)  # a tool reading a running topology's state

    assert outside.read(None) == outside.read(1) == {b"a": b"1", b"b": b"1"}
    assert outside.read(2) == {b"b": b"2", b"c": b"2"}
    store.commit(2)  # the delta read above was not discarded, nor folded
    assert outside.read(1) == {b"b": b"2", b"c": b"2"}


def test_load_with_nothing_committed_returns_nothing(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    store.prepare(0, {b"a": b"1"}, [])
    assert store.load(None) == {}
    assert store.read(None) == {}


def test_deletes(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 1, 1)
    _checkpoint(provider, store, 1, {b"a": b"1", b"b": b"2", b"c": b"3"})
    # a key never stored, and one both put and deleted in the same delta: deleted
    _checkpoint(provider, store, 2, {b"c": b"30"}, [b"a", b"missing", b"c"])
    assert store.load(2) == {b"b": b"2"}
    _checkpoint(provider, store, 3, {}, [b"b"])
    assert store.load(3) == {}


def test_a_large_delta(make: MakeProvider) -> None:
    # more keys than Redis's Lua takes in one call's arguments (the fold goes by chunks)
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    _checkpoint(provider, store, 1, {b"%d" % i: b"v" for i in range(9000)})
    _checkpoint(provider, store, 2, {b"%d" % i: b"w" for i in range(9000, 12000)},
                [b"%d" % i for i in range(0, 9000, 2)])
    expected = {b"%d" % i: b"v" for i in range(1, 9000, 2)} | {b"%d" % i: b"w" for i in range(9000, 12000)}
    assert store.load(2) == expected


def test_commit_is_idempotent_and_only_folds_its_own_txid(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("count", 0, 0)
    _checkpoint(provider, store, 1, {b"n": b"1"})
    store.commit(1)  # again: already folded
    store.prepare(2, {b"n": b"2"}, [])
    store.commit(3)  # not the prepared txid: nothing
    assert store.load(1) == {b"n": b"1"}  # (and discards 2)
    store.prepare(3, {b"n": b"3"}, [])
    store.commit(3)
    store.commit(3)
    assert store.load(3) == {b"n": b"3"}


def test_a_prepare_replaces_the_earlier_prepared_delta(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    store = provider.task_store("sum", 0, 0)
    store.prepare(1, {b"a": b"1", b"b": b"1"}, [])
    store.prepare(2, {b"c": b"2"}, [])  # checkpoint 1 was abandoned, the state rolled back
    provider.set_committed(2)
    store.commit(1)
    store.commit(2)
    assert store.load(2) == {b"c": b"2"}


def test_tasks_have_stores_of_their_own(make: MakeProvider) -> None:
    provider = make()
    components = ["count", "Count", "a/b", "a_b", "a:1", "../x", "ünï cödé", ""]
    provider.check({c: 2 for c in components})
    for i, component in enumerate(components):
        for task in (1, 12):
            provider.task_store(component, task, task).prepare(1, {b"who": f"{i} {task}".encode()}, [])
    provider.set_committed(1)
    for i, component in enumerate(components):
        for task in (1, 12):
            assert make().task_store(component, task, task).load(1) == {b"who": f"{i} {task}".encode()}


def test_committed_txid_survives_a_new_provider_object(make: MakeProvider) -> None:
    provider = make()
    provider.check(LAYOUT)
    assert provider.committed() is None
    provider.set_committed(7)
    provider.set_committed(8)
    provider.close()
    again = make()
    again.check(LAYOUT)  # the same topology, with the same layout, may come back
    assert again.committed() == 8


def test_the_last_commit_says_which_checkpoint_and_when_and_drop_forgets_it(make: MakeProvider) -> None:
    provider = make()
    assert provider.last_commit() is None  # nothing there; and reading it claims nothing
    provider.check(LAYOUT)
    assert make().last_commit() is None  # claimed, never committed
    store = provider.task_store("count", 0, 0)
    before = time.time()
    _checkpoint(provider, store, 1, {b"a": b"1"})
    _checkpoint(provider, store, 2, {b"a": b"2"})
    store.close()
    commit = make().last_commit()
    assert commit.txid == 2 and before <= commit.at <= time.time()
    make().drop()
    again = make()
    assert again.last_commit() is None
    again.check({"other": 1})  # the location is free again, for any layout
    assert again.task_store("other", 0, 0).load(None) == {}
    again.drop()
    again.drop()  # nothing there: nothing to do


def test_check_refuses_the_state_of_a_component_the_topology_no_longer_has(make: MakeProvider) -> None:
    make().check(LAYOUT)
    if make().name == "redis":  # by task id: its layout for good
        with pytest.raises(StateProviderError, match=r"stateful components .*'count': 2.*'count': 2\}"):
            make().check({"count": 2})
        with pytest.raises(StateProviderError, match="stateful components"):
            make().check({**LAYOUT, "other": 1})
        return
    with pytest.raises(StateProviderError, match=r"holds the state of 'sum' \(1 task\(s\)\), which this topology "
                                                 r"no longer has: .* --allow-dropped-state"):
        make().check({"count": 2})
    make().check({**LAYOUT, "other": 1})  # a new one starts empty (tests/test_state_rescale.py)


def test_a_provider_without_key_groups_refuses_another_task_count(tmp_path: Path, request: pytest.FixtureRequest,
                                                                  topology: str) -> None:
    for make in _maker("redis", _config("redis", request, tmp_path), topology):
        assert make().claim(LAYOUT, 128) is None  # its stateful bolts' inputs go by task count
        with pytest.raises(StateProviderError, match=r"stateful components .*'count': 2.*'count': 3"):
            make().claim({"count": 3, "sum": 1}, 128)


# -- what only the durable providers do ------------------------------------------------------

def test_check_refuses_a_location_of_another_topology(make_durable: MakeProvider) -> None:
    make_durable("first").check(LAYOUT)
    other = make_durable("second")
    with pytest.raises(StateProviderError, match=r"'(sqlite|redis)' at .*topology 'first', not of 'second'"):
        other.check(LAYOUT)
    with pytest.raises(StateProviderError, match="topology 'first', not of 'second'"):
        other.committed()
    with pytest.raises(StateProviderError, match="topology 'first', not of 'second'"):
        other.set_committed(1)
    for action in (other.last_commit, other.drop):  # neither reads nor drops another topology's state
        with pytest.raises(StateProviderError, match="topology 'first', not of 'second'"):
            action()
    assert make_durable("first").committed() is None


def test_an_unclaimed_location_is_refused(make_durable: MakeProvider) -> None:
    # a worker seeing another location than the submitter (a path not shared) must not start empty
    provider = make_durable()
    with pytest.raises(StateProviderError, match="not claimed for topology"):
        provider.committed()
    with pytest.raises(StateProviderError, match="not claimed for topology"):
        provider.set_committed(1)


_CHILD = textwrap.dedent("""
    import json, sys
    from squall.api.state.provider import provider_for

    conf, name = json.loads(sys.argv[1]), sys.argv[2]
    provider = provider_for(conf, name)
    provider.check({"count": 2})
    first, second = provider.task_store("count", 0, 0), provider.task_store("count", 1, 1)
    for store in (first, second):
        store.prepare(1, {b"base": b"1", b"gone": b"1"}, [])
    provider.set_committed(1)
    for store in (first, second):
        store.commit(1)
    first.prepare(2, {b"new": b"2"}, [b"gone"])
    second.prepare(2, {b"new": b"2"}, [b"gone"])
    provider.set_committed(2)  # the commit point of 2; neither task has folded it
    second.commit(2)
    second.prepare(3, {b"never": b"3"}, [b"base"])  # checkpoint 3 does not complete
    print("ready", flush=True)
    sys.stdin.read()  # until killed
""")


def test_committed_state_survives_a_killed_process(make_durable: MakeProvider, topology: str) -> None:
    probe = make_durable()
    conf = {"topology.state.provider": probe.name, "topology.state.provider.config": probe.config}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, json.dumps(conf), topology],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 20)
        if (child.stdout.readline() if ready else b"") != b"ready\n":
            child.kill()
            pytest.fail(f"the child did not get ready: {child.stderr.read().decode(errors='replace')}")
        child.send_signal(signal.SIGKILL)  # no close, no atexit: only what is durable remains
        assert child.wait(10) == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()

    provider = make_durable()
    provider.check({"count": 2})
    committed = provider.committed()
    assert committed == 2
    expected = {b"base": b"1", b"new": b"2"}
    assert provider.task_store("count", 0, 0).load(committed) == expected
    assert provider.task_store("count", 1, 1).load(committed) == expected


# -- SQLite ------------------------------------------------------------------------------------

def _sqlite(**config: Any) -> StateProvider:
    return provider_for({"topology.state.provider": "sqlite", "topology.state.provider.config": config}, "topology")


def test_sqlite_needs_a_path(tmp_path: Path) -> None:
    with pytest.raises(StateProviderError, match=r"'sqlite' needs a directory.*'path'"):
        _sqlite()
    with pytest.raises(StateProviderError, match=r"synchronous = 'OFF'; use 'NORMAL'.*or 'FULL'"):
        _sqlite(path=str(tmp_path), synchronous="OFF")


def test_sqlite_unwritable_path(tmp_path: Path) -> None:
    # a regular file where a directory should be: unwritable even for root (CI runs as root)
    (tmp_path / "file").write_text("")
    path = tmp_path / "file" / "state"
    provider = _sqlite(path=str(path))
    message = rf"'sqlite' at {re.escape(str(path))}: claiming the location .* failed: .*Not a directory"
    with pytest.raises(StateProviderError, match=message) as raised:
        provider.check(LAYOUT)
    # at once: the directory's creation failed, before SQLite (whose busy timeout can wait) opened anything
    assert isinstance(raised.value.__cause__, NotADirectoryError)


def test_sqlite_files(tmp_path: Path) -> None:
    provider = _sqlite(path=str(tmp_path / "state"), synchronous="full")
    provider.check({"count": 1, "Count": 1, "a/b": 1})
    for component in ("count", "Count", "a/b"):
        _checkpoint(provider, provider.task_store(component, 0, 0), 1, {b"k": component.encode()})
    # a directory per component: lowercase ids are kept; others get a hash of the exact id, so that no
    # two ids share one; a file per task, by its index, in its component's generation (0 at first)
    tasks = " ".join(sorted(str(p.relative_to(tmp_path / "state" / "tasks"))
                            for p in (tmp_path / "state" / "tasks").glob("*/*.sqlite")))
    assert re.fullmatch(r"a_b~[0-9a-f]{16}/g0-0\.sqlite count/g0-0\.sqlite count~[0-9a-f]{16}/g0-0\.sqlite", tasks)
    assert (tmp_path / "state" / "topology.sqlite").is_file()


def test_a_sqlite_location_older_than_the_commit_time_gets_it_at_its_next_commit(tmp_path: Path) -> None:
    import sqlite3

    (tmp_path / "state").mkdir()
    with sqlite3.connect(tmp_path / "state" / "topology.sqlite") as conn:  # as Squall made it before
        conn.execute("CREATE TABLE topology (id INTEGER PRIMARY KEY CHECK (id = 0), name TEXT NOT NULL, "
                     "layout TEXT NOT NULL, committed INTEGER)")
        conn.execute("INSERT INTO topology VALUES (0, 'topology', ?, 5)", (json.dumps(LAYOUT, sort_keys=True),))
    provider = _sqlite(path=str(tmp_path / "state"))
    assert provider.last_commit() == Commit(5, None)
    provider.check(LAYOUT)
    provider.set_committed(6)
    commit = _sqlite(path=str(tmp_path / "state")).last_commit()
    assert commit.txid == 6 and commit.at is not None


# -- Redis ---------------------------------------------------------------------------------------

def _redis(topology: str = "topology", **config: Any) -> StateProvider:
    redis_client_module()
    return provider_for({"topology.state.provider": "org.apache.storm.redis.state.RedisKeyValueStateProvider",
                         "topology.state.provider.config": config}, topology)


def test_redis_unreachable(monkeypatch) -> None:
    with socket.socket() as closed:  # bound, not listening: connections are refused
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        provider = _redis(port=port, timeout_secs=2)
        tries = connects(monkeypatch)
        with pytest.raises(StateProviderError, match=rf"'redis': cannot reach Redis at 127.0.0.1:{port}: .*refused"):
            provider.check(LAYOUT)
    assert tries == [("127.0.0.1", port)]  # at once: none of the retries redis-py backs off between by default


def test_redis_over_a_unix_socket(redis_server: RedisServer, topology: str) -> None:  # noqa: F811
    provider = _redis(topology, unix_socket_path=redis_server.unix_socket_path)
    provider.check(LAYOUT)
    _checkpoint(provider, provider.task_store("count", 0, 0), 1, {b"k": b"v"})
    over_tcp = _redis(topology, **redis_server.config())  # the default key prefix: by topology name
    assert over_tcp.task_store("count", 0, 0).load(over_tcp.committed()) == {b"k": b"v"}
    provider.close()
    over_tcp.close()


def test_redis_warns_when_redis_does_not_persist_every_write(redis_server: RedisServer, topology: str,  # noqa: F811
                                                            caplog: pytest.LogCaptureFixture) -> None:
    provider = _redis(topology, **redis_server.config())
    provider.check(LAYOUT)
    assert "appendonly no" in caplog.text
    provider.close()


def test_redis_keeps_a_tasks_state_under_its_place_so_other_task_ids_find_it(redis_server: RedisServer,  # noqa: F811
                                                                             topology: str) -> None:
    config = redis_server.config(key_prefix=f"test:{uuid.uuid4().hex}")
    provider = _redis(topology, **config)
    provider.check(LAYOUT)
    _checkpoint(provider, provider.task_store("count", 7, 1), 1, {b"k": b"v"})
    # the next run added a component (or ackers) that sorts first: count's task ids moved up
    again = _redis(topology, **config)
    again.check(LAYOUT)
    assert again.task_store("count", 9, 1).load(again.committed()) == {b"k": b"v"}
    assert again.task_store("count", 8, 0).load(again.committed()) == {}
    client = redis_client_module().Redis(host=redis_server.host, port=redis_server.port)
    keys = sorted(k.decode() for k in client.scan_iter(match=f"{config['key_prefix']}:task:*"))
    assert keys == [f"{config['key_prefix']}:task:count:#1:{part}" for part in ("base", "txids")]
    provider.close()
    again.close()


def test_a_redis_location_claimed_before_keeps_its_tasks_keys_by_task_id(redis_server: RedisServer,  # noqa: F811
                                                                         topology: str) -> None:
    config = redis_server.config(key_prefix=f"test:{uuid.uuid4().hex}")
    client = redis_client_module().Redis(host=redis_server.host, port=redis_server.port)
    client.hset(f"{config['key_prefix']}:topology", mapping={"name": topology, "layout": json.dumps(LAYOUT)})
    client.hset(f"{config['key_prefix']}:task:count:7:base", mapping={"k": "v"})  # as the first version wrote
    provider = _redis(topology, **config)
    provider.check(LAYOUT)
    assert provider.task_store("count", 7, 0).load(provider.committed()) == {b"k": b"v"}
    provider.close()
