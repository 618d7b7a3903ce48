"""The domain model: plain dataclasses and enums shared by every layer.

Times are UTC epoch seconds (float). Node and interaction ids are UUID4
strings in the hyphenated form; the "short id" recall prints is the first 8
hex characters of a node id.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]


def new_id() -> str:
    """A fresh node / interaction id (hyphenated UUID4)."""
    return str(uuid.uuid4())


def short_id(node_id: str) -> str:
    """The 8-hex id recall renders for a node."""
    return node_id.replace("-", "")[:8]


class ConceptType(enum.Enum):
    """What a concept is. ``value`` is the lower-case wire name; ``label`` the rendered one."""

    ENTITY = "entity"
    LOGIC = "logic"
    CONSTRAINT = "constraint"
    RESOURCE = "resource"
    OBSERVATION = "observation"

    @property
    def label(self) -> str:
        return self.value.capitalize()

    @classmethod
    def wire_names(cls) -> list[str]:
        return [member.value for member in cls]


class Status(enum.Enum):
    """Canonization stage, in promotion order."""

    NONE = "none"
    CANDIDATE = "candidate"
    VENERABLE = "venerable"
    CANONICAL = "canonical"

    @property
    def label(self) -> str:
        return self.value.capitalize()


# The stages the spec singles out: kept past top_k when contradicted, never
# collected, load-bearing for the high-risk alert.
ESTABLISHED = frozenset({Status.VENERABLE, Status.CANONICAL})


class EdgeType(enum.Enum):
    """Kinds of edge. Direction is always ``src -> dst``.

    - DEPENDENCY: dependent -> the concept it rests on (depends_on).
    - HIERARCHICAL: parent -> child (parent_of).
    - PRODUCES / MODIFIES: action -> target (record_action; both "Causal").
    - CONTRADICTS: the contradicting concept -> the concept it names in against.
    - DERIVES: interaction -> each concept the call wrote.
    - COOCCURRENCE: between concepts written in one call.
    - SEMANTIC: a similarity link (weight = cosine).
    - SUPERSEDES_SUSPECTED: newer -> older, Lambo's reading that the newer concept may
      replace the older one (#198, "Possibly superseded, not declared"); a suspicion,
      not a declaration: no dependent, no contradiction.
    """

    DEPENDENCY = "dependency"
    HIERARCHICAL = "hierarchical"
    PRODUCES = "produces"
    MODIFIES = "modifies"
    CONTRADICTS = "contradicts"
    DERIVES = "derives"
    COOCCURRENCE = "cooccurrence"
    SEMANTIC = "semantic"
    SUPERSEDES_SUSPECTED = "supersedes_suspected"

    @property
    def is_causal(self) -> bool:
        return self in (EdgeType.PRODUCES, EdgeType.MODIFIES)


class InteractionKind(enum.Enum):
    DERIVE = "derive"
    ACTION = "action"
    DERIVE_IMAGE = "derive_image"


@dataclass
class Concept:
    id: str
    session: str
    content: str  # exactly as sent (after NFC)
    canonical_key: str
    concept_type: ConceptType
    created_at: float  # when lambo wrote it
    about_time: float  # event_time if given, never later than created_at
    agent_id: str
    interaction_id: str | None = None
    status: Status = Status.NONE
    access_count: int = 0
    repo_scope: str | None = None
    vector: Vector | None = None  # unit float32 row, or None (keyword-only)
    gc_survived: int = 0
    # Where the vector came from (lambo_derive_image keeps it, never the image bytes): None
    # for a text concept (embedded from its content, or keyword-only); the image's mime
    # ("image/png", "image/jpeg", "image/webp") when the server embedded an image; "client"
    # for a vector the client sent. Set once, when the concept is created.
    vector_source: str | None = None

    @property
    def is_image(self) -> bool:
        """An image concept (lambo_derive_image): its vector is not its text's embedding."""
        return self.vector_source is not None


@dataclass
class Edge:
    session: str
    src: str
    dst: str
    edge_type: EdgeType
    weight: float
    interaction_id: str | None
    agent_id: str
    created_at: float
    about_time: float


@dataclass
class Interaction:
    """One write call (derive or action): the source every edge it declared points back to."""

    id: str
    session: str
    agent_id: str
    kind: InteractionKind
    created_at: float
    about_time: float
    summary: str  # the call's text, for recent-interaction recall


@dataclass
class SessionRecord:
    name: str
    created_at: float
    embedding_contract: dict[str, Any] | None = None  # {kind, model, dim} once stamped
    last_gc_at: float | None = None
    last_gc_epoch: int = 0
    mutation_count: int = 0
    # Attached as a shared layer (such as general) at least once: its writes then refuse
    # bare relative paths, wherever they arrive (spec: lambo_derive, "Writing to a layer").
    shared_layer: bool = False


class IntentState(enum.Enum):
    """Durable state of an admitted write."""

    PENDING = "pending"
    APPLIED = "applied"
    FAILED = "failed"


@dataclass
class WriteIntent:
    """An admitted write, committed to the store before the ack."""

    receipt_id: str
    session: str
    agent_id: str
    tool: str  # "lambo_derive" | "lambo_record_action" | ...
    payload: dict[str, Any]  # the admitted, resolved call, JSON-serialisable
    created_at: float
    seq: int = 0  # assigned by the store: apply order within the store
    state: IntentState = IntentState.PENDING
    settled_at: float | None = None
    outcome: dict[str, Any] | None = None
    # The session the write was submitted through, whose responses carry its receipt: this
    # session, or a project that wrote into this layer with scope. None only on a row an
    # older build wrote, which recorded no destination.
    via: str | None = None

    @property
    def destination(self) -> str:
        """Who may ask for its receipt: the recorded ``via``, else (a row from before
        layers existed, when every write came through its own session) the session."""
        return self.via if self.via is not None else self.session


@dataclass
class CanonizationEvent:
    session: str
    node_id: str
    from_status: Status
    to_status: Status
    blast_radius: int | None
    occurred_at: float


@dataclass(frozen=True)
class ForgetEvent:
    """The audit record of one ``lambo forget``: who removed which concepts, when. Each
    removed concept is kept only as its id and the SHA-256 of its content, never the text
    (a pasted secret is what forget is for)."""

    session: str
    agent_id: str
    occurred_at: float
    node_ids: tuple[str, ...]
    digests: tuple[str, ...]  # sha256 hex of each concept's content, in node_ids' order
    edges_removed: int
    forced: bool  # --force: Canonical concepts were among them
    receipt_id: str | None


@dataclass
class Lease:
    """Who holds a session as its single writer."""

    session: str
    holder: str  # "agent@host#pid"
    pid: int
    agent: str
    acquired_at: float
    heartbeat_at: float
    expires_at: float
    token: int  # fencing token, grows on every takeover
    #: where the holder published its hub socket: None not yet, "" nowhere (it could not)
    socket: str | None = None


@dataclass
class WriteBatch:
    """Everything one applied write changes, committed in one store transaction."""

    session: str
    interaction: Interaction | None = None
    concepts: list[Concept] = field(default_factory=list)  # new concepts
    edges: list[Edge] = field(default_factory=list)  # new edges, or reinforcements (upsert)
    intent_receipt_id: str | None = None  # marked applied in the same transaction
    intent_outcome: dict[str, Any] | None = None
    # Set: the settled intent stores this payload instead (a scoped one, without its scope).
    intent_payload: dict[str, Any] | None = None
