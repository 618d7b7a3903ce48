"""`lambo store copy`: sessions moved between stores (SQLite files, PostgreSQL DSNs).

The copy's rules are in ``store/copy.py``; here are the flags, the progress on stderr and
the count check on stdout. A DSN is only ever shown with its password masked.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from .common import reports_errors

if TYPE_CHECKING:
    from ..store.copy import CopyReport


def _not_blank(ctx: click.Context, param: click.Parameter, value: object) -> object:
    values = value if isinstance(value, tuple) else (value,)
    if any(isinstance(v, str) and v.strip() == "" for v in values):
        raise click.BadParameter("must not be empty", ctx, param)
    return value


@click.group("store")
def store_group() -> None:
    """Whole stores: copy sessions from one to another."""


@store_group.command("copy")
@click.option(
    "--from",
    "source_text",
    required=True,
    metavar="PATH|DSN",
    callback=_not_blank,
    help="the store to read: a SQLite file, or a postgresql:// DSN (never written)",
)
@click.option(
    "--to",
    "target_text",
    required=True,
    metavar="PATH|DSN",
    callback=_not_blank,
    help="the store to write: a SQLite file (created if need be), or a postgresql:// DSN",
)
@click.option(
    "--session",
    "sessions",
    multiple=True,
    callback=_not_blank,
    help="a session to copy (repeatable; default: every session in --from)",
)
@reports_errors
def copy_cmd(source_text: str, target_text: str, sessions: tuple[str, ...]) -> None:
    """Copy sessions, every row with its ids, then count both sides table by table.

    A session already in --to is refused unless every row it has there is in --from
    too, equal (an interrupted copy: run it again and it continues). Exit 1 when a
    count differs.

    \b
    Example:
      lambo store copy --from ~/.local/share/lambo/lambo.db --to postgresql://lambo@db/lambo
    """
    from ..errors import ParameterError
    from ..store.copy import choose_sessions, copy_sessions
    from ..store.copy_location import open_source, open_target, parse_location
    from .row_progress import RowProgress

    source_at = parse_location("--from", source_text)
    target_at = parse_location("--to", target_text)
    if source_at.same_as(target_at):
        raise ParameterError(
            f"--from and --to name the same store ({target_at.shown}); a copy reads one "
            "store and writes another"
        )
    source = open_source(source_at)
    try:
        names = choose_sessions(source, sessions)
        target = open_target(target_at)
        try:
            click.echo(
                f"copying {len(names)} session(s) from {source_at.shown} to {target_at.shown}"
            )
            report = copy_sessions(
                source,
                target,
                names,
                target_shown=target_at.shown,
                progress=RowProgress(sys.stderr),
            )
        finally:
            target.close()
    finally:
        source.close()
    out, err = count_lines(report)
    for line in out:
        click.echo(line)
    for line in err:
        click.echo(line, err=True)
    if err:
        sys.exit(1)


def count_lines(report: CopyReport) -> tuple[list[str], list[str]]:
    """The count check: a line per session on stdout, and a line per table whose counts
    differ for stderr (the command then exits 1)."""
    out, err = [], []
    for count in report.sessions:
        tables = ", ".join(
            f"{table} {count.source[table]}/{count.target.get(table, 0)}" for table in count.source
        )
        verdict = "ok" if not count.mismatched else "MISMATCH in " + ", ".join(count.mismatched)
        out.append(f"session {count.session}: {tables} (--from/--to): {verdict}")
    written = sum(c.written for c in report.sessions)
    out.append(
        f"copied {len(report.sessions)} session(s): {written} row(s) written in "
        f"{report.seconds:.1f} s"
    )
    for count in report.sessions:
        for table in count.mismatched:
            err.append(
                f"lambo: count check failed: session {count.session!r}, table {table}: "
                f"--from has {count.source[table]} row(s), --to {count.target.get(table, 0)}"
            )
    return out, err
