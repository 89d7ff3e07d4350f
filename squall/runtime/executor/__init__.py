"""Executors, their send path and who runs them (Storm's ``org.apache.storm.executor``).

* :mod:`~squall.runtime.executor.executor`: the base executor, its queue and :class:`Control`
  messages;
* :mod:`~squall.runtime.executor.bolt_executor`, :mod:`~squall.runtime.executor.spout_executor` (the acker's
  is :mod:`squall.runtime.acker_executor`, next to the algorithm);
* :mod:`~squall.runtime.executor.route` (groupings per emitting task and stream) and
  :mod:`~squall.runtime.executor.transfer` (outboxes, batches, hand-off: Storm's ``ExecutorTransfer``);
* :mod:`~squall.runtime.executor.threads`: the worker's cooperative thread and the threads of
  blocking executors;
* :mod:`~squall.runtime.executor.worker_context`: what executors see of their worker.
"""
