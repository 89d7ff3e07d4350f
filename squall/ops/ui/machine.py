"""``squall ui``: Storm UI for every topology of a registry (this machine's, or the cluster's in
ZooKeeper).

Squall has no long-lived Nimbus: each ``squall run`` / ``squall submit`` process serves the UI
of its own topology (:mod:`squall.ops.ui.server`) and records the UI's address and token in its
registry entry (:mod:`squall.cluster.registry`). ``squall ui`` reads the registry: the cluster and
topology summaries gather every entry's, and the routes of one topology (its pages' data, its
POSTs, Storm UI's REST API) are relayed to the process that serves it, with that topology's
token — which only the owner of the registry entry can read, so this UI acts with the control
plane's credentials. ``/metrics`` merges every topology's Prometheus families.

The server guards itself as any Squall UI does (see :class:`~squall.ops.ui.server.UiApp`), with a
token of its own, printed in the URL at start.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CollectorRegistry, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from squall.cluster.registry import Registration, Registry
from squall.ops.ui import api
from squall.ops.ui.server import UiApp

# How long a topology's process may take to answer a relayed request.
RELAY_TIMEOUT_SECS = 10.0


class MachineUi(UiApp):
    """Storm UI for the topologies of ``registry`` (see the module's docstring);
    ``MachineUi(token, host, port, registry)``. The registry is read on the server's threads."""

    def __init__(self, token: str, host: str, port: int, registry: Registry) -> None:
        super().__init__(token, host, port)
        self.registry = registry

    def api_routes(self) -> list[Route]:
        get, both = ["GET"], ["GET", "POST"]
        return [
            Route("/api/v1/cluster/summary", self._cluster_summary, methods=get),
            Route("/api/v1/topology/summary", self._topology_summary, methods=get),
            Route("/api/v1/topology/{id}", self._relay, methods=get),
            Route("/api/v1/topology/{id}/{rest:path}", self._relay, methods=both),
            Route("/metrics", self._metrics, methods=get),
        ]

    async def _relay(self, request: Request) -> Response:
        """The request, made to the UI of the topology's own process; its answer, as is."""
        entry = await run_in_threadpool(self._entry, request.path_params["id"])
        body = await request.body()
        target = entry.ui + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        headers = {"Authorization": f"Bearer {entry.ui_token}"}
        if "content-type" in request.headers:
            headers["Content-Type"] = request.headers["content-type"]
        status, content = await run_in_threadpool(_fetch, target, request.method, headers, body or None)
        return Response(content, status_code=status, media_type="application/json")

    def _entry(self, name: str) -> Registration:
        entry = self.registry.lookup(name)  # NotAliveError (404) for a topology not registered
        if entry.ui is None or entry.ui_token is None:
            raise api.ApiError(502, f"topology {name!r} (pid {entry.pid}) serves no UI")
        return entry

    async def _summaries(self) -> list[dict[str, Any]]:
        """Every topology's ``/api/v1/topology/summary`` entry (those that no longer answer left out)."""
        out = []
        for entry in await run_in_threadpool(self.registry.running):
            if entry.ui is None:
                continue
            status, content = await run_in_threadpool(_fetch, entry.ui + "/api/v1/topology/summary", "GET",
                                                      {}, None)
            if status == 200:
                out.extend(json.loads(content)["topologies"])
        return out

    async def _topology_summary(self, request: Request) -> Response:
        return JSONResponse({"topologies": await self._summaries(), "schedulerDisplayResource": False})

    async def _cluster_summary(self, request: Request) -> Response:
        return JSONResponse(api.cluster_summary_of(await self._summaries()))

    async def _metrics(self, request: Request) -> Response:
        texts = []
        for entry in await run_in_threadpool(self.registry.running):
            if entry.ui is not None:
                status, content = await run_in_threadpool(_fetch, entry.ui + "/metrics", "GET", {}, None)
                if status == 200:
                    texts.append(content.decode())
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Merged(texts))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


class _Merged:
    """The families of several Prometheus expositions, one family per name (their samples
    together: each topology's carry its ``topology`` label)."""

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for text in self._texts:
            for family in text_string_to_metric_families(text):
                merged = families.setdefault(family.name, family)
                if merged is not family:
                    merged.samples.extend(family.samples)
        yield from families.values()


def _fetch(url: str, method: str, headers: dict[str, str], body: bytes | None) -> tuple[int, bytes]:
    """(status, body) of one request to a topology's UI; 502 with a JSON error if it does not answer."""
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=RELAY_TIMEOUT_SECS) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError as e:
        return 502, json.dumps({"error": "Bad Gateway", "errorMessage": f"{url} does not answer: {e}"}).encode()
