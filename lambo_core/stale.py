"""lambo_stale: direct dependencies that rest on a currently contradicted concept.

Spec: lambo_stale. The rule is ``contradiction.stale_rows`` (the one recall and the receipts'
stale_report use); this module parses the call and pages the rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .args import check_arguments, check_int, check_scope, require
from .contradiction import STALE_ROWS_MAX, contradicted_targets, stale_rows
from .text import check_agent_id

if TYPE_CHECKING:
    from .session import Session

TOOL = "lambo_stale"
ARGUMENTS = ("agent_id", "scope", "offset")
OFFSET_RANGE = (0, 10_000_000)
PAGE_ROWS = STALE_ROWS_MAX


def run_stale(
    session: Session, args: Mapping[str, Any], *, edge_min_age: float
) -> tuple[str, dict[str, Any]]:
    """Answer one lambo_stale call: (text, structuredContent)."""
    checked = check_arguments(TOOL, args, ARGUMENTS)
    check_agent_id(require(checked, "agent_id"))
    check_scope(checked.get("scope"), session.name)
    offset = 0
    if checked.get("offset") is not None:
        offset = check_int("offset", checked["offset"], *OFFSET_RANGE)

    now = session.clock.now()
    with session.index.lock:
        graph = session.index.graph
        every = stale_rows(graph, contradicted_targets(graph), now, edge_min_age)
    total = len(every)
    page = every[offset : offset + PAGE_ROWS]
    end = offset + len(page)
    next_offset = end if end < total else None
    structured: dict[str, Any] = {
        "total": total,
        "offset": offset,
        "rows": [row.as_dict() for row in page],
        "next_offset": next_offset,
    }

    if total == 0:
        return "no direct dependency rests on a contradicted concept", structured
    noun = "dependency rests" if total == 1 else "dependencies rest"
    head = f"{total} direct {noun} on a contradicted concept"
    if not page:
        return f"{head}; offset {offset} is past the last row", structured
    lines = [f"{head}; rows {offset + 1}-{end}:"]
    lines += [f'{row.node_id} "{row.snippet}" cites {row.cited_id}' for row in page]
    if next_offset is not None:
        lines.append(f"more: call lambo_stale with offset {next_offset} for the next page")
    return "\n".join(lines), structured
