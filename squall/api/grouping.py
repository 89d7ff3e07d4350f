"""Stream groupings as a topology declares them (Storm's ``Grouping`` and
``CustomStreamGrouping``): which kind, on which fields.

The algorithms that pick the target tasks of each tuple are the runtime's
(:mod:`squall.runtime.grouping`, Storm's ``org.apache.storm.grouping``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from squall.api.tuple import Fields

if TYPE_CHECKING:
    from squall.api.context import TopologyContext


SHUFFLE, FIELDS, ALL, GLOBAL, NONE, DIRECT, LOCAL_OR_SHUFFLE, PARTIAL_KEY, CUSTOM = (
    "shuffle", "fields", "all", "global", "none", "direct", "local_or_shuffle", "partial_key", "custom",
)


@dataclass(frozen=True)
class GroupingSpec:
    """How a stream is partitioned among a subscribing bolt's tasks (part of a topology)."""

    type: str
    fields: Fields | None = None
    custom: bytes | None = None  # a cloudpickled CustomStreamGrouping


class GlobalStreamId(NamedTuple):
    component_id: str
    stream_id: str


class CustomStreamGrouping:
    """A user-defined grouping (Storm's ``CustomStreamGrouping``).

    ``prepare`` is called once per emitting task, in the worker, before the first
    ``choose_tasks``; ``choose_tasks`` is called for every tuple on the stream, from the
    emitting executor's thread, and must return a non-empty subset of ``target_tasks``
    (anything else is an error recorded for the emitting component).
    """

    def prepare(self, context: TopologyContext, stream: GlobalStreamId, target_tasks: list[int]) -> None:
        pass

    def choose_tasks(self, task_id: int, values: list[Any]) -> list[int]:
        raise NotImplementedError
