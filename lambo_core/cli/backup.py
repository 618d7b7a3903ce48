"""`lambo backup PATH`: an online copy of the SQLite store, safe while a serve writes it.

The copy's rules are in ``store/backup.py``; here are the refusals of stores it cannot
copy, the progress on a terminal and the summary on stdout.
"""

from __future__ import annotations

from pathlib import Path

import click

from .common import Context, pass_ctx, reports_errors
from .flags import store_option

#: a store of more pages than this shows its progress on a terminal (64 MiB at 4 KiB pages)
PROGRESS_FROM_PAGES = 16384


def _size_text(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")  # pragma: no cover


@click.command("backup")
@click.argument("path", metavar="PATH")
@store_option("the SQLite store file to copy (default: the configured store)")
@click.option("--force", is_flag=True, help="replace PATH if it exists")
@pass_ctx
@reports_errors
def backup_cmd(ctx: Context, path: str, store: str | None, force: bool) -> None:
    """Copy the SQLite store to PATH, consistently, while serves keep writing it.

    The copy holds every write committed before it began. It is written to a private
    (600) temporary file beside PATH and renamed over PATH once complete. A PostgreSQL
    or CockroachDB store is backed up with the database's own tools (pg_dump) or copied
    to a SQLite file with `lambo store copy`.

    \b
    Example:
      lambo backup ~/lambo-backup.db
    """
    import sys

    from ..config import store_flags
    from ..errors import ConflictError, ParameterError
    from ..store.backup import backup_sqlite
    from ..text import show_safely
    from .row_progress import RowProgress

    if not path.strip():
        raise ParameterError("PATH must not be empty")
    config = ctx.config(store_flags(store))
    kind = config.store_kind
    if kind == "memory":
        raise ConflictError(
            "the store is a memory store (RAM, gone with each process): there is nothing "
            "on disk to back up"
        )
    if kind in ("postgres", "cockroach"):
        raise ConflictError(
            f"the store is {kind}: back it up with the database's own tools (pg_dump), or "
            "copy its sessions into a SQLite file with `lambo store copy --from DSN --to FILE`"
        )
    bar = RowProgress(sys.stderr, unit="pages")
    shown = False

    def progress(done: int, total: int) -> None:
        nonlocal shown
        if not bar.tty or total < PROGRESS_FROM_PAGES:
            return
        if not shown:
            shown = True
            bar.start("backup", total)
        bar.advance(done - bar.done)

    report = backup_sqlite(
        config.store_path, Path(path).expanduser(), force=force, progress=progress
    )
    if shown:
        bar.finish()
    click.echo(
        f"backed up {show_safely(str(config.store_path), 400)} to "
        f"{show_safely(str(report.path), 400)}: "
        f"{report.sessions} session(s), {report.concepts} concept(s), {report.edges} edge(s), "
        f"{_size_text(report.bytes)} in {report.elapsed_s:.1f} s"
    )
