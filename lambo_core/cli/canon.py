"""`lambo canon suspected`, `lambo session verify`, `lambo session list`: read a store and
print. Each reads the store directly and writes nothing, so it takes no lease and runs
beside a serve that holds the session; a store file that does not exist is refused
rather than created.
"""

from __future__ import annotations

import json
import os
import stat
import time

import click

from .common import reports_errors, root_config
from .flags import store_option

SNIPPET_CHARS = 80
PAIR_ROWS = 200  # pairs printed by default (--limit)

store_to_read = store_option("the SQLite file to read, or `memory`")
json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")


@click.group("canon")
def canon_group() -> None:
    """Canonization and supersession, read from a store."""


@canon_group.command("suspected")
@click.option("--session", required=True, help="the session to read")
@store_to_read
@json_option
@click.option("--threshold", type=click.FloatRange(0.0, 1.0), help="cosine for a near match")
@click.option("--limit", type=click.IntRange(min=1), default=PAIR_ROWS, show_default=True)
@click.pass_context
@reports_errors
def suspected_cmd(
    ctx: click.Context,
    session: str,
    store: str | None,
    as_json: bool,
    threshold: float | None,
    limit: int,
) -> None:
    """Pairs where a newer concept may replace an older one, not declared (#198).

    \b
    Example:
      lambo canon suspected --session demo
    """
    from ..config import store_flags
    from ..index.session_index import SessionIndex
    from ..model import short_id
    from ..store_reports import merge_threshold, open_existing_store, require_session
    from ..supersession import suspected_pairs
    from ..text import show_safely

    config = root_config(ctx, store_flags(store))
    held = open_existing_store(config)
    try:
        require_session(held, session)
        index = SessionIndex.open(held, session)
        # the pairs compare every row with every row: read them while the store is open
        vectors = index.vectors.in_ram() if index.vectors is not None else None
    finally:
        held.close()
    source = "--threshold"
    if threshold is None:
        threshold, source = merge_threshold(config)
    pairs = suspected_pairs(index.graph, vectors, threshold)
    if as_json:
        payload = {
            "session": session,
            "threshold": threshold,
            "threshold_source": source,
            "total": len(pairs),
            "pairs": [p.as_dict() for p in pairs[:limit]],
        }
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    if vectors is None or len(vectors) == 0:
        click.echo(f"session {session}: no stored vectors, so no pair can be read")
        return
    recorded = sum(p.recorded for p in pairs)
    click.echo(
        f"session {session}: {len(pairs)} possibly superseded pair(s) at cosine >= "
        f"{threshold:g} ({source}); {recorded} already recorded"
    )
    for pair in pairs[:limit]:
        mark = "recorded" if pair.recorded else "not recorded"
        click.echo(
            f'{short_id(pair.newer.id)} "{show_safely(pair.newer.content, SNIPPET_CHARS)}" '
            f"may replace {short_id(pair.older.id)} "
            f'"{show_safely(pair.older.content, SNIPPET_CHARS)}" '
            f"[{pair.newer.concept_type.label}] (cosine {pair.cosine:.4f}, {mark})"
        )
    if len(pairs) > limit:
        click.echo(f"… {len(pairs) - limit} more (--limit)")


@click.group("session")
def session_group() -> None:
    """Sessions in a store: list them, verify one."""


@session_group.command("verify")
@click.option("--session", required=True, help="the session to verify")
@store_to_read
@click.option(
    "--ledger",
    "ledger_path",
    type=click.Path(exists=True, dir_okay=False, readable=True),
    help="also count the annotation kinds on this serve --ledger file's recall lines",
)
@json_option
@click.pass_context
@reports_errors
def verify_cmd(
    ctx: click.Context, session: str, store: str | None, ledger_path: str | None, as_json: bool
) -> None:
    """Check a session's graph and report the annotation kinds on its concepts (and, with
    --ledger, on a ledger's recall lines of the session).

    \b
    Example:
      lambo session verify --session demo --ledger calls.jsonl
    """
    from ..canon.rules import CanonRules
    from ..config import store_flags
    from ..session_verify import ledger_kinds, render_verify, verify_session
    from ..store_reports import open_existing_store, require_session

    seen = None
    if ledger_path is not None:
        try:
            # never blocks: a FIFO with no writer would hang a plain open (and its reads)
            fd = os.open(ledger_path, os.O_RDONLY | os.O_NONBLOCK)
            with open(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise click.BadParameter(
                        "must be a regular file (a serve --ledger file), not a pipe or device",
                        param_hint="'--ledger'",
                    )
                seen = ledger_kinds(ledger_path, fh, session)
        except OSError as exc:  # gone or unreadable since click checked it
            reason = exc.strerror or "it cannot be read"
            raise click.BadParameter(
                f"the ledger file cannot be read ({reason})", param_hint="'--ledger'"
            ) from None
    config = root_config(ctx, store_flags(store))
    held = open_existing_store(config)
    try:
        require_session(held, session)
        report = verify_session(held, session, CanonRules.from_config(config), time.time())
        report.ledger = seen
    finally:
        held.close()
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(render_verify(report))
    if report.problems:
        ctx.exit(1)


@session_group.command("list")
@store_to_read
@json_option
@click.pass_context
@reports_errors
def list_cmd(ctx: click.Context, store: str | None, as_json: bool) -> None:
    """The sessions a store holds.

    \b
    Example:
      lambo session list
    """
    from ..config import store_flags
    from ..store_reports import list_sessions, open_existing_store, render_list

    config = root_config(ctx, store_flags(store))
    held = open_existing_store(config)
    try:
        rows = list_sessions(held, time.time())
    finally:
        held.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        click.echo(render_list(rows))
