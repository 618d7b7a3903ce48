"""``lambo serve --transport http``: hold every session named, then answer Streamable HTTP.

Each session is a ``Serve`` of its own (lease, write queue, receipts, daemon, hub socket,
so stdio serves and CLI calls of it forward here), all sharing one loaded model. A layer
([serve] layers) is one serve for the whole process, held before the sessions that read it
(two serves of one session in one process would share a lease holder id and take the lease
from each other). The serve fails closed: off loopback it does not start without a
credential, and a session another process holds refuses the start, naming the holder. A
stop signal stops every session the way a stdio stop does, while HTTP still answers the
calls in flight. With --ledger, every session's serve writes to one ledger file, each
line naming its session and each session counting its own lines. Spec: "Transports",
"HTTP for a machine with several independent clients"; lambo_stats, the ``ledger_*`` keys.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread
import uvicorn
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from ...config import Config
from ...credentials import Credential, Verifier, resolve
from ...derive_image import image_tool_listed
from ...embed.loader import LoadedModels
from ...errors import ConfigError
from ...hosts import in_url, is_loopback, is_wildcard
from ...ledger_writer import LedgerWriter
from ...serve import (
    ANSWER_GRACE_S,
    Serve,
    ServeOptions,
    lease_ttl,
    shutdown_budget,
    tool_names,
)
from ...serve_ledger import LEDGER_CLOSE_BUDGET_S, heartbeats
from ...serve_signals import exit_without_teardown, stop_on_signal
from ..server import build_server
from .app import MCP_PATH, SESSION_PREFIX, Endpoint, HttpApp
from .limits import RateLimits

log = logging.getLogger(__name__)
#: the HTTP serve's own lines (where it listens, one per request): INFO unless LAMBO_LOG says
http_log = logging.getLogger("lambo_core.mcp.http")

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def configured(config: Config, env: Mapping[str, str] | None = None) -> tuple[Credential, ...]:
    """The credentials a serve's config gives ([[serve.credential]], serve.auth_token and
    LAMBO_AUTH_TOKEN), each ``token_file`` read beside the lambo.toml naming it."""
    return resolve(
        config.get("serve.credential"),
        str(config.get("serve.auth_token")),
        env,
        base=config.file.parent if config.file is not None else None,
    )


@dataclass(frozen=True)
class HttpSettings:
    """What an HTTP serve listens on and whom it lets in, resolved from the config."""

    bind: str
    port: int
    credentials: tuple[Credential, ...]
    allowed_hosts: tuple[str, ...]
    allowed_origins: tuple[str, ...]
    per_credential_rps: float
    per_session_rps: float
    max_live_sessions: int
    evict_idle_after_s: float
    session_idle_timeout_s: float
    max_request_bytes: int

    @classmethod
    def from_config(cls, config: Config, env: Mapping[str, str] | None = None) -> HttpSettings:
        """Refuses, before anything listens, a bind off loopback without a credential."""
        bind = check_bind(str(config.get("serve.bind")))
        credentials = configured(config, env)
        if not is_loopback(bind) and not credentials:
            raise ConfigError(
                f"serve.bind {bind} is not a loopback address, and an HTTP serve off loopback "
                "is a session writer open to the network: configure a bearer token "
                "(--auth-token or LAMBO_AUTH_TOKEN) or a [[serve.credential]] in lambo.toml, "
                "or bind 127.0.0.1"
            )
        port = int(config.get("serve.port"))
        return cls(
            bind=bind,
            port=port,
            credentials=credentials,
            allowed_hosts=config.get("serve.allowed_hosts"),
            allowed_origins=config.get("serve.allowed_origins"),
            per_credential_rps=float(config.get("serve.per_credential_rps")),
            per_session_rps=float(config.get("serve.per_session_rps")),
            max_live_sessions=int(config.get("serve.max_live_sessions")),
            evict_idle_after_s=float(config.get("serve.evict_idle_after_s")),
            session_idle_timeout_s=float(config.get("serve.session_idle_timeout_s")),
            max_request_bytes=int(config.get("serve.max_request_bytes")),
        )

    def security(self, port: int) -> TransportSecuritySettings:
        """Host and Origin checks for the port actually listened on."""
        return security_settings(self.bind, port, self.allowed_hosts, self.allowed_origins)


def check_bind(bind: str) -> str:
    """The bind address as given, or a refusal naming the rule (never the raw value: it goes
    into log lines and URLs)."""
    bind = bind.strip()
    if not bind or not all(ch.isprintable() and not ch.isspace() for ch in bind):
        raise ConfigError(
            "serve.bind must be an IP address or a host name, without spaces or control "
            "characters (such as 127.0.0.1, ::1 or 0.0.0.0)"
        )
    return bind


def machine_addresses() -> list[str]:
    """The names and addresses a client elsewhere may use for this machine: its host name,
    its fully qualified name, and every address the name resolves to."""
    name = socket.gethostname()
    found = [name, socket.getfqdn()]
    with contextlib.suppress(OSError):
        found += [str(info[4][0]) for info in socket.getaddrinfo(name, None)]
    return list(dict.fromkeys(found))


def security_settings(
    bind: str, port: int, extra_hosts: tuple[str, ...], extra_origins: tuple[str, ...]
) -> TransportSecuritySettings:
    """DNS-rebinding protection: the Host a request names must be one this serve answers
    as (loopback's, the bind address, for a wildcard bind the machine's own names and
    addresses, and ``allowed_hosts``), and a browser Origin must be loopback's or allowed."""
    names = [*LOOPBACK_HOSTS, bind]
    if is_wildcard(bind):
        names += machine_addresses()
    hosts = [f"{in_url(name)}:{port}" for name in names]
    origins = [f"http://{h}:*" for h in LOOPBACK_HOSTS]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=list(dict.fromkeys([*hosts, *extra_hosts])),
        allowed_origins=list(dict.fromkeys([*origins, *extra_origins])),
    )


def listen(bind: str, port: int) -> socket.socket:
    """The listening socket, bound before any session is taken, so a busy port refuses the
    start without touching a lease."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    try:
        sock = socket.create_server((bind.strip("[]"), port), family=family, backlog=128)
    except OSError as exc:
        why = exc.strerror or "the address cannot be used"  # never the OS's repr of it
        raise ConfigError(
            f"cannot listen on {in_url(bind)}:{port} ({why}); pick another --port or --bind"
        ) from None
    sock.setblocking(False)
    return sock


class QuietUvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers, which re-raise a signal once it has stopped
    (so the process would die of it): the serve's stop decides when it exits."""

    @contextlib.contextmanager
    def capture_signals(self):  # type: ignore[no-untyped-def]
        yield


def session_manager(
    server: object, settings: HttpSettings, security: TransportSecuritySettings
) -> StreamableHTTPSessionManager:
    return StreamableHTTPSessionManager(
        app=server,  # type: ignore[arg-type]
        security_settings=security,
        session_idle_timeout=settings.session_idle_timeout_s,
        max_request_body_size=settings.max_request_bytes,
        max_sessions=None,  # the app's ceiling counts every session's, and may make room
    )


def warn_unserved(credentials: tuple[Credential, ...], sessions: list[str]) -> None:
    """A credential naming a session this serve does not hold reaches nothing there: most
    likely a typo, so say so at start rather than let its requests meet 404s."""
    for credential in credentials:
        missing = sorted((credential.sessions or frozenset()) - set(sessions))
        if missing:
            log.warning(
                "credential %r names session(s) this serve does not hold: %s (it serves %s)",
                credential.name,
                ", ".join(missing),
                ", ".join(sessions),
            )


async def serve_http(
    config: Config, options: list[ServeOptions], ledger: LedgerWriter | None = None
) -> list[Serve]:
    """Hold every session, serve HTTP until a stop signal, then stop every session cleanly
    (``ledger``: every served session's, closed once they all have stopped). Returns the
    serves, whose ``unfinished`` tells the caller how the process may exit."""
    settings = HttpSettings.from_config(config)
    warn_unserved(settings.credentials, [o.session for o in options])
    budget_s = shutdown_budget(config)
    sock = listen(settings.bind, settings.port)
    models = LoadedModels()  # one model load for every session
    layers, unserved = layer_serves(config, options, models, ledger)
    serves = [
        layers.get(o.session) or Serve(config, o, models=models, layer_serves=layers, ledger=ledger)
        for o in options
    ]
    everything = [*serves, *unserved]
    try:
        # the layers first, each once for every session: a session held attaches its
        # layers, and uses these serves of them rather than electing for them again
        for serve in serves:
            if serve.options.as_layer:
                await serve.hold()  # served at its own address: refused if held elsewhere
        for serve in unserved:
            await serve.start()  # held here if free, else forwarded to its holder
        for serve in serves:
            if not serve.options.as_layer:
                await serve.hold()
        await _serve_until_stopped(serves, everything, settings, sock, budget_s)
    finally:
        sock.close()
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for serve in everything:
                    tg.start_soon(serve.close)
            if ledger is not None:  # after every session's stop: its last lines are queued
                await anyio.to_thread.run_sync(ledger.close, LEDGER_CLOSE_BUDGET_S)
    return everything


def layer_serves(
    config: Config,
    options: list[ServeOptions],
    models: LoadedModels,
    ledger: LedgerWriter | None = None,
) -> tuple[dict[str, Serve], list[Serve]]:
    """One serve per layer for every session of this process, and those of them that are
    not served at an address of their own: a layer that is also served (``as_layer``) is
    that session's serve (on ``ledger``, as every served session); any other is a serve of
    its own, which holds the layer when it is free and forwards to its holder otherwise,
    as a stdio serve's layer does."""
    layers = {
        o.session: Serve(config, o, models=models, ledger=ledger) for o in options if o.as_layer
    }
    unserved: list[Serve] = []
    for project in options:
        for name in project.layers:
            if name not in layers:
                # its writes' completion lines go to the sessions they were submitted through
                serve = Serve(
                    config, project.layer_options(name), models=models, completions=ledger
                )
                layers[name] = serve
                unserved.append(serve)
    return layers, unserved


async def _serve_until_stopped(
    serves: list[Serve],
    everything: list[Serve],
    settings: HttpSettings,
    sock: socket.socket,
    budget_s: float,
) -> None:
    """Answer HTTP for ``serves`` until a stop signal; then stop ``everything`` (the
    serves and the layers not served at an address of their own) inside the budget."""
    port = sock.getsockname()[1]  # the one --port 0 was given
    security = settings.security(port)  # once: a wildcard bind resolves the host's names
    image_tool = image_tool_listed(serves[0].config) if serves else False
    endpoints = [
        Endpoint(
            s.options.session,
            session_manager(
                build_server(
                    s.options.session, s, lambda: tool_names(image_tool), s.options.layers
                ),
                settings,
                security,
            ),
            lambda s=s: s.serving,  # type: ignore[misc]
            layers=s.options.layers,
        )
        for s in serves
    ]
    app = HttpApp(
        endpoints,
        Verifier(settings.credentials),
        RateLimits(settings.per_credential_rps, settings.per_session_rps),
        settings.max_live_sessions,
        evict_idle_after_s=settings.evict_idle_after_s,
    )
    server = QuietUvicorn(
        uvicorn.Config(
            app,
            lifespan="off",
            log_config=None,
            access_log=False,  # app.request_log writes one line per request instead
            timeout_graceful_shutdown=int(max(1, ANSWER_GRACE_S)),
        )
    )
    if "LAMBO_LOG" not in os.environ:  # an HTTP serve's operator reads its request log
        http_log.setLevel(logging.INFO)
    stop = anyio.Event()
    async with contextlib.AsyncExitStack() as stack:
        for endpoint in endpoints:
            await stack.enter_async_context(endpoint.manager.run())
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal, stop)
            tg.start_soon(partial(_stop_when_asked, stop, everything, app, server, budget_s))
            ledgered = [s for s in serves if s.ledger is not None]
            if ledgered:  # every served session's heartbeats, on its own line
                interval_s = lease_ttl(ledgered[0].config) / 3
                tg.start_soon(heartbeats, ledgered, interval_s, stop)
            announce(serves, settings.bind, port)
            await server.serve(sockets=[sock])
            tg.cancel_scope.cancel()


def announce(serves: list[Serve], bind: str, port: int) -> None:
    """Where each session answers (with --port 0, the port picked)."""
    # a wildcard is no address to connect to: loopback's is (and other hosts use this
    # machine's name or address, which the Host check accepts)
    host = ("[::1]" if ":" in bind else "127.0.0.1") if is_wildcard(bind) else in_url(bind)
    base = f"http://{host}:{port}"
    http_log.info(
        "listening on %s; %s%s serves session %s", base, base, MCP_PATH, serves[0].options.session
    )
    for serve in serves:
        http_log.info(
            "session %s at %s%s%s",
            serve.options.session,
            base,
            SESSION_PREFIX,
            serve.options.session,
        )


async def _stop_when_asked(
    stop: anyio.Event, serves: list[Serve], app: HttpApp, server: uvicorn.Server, budget_s: float
) -> None:
    """On a stop signal: stop every session inside the one budget while HTTP still answers
    (a wait on a receipt hears it settle), let the calls in flight be answered, then end
    HTTP."""
    await stop.wait()
    app.stopping = True
    ends = time.monotonic() + budget_s
    answer_grace = min(ANSWER_GRACE_S, budget_s / 4)
    async with anyio.create_task_group() as tg:
        for serve in serves:
            tg.start_soon(serve.stop, max(0.0, ends - time.monotonic() - answer_grace))
    with anyio.move_on_after(max(0.0, min(answer_grace, ends - time.monotonic()))):
        await app.drained()
    server.should_exit = True


def run_http(config: Config, options: list[ServeOptions], ledger_path: Path | None = None) -> None:
    """``lambo serve --transport http``, to the end of the process (an unfinished stop
    exits without the interpreter's teardown, as ``run_stdio`` explains). With
    ``ledger_path``, one ledger for every session, each counting its own lines."""
    ledger = None
    if ledger_path is not None:
        ledger = LedgerWriter(ledger_path, per_session=True).start()
    served = anyio.run(serve_http, config, options, ledger)
    if any(s.unfinished for s in served):
        exit_without_teardown(0)
