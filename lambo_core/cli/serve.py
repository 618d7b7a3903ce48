"""`lambo provision` and `lambo serve`: make a store ready, and serve a session over MCP
(spec: "Transports").
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

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
@click.option(
    "--session",
    "sessions",
    multiple=True,
    help="the session to hold and serve; over HTTP, repeat it to serve several "
    "(also [serve] sessions)",
)
@click.option(
    "--layer",
    "layers",
    multiple=True,
    help="a shared session of the same store (such as general) every served session also "
    "reads and can write to with scope; repeat it for several (replaces [serve] layers)",
)
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
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=None,
    help="HTTP port (7700; 0 picks a free one, logged at start)",
)
@click.option("--bind", default=None, help="HTTP bind address (127.0.0.1)")
@click.option(
    "--auth-token",
    default=None,
    help="a bearer token every HTTP request must carry (LAMBO_AUTH_TOKEN keeps it out of "
    "the process list)",
)
@click.option(
    "--allow-embedding-mismatch",
    is_flag=True,
    help="relabel a session written under another embedding contract to this server's",
)
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="append one JSON line per tool call, per settled write and per heartbeat to this "
    "file (over HTTP one file for every session, each line naming its session); lines are "
    "dropped, never a call delayed, and lambo_stats counts them",
)
@pass_ctx
@reports_errors
def serve(
    ctx: Context,
    sessions: tuple[str, ...],
    layers: tuple[str, ...],
    agent: str,
    store: str | None,
    transport: str | None,
    port: int | None,
    bind: str | None,
    auth_token: str | None,
    allow_embedding_mismatch: bool,
    ledger_path: Path | None,
) -> None:
    """Serve a session's memory over MCP (stdio by default).

    \b
    Examples, as an MCP client's command, and one HTTP serve for every client:
      lambo serve --session demo
      lambo serve --session demo --session notes --transport http
      lambo serve --session demo --layer general
    Over HTTP, /mcp serves the first session and /mcp/s/<session> each one.
    """
    from ..serve_signals import exit_cleanly_until_serving

    exit_cleanly_until_serving()  # before the serve's heavy imports
    from ..config import store_flags
    from ..serve import ServeOptions, run_stdio
    from ..text import check_agent_id

    flags = {
        **store_flags(store),
        "serve.transport": transport,
        "serve.port": port,
        "serve.bind": bind,
        "serve.auth_token": auth_token,
    }
    config = ctx.config(flags)
    http = config.get("serve.transport") == "http"
    names = served_sessions(sessions, config.get("serve.sessions"), http=http)
    shared = served_layers(layers, config.get("serve.layers"), names)
    options = [
        ServeOptions(
            session=name,
            agent=check_agent_id(agent),
            allow_embedding_mismatch=allow_embedding_mismatch,
            layers=layers_of(name, shared),
            as_layer=name in shared,  # served at its own address, and the others' layer
        )
        for name in names
    ]
    if ledger_path is not None and not ledger_path.parent.is_dir():
        raise click.BadParameter(
            f"the folder {ledger_path.parent} does not exist", param_hint="'--ledger'"
        )
    if http:
        from ..mcp.http.serve import run_http

        run_http(config, options, ledger_path)
        return
    run_stdio(config, options[0], ledger_path)


def served_sessions(
    flags: tuple[str, ...], configured: tuple[str, ...], *, http: bool
) -> list[str]:
    """The sessions to serve: each --session, else [serve] sessions; stdio serves one, and
    over HTTP a name goes in the URL, so it cannot hold '/'."""
    from ..errors import ParameterError
    from ..text import check_string

    source = "--session" if flags else "serve.sessions"
    names = [check_string(source, name) for name in (flags or configured)]
    if not names:
        raise click.UsageError("give --session (or [serve] sessions in lambo.toml)")
    if len(set(names)) != len(names):
        raise ParameterError(f"{source} names a session twice")
    if not http:
        if len(names) > 1:
            raise ParameterError(
                f"{source} names {len(names)} sessions; a stdio serve serves one (serve "
                "several with --transport http)"
            )
        return names
    for name in names:
        if "/" in name:
            raise ParameterError(
                f"{source}: an HTTP serve puts each session in its URL (/mcp/s/<session>), "
                "so a session name cannot hold '/'"
            )
    return names


def served_layers(
    flags: Sequence[str], configured: Sequence[str], sessions: Sequence[str]
) -> tuple[str, ...]:
    """The layers: each --layer, else [serve] layers, for the served ``sessions``.

    Every served session that is not itself a layer reads them all (``layers_of``); a
    layer that is also served is served on its own, unlayered (its own address, as a
    shared config's general is when served alone). Refused, naming the flag or the key:
    an invalid name, a name given twice, and --layer naming only sessions this serve
    holds, which would make a session its own layer and layer nothing.
    """
    from ..errors import ConfigError, ParameterError
    from ..text import check_string, show_safely

    source = "--layer" if flags else "serve.layers"
    names: list[str] = []
    for name in flags or configured:
        try:
            names.append(check_string(source, name))
        except ParameterError as exc:
            raise ConfigError(exc.message) from None
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"{source} names the session '{show_safely(name, 64)}' twice")
    if flags and all(session in names for session in sessions):
        shown = ", ".join(f"'{show_safely(s, 64)}'" for s in sessions)
        which = (
            f"{shown}, the session to serve"
            if len(sessions) == 1
            else f"every session to serve ({shown})"
        )
        raise ConfigError(
            f"--layer names {which}: a session cannot be its own layer; name the project "
            "session with --session and its shared sessions with --layer"
        )
    return tuple(names)


def layers_of(session: str, layers: Sequence[str]) -> tuple[str, ...]:
    """The layers ``session`` reads: all of them, or none when it is one itself."""
    return () if session in layers else tuple(layers)
