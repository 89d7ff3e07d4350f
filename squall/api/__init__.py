"""The API layer: what a topology is written with (Storm's ``org.apache.storm.topology``,
``spout``, ``task``, ``tuple``, ``state``, ``windowing``, ``metrics2`` and ``Config``).

Tuples, components (spouts, bolts, stateful and windowed bolts), the builder and the DSL, the
configuration and its registry, the task's context, groupings, user metrics, the state contract
and the errors a user sees. It imports nothing from :mod:`squall.runtime`, :mod:`squall.cluster`
or :mod:`squall.ops`, not even for type hints (import-linter's layers contract): what a component
calls on its collector is typed by the protocols in :mod:`squall.api.collector`, what its context
reads of the assignment by :class:`squall.api.context.AssignmentView`.
"""
