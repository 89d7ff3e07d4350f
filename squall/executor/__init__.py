"""Executors, their send path and who runs them (Storm's ``org.apache.storm.executor``).

* :mod:`~squall.executor.executor`: the base executor, its queue and :class:`Control`
  messages;
* :mod:`~squall.executor.bolt_executor`, :mod:`~squall.executor.spout_executor` (the acker's
  is :mod:`squall.acker_executor`, next to the algorithm);
* :mod:`~squall.executor.route` (groupings per emitting task and stream) and
  :mod:`~squall.executor.transfer` (outboxes, batches, hand-off: Storm's ``ExecutorTransfer``);
* :mod:`~squall.executor.threads`: the worker's cooperative thread and the threads of
  blocking executors;
* :mod:`~squall.executor.worker_context`: what executors see of their worker.
"""
