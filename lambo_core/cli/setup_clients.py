"""`lambo setup CLIENT`: the MCP config for lambo for a client, printed or merged;
`lambo setup --check`: every config layer on this machine that names lambo."""

from __future__ import annotations

import sys

import click

from .common import Context, reports_errors

CLIENT_NAMES = ["claude", "cursor", "codex", "pi", "generic"]


@click.command("setup")
@click.argument("client", type=click.Choice(CLIENT_NAMES), required=False, metavar="[CLIENT]")
@click.option(
    "--pyz",
    metavar="PATH",
    help="run the server from this .pyz: `/abs/python /abs/PATH serve ...` (a Python the "
    "archive was built for)",
)
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
@click.option(
    "--check",
    is_flag=True,
    help="list every config layer on this machine that names lambo (takes no CLIENT); "
    "exit 1 when one is flagged",
)
@click.pass_context
@reports_errors
def setup_cmd(
    ctx: click.Context,
    client: str | None,
    pyz: str | None,
    session: str | None,
    url: str | None,
    token_env: str | None,
    write: bool,
    check: bool,
) -> None:
    """Print (or with --write, merge) the MCP config that runs lambo for CLIENT (claude,
    cursor, codex, pi or generic), or with --url points CLIENT at an HTTP serve.

    The entry runs this lambo by absolute path (the console script, `python -m lambo_core`,
    or the .pyz with the Python running it), so a client with another PATH finds it, and
    sets the LAMBO_* settings in effect (LAMBO_HOME, LAMBO_CONFIG, the store and model
    ones; relative paths made absolute). Never a token or a DSN. What was chosen, and what
    was left out, is said on stderr.

    --check lists each layer that names lambo (the project .mcp.json, ~/.claude.json,
    Cursor's, Codex's, Pi's and OMP's files) with its form (command, url or both) and
    target. It flags a layer holding command beside url, layers that name lambo
    differently, a command (or .pyz) that does not exist or cannot run, and a file that
    does not parse. Exit status: 0 when nothing is flagged, 1 when something is.

    \b
    Examples:
      lambo setup claude
      lambo setup cursor --write
      lambo setup codex --pyz dist/lambo.pyz --session myproject
      lambo setup pi --url http://127.0.0.1:7700/mcp/s/myproject --write
      lambo setup --check
    """
    from ..errors import ParameterError

    if check:
        given = [
            name
            for name, value in (
                ("CLIENT", client),
                ("--pyz", pyz),
                ("--session", session),
                ("--url", url),
                ("--auth-token-env", token_env),
                ("--write", write or None),
            )
            if value is not None
        ]
        if given:
            raise ParameterError(
                f"--check reads every layer and writes none; it takes no {', '.join(given)}"
            )
        from ..setup_check import check_report

        report, flagged = check_report()
        click.echo(report, nl=False)
        sys.exit(1 if flagged else 0)
    if client is None:
        raise ParameterError(f"lambo setup needs a CLIENT ({', '.join(CLIENT_NAMES)}), or --check")
    from ..setup_clients import setup_client

    root = ctx.find_root().obj
    notes: list[str] = []
    printed = setup_client(
        client,
        session=session,
        pyz=pyz,
        url=url,
        token_env=token_env,
        write=write,
        config_path=root.config_path if isinstance(root, Context) else None,
        note=notes.append,
    )
    for line in notes:  # only once the entry is made: a refusal says nothing else
        click.echo(f"lambo: {line}", err=True)
    click.echo(printed, nl=False)
    if url is not None:
        from ..setup_url import ServerUrl, url_warnings

        for warning in url_warnings(ServerUrl(url, token_env)):
            click.echo(f"lambo: warning: {warning}", err=True)
