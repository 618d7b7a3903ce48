"""What one forget asks of a store, and how its texts are scrubbed from the rows that keep them.

A forget removes concepts and their edges, and must not leave their content behind: a
settled intent keeps the payload of the write that made the concept (and of any write that
cited it by its text), an interaction keeps its call's text as its summary. Each store's
``forget`` deletes the concepts and, in the same transaction, rewrites every such string so
that each forgotten content is replaced by ``[forgotten <digest>]``, records a
``ForgetEvent`` (ids and digests only) and settles the forget's intent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .model import ForgetEvent, short_id

#: the intent tool of a forget (an admin tool: never listed to an MCP client)
FORGET_TOOL = "lambo.forget"
#: hex digits of the digest the marker shows (the audit event keeps all 64)
MARKER_DIGITS = 12


def content_digest(content: str) -> str:
    """The SHA-256 (hex) of a concept's content: what the audit keeps instead of the text."""
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def marker(digest: str) -> str:
    return f"[forgotten {digest[:MARKER_DIGITS]}]"


@dataclass(frozen=True)
class ForgetRequest:
    """One forget, as its intent is applied: the store does all of it in one transaction."""

    session: str
    agent_id: str
    occurred_at: float
    node_ids: tuple[str, ...]
    contents: tuple[str, ...]  # each node's content (to scrub), in node_ids' order
    forced: bool
    receipt_id: str | None  # the forget's pending intent, settled applied in the transaction
    keys: tuple[str, ...] = ()  # their canonical keys: a payload keeps them beside the text

    @property
    def digests(self) -> tuple[str, ...]:
        return tuple(content_digest(c) for c in self.contents)

    def event(self, edges_removed: int) -> ForgetEvent:
        return ForgetEvent(
            session=self.session,
            agent_id=self.agent_id,
            occurred_at=self.occurred_at,
            node_ids=self.node_ids,
            digests=self.digests,
            edges_removed=edges_removed,
            forced=self.forced,
            receipt_id=self.receipt_id,
        )

    def outcome(self, edges_removed: int) -> dict[str, Any]:
        """The receipt's outcome (also what the settled intent keeps: no content)."""
        shown = ", ".join(short_id(n) for n in self.node_ids)
        return {
            "detail": (
                f"forgot {len(self.node_ids)} concept(s) ({shown}) and {edges_removed} edge(s); "
                "their text was scrubbed from the session's stored writes"
            ),
            "data": {
                "forgotten": list(self.node_ids),
                "forgotten_count": len(self.node_ids),
                "edges_removed": edges_removed,
                "forced": self.forced,
            },
        }

    def scrubber(self) -> Scrubber:
        return Scrubber((*self.contents, *self.keys))


class Scrubber:
    """Replaces every forgotten content inside strings (longest first, so a content that
    contains another is replaced whole)."""

    def __init__(self, contents: Sequence[str]) -> None:
        unique = {c for c in contents if c}
        self.pairs = [(c, marker(content_digest(c))) for c in sorted(unique, key=len, reverse=True)]

    @property
    def needles(self) -> list[str]:
        """Each content as it appears inside the stores' JSON text (``rows.to_json``), for a
        cheap prefilter of the rows worth reading."""
        from .store.rows import to_json

        return [to_json(c)[1:-1] for c, _ in self.pairs]

    def text(self, value: str) -> str:
        for content, mark in self.pairs:
            if content in value:
                value = value.replace(content, mark)
        return value

    def json(self, value: Any) -> Any:
        """``value`` (parsed JSON) with every string, key or value, scrubbed."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self.json(v) for v in value]
        if isinstance(value, dict):
            return {self.text(k): self.json(v) for k, v in value.items()}
        return value

    def json_text(self, text: str | None) -> str | None:
        """A stored JSON text scrubbed, or None when it holds no forgotten content."""
        import json

        from .store.rows import to_json

        if text is None or not any(n in text for n in self.needles):
            return None
        scrubbed = to_json(self.json(json.loads(text)))
        return scrubbed if scrubbed != text else None
