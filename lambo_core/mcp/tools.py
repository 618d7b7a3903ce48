"""The published face of the tools: input schemas, descriptions, server instructions.

The schemas carry the Limits table's bounds so a client that validates can catch a
bad value early; lambo checks every call itself anyway (``args``), in the spec's order
and words. Spec: Tools, Limits, "How the server introduces itself".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..limits import MAX_BASE64_CHARS, MAX_VECTOR_VALUES
from ..model import ConceptType

STRING = 16_384  # characters; the real cap is 16 KB of UTF-8, checked by lambo

_AGENT_ID = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "description": "Your stable agent id (one line, at most 256 characters): your model or "
    "client id, the same on every call.",
}
_SCOPE = {
    "type": "string",
    "maxLength": STRING,
    "description": "The session to act on: omit it (or send this session's name) for this "
    "session, or name one of its layers.",
}
_REPO_SCOPE = {
    "type": "string",
    "maxLength": 512,
    "description": "The repository this call's paths belong to, one stable id such as "
    "github.com/acme/widgets (host/owner/repo, no scheme or .git): each repository gets its "
    "own concept for a path such as README.md. Omit it for paths shared by no repository.",
}
_EVENT_TIME = {
    "type": "string",
    "format": "date-time",
    "maxLength": 64,
    "description": "Optional RFC3339 about-time for a historical fact (a commit or document "
    "date). Omit it for a live fact.",
}


def _refs(max_items: int, what: str) -> dict[str, Any]:
    return {
        "type": "array",
        "maxItems": max_items,
        "items": {"type": "string", "maxLength": STRING},
        "description": what,
    }


def _object(required: list[str], properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": required,
        "properties": properties,
    }


# lambo_derive's and lambo_derive_image's parent_of: (parent, child) pairs of concept texts.
_PARENT_OF = {
    "type": "array",
    "maxItems": 256,
    "items": _object(
        ["parent", "child"],
        {
            "parent": {"type": "string", "minLength": 1, "maxLength": STRING},
            "child": {"type": "string", "minLength": 1, "maxLength": STRING},
        },
    ),
}

# An inline image (spec: lambo_derive_image's image row, Limits). The pattern is the strict
# base64 lambo checks (image_input.py), which names the exact rule a bad value breaks.
IMAGE = _object(
    ["mime", "data"],
    {
        "mime": {"type": "string", "enum": ["image/png", "image/jpeg", "image/webp"]},
        "data": {
            "type": "string",
            "maxLength": MAX_BASE64_CHARS,
            "pattern": "^[A-Za-z0-9+/]*={0,2}$",
            "description": "The image's bytes in standard base64, padded, on one line, "
            "without a data: prefix: at most 2 MiB decoded and 4096 pixels a side.",
        },
    },
)
# A vector the client computed, in the session's embedding space (lambo_stats'
# embedding_contract, copied as it is).
CLIENT_VECTOR = _object(
    ["values", "contract"],
    {
        "values": {
            "type": "array",
            "minItems": 1,
            "maxItems": MAX_VECTOR_VALUES,
            "items": {"type": "number"},
        },
        "contract": _object(
            ["kind", "model", "dim"],
            {
                "kind": {"type": "string", "maxLength": 64},
                "model": {"type": ["string", "null"], "maxLength": STRING},
                "dim": {"type": "integer", "minimum": 1, "maximum": MAX_VECTOR_VALUES},
            },
        ),
    },
)

SCHEMAS: dict[str, dict[str, Any]] = {
    "lambo_recall": _object(
        ["agent_id"],
        {
            "agent_id": _AGENT_ID,
            "query": {
                "type": "string",
                "maxLength": STRING,
                "description": "What to recall. Required unless image or query_vector is "
                "sent; beside them it is optional.",
            },
            "top_k": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
            "max_tokens": {"type": "integer", "minimum": 1, "maximum": 100_000, "default": 500},
            "traversal_depth": {"type": "integer", "minimum": 0, "maximum": 5, "default": 2},
            "image": {
                **IMAGE,
                "description": "Recall what is close to this image (at most one of image, "
                "query_vector). Needs an embedder that embeds images.",
            },
            "query_vector": {
                **CLIENT_VECTOR,
                "description": "Recall what is close to a vector you computed, with "
                "lambo_stats' embedding_contract as its contract (at most one of image, "
                "query_vector). Accepted only when the operator enabled client vectors.",
            },
            "scope": _SCOPE,
        },
    ),
    "lambo_derive": _object(
        ["agent_id", "concepts"],
        {
            "agent_id": _AGENT_ID,
            "concepts": {
                "type": "array",
                "minItems": 1,
                "maxItems": 64,
                "items": _object(
                    ["content", "concept_type"],
                    {
                        "content": {
                            "type": "string",
                            "minLength": 1,
                            "maxLength": STRING,
                            "description": "One fact, stated atomically and short.",
                        },
                        "concept_type": {"type": "string", "enum": ConceptType.wire_names()},
                        "depends_on": _refs(
                            8,
                            "Existing concepts this one rests on: the 8-hex id recall shows, "
                            "a full node id, or exact content.",
                        ),
                        "against": _refs(
                            8, "Existing concepts this one contradicts, named the same ways."
                        ),
                    },
                ),
            },
            "event_time": _EVENT_TIME,
            "parent_of": _PARENT_OF,
            "scope": _SCOPE,
            "repo_scope": _REPO_SCOPE,
        },
    ),
    "lambo_derive_image": _object(
        ["agent_id", "caption", "concept_type"],
        {
            "agent_id": _AGENT_ID,
            "caption": {
                "type": "string",
                "minLength": 1,
                "maxLength": STRING,
                "description": "What the image is, in words; lambo adds [image:<image_id>].",
            },
            "concept_type": {
                "type": "string",
                "enum": [t for t in ConceptType.wire_names() if t != "observation"],
            },
            "image_id": {
                "type": "string",
                "maxLength": 64,
                "pattern": "^[a-z0-9]{1,64}$",
                "description": "Your id for the image; omit it for one made from a digest of "
                "the image or vector.",
            },
            "image": {**IMAGE, "description": "The image, which the server embeds."},
            "vector": {
                **CLIENT_VECTOR,
                "description": "A vector you computed for the image, in the session's "
                "embedding space (accepted only where the operator enabled client vectors).",
            },
            "event_time": _EVENT_TIME,
            "parent_of": _PARENT_OF,
            "scope": _SCOPE,
        },
    ),
    "lambo_record_action": _object(
        ["agent_id", "action"],
        {
            "agent_id": _AGENT_ID,
            "action": {
                "type": "string",
                "minLength": 1,
                "maxLength": STRING,
                "description": "What you did, as a short line (merged PR #52).",
            },
            "event_time": _EVENT_TIME,
            "against": _refs(8, "Existing concepts this action shows to be wrong."),
            "produces": _refs(64, "What the action produced (64 entries across the three)."),
            "modifies": _refs(64, "What the action changed."),
            "depends_on": _refs(64, "What the action relied on: an id cites, text names."),
            "scope": _SCOPE,
            "repo_scope": _REPO_SCOPE,
        },
    ),
    "lambo_reserve": _object(
        ["agent_id", "node_id"],
        {
            "agent_id": _AGENT_ID,
            "node_id": {"type": "string", "maxLength": 64, "description": "A node UUID."},
            "ttl_seconds": {"type": "integer", "minimum": 1, "maximum": 3600, "default": 30},
            "release": {"type": "boolean", "default": False},
            "scope": _SCOPE,
        },
    ),
    "lambo_inspect": _object(
        ["agent_id", "focus"],
        {
            "agent_id": _AGENT_ID,
            "focus": {"type": "string", "minLength": 1, "maxLength": STRING},
            "depth": {"type": "integer", "minimum": 0, "maximum": 5, "default": 2},
            "scope": _SCOPE,
        },
    ),
    "lambo_stale": _object(
        ["agent_id"],
        {
            "agent_id": _AGENT_ID,
            "offset": {"type": "integer", "minimum": 0, "maximum": 10_000_000},
            "scope": _SCOPE,
        },
    ),
    "lambo_saints": _object(["agent_id"], {"agent_id": _AGENT_ID, "scope": _SCOPE}),
    "lambo_stats": _object(
        ["agent_id"],
        {
            "agent_id": _AGENT_ID,
            "receipt": {"type": "string", "maxLength": 128},
            "wait_ms": {
                "type": "integer",
                "minimum": 0,
                "description": "With receipt: wait up to this long (clamped at 34000).",
            },
        },
    ),
}

DESCRIPTIONS: dict[str, str] = {
    "lambo_recall": "Recall memory relevant to a query: a context block of concepts with "
    "canonical markers, blast-radius and contradiction warnings; hits as structured content.",
    "lambo_derive": "Store new concepts learned now: each one fact, short. Cite what a concept "
    "rests on in depends_on and what it shows wrong in against. Applied in the background; "
    "the ack carries a receipt.",
    "lambo_derive_image": "Store one image as a concept: a caption and the image (or a "
    "vector you computed for it, in the session's embedding space). Its content is the caption "
    "plus [image:<image_id>]; name it so in parent_of or an action's produces, modifies or "
    "depends_on. Applied in the background; the ack carries a receipt.",
    "lambo_record_action": "Record something you did, with what it produces, modifies and "
    "depends on. Applied in the background; the ack carries a receipt.",
    "lambo_reserve": "Take (or with release, drop) a soft lock on a node before editing it.",
    "lambo_inspect": "Look at a concept's neighbourhood: type, status, blast radius, "
    "dependents and edges both ways.",
    "lambo_stale": "List dependencies that rest on a contradicted concept.",
    "lambo_saints": "List the session's canonical memories.",
    "lambo_stats": "Session health, write-queue figures, and what happened to a write "
    "(receipt, with wait_ms to block until it lands).",
}

_INSTRUCTIONS = """\
Lambo agentic graph memory for session '{session}'. Call lambo_recall before acting on a task
to load relevant prior memory, lambo_derive and lambo_record_action to write what you
learned and did, lambo_reserve before editing a shared concept, and lambo_inspect /
lambo_saints / lambo_stats to look around. A concept is one fact, stated atomically and
short, such as a decision with its reason; it is not a log line or a paragraph, and
activity goes to lambo_record_action. When a write rests on a ruling or decision recall
showed you, cite it by its id (the 8 hex characters recall shows) in depends_on:
lambo_record_action's, or the concept's on lambo_derive. When a write shows an existing
concept to be wrong, name it the same way in against. Every tool takes your agent_id:
use one stable id for as long as you run, never one per call, task or topic: your model or client id
(<your-model-id>), with a stable instance suffix if several of you run at once. It is
caller-asserted and unverified. Work is recorded under it, so a stable id keeps
attribution whole. Soft locks are held under it: distinct ids contend for a node, and
callers sharing an id share its locks and can release each other's, so concurrent agents
that must keep out of each other's edits need distinct stable ids. created_at is
server-stamped: do not send a client flush timestamp. lambo_derive and lambo_record_action
may take optional RFC3339 event_time for historical about-time, such as a commit or
document date; omit it for a live fact, which is about now. Ordering is yours to manage,
and writes are applied in the BACKGROUND: lambo_derive and lambo_record_action return once
your input is validated and ordered, and their ack carries a receipt id. Their outcome
arrives on your next tool response. If you need a write visible to the very next read,
call lambo_stats with that receipt and a wait_ms first; otherwise carry on — writes you
send one after another are applied in that order (two you fire at once have no order to
keep)."""


# A layered session's paragraph (spec: "How the server introduces itself", the example for
# lambo layered with general). With several layers the examples name the first.
_LAYERED = """\
lambo_recall in session '{session}' also searches its shared layers: {layers}. Every recall hit
names the session it is from (structuredContent hits[].session, and 'from <session>' in a
layer hit's block), and its id belongs to that session: pass the same scope (scope =
"{layer}") to lambo_inspect to inspect a hit from that layer. Pass scope = "{layer}" to
lambo_recall to read that layer alone, or scope = "{session}" for this session alone. Writes
go to session '{session}' unless you pass scope: write a ruling or preference that applies in
every project with scope = "{layer}", and project facts, file actions and decisions without
a scope. A write's depends_on must name concepts in the session it writes to, and a write
into a layer refuses relative file paths. Writes to different sessions have no ordering
between them. lambo_reserve and lambo_saints take the same scope, and lambo_stats finds a
receipt from any of them."""


def instructions(session: str, layers: Sequence[str] = ()) -> str:
    """The server instructions: how the model should use the session's memory, and for a
    layered session one more paragraph on its layers (an unlayered one's are unchanged)."""
    text = _INSTRUCTIONS.format(session=session)
    if not layers:
        return text
    layered = _LAYERED.format(session=session, layers=", ".join(layers), layer=layers[0])
    return f"{text}\n\n{layered}"
