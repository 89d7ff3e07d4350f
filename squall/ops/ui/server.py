"""The UI servers: Storm UI and its REST API over HTTP. :class:`UiApp` is what they share
(pages, login, access, the server thread); :class:`UiServer` serves the topologies of one
Nimbus; ``squall ui`` serves the machine's (:mod:`squall.ops.ui.machine`).

Starlette on uvicorn, on a thread of the process that runs the topology (the driver of
``squall run`` / ``squall submit``, or any program holding a ``LocalCluster``). Why these: the
REST API is a handful of JSON routes plus static pages, which is what Starlette is (routing,
requests, responses, middleware; no ORM or templating to carry), and uvicorn serves it from a
thread of its own with one event loop, so that the UI adds one thread to the process and no
work to the executors' threads until a request comes. Both are the field's standard ASGI
pieces (FastAPI is built on them), pure Python with few dependencies (anyio, h11, click).

**Access.** The server binds 127.0.0.1 unless told otherwise. Every POST (activate,
deactivate, kill, rebalance) needs the topology's UI token; so does every request when the
server is bound to another address. The token is derived from the topology's control-plane
secret (:func:`ui_token`), so whoever can control the topology with ``squall kill`` (the
owner of its registry entry) can compute it, and nobody else. A client presents it as
``Authorization: Bearer <token>``. A browser presents it once, as ``/?token=<token>`` (the URL
the driver prints): the server answers with an HttpOnly, SameSite=Strict cookie holding it,
and pages send POSTs with the cookie *and* an ``X-CSRF-Token`` header whose value only pages
served by this server know (:func:`csrf_token`), so another site cannot make the browser
act (CSRF). A refused request gets 401 with a JSON error.

**Errors.** JSON ``{"error": ..., "errorMessage": ...}`` (Storm UI's shape): 404 for an unknown
topology or component, 400 for a bad parameter (naming it), 401 unauthenticated.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import uvicorn
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from squall.api.config import Config
from squall.api.defaults import DEFAULTS
from squall.api.errors import NotAliveError
from squall.cluster.nimbus import Nimbus
from squall.cluster.stats_history import WINDOWS, parse_window
from squall.ops.prometheus import cluster_infos, exposition
from squall.ops.ui import api
from squall.utils.time import parse_seconds

STATIC = Path(__file__).parent / "static"  # the pages and their script: shipped in the wheel
#: how long a sampling asked for without ?secs= runs
DEFAULT_SAMPLING_SECS = 30
COOKIE = "squall-ui-token"
CSRF_HEADER = "X-CSRF-Token"
DEFAULT_PORT = DEFAULTS[Config.UI_PORT]  # Storm UI's 8080

#: ``kill(name, wait_secs)``: how the serving process kills a topology (None: the default wait)
KillFn = Callable[[str, "float | None"], None]


def ui_token(control_secret: str) -> str:
    """The UI token of a topology whose control socket's secret key is ``control_secret``."""
    return hmac.new(control_secret.encode(), b"squall ui token", hashlib.sha256).hexdigest()


def csrf_token(token: str) -> str:
    """The value pages send in :data:`CSRF_HEADER` with a POST (derived, so the cookie alone
    does not give it away)."""
    return hmac.new(token.encode(), b"squall ui csrf", hashlib.sha256).hexdigest()


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


class UiApp:
    """What every Squall UI server shares: the pages, their login, who may do what (see the
    module's docstring), and its uvicorn thread. Subclasses give the API's routes
    (:meth:`api_routes`). Serves at ``http://host:port`` from :meth:`start` to :meth:`stop`;
    ``port`` 0 picks a free port (:attr:`url` says which, once started); start raises OSError
    if the address is taken."""

    def __init__(self, token: str, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self._token = token
        self._csrf = csrf_token(token)
        self._open_reads = _is_loopback(host)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> Self:
        sock = socket.create_server((self.host, self.port), family=_family(self.host))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="squall-ui",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5.0)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def api_routes(self) -> list[Route]:
        """The REST API's routes."""
        raise NotImplementedError

    def app(self) -> Starlette:
        routes = [
            *self.api_routes(),
            Route("/", self._index, methods=["GET"]),
            Route("/topology.html", self._page("topology.html"), methods=["GET"]),
            Route("/component.html", self._page("component.html"), methods=["GET"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
        return Starlette(routes=routes, middleware=[_middleware(self._guard)],
                         exception_handlers={api.ApiError: _api_error, NotAliveError: _not_alive})

    def _authenticated(self, request: Request, post: bool) -> bool:
        bearer = request.headers.get("authorization", "")
        if bearer.startswith("Bearer ") and hmac.compare_digest(bearer[7:].strip(), self._token):
            return True
        cookie = request.cookies.get(COOKIE, "")
        if not hmac.compare_digest(cookie, self._token):
            return False
        return not post or hmac.compare_digest(request.headers.get(CSRF_HEADER, ""), self._csrf)

    async def _guard(self, request: Request, call_next: Any) -> Response:
        post = request.method != "GET" and request.method != "HEAD"
        login = request.url.path == "/" and "token" in request.query_params
        if (post or not self._open_reads) and not login and not self._authenticated(request, post):
            what = "a POST" if post else "a request to a UI bound to a non-loopback address"
            return _error(401, f"{what} needs the topology's UI token (Authorization: Bearer <token>, or the "
                               "cookie set by the URL squall printed, with the X-CSRF-Token header)")
        return await call_next(request)

    async def _index(self, request: Request) -> Response:
        """The topology list; with ``?token=``, the login: the cookie is set and the browser
        sent back here without the token in its address bar."""
        token = request.query_params.get("token")
        if token is None:
            return await self._page("index.html")(request)
        if not hmac.compare_digest(token, self._token):
            return _error(401, "the token in the URL is not this UI's")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, self._token, httponly=True, samesite="strict")
        return response

    def _page(self, file: str) -> Callable[[Request], Any]:
        """A page, with the CSRF token its POSTs send when the browser holds the cookie (empty
        otherwise, which tells the page that its controls would be refused)."""
        template = (STATIC / file).read_text()

        async def page(request: Request) -> Response:
            signed_in = hmac.compare_digest(request.cookies.get(COOKIE, ""), self._token)
            return HTMLResponse(template.replace("{{csrf}}", self._csrf if signed_in else ""),
                                headers={"Cache-Control": "no-store"})

        return page


class UiServer(UiApp):
    """Storm UI and its REST API for ``cluster``'s topologies.

    ``kill`` is how a POST ``/kill/:wait-time`` kills (default: ``cluster.kill_topology``);
    the driver of ``squall run`` passes its own, so that the kill ends with its summary.
    """

    def __init__(self, cluster: Nimbus, token: str, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
                 kill: KillFn | None = None) -> None:
        super().__init__(token, host, port)
        self.cluster = cluster
        self._kill = kill or (lambda name, wait: cluster.kill_topology(name, wait))

    def api_routes(self) -> list[Route]:
        get, post = ["GET"], ["POST"]
        return [
            Route("/api/v1/cluster/summary", self._cluster_summary, methods=get),
            Route("/api/v1/topology/summary", self._topology_summary, methods=get),
            Route("/api/v1/topology/{id}", self._topology, methods=get),
            Route("/api/v1/topology/{id}/component/{component}", self._component, methods=get),
            Route("/api/v1/topology/{id}/visualization", self._visualization, methods=get),
            Route("/api/v1/topology/{id}/series", self._series, methods=get),
            Route("/api/v1/topology/{id}/activate", self._activate, methods=post),
            Route("/api/v1/topology/{id}/deactivate", self._deactivate, methods=post),
            Route("/api/v1/topology/{id}/kill/{wait}", self._kill_route, methods=post),
            Route("/api/v1/topology/{id}/rebalance/{wait}", self._rebalance, methods=post),
            Route("/api/v1/topology/{id}/component/{component}/debug/{action}/{spct}", self._debug, methods=post),
            Route("/api/v1/topology/{id}/component/{component}/samples", self._samples, methods=get),
            Route("/api/v1/topology/{id}/profiling/dumpstacks/{worker}", self._dump_stacks, methods=post),
            Route("/metrics", self._metrics, methods=get),
        ]

    # the cluster is called from the event loop's thread; its calls return at once

    def _view(self, name: str) -> api.TopologyView:
        cluster = self.cluster
        return api.TopologyView(cluster.topology_info(name), cluster.get_topology(name),
                                cluster.get_topology_conf(name), cluster.get_window_totals(name, WINDOWS))

    def _views(self) -> list[api.TopologyView]:
        views = []
        for name in self.cluster.get_topologies():
            try:
                views.append(self._view(name))
            except NotAliveError:
                continue  # killed meanwhile
        return views

    async def _cluster_summary(self, request: Request) -> Response:
        return _json(api.cluster_summary(self._views()))

    async def _topology_summary(self, request: Request) -> Response:
        return _json(api.topology_summary(self._views()))

    async def _topology(self, request: Request) -> Response:
        return _json(api.topology_page(self._view(request.path_params["id"]), _window(request), _sys(request)))

    async def _component(self, request: Request) -> Response:
        name, component = request.path_params["id"], request.path_params["component"]
        page = api.component_page(self._view(name), component, _window(request))
        page.update(api.sampling_fields(*self.cluster.sampling(name, component)))
        return _json(page)

    async def _debug(self, request: Request) -> Response:
        """Storm UI's Debug: ``enable`` sampling ``spct`` percent of the component's emits for
        ``?secs=`` (default 30) seconds, or ``disable`` it."""
        name, component = request.path_params["id"], request.path_params["component"]
        action = request.path_params["action"]
        if action not in ("enable", "disable"):
            raise api.ApiError(400, f"debug: the action is enable or disable, not {action!r}")
        percent = api.number("sampling percentage", request.path_params["spct"]) if action == "enable" else 0.0
        secs = api.number("secs", request.query_params.get("secs", str(DEFAULT_SAMPLING_SECS)))
        if action == "enable" and percent <= 0:
            raise api.ApiError(400, f"debug: enable needs a sampling percentage above 0, not {percent:g}")
        try:
            self.cluster.set_sampling(name, component, percent, secs)
        except ValueError as e:
            raise api.ApiError(400 if self._has(name, component) else 404, str(e)) from None
        return _json(api.operation(name, f"debug/{action}"))

    async def _samples(self, request: Request) -> Response:
        """The tuples sampled of a component (Squall's; Storm shows them in its event logs).
        Tuples' values may be private: the token is needed, even where reads are open."""
        if not self._authenticated(request, post=False):
            return _error(401, "sampled tuples need the topology's UI token (Authorization: Bearer <token>, or "
                               "the cookie set by the URL squall printed)")
        name, component = request.path_params["id"], request.path_params["component"]
        if not self._has(name, component):
            raise api.ApiError(404, f"topology {name!r} has no component {component!r}")
        return _json(api.samples_page(self.cluster.samples(name, component)))

    async def _dump_stacks(self, request: Request) -> Response:
        """Storm UI's JStack, in Python: every thread's stack in the worker ``host:port``."""
        name, worker = request.path_params["id"], request.path_params["worker"]
        port = api.worker_port(worker)
        try:
            stacks = await run_in_threadpool(self.cluster.dump_stacks, name, port)
        except ValueError as e:
            raise api.ApiError(404, str(e)) from None
        except TimeoutError as e:
            raise api.ApiError(504, str(e)) from None
        return _json({"id": worker, "stacks": stacks})

    def _has(self, name: str, component: str) -> bool:
        return component in self.cluster.get_topology(name).components

    async def _visualization(self, request: Request) -> Response:
        return _json(api.visualization(self._view(request.path_params["id"]), _window(request)))

    async def _series(self, request: Request) -> Response:
        name = request.path_params["id"]
        view = self._view(name)
        return _json(api.series(view, self.cluster.get_recent_totals(name)))

    async def _metrics(self, request: Request) -> Response:
        """Prometheus' text exposition of every topology's built-in and user metrics."""
        return Response(exposition(cluster_infos(self.cluster)), media_type=CONTENT_TYPE_LATEST)

    async def _activate(self, request: Request) -> Response:
        name = request.path_params["id"]
        self.cluster.activate(name)
        return _json(api.operation(name, "activate"))

    async def _deactivate(self, request: Request) -> Response:
        name = request.path_params["id"]
        self.cluster.deactivate(name)
        return _json(api.operation(name, "deactivate"))

    async def _rebalance(self, request: Request) -> Response:
        name = request.path_params["id"]
        wait = _wait_time(request.path_params["wait"])
        body = await request.body()
        try:
            options = json.loads(body) if body.strip() else {}
        except ValueError as e:
            raise api.ApiError(400, f"the body is not JSON: {e}") from None
        num_workers, executors = api.rebalance_options(options)
        try:
            self.cluster.start_rebalance(name, wait, num_workers, executors)
        except ValueError as e:
            raise api.ApiError(400, str(e)) from None
        return _json(api.operation(name, "rebalance"))

    async def _kill_route(self, request: Request) -> Response:
        name = request.path_params["id"]
        wait = _wait_time(request.path_params["wait"])
        self.cluster.topology_info(name)  # 404 for an unknown one, before anything happens
        await run_in_threadpool(self._kill, name, wait)  # a kill waits: not on the event loop
        return _json(api.operation(name, "kill"))


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:
        return socket.AF_INET


def _window(request: Request) -> int | None:
    try:
        return parse_window(request.query_params.get("window"))
    except ValueError as e:
        raise api.ApiError(400, str(e)) from None


def _sys(request: Request) -> bool:
    """Storm UI's ``sys`` parameter: whether Squall's own components count (default false)."""
    value = request.query_params.get("sys", "false")
    if value not in ("true", "false"):
        raise api.ApiError(400, f"sys must be true or false, got {value!r}")
    return value == "true"


def _wait_time(value: str) -> float:
    try:
        return parse_seconds(value)
    except ValueError as e:
        raise api.ApiError(400, f"wait-time: {e}") from None


class _JsonResponse(JSONResponse):
    """JSON whose values that are not JSON's own (a config's classes, say) appear as their repr."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, default=repr, ensure_ascii=False, separators=(",", ":")).encode()


def _json(body: Any) -> Response:
    return _JsonResponse(body)


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": {400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 502: "Bad Gateway",
                                   504: "Gateway Timeout"}.get(status, "Error"),
                         "errorMessage": message}, status_code=status)


async def _api_error(request: Request, exc: api.ApiError) -> Response:
    return _error(exc.status, str(exc))


async def _not_alive(request: Request, exc: NotAliveError) -> Response:
    return _error(404, str(exc))


def _middleware(dispatch: Any) -> Middleware:
    return Middleware(BaseHTTPMiddleware, dispatch=dispatch)
