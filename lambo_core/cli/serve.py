"""`lambo provision` and `lambo serve`: make a store ready, and serve a session over MCP
(spec: "Transports").
"""

from __future__ import annotations

import click

from .common import Context, pass_ctx, reports_errors, store_to_use


@click.command("provision")
@store_to_use
@pass_ctx
@reports_errors
def provision(ctx: Context, store: str | None) -> None:
    """Create or migrate the store's schema. Safe to run twice."""
    from ..config import store_flags
    from ..store import provision_store

    config = ctx.config(store_flags(store))
    click.echo(provision_store(config))


@click.command("serve")
@click.option("--session", required=True, help="the session to hold and serve")
@click.option(
    "--agent",
    default="lambo-serve",
    show_default=True,
    help="the id this process holds the session lease under (not applied to callers' writes)",
)
@store_to_use
@click.option(
    "--transport",
    type=click.Choice(["stdio", "http"]),
    default=None,
    help="stdio (the default) or http",
)
@click.option("--port", type=click.IntRange(1, 65535), default=None, help="HTTP port (7700)")
@click.option("--bind", default=None, help="HTTP bind address (127.0.0.1)")
@click.option(
    "--allow-embedding-mismatch",
    is_flag=True,
    help="relabel a session written under another embedding contract to this server's",
)
@pass_ctx
@reports_errors
def serve(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    transport: str | None,
    port: int | None,
    bind: str | None,
    allow_embedding_mismatch: bool,
) -> None:
    """Serve a session's memory over MCP (stdio by default).

    \b
    Example, as an MCP client's command:
      lambo serve --session demo
    """
    from ..serve import ServeOptions, exit_cleanly_until_serving, run_stdio

    exit_cleanly_until_serving()
    from ..config import store_flags
    from ..text import check_agent_id, check_string

    flags = {
        **store_flags(store),
        "serve.transport": transport,
        "serve.port": port,
        "serve.bind": bind,
    }
    config = ctx.config(flags)
    options = ServeOptions(
        session=check_string("--session", session),
        agent=check_agent_id(agent),
        allow_embedding_mismatch=allow_embedding_mismatch,
    )
    if config.get("serve.transport") == "http":
        from ..serve import refuse_http

        refuse_http(config, options)
    run_stdio(config, options)
