"""Runs acker tasks (component ``__acker``; the algorithm is :mod:`squall.runtime.acker`'s)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from squall.api.config import Config
from squall.api.system_ids import ACKED_BATCH
from squall.runtime.acker import Acker
from squall.runtime.executor.executor import Control, InputExecutor
from squall.runtime.messaging.tuple_batch import CompletedBatch


class AckerExecutor(InputExecutor):
    """Runs :class:`Acker` tasks (in Storm, a bolt); ``ROTATE`` controls (every
    ``topology.message.timeout.secs``) expire the trees that did not complete."""

    kind = "acker"

    def setup(self) -> None:
        self.ackers = {task: Acker(self._sender(task)) for task in self.task_ids}

    def _sender(self, task: int) -> Callable[[int, str, list[Any]], None]:
        """What acker task ``task`` tells a spout task one tree at a time (fails, resets)."""
        sources = self.system_sources
        return lambda target, stream, values: self.send((target,), sources[stream], task, values)

    def timers(self) -> list[tuple[float, Any]]:
        return [(self.conf[Config.TOPOLOGY_MESSAGE_TIMEOUT_SECS], self.post(Control.ROTATE))]

    def control(self, msg: Control) -> None:
        if msg.kind == Control.ROTATE:
            for acker in self.ackers.values():
                acker.rotate()
        else:
            super().control(msg)

    def process_batch(self, batch: list[Any]) -> None:
        ackers = self.ackers
        for task, tup in self.pairs(batch):
            ackers[task].execute(tup.stream_source.stream, tup.values)
        # each spout task hears of its trees completed in the batch at the batch's end: one
        # ACKED_BATCH tuple, or one CompletedBatch to another worker
        source, local = self.system_sources[ACKED_BATCH], self.transfer.local_tasks
        for task, acker in ackers.items():
            if not acker.completed:
                continue
            for target, roots in acker.take_completed().items():
                if target in local:
                    self.send((target,), source, task, [roots])
                else:
                    self.transfer.send_group(target, CompletedBatch(task, target, roots))
