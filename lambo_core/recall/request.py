"""lambo_recall's arguments, configured defaults and result.

Arguments are checked in the order of the spec's table (spec: lambo_recall); ``image``
and ``query_vector`` by ``by_vector.check_by_vector`` (spec: "Recall by image or by
vector"), beside which ``query`` is optional and blank text counts as none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..args import check_arguments, check_int, check_scope, require
from ..contradiction import DEFAULT_EDGE_MIN_AGE_S
from ..errors import ParameterError
from ..selection import SelectionRules
from ..text import MAX_STRING_BYTES, canonical_key, check_agent_id, check_string
from .by_vector import ByVector, check_by_vector

if TYPE_CHECKING:
    from ..config import Config
    from ..session import Session

TOOL = "lambo_recall"
ARGUMENTS = (
    "agent_id",
    "query",
    "top_k",
    "max_tokens",
    "traversal_depth",
    "image",
    "query_vector",
    "scope",
)
TOP_K_RANGE = (1, 100)
MAX_TOKENS_RANGE = (1, 100_000)
DEPTH_RANGE = (0, 5)


@dataclass(frozen=True)
class RecallDefaults:
    """The configured defaults ([recall] in lambo.toml)."""

    top_k: int = 5
    max_tokens: int = 500
    traversal_depth: int = 2
    pillar_threshold: int = 5
    # canonization_edge_min_age: supporting evidence counts against a contradiction once
    # this old ([canonization] edge_min_age_s)
    edge_min_age_s: float = DEFAULT_EDGE_MIN_AGE_S
    # [selection] skip_redundant, similar_signals
    selection: SelectionRules = field(default_factory=SelectionRules)
    # [embedder] suspected_supersession_line: auto (where measured), on, off
    supersession_line: str = "auto"
    # [recall] model_wait_ms: how long a recall waits for a model still loading
    model_wait_ms: int = 3000
    # [recall] layer_relevance_floor: what a layer's hit needs to enter a merged recall
    layer_relevance_floor: float = 0.375
    # [embedder] accept_client_vectors: lambo_recall's query_vector is accepted
    accept_client_vectors: bool = False

    @classmethod
    def from_config(cls, config: Config) -> RecallDefaults:
        return cls(
            top_k=int(config.get("recall.top_k")),
            max_tokens=int(config.get("recall.max_tokens")),
            traversal_depth=int(config.get("recall.traversal_depth")),
            pillar_threshold=int(config.get("recall.pillar_threshold")),
            edge_min_age_s=float(config.get("canonization.edge_min_age_s")),
            selection=SelectionRules.from_config(config),
            supersession_line=str(config.get("embedder.suspected_supersession_line")),
            model_wait_ms=int(config.get("recall.model_wait_ms")),
            layer_relevance_floor=float(config.get("recall.layer_relevance_floor")),
            accept_client_vectors=bool(config.get("embedder.accept_client_vectors")),
        )


@dataclass
class RecallResult:
    """The context block (the tool's text), the hits and the warnings.

    ``annotations`` and ``fusion`` hold each hit's, in hit order (empty lists: none
    known); they never enter structuredContent (spec: lambo_recall, the annotation kinds),
    only ``annotated_hits``, which the portal's REST API and the --ledger line read.
    """

    context: str
    hits: list[dict[str, Any]]
    warnings: list[str]
    annotations: list[list[dict[str, str]]] = field(default_factory=list)
    fusion: list[dict[str, Any] | None] = field(default_factory=list)

    def structured(self) -> dict[str, Any]:
        return {"context": self.context, "hits": self.hits, "warnings": self.warnings}

    def annotated_hits(self) -> list[dict[str, Any]]:
        """The structured hits, each with its ``annotations`` (a list, empty when none) and
        its ``fusion`` where a query leg found it."""
        out = []
        for i, hit in enumerate(self.hits):
            notes = self.annotations[i] if i < len(self.annotations) else []
            row = {**hit, "annotations": [dict(note) for note in notes]}
            fusion = self.fusion[i] if i < len(self.fusion) else None
            if fusion is not None:
                row["fusion"] = dict(fusion)
            out.append(row)
        return out

    def ledger(self) -> dict[str, Any]:
        """What the --ledger line adds to each hit, in hit order: its annotations and, where
        a query leg found it, its fusion (``ledger_lines`` reads it)."""
        rows = []
        for hit in self.annotated_hits():
            row = {"node_id": hit["node_id"], "annotations": hit["annotations"]}
            if "fusion" in hit:
                row["fusion"] = hit["fusion"]
            rows.append(row)
        return {"hits": rows}


@dataclass(frozen=True)
class RecallRequest:
    """Validated arguments."""

    agent_id: str
    query: str
    top_k: int
    max_tokens: int
    traversal_depth: int
    # set: a recall by image or by vector, whose vector leg searches by it ("" query: no text)
    by: ByVector | None = None


def parse_request(session: Session, args: object, defaults: RecallDefaults) -> RecallRequest:
    """Validate lambo_recall's arguments in the spec's order; refusals name the rule."""
    checked = check_arguments(TOOL, args, ARGUMENTS)
    agent_id = check_agent_id(require(checked, "agent_id"))
    has_image = checked.get("image") is not None
    has_vector = checked.get("query_vector") is not None
    query = ""
    raw_query = checked.get("query")
    if raw_query is not None or not (has_image or has_vector):
        if raw_query is None:
            raise ParameterError("query is required (unless image or query_vector is sent)")
        query = check_string(
            "query", raw_query, max_bytes=MAX_STRING_BYTES, allow_empty=has_image or has_vector
        )
        if not canonical_key(query):  # beside an image or a vector, blank text is none
            query = ""
    top_k = _int_arg(checked, "top_k", defaults.top_k, TOP_K_RANGE)
    max_tokens = _int_arg(checked, "max_tokens", defaults.max_tokens, MAX_TOKENS_RANGE)
    depth = _int_arg(checked, "traversal_depth", defaults.traversal_depth, DEPTH_RANGE)
    by = check_by_vector(session, checked, accept_client_vectors=defaults.accept_client_vectors)
    check_scope(checked.get("scope"), session.name)  # a layer's scope is routed before this
    return RecallRequest(agent_id, query, top_k, max_tokens, depth, by)


def _int_arg(args: Mapping[str, Any], name: str, default: int, bounds: tuple[int, int]) -> int:
    value = args.get(name)
    if value is None:
        return default
    return check_int(name, value, *bounds)
