"""The tool commands: derive, record-action, recall, stats, inspect, saints, stale,
reserve and release, each one call of the MCP tool of that name (spec: "Tools").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from ..errors import ParameterError
from ..limits import WAIT_MS_MAX
from .common import Context, pass_ctx, reports_errors, store_to_use
from .flags import FieldFlags, integer_option, numbered, text_or_stdin
from .tool_call import DEFAULT_AGENT, run_tool, run_write

F = TypeVar("F", bound=Callable[..., Any])


def session_options(fn: F) -> F:
    fn = click.option("--json", "as_json", is_flag=True, help="print the structured content")(fn)
    fn = click.option(
        "--layer",
        "layers",
        multiple=True,
        help="a shared session (such as general) the session reads beside its own when no "
        "serve holds it and this command serves it itself; repeat it for several (replaces "
        "[serve] layers; a running serve uses its own)",
    )(fn)
    fn = store_to_use(fn)
    fn = click.option(
        "--agent", default=DEFAULT_AGENT, show_default=True, help="the agent_id the call is made as"
    )(fn)
    return click.option("--session", required=True, help="the session to use")(fn)


def scope_option(fn: F) -> F:
    return click.option(
        "--scope",
        help="the session to act on: this one (the default) or one of its layers, such as general",
    )(fn)


def with_scope(arguments: dict[str, Any], scope: str | None) -> dict[str, Any]:
    """``arguments`` with the tool's ``scope`` when --scope was given."""
    if scope is not None:
        arguments["scope"] = scope
    return arguments


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


_REPO_SCOPE_HELP = (
    "the repository the call's paths belong to, such as github.com/acme/widgets "
    "(each repository gets its own concept for a path)"
)
_NO_WAIT_HELP = (
    "print the receipt without waiting for the outcome (exit 0 once admitted); "
    "by default the command waits and exits 1 unless the write was applied"
)


@click.command("derive")
@session_options
@scope_option
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
@click.option("--repo-scope", help=_REPO_SCOPE_HELP)
@click.option("--no-wait", is_flag=True, help=_NO_WAIT_HELP)
@pass_ctx
@reports_errors
def derive_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    layers: tuple[str, ...],
    scope: str | None,
    content: str,
    concept_type: str,
    depends_on: tuple[str, ...],
    against: tuple[str, ...],
    more: tuple[str, ...],
    parent_of: tuple[str, ...],
    event_time: str | None,
    repo_scope: str | None,
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
    with_scope(arguments, scope)
    if repo_scope is not None:
        arguments["repo_scope"] = repo_scope
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
        layers=layers,
    )


@click.command("record-action")
@session_options
@scope_option
@click.option("--action", required=True, help="what you did, as a short line (`-`: read stdin)")
@click.option("--produces", multiple=True, help="something the action produced")
@click.option("--modifies", multiple=True, help="something the action changed")
@click.option("--depends-on", multiple=True, help="something the action relied on")
@click.option("--against", multiple=True, help="a concept the action shows to be wrong")
@click.option("--event-time", help="RFC3339 about-time of a historical action")
@click.option("--repo-scope", help=_REPO_SCOPE_HELP)
@click.option("--no-wait", is_flag=True, help=_NO_WAIT_HELP)
@pass_ctx
@reports_errors
def record_action_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    layers: tuple[str, ...],
    scope: str | None,
    action: str,
    produces: tuple[str, ...],
    modifies: tuple[str, ...],
    depends_on: tuple[str, ...],
    against: tuple[str, ...],
    event_time: str | None,
    repo_scope: str | None,
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
    with_scope(arguments, scope)
    if repo_scope is not None:
        arguments["repo_scope"] = repo_scope
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
        layers=layers,
    )


@click.command("recall")
@session_options
@scope_option
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
    layers: tuple[str, ...],
    scope: str | None,
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
    with_scope(arguments, scope)
    run_tool(ctx, store, session, agent, "lambo_recall", arguments, as_json, layers=layers)


@click.command("stats")
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
    layers: tuple[str, ...],
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
    run_tool(ctx, store, session, agent, "lambo_stats", arguments, as_json, layers=layers)


@click.command("inspect")
@session_options
@scope_option
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
    layers: tuple[str, ...],
    scope: str | None,
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
    with_scope(arguments, scope)
    run_tool(ctx, store, session, agent, "lambo_inspect", arguments, as_json, layers=layers)


@click.command("saints")
@session_options
@scope_option
@pass_ctx
@reports_errors
def saints_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    layers: tuple[str, ...],
    scope: str | None,
) -> None:
    """The session's canonical memories, as lambo_saints lists them.

    \b
    Example:
      lambo saints --session demo
    """
    arguments = with_scope({"agent_id": agent}, scope)
    run_tool(ctx, store, session, agent, "lambo_saints", arguments, as_json, layers=layers)


@click.command("stale")
@session_options
@scope_option
@integer_option("--offset", help="the next page's offset")
@pass_ctx
@reports_errors
def stale_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    layers: tuple[str, ...],
    scope: str | None,
    offset: int | None,
) -> None:
    """Dependencies resting on a contradicted concept, as lambo_stale lists them.

    \b
    Example:
      lambo stale --session demo
    """
    arguments: dict[str, Any] = {"agent_id": agent}
    if offset is not None:
        arguments["offset"] = offset
    with_scope(arguments, scope)
    run_tool(ctx, store, session, agent, "lambo_stale", arguments, as_json, layers=layers)


@click.command("reserve")
@session_options
@scope_option
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
    layers: tuple[str, ...],
    scope: str | None,
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
    with_scope(arguments, scope)
    run_tool(
        ctx,
        store,
        session,
        agent,
        "lambo_reserve",
        arguments,
        as_json,
        needs_serve=True,
        layers=layers,
    )


@click.command("release")
@session_options
@scope_option
@click.option("--node", "node_id", required=True, help="the node id to unlock")
@pass_ctx
@reports_errors
def release_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    as_json: bool,
    layers: tuple[str, ...],
    scope: str | None,
    node_id: str,
) -> None:
    """Release a soft lock through the serve that holds the session, as lambo_reserve with
    release does (exit 1 when no serve holds it: no lock can be there).

    \b
    Example:
      lambo release --session demo --agent me --node 478416c2-0000-0000-0000-000000000000
    """
    arguments = with_scope({"agent_id": agent, "node_id": node_id}, scope)
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
        layers=layers,
    )


TOOL_COMMANDS = (
    derive_cmd,
    record_action_cmd,
    recall_cmd,
    stats_cmd,
    inspect_cmd,
    saints_cmd,
    stale_cmd,
    reserve_cmd,
    release_cmd,
)
