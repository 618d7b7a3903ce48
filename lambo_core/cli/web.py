"""`lambo serve-web`: a read-only web window on one session (``lambo_core/web``)."""

from __future__ import annotations

import click

from .common import Context, pass_ctx, reports_errors
from .flags import store_option


@click.command("serve-web")
@click.option("--session", required=True, help="the session to show")
@store_option("the SQLite file to read")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=7710,
    show_default=True,
    help="the port (0 picks a free one, logged at start)",
)
@click.option("--bind", default="127.0.0.1", show_default=True, help="the address to bind")
@click.option(
    "--auth-token",
    default=None,
    help="a bearer token /api/* requests must carry; needed off loopback (LAMBO_AUTH_TOKEN "
    "keeps it out of the process list)",
)
@pass_ctx
@reports_errors
def serve_web(
    ctx: Context,
    session: str,
    store: str | None,
    port: int,
    bind: str,
    auth_token: str | None,
) -> None:
    """Show a session in a browser, read-only: it never takes the session's lease.

    \b
    The page shows the counts and health, a live feed of writes and promotions, a
    recall box, a concept's gates toward Canonical and its neighbourhood as a graph.
    Example:
      lambo serve-web --session demo
    """
    from ..config import store_flags
    from ..text import check_string
    from ..web.serve import WebSettings, run_web

    config = ctx.config({**store_flags(store), "serve.auth_token": auth_token})
    name = check_string("--session", session)
    run_web(config, name, WebSettings.resolve(config, bind, port))
