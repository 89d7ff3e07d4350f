"""Runs acker tasks (component ``__acker``; the algorithm is :mod:`squall.runtime.acker`'s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.api.system_ids import ACK_ACK, ACKED_BATCH
from squall.runtime.acker import Acker
from squall.runtime.executor.bolt_executor import BoltExecutor
from squall.runtime.executor.executor import Control
from squall.runtime.messaging.tuple_batch import CompletedBatch


class AckerExecutor(BoltExecutor):
    """A bolt executor whose tasks are :class:`Acker` objects; ``ROTATE`` controls (every
    ``topology.message.timeout.secs``) expire the trees that did not complete."""

    kind = "acker"

    def setup(self) -> None:
        # spout task -> the trees of it that completed in the batch being processed: told
        # at the batch's end in one ACKED_BATCH tuple, or one CompletedBatch to another worker
        self._completed: dict[int, list[int]] = {}
        self.ackers = {task: Acker(self._sender(task)) for task in self.task_ids}

    def _sender(self, task: int) -> Callable[[int, str, list[Any]], None]:
        sources, completed = self.system_sources, self._completed

        def send(target: int, stream: str, values: list[Any]) -> None:
            if stream == ACK_ACK:
                roots = completed.get(target)
                if roots is None:
                    roots = completed[target] = []
                roots.append(values[0])
            else:
                self.send((target,), sources[stream], task, values)

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
            ackers[task].execute(tup.stream_source.stream, tup.values)
        if self._completed:
            source, me, local = self.system_sources[ACKED_BATCH], self.task_ids[0], self.transfer.local_tasks
            for target, roots in self._completed.items():
                if target in local:
                    self.send((target,), source, me, [roots])
                else:
                    self.transfer.send_group(target, CompletedBatch(me, target, roots))
            self._completed.clear()
