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
