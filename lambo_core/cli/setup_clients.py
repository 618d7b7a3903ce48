"""`lambo setup CLIENT`: the MCP config that runs lambo for a client, printed or merged."""

from __future__ import annotations

import click

from .common import reports_errors


@click.command("setup")
@click.argument("client", type=click.Choice(["claude", "cursor", "codex", "generic"]))
@click.option("--pyz", metavar="PATH", help="run the server as `python3 PATH serve ...`")
@click.option("--session", help="the session the client serves (default: this directory's name)")
@click.option(
    "--write",
    is_flag=True,
    help="merge the entry into the client's file (a .bak keeps the previous one)",
)
@reports_errors
def setup_cmd(client: str, pyz: str | None, session: str | None, write: bool) -> None:
    """Print (or with --write, merge) the MCP config that runs lambo for CLIENT.

    \b
    Examples:
      lambo setup claude
      lambo setup cursor --write
      lambo setup codex --pyz dist/lambo.pyz --session myproject
    """
    from ..setup_clients import setup_client

    click.echo(setup_client(client, session=session, pyz=pyz, write=write), nl=False)
