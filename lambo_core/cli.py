"""The `lambo` command line: click commands only. Parse, call the library, print.

Exit codes: 0 success; 1 a run-time failure; 2 a bad flag, value or setting
(nothing ran). A ``LamboError`` is rendered here (and in the MCP layer) and
nowhere else; its internal detail goes to the log on stderr.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

import click

from . import __version__
from .config import Config, load_config, render_default_file, render_show, store_flags
from .embed.commands import model_group
from .errors import ConfigError, ErrorKind, LamboError

log = logging.getLogger("lambo")

F = TypeVar("F", bound=Callable[..., Any])

# Refusals of a value the user gave: nothing ran, so exit 2 like a bad flag.
_USAGE_KINDS = (ErrorKind.PARAMETER, ErrorKind.CONFIGURATION)


def _setup_logging() -> None:
    level_name = os.environ.get("LAMBO_LOG", "WARNING").upper()
    level = getattr(logging, level_name, logging.WARNING)
    logging.basicConfig(
        level=level, stream=sys.stderr, format="lambo %(levelname)s %(name)s: %(message)s"
    )


def reports_errors(fn: F) -> F:
    """Turn a LamboError into one stderr line and an exit code; log its detail."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except LamboError as exc:
            if exc.detail:
                log.warning("%s: %s", exc.kind.value, exc.detail)
            click.echo(f"lambo: {exc.render()}", err=True)
            sys.exit(2 if exc.kind in _USAGE_KINDS else 1)

    return wrapper  # type: ignore[return-value]


class Context:
    """What the group's options leave for the subcommands."""

    def __init__(self, config_path: str | None) -> None:
        self.config_path = config_path

    def config(self, flags: dict[str, object] | None = None) -> Config:
        return load_config(config_path=self.config_path, flags=flags)


pass_ctx = click.make_pass_decorator(Context)


def store_option(fn: F) -> F:
    return click.option(
        "--store",
        "store",
        metavar="PATH|memory",
        help="the SQLite file to use, or `memory` for a store in RAM",
    )(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lambo")
@click.option(
    "--config",
    "config_path",
    metavar="PATH",
    help="lambo.toml to read (else LAMBO_CONFIG, else ./lambo.toml, else the user config dir)",
)
@click.pass_context
def cli(ctx: click.Context, config_path: str | None) -> None:
    """lambo: agentic graph memory for AI agents, served over MCP."""
    ctx.obj = Context(config_path)


@cli.group("config")
def config_group() -> None:
    """Show or write lambo's settings."""


@config_group.command("show")
@store_option
@pass_ctx
@reports_errors
def config_show(ctx: Context, store: str | None) -> None:
    """Print every effective setting and where it came from."""
    click.echo(render_show(ctx.config(store_flags(store))), nl=False)


@config_group.command("init")
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="overwrite an existing file")
@pass_ctx
@reports_errors
def config_init(ctx: Context, path: Path | None, force: bool) -> None:
    """Write a commented lambo.toml with every default (default: the user config dir)."""
    target = path or ctx.config().paths.user_config_file
    if target.exists() and not force:
        raise ConfigError(f"{target} exists; pass --force to overwrite it")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_default_file(), encoding="utf-8")
    click.echo(f"wrote {target}")


@cli.command("provision")
@store_option
@pass_ctx
@reports_errors
def provision(ctx: Context, store: str | None) -> None:
    """Create or migrate the store's schema. Safe to run twice."""
    from .store import provision_store

    config = ctx.config(store_flags(store))
    click.echo(provision_store(config))


@cli.command("serve")
@click.option("--session", required=True, help="the session to hold and serve")
@click.option(
    "--agent",
    default="lambo-serve",
    show_default=True,
    help="the id this process holds the session lease under (not applied to callers' writes)",
)
@store_option
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
    import anyio

    from .serve import ServeOptions, serve_stdio
    from .text import check_agent_id, check_string

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
        raise ConfigError(
            "the HTTP transport is not available in this version yet; serve over stdio "
            "(the default)"
        )
    anyio.run(serve_stdio, config, options)


cli.add_command(model_group)


def main(argv: list[str] | None = None) -> int:
    _setup_logging()
    try:
        cli.main(args=argv, prog_name="lambo", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0
