"""A component spec'd for a declarative topology (``Component.spec``), and its streams.

A leaf module: :mod:`squall.api.component` makes specs and :mod:`squall.api.dsl` checks and builds
them, without either importing the other.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class StreamRef(NamedTuple):
    """A stream of a spec'd component, as an input: ``spec["stream"]``, equal to
    ``(spec, "stream")``."""

    spec: Spec
    stream: str


class Spec:
    """A component of a declarative :class:`Topology`: made by ``Component.spec`` (whose
    docstring describes the arguments) and checked by the topology class it is assigned to.

    ``spec["stream"]`` is its stream of that id, to subscribe to a named stream. Specs compare
    and hash by identity; one spec is one component.
    """

    __iter__ = None  # __getitem__ takes stream ids: a spec is not a sequence

    def __init__(self, component: Any, *, name: str | None, inputs: Any, par: Any, config: Any,
                 num_tasks: Any) -> None:
        # component: the Component subclass or instance it stands for (not named in a hint:
        # squall.api.component imports this module)
        self.component = component
        self.name = name
        self.inputs = inputs
        self.par = par
        self.config = config
        self.num_tasks = num_tasks

    @property
    def component_class(self) -> type:
        return self.component if isinstance(self.component, type) else type(self.component)

    def __getitem__(self, stream: str) -> StreamRef:
        return StreamRef(self, stream)

    def __repr__(self) -> str:
        made = self.component_class.__name__ + ("" if isinstance(self.component, type) else "(...)")
        args = [f"{key}={value!r}" for key, value, default in
                (("name", self.name, None), ("par", self.par, 1), ("num_tasks", self.num_tasks, None),
                 ("config", self.config, None))
                if value != default]
        return f"{made}.spec({', '.join(args)})"
