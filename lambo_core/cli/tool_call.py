"""How a tool command calls its session and prints the answer: the same service the MCP
tools call, reached through the serve that holds the session when one runs.

A read verb prints the tool's text (or JSON); a write verb waits for its receipt and
prints what the write did (``output.py``), exiting 0 only when it was applied.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from ..errors import ErrorKind, ParameterError
from .common import USAGE_KINDS, Context
from .flags import FieldFlags
from .output import (
    WAIT_MS,
    ShellCall,
    split_receipt_line,
    stats_exit_code,
    unknown_receipt_hint,
    write_exit_code,
    write_outcome,
)

if TYPE_CHECKING:
    from ..client import Call

DEFAULT_AGENT = "cli"

# A refusal of a value the caller gave renders without a class prefix (see errors.py).
_RUNTIME_PREFIXES = tuple(f"{kind.value}:" for kind in ErrorKind if kind not in USAGE_KINDS)

T = TypeVar("T")


class SessionCall:
    """One tool command's call on a session: where it goes, the layers it attaches when it
    serves the session itself (each --layer, else [serve] layers), and the follow-up
    commands its output may point to (written with the same --config, --store and --agent)."""

    def __init__(
        self,
        ctx: Context,
        store: str | None,
        session: str,
        agent: str,
        layers: Sequence[str] = (),
    ) -> None:
        from ..text import check_agent_id, check_string

        self.ctx = ctx
        self.store = store
        self.session = check_string("--session", session)
        self.layers = tuple(layers)
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

        from ..client import open_client
        from ..config import store_flags
        from .serve import layers_of, served_layers

        config = self.ctx.config(store_flags(self.store))
        configured = config.get("serve.layers")
        layers = layers_of(self.session, served_layers(self.layers, configured, [self.session]))
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
                layers=layers,
            ) as call:
                return await script(call)

        return anyio.run(go)


def exit_refused(result: dict[str, Any], flags: FieldFlags) -> NoReturn:
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
    layers: Sequence[str] = (),
) -> None:
    """A read (or lock) verb: one call, the tool's text or JSON, the exit code."""
    flags = flags or FieldFlags(arguments)
    result = SessionCall(ctx, store, session, agent, layers).run(
        lambda call: call(tool, arguments), needs_serve=needs_serve
    )
    if result["isError"]:
        exit_refused(result, flags)
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
    layers: Sequence[str] = (),
) -> None:
    """A write verb: the call, then (unless ``--no-wait``) a wait for its receipt; lines about
    what the call did, and exit 0 only when the write was applied (or, not waiting, admitted).
    """
    target = SessionCall(ctx, store, session, agent, layers)

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
        exit_refused(ack, flags)
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
