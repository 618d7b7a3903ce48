"""`lambo import` and `lambo export`: a session's memory in and out as JSONL.

The format, the server-memory mapping, the order and the resume rule are in
docs/import-export.md; the library is ``lambo_core/transfer``. Here are the flags, the
progress on stderr and the closing counts.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from .common import pass_ctx, reports_errors, store_to_use
from .flags import STDIN
from .tool_call import DEFAULT_AGENT

if TYPE_CHECKING:
    from ..transfer.driver import Report
    from .common import Context

#: refused lines listed at the end; the total is always given
REFUSALS_LISTED = 20


def _read_input(source: str) -> bytes:
    from ..errors import ParameterError

    if source == STDIN:
        data = sys.stdin.buffer.read()
        if not data.strip():
            raise ParameterError("FILE - reads standard input, which was empty; pipe the JSONL in")
        return data
    path = Path(source).expanduser()
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ParameterError(f"FILE {click.format_filename(path)} does not exist") from None
    except IsADirectoryError:
        raise ParameterError(f"FILE {click.format_filename(path)} is a directory") from None
    except OSError as exc:
        raise ParameterError(
            f"FILE {click.format_filename(path)} cannot be read ({exc.strerror})"
        ) from None


@click.command("import")
@click.argument("source", metavar="FILE|-")
@click.option("--session", required=True, help="the session to import into (created if need be)")
@click.option(
    "--agent", default=DEFAULT_AGENT, show_default=True, help="the agent_id the writes are made as"
)
@store_to_use
@click.option(
    "--restart",
    is_flag=True,
    help="ignore a checkpoint of an interrupted import of this file and start at line 1",
)
@pass_ctx
@reports_errors
def import_cmd(
    ctx: Context, source: str, session: str, agent: str, store: str | None, restart: bool
) -> None:
    """Import JSONL into a session: lambo's own lines (as `lambo export` writes them) or the
    memory.jsonl of @modelcontextprotocol/server-memory, told apart by the first line.

    Every line goes through lambo_derive or lambo_record_action (the same admission,
    merging and embedding), through the serve that holds the session when one runs. A bad
    line is refused with its number; the others land. Interrupted, the same command resumes
    after the last line that settled; lines sent again are matched, never doubled.

    \b
    Examples:
      lambo import facts.jsonl --session work
      lambo import ~/.memory.jsonl --session work     # server-memory's file
      cat facts.jsonl | lambo import - --session work
    """
    from ..config import store_flags
    from ..store import store_location
    from ..transfer.checkpoint import Checkpoint, checkpoint_path
    from ..transfer.driver import ImportRun
    from ..transfer.jobs import read_jobs
    from .row_progress import RowProgress
    from .tool_call import SessionCall

    data = _read_input(source)
    target = SessionCall(ctx, store, session, agent)
    read = read_jobs(data, target.agent)
    config = ctx.config(store_flags(store))
    where = config.paths.data_dir / "imports"
    checkpoint = Checkpoint(checkpoint_path(where, data, target.session, store_location(config)))
    if restart:
        checkpoint.remove()
    else:
        checkpoint = Checkpoint.load(checkpoint.path)
    if checkpoint.done_through:
        click.echo(f"resuming after line {checkpoint.done_through}", err=True)
    click.echo(
        f"importing {len(read.jobs)} line(s) ({read.format} format) into session {target.session}",
        err=True,
    )
    progress = RowProgress(sys.stderr, unit="lines")
    run = ImportRun(
        target.agent, read.jobs, progress=progress, checkpoint=checkpoint, refused=read.refused
    )
    try:
        report = target.run(run.run, creates=True)
    except KeyboardInterrupt:
        # the checkpoint was saved on the way out: the same command continues from it
        click.echo(
            f"\nlambo: interrupted; every line up to {checkpoint.done_through} has settled; run "
            "the same command again to resume after it",
            err=True,
        )
        sys.exit(130)
    checkpoint.remove()
    for line in summary_lines(report):
        click.echo(line)
    refused = refused_lines(report)
    for line in refused:
        click.echo(line, err=True)
    if report.refused:
        sys.exit(1)


def summary_lines(report: Report) -> list[str]:
    resumed = f" (resumed after line {report.resumed_after})" if report.resumed_after else ""
    return [
        f"imported {report.lines} line(s){resumed} in {report.seconds:.1f} s: "
        f"{report.created} concept(s) created, {report.matched} matched existing, "
        f"{len(report.refused)} line(s) refused"
    ]


def refused_lines(report: Report) -> list[str]:
    lines = [f"lambo: {r.render()}" for r in report.refused[:REFUSALS_LISTED]]
    left = len(report.refused) - REFUSALS_LISTED
    if left > 0:
        lines.append(f"lambo: … and {left} more refused line(s) ({len(report.refused)} in all)")
    return lines


@click.command("export")
@click.option("--session", required=True, help="the session to export")
@store_to_use
@click.option("--vectors", is_flag=True, help="also write each concept's embedding vector")
@click.option(
    "--output",
    "-o",
    default=STDIN,
    metavar="FILE|-",
    help="where to write the JSONL (default `-`: standard output)",
)
@pass_ctx
@reports_errors
def export_cmd(ctx: Context, session: str, store: str | None, vectors: bool, output: str) -> None:
    """Export a session as JSONL that `lambo import` reads: concepts with ids, types,
    statuses and event times, their declared edges, no vectors unless --vectors.

    It reads the store: writes a serve has queued but not applied are not in it.

    \b
    Example:
      lambo export --session work -o work.jsonl
    """
    import time

    from ..config import store_flags
    from ..errors import ParameterError
    from ..store import open_config_store, store_location
    from ..text import check_string, show_safely
    from ..transfer.export import export_lines

    name = check_string("--session", session)
    config = ctx.config(store_flags(store))
    if config.store_kind == "sqlite" and not config.store_path.is_file():
        raise ParameterError(f"--session: the store {config.store_path} does not exist yet")
    if config.store_kind == "memory":
        raise ParameterError("--store memory starts empty for every command: nothing to export")
    db = open_config_store(config)
    try:
        if db.get_session(name) is None:
            raise ParameterError(
                f"--session: no session named '{show_safely(name, 64)}' in the store "
                f"{store_location(config)}; `lambo session list` lists them"
            )
        lines = export_lines(db, name, vectors=vectors, exported_at=time.time())
        if output == STDIN:
            count = _write_lines(sys.stdout, lines)
        else:
            with open(Path(output).expanduser(), "w", encoding="utf-8") as stream:
                count = _write_lines(stream, lines)
        click.echo(f"exported {count - 1} line(s) of session {name}", err=True)
    finally:
        db.close()


def _write_lines(stream: IO[str], lines: Iterable[dict[str, Any]]) -> int:
    from ..transfer.export import dump_line

    count = 0
    for line in lines:
        stream.write(dump_line(line) + "\n")
        count += 1
    return count
