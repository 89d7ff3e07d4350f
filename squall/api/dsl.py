"""The declarative form of a topology (streamparse's DSL, over Squall's own components).

A :class:`Topology` subclass declares its components as class attributes made by
``Component.spec``, and their subscriptions with :class:`Grouping`::

    class WordCount(squall.Topology):
        config = {"topology.workers": 2}
        sentences = SentenceSpout.spec(par=2)
        split = Split.spec(inputs=[sentences], par=2, num_tasks=4)
        count = Count.spec(inputs={split: Grouping.fields("word")}, par=6)

declares what this ``TopologyBuilder`` code does, with ``topology.workers`` 2::

    builder.set_spout("sentences", SentenceSpout(), 2)
    builder.set_bolt("split", Split(), 2).set_num_tasks(4).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), 6).fields_grouping("split", ["word"])

``WordCount.create_topology()`` returns the same :class:`~squall.StormTopology`, and a cluster's
``submit_topology`` takes the class itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from squall.api.bolt import BasicBolt, Bolt
from squall.api.component import Component, check_id
from squall.api.errors import InvalidTopologyError
from squall.api.grouping import (
    ALL, CUSTOM, DIRECT, FIELDS, GLOBAL, LOCAL_OR_SHUFFLE, NONE, PARTIAL_KEY, SHUFFLE, CustomStreamGrouping,
)
from squall.api.spec import Spec
from squall.api.spout import Spout
from squall.api.storm_topology import StormTopology
from squall.api.topology import BoltDeclarer, TopologyBuilder, check_count
from squall.api.windowing.bolt import BaseWindowedBolt


@dataclass(frozen=True, repr=False)
class Grouping:
    """How a stream is partitioned among the tasks of a bolt subscribing to it: the values of
    a ``Component.spec(inputs={...})`` dict. Storm's groupings (their algorithms are described
    in :mod:`squall.runtime.grouping`):

    * ``Grouping.SHUFFLE``: evenly, round-robin over a shuffled list (what list-form inputs get);
    * ``Grouping.fields(*names)``: equal values of the named fields reach the same task;
    * ``Grouping.partial_key(*names)``: fields grouping over two candidate tasks per key, the
      less loaded one;
    * ``Grouping.ALL``: every task; ``Grouping.GLOBAL``: the lowest task id; ``Grouping.NONE``:
      any task;
    * ``Grouping.DIRECT``: the emitter picks the task (``emit_direct``; the stream must be
      declared direct);
    * ``Grouping.LOCAL_OR_SHUFFLE``: the tasks in the emitter's worker if any, else shuffle;
    * ``Grouping.custom(grouping)``: a :class:`~squall.CustomStreamGrouping`.

    Field names and custom groupings are checked at ``create_topology``, as
    ``TopologyBuilder`` checks them.
    """

    kind: str
    field_names: tuple[Any, ...] = ()
    custom_grouping: CustomStreamGrouping | None = None

    SHUFFLE: ClassVar[Grouping]
    ALL: ClassVar[Grouping]
    GLOBAL: ClassVar[Grouping]
    NONE: ClassVar[Grouping]
    DIRECT: ClassVar[Grouping]
    LOCAL_OR_SHUFFLE: ClassVar[Grouping]

    @classmethod
    def fields(cls, *names: Any) -> Grouping:
        """Fields grouping on ``names``: ``fields("user", "day")`` or ``fields(["user", "day"])``."""
        return cls(FIELDS, _field_names(names))

    @classmethod
    def partial_key(cls, *names: Any) -> Grouping:
        """Partial key grouping on ``names`` (given as to :meth:`fields`)."""
        return cls(PARTIAL_KEY, _field_names(names))

    @classmethod
    def custom(cls, grouping: CustomStreamGrouping) -> Grouping:
        """The tasks ``grouping.choose_tasks(task_id, values)`` picks."""
        return cls(CUSTOM, custom_grouping=grouping)

    def subscribe(self, declarer: BoltDeclarer, component: str, stream: str) -> None:
        """Subscribe ``declarer``'s bolt to ``stream`` of ``component`` with this grouping
        (``declarer.<kind>_grouping(...)``)."""
        method = getattr(declarer, f"{self.kind}_grouping")  # the kinds are the declarer's names
        if self.kind in (FIELDS, PARTIAL_KEY):
            method(component, list(self.field_names), stream)
        elif self.kind == CUSTOM:
            method(component, self.custom_grouping, stream)
        else:
            method(component, stream)

    def __repr__(self) -> str:
        if self.kind in (FIELDS, PARTIAL_KEY):
            return f"Grouping.{self.kind}({', '.join(map(repr, self.field_names))})"
        if self.kind == CUSTOM:
            return f"Grouping.custom({self.custom_grouping!r})"
        return f"Grouping.{self.kind.upper()}"


for _kind in (SHUFFLE, ALL, GLOBAL, NONE, DIRECT, LOCAL_OR_SHUFFLE):
    setattr(Grouping, _kind.upper(), Grouping(_kind))


def _field_names(names: tuple[Any, ...]) -> tuple[Any, ...]:
    if len(names) == 1 and isinstance(names[0], (list, tuple)):
        return tuple(names[0])
    return names


@dataclass(frozen=True)
class _Declared:
    """One spec of a topology class, checked and resolved when the class was created."""

    id: str
    where: str  # "WordCount.count", with the component id when name= gave another one
    spec: Spec
    is_spout: bool
    inputs: tuple[tuple[str, str, Grouping], ...]  # (source component id, stream id, grouping)


class Topology:
    """Base of declarative topologies (streamparse's ``Topology``, for Squall's components).

    Contract:

    * Every class attribute made by ``Component.spec`` is a component, inherited ones
      included; its id is the attribute name unless ``name=`` gives one. Components are
      declared in attribute order (the order ``TopologyBuilder`` code would declare them in).
    * ``config`` (a dict, or :class:`~squall.Config`) is the topology's configuration; given to
      ``submit_topology`` with the class, the ``conf`` given there is merged over it.
    * The class checks its specs when it is created and raises
      :class:`~squall.InvalidTopologyError` naming the class, the attribute and the fault: a
      component instance that is not a spec, a shared spec or duplicate component id, a spout
      with inputs, a bolt without inputs, an input that is not a component of this topology, a
      grouping that is not a :class:`Grouping`, a ``par``/``num_tasks`` below 1, a ``config``
      that is not a dict. :meth:`create_topology` checks the rest (streams, fields,
      serialization), as ``TopologyBuilder`` does.
    * A topology class is a declaration: it is not instantiated.
    """

    config: ClassVar[dict[str, Any]] = {}
    _declared: ClassVar[tuple[_Declared, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._declared = _declare(cls)

    @classmethod
    def create_topology(cls) -> StormTopology:
        """The :class:`~squall.StormTopology` this class declares: the one ``TopologyBuilder``
        builds from the same components, groupings, parallelism, tasks and component configs,
        declared in attribute order. A spec made on a class (``Split.spec()``) gets a new
        instance (``Split()``) on each call; one made on an instance serializes that instance.

        Raises :class:`~squall.InvalidTopologyError` naming this class: an undeclared stream or
        field, a grouping that does not fit its stream, a component whose constructor or
        serialization fails, no components at all.
        """
        builder = TopologyBuilder()
        for declared in cls._declared:
            spec = declared.spec
            try:
                obj = _instantiate(spec)
                if declared.is_spout:
                    declarer = builder.set_spout(declared.id, obj, spec.par)
                else:
                    declarer = builder.set_bolt(declared.id, obj, spec.par)
                    for source, stream, grouping in declared.inputs:
                        grouping.subscribe(declarer, source, stream)
                if spec.num_tasks is not None:
                    declarer.set_num_tasks(spec.num_tasks)
                declarer.add_configurations(spec.config or {})
            except InvalidTopologyError as e:
                raise InvalidTopologyError(f"{declared.where}: {e}") from e
        try:
            return builder.create_topology()
        except InvalidTopologyError as e:
            raise InvalidTopologyError(f"{cls.__qualname__}: {e}") from e


def as_storm_topology(
    topology: StormTopology | type[Topology], conf: dict[str, Any] | None
) -> tuple[StormTopology, dict[str, Any] | None]:
    """What a cluster runs for ``topology`` submitted with ``conf``: a :class:`Topology`
    subclass becomes its ``create_topology()``, with ``conf`` merged over its ``config``;
    anything else is returned as it is."""
    if isinstance(topology, type) and issubclass(topology, Topology):
        return topology.create_topology(), {**topology.config, **(conf or {})}
    return topology, conf


def _instantiate(spec: Spec) -> Component:
    if not isinstance(spec.component, type):
        return spec.component
    name = spec.component.__name__
    try:
        return spec.component()
    except Exception as e:
        raise InvalidTopologyError(
            f"{name}() raised {type(e).__name__}: {e} (a component whose constructor takes arguments is "
            f"declared as {name}(...).spec(...))"
        ) from e


def _declare(cls: type[Topology]) -> tuple[_Declared, ...]:
    """Check the specs of a topology class being created and resolve their ids and inputs."""
    topology = cls.__qualname__
    namespace: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):  # what getattr(cls, name) finds, in declaration order
        namespace.update(vars(klass))
    if not isinstance(namespace["config"], dict):
        raise InvalidTopologyError(
            f"{topology}.config must be a dict (or squall.Config) of topology configuration, got "
            f"{type(namespace['config']).__name__}"
        )
    attrs: dict[Spec, str] = {}  # spec -> attribute
    ids: dict[Spec, str] = {}  # spec -> component id
    wheres: dict[str, str] = {}  # component id -> "Topology.attribute" for messages
    for attr, value in namespace.items():
        if isinstance(value, Component):
            kind = type(value).__name__
            raise InvalidTopologyError(
                f"{topology}.{attr} is a {kind} instance, not a spec: declare it as {kind}(...).spec(...)"
            )
        if not isinstance(value, Spec):
            continue
        where = f"{topology}.{attr}"
        if value in attrs:
            raise InvalidTopologyError(
                f"{where} is the same spec as {topology}.{attrs[value]}; each component needs a spec of its own"
            )
        cid = attr if value.name is None else value.name
        check_id(f"{where}: component id", cid)
        if cid in wheres:
            raise InvalidTopologyError(f"{where}: component id {cid!r} is already used by {wheres[cid]}")
        if cid != attr:
            where += f" (component {cid!r})"
        attrs[value], ids[value], wheres[cid] = attr, cid, where
    return tuple(_check_spec(topology, spec, ids[spec], wheres[ids[spec]], ids) for spec in attrs)


def _check_spec(topology: str, spec: Spec, cid: str, where: str, ids: dict[Spec, str]) -> _Declared:
    kind = spec.component_class
    is_spout = issubclass(kind, Spout)
    if not is_spout and not issubclass(kind, (Bolt, BasicBolt, BaseWindowedBolt)):
        raise InvalidTopologyError(
            f"{where}: {kind.__name__} is neither a squall.Spout, a squall.Bolt nor a squall.BasicBolt"
        )
    check_count(f"{where}: par", spec.par)
    if spec.num_tasks is not None:
        check_count(f"{where}: num_tasks", spec.num_tasks)
    if spec.config is not None and not isinstance(spec.config, dict):
        raise InvalidTopologyError(f"{where}: config must be a dict, got {type(spec.config).__name__}")
    if is_spout and spec.inputs:
        raise InvalidTopologyError(f"{where}: {kind.__name__} is a spout, and a spout takes no inputs")
    if not is_spout and not spec.inputs:
        raise InvalidTopologyError(
            f"{where}: {kind.__name__} is a bolt and subscribes to nothing; give it inputs=[...] or {{...: Grouping}}"
        )
    return _Declared(cid, where, spec, is_spout, _resolve_inputs(topology, where, spec.inputs, ids))


def _resolve_inputs(
    topology: str, where: str, inputs: Any, ids: dict[Spec, str]
) -> tuple[tuple[str, str, Grouping], ...]:
    """``inputs`` as (source component id, stream id, grouping) triples."""
    if inputs is None:
        return ()
    if isinstance(inputs, dict):
        pairs = list(inputs.items())
    elif isinstance(inputs, (list, tuple)) and _stream(inputs) is None:
        pairs = [(source, Grouping.SHUFFLE) for source in inputs]
    else:
        pairs = [(inputs, Grouping.SHUFFLE)]
    resolved = []
    for source, grouping in pairs:
        stream = _stream(source)
        if stream is None:
            raise InvalidTopologyError(
                f"{where}: input {source!r} is not a spec, spec['stream'] or (spec, 'stream') of a component of "
                f"{topology}"
            )
        spec, stream_id = stream
        if spec not in ids:
            raise InvalidTopologyError(f"{where}: input {spec!r} is not a component of {topology} "
                                       "(a spec of another topology?)")
        if not isinstance(grouping, Grouping):
            raise InvalidTopologyError(
                f"{where}: the grouping of input {ids[spec]!r}:{stream_id!r} must be a squall.Grouping "
                f"(Grouping.SHUFFLE, Grouping.fields(...), ...), got {grouping!r}"
            )
        resolved.append((ids[spec], stream_id, grouping))
    return tuple(resolved)


def _stream(source: Any) -> tuple[Spec, str] | None:
    """``(spec, stream id)`` for a spec (its ``default`` stream), ``spec["stream"]`` or
    ``(spec, "stream")``; None for anything else."""
    if isinstance(source, Spec):
        return source, "default"
    if isinstance(source, tuple) and len(source) == 2 and isinstance(source[0], Spec) and isinstance(source[1], str):
        return source[0], source[1]
    return None
