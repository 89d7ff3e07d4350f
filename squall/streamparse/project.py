"""A streamparse project on disk: where it is and its ``config.json``.

``sparse quickstart NAME`` makes ``NAME/config.json`` (with ``topology_specs``),
``NAME/topologies/`` and ``NAME/src/``; ``squall run topologies/NAME.py`` puts ``src/`` on
the path, as ``sparse run`` does. Nothing here imports streamparse or pystorm: ``squall run``
asks of every topology file whether it is in such a project.
"""

from __future__ import annotations

import json
import os
from typing import Any

from squall.api.errors import InvalidTopologyError


def find_project(topology_file: str) -> str | None:
    """The streamparse project holding ``topology_file``: the nearest directory above it
    whose ``config.json`` is a streamparse one (it has ``topology_specs``), or None."""
    directory = os.path.dirname(os.path.abspath(topology_file))
    while True:
        try:
            if "topology_specs" in project_config(directory):
                return directory
        except InvalidTopologyError:
            pass  # not a readable config.json: not a streamparse project here
        parent = os.path.dirname(directory)
        if parent == directory:
            return None
        directory = parent


def project_config(project: str | None) -> dict[str, Any]:
    """The project's ``config.json`` ({} without a project or without the file)."""
    if project is None:
        return {}
    path = os.path.join(project, "config.json")
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise InvalidTopologyError(f"{path}: {e}") from None
    if not isinstance(config, dict):
        raise InvalidTopologyError(f"{path}: expected a JSON object")
    return config
