"""What the UI and REST API tests share: the word count they serve, its token, and a client.

(Test modules import this, not each other.)"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import urllib.error
import urllib.request
from types import ModuleType

ROOT = pathlib.Path(__file__).resolve().parent.parent
TOKEN = "t0ken-for-the-tests"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
NAME = "wc"  # the word count's topology name


def wordcount_example() -> ModuleType:
    """examples/wordcount.py, loaded as a module (its ``build()`` makes the topology)."""
    spec = importlib.util.spec_from_file_location("wordcount_example", ROOT / "examples" / "wordcount.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call(url: str, method: str = "GET", headers: dict | None = None, body: bytes | None = None):
    """(status, JSON body, response headers) of one request."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read() or b"null"), response.headers
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read()), e.headers
