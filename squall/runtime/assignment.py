"""Assignment of tasks to executors and executors to workers (Storm's even scheduler).

* Task ids are numbered from 1 over the components sorted by id, system components
  (``__acker``) included, as Storm numbers them.
* A component's tasks are split over its executors as evenly as possible, lower task
  ids first (4 tasks on 2 executors: [1, 2], [3, 4]).
* User executors are dealt round-robin over the workers, then the ackers: with the seeds'
  example (2 + 2 + 6 executors, 2 workers) each worker gets 5 user executors and 1 acker.
* Unless a component declares its executors' CPU (``topology.component.cpu.pcore.percent``,
  ``set_cpu_load``, or the autoscaler's measure): then the executors, largest load first, each go
  to the worker with the least load so far (the others, ackers included, count the topology's
  default), so that no worker is the busiest by placement alone.
* Worker i gets the i-th port of ``supervisor.slots.ports``; past the end of the list (or
  with an empty list) its port is 0: a worker process then binds an ephemeral port.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from squall.api.config import Config
from squall.api.defaults import DEFAULTS
from squall.api.system_ids import ACKER_COMPONENT
from squall.api.storm_topology import StormTopology


@dataclass(frozen=True)
class ExecutorAssignment:
    component: str
    tasks: tuple[int, ...]


@dataclass(frozen=True)
class WorkerAssignment:
    index: int
    port: int
    executors: tuple[ExecutorAssignment, ...]

    @property
    def tasks(self) -> list[int]:
        return sorted(t for e in self.executors for t in e.tasks)


@dataclass(frozen=True)
class Assignment:
    """Where every task runs; the same in every worker."""

    component_tasks: dict[str, list[int]]
    task_component: dict[int, str]
    workers: tuple[WorkerAssignment, ...]
    task_worker: dict[int, int]  # task id -> worker index
    num_ackers: int  # acker tasks

    @property
    def acker_tasks(self) -> list[int]:
        return self.component_tasks.get(ACKER_COMPONENT, [])


def split_evenly(items: list[Any], parts: int) -> list[list[Any]]:
    """``items`` in ``parts`` consecutive runs whose sizes differ by at most one, larger first."""
    size, extra = divmod(len(items), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def acker_layout(conf: dict[str, Any]) -> tuple[int, int]:
    """(acker tasks, acker executors) under ``conf``: executors are ``topology.acker.executors``
    (None: one per worker); tasks are ``topology.acker.tasks`` (None: one per executor, or
    enough for ``topology.autoscale.max.workers`` workers when autoscaling, so that the ackers
    grow with the workers while every task keeps its id); (0, 0) when acking is off."""
    executors = conf[Config.TOPOLOGY_ACKER_EXECUTORS]
    if executors is None:
        executors = conf[Config.TOPOLOGY_WORKERS]
    if not executors:
        return 0, 0
    tasks = conf.get(Config.TOPOLOGY_ACKER_TASKS)
    if tasks is None:
        autoscaled = conf[Config.TOPOLOGY_ACKER_EXECUTORS] is None and conf.get(Config.TOPOLOGY_AUTOSCALE_ENABLED)
        tasks = max(executors, conf[Config.TOPOLOGY_AUTOSCALE_MAX_WORKERS]) if autoscaled else executors
    return tasks, min(executors, tasks)


def assign(topology: StormTopology, conf: dict[str, Any]) -> Assignment:
    num_workers = conf[Config.TOPOLOGY_WORKERS]
    num_ackers, acker_executors = acker_layout(conf)
    sizes = {cid: (c.num_tasks, min(c.parallelism, c.num_tasks)) for cid, c in topology.components.items()}
    if num_ackers:
        sizes[ACKER_COMPONENT] = (num_ackers, acker_executors)
    component_tasks: dict[str, list[int]] = {}
    next_task = 1
    for cid in sorted(sizes):
        n = sizes[cid][0]
        component_tasks[cid] = list(range(next_task, next_task + n))
        next_task += n
    user, system = [], []
    for cid in sorted(sizes):
        executors = [ExecutorAssignment(cid, tuple(ts)) for ts in split_evenly(component_tasks[cid], sizes[cid][1])]
        (system if cid.startswith("__") else user).extend(executors)
    per_worker: list[list[ExecutorAssignment]] = [[] for _ in range(num_workers)]
    cpu_key = Config.TOPOLOGY_COMPONENT_CPU_PCORE_PERCENT
    declared = {cid: c.conf[cpu_key] for cid, c in topology.components.items() if cpu_key in c.conf}
    if declared:
        default = conf.get(cpu_key, DEFAULTS[cpu_key])
        placed = [0.0] * num_workers
        # sorted() is stable: equal loads keep the round-robin order
        for executor in sorted(user + system, key=lambda e: -declared.get(e.component, default)):
            w = min(range(num_workers), key=lambda i: (placed[i], len(per_worker[i]), i))
            per_worker[w].append(executor)
            placed[w] += declared.get(executor.component, default)
    else:
        for i, executor in enumerate(user + system):
            per_worker[i % num_workers].append(executor)
    ports = list(conf.get(Config.SUPERVISOR_SLOTS_PORTS) or [])
    workers, task_worker = [], {}
    for i, executors in enumerate(per_worker):
        port = ports[i] if i < len(ports) else 0  # 0: the worker binds an ephemeral port
        workers.append(WorkerAssignment(i, port, tuple(executors)))
        for e in executors:
            for t in e.tasks:
                task_worker[t] = i
    return Assignment(
        component_tasks=component_tasks,
        task_component={t: cid for cid, ts in component_tasks.items() for t in ts},
        workers=tuple(workers),
        task_worker=task_worker,
        num_ackers=num_ackers,
    )
