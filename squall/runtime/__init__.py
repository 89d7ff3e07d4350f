"""The runtime layer: what runs a topology inside one worker (Storm's ``org.apache.storm.executor``,
``daemon/worker``, ``messaging``, ``daemon/Acker`` and ``utils/JCQueue``).

* :mod:`~squall.runtime.executor`: executors, their emit plan (routes, groupers), transfer and threads;
* :mod:`~squall.runtime.executor.collector`: the collectors components emit, ack and fail through;
* :mod:`~squall.runtime.acker`, :mod:`~squall.runtime.acker_executor`, :mod:`~squall.runtime.executor.ack_ledger`:
  guaranteed processing;
* :mod:`~squall.runtime.worker`: a worker wiring them; :mod:`~squall.runtime.worker_receive` and
  :mod:`~squall.runtime.worker_transfer`: its receive and send paths; :mod:`~squall.runtime.messaging.backpressure`:
  how full queues hold senders back;
* :mod:`~squall.runtime.messaging`: the links between workers; :mod:`~squall.runtime.serialization`:
  the wire format of values;
* :mod:`~squall.runtime.state`: checkpoint alignment and the durable state providers;
* :mod:`~squall.runtime.assignment`: which task runs where; :mod:`~squall.runtime.stats`: the
  executors' statistics; :mod:`~squall.runtime.info`: the typed :class:`TopologyInfo` their
  readers get.

It builds on :mod:`squall.api` and never imports :mod:`squall.cluster` or :mod:`squall.ops`.
"""
