"""Exceptions raised by Squall's public API."""


class FailedException(Exception):
    """Raised from ``BasicBolt.execute`` to fail the input tuple (Storm's FailedException).

    The input is failed and no error is recorded for the component.
    """


class InvalidTopologyError(ValueError):
    """The topology is malformed; the message names the component, stream or field at fault."""


class NotAliveError(KeyError):
    """No topology of that name runs on this cluster."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "topology is not alive"


class AlreadyAliveError(ValueError):
    """A topology of that name already runs on this cluster."""


class EmitError(ValueError):
    """An emit that breaks the topology's declarations (unknown stream, wrong arity, direct rules).

    Raised to the emitting component; when it escapes ``execute``/``next_tuple`` the error
    is recorded for the component and the input tuple is failed.
    """


def invalid_emit(component: str, stream: str, values: list, declared: dict | None = None,
                 direct_task: int | None = None, direct_targets: list[int] | None = None) -> EmitError:
    """The error for an emit that breaks the declarations, naming the component and the stream.

    ``declared``: the component's streams (stream id -> its field names); ``direct_task``: the
    target of an ``emit_direct``, with ``direct_targets`` the stream's subscribing tasks (None:
    the stream is not declared direct)."""
    declared = declared or {}
    fields = declared.get(stream)
    if fields is None:
        names = sorted(s for s in declared if not s.startswith("__"))
        return EmitError(f"component {component!r} emitted on undeclared stream {stream!r} (declared: {names})")
    if len(values) != len(fields):
        return EmitError(f"component {component!r}, stream {stream!r}: emitted {len(values)} values {values!r} but the "
                         f"stream declares {len(fields)} fields {list(fields)}")
    if direct_targets is None:
        return EmitError(f"component {component!r}: emit_direct on stream {stream!r}, which is not declared direct")
    return EmitError(f"component {component!r}: emit_direct to task {direct_task!r}, which does not subscribe to "
                     f"stream {stream!r} (subscribers: {sorted(direct_targets)})")


class SerializationError(EmitError):
    """A value could not be serialized for a tuple that crosses workers."""


class TopologySetupError(RuntimeError):
    """The topology could not start (a component's ``open``/``prepare`` raised, or a worker
    process could not start); it was stopped. The message says which and why."""


class SecurityError(RuntimeError):
    """A topology's links cannot be secured as configured (no CURVE in this ZeroMQ, or the
    pickle fallback asked for over links that are not authenticated); the message says how to
    fix it."""


def error_headline(text: str) -> str:
    """What an error says in one line: the exception line of a traceback (its last unindented
    line), else its first line."""
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("Traceback (most recent call last)"):
        return lines[0] if lines else ""
    return next((line for line in reversed(lines) if line and not line[0].isspace()), lines[0])
