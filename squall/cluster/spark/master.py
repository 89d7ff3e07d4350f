"""The topology master on a Spark driver: workers as the tasks of one barrier job.

:class:`SparkTopologyMaster` submits one Spark job per topology: ``topology.workers``
partitions through a barrier stage, so that Spark launches all of them at once, each task
on a task slot of an executor. Each task calls :func:`squall.cluster.worker_process.run` —
the same worker as a local worker process — after learning its executor's address; the
workers exchange their addresses with ``BarrierTaskContext.allGather`` and then talk to each
other directly over ZeroMQ. The driver's master thread hands out the topology, collects
heartbeats, figures and errors, and relays activate/deactivate/kill, as for local processes;
what the workers print reaches the driver's stdout and stderr (:mod:`squall.cluster.spark.output`).
Before the first job it waits, as Spark's scheduler does, for the executors the cluster is still
starting (:mod:`squall.cluster.spark.slots`).

When any worker dies (its Python process or its executor), Spark aborts the whole barrier
job; a worker silent for ``supervisor.worker.timeout.secs`` makes the master cancel it, and
let go of the executors of that worker's host (:meth:`SparkTopologyMaster._release_executors`):
behind a cut link Spark would count their slots as busy until ``spark.network.timeout``. The
master then resubmits the job after a backoff (``topology.spark.restart.backoff.secs``,
doubling up to 30 s), at most ``topology.spark.max.restarts`` times in a row (a job healthy
for ``topology.spark.restart.reset.secs`` resets the count); past that the topology is FAILED
with the last cause. Workers of a previous job that are still shutting down are told to stop.

Losing task slots (an executor or a whole host gone) is not a failure to make progress, as in
Storm, whose scheduler reassigns a dead worker's executors over the slots that remain: the job
is resubmitted with as many workers as there are free task slots (the executors spread over
them, every task keeping its id), without counting against the restart limit; with no slot at
all it waits for one. Once there are slots for every requested worker again
(``topology.workers``), the master grows the topology back: it ends the job and resubmits it
with the requested workers, the way a rebalance would.
"""

from __future__ import annotations

import logging
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from squall.api.config import Config
from squall.api.storm_topology import StormTopology
from squall.cluster.master import TopologyMaster, WorkerSlot, WorkerStartError
from squall.cluster.spark.output import OutputRelay
from squall.cluster.spark.slots import SlotsRefused, SlotsWait, registered_slots
from squall.cluster.spark_master_url import is_embedded
from squall.runtime.assignment import Assignment, assign
from squall.runtime.cluster_state import TopologyState
from squall.runtime.messaging.security import LinkKeys, keys_json

log = logging.getLogger("squall.master")  # the topology master's logger, as in the base class

_MAX_BACKOFF_SECS = 30.0
# How often a topology on fewer workers than requested, or waiting for a slot, looks at the
# cluster's task slots.
SLOTS_CHECK_SECS = 1.0


# What starts the one line a barrier task's own failure to start is reported with (found by
# _job_failure in Spark's error, which holds the task's whole Python traceback).
TASK_FAILURE_PREFIX = "[squall] "
MISSING_MODULE_FIX = ("ship a packed virtualenv (--archives env.tar.gz#env --conf spark.pyspark.python=./env/bin/python) "
                      "or install Squall's dependencies there: see the README, Spark clusters")


def barrier_worker(master: str, generation: int, keys: LinkKeys | None,
                   output: str | None = None) -> Callable[[Iterable[Any]], Iterator[int]]:
    """The function each barrier task runs, shipped to the executors by Spark with the
    topology's link ``keys`` in its closure (Spark's own channel: turn on
    ``spark.authenticate`` and ``spark.network.crypto.enabled`` on a shared cluster). With
    ``output`` (the address of the master's :class:`~squall.cluster.spark.output.OutputRelay`),
    what the worker prints goes to the driver's terminal
    (:func:`~squall.cluster.spark.output.forward_output`), not to the executor's log.

    It refers to the standard library only until it runs: an executor whose Python lacks one
    of Squall's dependencies fails the task with one line naming the module, the host, the
    interpreter and the fix (not in the middle of unpickling the function)."""
    keys_text, prefix, fix = keys_json(keys), TASK_FAILURE_PREFIX, MISSING_MODULE_FIX

    def run_worker(_: Iterable[Any]) -> Iterator[int]:
        import contextlib
        import json
        import signal
        import socket
        import sys

        from pyspark import BarrierTaskContext

        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C where the driver runs is the driver's
        context = BarrierTaskContext.get()
        index = context.partitionId()
        host = socket.gethostbyname(context.getTaskInfos()[index].address.rsplit(":", 1)[0])
        try:
            from squall.cluster import worker_process
            from squall.cluster.spark.output import forward_output
            from squall.runtime.messaging.security import LinkKeys
        except ImportError as e:
            raise RuntimeError(f"{prefix}the executors' Python ({sys.executable}) on {host} has no module "
                               f"{e.name!r}: {fix}") from None

        def exchange(address: tuple[str, int, int]) -> dict[int, tuple[str, int, int]]:
            gathered = context.allGather(json.dumps(address))  # ordered by partition id
            return {i: tuple(json.loads(a)) for i, a in enumerate(gathered)}

        link_keys = LinkKeys.from_json(keys_text)
        with forward_output(output, link_keys) if output is not None else contextlib.nullcontext():
            code = worker_process.run(master, index, link_keys, generation, host, exchange)
        if code:
            # failing the task aborts the barrier stage: the other workers are stopped too
            raise RuntimeError(f"squall worker {index} stopped with code {code}; the driver has the cause")
        yield code

    return run_worker


def _resolved(host: str) -> str | None:
    """``host``'s address (executors may be known by name, workers by address); None if unknown."""
    try:
        return socket.gethostbyname(host.strip("[]"))
    except OSError:
        return None


def _job_failure(error: Exception) -> str:
    """The useful lines of a failed job's exception (Py4J's message is a JVM stack trace): the
    line a barrier task failed with itself (see :func:`barrier_worker`) when there is one."""
    text = str(error)
    own = re.search(re.escape(TASK_FAILURE_PREFIX) + r"(.*)", text)
    if own is not None:
        return own.group(1).strip()
    lines = [line.strip() for line in text.splitlines()]
    useful = [line for line in lines if line and not line.startswith("at ") and "collectAndServe" not in line]
    return " ".join(useful[:3]).removeprefix(": ")[:600] or type(error).__name__


class SparkTopologyMaster(TopologyMaster):
    """The master of a topology whose workers are the tasks of a Spark barrier job (see the
    module's docstring). ``held_slots`` are the task slots other topologies of the same
    driver hold (name -> slots): they are not free for this one."""

    peers_from_master = False  # the workers exchange addresses with allGather

    def __init__(self, name: str, topology: StormTopology, conf: dict[str, Any], assignment: Assignment,
                 state: TopologyState, spark_context: Any, held_slots: dict[str, int]) -> None:
        spark_conf = spark_context.getConf()
        host = spark_conf.get("spark.driver.host", "127.0.0.1")  # where executors reach the driver
        bind_host = socket.gethostbyname(spark_conf.get("spark.driver.bindAddress", host))
        super().__init__(name, topology, conf, assignment, state, host, bind_host)
        self._sc = spark_context
        self._held_slots = held_slots
        self.job_group = f"squall-{name}-{uuid.uuid4().hex[:8]}"
        self._job: threading.Thread | None = None
        self._job_ended: tuple[int, str] | None = None  # (generation, why), set by the job thread
        self._relaunch_at: float | None = None
        self._restarts_in_row = 0
        self._healthy_since: float | None = None
        self._requested = len(self.slots)  # topology.workers: what the topology grows back to
        self._num_ackers = assignment.num_ackers  # kept whatever the workers: tasks keep their ids
        self._next_slots_check = 0.0
        self._waiting_for_slot = False
        #: where the workers' output goes: the driver's stdout and stderr, as under squall run
        self.output = OutputRelay(self.keys, host, bind_host, name)

    def start(self) -> None:
        """Wait for the task slots the topology needs (:class:`~squall.cluster.spark.slots.SlotsWait`:
        executors still registering), then launch its job and return once every worker is ready."""
        try:
            wait = SlotsWait(self._sc, self.name, len(self.slots), self._held_slots,
                             lambda text: log.warning("topology %r: %s", self.name, text))
            while not wait.check(time.monotonic()):
                time.sleep(0.2)
        except SlotsRefused as e:
            self.stop()
            raise WorkerStartError(str(e)) from None
        super().start()

    def stop(self) -> None:
        """Stop the workers and the master (:meth:`TopologyMaster.stop`), then the relay of their
        output, once what they printed last has been written."""
        try:
            super().stop()
        finally:
            self.output.close()

    def _launch(self, slots: list[WorkerSlot]) -> None:
        generation, count = self.generation, len(self.slots)
        self._job_ended = None
        for slot in slots:
            self.renew(slot)  # pids come with the workers' hello

        def job() -> None:
            self._sc.setJobGroup(self.job_group, f"squall topology {self.name}", interruptOnCancel=True)
            self._sc.setLocalProperty("callSite.short", f"squall topology {self.name}")  # the job's name in the UI
            try:
                rdd = self._sc.parallelize(range(count), count).barrier()
                rdd.mapPartitions(barrier_worker(self.address, generation, self.keys, self.output.address)).collect()
                why = "its Spark job ended"
            except Exception as e:  # noqa: BLE001 - whatever ended the job, the master decides what next
                why = _job_failure(e)
            self._job_ended = (generation, why)

        self._job = threading.Thread(target=job, name=f"spark-job-{self.name}-{generation}", daemon=True)
        self._job.start()

    def _gone(self) -> bool:
        return self._job is None or not self._job.is_alive()

    def _wait_stopped(self, deadline: float) -> None:
        if self._job is None:
            return
        self._job.join(max(0.0, deadline - time.monotonic()))
        if self._job.is_alive():
            self._sc.cancelJobGroup(self.job_group)
            self._job.join()

    def _supervise(self, now: float) -> None:
        if self.failure is not None:
            return
        if self._relaunch_at is not None:
            if now >= self._relaunch_at and self._gone():
                self._relaunch(now)
            return
        cause = None
        if self._job_ended is not None and self._job_ended[0] == self.generation:
            cause = self._job_ended[1]
        for slot in self.slots:
            if cause is None and slot.silent_for(now) > self.silence_limit(slot):
                cause = f"worker {slot.index} (pid {slot.pid}) silent for {slot.silent_for(now):.0f}s"
                self._release_executors(slot.host)
        if cause is None:
            self._note_health(now)
            self._maybe_grow_back(now)
            return
        setup_error = next((s.setup_error for s in self.slots if s.setup_error), None)
        self._failed(now, f"{setup_error}\n({cause})" if setup_error else cause)

    def _release_executors(self, host: str) -> None:
        """Have Spark let go of the executors on ``host``, whose worker went silent (a cut link, a
        frozen machine): Spark itself keeps counting their task slots, busy with the cancelled
        job's task it cannot reach, until ``spark.network.timeout`` (120 s), and a barrier job
        waits for free slots. Released this way they stop counting at once, and the application
        keeps its executor target: once the host answers again, its Spark worker starts a new
        executor and the topology grows back. Nothing on an embedded master (the driver is the
        executor) or when the host is not known yet."""
        if not host or is_embedded(self._sc.master):
            return
        try:
            wanted = socket.gethostbyname(host)
            jvm_sc, scala = self._sc._jsc.sc(), self._sc._jvm.scala.jdk.javaapi.CollectionConverters
            ids = [e.id() for e in scala.asJava(jvm_sc.statusStore().executorList(True))
                   if e.id() != "driver" and _resolved(e.hostPort().rsplit(":", 1)[0]) == wanted]
            if ids:  # not replaced now (it could not be reached), nor counted as the application's failure
                jvm_sc.schedulerBackend().killExecutors(scala.asScala(ids).toSeq(), False, False, True)
                self.report(None, f"released Spark executor(s) {', '.join(ids)} on {host}, silent: their task "
                                  f"slots no longer count")
        except Exception as e:  # noqa: BLE001 - Spark's internals: at worst its own timeout applies
            self.report(None, f"could not release the Spark executors on {host}: {type(e).__name__}: {e}")

    def _free_slots(self) -> int:
        """The cluster's task slots not held by this driver's other topologies (this one's own
        count as free: its job gives them back when it ends)."""
        return registered_slots(self._sc) - sum(self._held_slots.values())

    def _relaunch(self, now: float) -> None:
        """Resubmit the job, on as many workers as there are free slots, up to the requested."""
        workers = min(self._requested, self._free_slots())
        if workers < 1:  # no slot anywhere: wait for one (not a failure to make progress)
            if not self._waiting_for_slot:
                self._waiting_for_slot = True
                self.report(None, f"no free Spark task slot on {self._sc.master}: waiting for one")
            self._relaunch_at = now + SLOTS_CHECK_SECS
            return
        self._relaunch_at = None
        self._waiting_for_slot = False
        if workers < len(self.slots):
            # a host's (or an executor's) absence, not a failure to make progress
            self._restarts_in_row = max(0, self._restarts_in_row - 1)
        if workers != len(self.slots):
            self.report(None, f"resubmitting its Spark job on {workers} worker(s) (requested: {self._requested}): "
                              f"the cluster has {workers} free task slot(s) for it")
            self._reassign(workers)
        self.generation += 1
        for slot in self.slots:
            slot.restarts += 1
        self._launch(self.slots)

    def _reassign(self, workers: int) -> None:
        """Spread the executors over ``workers`` workers (new slots, restarts carried over)."""
        restarts = max(slot.restarts for slot in self.slots)
        for slot in self.slots:
            self.renew(slot)  # what their executors did counts on
        self._conf = {**self._conf, Config.TOPOLOGY_WORKERS: workers,
                      Config.TOPOLOGY_ACKER_TASKS: self._num_ackers or None}
        self._assignment = assign(self._topology, self._conf)
        self.slots = [WorkerSlot(w.index, w.port) for w in self._assignment.workers]
        for slot in self.slots:
            slot.restarts = restarts

    def _maybe_grow_back(self, now: float) -> None:
        """On fewer workers than requested: once the cluster has slots for all of them again, end
        the job and resubmit it with every requested worker (at once, no restart counted)."""
        if len(self.slots) >= self._requested or now < self._next_slots_check:
            return
        self._next_slots_check = now + SLOTS_CHECK_SECS
        if not all(slot.ready for slot in self.slots) or self._free_slots() < self._requested:
            return
        self.report(None, f"the cluster has task slots for all {self._requested} workers again: growing back from "
                          f"{len(self.slots)}")
        self._sc.cancelJobGroup(self.job_group)
        self._healthy_since = None
        self._relaunch_at = now

    def _note_health(self, now: float) -> None:
        if not all(s.ready for s in self.slots):
            self._healthy_since = None
        elif self._healthy_since is None:
            self._healthy_since = now
        elif now - self._healthy_since >= self._conf[Config.TOPOLOGY_SPARK_RESTART_RESET_SECS]:
            self._restarts_in_row = 0

    def _failed(self, now: float, cause: str) -> None:
        self._sc.cancelJobGroup(self.job_group)
        self._healthy_since = None
        limit = self._conf[Config.TOPOLOGY_SPARK_MAX_RESTARTS]
        # A worker runs its spouts once it is ready itself, so the topology's own failure (a bolt
        # ending its process) can come before the master heard every worker's ready: a submission
        # fails only when no worker got that far, or one said why it could not start.
        setup_failed = any(slot.setup_error for slot in self.slots)
        if self.starting and (setup_failed or not any(slot.ready for slot in self.slots)):
            self.failure = f"its Spark job failed before every worker was ready: {cause}"
            return
        self.starting = False  # running: start() returns, restarts follow the rules below
        if self._restarts_in_row >= limit:
            self.failure = f"gave up after {limit} restarts of its Spark job in a row; the last failure: {cause}"
            self.report(None, self.failure)
        else:
            backoff = min(self._conf[Config.TOPOLOGY_SPARK_RESTART_BACKOFF_SECS] * 2 ** self._restarts_in_row,
                          _MAX_BACKOFF_SECS)
            self._restarts_in_row += 1
            self.report(None, f"the Spark job failed ({cause}); resubmitting it in "
                              f"{backoff:g}s (restart {self._restarts_in_row} of at most {limit} in a row)")
            self._relaunch_at = now + backoff
