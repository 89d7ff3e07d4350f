"""Stream routes: where one emitting task's tuples on one stream go (its groupings).

A route is built once per (emitting task, stream), when the task starts: the groupers of
every subscribing bolt, the direct subscribers, and the observers every emit is reported to
(the testing API's capture, ``topology.debug`` logging), which cost nothing when there are
none. Routes are used from the emitting executor's thread only (or under its lock).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from squall.api.config import Config
from squall.api.context import TopologyContext
from squall.api.errors import EmitError
from squall.api.grouping import DIRECT, GlobalStreamId
from squall.api.tuple import StreamSource
from squall.runtime.executor.worker_context import WorkerContext
from squall.runtime.grouping import make_grouper
from squall.utils.rand import new_random

log = logging.getLogger("squall.executor")

Observer = Callable[[list[Any], list[int]], None]

_NO_TASKS: list[int] = []


class StreamRoute:
    """One emitting task's view of one of its streams: fields, groupers and counters.

    ``choose(values)`` returns the target tasks of a regular emit, ``choose_direct`` those
    of an ``emit_direct``; both report every emit to the ``observers``. ``grouper`` is the
    grouper ``choose`` stands for when it is that alone (one subscriber, no observer), else None.
    ``transferred`` is ``emitted * fanout`` when every emit reaches the same number of tasks,
    so the hot path counts only ``emitted``.
    """

    __slots__ = ("source", "arity", "choose", "grouper", "direct", "direct_targets", "emitted", "fanout",
                 "counted_transfers", "observers", "unobserved", "single", "sampler")

    def __init__(self, source: StreamSource, direct: bool, groupers: list[Any], direct_targets: set[int],
                 observers: list[Observer]) -> None:
        self.source = source
        self.arity = len(source.fields)
        self.direct = direct
        self.direct_targets = direct_targets
        self.emitted = 0
        self.counted_transfers = 0
        self.observers = observers
        fanouts = [g.fanout for g in groupers]
        self.fanout = None if direct or None in fanouts else sum(fanouts)
        if direct:
            choose = self._regular_emit_on_direct_stream
        elif not groupers:
            choose = lambda values: _NO_TASKS  # noqa: E731 - nobody subscribes
        elif len(groupers) == 1 and self.fanout is not None:
            choose = groupers[0].choose
        else:
            choose = self._chooser(groupers)
        self.unobserved = choose
        self.single = groupers[0] if len(groupers) == 1 else None
        self.sampler = None
        self._route_emits()

    def _route_emits(self) -> None:
        """``choose`` and ``grouper`` from the observers: the grouper alone when nobody observes."""
        self.choose = self._observed(self.unobserved) if self.observers else self.unobserved
        single = self.single
        self.grouper = single if single is not None and self.choose == single.choose else None

    def set_sampler(self, sampler: Observer | None) -> None:
        """Report every emit to ``sampler`` too (tuple sampling), or stop (None). Holding the
        emitting executor's lock; the collector's plans then follow (``EmitPlan.follow_route``)."""
        self.observers = [o for o in self.observers if o is not self.sampler] + ([sampler] if sampler else [])
        self.sampler = sampler
        self._route_emits()

    def choose_direct(self, task: int, values: list[Any]) -> list[int]:
        tasks = [task]
        self.counted_transfers += 1
        for observe in self.observers:
            observe(values, tasks)
        return tasks

    def _observed(self, inner: Callable[[list[Any]], list[int]]) -> Callable[[list[Any]], list[int]]:
        def choose(values: list[Any]) -> list[int]:
            tasks = inner(values)
            for observe in self.observers:
                observe(values, tasks)
            return tasks
        return choose

    def _chooser(self, groupers: list[Any]) -> Callable[[list[Any]], list[int]]:
        def choose(values: list[Any]) -> list[int]:
            tasks = [t for g in groupers for t in g.choose(values)]
            self.counted_transfers += len(tasks)
            return tasks
        return choose

    def _regular_emit_on_direct_stream(self, values: list[Any]) -> list[int]:
        raise EmitError(
            f"component {self.source.component!r}: regular emit on direct stream {self.source.stream!r}; "
            "use emit_direct"
        )

    @property
    def transferred(self) -> int:
        return self.counted_transfers if self.fanout is None else self.emitted * self.fanout


def build_routes(worker: WorkerContext, component: str, conf: dict[str, Any],
                 context: TopologyContext) -> dict[str, StreamRoute]:
    """The routes (groupers included) of every stream the task of ``context`` emits on."""
    task_id = context.get_this_task_id()
    spec = worker.topology.components.get(component)
    routes: dict[str, StreamRoute] = {}
    rng = new_random()
    local = set(worker.assignment.workers[worker.index].tasks)
    for stream, stream_spec in (spec.outputs if spec is not None else {}).items():
        groupers, direct_targets = [], set()
        for cid, comp in worker.topology.components.items():
            grouping = comp.inputs.get((component, stream))
            if grouping is None:
                continue
            targets = worker.assignment.component_tasks[cid]
            if grouping.type == DIRECT:
                direct_targets.update(targets)
                continue
            groupers.append(make_grouper(
                grouping, context=context, stream=GlobalStreamId(component, stream), targets=targets,
                output_fields=stream_spec.fields, local_tasks=local, rng=rng,
                load=None if conf[Config.TOPOLOGY_DISABLE_LOADAWARE_MESSAGING] or worker.credits is None
                else worker.credits.load,
                key_groups=conf[Config.TOPOLOGY_STATE_KEY_GROUPS] if comp.stateful else None,
            ))
        routes[stream] = StreamRoute(worker.sources[(component, stream)], stream_spec.direct, groupers,
                                     direct_targets, _observers(worker, component, conf, task_id, stream))
    return routes


def _observers(worker: WorkerContext, component: str, conf: dict[str, Any], task_id: int,
               stream: str) -> list[Observer]:
    """What every emit of ``task_id`` on ``stream`` is reported to (see StreamRoute)."""
    observers = []
    capture = worker.state.capture
    if capture is not None:
        observers.append(lambda values, tasks: capture(component, stream, values))
    if conf[Config.TOPOLOGY_DEBUG]:
        observers.append(lambda values, tasks: log.info("%s:%s emitted on %r to tasks %s: %r",
                                                        component, task_id, stream, tasks, values))
    return observers
