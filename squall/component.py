"""What spouts and bolts share: output declaration and per-component configuration."""

from __future__ import annotations

from typing import Any, ClassVar

from squall.tuple import Fields


def check_id(what: str, value: Any) -> None:
    """Component and stream ids are non-empty strings; those starting with ``__`` are Squall's."""
    from squall.errors import InvalidTopologyError

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
        from squall.errors import InvalidTopologyError

        where = f"component {self.component_id!r}"
        check_id(f"{where}: stream id", stream_id)
        if stream_id in self.streams:
            raise InvalidTopologyError(f"{where}: stream {stream_id!r} is declared twice")
        try:
            self.streams[stream_id] = (Fields.of(fields), bool(direct))
        except (TypeError, ValueError) as e:
            raise InvalidTopologyError(f"{where}, stream {stream_id!r}: {e}") from None


class Component:
    """Base of spouts and bolts.

    ``outputs`` is a shorthand for :meth:`declare_output_fields`: a list of field names
    declares the ``default`` stream, a dict ``{stream_id: [fields]}`` declares several.
    """

    outputs: ClassVar[list[str] | dict[str, list[str]] | None] = None

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
