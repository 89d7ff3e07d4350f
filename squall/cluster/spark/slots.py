"""A Spark cluster's task slots as a topology's barrier job needs them: one per worker, all at once.

Executors register with the driver one by one after the application starts, and some take long:
a container scheduled on YARN or Kubernetes, an image pulled, a JVM starting on a loaded host.
Spark's own scheduler waits for them before it schedules anything, up to
``spark.scheduler.maxRegisteredResourcesWaitingTime`` (30 s by default). :class:`SlotsWait` does
the same for a topology that needs more task slots than are registered yet, and says once that
it waits. Only a cluster whose settings cap it below what the topology needs
(:func:`slots_cap`: ``spark.cores.max``, ``spark.executor.instances``, a ``local-cluster``'s
size) is refused at once: no executor still starting can change that.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from squall.cluster.spark_master_url import is_embedded, local_task_slots

#: Spark's setting (and its default) bounding the wait for executors to register.
REGISTRATION_WAIT_KEY = "spark.scheduler.maxRegisteredResourcesWaitingTime"
_REGISTRATION_WAIT_DEFAULT = "30s"
# YARN's and Kubernetes' executors when the settings name none (Spark's DEFAULT_NUMBER_EXECUTORS,
# and their executors' default of one core)
_DEFAULT_EXECUTORS, _DEFAULT_EXECUTOR_CORES = 2, 1


def registered_slots(spark_context: Any) -> int:
    """Tasks the cluster can run at once, busy or not, with the executors registered now: what
    Spark checks a barrier stage against (``SparkContext.maxNumConcurrentTasks``, internal to
    Spark, reached through Py4J)."""
    jsc = spark_context._jsc.sc()
    return jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile())


def slots_cap(master: str, conf: Mapping[str, str]) -> tuple[int, str] | None:
    """The most task slots Spark's settings ``conf`` let the application on ``master`` ever have,
    with the settings that say so ("" for a master of this machine: its URL says it); None when
    the cluster decides (a standalone master without ``spark.cores.max``: as many as its workers
    have).

    A standalone cluster gives at most ``spark.cores.max`` cores; YARN and Kubernetes start
    ``spark.executor.instances`` executors (2 unless set) of ``spark.executor.cores`` (1 unless
    set); each executor runs ``cores // spark.task.cpus`` tasks at once."""
    cpus = int(conf.get("spark.task.cpus", "1"))
    local = local_task_slots(master, cpus)
    if local is not None:
        return local, ""
    executor_cores = conf.get("spark.executor.cores")
    if master.startswith("spark://"):
        if "spark.cores.max" not in conf:
            return None
        max_cores = int(conf["spark.cores.max"])
        if executor_cores is None:  # executors take what each worker has: cores split over them
            return max_cores // cpus, f"spark.cores.max={max_cores}"
        executors = max_cores // int(executor_cores)
        return (executors * (int(executor_cores) // cpus),
                f"spark.cores.max={max_cores}, spark.executor.cores={executor_cores}")
    executors = int(conf.get("spark.executor.instances", _DEFAULT_EXECUTORS))
    cores = int(executor_cores or _DEFAULT_EXECUTOR_CORES)
    return executors * (cores // cpus), f"spark.executor.instances={executors}, spark.executor.cores={cores}"


def registration_wait_secs(spark_context: Any) -> float:
    """``spark.scheduler.maxRegisteredResourcesWaitingTime`` in seconds, read as Spark reads it
    (``30s``, ``2min``, a bare number in milliseconds)."""
    conf = spark_context._jsc.sc().conf()
    return conf.getTimeAsMs(REGISTRATION_WAIT_KEY, _REGISTRATION_WAIT_DEFAULT) / 1000.0


class SlotsRefused(Exception):
    """The cluster has fewer task slots than a topology needs: the message, one line, says how
    many it needs, how many there are and what to change."""


class SlotsWait:
    """Waits, as Spark's scheduler does, for the executors a cluster is still starting, until
    ``needed`` task slots are free for one topology (``held``: the slots this driver's other
    topologies hold).

    A cluster capped below the need (:func:`slots_cap`) is refused at once, by the constructor.
    Then :meth:`check` is polled (it never blocks): while slots are missing it says so once
    through ``say`` and goes on for ``spark.scheduler.maxRegisteredResourcesWaitingTime`` from
    then, after which it refuses. Embedded masters (``local[N]``) never wait: their slots are all
    there from the start."""

    def __init__(self, spark_context: Any, topology: str, needed: int, held: dict[str, int],
                 say: Callable[[str], None]) -> None:
        self._sc, self._topology, self._needed, self._held, self._say = spark_context, topology, needed, held, say
        self._held_total = sum(held.values())
        self._deadline: float | None = None
        self._bound = 0.0
        cap = slots_cap(spark_context.master, dict(spark_context.getConf().getAll()))
        if cap is not None and cap[0] - self._held_total < needed:
            raise SlotsRefused(self._refusal(cap[0], f" ({cap[1]})" if cap[1] else ""))

    def check(self, now: float) -> bool:
        """True once ``needed`` slots are free; False while executors may still register.
        Raises :class:`SlotsRefused` when the wait is over without enough slots."""
        registered = registered_slots(self._sc)
        free = registered - self._held_total
        if free >= self._needed:
            return True
        if is_embedded(self._sc.master):
            raise SlotsRefused(self._refusal(registered, ""))
        if self._deadline is None:
            self._bound = registration_wait_secs(self._sc)
            self._deadline = now + self._bound
            self._say(f"waiting for Spark executors: {max(0, free)} of {self._needed} task slots registered "
                      f"(for up to {self._bound:g}s: {REGISTRATION_WAIT_KEY})")
        if now < self._deadline:
            return False
        raise SlotsRefused(self._refusal(registered, f" after waiting {self._bound:g}s for its executors to "
                                                     f"register ({REGISTRATION_WAIT_KEY})"))

    def _refusal(self, total: int, why: str) -> str:
        holders = ", ".join(f"{n!r} ({k})" for n, k in self._held.items())
        return (f"topology {self._topology!r} needs {self._needed} Spark task slots (one per worker: "
                f"topology.workers={self._needed}) but the cluster ({self._sc.master}) has {total}{why}"
                + (f", {self._held_total} of them held by running topologies {holders}" if self._held_total else "")
                + "; lower topology.workers or give the cluster more executors or cores")
