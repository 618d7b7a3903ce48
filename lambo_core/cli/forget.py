"""`lambo forget --session S ID…`: remove concepts and their edges through the session's writer.

The rules are in ``writes/forget.py``; the call goes to the serve that holds the session
(or this command holds it for the call, as every tool command does), waits for the
forget's receipt and prints what went.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from .common import Context, pass_ctx, reports_errors, store_to_use
from .flags import FieldFlags
from .tool_call import DEFAULT_AGENT, SessionCall, exit_refused

if TYPE_CHECKING:
    from ..client import Call


@click.command("forget")
@click.option("--session", required=True, help="the session to remove concepts from")
@click.option(
    "--agent", default=DEFAULT_AGENT, show_default=True, help="the agent_id the audit names"
)
@store_to_use
@click.option("--force", is_flag=True, help="also remove Canonical concepts among them")
@click.option("--json", "as_json", is_flag=True, help="print the structured outcome")
@click.argument("ids", nargs=-1, required=True, metavar="ID...")
@pass_ctx
@reports_errors
def forget_cmd(
    ctx: Context,
    session: str,
    agent: str,
    store: str | None,
    force: bool,
    as_json: bool,
    ids: tuple[str, ...],
) -> None:
    """Remove concepts, with every edge at either end, from a session.

    Each ID is the 8-hex id recall shows, a full node id, or the concept's exact text. The
    whole call is refused, removing nothing, if any ID names no concept, several (they are
    listed), or a Canonical concept without --force, or while an earlier write is still
    owed a replay. The stored writes that landed on them (created, merged into or named
    them) and the interactions that derived them are redacted too, and an audit event
    keeps who forgot which ids when, with each content's SHA-256, never the text.

    \b
    Example:
      lambo forget --session demo 3f2a9c1e
    """
    from ..forget import FORGET_TOOL
    from .output import WAIT_MS

    arguments: dict[str, Any] = {"agent_id": agent, "ids": list(ids), "force": force}
    flags = FieldFlags(arguments).add("ids", "ID")
    flags.add_entries("ids", "ID", len(ids))
    target = SessionCall(ctx, store, session, agent)

    async def script(call: Call) -> tuple[dict[str, Any], dict[str, Any] | None]:
        ack = await call(FORGET_TOOL, arguments)
        receipt = (ack.get("structuredContent") or {}).get("receipt")
        if ack["isError"] or not receipt:
            return ack, None
        ask = {"agent_id": target.agent, "receipt": receipt, "wait_ms": WAIT_MS}
        return ack, await call("lambo_stats", ask)

    ack, asked = target.run(script)
    if ack["isError"]:
        exit_refused(ack, flags)
    structured = dict(ack.get("structuredContent") or {})
    rid = str(structured.get("receipt") or "")
    view = ((asked or {}).get("structuredContent") or {}).get("receipt") if asked else None
    if asked is None or asked["isError"] or not isinstance(view, dict):
        click.echo(
            f"lambo: the forget was not queued or its outcome could not be read (receipt "
            f"{rid or 'none'}): {_first_text(asked or ack)}",
            err=True,
        )
        sys.exit(1)
    if as_json:
        click.echo(_json(view))
    state = view.get("state")
    if state != "applied":
        click.echo(f"lambo: forget {state}: {view.get('detail', '')}", err=True)
        sys.exit(1)
    if not as_json:
        click.echo(str(view.get("detail", "")))
        for node_id in view.get("forgotten") or []:
            click.echo(f"- {node_id}")
    sys.exit(0)


def _first_text(result: dict[str, Any]) -> str:
    content = result.get("content") or [{}]
    return str(content[0].get("text", ""))


def _json(payload: dict[str, Any]) -> str:
    import json

    return json.dumps(payload, indent=2, ensure_ascii=False)
