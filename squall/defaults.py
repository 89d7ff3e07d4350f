"""Default configuration: Squall's equivalent of Storm's ``defaults.yaml``.

Every key Squall reads has its default here and nowhere else. A topology's ``Config``
overrides these, and a component's ``get_component_configuration()`` /
``add_configuration`` override the topology's for that component.
Where Squall's default differs from Storm 2.x, the comment says why.
"""

from typing import Any

DEFAULTS: dict[str, Any] = {
    # Number of worker slots (Storm: worker processes) the topology's executors spread over.
    "topology.workers": 1,
    # Acker executors; None means one per worker, as in Storm. 0 turns acking off.
    "topology.acker.executors": None,
    # A spout tuple whose tree is not complete within this many seconds is failed
    # (it expires between T and 2T, as the pending map is rotated every T seconds).
    "topology.message.timeout.secs": 30,
    # Per spout task: next_tuple is not called while this many trees are pending. None: no limit.
    "topology.max.spout.pending": None,
    # Period of tick tuples sent to a bolt (set per component). None: no ticks.
    "topology.tick.tuple.freq.secs": None,
    # Tuples an executor's incoming queue holds (the seeds' value; Storm 2 uses 32768). The
    # queue's elements are batches; the batch that fills it may overshoot by its own size.
    # Small queues keep the working set in the CPU's caches; a full queue is backpressure.
    "topology.executor.receive.buffer.size": 1024,
    # Tuples an executor gathers for one destination at most before handing them on
    # (the outgoing side of the executor; see topology.producer.batch.size).
    "topology.executor.send.buffer.size": 1024,
    # Tuples a worker's transfer queue (bound for other workers) holds.
    "topology.transfer.buffer.size": 1024,
    # Batches a worker's receive path buffers from the transport (used by the ZeroMQ
    # transport of multi-process workers).
    "topology.receiver.buffer.size": 8,
    # Tuples an executor gathers per destination before handing a batch on. Storm 2 uses 1
    # and a flush timer; in CPython per-batch costs dominate, so batches are larger and
    # an executor also flushes whenever it has drained its input (no trickle is held back).
    "topology.producer.batch.size": 100,
    # next_tuple calls a spout executor makes before it flushes and looks at its acks.
    "topology.spout.max.batch.size": 100,
    # A spout task whose next_tuple has not returned for this many seconds is recorded as an
    # error naming it (once per stall): next_tuple must never block.
    "topology.spout.stall.secs": 5,
    # One thread runs all of a worker's executors, batch at a time, except those of blocking
    # components (topology.component.blocking). False: a thread per executor, as in Storm.
    "topology.worker.cooperative": True,
    # Set per component (the declarer's set_blocking, or the component's ``blocking``
    # attribute): its executors get a thread of their own.
    "topology.component.blocking": False,
    # The cyclic garbage collector's thresholds (gc.set_threshold) while a worker runs; None
    # leaves Python's (700, 10, 10). Every tuple is a container: at 700 the collector takes
    # about a fifth of a busy worker's time (see squall/utils/gc_tuning.py).
    "topology.worker.gc.thresholds": [10000, 10, 10],
    # A worker process's sys.setswitchinterval (Python's default: 0.005). A thread waiting
    # for the GIL (the receive thread with a payload, the transfer thread with a batch)
    # waits up to this long for a busy executor thread to hand it over: at 5 ms, two word
    # count workers ran at 0.44M words/s, at 0.5 ms at 0.95M (benchmarks/wordcount.py
    # --processes). Workers in the submitting process (in-process mode) leave it alone.
    "topology.worker.gil.switch.interval.secs": 0.0005,
    # Fraction of tuples whose latencies are measured (Storm's default).
    "topology.stats.sample.rate": 0.05,
    # Log every emit and ack at DEBUG level.
    "topology.debug": False,
    # (class, serializer) pairs for values crossing workers; see Config.register_serialization.
    "topology.kryo.register": [],
    # Values of types that are neither msgpack's own nor registered travel pickled
    # (cloudpickle) when this is on, and only over authenticated links
    # (topology.messaging.secure); off, emitting one to another worker is an EmitError naming
    # the component, stream and type. Storm 2's key and default: unpickling runs code.
    "topology.fall.back.on.java.serialization": False,
    # Authenticate and encrypt every link of the topology (master <-> workers, worker <->
    # worker data and backpressure, CLI <-> control socket) with ZeroMQ CURVE and a key pair
    # per topology: a peer without the keys is refused before any byte of it is decoded.
    # Off only for measuring what it costs, on a machine nobody else can reach.
    "topology.messaging.secure": True,
    # A topology with stateful components takes a checkpoint this often (Storm's key and
    # default); it must be below the message timeout.
    "topology.state.checkpoint.interval.ms": 1000,
    # Where stateful components keep their state: "memory" (this process only: tests and
    # in-process topologies), "sqlite" (a local directory; survives kill -9), "redis", Storm's
    # class names for memory and Redis, or "module:Class" of a squall.state.StateProvider.
    # None: "memory", except that `squall run` and `squall submit` choose "sqlite" under
    # --checkpoint-dir.
    "topology.state.provider": None,
    # The provider's settings: a dict, or a JSON string as in Storm (see squall/state/).
    "topology.state.provider.config": None,
    # Ports the local supervisor hands to workers, one per worker.
    "supervisor.slots.ports": [6700, 6701, 6702, 6703],
    "storm.zookeeper.servers": None,
    "storm.zookeeper.root": "/storm",
    "nimbus.task.timeout.secs": 30,
    # A worker process silent (no heartbeat) this long is killed and restarted.
    "supervisor.worker.timeout.secs": 30,
    # A worker process not ready (open/prepare done) this long after its start is killed;
    # when that happens at submission, or 3 times in a row later, it is not restarted.
    "supervisor.worker.start.timeout.secs": 120,
    # How often a worker process reports its figures and errors to the master.
    "worker.heartbeat.frequency.secs": 1,
    # A multilang subprocess (ShellBolt/ShellSpout) that sends nothing for this long while it
    # is waited on is hung: it is killed and restarted. (Storm falls back to
    # supervisor.worker.timeout.secs when this is unset; both are 30 s by default.)
    "topology.subprocess.timeout.secs": 30,
    # Input tuples a ShellBolt lets wait for its subprocess's stdin before execute waits.
    "topology.shellbolt.max.pending": 100,
    # On Spark (squall.spark): when a worker dies, Spark aborts the topology's barrier job and
    # the driver resubmits it, at most this many times in a row; then the topology is FAILED.
    "topology.spark.max.restarts": 10,
    # Wait before the first resubmission; doubled for each further one in a row (at most 30 s).
    "topology.spark.restart.backoff.secs": 1.0,
    # A job whose workers have all been up this long resets the count of restarts in a row.
    "topology.spark.restart.reset.secs": 60,
}
