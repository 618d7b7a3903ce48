"""What every `lambo` command shares: the root context, the one error decorator, and
the ``--store`` option of the commands that use a store.

Exit codes: 0 success; 1 a run-time failure; 2 a bad flag, value or setting (nothing
ran). A ``LamboError`` is rendered here (and in the MCP layer) and nowhere else; its
internal detail goes to the log on stderr.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from functools import wraps
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import click

from ..errors import ErrorKind, LamboError
from .flags import store_option

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("lambo")

P = ParamSpec("P")
R = TypeVar("R")

# Refusals of a value the user gave: nothing ran, so exit 2 like a bad flag.
USAGE_KINDS = (ErrorKind.PARAMETER, ErrorKind.CONFIGURATION)


def reports_errors(fn: Callable[P, R]) -> Callable[P, R]:
    """Turn a LamboError into one stderr line and an exit code; log its detail."""

    @wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except LamboError as exc:
            if exc.detail:
                log.warning("%s: %s", exc.kind.value, exc.detail)
            click.echo(f"lambo: {exc.render()}", err=True)
            sys.exit(2 if exc.kind in USAGE_KINDS else 1)

    return wrapper


class Context:
    """What the root group's options leave for the subcommands."""

    def __init__(self, config_path: str | None) -> None:
        self.config_path = config_path

    def config(self, flags: dict[str, object] | None = None) -> Config:
        from ..config import load_config

        return load_config(config_path=self.config_path, flags=flags)


pass_ctx = click.make_pass_decorator(Context)


def root_config(ctx: click.Context, flags: dict[str, object] | None = None) -> Config:
    """The settings under the root group's ``--config``; a group run on its own (as tests
    do) reads the usual lookup."""
    root = ctx.find_root().obj
    if isinstance(root, Context):
        return root.config(flags)
    return Context(None).config(flags)


store_to_use = store_option("the SQLite file to use, or `memory` for a store in RAM")
