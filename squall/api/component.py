"""What spouts and bolts share: output declaration and per-component configuration."""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from squall.api.spec import Spec
from squall.api.tuple import Fields

if TYPE_CHECKING:
    from squall.api.spec import StreamRef


def check_id(what: str, value: Any) -> None:
    """Component and stream ids are non-empty strings; those starting with ``__`` are Squall's."""
    from squall.api.errors import InvalidTopologyError

    if not isinstance(value, str) or not value:
        raise InvalidTopologyError(f"{what} must be a non-empty string, got {value!r}")
    if value.startswith("__"):
        raise InvalidTopologyError(f"{what} {value!r} is reserved (ids starting with '__' are Squall's)")




class OutputFieldsDeclarer:
    """Collects the streams a component declares in ``declare_output_fields``."""

    def __init__(self, component_id: str) -> None:
        self.component_id = component_id
        self.streams: dict[str, tuple[Fields, bool]] = {}

    def declare(self, fields: Fields | list[str], direct: bool = False) -> None:
        """Declare the ``default`` stream."""
        self.declare_stream("default", fields, direct)

    def declare_stream(self, stream_id: str, fields: Fields | list[str], direct: bool = False) -> None:
        from squall.api.errors import InvalidTopologyError

        where = f"component {self.component_id!r}"
        check_id(f"{where}: stream id", stream_id)
        if stream_id in self.streams:
            raise InvalidTopologyError(f"{where}: stream {stream_id!r} is declared twice")
        try:
            self.streams[stream_id] = (Fields.of(fields), bool(direct))
        except (TypeError, ValueError) as e:
            raise InvalidTopologyError(f"{where}, stream {stream_id!r}: {e}") from None


class _ClassOrInstanceMethod:
    """A method bound to the instance when called on one, else to the class: ``Split.spec()``
    and ``Split(3).spec()`` both work."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.__func__ = func
        self.__doc__ = func.__doc__

    def __get__(self, obj: Any, objtype: type | None = None) -> Callable[..., Any]:
        return types.MethodType(self.__func__, objtype if obj is None else obj)


class Component:
    """Base of spouts and bolts.

    ``outputs`` is a shorthand for :meth:`declare_output_fields`: a list of field names
    declares the ``default`` stream, a dict ``{stream_id: [fields]}`` declares several.
    """

    outputs: ClassVar[list[str] | dict[str, list[str]] | None] = None

    #: Whether this component's methods may block (I/O, sleeping, waiting on other threads).
    #: A worker runs its non-blocking executors cooperatively on one thread, where a blocking
    #: call would stall them all; a blocking component's executors get a thread each. The
    #: declarer's ``set_blocking`` overrides it per component (``topology.component.blocking``).
    #: A spout's ``next_tuple`` must not block either way.
    blocking: ClassVar[bool] = False

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the streams this component emits. Called once, at ``create_topology``."""
        outputs = self.outputs
        if outputs is None:
            return
        if isinstance(outputs, dict):
            for stream_id, fields in outputs.items():
                declarer.declare_stream(stream_id, fields)
        else:
            declarer.declare(outputs)

    def get_component_configuration(self) -> dict[str, Any] | None:
        """Configuration for this component only, merged over the topology's. Called at
        ``create_topology``."""
        return None

    @_ClassOrInstanceMethod
    def spec(
        component: type[Component] | Component,
        name: str | None = None,
        # the dict's values are squall.Grouping (squall.api.dsl imports this module)
        inputs: Spec | StreamRef | list[Spec | StreamRef] | dict[Spec | StreamRef, Any] | None = None,
        par: int = 1,
        config: dict[str, Any] | None = None,
        num_tasks: int | None = None,
    ) -> Spec:
        """This component as a class attribute of a declarative :class:`squall.Topology`.

        Called on the class (``Split.spec(...)``), each ``create_topology`` builds the component
        with ``Split()``; called on an instance (``Split(3).spec(...)``), that instance is the
        component, as the one given to ``TopologyBuilder.set_bolt``: what its constructor
        stored travels to every task.

        * ``name``: the component id; default: the attribute name.
        * ``inputs`` (bolts only; a spout takes none): the streams the bolt subscribes to.
          A spec, ``spec["stream"]`` or ``(spec, "stream")``, or a list of them: shuffle grouping
          (the ``default`` stream for a bare spec); or a dict mapping them to a
          :class:`squall.Grouping`.
        * ``par``: the parallelism hint (executors); ``num_tasks``: the number of tasks
          (Storm's ``setNumTasks``; default: ``par``).
        * ``config``: configuration for this component only, merged over what
          :meth:`get_component_configuration` returns (Storm's ``addConfigurations``).

        Nothing is checked here: the :class:`squall.Topology` subclass checks its specs when
        it is created (and :meth:`~squall.Topology.create_topology` the streams and fields), with
        errors naming the topology and the attribute.
        """
        return Spec(component, name=name, inputs=inputs, par=par, config=config, num_tasks=num_tasks)
