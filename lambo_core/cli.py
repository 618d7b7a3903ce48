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
from .canon_commands import canon_group, session_group
from .config import Config, load_config, render_default_file, render_show, store_flags
from .embed.commands import model_group
from .errors import ConfigError, ErrorKind, LamboError, ParameterError

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
        from .serve import refuse_http

        refuse_http(config, options)
    anyio.run(serve_stdio, config, options)


# --- tool commands: the same service the MCP tools call ---------------------------


def session_options(fn: F) -> F:
    fn = click.option("--json", "as_json", is_flag=True, help="print the structured content")(fn)
    fn = store_option(fn)
    fn = click.option(
        "--agent", default="cli", show_default=True, help="the agent_id the call is made as"
    )(fn)
    return click.option("--session", required=True, help="the session to use")(fn)


# A refusal of a value the caller gave renders without a class prefix (see errors.py).
_RUNTIME_PREFIXES = tuple(f"{kind.value}:" for kind in ErrorKind if kind not in _USAGE_KINDS)


def run_tool(
    ctx: Context,
    store: str | None,
    session: str,
    agent: str,
    tool: str,
    arguments: dict[str, Any],
    as_json: bool,
    wait_for_receipt: bool = False,
) -> None:
    """Call one tool on the session (through its hub if one runs), print, set the exit code."""
    import anyio

    from .client import open_client

    config = ctx.config(store_flags(store))

    async def go() -> list[dict[str, Any]]:
        async with open_client(config, session, agent) as call:
            results = [await call(tool, arguments)]
            receipt = (results[0].get("structuredContent") or {}).get("receipt")
            if wait_for_receipt and receipt and not results[0]["isError"]:
                results.append(
                    await call(
                        "lambo_stats", {"agent_id": agent, "receipt": receipt, "wait_ms": 34_000}
                    )
                )
            return results

    results = anyio.run(go)
    first = results[0]
    if first["isError"]:
        text = first["content"][0]["text"]
        click.echo(f"lambo: {text}", err=True)
        sys.exit(1 if text.startswith(_RUNTIME_PREFIXES) else 2)
    if as_json:
        import json

        payload = dict(first.get("structuredContent") or {})
        if len(results) > 1:
            payload["outcome"] = (results[1].get("structuredContent") or {}).get("receipt")
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    for block in first["content"]:
        click.echo(block["text"])
    if len(results) > 1:
        click.echo(results[1]["content"][0]["text"].splitlines()[0])


@cli.command("derive")
@session_options
@click.option("--content", required=True, help="the concept: one fact, short")
@click.option(
    "--kind",
    "concept_type",
    default="entity",
    show_default=True,
    help="entity, logic, constraint, resource or observation",
)
@click.option("--depends-on", multiple=True, help="a concept this one rests on (id or content)")
@click.option("--against", multiple=True, help="a concept this one contradicts (id or content)")
@click.option("--concept", "more", multiple=True, metavar="TEXT:KIND", help="another concept")
@click.option("--parent-of", multiple=True, metavar="CHILD:PARENT", help="a hierarchy link")
@click.option("--event-time", help="RFC3339 about-time of a historical fact")
@click.option("--no-wait", is_flag=True, help="print the ack without waiting for the outcome")
@pass_ctx
@reports_errors
def derive_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    content: str,
    concept_type: str,
    depends_on: tuple[str, ...],
    against: tuple[str, ...],
    more: tuple[str, ...],
    parent_of: tuple[str, ...],
    event_time: str | None,
    no_wait: bool,
) -> None:
    """Store concepts, as lambo_derive does.

    \b
    Example:
      lambo derive --session demo --content "lease TTL is 45s" --kind logic
    """
    concept: dict[str, Any] = {"content": content, "concept_type": concept_type}
    if depends_on:
        concept["depends_on"] = list(depends_on)
    if against:
        concept["against"] = list(against)
    concepts = [concept]
    for item in more:
        text, _, kind = item.rpartition(":")
        if not text:
            raise ParameterError("--concept must be TEXT:KIND, such as 'user schema:entity'")
        concepts.append({"content": text, "concept_type": kind})
    arguments: dict[str, Any] = {"agent_id": agent, "concepts": concepts}
    if parent_of:
        pairs = []
        for item in parent_of:
            child, sep, parent = item.partition(":")
            if not sep or not child or not parent:
                raise ParameterError("--parent-of must be CHILD:PARENT")
            pairs.append({"parent": parent, "child": child})
        arguments["parent_of"] = pairs
    if event_time:
        arguments["event_time"] = event_time
    run_tool(ctx, store, session, agent, "lambo_derive", arguments, as_json, not no_wait)


@cli.command("record-action")
@session_options
@click.option("--action", required=True, help="what you did, as a short line")
@click.option("--produces", multiple=True, help="something the action produced")
@click.option("--modifies", multiple=True, help="something the action changed")
@click.option("--depends-on", multiple=True, help="something the action relied on")
@click.option("--against", multiple=True, help="a concept the action shows to be wrong")
@click.option("--event-time", help="RFC3339 about-time of a historical action")
@click.option("--no-wait", is_flag=True, help="print the ack without waiting for the outcome")
@pass_ctx
@reports_errors
def record_action_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    action: str,
    produces: tuple[str, ...],
    modifies: tuple[str, ...],
    depends_on: tuple[str, ...],
    against: tuple[str, ...],
    event_time: str | None,
    no_wait: bool,
) -> None:
    """Record an action, as lambo_record_action does.

    \b
    Example:
      lambo record-action --session demo --action "merged PR #52" --modifies src/lease.rs
    """
    arguments: dict[str, Any] = {"agent_id": agent, "action": action}
    for name, values in (
        ("produces", produces),
        ("modifies", modifies),
        ("depends_on", depends_on),
        ("against", against),
    ):
        if values:
            arguments[name] = list(values)
    if event_time:
        arguments["event_time"] = event_time
    run_tool(ctx, store, session, agent, "lambo_record_action", arguments, as_json, not no_wait)


@cli.command("recall")
@session_options
@click.option("--query", required=True, help="what to recall")
@click.option("--top-k", type=int, help="hits to return (1..100, default 5)")
@click.option("--max-tokens", type=int, help="context budget (1..100000, default 500)")
@click.option("--traversal-depth", type=int, help="graph expansion depth (0..5, default 2)")
@pass_ctx
@reports_errors
def recall_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    query: str,
    top_k: int | None,
    max_tokens: int | None,
    traversal_depth: int | None,
) -> None:
    """Recall memory for a query, as lambo_recall does.

    \b
    Example:
      lambo recall --session demo --query "how long is the lease TTL"
    """
    arguments: dict[str, Any] = {"agent_id": agent, "query": query}
    for name, value in (
        ("top_k", top_k),
        ("max_tokens", max_tokens),
        ("traversal_depth", traversal_depth),
    ):
        if value is not None:
            arguments[name] = value
    run_tool(ctx, store, session, agent, "lambo_recall", arguments, as_json)


@cli.command("stats")
@session_options
@click.option("--receipt", help="a receipt id from a write's ack")
@click.option("--wait-ms", type=int, help="with --receipt, wait up to this long (max 34000)")
@pass_ctx
@reports_errors
def stats_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    receipt: str | None,
    wait_ms: int | None,
) -> None:
    """Session health and write-queue figures, as lambo_stats reports them.

    \b
    Example:
      lambo stats --session demo
    """
    arguments: dict[str, Any] = {"agent_id": agent}
    if receipt is not None:
        arguments["receipt"] = receipt
    if wait_ms is not None:
        arguments["wait_ms"] = wait_ms
    run_tool(ctx, store, session, agent, "lambo_stats", arguments, as_json)


@cli.command("inspect")
@session_options
@click.option("--focus", required=True, help="concept text, its 8-hex id or its node id")
@click.option("--depth", type=int, help="neighbourhood depth (0..5, default 2)")
@pass_ctx
@reports_errors
def inspect_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    focus: str,
    depth: int | None,
) -> None:
    """A concept's neighbourhood, as lambo_inspect shows it.

    \b
    Example:
      lambo inspect --session demo --focus "user schema"
    """
    arguments: dict[str, Any] = {"agent_id": agent, "focus": focus}
    if depth is not None:
        arguments["depth"] = depth
    run_tool(ctx, store, session, agent, "lambo_inspect", arguments, as_json)


@cli.command("saints")
@session_options
@pass_ctx
@reports_errors
def saints_cmd(ctx: Context, session: str, agent: str, store: str | None, as_json: bool) -> None:
    """The session's canonical memories, as lambo_saints lists them.

    \b
    Example:
      lambo saints --session demo
    """
    run_tool(ctx, store, session, agent, "lambo_saints", {"agent_id": agent}, as_json)


@cli.command("stale")
@session_options
@click.option("--offset", type=int, help="the next page's offset")
@pass_ctx
@reports_errors
def stale_cmd(
    ctx: Context, session: str, agent: str, store: str | None, as_json: bool, offset: int | None
) -> None:
    """Dependencies resting on a contradicted concept, as lambo_stale lists them.

    \b
    Example:
      lambo stale --session demo
    """
    arguments: dict[str, Any] = {"agent_id": agent}
    if offset is not None:
        arguments["offset"] = offset
    run_tool(ctx, store, session, agent, "lambo_stale", arguments, as_json)


@cli.command("reserve")
@session_options
@click.option("--node", "node_id", required=True, help="the node id to lock")
@click.option("--ttl-seconds", type=int, help="lock lifetime (1..3600, default 30)")
@pass_ctx
@reports_errors
def reserve_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    node_id: str,
    ttl_seconds: int | None,
) -> None:
    """Take a soft lock on a node, as lambo_reserve does (it lives as long as the hub).

    \b
    Example:
      lambo reserve --session demo --agent me --node 478416c2-0000-0000-0000-000000000000
    """
    arguments: dict[str, Any] = {"agent_id": agent, "node_id": node_id}
    if ttl_seconds is not None:
        arguments["ttl_seconds"] = ttl_seconds
    run_tool(ctx, store, session, agent, "lambo_reserve", arguments, as_json)


@cli.command("release")
@session_options
@click.option("--node", "node_id", required=True, help="the node id to unlock")
@pass_ctx
@reports_errors
def release_cmd(
    ctx: Context, session: str, agent: str, store: str | None, as_json: bool, node_id: str
) -> None:
    """Release a soft lock, as lambo_reserve with release does.

    \b
    Example:
      lambo release --session demo --agent me --node 478416c2-0000-0000-0000-000000000000
    """
    arguments = {"agent_id": agent, "node_id": node_id, "release": True}
    run_tool(ctx, store, session, agent, "lambo_reserve", arguments, as_json)


@cli.command("demo")
@click.option(
    "--store",
    "store",
    metavar="PATH|memory",
    help="keep the demo's session in this SQLite file, or `memory` (default: a throwaway file)",
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
    from .demo import run_demo

    sys.exit(run_demo(ctx.config, store, session, click.echo))


@cli.command("setup")
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
    from .setup_clients import setup_client

    click.echo(setup_client(client, session=session, pyz=pyz, write=write), nl=False)


cli.add_command(model_group)
cli.add_command(canon_group)
cli.add_command(session_group)


def main(argv: list[str] | None = None) -> int:
    _setup_logging()
    try:
        cli.main(args=argv, prog_name="lambo", standalone_mode=True)
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0
