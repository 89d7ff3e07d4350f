"""How user code travels to the workers: cloudpickle, keeping where the code was written.

cloudpickle ships the functions and classes of a topology file by value, but renames the file
of every code object ``<dynamic-code>``, so that a traceback out of a worker would point
nowhere. :func:`dumps` keeps each code object whole (``marshal``: the interpreter's own format
for code, which the workers share, as they must for cloudpickle), its file name included:
tracebacks, the terminal's and the UI's, name the topology file and its lines.
"""

from __future__ import annotations

import io
import marshal
import types
from collections import ChainMap
from typing import Any

import cloudpickle


def _reduce_code(code: types.CodeType) -> tuple[Any, tuple[bytes]]:
    return marshal.loads, (marshal.dumps(code),)


class _Pickler(cloudpickle.Pickler):
    dispatch_table = ChainMap({types.CodeType: _reduce_code}, cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any) -> bytes:
    """``obj`` pickled as ``cloudpickle.dumps`` does, its code objects with their file names;
    ``pickle.loads`` (or ``cloudpickle.loads``) reads it back. Raises as cloudpickle does."""
    with io.BytesIO() as file:
        _Pickler(file).dump(obj)
        return file.getvalue()
