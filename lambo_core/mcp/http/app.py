"""The ASGI app of an HTTP serve: ``/mcp`` (the default session), ``/mcp/s/<session>``, and
``/healthz``, each request checked in order: credential (401), session (404), rates (429;
a call scoped to a layer spends the layer's too), the live-session ceiling (503), then the
session's own SDK session manager, which refuses a body over the limit (413) before reading
it and checks Host and Origin.

One manager per session, so an MCP session id opened at one URL means nothing at another.
Every request is logged as one line (method, session, status, duration, credential), never
its arguments. Spec: "Transports", "Several sessions in one serve".
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from ...credentials import Credential, Verifier
from ...reach import REACH_SCOPE_KEY
from .limits import LiveSessions, RateLimits, Refusal
from .scoped import buffered_body, scoped_layer

log = logging.getLogger(__name__)
#: one line per request; an HTTP serve shows them at INFO unless LAMBO_LOG says otherwise
request_log = logging.getLogger("lambo_core.mcp.http.requests")

MCP_PATH = "/mcp"
SESSION_PREFIX = "/mcp/s/"
HEALTH_PATH = "/healthz"
_SESSION_HEADER = b"mcp-session-id"
_VERSION_HEADER = b"mcp-protocol-version"
_AUTHORIZATION = b"authorization"


@dataclass(frozen=True)
class Endpoint:
    """One served session: its name, its session manager, whether it answers now, and the
    layers it reads and writes by scope."""

    session: str
    manager: StreamableHTTPSessionManager
    serving: Callable[[], bool]
    layers: tuple[str, ...] = ()


def live_transports(manager: StreamableHTTPSessionManager) -> list[StreamableHTTPServerTransport]:
    """The MCP sessions ``manager`` has open, less those already told to end. The SDK keeps
    no public list; its own table is the truth (tests/test_http_limits.py fails if an SDK
    release renames it)."""
    return [t for t in manager._server_instances.values() if not _ending(t)]


def open_sessions(manager: StreamableHTTPSessionManager) -> int:
    return len(live_transports(manager))


def _ending(transport: StreamableHTTPServerTransport) -> bool:
    scope = transport.idle_scope
    return scope is not None and scope.cancel_called


def idle_for(transport: StreamableHTTPServerTransport, idle_timeout_s: float) -> float | None:
    """Seconds since the session last had a request in flight; None while one is (an open
    GET stream included): the SDK keeps its idle deadline at infinity while it is in use."""
    scope = transport.idle_scope
    if scope is None or not math.isfinite(scope.deadline):
        return None
    return max(0.0, anyio.current_time() - (scope.deadline - idle_timeout_s))


class HttpApp:
    """Routes, checks and logs every request; ``in_flight`` counts the POSTs being
    answered, so a stop can let them finish."""

    def __init__(
        self,
        endpoints: list[Endpoint],
        verifier: Verifier,
        rates: RateLimits,
        max_live_sessions: int,
        clock: Callable[[], float] = time.monotonic,
        *,
        evict_idle_after_s: float | None = None,
    ) -> None:
        if not endpoints:
            raise ValueError("an HTTP app needs at least one session")
        self.endpoints = {e.session: e for e in endpoints}
        #: each session's Host/Origin checks, the very settings its manager applies again
        self._security = {
            e.session: TransportSecurityMiddleware(e.manager.security_settings) for e in endpoints
        }
        self.default = endpoints[0].session
        self.verifier = verifier
        self.rates = rates
        self.live = LiveSessions(max_live_sessions, self.open_sessions, self.evict_idlest)
        #: at the ceiling, a session idle this long may be closed to make room (None: never)
        self.evict_idle_after_s = evict_idle_after_s
        self.clock = clock
        self.in_flight = 0
        self._idle = anyio.Event()
        self._idle.set()
        self.stopping = False

    def open_sessions(self) -> int:
        return sum(open_sessions(e.manager) for e in self.endpoints.values())

    def evict_idlest(self) -> bool:
        """Close the MCP session idle longest, if it has been idle ``evict_idle_after_s``:
        a one-shot client (a CLI call) never sends DELETE, and its session would otherwise
        hold a place until the idle timeout. Its client, if it comes back, gets 404 and
        opens a new session, as MCP clients do after an expiry."""
        if self.evict_idle_after_s is None:
            return False
        idlest: tuple[float, StreamableHTTPServerTransport] | None = None
        for endpoint in self.endpoints.values():
            timeout = endpoint.manager.session_idle_timeout
            if timeout is None:
                continue
            for transport in live_transports(endpoint.manager):
                idle = idle_for(transport, timeout)
                if idle is None or idle < self.evict_idle_after_s:
                    continue  # in use, or idle too briefly to be a client that has left
                if idlest is None or idle > idlest[0]:
                    idlest = (idle, transport)
        if idlest is None:
            return False
        idle, transport = idlest
        assert transport.idle_scope is not None
        transport.idle_scope.cancel()  # ends it as an expiry does; the SDK discards it
        log.info("closed an MCP session idle for %.0f s to make room for a new one", idle)
        return True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        started = self.clock()
        seen: dict[str, Any] = {"status": 0, "session": "-", "credential": "-"}

        async def send_seen(message: Message) -> None:
            if message["type"] == "http.response.start":
                seen["status"] = message["status"]
            await send(message)

        post = scope["method"] == "POST"  # a GET is a stream a stop does not wait for
        if post:
            self._begin()
        try:
            await self._answer(scope, receive, send_seen, seen)
        finally:
            if post:
                self._end()
            request_log.info(
                "http method=%s session=%s status=%s ms=%.1f credential=%s",
                scope["method"],
                seen["session"],
                seen["status"],
                (self.clock() - started) * 1000,
                seen["credential"],
            )

    def _begin(self) -> None:
        self.in_flight += 1
        if self._idle.is_set():
            self._idle = anyio.Event()

    def _end(self) -> None:
        self.in_flight -= 1
        if not self.in_flight:
            self._idle.set()

    async def drained(self) -> None:
        """Returns once no POST is being answered."""
        await self._idle.wait()

    async def _answer(
        self, scope: Scope, receive: Receive, send: Send, seen: dict[str, Any]
    ) -> None:
        path: str = scope["path"]
        if path == HEALTH_PATH:
            await self._health(scope, send)
            return
        name = self._session_named(path)
        if name is None:
            await _refuse(send, Refusal(404, "not found"))
            return
        headers = dict(scope["headers"])
        credential: Credential | None = None
        if self.verifier.required:
            credential = self.verifier.identify(_header(headers, _AUTHORIZATION))
            if credential is None:
                await _refuse(send, Refusal(401, "unauthorized"), {"www-authenticate": "Bearer"})
                return
            seen["credential"] = credential.name
        endpoint = self.endpoints.get(name)
        if endpoint is None or (credential is not None and not credential.reaches(name)):
            # the same answer for a session not served and one this credential cannot reach
            await _refuse(send, self._not_served(credential))
            return
        seen["session"] = name
        # Host, Origin and Content-Type before any limit: a request from a page that is not
        # allowed must not spend the session's rate or push another client out
        foreign = await self._security[name].validate_request(
            Request(scope), is_post=scope["method"] == "POST"
        )
        if foreign is not None:
            await foreign(scope, receive, send)
            return
        # a call scoped to a layer this credential reaches also spends the layer's rate
        layers = tuple(
            layer for layer in endpoint.layers if credential is None or credential.reaches(layer)
        )
        layer: str | None = None
        if layers and scope["method"] == "POST":
            body, receive = await buffered_body(
                receive, endpoint.manager.max_request_body_size, _declared_length(headers)
            )
            layer = None if body is None else scoped_layer(body, layers)
        # ending an MCP session (DELETE) is never throttled: it frees a place
        refused = (
            None
            if scope["method"] == "DELETE"
            else self.rates.admit(credential.name if credential else None, name, layer)
        )
        if refused is not None:
            await _refuse(send, refused)
            return
        if credential is not None:
            # the SDK ties each MCP session to the credential that opened it; the tools
            # of a layered session reach only the layers the credential reaches
            token = AccessToken(token="", client_id=credential.name, scopes=[])
            scope = {
                **scope,
                "user": AuthenticatedUser(token),
                REACH_SCOPE_KEY: credential.sessions,
            }
        if not _opens_session(scope, headers):
            await endpoint.manager.handle_request(scope, receive, send)
            return
        refused = self.live.admit_new()
        if refused is not None:
            await _refuse(send, refused)
            return
        try:
            await endpoint.manager.handle_request(scope, receive, send)
        finally:
            self.live.opened()

    def _session_named(self, path: str) -> str | None:
        """The session a path addresses (``/mcp``: the default one), or None."""
        if path in (MCP_PATH, MCP_PATH + "/"):
            return self.default
        if path.startswith(SESSION_PREFIX):
            name = path[len(SESSION_PREFIX) :].removesuffix("/")
            return name if name and "/" not in name else None
        return None

    def _not_served(self, credential: Credential | None) -> Refusal:
        if self.verifier.required:
            return Refusal(404, "not found")
        served = ", ".join(f"{SESSION_PREFIX}{s}" for s in self.endpoints)
        return Refusal(404, f"no such session is served here; this serve holds {served}")

    async def _health(self, scope: Scope, send: Send) -> None:
        """200 while every session answers, 503 while one is starting or the serve stops;
        it counts sessions and open MCP sessions, and says nothing of what memory holds."""
        if scope["method"] not in ("GET", "HEAD"):
            await _refuse(send, Refusal(405, "method not allowed"), {"allow": "GET, HEAD"})
            return
        serving = not self.stopping and all(e.serving() for e in self.endpoints.values())
        status = "stopping" if self.stopping else "ok" if serving else "starting"
        body = {
            "status": status,
            "sessions": len(self.endpoints),
            "mcp_sessions": self.open_sessions(),
            "max_mcp_sessions": self.live.ceiling,
        }
        await _send_json(send, 200 if serving else 503, body, {})


def _header(headers: dict[bytes, bytes], name: bytes) -> str | None:
    raw = headers.get(name)
    return raw.decode("latin-1") if raw is not None else None


def _declared_length(headers: dict[bytes, bytes]) -> int | None:
    raw = _header(headers, b"content-length")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None  # the SDK reads the body as if undeclared, and so does the app


def _opens_session(scope: Scope, headers: dict[bytes, bytes]) -> bool:
    """A handshake-era POST without a session id: it would open an MCP session. (A
    2026-07-28 request carries no session and opens none.)"""
    if scope["method"] != "POST" or _SESSION_HEADER in headers:
        return False
    version = _header(headers, _VERSION_HEADER)
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


async def _refuse(send: Send, refusal: Refusal, headers: dict[str, str] | None = None) -> None:
    """A refusal as the SDK words its own: a JSON-RPC error with no id."""
    extra = dict(headers or {})
    if refusal.retry_after is not None:
        extra["retry-after"] = str(refusal.retry_after)
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": refusal.message}}
    await _send_json(send, refusal.status, body, extra)


async def _send_json(send: Send, status: int, body: object, headers: dict[str, str]) -> None:
    data = json.dumps(body).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in headers.items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": data})
