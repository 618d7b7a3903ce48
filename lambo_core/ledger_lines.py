"""What one ledger line holds: a call, a write's completion, or a heartbeat.

Each line is built from what the call already answered (its arguments and its
structuredContent), never from what it refused: a refused call's line says only the tool,
the agent (when its id is valid), the time and that it was an error. No line carries an
image, a vector's values, a credential or a refused payload; a recall by image or vector
says only ``by``. Spec: lambo_recall ("With --ledger ..."), lambo_derive (Replacement
candidates), lambo_stats (receipt counts, promotion_policy, the ``ledger_*`` keys).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from .errors import LamboError
from .layers.internal import WRITE_TOOLS
from .recall.fusion import FUSED_SHOWN, FUSION_RANK_KEYS
from .recall.lines import ANNOTATION_CONTRADICTION
from .text import check_agent_id

LINE_VERSION = 1
#: the query a recall line quotes, in UTF-8 bytes (cut on a character boundary)
MAX_QUERY_BYTES = 512
#: the hit keys a recall line copies from structuredContent.hits[] (never content)
HIT_KEYS = (
    "node_id",
    "session",
    "score",
    "is_canonical",
    "blast_radius",
    "companion_of",
    "possibly_superseded_by",
    "skipped_redundant",
    "also_skipped_redundant",
)
#: what a recall hit row's fusion may hold (recall.fusion.fusion_of)
FUSION_KEYS = (*(key for _, key in FUSION_RANK_KEYS), *FUSED_SHOWN)
#: a write receipt's counts a completion line carries (spec: lambo_stats, receipt)
RECEIPT_COUNTS = (
    "created_count",
    "matched_count",
    "semantic_merged",
    "reinforced",
    "edges",
    "embedded",
)


def timestamp(at: float) -> str:
    """UTC, to the millisecond, as every line writes it."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
    return f"{whole}.{int(at * 1000) % 1000:03d}Z"


def _agent(arguments: object) -> str | None:
    agent = arguments.get("agent_id") if isinstance(arguments, Mapping) else None
    try:
        return check_agent_id(agent) if isinstance(agent, str) else None
    except LamboError:  # an id the call was refused for is not repeated
        return None


def _cut(text: str, max_bytes: int) -> str:
    return text.encode()[:max_bytes].decode(errors="ignore")


def call_line(
    *,
    session: str,
    tool: str,
    arguments: object,
    answer: Mapping[str, Any],
    ms: float,
    at: float,
    private: object = None,
) -> dict[str, Any]:
    """One tool call's line, from the answer the client got (``ToolResult.to_json``) and
    the ledger's part of it the client did not get (``private``: a recall's annotations
    and fusion per hit, ``RecallResult.ledger``)."""
    line: dict[str, Any] = {
        "v": LINE_VERSION,
        "kind": "call",
        "at": timestamp(at),
        "session": session,
        "tool": tool,
        "ms": round(ms, 2),
    }
    agent = _agent(arguments)
    if agent is not None:
        line["agent_id"] = agent
    if answer.get("isError"):
        line["outcome"] = "error"
        return line
    line["outcome"] = "ok"
    args: Mapping[str, Any] = arguments if isinstance(arguments, Mapping) else {}
    structured = answer.get("structuredContent")
    structured = structured if isinstance(structured, Mapping) else {}
    scope = args.get("scope")
    if isinstance(scope, str):
        line["scope"] = _cut(scope, MAX_QUERY_BYTES)
    if tool == "lambo_recall":
        line.update(_recall_fields(args, structured, private))
    elif tool in WRITE_TOOLS:
        for key in ("receipt", "receipt_state", "session"):
            if isinstance(structured.get(key), str):
                line["written_to" if key == "session" else key] = structured[key]
    return line


def _recall_fields(
    args: Mapping[str, Any], structured: Mapping[str, Any], private: object
) -> dict[str, Any]:
    out: dict[str, Any] = {"by": _recall_by(args)}
    query = args.get("query")
    if isinstance(query, str) and query:
        out["query"] = _cut(query, MAX_QUERY_BYTES)
    hits = structured.get("hits")
    rows = [
        {key: hit[key] for key in HIT_KEYS if key in hit}
        for hit in (hits if isinstance(hits, list) else [])
        if isinstance(hit, Mapping)
    ]
    _annotate(rows, private)
    out["hits"] = rows
    kinds = {note.get("kind") for row in rows for note in row.get("annotations", ())}
    if ANNOTATION_CONTRADICTION in kinds:
        out["contradiction_warning"] = True
    sessions: dict[str, int] = {}
    for row in rows:
        if isinstance(row.get("session"), str):
            sessions[row["session"]] = sessions.get(row["session"], 0) + 1
    if sessions:  # a layered recall: hits per session
        out["session_hits"] = sessions
    superseded = sum(1 for row in rows if "possibly_superseded_by" in row)
    if superseded:
        out["possibly_superseded"] = superseded
    warnings = structured.get("warnings")
    out["warnings"] = len(warnings) if isinstance(warnings, list) else 0
    return out


def _annotate(rows: list[dict[str, Any]], private: object) -> None:
    """Each hit row gains its ``annotations`` (kind, line and the ids it names) and its
    ``fusion`` from the ledger's part, matched by position and node id; anything not as
    ``RecallResult.ledger`` writes it is left out."""
    extra = private.get("hits") if isinstance(private, Mapping) else None
    if not isinstance(extra, list):
        return
    for row, more in zip(rows, extra, strict=False):
        if not isinstance(more, Mapping) or more.get("node_id") != row.get("node_id"):
            continue
        notes = more.get("annotations")
        if isinstance(notes, list):
            row["annotations"] = [
                {k: v for k, v in note.items() if isinstance(k, str) and isinstance(v, str)}
                for note in notes
                if isinstance(note, Mapping) and isinstance(note.get("kind"), str)
            ]
        fusion = more.get("fusion")
        if isinstance(fusion, Mapping):
            row["fusion"] = {
                k: v
                for k, v in fusion.items()
                if k in FUSION_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool)
            }


def _recall_by(args: Mapping[str, Any]) -> str:
    if args.get("image") is not None:
        return "image"
    if args.get("query_vector") is not None:
        return "vector"
    return "text"


def completion_line(
    *, session: str, tool: str, agent_id: str, receipt: Mapping[str, Any], at: float
) -> dict[str, Any]:
    """A write's completion, from its settled receipt (``receipts.to_structured``): its
    state and counts, and its replacement candidates as cosines and flags, never ids or
    text."""
    line: dict[str, Any] = {
        "v": LINE_VERSION,
        "kind": "completion",
        "at": timestamp(at),
        "session": session,
        "tool": tool,
        "agent_id": agent_id,
        "receipt": receipt.get("receipt"),
        "state": receipt.get("state"),
    }
    for key in RECEIPT_COUNTS:
        if isinstance(receipt.get(key), int):
            line[key] = receipt[key]
    replacements = receipt.get("replacement_candidates")
    if isinstance(replacements, Mapping):
        rows = [r for r in replacements.get("candidates", []) if isinstance(r, Mapping)]
        line["replacement_candidates"] = replacements.get("total", len(rows))
        line["replacement_cosines"] = [r.get("cosine") for r in rows]
        if any(r.get("merged") for r in rows):
            line["replacement_merged"] = [bool(r.get("merged")) for r in rows]
        if any(r.get("newer") for r in rows):
            line["replacement_newer"] = [bool(r.get("newer")) for r in rows]
    return line


def heartbeat_line(
    *, session: str, role: str, stats: Mapping[str, Any], at: float
) -> dict[str, Any]:
    """A heartbeat: the lambo_stats payload (one builder for the tool, its summary and this
    line, so promotion_policy is the live one) and the serve's role in the session."""
    line: dict[str, Any] = {
        "v": LINE_VERSION,
        "kind": "heartbeat",
        "at": timestamp(at),
        "session": session,
        "role": role,
    }
    line.update((k, v) for k, v in stats.items() if k not in ("receipt", "write_receipts"))
    line["session"] = session
    return line
