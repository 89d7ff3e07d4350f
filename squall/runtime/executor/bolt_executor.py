"""Runs the tasks of a bolt (Storm's ``BoltExecutor``): ``Bolt`` or ``BasicBolt``."""

from __future__ import annotations

import threading
from typing import Any

from squall.api.bolt import BasicBolt, Bolt
from squall.api.config import Config
from squall.api.errors import FailedException
from squall.api.stateful import StatefulComponent
from squall.api.system_ids import CHECKPOINT_STREAM
from squall.api.tuple import TICK_SOURCE, Tuple
from squall.runtime.executor.ack_ledger import RoundAcks, combine_ack
from squall.runtime.executor.collector import BasicOutputCollector, OutputCollector
from squall.runtime.executor.executor import Control, InputExecutor
from squall.runtime.executor.checkpointing import Checkpointing


class BoltExecutor(InputExecutor):
    """Runs ``Bolt`` and ``BasicBolt`` tasks: :meth:`execute` is the user's calls for a batch
    (behind :class:`~squall.runtime.executor.checkpointing.Checkpointing` in a checkpointed topology)."""

    def setup(self) -> None:
        # the input being executed, whose key group a keyed state's puts are kept under
        # (squall.api.state.key_groups); kept only when keyed_state (a store per tuple otherwise
        # wasted), None between batches (a barrier's hooks)
        self.current_input: Tuple | None = None
        self.keyed_state = False
        self.bolts: dict[int, Any] = {}
        self.collectors: dict[int, OutputCollector] = {}
        self.basic_collectors: dict[int, BasicOutputCollector] = {}
        for task in self.task_ids:
            bolt, context, collector = self.make_task(task, OutputCollector)
            collector.run_on(threading.get_ident())
            self.bolts[task] = bolt
            self.collectors[task] = collector
            if isinstance(bolt, BasicBolt):
                self.basic_collectors[task] = BasicOutputCollector(collector)
                bolt.prepare(dict(self.conf), context)
            else:
                bolt.prepare(dict(self.conf), context, collector)
        # the bolts that buffer work until the end of a batch (Bolt.finish_batch overridden)
        self._finishers = {task: bolt.finish_batch for task, bolt in self.bolts.items()
                           if getattr(type(bolt), "finish_batch", Bolt.finish_batch) is not Bolt.finish_batch}
        self.is_basic = bool(self.basic_collectors)
        self.stats.process_is_execute = self.is_basic
        self.execute = self.process_batch = self._process_basic if self.is_basic else self._process_rich
        self.checkpointing: Checkpointing | None = None
        if self.worker.topology.checkpointed:
            stateful = {task: bolt for task, bolt in self.bolts.items() if isinstance(bolt, StatefulComponent)}
            self.checkpointing = self.make_checkpointing(stateful)
            states = self.checkpointing.states
            self.keyed_state = states is not None and states.keyed is not None
            self.process_batch = self.checkpointing.process  # barriers are taken out at the input

    def emit_barrier(self, task: int, values: list[Any], anchors: list[Tuple]) -> None:
        self.collectors[task].emit_anchored(values, CHECKPOINT_STREAM, anchors, None)

    def teardown(self) -> None:
        for task, bolt in getattr(self, "bolts", {}).items():
            try:
                bolt.cleanup()
            except Exception as e:
                self.report_error(task, e)
        checkpointing = getattr(self, "checkpointing", None)
        if checkpointing is not None and checkpointing.states is not None:
            checkpointing.states.close()

    def move_to_this_thread(self, round_acks: RoundAcks | None) -> None:
        super().move_to_this_thread(round_acks)
        for collector in getattr(self, "collectors", {}).values():  # none if setup failed
            collector.run_on(threading.get_ident())

    def finish_batches(self) -> None:
        for task, finish_batch in self._finishers.items():
            try:
                finish_batch()
            except Exception as e:
                self.report_error(task, e)

    def timers(self) -> list[tuple[float, Any]]:
        freq = self.conf.get(Config.TOPOLOGY_TICK_TUPLE_FREQ_SECS)
        return [(freq, self.post(Control.TICK, freq))] if freq else []

    def control(self, msg: Control) -> None:
        if msg.kind == Control.TICK:
            tick = Tuple([msg.arg], TICK_SOURCE, -1)
            self.process_batch([tick] if self.single_task else [(task, tick) for task in self.task_ids])
        else:
            super().control(msg)

    def _execute_failed(self, task: int, tup: Tuple, error: Exception) -> None:
        if not isinstance(error, FailedException):
            self.report_error(task, error)
        self.collectors[task].fail(tup)

    def _process_rich(self, batch: list[Any]) -> None:
        keyed = self.keyed_state
        if self.single_task:
            self.stats.sample(batch[0])
            task = self.task_ids[0]
            execute = self.bolts[task].execute
            for tup in batch:
                if keyed:
                    self.current_input = tup
                try:
                    execute(tup)
                except Exception as e:
                    self._execute_failed(task, tup, e)
            self.current_input = None
            return
        self.stats.sample(batch[0][1])
        bolts = self.bolts
        for task, tup in batch:
            if keyed:
                self.current_input = tup
            try:
                bolts[task].execute(tup)
            except Exception as e:
                self._execute_failed(task, tup, e)
        self.current_input = None

    def _process_basic(self, batch: list[Any]) -> None:
        # no sampling: a basic bolt's input is acked as execute returns, so its process
        # latency is its execute latency (see ExecutorStats.process_is_execute)
        if self.single_task:
            self._process_basic_one_task(batch)
            return
        bolts, basic = self.bolts, self.basic_collectors
        pending_acks = self.acks.pending if self.acker_tasks else None
        acked = 0
        keyed = self.keyed_state
        for task, tup in batch:
            bc = basic[task]
            bc.input = tup
            if keyed:
                self.current_input = tup
            try:
                bolts[task].execute(tup, bc)
            except Exception as e:
                self._execute_failed(task, tup, e)
            else:
                acked += 1
                if tup.tracked and pending_acks is not None:
                    combine_ack(pending_acks, tup)  # the auto-ack
        self.current_input = None
        self.stats.acked += acked

    def _process_basic_one_task(self, batch: list[Any]) -> None:
        """The same for an executor of one task: its execute and collector looked up once per
        batch, acks counted once."""
        task = self.task_ids[0]
        bc = self.basic_collectors[task]
        execute = self.bolts[task].execute
        pending_acks = self.acks.pending if self.acker_tasks else None
        failed = 0
        keyed = self.keyed_state
        for tup in batch:
            bc.input = tup
            if keyed:
                self.current_input = tup
            try:
                execute(tup, bc)
            except Exception as e:
                failed += 1
                self._execute_failed(task, tup, e)
                continue
            if pending_acks is not None and tup.tracked:
                combine_ack(pending_acks, tup)  # the auto-ack
        self.current_input = None
        self.stats.acked += len(batch) - failed
