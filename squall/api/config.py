"""``Config``: a dict of Storm's configuration keys, with constants and helpers."""

from __future__ import annotations

import difflib
import logging
import os
import shutil
import time
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from squall.api.defaults import DEFAULTS, KEYS, STORM_KEYS_NOT_USED


class _KeyConstants(type):
    """Config's metaclass: the key constants (``Config.TOPOLOGY_WORKERS`` ...) are set from the
    registry below the class, so that each key's name is written once; a constant that is none
    raises ``AttributeError`` naming the closest (and type checkers see every constant as a str)."""

    def __getattr__(cls, name: str) -> str:
        if name.startswith("_"):
            raise AttributeError(name)
        close = difflib.get_close_matches(name, [key.constant for key in KEYS.values()], n=1)
        raise AttributeError(f"Config has no key constant {name!r}" + (f"; did you mean {close[0]}?" if close else ""))


class Config(dict, metaclass=_KeyConstants):
    """Topology configuration. Keys are Storm's (``"topology.workers"``); user keys are kept too.

    Only the keys set here override :data:`squall.api.defaults.DEFAULTS`. Every registered key
    (:data:`squall.api.defaults.KEYS`) has its constant, as in Storm: ``Config.TOPOLOGY_WORKERS``.
    """

    def set_num_workers(self, n: int) -> Config:
        self[self.TOPOLOGY_WORKERS] = n
        return self

    def set_num_ackers(self, n: int) -> Config:
        self[self.TOPOLOGY_ACKER_EXECUTORS] = n
        return self

    def set_message_timeout_secs(self, secs: float) -> Config:
        self[self.TOPOLOGY_MESSAGE_TIMEOUT_SECS] = secs
        return self

    def set_max_spout_pending(self, n: int | None) -> Config:
        self[self.TOPOLOGY_MAX_SPOUT_PENDING] = n
        return self

    def set_debug(self, debug: bool) -> Config:
        self[self.TOPOLOGY_DEBUG] = debug
        return self

    def set_fall_back_on_java_serialization(self, fall_back: bool) -> Config:
        """Let tuple values of types that are neither msgpack's own nor registered cross
        workers pickled (cloudpickle). Unpickling runs code: only over authenticated links
        (``topology.messaging.secure``, the default); prefer :meth:`register_serialization`."""
        self[self.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION] = fall_back
        return self

    def set_messaging_secure(self, secure: bool) -> Config:
        """Authenticate and encrypt the topology's links (ZeroMQ CURVE, the default), or not:
        off, anyone who can reach a port can inject tuples or control messages."""
        self[self.TOPOLOGY_MESSAGING_SECURE] = secure
        return self

    def register_serialization(self, cls: type, serializer: Any) -> Config:
        """Serialize instances of ``cls`` that cross workers with ``serializer`` (an object,
        or a class to instantiate, with ``serialize(obj) -> bytes`` and
        ``deserialize(data) -> obj``): Storm's Kryo registration. Without one, such values
        cannot cross workers unless ``topology.fall.back.on.java.serialization`` is on."""
        if not isinstance(cls, type):
            raise ValueError(f"register_serialization: {cls!r} is not a class")
        if isinstance(serializer, type):
            serializer = serializer()
        for method in ("serialize", "deserialize"):
            if not callable(getattr(serializer, method, None)):
                raise ValueError(f"register_serialization({cls.__name__}): {serializer!r} has no {method}()")
        registrations = [r for r in self.get(self.TOPOLOGY_KRYO_REGISTER, []) if r[0] is not cls]
        self[self.TOPOLOGY_KRYO_REGISTER] = [*registrations, (cls, serializer)]
        return self


def _set_key_constants() -> None:
    for key in KEYS.values():
        setattr(Config, key.constant, key.name)


_set_key_constants()

#: Storm's configuration namespaces: a key under them that is not registered is a mistake or
#: a Storm setting Squall does not use, never one of the topology's own settings.
STORM_NAMESPACES = ("topology.", "supervisor.", "worker.", "nimbus.", "storm.", "ui.")

log = logging.getLogger("squall.config")


def merged_config(*layers: Mapping[str, Any] | None) -> dict[str, Any]:
    """DEFAULTS overridden by each layer in turn; registered keys are checked by their validators.

    Raises ``ValueError`` naming the offending key and value.
    """
    conf: dict[str, Any] = dict(DEFAULTS)
    for layer in layers:
        if layer:
            conf.update(layer)
    for name, value in conf.items():
        key = KEYS.get(name)
        if key is not None:
            key.check(name, value)
    if conf[Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION] and not conf[Config.TOPOLOGY_MESSAGING_SECURE]:
        raise ValueError(
            f"config {Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION!r} is true but "
            f"{Config.TOPOLOGY_MESSAGING_SECURE!r} is false: pickled values are only accepted over "
            "authenticated links (unpickling runs code); turn one of them around"
        )
    return conf


def warn_unknown_keys(conf: Mapping[str, Any], where: str) -> None:
    """Log a warning (logger ``squall.config``) naming each key of ``conf`` that is not
    registered but looks like a setting: a close match of a registered key (the warning
    suggests it) or a key under one of :data:`STORM_NAMESPACES` (the warning says Squall does
    not use it, and why when :data:`~squall.api.defaults.STORM_KEYS_NOT_USED` knows). The
    topology's own settings ("my.app.rate") are left alone, as Storm topologies keep theirs
    in the same config. ``where`` starts each message ("topology 'wordcount'")."""
    for name in conf:
        if not isinstance(name, str) or name in KEYS:
            continue
        # 0.8: "topology.worker" and "topolgy.workers" match, a user's "my.workers" (0.62) does not
        close = difflib.get_close_matches(name, KEYS, n=1, cutoff=0.8)
        if name in STORM_KEYS_NOT_USED:
            log.warning("%s: config key %r is not a Squall setting: %s", where, name, STORM_KEYS_NOT_USED[name])
        elif close:
            log.warning("%s: config key %r is not a Squall setting; did you mean %r?", where, name, close[0])
        elif name.startswith(STORM_NAMESPACES):
            log.warning("%s: config key %r is not a Squall setting: Squall does not use it", where, name)


def squall_home() -> Path:
    """Where Squall keeps what it keeps for this user: ``$SQUALL_HOME``, else ``~/.squall``.

    Read on every call, so that a test can point it elsewhere by setting ``SQUALL_HOME``."""
    home = os.environ.get("SQUALL_HOME")
    return Path(home) if home else Path.home() / ".squall"


def run_log_dir(name: str, retained: int) -> Path:
    """A new directory for the logs of one run of topology ``name``: ``logs/NAME/RUN`` in
    :func:`squall_home` (RUN: the start time to the nanosecond and the pid: runs sort by age).
    Only the ``retained`` newest runs' directories are kept: older ones are removed here."""
    parent = squall_home() / "logs" / urllib.parse.quote(name, safe="")
    parent.mkdir(parents=True, exist_ok=True)
    now = time.time_ns()
    run = parent / f"{time.strftime('%Y%m%d-%H%M%S', time.localtime(now // 10**9))}.{now % 10**9:09d}-{os.getpid()}"
    run.mkdir()
    older = sorted(p for p in parent.iterdir() if p.is_dir() and p != run)
    for old in older[:max(0, len(older) + 1 - retained)]:
        shutil.rmtree(old, ignore_errors=True)
    return run


def user_config_path() -> Path:
    """The user's config file, Storm's ``~/.storm/storm.yaml``: ``squall.yaml`` in
    :func:`squall_home`."""
    return squall_home() / "squall.yaml"


def user_config() -> dict[str, Any]:
    """The keys of the user's config file (:func:`user_config_path`), as ``storm.yaml``'s: what
    every command starts from, under a topology's own config and ``-c``. Empty when there is no
    file; ``ValueError`` naming the file when it is not YAML or not a mapping of keys."""
    path = user_config_path()
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror}") from None
    import yaml  # here: only the commands read the user's config, and workers need not import it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"{path} is not YAML: {e}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(k, str) for k in data):
        raise ValueError(f"{path} must be a mapping of config keys to values (as storm.yaml), "
                         f"not a {type(data).__name__}")
    return data


def checked_config(name: str, conf: Mapping[str, Any] | None,
                   component_confs: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """Topology ``name``'s config as submission checks it: ``conf`` merged over DEFAULTS and
    validated, every component's configuration (``component_confs``: component id -> its
    ``get_component_configuration`` and ``add_configuration``) validated merged over that, and
    a warning for each unknown key of either (:func:`warn_unknown_keys`).

    Returns the topology's merged config; raises ``ValueError`` naming the key (and the
    component, for a component's)."""
    where = f"topology {name!r}"
    merged = merged_config(conf)
    warn_unknown_keys(conf or {}, where)
    for component, component_conf in component_confs.items():
        try:
            merged_config(merged, component_conf)
        except ValueError as e:
            raise ValueError(f"component {component!r}: {e}") from None
        warn_unknown_keys(component_conf, f"{where}, component {component!r}")
    return merged


def config_table(conf: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows of a configuration table (``squall plan``, the UI), one per key of ``conf``
    (a merged config, as :func:`merged_config` returns): registered keys first, in the
    registry's order, then the topology's own keys sorted by name. Each row is a dict:

    * ``key``, ``value``: the key and its value in ``conf`` (as is, not made printable);
    * ``default``: the registered default (None for the topology's own keys);
    * ``doc``: the registered one-line doc ("" for the topology's own keys);
    * ``changed``: the value differs from the default, or the key is the topology's own;
    * ``registered``: the key is Squall's setting; ``storm``: it is Storm's own key.
    """
    rows = []
    for name, key in KEYS.items():
        if name in conf:
            rows.append({"key": name, "value": conf[name], "default": key.default, "doc": key.doc,
                         "changed": conf[name] != key.default, "registered": True, "storm": key.storm})
    for name in sorted((name for name in conf if name not in KEYS), key=str):
        rows.append({"key": name, "value": conf[name], "default": None, "doc": "", "changed": True,
                     "registered": False, "storm": False})
    return rows
