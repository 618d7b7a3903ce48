"""``lambo serve-web``: the read-only web window on one session, until a stop signal.

It binds loopback unless a credential is configured, as the HTTP serve does (spec:
"Transports", "HTTP for a machine with several independent clients"): off loopback
without one it refuses to start, naming the flags. The port is bound before the store
is read, so a busy port refuses the start at once. It never takes the session's lease.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from dataclasses import dataclass

import anyio
import uvicorn

from ..config import Config
from ..credentials import Credential, Verifier
from ..errors import ConfigError
from ..hosts import in_url, is_loopback, is_wildcard
from ..mcp.http.serve import QuietUvicorn, check_bind, configured, listen, security_settings
from ..serve_signals import stop_on_signal
from .answers import Answers
from .api import build_app
from .view import ReadOnlyView

log = logging.getLogger(__name__)

DEFAULT_PORT = 7710


@dataclass(frozen=True)
class WebSettings:
    bind: str
    port: int
    credentials: tuple[Credential, ...]
    allowed_hosts: tuple[str, ...]

    @classmethod
    def resolve(cls, config: Config, bind: str, port: int) -> WebSettings:
        """Refuses, before anything listens, a bind off loopback without a credential."""
        bind = check_bind(bind)
        credentials = configured(config)
        if not is_loopback(bind) and not credentials:
            raise ConfigError(
                f"--bind {bind} is not a loopback address, and the web window off loopback "
                "shows the session's memory to the network: give --auth-token (or "
                "LAMBO_AUTH_TOKEN, or a [[serve.credential]] in lambo.toml), or bind 127.0.0.1"
            )
        return cls(bind, port, credentials, tuple(config.get("serve.allowed_hosts")))


async def _serve_until_stopped(server: uvicorn.Server, sock: socket.socket) -> None:
    stop = anyio.Event()

    async def stop_when_asked() -> None:
        await stop.wait()
        server.should_exit = True

    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, stop)
        tg.start_soon(stop_when_asked)
        await server.serve(sockets=[sock])
        tg.cancel_scope.cancel()


def run_web(config: Config, session: str, settings: WebSettings) -> None:
    """Serve the window until SIGINT or SIGTERM, then exit 0."""
    sock = listen(settings.bind, settings.port)
    try:
        view = ReadOnlyView.open(config, session)
    except BaseException:
        sock.close()
        raise
    port = sock.getsockname()[1]  # the one --port 0 was given
    hosts = security_settings(settings.bind, port, settings.allowed_hosts, ()).allowed_hosts
    app = build_app(Answers(view), Verifier(settings.credentials), tuple(hosts or ()))
    server = QuietUvicorn(uvicorn.Config(app, lifespan="off", log_config=None, access_log=False))
    host = (
        ("[::1]" if ":" in settings.bind else "127.0.0.1")
        if is_wildcard(settings.bind)
        else (in_url(settings.bind))
    )
    # the line a script (or a test) waits for: where the window answers
    if "LAMBO_LOG" not in os.environ:
        log.setLevel(logging.INFO)
    log.info("serve-web: session %s at http://%s:%d/ (read-only)", session, host, port)
    try:
        anyio.run(_serve_until_stopped, server, sock)
    finally:
        with contextlib.suppress(OSError):
            sock.close()
        view.close()
