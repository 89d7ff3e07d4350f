"""Runs acker tasks (component ``__acker``; the algorithm is :mod:`squall.acker`'s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.acker import ACK_ACK, ACKED_BATCH, Acker
from squall.executor.bolt_executor import BoltExecutor
from squall.executor.executor import Control
from squall.tuple import Tuple


class AckerExecutor(BoltExecutor):
    """A bolt executor whose tasks are :class:`Acker` objects; ``ROTATE`` controls (every
    ``topology.message.timeout.secs``) expire the trees that did not complete."""

    kind = "acker"

    def setup(self) -> None:
        # spout task of this worker -> the trees of it that completed in the batch being
        # processed: told in one ACKED_BATCH tuple at the batch's end (see squall.acker)
        self._completed: dict[int, list[int]] = {}
        self.ackers = {task: Acker(self._sender(task)) for task in self.task_ids}

    def _sender(self, task: int) -> Callable[[int, str, list[Any]], None]:
        sources, completed, local = self.system_sources, self._completed, self.transfer.local_tasks

        def send(target: int, stream: str, values: list[Any]) -> None:
            if stream == ACK_ACK and target in local:
                roots = completed.get(target)
                if roots is None:
                    roots = completed[target] = []
                roots.append(values[0])
            else:
                self.send((target,), Tuple(values, sources[stream], task))

        return send

    def teardown(self) -> None:
        pass

    def control(self, msg: Control) -> None:
        if msg.kind == Control.ROTATE:
            for acker in self.ackers.values():
                acker.rotate()
        elif msg.kind == Control.STOP:
            self.stopping = True

    def process_batch(self, batch: list[Any]) -> None:
        ackers = self.ackers
        for task, tup in self.pairs(batch):
            ackers[task].execute(tup._source.stream, tup.values)
        if self._completed:
            source, me = self.system_sources[ACKED_BATCH], self.task_ids[0]
            for target, roots in self._completed.items():
                self.send((target,), Tuple([roots], source, me))
            self._completed.clear()
