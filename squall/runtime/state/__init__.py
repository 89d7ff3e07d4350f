"""State and checkpointing at run time: :mod:`~squall.runtime.executor.checkpointing` (how an
executor aligns checkpoint barriers and drives its stateful tasks' prepare, commit and
rollback) and the durable providers, :mod:`~squall.runtime.state.sqlite_provider` and
:mod:`~squall.runtime.state.redis_provider`. The contract they implement is
:mod:`squall.api.state`."""
