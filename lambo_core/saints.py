"""lambo_saints: the session's Canonical concepts, largest blast radius first.

Spec: lambo_saints. Access counts include recalls counted in RAM and not yet written behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .args import check_arguments, check_scope, require
from .model import Status
from .text import check_agent_id, format_rfc3339, show_safely

if TYPE_CHECKING:
    from .session import Session

TOOL = "lambo_saints"
ARGUMENTS = ("agent_id", "scope")
SHOWN_CONTENT_CHARS = 200


def run_saints(session: Session, args: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """Answer one lambo_saints call: (text, structuredContent)."""
    checked = check_arguments(TOOL, args, ARGUMENTS)
    check_agent_id(require(checked, "agent_id"))
    check_scope(checked.get("scope"), session.name)

    rows: list[tuple[int, float, str, dict[str, Any]]] = []
    with session.index.lock:
        graph = session.index.graph
        for concept in graph.iter_concepts():
            if concept.status is not Status.CANONICAL:
                continue
            radius = graph.blast_radius(concept.id)
            row: dict[str, Any] = {
                "node_id": concept.id,
                "content": concept.content,
                "concept_type": concept.concept_type.label,
                "blast_radius": radius,
                "access_count": concept.access_count + session.access_counts.pending(concept.id),
                "created_at": format_rfc3339(concept.created_at),
            }
            if concept.repo_scope is not None:
                row["repo_scope"] = concept.repo_scope
            rows.append((radius, concept.created_at, concept.id, row))
    rows.sort(key=lambda r: (-r[0], r[1], r[2]))
    saints = [row for *_, row in rows]

    if not saints:
        text = (
            f'no canonical concepts in session "{session.name}": none has been promoted to '
            "Canonical yet"
        )
        return text, {"saints": [], "total": 0}
    noun = "concept" if len(saints) == 1 else "concepts"
    lines = [f'{len(saints)} canonical {noun} in session "{session.name}":']
    for row in saints:
        repo = f', repo "{show_safely(row["repo_scope"], 200)}"' if "repo_scope" in row else ""
        lines.append(
            f"{show_safely(row['content'], SHOWN_CONTENT_CHARS)} [{row['concept_type']}{repo}] "
            f"(node_id {row['node_id']}, blast radius {row['blast_radius']}, "
            f"access count {row['access_count']}, created {row['created_at']})"
        )
    return "\n".join(lines), {"saints": saints, "total": len(saints)}
