"""``squall plan``: what a topology gets before it runs — its workers, their executors and
tasks — how its tuples travel between workers (whether the links are authenticated and
encrypted, and what becomes of values msgpack cannot carry), and its configuration with the
registry's docs."""

from __future__ import annotations

import json
from typing import Any

from squall import compiled
from squall.api.config import Config, config_table
from squall.api.storm_topology import StormTopology
from squall.runtime.assignment import Assignment


def format_plan(assignment: Assignment, conf: dict[str, Any], topology: StormTopology | None = None) -> str:
    """One line per worker followed by one per executor (with ``topology``, what its component
    runs when the component says: a Streams API bolt's operations), then a line on the links
    (``topology.messaging.secure``), one on values of types neither msgpack's own nor
    registered (``topology.fall.back.on.java.serialization``), one on whether the data path
    runs compiled (:func:`squall.compiled.describe`), then the configuration
    (:func:`format_config`). ``conf`` is the merged config ``assignment`` was made with."""
    lines = []
    runs = {cid: spec.operations for cid, spec in (topology.components.items() if topology else ())
            if spec.operations is not None}
    for worker in assignment.workers:
        lines.append(f"worker {worker.index} (port {worker.port}): {len(worker.executors)} executors")
        lines.extend(f"  executor {executor.component:<20} tasks {list(executor.tasks)}"
                     + (f"  runs {runs[executor.component]}" if executor.component in runs else "")
                     for executor in worker.executors)
    if conf[Config.TOPOLOGY_MESSAGING_SECURE]:
        lines.append("links: authenticated and encrypted (ZeroMQ CURVE, a key pair per topology)")
    else:
        lines.append(f"links: NOT authenticated or encrypted ({Config.TOPOLOGY_MESSAGING_SECURE}=false)")
    fall_back = conf[Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION]
    fate = "pickled (cloudpickle) over authenticated links" if fall_back else "refused at emit"
    lines.append(f"values of other types: {fate} ({Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION}="
                 f"{'true' if fall_back else 'false'}); msgpack types and registered serializers travel")
    lines.append(compiled.describe())
    lines.append(format_config(conf))
    return "\n".join(lines)


#: The first line of :func:`format_config`.
CONFIG_HEADER = "config (* = not the default; squall/api/defaults.py tells more):"


def format_config(conf: dict[str, Any]) -> str:
    """:data:`CONFIG_HEADER`, then a line per key of the merged config ``conf`` (as
    :func:`squall.api.config.config_table` orders them): a ``*`` when the value is not the
    default, the key, its value as JSON (``-c`` takes that form), and the key's one-line doc."""
    rows = config_table(conf)
    values = [_as_json(row["value"]) for row in rows]
    key_width = max(len(str(row["key"])) for row in rows)
    value_width = min(max(map(len, values)), 24)  # a long value pushes its doc right, not every doc
    lines = [CONFIG_HEADER]
    for row, value in zip(rows, values):
        mark = "*" if row["changed"] else " "
        lines.append(f"  {mark} {str(row['key']):<{key_width}}  {value:<{value_width}}  {row['doc']}".rstrip())
    return "\n".join(lines)


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value, default=repr)
    except (TypeError, ValueError):  # keys JSON cannot have, a circular value
        return repr(value)
