"""`lambo demo`: the scripted two-agent scenario of ``lambo_core/demo.py``, printed."""

from __future__ import annotations

import sys

import click

from .common import Context, pass_ctx, reports_errors
from .flags import store_option


@click.command("demo")
@store_option(
    "keep the demo's session in this SQLite file, or `memory` (default: a throwaway file)"
)
@click.option("--session", help="the fresh session to run in (default: demo-<timestamp>)")
@pass_ctx
@reports_errors
def demo_cmd(ctx: Context, store: str | None, session: str | None) -> None:
    """Run a scripted scenario that shows what lambo does, step by step.

    \b
    Two agents build one REST API: facts derived and cited, an action recorded,
    `user schema` promoted to Canonical by the daemon, then a contradiction that
    the second agent's recall warns about. Runs with the installed embedding
    model, or keyword-only (and says so) when there is none.
    """
    from ..demo import run_demo

    sys.exit(run_demo(ctx.config, store, session, click.echo))
