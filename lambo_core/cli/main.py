"""The `lambo` command line: click commands only. Parse, call the library, print.

Exit codes: 0 success; 1 a run-time failure; 2 a bad flag, value or setting
(nothing ran). A ``LamboError`` is rendered here (and in the MCP layer) and
nowhere else; its internal detail goes to the log on stderr.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Awaitable, Callable
from functools import wraps
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from . import __version__, cli_flags
from .canon_commands import canon_group, session_group
from .cli_flags import FieldFlags, integer_option, numbered, text_or_stdin
from .cli_output import (
    WAIT_MS,
    ShellCall,
    split_receipt_line,
    stats_exit_code,
    unknown_receipt_hint,
    write_exit_code,
    write_outcome,
)
from .config import Config, load_config, render_default_file, render_show, store_flags
from .embed.commands import model_group
from .errors import ConfigError, ErrorKind, LamboError, ParameterError
from .log_limits import install_stderr_queue
from .receipts import WAIT_MS_MAX

if TYPE_CHECKING:
    from .client import Call

log = logging.getLogger("lambo")

F = TypeVar("F", bound=Callable[..., Any])

# Refusals of a value the user gave: nothing ran, so exit 2 like a bad flag.
_USAGE_KINDS = (ErrorKind.PARAMETER, ErrorKind.CONFIGURATION)


def _setup_logging() -> None:
    level_name = os.environ.get("LAMBO_LOG", "WARNING").upper()
    level = getattr(logging, level_name, logging.WARNING)
    # Through a bounded queue: a client that never reads stderr cannot stall the serve.
    install_stderr_queue(sys.stderr, level, "lambo %(levelname)s %(name)s: %(message)s")


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


store_option = cli_flags.store_option("the SQLite file to use, or `memory` for a store in RAM")


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
    from .serve import ServeOptions, exit_cleanly_until_serving, run_stdio

    exit_cleanly_until_serving()
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
    run_stdio(config, options)


# --- tool commands: the same service the MCP tools call ---------------------------


def session_options(fn: F) -> F:
    fn = click.option("--json", "as_json", is_flag=True, help="print the structured content")(fn)
    fn = store_option(fn)
    fn = click.option(
        "--agent", default=DEFAULT_AGENT, show_default=True, help="the agent_id the call is made as"
    )(fn)
    return click.option("--session", required=True, help="the session to use")(fn)


DEFAULT_AGENT = "cli"

# A refusal of a value the caller gave renders without a class prefix (see errors.py).
_RUNTIME_PREFIXES = tuple(f"{kind.value}:" for kind in ErrorKind if kind not in _USAGE_KINDS)

T = TypeVar("T")


class SessionCall:
    """One tool command's call on a session: where it goes, and the follow-up commands
    its output may point to (written with the same --config, --store and --agent)."""

    def __init__(self, ctx: Context, store: str | None, session: str, agent: str) -> None:
        from .text import check_agent_id, check_string

        self.ctx = ctx
        self.store = store
        self.session = check_string("--session", session)
        try:  # before the lease is taken under it
            self.agent = check_agent_id(agent)
        except ParameterError as exc:
            raise ParameterError(FieldFlags({"agent_id": agent}).rewrite(exc.message)) from None
        self.shell = ShellCall(self.session, self.agent, store, ctx.config_path, DEFAULT_AGENT)

    def run(
        self,
        script: Callable[[Call], Awaitable[T]],
        *,
        creates: bool = False,
        needs_serve: bool = False,
    ) -> T:
        """``script(call)`` with a client of the session (through its serve if one runs)."""
        import anyio

        from .client import open_client

        config = self.ctx.config(store_flags(self.store))
        shell = self.shell

        async def go() -> T:
            async with open_client(
                config,
                self.session,
                self.agent,
                creates=creates,
                needs_serve=needs_serve,
                session_list=shell.command("session", "list", session=False, agent=False),
                serve_command=shell.command("serve", agent=False),
            ) as call:
                return await script(call)

        return anyio.run(go)


def _exit_refused(result: dict[str, Any], flags: FieldFlags) -> NoReturn:
    """A tool's refusal, its fields named by their flags: exit 2 for a bad value, else 1."""
    text = str(result["content"][0]["text"])
    click.echo(f"lambo: {flags.rewrite(text)}", err=True)
    sys.exit(1 if text.startswith(_RUNTIME_PREFIXES) else 2)


def _echo_json(payload: dict[str, Any]) -> None:
    import json

    click.echo(json.dumps(payload, indent=2, ensure_ascii=False))


def run_tool(
    ctx: Context,
    store: str | None,
    session: str,
    agent: str,
    tool: str,
    arguments: dict[str, Any],
    as_json: bool,
    *,
    needs_serve: bool = False,
    flags: FieldFlags | None = None,
) -> None:
    """A read (or lock) verb: one call, the tool's text or JSON, the exit code."""
    flags = flags or FieldFlags(arguments)
    result = SessionCall(ctx, store, session, agent).run(
        lambda call: call(tool, arguments), needs_serve=needs_serve
    )
    if result["isError"]:
        _exit_refused(result, flags)
    structured = dict(result.get("structuredContent") or {})
    code = stats_exit_code(structured) if tool == "lambo_stats" else 0
    if as_json:
        _echo_json(structured)
        sys.exit(code)
    texts = [str(block["text"]) for block in result["content"]]
    if code:  # the receipt the shell asked about is not known here: that part is the failure
        receipt_lines, rest = split_receipt_line(texts[0])
        first, *more = receipt_lines
        for line in [f"lambo: {first}", *more]:
            click.echo(line, err=True)
        hint = unknown_receipt_hint(structured)
        if hint:
            click.echo(hint, err=True)
        texts[0] = "\n".join(rest)
    for text in texts:
        click.echo(text)
    sys.exit(code)


def run_write(
    ctx: Context,
    store: str | None,
    session: str,
    agent: str,
    tool: str,
    arguments: dict[str, Any],
    as_json: bool,
    *,
    wait: bool,
    flags: FieldFlags,
) -> None:
    """A write verb: the call, then (unless ``--no-wait``) a wait for its receipt; lines about
    what the call did, and exit 0 only when the write was applied (or, not waiting, admitted).
    """
    target = SessionCall(ctx, store, session, agent)

    def emit(structured: dict[str, Any], receipt: dict[str, Any] | None) -> int:
        if as_json:
            if receipt is not None:
                structured["outcome"] = receipt
            _echo_json(structured)
            return write_exit_code(structured, receipt)
        printed = write_outcome(structured, receipt, target.shell, flags)
        for line in printed.out:
            click.echo(line)
        for line in printed.err:
            click.echo(line, err=True)
        return printed.code

    async def script(call: Call) -> tuple[dict[str, Any], dict[str, Any] | None, int | None]:
        ack = await call(tool, arguments)
        if ack["isError"]:
            return ack, None, None
        structured = dict(ack.get("structuredContent") or {})
        receipt = structured.get("receipt")
        pending = structured.get("receipt_state") == "pending"
        if receipt and pending and not wait:
            # Said while it is true: without a serve, this command still applies the write
            # before it gives the session back, after this line is printed.
            return ack, None, emit(structured, None)
        if not receipt:
            return ack, None, None
        ask: dict[str, Any] = {"agent_id": agent, "receipt": receipt}
        if pending:
            ask["wait_ms"] = WAIT_MS
        return ack, await call("lambo_stats", ask), None

    ack, asked, code = target.run(script, creates=True)
    if code is not None:
        sys.exit(code)
    if ack["isError"]:
        _exit_refused(ack, flags)
    structured = dict(ack.get("structuredContent") or {})
    receipt: dict[str, Any] | None = None
    if asked is not None:
        if asked["isError"]:
            rid = str(structured.get("receipt", ""))
            click.echo(
                f"lambo: the write was admitted (receipt {rid}) but its outcome could not be "
                f"read: {asked['content'][0]['text']}",
                err=True,
            )
            click.echo(f"check it with: {target.shell.check_receipt(rid)}", err=True)
            sys.exit(1)
        receipt = (asked.get("structuredContent") or {}).get("receipt")
    sys.exit(emit(structured, receipt))


def derive_flags(
    arguments: dict[str, Any], depends_on: int, against: int, more: int, parent_of: int
) -> FieldFlags:
    """derive's fields: concepts[0] is --content/--kind, concepts[1:] the --concept flags."""
    flags = FieldFlags(arguments)
    flags.add("concepts", "--content and --concept")
    flags.add("concepts[0]", "--content").add("concepts[0].content", "--content")
    flags.add("concepts[0].concept_type", "--kind")
    for name, flag, count in (
        ("depends_on", "--depends-on", depends_on),
        ("against", "--against", against),
    ):
        flags.add(name, flag).add(f"concepts[0].{name}", flag)
        flags.add_entries(f"concepts[0].{name}", flag, count)
    for i in range(more):
        flag = numbered("--concept", i, more)
        flags.add(f"concepts[{i + 1}]", flag)
        flags.add(f"concepts[{i + 1}].content", f"{flag} TEXT")
        flags.add(f"concepts[{i + 1}].concept_type", f"{flag} KIND")
    for i in range(parent_of):
        flag = numbered("--parent-of", i, parent_of)
        flags.add(f"parent_of[{i}]", flag)
        flags.add(f"parent_of[{i}].parent", f"{flag} PARENT")
        flags.add(f"parent_of[{i}].child", f"{flag} CHILD")
    return flags


_NO_WAIT_HELP = (
    "print the receipt without waiting for the outcome (exit 0 once admitted); "
    "by default the command waits and exits 1 unless the write was applied"
)


@cli.command("derive")
@session_options
@click.option("--content", required=True, help="the concept: one fact, short (`-`: read stdin)")
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
@click.option("--no-wait", is_flag=True, help=_NO_WAIT_HELP)
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
    """Store concepts, as lambo_derive does, and wait for them to be applied.

    \b
    Example:
      lambo derive --session demo --content "lease TTL is 45s" --kind logic
      git log -1 --format=%s | lambo derive --session demo --content - --kind observation
    """
    concept: dict[str, Any] = {
        "content": text_or_stdin("--content", content),
        "concept_type": concept_type,
    }
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
    flags = derive_flags(arguments, len(depends_on), len(against), len(more), len(parent_of))
    run_write(
        ctx,
        store,
        session,
        agent,
        "lambo_derive",
        arguments,
        as_json,
        wait=not no_wait,
        flags=flags,
    )


@cli.command("record-action")
@session_options
@click.option("--action", required=True, help="what you did, as a short line (`-`: read stdin)")
@click.option("--produces", multiple=True, help="something the action produced")
@click.option("--modifies", multiple=True, help="something the action changed")
@click.option("--depends-on", multiple=True, help="something the action relied on")
@click.option("--against", multiple=True, help="a concept the action shows to be wrong")
@click.option("--event-time", help="RFC3339 about-time of a historical action")
@click.option("--no-wait", is_flag=True, help=_NO_WAIT_HELP)
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
    """Record an action, as lambo_record_action does, and wait for it to be applied.

    \b
    Example:
      lambo record-action --session demo --action "merged PR #52" --modifies src/lease.rs
    """
    arguments: dict[str, Any] = {"agent_id": agent, "action": text_or_stdin("--action", action)}
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
    run_write(
        ctx,
        store,
        session,
        agent,
        "lambo_record_action",
        arguments,
        as_json,
        wait=not no_wait,
        flags=FieldFlags(arguments),
    )


@cli.command("recall")
@session_options
@click.option("--query", required=True, help="what to recall (`-`: read stdin)")
@integer_option("--top-k", help="hits to return (1..100, default 5)")
@integer_option("--max-tokens", help="context budget (1..100000, default 500)")
@integer_option("--traversal-depth", help="graph expansion depth (0..5, default 2)")
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

    Without a serve holding the session, the command loads the embedding model
    and waits for it, so the recall has its vector leg (or says it is
    keyword-only when the model is missing or fails to load).

    \b
    Example:
      lambo recall --session demo --query "how long is the lease TTL"
    """
    arguments: dict[str, Any] = {"agent_id": agent, "query": text_or_stdin("--query", query)}
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
@click.option("--receipt", help="a receipt id from a write (exit 1 when it is not known here)")
@integer_option(
    "--wait-ms",
    help=f"with --receipt, wait up to this long for the write (0..{WAIT_MS_MAX}; more is clamped)",
)
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
    Examples:
      lambo stats --session demo
      lambo stats --session demo --receipt lwr1.… --wait-ms 34000
    """
    arguments: dict[str, Any] = {"agent_id": agent}
    if receipt is not None:
        arguments["receipt"] = receipt
    if wait_ms is not None:
        if receipt is None:
            raise ParameterError(
                "--wait-ms waits for the write a --receipt names, so it needs --receipt; "
                "pass --receipt ID, or leave --wait-ms out"
            )
        if wait_ms < 0:
            raise ParameterError(
                f"--wait-ms must be an integer in 0..={WAIT_MS_MAX} (a larger value is clamped "
                f"to {WAIT_MS_MAX})"
            )
        arguments["wait_ms"] = wait_ms
    run_tool(ctx, store, session, agent, "lambo_stats", arguments, as_json)


@cli.command("inspect")
@session_options
@click.option("--focus", required=True, help="concept text, its 8-hex id or its node id")
@integer_option("--depth", help="neighbourhood depth (0..5, default 2)")
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
@integer_option("--offset", help="the next page's offset")
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
@integer_option("--ttl-seconds", help="lock lifetime (1..3600, default 30)")
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
    """Take a soft lock on a node through the serve that holds the session, as lambo_reserve
    does. The lock lives in that serve, so without one running nothing is locked (exit 1).

    \b
    Example:
      lambo reserve --session demo --agent me --node 478416c2-0000-0000-0000-000000000000
    """
    arguments: dict[str, Any] = {"agent_id": agent, "node_id": node_id}
    if ttl_seconds is not None:
        arguments["ttl_seconds"] = ttl_seconds
    run_tool(ctx, store, session, agent, "lambo_reserve", arguments, as_json, needs_serve=True)


@cli.command("release")
@session_options
@click.option("--node", "node_id", required=True, help="the node id to unlock")
@pass_ctx
@reports_errors
def release_cmd(
    ctx: Context, session: str, agent: str, store: str | None, as_json: bool, node_id: str
) -> None:
    """Release a soft lock through the serve that holds the session, as lambo_reserve with
    release does (exit 1 when no serve holds it: no lock can be there).

    \b
    Example:
      lambo release --session demo --agent me --node 478416c2-0000-0000-0000-000000000000
    """
    arguments: dict[str, Any] = {"agent_id": agent, "node_id": node_id}
    flags = FieldFlags(arguments)
    arguments["release"] = True
    run_tool(
        ctx,
        store,
        session,
        agent,
        "lambo_reserve",
        arguments,
        as_json,
        needs_serve=True,
        flags=flags,
    )


@cli.command("demo")
@cli_flags.store_option(
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
        code = int(exc.code or 0) if not isinstance(exc.code, str) else 1
    else:
        code = 0
    if "lambo_core.client" in sys.modules:  # a command that served the session itself
        from .client import stop_was_unfinished

        if stop_was_unfinished():
            from .serve import exit_without_teardown

            exit_without_teardown(code)
    return code
