"""The ASGI app: the API's endpoint table as routes, the event stream, ``/metrics``,
``/openapi.json`` and the console's static files, behind ``Guard`` (host names, auth, cross-site
checks, security headers).

Handlers are plain functions over a synchronous Redis client: each runs in Starlette's thread
pool, so a slow call (a store read) holds one thread, not the event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import redis
from redis import Redis
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from crawler import control
from crawler.config.redact import redact
from crawler.errors import BadURL, CrawlerError, JobNotFound, JobStateConflict
from crawler.web import openapi
from crawler.web.api import ENDPOINTS, Call, Endpoint
from crawler.web.auth import Auth, Hosts, cross_site_refusal

log = logging.getLogger("crawler.web")
STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY = 1 << 20  # a settings change or a job's seeds; more is a mistake or an attack
EVENT_INTERVAL = 2.0
# The page loads its own script and stylesheet and nothing inline (console.js builds the DOM with
# textContent), so nothing needs 'unsafe-inline'; no page may frame it (clickjacking the buttons).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = tuple((k.encode(), v.encode()) for k, v in (
    ("content-security-policy", CSP),
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
))
_SECURITY_NAMES = frozenset(k for k, _ in SECURITY_HEADERS)


def _error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
    line = redact(message.replace("\r", " ").replace("\n", " "))[:500]
    return JSONResponse({"error": line}, status, headers=headers)


def _message(exc: BaseException) -> str:
    # str() of a KeyError (JobNotFound) is its repr, quotes and all.
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)


def _failure(exc: BaseException) -> JSONResponse | None:
    """The response for an error the API answers in one line (None: a bug, let it show)."""
    if isinstance(exc, JobNotFound):
        return _error(404, _message(exc))
    if isinstance(exc, JobStateConflict):
        return _error(409, str(exc))
    if isinstance(exc, BodyTooLarge):
        # Closing makes the server stop reading: on a kept-alive connection it would read and
        # drop the rest of the body, all 200 MB of it.
        return _error(413, str(exc), {"Connection": "close"})
    if isinstance(exc, (BadURL, ValueError)):  # ConfigError, SettingError, a seed: the input is unusable (as the CLI)
        return _error(400, _message(exc))
    if isinstance(exc, CrawlerError):  # the store is down, say
        return _error(502, f"{type(exc).__name__}: {exc}")
    if isinstance(exc, (redis.ConnectionError, redis.TimeoutError)):
        return _error(503, f"Redis: {exc}")
    return None


def _json(result: Any, status: int = 200) -> Response:
    # Credentials out of every answer, whatever field holds them (a worker's error naming a store
    # URL, say), as the CLI redacts what it prints.
    return Response(redact(json.dumps(result)), status, media_type="application/json")


def _who(request: Request) -> str:
    client = request.client.host if request.client else "?"
    user = request.scope.get("crawler.user", "")
    return f"api:{user}@{client}" if user else f"api:{client}"


async def _body(request: Request) -> dict[str, Any]:
    # Read in the server's chunks and stop at the cap: ``request.body()`` would hold all of a
    # 200 MB body (twice, while joining) before anything could refuse it.
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise BodyTooLarge(f"request body over {MAX_BODY} bytes (Content-Length: {declared[:20]})")
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise BodyTooLarge(f"request body over {MAX_BODY} bytes")
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CrawlerBadRequest(f"request body is not JSON: {exc}") from None
    if not isinstance(body, dict):
        raise CrawlerBadRequest("request body must be a JSON object")
    return body


class CrawlerBadRequest(ValueError):
    pass


class BodyTooLarge(Exception):
    """A request body over ``MAX_BODY``: refused (413) without reading the rest."""


def _route(endpoint: Endpoint) -> Route:
    async def run(request: Request) -> Response:
        try:
            body = await _body(request) if endpoint.body is not None else {}
            call = Call(request.app.state.redis, request.path_params, request.query_params, body, _who(request))
            result = await run_in_threadpool(endpoint.handler, call)
        except Exception as exc:
            response = _failure(exc)
            if response is None:
                raise
            return response
        return _json(result, endpoint.status)

    return Route(endpoint.path, run, methods=[endpoint.method], name=endpoint.handler.__name__)


async def _events(request: Request) -> Response:
    """Server-sent events for one job: ``status`` every 2 s, ``log`` for each new log entry."""
    r: Redis = request.app.state.redis
    job_id = request.path_params["job"]
    try:
        limit = int(request.query_params.get("max") or 0)
        first = await run_in_threadpool(control.status, r, job_id)
    except Exception as exc:
        response = _failure(exc)
        if response is None:
            raise
        return response

    async def stream() -> AsyncIterator[str]:
        st, after, sent = first, "", 0
        while True:
            yield f"event: status\ndata: {redact(json.dumps(st))}\n\n"
            entries = await run_in_threadpool(control.logs, r, job_id, after, "INFO", 100)
            for e in entries:
                yield f"event: log\nid: {e['id']}\ndata: {redact(json.dumps(e))}\n\n"
            after = entries[-1]["id"] if entries else after or "0-0"
            sent += 1
            if limit and sent >= limit:
                return
            await asyncio.sleep(request.app.state.event_interval)
            if await request.is_disconnected():
                return
            try:
                st = await run_in_threadpool(control.status, r, job_id)
            except JobNotFound:
                yield "event: gone\ndata: {}\n\n"
                return

    return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store"})


def _metrics(request: Request) -> Response:
    return PlainTextResponse(control.metrics(request.app.state.redis),
                             media_type="text/plain; version=0.0.4; charset=utf-8")


def _openapi(request: Request) -> Response:
    return JSONResponse(request.app.state.openapi)


def _index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's own 404 and 405, as JSON like every other error.
    assert isinstance(exc, HTTPException)
    return _error(exc.status_code, f"{exc.detail}: {request.method} {request.url.path[:200]}", exc.headers)


class Guard:
    """Before any route runs: the ``Host`` must be one this console serves (DNS rebinding), then
    authentication (when configured), then the cross-site check. With a token, the console's own
    files stay open (they hold no data) so the page can ask for it; with basic auth everything is
    behind it and the browser asks. Every response, refusals included, gets ``SECURITY_HEADERS``."""

    def __init__(self, app: ASGIApp, auth: Auth | None, origins: frozenset[str] = frozenset(),
                 hosts: Hosts | None = None) -> None:
        self.app = app
        self.auth = auth
        self.origins = origins
        self.hosts = hosts or Hosts()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", ()) if k.lower() not in _SECURITY_NAMES]
                message = {**message, "headers": kept + list(SECURITY_HEADERS)}
            await send(message)

        headers = Headers(scope=scope)
        path: str = scope["path"]
        named = headers.getlist("host")
        if len(named) != 1 or not self.hosts.allows(named[0]):
            client = scope.get("client") or ("?", 0)
            log.warning("refused %s %r from %s: Host %r is not a name this console serves (CRAWLER_WEB_ALLOWED_HOSTS)",
                        scope["method"], redact(path)[:200], client[0], redact(", ".join(named))[:100])
            await _error(421, "misdirected request: this console does not serve that Host "
                              "(see CRAWLER_WEB_ALLOWED_HOSTS)")(scope, receive, secured)
            return
        public = self.auth is not None and self.auth.scheme == "Bearer" and (path == "/" or path.startswith("/static/"))
        if self.auth is not None and not public:
            if not self.auth.allows(headers.get("authorization", "")):
                challenge = {"WWW-Authenticate": f'{self.auth.scheme} realm="crawler"'}
                await _error(401, "authentication required", challenge)(scope, receive, secured)
                return
            scope["crawler.user"] = self.auth.user or "token"
        refusal = cross_site_refusal(scope["method"], headers, scope.get("scheme", "http"), headers.get("host", ""),
                                     self.origins)
        if refusal:
            await _error(403, refusal)(scope, receive, secured)
            return
        await self.app(scope, receive, secured)


def create_app(redis_client: Redis, auth: Auth | None = None, *, origins: frozenset[str] = frozenset(),
               listen: str | None = None, allowed_hosts: frozenset[str] = frozenset(),
               event_interval: float = EVENT_INTERVAL) -> ASGIApp:
    """The console and API over ``redis_client`` (its replies undecoded, as ``crawler.state.conn``
    makes them). ``auth``: None leaves it open, for loopback only (``auth.check_listen``).
    ``origins``: other origins the console is reached under (a TLS proxy's), allowed to change things.
    ``listen``: the address the server is bound to, a ``Host`` it answers besides loopback names
    (None: loopback names only); ``allowed_hosts``: more (``auth.allowed_hosts``)."""
    hosts = Hosts.serving(listen, allowed_hosts)
    routes: list[BaseRoute] = [_route(e) for e in ENDPOINTS]
    routes += [
        Route("/api/jobs/{job}/events", _events, methods=["GET"]),
        Route("/metrics", _metrics, methods=["GET"]),
        Route("/openapi.json", _openapi, methods=["GET"]),
        Route("/", _index, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: _http_error})
    app.state.redis = redis_client
    app.state.event_interval = event_interval
    try:
        app_version = version("crawler")
    except PackageNotFoundError:
        app_version = "0"
    app.state.openapi = openapi.document(app_version)
    return Guard(app, auth, origins, hosts)
