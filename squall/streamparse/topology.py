"""streamparse topologies, unchanged, as Squall topologies.

:func:`from_streamparse` reads a ``streamparse.Topology`` subclass's specs — components,
inputs and groupings, ``par``, ``config``, outputs with named and direct streams — and builds
the equivalent Squall topology:

* a Python component (a pystorm/streamparse ``Bolt``/``Spout`` subclass, which streamparse
  would start as ``streamparse_run module.Class``) runs natively in the worker
  (:mod:`squall.streamparse.pystorm_adapter`);
* a ``ShellBolt.spec``/``ShellSpout.spec`` component runs its command over Storm's multilang
  protocol (:mod:`squall.multilang`), with the project's serializer;
* a ``JavaBolt``/``JavaSpout`` spec is refused: there is no JVM in a Squall worker.

The project's ``config.json`` (:mod:`squall.streamparse.project`) is honoured where it
applies: its ``serializer`` is the multilang components'.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pystorm

from squall.api.errors import InvalidTopologyError
from squall.api.topology import TopologyBuilder
from squall.streamparse.pystorm_adapter import PystormBolt, PystormSpout

_PYTHON_COMMAND = "streamparse_run"


def is_streamparse_topology(value: Any) -> bool:
    """True for a subclass of ``streamparse.Topology`` (not the base class itself)."""
    try:
        from streamparse import Topology
    except ImportError:
        return False
    return isinstance(value, type) and issubclass(value, Topology) and value is not Topology


def _outputs(spec: Any) -> dict[str, tuple[list[str], bool]]:
    return {stream: (list(info.output_fields), bool(info.direct)) for stream, info in spec.outputs.items()}


def _par(spec: Any, where: str) -> int:
    par = spec.par
    if isinstance(par, dict):  # per streamparse environment: a local run uses "local", else the first
        par = par.get("local", next(iter(par.values()), 1))
    if not isinstance(par, int) or par < 1:
        raise InvalidTopologyError(f"{where}: par must be a positive integer, got {spec.par!r}")
    return par


def _component(spec: Any, where: str, serializer: str, multilang: bool) -> tuple[str, Any]:
    """("spout" | "bolt", the Squall component) for one streamparse spec."""
    from streamparse.dsl.component import JavaComponentSpec, ShellComponentSpec
    from streamparse.dsl.spout import JavaSpoutSpec, ShellSpoutSpec

    kind = "spout" if isinstance(spec, (ShellSpoutSpec, JavaSpoutSpec)) else "bolt"
    if isinstance(spec, JavaComponentSpec):
        java = spec.component_object.java_object
        name = java.full_class_name if java is not None else "serialized Java"
        raise InvalidTopologyError(
            f"{where} is a Java{kind.title()} ({name}): Squall runs Python components natively and any "
            "other language over multilang (ShellBolt/ShellSpout), but has no JVM for Java components"
        )
    if not isinstance(spec, ShellComponentSpec):
        raise InvalidTopologyError(f"{where}: not a streamparse component spec: {spec!r}")
    shell = spec.component_object.shell
    args = shell.script.split() if shell.script else []
    python = shell.execution_command == _PYTHON_COMMAND and issubclass(spec.component_cls, (pystorm.Bolt, pystorm.Spout))
    if python and not multilang:
        hosted = PystormSpout if kind == "spout" else PystormBolt
        return kind, hosted(spec.component_cls, _outputs(spec))
    command = shell.execution_command
    if python:  # streamparse_run, in this interpreter, speaking the project's serializer
        command, args = sys.executable, ["-m", "streamparse.run", "--serializer", serializer, *args]
    from squall.multilang import ShellBolt, ShellSpout

    outputs = {stream: fields for stream, (fields, _) in _outputs(spec).items()}
    shell_class = ShellSpout if kind == "spout" else ShellBolt
    return kind, shell_class(command, *args, outputs=outputs, serializer=serializer)


def _subscribe(declarer: Any, source: str, stream: str, grouping: Any, where: str) -> None:
    """One input of a bolt, from streamparse's (Thrift) grouping to the declarer's."""
    if grouping.fields is not None:
        if grouping.fields:
            declarer.fields_grouping(source, list(grouping.fields), stream)
        else:
            declarer.global_grouping(source, stream)  # Storm's global grouping: fields=[]
    elif grouping.shuffle is not None:
        declarer.shuffle_grouping(source, stream)
    elif grouping.all is not None:
        declarer.all_grouping(source, stream)
    elif grouping.none is not None:
        declarer.none_grouping(source, stream)
    elif grouping.direct is not None:
        declarer.direct_grouping(source, stream)
    elif grouping.local_or_shuffle is not None:
        declarer.local_or_shuffle_grouping(source, stream)
    else:
        raise InvalidTopologyError(
            f"{where}: the grouping of its input {source!r} stream {stream!r} is a Java custom grouping "
            f"({grouping!r}), which needs a JVM; use a Squall CustomStreamGrouping instead"
        )


def from_streamparse(topology_class: type, project: dict[str, Any] | None = None,
                     multilang: bool = False) -> tuple[Any, dict[str, Any]]:
    """The Squall topology and topology config equivalent to ``topology_class`` (a
    ``streamparse.Topology`` subclass). ``project`` is the project's config.json: its
    ``serializer`` ("json" or "msgpack") is the multilang components'. With ``multilang``,
    Python components too run as subprocesses (``streamparse_run``, as on Storm) instead of
    natively. Raises :class:`~squall.InvalidTopologyError` naming the component at fault."""
    serializer = (project or {}).get("serializer", "json")
    builder = TopologyBuilder()
    for spec in topology_class.specs:
        where = f"streamparse topology {topology_class.__name__!r}, component {spec.name!r}"
        kind, component = _component(spec, where, serializer, multilang)
        par = _par(spec, where)
        if kind == "spout":
            declarer = builder.set_spout(spec.name, component, par)
        else:
            declarer = builder.set_bolt(spec.name, component, par)
            for stream_id, grouping in spec.inputs.items():
                _subscribe(declarer, stream_id.componentId, stream_id.streamId, grouping, where)
        component_conf = json.loads(spec.config) if isinstance(spec.config, str) else (spec.config or {})
        if component_conf:
            declarer.add_configurations(component_conf)
    return builder.create_topology(), dict(topology_class.config or {})
