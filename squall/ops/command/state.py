"""What ``squall run`` and ``squall submit`` say about a stateful topology's state before they
submit it, and ``--fresh``; and the state settings they record for ``squall state``
(:mod:`squall.ops.command.state_report`).

The settings of a topology's state — its provider and the provider's config, the task ids of
its stateful components, how its values are serialized — are recorded by ``run`` and
``submit`` in ``state-settings/NAME.json`` under :func:`~squall.api.config.squall_home`
(private to the user: the provider's config may hold a password), so that ``squall state NAME``
reads the state the run wrote, where it wrote it, without the topology file."""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from squall.api.config import Config, merged_config, squall_home
from squall.api.state.provider import Commit, StateProviderError, provider_config, provider_for
from squall.api.storm_topology import StormTopology
from squall.ops.command import UsageError
from squall.runtime.assignment import assign
from squall.runtime.serialization import Serializer


def announce_state(name: str, topology: StormTopology, conf: dict[str, Any], fresh: bool) -> None:
    """For a topology with stateful components, one line on stderr: "resuming NAME from the
    state committed at TIME (checkpoint N) in WHERE", or "starting NAME with empty state in
    WHERE". With ``fresh``, the state there is dropped first, after a line saying what is.
    Then its state settings are recorded (:func:`record_settings`) for ``squall state``.

    Raises :class:`UsageError` for ``fresh`` on a topology without state, or when the state
    cannot be dropped. A location that cannot be read is left for the submission to report,
    and its settings are not recorded: they would replace those of a location that works."""
    if not topology.checkpointed:
        if fresh:
            raise UsageError(f"--fresh: topology {name!r} has no stateful component: it keeps no state to drop")
        return
    provider = provider_for(conf, name)
    try:
        try:
            commit = provider.last_commit()
        except StateProviderError:
            if fresh:
                raise
            return  # unreachable, or another topology's: the submission says so, in its own words
        if fresh:
            what = f"committed at {when_committed(commit)}" if commit is not None else "nothing committed yet"
            print(f"squall: --fresh: dropping the state of {name!r} in {provider.location} ({what})", file=sys.stderr)
            provider.drop()
            commit = None
    except StateProviderError as e:
        raise UsageError(f"--fresh: {e}") from None
    finally:
        provider.close()
    if commit is None:
        print(f"squall: starting {name!r} with empty state in {provider.location}", file=sys.stderr)
    else:
        print(f"squall: resuming {name!r} from the state committed at {when_committed(commit)} in {provider.location} "
              f"(--fresh starts over)", file=sys.stderr)
    record_settings(settings_of(name, topology, conf))


def when_committed(commit: Commit) -> str:
    """``2026-11-26 04:10:03 (checkpoint 42)``, local time."""
    at = "an unrecorded time" if commit.at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(commit.at))
    return f"{at} (checkpoint {commit.txid:,})"


@dataclass(frozen=True)
class StateSettings:
    """What reading topology ``name``'s committed state from outside it takes: its state
    provider (``provider`` and ``provider_config``, as :func:`provider_for` takes them), the task
    ids of each stateful component (``tasks``), and how the values were serialized: the pickle
    fallback, and ``registrations``, the registered serializers (``Config.register_serialization``).
    Those are objects of the user's code, known from a topology file only: they are not recorded,
    and without them a value of a registered type cannot be rebuilt."""

    name: str
    provider: str
    provider_config: dict[str, Any]
    tasks: dict[str, list[int]]
    pickle_fallback: bool
    registrations: list[tuple[type, Any]] | None = None

    def provider_conf(self) -> dict[str, Any]:
        """The config keys :func:`provider_for` reads."""
        return {Config.TOPOLOGY_STATE_PROVIDER: self.provider,
                Config.TOPOLOGY_STATE_PROVIDER_CONFIG: self.provider_config}

    def serializer(self) -> Serializer:
        """A serializer reading the values as the topology's tasks do (less the registrations
        when they are not known: then a registered type's value comes back as a ``msgpack.ExtType``)."""
        return Serializer(self.registrations, self.pickle_fallback)


def settings_of(name: str, topology: StormTopology, conf: dict[str, Any]) -> StateSettings:
    """The state settings of topology ``name`` submitted with ``conf`` (its config, merged over
    the defaults or not). The task ids are the ones the submission assigns: they depend on every
    component and on the number of ackers, which a rebalance keeps (one that grows a stateful
    bolt's tasks moves them: :func:`record_rescaled`).

    Raises :class:`UsageError` if the topology has no stateful component, ``ValueError`` for a
    bad config value (as the submission would)."""
    if not topology.checkpointed:
        raise UsageError(f"topology {name!r} has no stateful component: it keeps no state")
    merged = merged_config(conf)
    try:
        config = provider_config(merged)
    except StateProviderError as e:
        raise UsageError(str(e)) from None
    provider = merged.get(Config.TOPOLOGY_STATE_PROVIDER) or "memory"  # provider_for's default
    if provider == "sqlite" and config.get("path"):
        # relative to each process's directory: recorded as the run's, for a reader started elsewhere
        config = {**config, "path": os.path.abspath(os.path.expanduser(config["path"]))}
    component_tasks = assign(topology, merged).component_tasks
    return StateSettings(
        name=name,
        provider=provider,
        provider_config=config,
        tasks={component: component_tasks[component] for component in sorted(topology.state_layout)},
        pickle_fallback=bool(merged[Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION]),
        registrations=list(merged[Config.TOPOLOGY_KRYO_REGISTER] or []),
    )


def record_rescaled(name: str, topology: StormTopology, conf: dict[str, Any]) -> None:
    """Record the state settings again after a rebalance grew a stateful bolt's tasks (a
    cluster's ``on_state_rescaled``): the task ids moved with it."""
    record_settings(settings_of(name, topology, conf))


def settings_path(name: str) -> Path:
    """Where the state settings of topology ``name`` are recorded (the name quoted: it may hold a ``/``)."""
    return squall_home() / "state-settings" / f"{urllib.parse.quote(name, safe='')}.json"


def record_settings(settings: StateSettings) -> None:
    """Record ``settings`` at :func:`settings_path`, replacing those of an earlier run, atomically
    and readable by the user only. A failure is said on stderr and is no error: the run does not
    need them, and ``squall state --topology FILE`` reads the state without them."""
    path = settings_path(settings.name)
    record = {"topology": settings.name, "provider": settings.provider, "provider_config": settings.provider_config,
              "tasks": settings.tasks, "pickle_fallback": settings.pickle_fallback}
    temp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        text = json.dumps(record, indent=1)
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with os.fdopen(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(text)
        os.replace(temp, path)
    except (OSError, TypeError, ValueError) as e:  # TypeError: a provider config value JSON cannot hold
        temp.unlink(missing_ok=True)
        print(f"squall: cannot record the state settings of {settings.name!r} in {path} ({e}): squall state "
              f"will need --topology FILE", file=sys.stderr)


def recorded_settings(name: str) -> StateSettings:
    """The state settings the last ``squall run`` / ``submit`` of topology ``name`` recorded.

    Raises :class:`UsageError` if there are none, or if they cannot be read."""
    path = settings_path(name)
    try:
        record = json.loads(path.read_text())
        return StateSettings(name=record["topology"], provider=record["provider"],
                             provider_config=record["provider_config"],
                             tasks={component: list(tasks) for component, tasks in record["tasks"].items()},
                             pickle_fallback=record["pickle_fallback"])
    except FileNotFoundError:
        raise UsageError(f"no state known for topology {name!r}: no settings recorded in {path.parent}; run it "
                         f"with squall run/submit first, or give --topology FILE") from None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise UsageError(f"the state settings of topology {name!r} in {path} cannot be read ({e!r}): give "
                         f"--topology FILE") from None
