"""The `lambo` root group and the process's entry point: logging, the commands, the exit.

Each command lives in the module of its group and imports the library inside its body,
so `lambo --version` and a command's ``--help`` load no store, model or write path.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from ..log_limits import install_stderr_queue
from ..version import __version__
from .backup import backup_cmd
from .canon import canon_group, session_group
from .common import Context
from .config import config_group
from .demo import demo_cmd
from .forget import forget_cmd
from .model import model_group
from .serve import provision, serve
from .setup_clients import setup_cmd
from .store import store_group
from .tools import TOOL_COMMANDS
from .transfer import export_cmd, import_cmd
from .web import serve_web


def _setup_logging() -> None:
    level_name = os.environ.get("LAMBO_LOG", "WARNING").upper()
    level = getattr(logging, level_name, logging.WARNING)
    # Through a bounded queue: a client that never reads stderr cannot stall the serve.
    install_stderr_queue(sys.stderr, level, "lambo %(levelname)s %(name)s: %(message)s")


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


for _command in (
    config_group,
    provision,
    serve,
    serve_web,
    *TOOL_COMMANDS,
    forget_cmd,
    backup_cmd,
    demo_cmd,
    setup_cmd,
    model_group,
    canon_group,
    session_group,
    store_group,
    import_cmd,
    export_cmd,
):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> int:
    _setup_logging()
    try:
        cli.main(args=argv, prog_name="lambo", standalone_mode=True)
    except SystemExit as exc:
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    else:
        code = 0
    if "lambo_core.client" in sys.modules:  # a command that served the session itself
        from ..client import stop_was_unfinished

        if stop_was_unfinished():
            from ..serve_signals import exit_without_teardown

            exit_without_teardown(code)
    return code
