"""What a component may call on its collector (Storm's ``ISpoutOutputCollector``,
``IOutputCollector`` and ``IBasicOutputCollector``).

The API is typed against these protocols; the runtime's collectors
(:mod:`squall.runtime.executor.collector`) implement them, and so does anything a test hands a component
(:mod:`squall.testing`'s harnesses). The contracts, common to all three:

* ``emit`` returns the ids of the tasks the tuple was sent to, and raises
  :class:`~squall.api.errors.EmitError` naming the component and stream for a stream the
  component did not declare or values that do not match its fields. It may block while the
  destinations are full (backpressure); it never drops a tuple.
* ``emit_direct`` sends to one task of a stream declared direct; it returns nothing.
* ``report_error`` records an error against the component (the UI and ``squall monitor`` show
  the last 10); processing goes on.
* A spout's and a basic bolt's collectors are called only from the component's own methods
  (the executor's thread). A bolt's may also be called from threads of the bolt's own.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from squall.api.tuple import Tuple


class ISpoutOutputCollector(Protocol):
    """A spout's collector. A ``msg_id`` makes the tuple tracked: the spout's ``ack`` or ``fail``
    is called with it once its tree completes, fails or times out."""

    def emit(self, values: Any, stream: str = "default", msg_id: Any = None) -> list[int]: ...

    def emit_direct(self, task_id: int, values: Any, stream: str = "default", msg_id: Any = None) -> None: ...

    def report_error(self, error: BaseException) -> None: ...


class IOutputCollector(Protocol):
    """A bolt's collector. ``anchors`` ties the new tuple into the trees of the inputs it is
    anchored to; each input must be acked or failed exactly once."""

    def emit(self, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
             stream: str = "default") -> list[int]: ...

    def emit_direct(self, task_id: int, values: Any, anchors: Tuple | Iterable[Tuple] | None = None,
                    stream: str = "default") -> None: ...

    def ack(self, tup: Tuple) -> None: ...

    def fail(self, tup: Tuple) -> None: ...

    def reset_timeout(self, tup: Tuple) -> None: ...

    def report_error(self, error: BaseException) -> None: ...


class IBasicOutputCollector(Protocol):
    """A ``BasicBolt``'s collector: every emit is anchored to the input being executed, which
    is acked when ``execute`` returns and failed when it raises ``FailedException``."""

    def emit(self, values: Any, stream: str = "default") -> list[int]: ...

    def emit_direct(self, task_id: int, values: Any, stream: str = "default") -> None: ...

    def report_error(self, error: BaseException) -> None: ...
