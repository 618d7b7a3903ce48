"""`lambo setup CLIENT`: the MCP config for lambo for a client, printed or merged."""

from __future__ import annotations

import click

from .common import reports_errors

CLIENT_NAMES = ["claude", "cursor", "codex", "pi", "generic"]


@click.command("setup")
@click.argument("client", type=click.Choice(CLIENT_NAMES), required=False, metavar="[CLIENT]")
@click.option("--pyz", metavar="PATH", help="run the server as `python3 PATH serve ...`")
@click.option("--session", help="the session the client serves (default: this directory's name)")
@click.option(
    "--url",
    metavar="URL",
    help="point the client at a running HTTP serve instead, e.g. "
    "http://127.0.0.1:7700/mcp/s/SESSION (not with --pyz or --session)",
)
@click.option(
    "--auth-token-env",
    "token_env",
    metavar="VAR",
    help="with --url: the client sends `Authorization: Bearer` with the token it reads from "
    "the environment variable VAR (only the name is written)",
)
@click.option(
    "--write",
    is_flag=True,
    help="merge the entry into the client's file (a .bak keeps the previous one)",
)
@reports_errors
def setup_cmd(
    client: str | None,
    pyz: str | None,
    session: str | None,
    url: str | None,
    token_env: str | None,
    write: bool,
) -> None:
    """Print (or with --write, merge) the MCP config that runs lambo for CLIENT (claude,
    cursor, codex, pi or generic), or with --url points CLIENT at an HTTP serve.

    \b
    Examples:
      lambo setup claude
      lambo setup cursor --write
      lambo setup codex --pyz dist/lambo.pyz --session myproject
      lambo setup pi --url http://127.0.0.1:7700/mcp/s/myproject --write
    """
    from ..errors import ParameterError

    if client is None:
        raise ParameterError(f"lambo setup needs a CLIENT ({', '.join(CLIENT_NAMES)})")
    from ..setup_clients import setup_client

    printed = setup_client(
        client, session=session, pyz=pyz, url=url, token_env=token_env, write=write
    )
    click.echo(printed, nl=False)
    if url is not None:
        from ..setup_url import ServerUrl, url_warnings

        for warning in url_warnings(ServerUrl(url, token_env)):
            click.echo(f"lambo: warning: {warning}", err=True)
