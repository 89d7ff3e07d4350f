"""Where running topologies are found: Storm's cluster state, as ``squall list``, ``kill``,
``activate``, ``deactivate``, ``rebalance``, ``monitor`` and ``ui`` read it.

Squall has no long-lived Nimbus: each ``squall run`` / ``squall submit`` process is the Nimbus
of its one topology, and registers it (:class:`Registration`: its control address and keys,
its UI) while it runs. Two registries hold those entries:

* :class:`~squall.cluster.registry.local.LocalRegistry`, the default: private files of this machine's
  user; the commands reach the topologies this user runs here.
* :class:`~squall.cluster.registry.zookeeper.ZooKeeperRegistry`, when ``storm.zookeeper.servers`` is
  set: ZooKeeper nodes guarded by a digest ACL, as Storm keeps its cluster state there; the
  commands reach the cluster's topologies from any host that holds the credentials. It also
  holds each topology's assignment, worker heartbeats and errors (:meth:`Registry.publish_state`).

:func:`open_registry` picks one from a config; the commands read the user's config
(:func:`squall.api.config.user_config`), a topology's process its merged config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from squall.api.config import Config
from squall.api.errors import SecurityError
from squall.runtime.info import TopologyInfo
from squall.runtime.messaging.security import LinkKeys

#: What reading an entry that does not fit raises: its readers treat it as stale.
MALFORMED = (ValueError, TypeError, KeyError, AttributeError, SecurityError)


@dataclass(frozen=True)
class Registration:
    """A running topology, as its registry entry describes it."""

    name: str
    pid: int  # the process serving the topology (``squall run`` / ``squall submit``)
    address: str  # its control socket, tcp://HOST:PORT
    mode: str  # how its workers run: "processes", "in-process", "spark local[*]", ...
    started: float  # epoch seconds
    public: str | None = None  # the control socket's CURVE key pair (None: not secured)
    secret: str | None = None
    ui: str | None = None  # the URL of its UI and REST API (squall.ops.ui), once served
    ui_token: str | None = None  # what the UI's POSTs need (see squall.ops.ui.server)
    host: str | None = None  # the host of its process (ZooKeeper's entries: they span hosts)

    @property
    def keys(self) -> LinkKeys | None:
        return None if self.public is None or self.secret is None else LinkKeys(self.public, self.secret)

    def to_json(self) -> dict[str, Any]:
        """The entry as a JSON object; the key pair under ``keys`` (null when not secured)."""
        data = {"name": self.name, "pid": self.pid, "address": self.address, "mode": self.mode,
                "started": self.started, "ui": self.ui, "ui_token": self.ui_token, "host": self.host}
        data["keys"] = {"public": self.public, "secret": self.secret} if self.keys else None
        return data

    @classmethod
    def from_json(cls, data: Any) -> Registration:
        """The entry :meth:`to_json` wrote; keys it does not know are ignored (another Squall
        version's), so that it is not taken for a broken one. Raises one of :data:`MALFORMED`
        for an entry that does not fit."""
        keys = LinkKeys.from_json(json.dumps(data.get("keys")))

        def text(key: str) -> str | None:
            value = data.get(key)
            return value if isinstance(value, str) else None

        return cls(name=str(data["name"]), pid=int(data["pid"]), address=str(data["address"]),
                   mode=str(data["mode"]), started=float(data["started"]),
                   public=keys and keys.public, secret=keys and keys.secret,
                   ui=text("ui"), ui_token=text("ui_token"), host=text("host"))


class Registry(Protocol):
    """The running topologies of a user (local) or of a cluster (ZooKeeper).

    Methods block on I/O (a file lock, a ZooKeeper round trip) and raise ``RegistryError``
    when the registry cannot be reached or refuses the credentials."""

    #: What the registry covers, for messages: "this machine", "ZooKeeper HOSTS/ROOT".
    where: str

    def register(self, entry: Registration) -> None:
        """Add ``entry``; ``AlreadyAliveError`` naming the process if a live one has the name
        (an entry whose process is gone is replaced)."""

    def publish_ui(self, name: str, url: str, token: str) -> None:
        """Add the UI's URL and token to this process's entry for ``name``."""

    def unregister(self, name: str) -> None:
        """Remove this process's entry for ``name`` (nothing if it is another process's)."""

    def running(self) -> list[Registration]:
        """The live entries, sorted by name; stale ones are left out (and removed)."""

    def lookup(self, name: str) -> Registration:
        """The live entry for ``name``; ``NotAliveError`` if there is none."""

    def publish_state(self, name: str, info: TopologyInfo) -> None:
        """Record what ``topology_info`` says of the running topology ``name`` (its
        assignment, worker heartbeats, errors) where the cluster keeps it; called by the
        topology's process about once a second. Never raises: a registry out of reach is
        logged."""

    def close(self) -> None:
        """Release the registry's connection; the entries of this process stay registered
        only as long as the local registry's files (ZooKeeper's are ephemeral)."""


class RegistryError(RuntimeError):
    """The registry cannot be reached, or refuses this user's credentials."""


def open_registry(conf: Mapping[str, Any]) -> Registry:
    """The registry ``conf`` names: ZooKeeper when ``storm.zookeeper.servers`` is set, else the
    local one. Raises ``RegistryError`` (or ValueError naming the key at fault) as early as the
    config shows the problem: a missing or readable credentials file, ZooKeeper out of reach."""
    if conf.get(Config.STORM_ZOOKEEPER_SERVERS):
        from squall.cluster.registry.zookeeper import ZooKeeperRegistry

        return ZooKeeperRegistry(conf)
    from squall.cluster.registry.local import LocalRegistry

    return LocalRegistry()
