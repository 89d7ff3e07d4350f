"""``squall plan``: what a topology gets before it runs — its workers, their executors and
tasks — and how its tuples travel between workers: whether the links are authenticated and
encrypted, and what becomes of values msgpack cannot carry."""

from __future__ import annotations

from typing import Any

from squall.config import Config
from squall.scheduler import Assignment


def format_plan(assignment: Assignment, conf: dict[str, Any]) -> str:
    """One line per worker followed by one per executor, then a line on the links
    (``topology.messaging.secure``) and one on values of types neither msgpack's own nor
    registered (``topology.fall.back.on.java.serialization``). ``conf`` is the merged config
    ``assignment`` was made with."""
    lines = []
    for worker in assignment.workers:
        lines.append(f"worker {worker.index} (port {worker.port}): {len(worker.executors)} executors")
        lines.extend(f"  executor {executor.component:<20} tasks {list(executor.tasks)}"
                     for executor in worker.executors)
    if conf[Config.TOPOLOGY_MESSAGING_SECURE]:
        lines.append("links: authenticated and encrypted (ZeroMQ CURVE, a key pair per topology)")
    else:
        lines.append(f"links: NOT authenticated or encrypted ({Config.TOPOLOGY_MESSAGING_SECURE}=false)")
    fall_back = conf[Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION]
    fate = "pickled (cloudpickle) over authenticated links" if fall_back else "refused at emit"
    lines.append(f"values of other types: {fate} ({Config.TOPOLOGY_FALL_BACK_ON_JAVA_SERIALIZATION}="
                 f"{'true' if fall_back else 'false'}); msgpack types and registered serializers travel")
    return "\n".join(lines)
