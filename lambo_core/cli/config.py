"""`lambo config show` and `lambo config init`: the settings, and a file holding them."""

from __future__ import annotations

from pathlib import Path

import click

from .common import Context, pass_ctx, reports_errors, store_to_use


@click.group("config")
def config_group() -> None:
    """Show or write lambo's settings."""


@config_group.command("show")
@store_to_use
@pass_ctx
@reports_errors
def config_show(ctx: Context, store: str | None) -> None:
    """Print every effective setting and where it came from."""
    from ..config import render_show, store_flags

    click.echo(render_show(ctx.config(store_flags(store))), nl=False)


@config_group.command("init")
@click.argument("path", required=False, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="overwrite an existing file")
@pass_ctx
@reports_errors
def config_init(ctx: Context, path: Path | None, force: bool) -> None:
    """Write a commented lambo.toml with every default (default: the user config dir)."""
    from ..config import render_default_file
    from ..errors import ConfigError

    target = path or ctx.config().paths.user_config_file
    if target.exists() and not force:
        raise ConfigError(f"{target} exists; pass --force to overwrite it")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_default_file(), encoding="utf-8")
    click.echo(f"wrote {target}")
