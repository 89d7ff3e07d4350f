"""The ZooKeeper registry: a cluster's running topologies, kept in ZooKeeper as Storm keeps its
cluster state, so that ``squall list`` / ``kill`` / ``activate`` / ``deactivate`` /
``rebalance`` / ``monitor`` / ``ui`` reach them from any host that holds the credentials.

Under ``storm.zookeeper.root`` (default ``/squall``), as Storm lays out its own:

* ``storms/NAME``: the topology's :class:`~squall.cluster.registry.Registration` (JSON), an ephemeral
  node: it goes with the session of the process serving the topology, so a host that dies takes
  its entries with it within ``storm.zookeeper.session.timeout``;
* ``assignments/NAME``: its workers (host, port, pid, executors), ephemeral too;
* ``workerbeats/NAME/INDEX``: each worker's last heartbeat as its master saw it (host, port, pid,
  restarts, time), ephemeral;
* ``errors/NAME/COMPONENT``: the component's last errors, kept after a crash (Storm's
  ``/errors``), cleared when the name is registered again or unregistered.

NAME is the topology name, percent-quoted. Every node is created with a ZooKeeper digest ACL of
the credentials in ``storm.zookeeper.auth.file`` (one line ``user:password``, a file of mode 0600
of this user): the entries carry the control sockets' key pairs, so a client without the
credentials is refused by ZooKeeper itself. A root that exists with another ACL (e.g. open to
the world) is refused rather than written to.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import stat
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from msgspec import to_builtins

from squall.api.config import Config
from squall.api.errors import AlreadyAliveError, NotAliveError
from squall.cluster.registry import MALFORMED, Registration, RegistryError
from squall.runtime.info import TopologyInfo
from squall.utils.processes import process_alive

try:
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException, NoAuthError, NodeExistsError, NoNodeError
    from kazoo.handlers.threading import KazooTimeoutError
    from kazoo.security import make_digest_acl
except ImportError as e:  # an optional dependency: say how to get it
    raise RegistryError(f"storm.zookeeper.servers is set, but kazoo is not installed: "
                        f"pip install 'squall[zookeeper]' ({e})") from None

log = logging.getLogger("squall.registry")



def read_credentials(path: Any) -> tuple[str, str]:
    """(user, password) from the credentials file ``path``; RegistryError naming the file and
    the fix when it is missing, not this user's private file, or not one ``user:password`` line."""
    if not path:
        raise RegistryError("storm.zookeeper.servers is set, so storm.zookeeper.auth.file must name a file of "
                            "mode 0600 holding 'user:password': ZooKeeper's digest ACLs guard the topologies' "
                            "control keys")
    path = os.path.expanduser(str(path))
    try:
        with open(path) as f:
            info = os.fstat(f.fileno())
            text = f.read().strip()
    except OSError as e:
        raise RegistryError(f"storm.zookeeper.auth.file: cannot read {path}: {e.strerror}") from None
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise RegistryError(f"storm.zookeeper.auth.file: {path} is open to other users "
                            f"(mode {stat.S_IMODE(info.st_mode):04o}, "
                            f"owner uid {info.st_uid}): make it yours and 'chmod 600 {path}'")
    user, colon, password = text.partition(":")
    if not (user and colon and password) or "\n" in text:
        raise RegistryError(f"storm.zookeeper.auth.file: {path} must hold one line 'user:password'")
    return user, password


def _quoted(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def _ms(conf: Mapping[str, Any], key: str) -> float:
    return float(conf[key]) / 1000.0


class ZooKeeperRegistry:
    """The registry in ZooKeeper (see the module's docstring), connected from construction to
    :meth:`close`. Raises ``RegistryError`` at construction when the credentials file is not
    fit, ZooKeeper does not answer within ``storm.zookeeper.connection.timeout``, or the root
    is not guarded by these credentials."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        user, password = read_credentials(conf.get(Config.STORM_ZOOKEEPER_AUTH_FILE))
        port = int(conf[Config.STORM_ZOOKEEPER_PORT])
        servers = conf[Config.STORM_ZOOKEEPER_SERVERS]
        hosts = ",".join(s if ":" in s else f"{s}:{port}" for s in servers)
        self._root = str(conf[Config.STORM_ZOOKEEPER_ROOT]).rstrip("/")
        self.address = f"ZooKeeper {hosts}{self._root}"  # for messages
        self.where = f"in {self.address}"
        self._acl = make_digest_acl(user, password, all=True)
        self._auth_file = conf[Config.STORM_ZOOKEEPER_AUTH_FILE]
        self._zk = KazooClient(hosts=hosts, auth_data=[("digest", f"{user}:{password}")], default_acl=[self._acl],
                               timeout=_ms(conf, Config.STORM_ZOOKEEPER_SESSION_TIMEOUT))
        connect_secs = _ms(conf, Config.STORM_ZOOKEEPER_CONNECTION_TIMEOUT)
        try:
            self._zk.start(timeout=connect_secs)
        except KazooTimeoutError:
            self._zk.close()
            raise RegistryError(f"cannot reach ZooKeeper at {hosts} (storm.zookeeper.servers) "
                                f"within {connect_secs:g}s") from None
        self._lock = threading.Lock()
        self._mine: dict[str, Registration] = {}  # registered by this process: re-created after a lost session
        self._published: dict[str, Any] = {}  # node path -> the value last written there
        self._warned = False
        try:
            self._check_root()
        except BaseException:
            self.close()
            raise

    # -- paths and guarded calls -----------------------------------------------------------

    def _path(self, kind: str, name: str, *rest: str) -> str:
        return "/".join((self._root, kind, _quoted(name), *rest))

    def _refused(self, path: str) -> RegistryError:
        return RegistryError(f"{self.address} refuses access to {path} with the credentials of "
                             f"{self._auth_file} (storm.zookeeper.auth.file): they are not those the cluster's "
                             "topologies "
                             f"registered with")

    def _check_root(self) -> None:
        """The root and its four kinds exist, guarded by this ACL (refused otherwise)."""
        try:
            self._zk.ensure_path(self._root)
            acls, _ = self._zk.get_acls(self._root)
        except NoAuthError:
            raise self._refused(self._root) from None
        if list(acls) != [self._acl]:
            raise RegistryError(f"{self.address}: {self._root} exists with an ACL other than these credentials' "
                                f"({', '.join(f'{a.id.scheme}:{a.id.id}' for a in acls)}); Squall registers "
                                f"only under a root guarded by its own digest ACL (storm.zookeeper.root)")
        try:
            for kind in ("storms", "assignments", "workerbeats", "errors"):
                self._zk.ensure_path(f"{self._root}/{kind}")
        except NoAuthError:
            raise self._refused(self._root) from None

    def _read(self, path: str) -> tuple[Registration | None, Any]:
        """(the entry at ``path``, its stat); (None, None) if there is none or it does not fit."""
        try:
            data, stat_ = self._zk.get(path)
        except NoNodeError:
            return None, None
        except NoAuthError:
            raise self._refused(path) from None
        try:
            return Registration.from_json(json.loads(data)), stat_
        except MALFORMED:
            log.warning("%s: ignoring a malformed entry at %s", self.address, path)
            return None, stat_

    def _owned(self, stat_: Any) -> bool:
        return stat_ is not None and stat_.ephemeralOwner == self._zk.client_id[0]

    # -- the Registry protocol ---------------------------------------------------------------

    def register(self, entry: Registration) -> None:
        entry = dataclasses.replace(entry, host=entry.host or socket.gethostname())
        path = self._path("storms", entry.name)
        with self._lock:
            try:
                self._zk.create(path, json.dumps(entry.to_json()).encode(), ephemeral=True)
            except NodeExistsError:
                existing, stat_ = self._read(path)
                if existing is not None and not self._stale(existing):
                    raise AlreadyAliveError(
                        f"topology {entry.name!r} is already running on host {existing.host} (pid {existing.pid}), "
                        f"registered {self.where}; 'squall kill {entry.name}' stops it (the entry of a host that "
                        f"died goes within storm.zookeeper.session.timeout)") from None
                self._zk.delete(path, version=stat_.version)  # its process is gone: the name is free
                self._zk.create(path, json.dumps(entry.to_json()).encode(), ephemeral=True)
            except NoAuthError:
                raise self._refused(path) from None
            self._mine[entry.name] = entry
            self._clear_state(entry.name)

    @staticmethod
    def _stale(entry: Registration) -> bool:
        """An entry of this host whose process is gone (killed before its session expired)."""
        return entry.host == socket.gethostname() and not process_alive(entry.pid)

    def publish_ui(self, name: str, url: str, token: str) -> None:
        path = self._path("storms", name)
        with self._lock:
            existing, stat_ = self._read(path)
            if existing is not None and self._owned(stat_):
                entry = dataclasses.replace(existing, ui=url, ui_token=token)
                self._zk.set(path, json.dumps(entry.to_json()).encode(), version=stat_.version)
                self._mine[name] = entry

    def unregister(self, name: str) -> None:
        path = self._path("storms", name)
        with self._lock:
            if self._mine.pop(name, None) is None:
                return
            try:
                _, stat_ = self._zk.get(path)
                if self._owned(stat_):
                    self._zk.delete(path, version=stat_.version)
                self._clear_state(name)
            except KazooException as e:  # the session goes with close() anyway, and the ephemeral nodes with it
                log.warning("%s: could not unregister %r: %r", self.address, name, e)

    def running(self) -> list[Registration]:
        directory = f"{self._root}/storms"
        try:
            children = self._zk.get_children(directory)
        except NoAuthError:
            raise self._refused(directory) from None
        entries = (self._read(f"{directory}/{child}")[0] for child in children)
        return sorted((e for e in entries if e is not None), key=lambda e: e.name)

    def lookup(self, name: str) -> Registration:
        entry, _ = self._read(self._path("storms", name))
        if entry is None:
            raise NotAliveError(f"no topology named {name!r} is running {self.where} "
                                f"(squall list shows those that are)")
        return entry

    def publish_state(self, name: str, info: TopologyInfo) -> None:
        try:
            with self._lock:
                entry = self._mine.get(name)
                if entry is None or not self._still_mine(entry):
                    return
                workers = [to_builtins(w) for w in info.workers]
                self._put(self._path("assignments", name), [
                    {k: w.get(k) for k in ("host", "port", "pid", "executors")} for w in workers])
                beats = {str(i): {k: w.get(k) for k in ("host", "port", "pid", "restarts")}
                         for i, w in enumerate(workers) if w.get("pid") is not None}
                for index, beat in beats.items():
                    self._put(self._path("workerbeats", name, index), {**beat, "time": time.time()}, always=True)
                for child in self._children(self._path("workerbeats", name)):
                    if child not in beats:
                        self._zk.delete(self._path("workerbeats", name, child))
                        self._published.pop(self._path("workerbeats", name, child), None)
                for component, summary in info.components.items():
                    if summary.errors:
                        self._put(self._path("errors", name, component), to_builtins(summary.errors),
                                  ephemeral=False)
            self._warned = False
        except KazooException as e:
            if not self._warned:  # once per outage: it is published again every second
                log.warning("%s: cannot publish the state of %r: %r", self.address, name, e)
                self._warned = True

    def _still_mine(self, entry: Registration) -> bool:
        """Whether this process still holds ``entry``'s name: its node is registered again if a lost
        session took it; a name another process registered meanwhile is given up (logged)."""
        path = self._path("storms", entry.name)
        stat_ = self._zk.exists(path)
        if stat_ is None:
            self._zk.create(path, json.dumps(entry.to_json()).encode(), ephemeral=True)
            log.warning("%s: registered %r again (its ZooKeeper session had expired)", self.address, entry.name)
        elif not self._owned(stat_):
            log.warning("%s: %r was registered by another process while this one's session was lost: "
                        "no longer publishing its state", self.address, entry.name)
            del self._mine[entry.name]
            return False
        return True

    def close(self) -> None:
        self._zk.stop()
        self._zk.close()

    # -- the state nodes ---------------------------------------------------------------------

    def _put(self, path: str, value: Any, ephemeral: bool = True, always: bool = False) -> None:
        """Write ``value`` (JSON) at ``path``, creating it (and its parents) if missing; unless
        ``always``, only when it changed since the last write of this process."""
        if not always and self._published.get(path) == value and self._zk.exists(path):
            return
        data = json.dumps(value).encode()
        try:
            self._zk.set(path, data)
        except NoNodeError:
            self._zk.create(path, data, ephemeral=ephemeral, makepath=True)
        self._published[path] = value

    def _children(self, path: str) -> list[str]:
        try:
            return self._zk.get_children(path)
        except NoNodeError:
            return []

    def _clear_state(self, name: str) -> None:
        """Drop the name's assignment, heartbeats and errors (an earlier run's)."""
        for kind in ("assignments", "workerbeats", "errors"):
            path = self._path(kind, name)
            if self._zk.exists(path):
                self._zk.delete(path, recursive=True)
            for key in [p for p in self._published if p.startswith(path)]:
                del self._published[key]
