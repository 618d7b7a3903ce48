"""The web window's HTTP app: the JSON endpoints, the page's files, and the checks in front.

Every answer is JSON (the page's files aside). A request whose Host is not one this
window answers as is refused (DNS rebinding: a page elsewhere must not read the memory
through a name that resolves here); with credentials configured, /api/* needs a bearer
token (the page itself holds no data, so it loads without one). The reads run in a
worker thread: rebuilding the index or a recall's legs must not stall the event loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import anyio.to_thread
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..credentials import Verifier
from ..errors import LamboError, ParameterError, ReferenceRefused
from ..inspect import DEFAULT_DEPTH
from .answers import Answers
from .events import read_feed
from .params import (
    check_known,
    depth_param,
    optional_text,
    since_param,
    text_param,
    top_k_param,
)
from .static import static_routes

log = logging.getLogger(__name__)

GRAPH_DEPTH = 1  # /api/graph's default: the focus and what touches it

Read = Callable[[dict[str, str]], dict[str, Any]]


def build_app(answers: Answers, verifier: Verifier, allowed_hosts: tuple[str, ...]) -> Starlette:
    """The Starlette app of one window."""

    def endpoint(name: str, known: tuple[str, ...], read: Read) -> Route:
        async def handle(request: Request) -> Response:
            refused = _gate(request, verifier, allowed_hosts)
            if refused is not None:
                return refused
            params = dict(request.query_params)
            try:
                check_known(params, name, known)
                body = await anyio.to_thread.run_sync(read, params)
            except ParameterError as exc:
                return _refusal(400, "bad_parameter", exc.render())
            except ReferenceRefused as exc:
                return _refusal(404, "not_found", exc.render())
            except LamboError as exc:
                if exc.detail:
                    log.warning("%s on %s: %s", exc.kind.value, name, exc.detail)
                return _refusal(503, exc.kind.value, exc.render())
            except Exception:
                log.exception("%s failed", name)
                return _refusal(500, "internal", "the window could not answer; see its log")
            return JSONResponse(body)

        return Route(name, handle, methods=["GET"])

    view = answers.view

    def events(p: dict[str, str]) -> dict[str, Any]:
        since = since_param(p)
        loaded = view.current()
        with loaded.session.index.lock:
            return read_feed(view.store, view.name, loaded.session.index.graph, since).as_dict()

    def healthz(_: dict[str, str]) -> dict[str, Any]:
        return {"ok": True, "session": view.name, "read_only": True}

    routes = [
        endpoint("/healthz", (), healthz),
        endpoint("/api/session", (), lambda _: answers.session()),
        endpoint("/api/stats", (), lambda _: answers.stats()),
        endpoint("/api/pulse", (), lambda _: answers.pulse()),
        endpoint("/api/events", ("since",), events),
        endpoint(
            "/api/recall",
            ("q", "top_k"),
            lambda p: answers.recall(text_param(p, "q"), top_k_param(p)),
        ),
        endpoint(
            "/api/inspect",
            ("focus", "depth"),
            lambda p: answers.inspect(text_param(p, "focus"), depth_param(p, DEFAULT_DEPTH)),
        ),
        endpoint(
            "/api/graph",
            ("focus", "depth"),
            # no focus: the largest pillar's neighbourhood
            lambda p: answers.graph(optional_text(p, "focus"), depth_param(p, GRAPH_DEPTH)),
        ),
        *static_routes(lambda request: _gate(request, verifier, allowed_hosts)),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        return _refusal(404, "not_found", "no such page; the API is under /api/")

    async def wrong_method(request: Request, exc: Exception) -> Response:
        return _refusal(405, "method", "this window is read-only: it answers GET only")

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: wrong_method})
    return app


def _gate(request: Request, verifier: Verifier, allowed_hosts: tuple[str, ...]) -> Response | None:
    """The Host check, then (for /api/*, when credentials are configured) the token."""
    host = request.headers.get("host", "")
    if host not in allowed_hosts:
        return _refusal(421, "host", "this window answers only as its own address")
    needs_token = request.url.path.startswith("/api/") and verifier.required
    if needs_token and verifier.identify(request.headers.get("authorization")) is None:
        response = _refusal(401, "unauthorized", "a bearer token is required")
        response.headers["www-authenticate"] = "Bearer"
        return response
    return None


def _refusal(status: int, error: str, message: str) -> JSONResponse:
    return JSONResponse({"error": error, "message": message}, status_code=status)
