"""The Redis state provider (Storm's ``RedisKeyValueStateProvider``): a topology's state in a
Redis server, which workers on any machine can reach. Needs the ``redis`` client
(``pip install 'squall[redis]'``) and a Redis server of version 5 or later.

``topology.state.provider.config``: ``host`` (default ``127.0.0.1``) and ``port`` (6379), or
``unix_socket_path`` instead; ``db`` (0); ``password``; ``key_prefix`` (default
``squall:<topology name>``); ``timeout_secs`` (5): how long connecting, and waiting for any
reply, may take before the call fails (a checkpoint whose write fails is rolled back and
taken again).

Keys (``P`` is the key prefix, ``T`` is ``P:task:<component id>:#<index>``, the task's place
among its component's tasks)::

    P:topology      hash: name, layout (JSON: component id -> number of tasks), tasks ("index"),
                    committed (txid), committed_at (epoch seconds)
    T:base          hash: the task's committed state, key -> value
    T:prepared      hash: the puts of the prepared delta
    T:deleted       set:  the deletes of the prepared delta
    T:txids         hash: base (the txid the base holds), prepared (the prepared delta's txid)

A task's keys name its place, not its task id, which adding a component (stateless ones too),
or more ackers, changes. A location claimed before (no ``tasks`` field) keeps its tasks' keys
by task id, ``P:task:<component id>:<task id>``.

Atomicity: a prepare, and a read, is one MULTI/EXEC transaction; a commit and a load are one
Lua script each, which Redis runs with no other command in between (and writes to its append-only file
and replicas as one transaction), so a fold is never seen, nor persisted, half done.

Durability is what the server's persistence gives: a write is acknowledged once it is in the
server's memory. With ``appendonly yes`` (and ``appendfsync everysec`` or ``always``) it
survives a restart of Redis; with snapshots only, a Redis restart returns every key to the
last snapshot (a consistent but older state, losing what was processed since), which
:meth:`RedisStateProvider.check` warns about. A crash of a worker loses nothing either way.

Values are the caller's bytes, stored and returned as they are: nothing read from Redis is
ever unpickled here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from squall.api.state.provider import (
    Commit, StateProvider, StateProviderError, TaskStore, name_mismatch, prepared_is_committed, verify_claim,
)
from squall.connectors.redis_client import connect_failure, redis_address, redis_settings

try:
    import redis
except ImportError:  # the optional extra: its absence is said when a provider is made
    redis = None

log = logging.getLogger("squall.state")

# KEYS: T:base, T:prepared, T:deleted, T:txids.
# ARGV[1] = 'commit': fold the prepared delta into the base if its txid is ARGV[2]; returns 1
#   if it did, else 0.
# ARGV[1] = 'load': fold it if its txid is <= ARGV[2], the committed txid ('' for none), else
#   leave it (TaskStore.load); returns the base, as a flat list key, value, key, value...
# The deletes are applied after the puts, so that a key both put and deleted is deleted.
_FOLD = """
local function in_chunks(command, key, items)
  -- unpack puts its items on Lua's stack, which holds a few thousand at most
  for i = 1, #items, 1000 do
    redis.call(command, key, unpack(items, i, math.min(i + 999, #items)))
  end
end
local prepared = redis.call('HGET', KEYS[4], 'prepared')
local fold = false
if prepared then
  if ARGV[1] == 'commit' then
    fold = prepared == ARGV[2]
  else
    fold = ARGV[2] ~= '' and tonumber(prepared) <= tonumber(ARGV[2])
  end
end
if fold then
  in_chunks('HSET', KEYS[1], redis.call('HGETALL', KEYS[2]))
  in_chunks('HDEL', KEYS[1], redis.call('SMEMBERS', KEYS[3]))
  redis.call('HSET', KEYS[4], 'base', prepared)
  redis.call('DEL', KEYS[2], KEYS[3])
  redis.call('HDEL', KEYS[4], 'prepared')
end
if ARGV[1] == 'load' then
  return redis.call('HGETALL', KEYS[1])
end
return fold and 1 or 0
"""

# KEYS[1]: P:topology. If no topology claimed it, claim it for topology ARGV[1] with layout
# ARGV[2] and return nil; else return the name and layout it was claimed with.
_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('HSET', KEYS[1], 'name', ARGV[1], 'layout', ARGV[2], 'tasks', 'index')
  return false
end
return redis.call('HMGET', KEYS[1], 'name', 'layout')
"""

# KEYS[1]: P:topology. Record ARGV[2] as the committed txid, committed at ARGV[3], if the
# location is claimed for topology ARGV[1]; return the name it is claimed for (nil: none).
_SET_COMMITTED = """
local name = redis.call('HGET', KEYS[1], 'name')
if name == ARGV[1] then
  redis.call('HSET', KEYS[1], 'committed', ARGV[2], 'committed_at', ARGV[3])
end
return name
"""


class _Client:
    """A redis-py client, made on first use (by the one thread at a time that uses its
    owner); redis-py's pool makes new connections in a forked child by itself."""

    def __init__(self, settings: dict[str, Any], where: str) -> None:
        self._settings = settings
        self.where = where  # "state provider 'redis' at host:port ...", for messages
        self._redis: redis.Redis | None = None
        self._scripts: dict[str, Any] = {}

    def get(self) -> redis.Redis:
        if self._redis is None:
            self._redis = redis.Redis(**self._settings)
        return self._redis

    @contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """Turn a Redis error in the block into a :class:`StateProviderError` saying ``what``
        failed."""
        try:
            yield
        except redis.RedisError as e:
            raise StateProviderError(f"{self.where}: {what} failed: {e}") from e

    def run(self, what: str, script: str, keys: list[str], args: list[Any]) -> Any:
        """Run a Lua ``script`` (by its SHA, loading it on the server the first time)."""
        with self.errors(what):
            if script not in self._scripts:
                self._scripts[script] = self.get().register_script(script)
            return self._scripts[script](keys=keys, args=args)

    @contextmanager
    def transaction(self, what: str) -> Iterator[redis.client.Pipeline]:
        """A pipeline whose commands run as one MULTI/EXEC transaction when the block calls
        its ``execute``."""
        with self.errors(what), self.get().pipeline(transaction=True) as pipe:
            yield pipe

    def close(self) -> None:
        if self._redis is not None:
            self._redis.close()
            self._redis = None
            self._scripts.clear()


class _RedisTaskStore(TaskStore):
    def __init__(self, client: _Client, key: str) -> None:
        self._client = client
        self._keys = [f"{key}:base", f"{key}:prepared", f"{key}:deleted", f"{key}:txids"]

    def load(self, committed: int | None) -> dict[bytes, bytes]:
        args = ["load", "" if committed is None else committed]
        flat = self._client.run("loading the state", _FOLD, self._keys, args)
        return dict(zip(flat[::2], flat[1::2]))

    def read(self, committed: int | None) -> dict[bytes, bytes]:
        base, prepared, deleted, txids = self._keys
        with self._client.transaction("reading the state") as pipe:
            pipe.hgetall(base).hget(txids, "prepared").hgetall(prepared).smembers(deleted)
            content, txid, puts, deletes = pipe.execute()
        if prepared_is_committed(None if txid is None else int(txid), committed):
            content.update(puts)
            for key in deletes:
                content.pop(key, None)
        return content

    def prepare(self, txid: int, puts: dict[bytes, bytes], deletes: list[bytes],
                groups: dict[bytes, int] | None = None) -> None:
        _, prepared, deleted, txids = self._keys
        with self._client.transaction(f"preparing txid {txid}") as pipe:
            pipe.delete(prepared, deleted)
            if puts:
                pipe.hset(prepared, mapping=puts)
            if deletes:
                pipe.sadd(deleted, *deletes)
            pipe.hset(txids, "prepared", txid)
            pipe.execute()

    def commit(self, txid: int) -> None:
        self._client.run(f"committing txid {txid}", _FOLD, self._keys, ["commit", txid])

    def close(self) -> None:
        self._client.close()


class RedisStateProvider(StateProvider):
    """Durable state in a Redis server (see the module's documentation for the config, the
    keys and what survives what)."""

    name = "redis"

    def __init__(self, topology_name: str, config: dict[str, Any]) -> None:
        super().__init__(topology_name, config)
        if redis is None:
            raise StateProviderError("state provider 'redis' needs the redis client: pip install 'squall[redis]'")
        try:
            port = int(config.get("port", 6379))
            db = int(config.get("db", 0))
            timeout = float(config.get("timeout_secs", 5))
        except (TypeError, ValueError) as e:
            raise StateProviderError(
                f"state provider 'redis': port, db and timeout_secs must be numbers: {e}"
            ) from None
        socket = config.get("unix_socket_path")
        host = config.get("host", "127.0.0.1")
        self.address = redis_address(host, port, socket)
        self._prefix = str(config.get("key_prefix", f"squall:{topology_name}"))
        self._db = db
        # no retries: every call returns or fails within the timeout, and a failed checkpoint is retaken
        self._settings = redis_settings(host, port, socket, db, config.get("password"), timeout)
        self._client = _Client(self._settings, f"state provider {self.name!r} at {self.location}")
        self._by_index: bool | None = None  # tasks' keys by index (else by task id); None: not read yet

    @property
    def location(self) -> str:
        return f"{self.address} db {self._db}, keys {self._prefix}:*"

    def check(self, layout: dict[str, int]) -> None:
        try:
            self._client.get().ping()
        except redis.RedisError as e:
            raise StateProviderError(f"state provider {self.name!r}: "
                                     f"{connect_failure(self.address, e, self._settings['password'])}") from e
        found = self._client.run("claiming the location for this topology", _CLAIM, [self._topology_key],
                                 [self.topology_name, json.dumps(layout, sort_keys=True)])
        if found is not None:
            name, found_layout = found
            verify_claim(self, name and name.decode(), json.loads(found_layout or "null"), layout)
        self._warn_unless_persistent()

    def _warn_unless_persistent(self) -> None:
        try:
            appendonly = next(iter(self._client.get().config_get("appendonly").values()), None)
        except redis.RedisError:  # CONFIG is often disabled on managed Redis: then say nothing
            return
        if appendonly in ("no", b"no"):
            log.warning("%s: Redis has no append-only file (appendonly no): if Redis restarts, the state returns to "
                        "its last snapshot; set appendonly yes to keep every checkpoint", self._client.where)

    def task_store(self, component: str, task: int, index: int) -> TaskStore:
        # without key groups: the layout never changes (StateProvider.claim)
        if self._by_index is None:
            with self._client.errors("reading the claim"):
                self._by_index = self._client.get().hget(self._topology_key, "tasks") is not None
        client = _Client(self._settings, f"{self._client.where} (component {component!r} task {task})")
        return _RedisTaskStore(client, f"{self._prefix}:task:{component}:" + (f"#{index}" if self._by_index
                                                                                else str(task)))

    @property
    def _topology_key(self) -> str:
        return f"{self._prefix}:topology"

    def committed(self) -> int | None:
        with self._client.errors("reading the committed txid"):
            name, committed = self._client.get().hmget(self._topology_key, ["name", "committed"])
        found = None if name is None else name.decode()
        if found != self.topology_name:
            raise StateProviderError(name_mismatch(self, found))
        return None if committed is None else int(committed)

    def set_committed(self, txid: int) -> None:
        found = self._client.run(f"committing txid {txid}", _SET_COMMITTED, [self._topology_key],
                                 [self.topology_name, txid, repr(time.time())])
        if found is None or found.decode() != self.topology_name:
            raise StateProviderError(name_mismatch(self, found and found.decode()))

    def last_commit(self) -> Commit | None:
        with self._client.errors("reading the last commit"):
            name, committed, at = self._client.get().hmget(self._topology_key, ["name", "committed", "committed_at"])
        if name is None:
            return None
        if name.decode() != self.topology_name:
            raise StateProviderError(name_mismatch(self, name.decode()))
        return None if committed is None else Commit(int(committed), None if at is None else float(at))

    def drop(self) -> None:
        self.last_commit()  # raises if the location is another topology's
        with self._client.errors("dropping the state"):
            client = self._client.get()
            keys = [self._topology_key, *client.scan_iter(match=f"{self._prefix}:task:*", count=1000)]
            for i in range(0, len(keys), 1000):
                client.delete(*keys[i:i + 1000])

    def close(self) -> None:
        self._client.close()
