"""What both shell components share of the multilang protocol: their construction and set-up
(:class:`ShellComponent`), the handshake's conf and context, the subprocess timeout,
heartbeats and the subprocess's log levels."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from squall.multilang.serializer import ProtocolError, get_serializer
from squall.multilang.shell_process import ShellProcessError

if TYPE_CHECKING:
    from squall.context import TopologyContext

# A subprocess that sends nothing for this long while Squall waits on it is hung.
TIMEOUT_KEY = "topology.subprocess.timeout.secs"
# Bolts get a tuple on this stream (task -1) about every second and answer it with sync.
HEARTBEAT_STREAM = "__heartbeat"
# The least time between two starts of a task's subprocess, so one that dies at once does
# not spin.
RESTART_BACKOFF_SECS = 0.2

# Storm's multilang log levels (STORM-414), as pystorm sends them.
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


def subprocess_timeout(conf: dict[str, Any]) -> float:
    return float(conf[TIMEOUT_KEY])


def handshake_conf(conf: dict[str, Any], context: TopologyContext) -> dict[str, Any]:
    """The topology's configuration as the subprocess gets it (with ``topology.name``, as in Storm)."""
    return {**conf, "topology.name": context.topology_name}


def handshake_context(context: TopologyContext) -> dict[str, Any]:
    """The ``context`` of the handshake, with the keys of Storm's ``TopologyContext.toJSONString``
    (groupings given by their type name)."""
    tasks = {str(task): component for component in [*context.get_component_ids(), "__acker"]
             for task in context.get_component_tasks(component)}
    return {
        "taskid": context.get_this_task_id(),
        "componentid": context.get_this_component_id(),
        "task->component": tasks,
        "streams": context.get_this_streams(),
        "stream->outputfields": {s: context.get_this_output_fields(s).to_list() for s in context.get_this_streams()},
        "source->stream->grouping": _nest({key: g.type for key, g in context.get_this_sources().items()}),
        # pystorm gives a bolt's input values these field names (a namedtuple per source stream)
        "source->stream->fields": _nest({(c, s): context.get_component_output_fields(c, s).to_list()
                                         for c, s in context.get_this_sources()}),
        "stream->target->grouping": {s: {c: g.type for c, g in context.get_this_targets(s).items()}
                                     for s in context.get_this_streams()},
    }


def _nest(flat: dict[tuple[str, str], Any]) -> dict[str, dict[str, Any]]:
    nested: dict[str, dict[str, Any]] = {}
    for (component, stream), grouping in flat.items():
        nested.setdefault(component, {})[stream] = grouping
    return nested


def log_from_subprocess(component: str, task: int, msg: dict[str, Any]) -> None:
    """A ``log`` command: logged by ``squall.multilang.<component>`` at the level it names."""
    level = _LEVELS.get(msg.get("level", 2), logging.INFO)
    logging.getLogger(f"squall.multilang.{component}").log(level, "[task %s] %s", task, msg.get("msg"))


def command_of(msg: Any) -> Any:
    """The ``command`` of a message from the subprocess; a malformed one (or the reader's
    ProtocolError for it) raises ProtocolError."""
    if isinstance(msg, ProtocolError):
        raise msg
    if not isinstance(msg, dict):
        raise ProtocolError(f"unexpected message {msg!r}")
    return msg.get("command")


class ShellComponent:
    """The command, outputs and serializer of a ShellBolt/ShellSpout, and what its task
    knows once set up (in ``prepare``/``open``).

    Blocking: talking to the subprocess waits on its pipes, so each task has a thread of its
    own rather than sharing the worker's cooperative thread.
    """

    blocking = True

    def __init__(self, command: str, *args: str, outputs: list[str] | dict[str, list[str]] | None = None,
                 serializer: str = "json") -> None:
        self.command = [command, *args]
        if outputs is not None:
            self.outputs = outputs
        get_serializer(serializer)  # an unknown name fails at construction, not in the worker
        self.serializer = serializer

    def _set_up(self, conf: dict[str, Any], context: TopologyContext) -> None:
        self._task = context.get_this_task_id()
        self._component = context.get_this_component_id()
        self._describe = f"multilang subprocess of component {self._component!r} task {self._task} ({self.command})"
        self._conf = handshake_conf(conf, context)
        self._context = handshake_context(context)
        self._timeout = subprocess_timeout(conf)

    def _shared_command(self, msg: dict[str, Any]) -> None:
        """``error``, ``log`` and ``metrics``, which bolts and spouts answer alike; anything
        else is a protocol error."""
        command = msg.get("command")
        if command == "error":
            self._collector.report_error(ShellProcessError(f"{self._describe} reported: {msg.get('msg')}"))
        elif command == "log":
            log_from_subprocess(self._component, self._task, msg)
        elif command == "metrics":
            logging.getLogger("squall.multilang").debug("%s: metrics ignored: %r", self._describe, msg)
        else:
            raise ProtocolError(f"unknown command in {msg!r}")
