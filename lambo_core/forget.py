"""What one forget asks of a store, and which stored rows it redacts.

A forget removes concepts and their edges, and must not leave their content behind: the
settled intent of a write that landed on a forgotten concept (created it, merged into it,
named it in depends_on, against, produces or modifies) keeps that text in its payload, and
the interaction of a call that derived into it keeps the call's text as its summary. The
rows are found by where the text landed, never by string equality across the session (a
forgotten "type" must not touch any other row):

- an interaction with a derives edge into a forgotten concept: its whole summary becomes
  the ``[forgotten <sha256-12>]`` marker(s) of the concepts it derived there;
- a settled intent (not a forget's) whose payload or stored outcome names a forgotten id
  as a value (the resolved references; the outcome's created / matched / action_node, a
  stale report's rows): its payload becomes ``{"kind", "forgotten": [markers]}`` and its
  outcome keeps only its first detail line (applied) and its counts and id lists. Settled
  intents are never replayed; a receipt recovered after a restart reads only the outcome.

Each store's ``forget`` deletes the concepts and, in the same transaction, redacts those
rows, records a ``ForgetEvent`` (ids and digests only) and settles the forget's intent.
A write still owed a replay and older than the forget would bring the text back after it:
``writes/forget.py`` refuses the forget until that write has been applied.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .model import ForgetEvent, IntentState, short_id

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
                "the stored writes and interactions that held their text were redacted"
            ),
            "data": {
                "forgotten": list(self.node_ids),
                "forgotten_count": len(self.node_ids),
                "edges_removed": edges_removed,
                "forced": self.forced,
            },
        }

    def redaction(self) -> Redaction:
        return Redaction(
            {
                n: marker(content_digest(c))
                for n, c in zip(self.node_ids, self.contents, strict=True)
            }
        )


#: what a redacted intent's outcome keeps of its data beside the counts (ids, no text)
_KEPT_ID_DATA = ("created", "matched", "action_node")
#: a redacted outcome's detail when the intent was not applied (its detail may quote a ref)
REDACTED_DETAIL = "its text was redacted by a forget"


class Redaction:
    """The rows tied to the forgotten ids, and what replaces them (module docstring)."""

    def __init__(self, markers: Mapping[str, str]) -> None:
        self.markers = dict(markers)  # forgotten node id -> its marker

    @property
    def ids(self) -> list[str]:
        return list(self.markers)

    def summary(self, derived: Iterable[str]) -> str:
        """An interaction's summary, redacted: the markers of the forgotten concepts it
        derived (``derived``: those ids)."""
        named = set(derived)
        return " ".join(dict.fromkeys(m for n, m in self.markers.items() if n in named))

    def named(self, *values: Any) -> list[str]:
        """The forgotten ids that ``values`` (parsed JSON) hold as a string value."""
        found: set[str] = set()

        def walk(value: Any) -> None:
            if isinstance(value, str):
                if value in self.markers:
                    found.add(value)
            elif isinstance(value, list):
                for v in value:
                    walk(v)
            elif isinstance(value, dict):
                for v in value.values():  # keys are field names, never a reference
                    walk(v)

        for value in values:
            walk(value)
        return [n for n in self.markers if n in found]

    def intent(
        self, state: str, payload_text: str, outcome_text: str | None
    ) -> tuple[str, str | None] | None:
        """A settled intent's (payload, outcome) JSON, redacted; None when it names no
        forgotten id (it is left as it is)."""
        from .store.rows import to_json

        payload = json.loads(payload_text)
        outcome = json.loads(outcome_text) if outcome_text else None
        named = self.named(payload, outcome)
        if not named:
            return None
        marks = list(dict.fromkeys(self.markers[n] for n in named))
        kind = payload.get("kind") if isinstance(payload, dict) else None
        redacted = to_json({"kind": kind, "forgotten": marks})
        if not isinstance(outcome, dict):
            return redacted, outcome_text
        return redacted, to_json(_redacted_outcome(outcome, state, marks))


def _redacted_outcome(outcome: dict[str, Any], state: str, marks: list[str]) -> dict[str, Any]:
    detail = str(outcome.get("detail", ""))
    data = outcome.get("data")
    kept = {
        k: v
        for k, v in (data.items() if isinstance(data, dict) else ())
        if k in _KEPT_ID_DATA or isinstance(v, (bool, int, float))
    }
    return {
        # an applied write's first line is counts and short ids (writes/outcome.py)
        "detail": detail.split("\n", 1)[0]
        if state == IntentState.APPLIED.value
        else REDACTED_DETAIL,
        "data": kept,
        "forgotten": marks,
    }
