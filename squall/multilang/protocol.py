"""What both shell components share of the multilang protocol: their construction and set-up
(:class:`ShellComponent`), the handshake's conf and context, the subprocess timeout,
heartbeats and the subprocess's log levels."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from squall.api.config import Config
from squall.api.metrics2.metrics import Counter, Gauge, Histogram, Meter
from squall.multilang.serializer import ProtocolError, get_serializer
from squall.multilang.shell_process import ShellProcessError

if TYPE_CHECKING:
    from squall.api.context import TopologyContext

# A subprocess that sends nothing for this long while Squall waits on it is hung.
# Bolts get a tuple on this stream (task -1) about every second and answer it with sync.
HEARTBEAT_STREAM = "__heartbeat"
# The least time between two starts of a task's subprocess, so one that dies at once does
# not spin.
RESTART_BACKOFF_SECS = 0.2

# How many metric names a task warns about (once each) before it stops warning.
_MAX_METRIC_WARNINGS = 100

# Storm's multilang log levels (STORM-414), as pystorm sends them.
_LEVELS = {0: logging.DEBUG, 1: logging.DEBUG, 2: logging.INFO, 3: logging.WARNING, 4: logging.ERROR}


def subprocess_timeout(conf: dict[str, Any]) -> float:
    return float(conf[Config.TOPOLOGY_SUBPROCESS_TIMEOUT_SECS])


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


class ShellMetrics:
    """A multilang task's ``metrics`` commands (``{"command": "metrics", "name", "params"}``,
    pystorm's ``report_metric(name, value)``) applied to the metric its task registered under
    ``name`` (``TopologyContext.register_*``, e.g. in a ShellBolt subclass's ``prepare``), as
    Storm's ShellBolt hands them to that metric's ``updateMetricFromRPC``:

    * counter: ``inc(params)`` (``inc()`` when params is null); meter: ``mark(params)`` likewise;
    * histogram, timer: ``update(params)`` (a timer's in seconds);
    * gauge registered without a callable: ``set(params)``.

    A name nothing registered becomes a counter at its first message with a number (or null)
    as params: Storm would drop it with an error, but a multilang component written in Python
    or any other language has no Java class in which to register it first, and pystorm's
    ``report_metric`` is most often used to count. A malformed message (no name, params
    that are no number, a gauge that reads a callable) is dropped with a warning, once per
    name; it never stops the component."""

    def __init__(self, context: TopologyContext, describe: str) -> None:
        self._context = context
        self._describe = describe
        self._warned: set[Any] = set()

    def update(self, msg: dict[str, Any]) -> None:
        name, params = msg.get("name"), msg.get("params")
        number = params is None or (isinstance(params, (int, float)) and not isinstance(params, bool))
        try:
            metric = self._context.get_registered_metric_by_name(name) if isinstance(name, str) else None
            if metric is None and number:
                metric = self._context.register_counter(name)
            if metric is None:
                raise ValueError("no metric of that name, and params that are no number")
            if not number:
                raise ValueError(f"params {params!r} are no number")
            if isinstance(metric, Counter):
                metric.inc(1 if params is None else params)
            elif isinstance(metric, Meter):
                metric.mark(1 if params is None else params)
            elif params is None:
                raise ValueError(f"a {metric.kind} needs a number as params")
            elif isinstance(metric, Histogram):  # timers included
                metric.update(params)
            elif isinstance(metric, Gauge):
                metric.set(params)
        except (TypeError, ValueError) as e:
            key = name if isinstance(name, str) else repr(name)[:100]
            if key not in self._warned and len(self._warned) < _MAX_METRIC_WARNINGS:
                self._warned.add(key)
                logging.getLogger("squall.multilang").warning(
                    "%s: dropped metrics message %.200r (warned once per name): %s", self._describe, msg, e)


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
        self._metrics = ShellMetrics(context, self._describe)

    def _shared_command(self, msg: dict[str, Any]) -> None:
        """``error``, ``log`` and ``metrics``, which bolts and spouts answer alike; anything
        else is a protocol error."""
        command = msg.get("command")
        if command == "error":
            self._collector.report_error(ShellProcessError(f"{self._describe} reported: {msg.get('msg')}"))
        elif command == "log":
            log_from_subprocess(self._component, self._task, msg)
        elif command == "metrics":
            self._metrics.update(msg)
        else:
            raise ProtocolError(f"unknown command in {msg!r}")
