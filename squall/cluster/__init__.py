"""The cluster layer: who starts, watches and restarts workers (Storm's ``daemon/nimbus``,
``daemon/supervisor``, ``LocalCluster`` and cluster state).

:mod:`~squall.cluster.nimbus` (a topology's master: submit, kill, rebalance, get_topology_info),
:mod:`~squall.cluster.master` and :mod:`~squall.cluster.supervisor` (its workers, in this process
or as :mod:`~squall.cluster.worker_process` processes), :mod:`~squall.cluster.local_cluster`,
:mod:`~squall.cluster.spark` (workers as Spark barrier tasks) and :mod:`~squall.cluster.registry`
(where running topologies are found). Nimbus drives a runner per topology through the
:class:`~squall.cluster.runner.TopologyRunner` protocol and keeps its figures in a
:class:`~squall.cluster.monitor.TopologyMonitor`. It builds on :mod:`squall.runtime` and never imports
:mod:`squall.ops`.
"""
