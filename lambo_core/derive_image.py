"""lambo_derive_image: one image stored as a concept, checked and embedded before the ack.

The call is read in two steps. ``read_image_call`` runs first, outside every lock: it checks
the arguments in the spec's table order, refuses what this server is not configured for,
decodes and checks the image (or the client vector) and embeds the image, so a slow model
blocks no other write. ``admit_derive_image`` then names the parent_of ends against the
graph (the caller holds the index lock) and builds the payload the intent stores: the
caption with its ``[image:<id>]`` suffix, the vector and where it came from, never the
image bytes (spec: lambo_derive_image).
"""

from __future__ import annotations

import base64
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from .admission import (
    FRAME_SEPARATOR,
    MAX_PARENT_OF_PAIRS,
    PARENT_OF_ARGS,
    Admitted,
    check_hierarchy_acyclic,
    read_pairs,
)
from .args import check_arguments, check_list, check_scope, require
from .call_scope import CallScope
from .client_vectors import check_client_vector, vector_digest
from .embed.base import EmbeddingContract
from .embed.loader import read_model_facts, wants_embedder
from .errors import LamboError, ParameterError, StoreError
from .image_input import check_image
from .index.graph import SessionGraph
from .layer_paths import refuse_relative_in_derive
from .model import ConceptType, Vector
from .session import contracts_equal
from .text import (
    MAX_STRING_BYTES,
    canonical_key,
    check_agent_id,
    check_concept_type,
    check_string,
    has_image_suffix,
    parse_event_time,
    show_safely,
)
from .vector_input import embed_image, refuse_unconfigured

if TYPE_CHECKING:
    from .config import Config
    from .session import Session

log = logging.getLogger(__name__)

TOOL = "lambo_derive_image"
ARGS = (
    "agent_id",
    "caption",
    "concept_type",
    "image_id",
    "image",
    "vector",
    "event_time",
    "parent_of",
    "scope",
)
IMAGE_ID_RE = re.compile(r"[a-z0-9]{1,64}", re.ASCII)
#: Where a vector came from, as a concept records it: the image's mime, or a client's.
CLIENT_SOURCE = "client"
#: An image concept may be any type but an observation (spec: concept_type).
IMAGE_TYPES = (ConceptType.ENTITY, ConceptType.LOGIC, ConceptType.CONSTRAINT, ConceptType.RESOURCE)


def image_suffix(image_id: str) -> str:
    return f" [image:{image_id}]"


@dataclass(frozen=True)
class ImageSettings:
    """The settings of the whole server process that decide what lambo_derive_image (and a
    recall by image or vector) can do here."""

    accept_client_vectors: bool = False
    model_wait_s: float = 3.0  # [recall] model_wait_ms: how long a call waits for the model

    @classmethod
    def from_config(cls, config: Config) -> ImageSettings:
        return cls(
            accept_client_vectors=bool(config.get("embedder.accept_client_vectors")),
            model_wait_s=int(config.get("recall.model_wait_ms")) / 1000.0,
        )


def lists_image_tool(settings: ImageSettings, modalities: list[str]) -> bool:
    """Whether a server lists lambo_derive_image: its embedder embeds images, or the
    operator accepts client vectors (spec: "Listed only where it can work")."""
    return settings.accept_client_vectors or "image" in modalities


def configured_modalities(config: Config) -> list[str]:
    """What the configured model embeds, read from its manifest without loading it; none
    when no embedder is wanted or its model is missing (every write then says why)."""
    if not wants_embedder(config):
        return []
    try:
        return read_model_facts(config)[1]
    except LamboError:
        return []


def image_tool_listed(config: Config) -> bool:
    """Whether a serve with ``config`` lists lambo_derive_image, read without loading the
    model (its manifest says what it embeds)."""
    return lists_image_tool(ImageSettings.from_config(config), configured_modalities(config))


@dataclass(frozen=True)
class ImageCall:
    """A lambo_derive_image call read and embedded (``read_image_call``), before admission."""

    agent_id: str
    caption: str
    concept_type: ConceptType
    image_id: str
    vector: Vector  # unit float32
    contract: EmbeddingContract  # the space the vector is in: the session's, when read
    source: str  # the image's mime, or CLIENT_SOURCE
    event_time: float | None
    pairs: list[dict[str, str]]

    @property
    def content(self) -> str:
        return self.caption + image_suffix(self.image_id)


def read_image_call(session: Session, args: object, settings: ImageSettings) -> ImageCall:
    """Check a lambo_derive_image call in the spec's order and embed its image (no lock is
    held: the model may take a while). Refusals name the field and never show the payload."""
    call = check_arguments(TOOL, args, ARGS)
    agent_id = check_agent_id(require(call, "agent_id"))
    caption = check_string("caption", require(call, "caption"))
    if has_image_suffix(caption):
        raise ParameterError(
            "caption may not contain an image suffix ([image:<id>]) of its own; "
            "lambo_derive_image adds the one for image_id"
        )
    ctype = check_concept_type("concept_type", require(call, "concept_type"))
    if ctype not in IMAGE_TYPES:
        raise ParameterError(
            "concept_type must be one of entity, logic, constraint, resource: an image "
            "cannot be an observation"
        )
    given_id = _image_id(call.get("image_id"))
    has_image = call.get("image") is not None
    has_vector = call.get("vector") is not None
    if has_image == has_vector:
        raise ParameterError("send exactly one of image, vector")
    refuse_unconfigured(
        session,
        TOOL,
        image=has_image,
        vector=has_vector,
        accept_client_vectors=settings.accept_client_vectors,
    )
    image = check_image("image", call["image"]) if has_image else None
    if image is not None:
        digest, source = image.digest(), image.mime
    else:
        vector = check_client_vector("vector", call["vector"], session.contract)
        digest, source = vector_digest(vector), CLIENT_SOURCE
    # the default: 16 hex characters of the digest, so a caption may be at most 16,359 bytes
    image_id = given_id or digest
    _check_caption_size(caption, image_id)
    event_time = None
    if call.get("event_time") is not None:
        event_time = parse_event_time("event_time", call["event_time"])
    pairs = _pairs(call.get("parent_of") or [], caption + image_suffix(image_id))
    check_scope(call.get("scope"), session.name, writing=True)
    if image is not None:  # last: the model runs only for a call that passed every check
        vector = embed_image(session, image, settings.model_wait_s, TOOL)
    return ImageCall(
        agent_id, caption, ctype, image_id, vector, session.contract, source, event_time,
        pairs,
    )  # fmt: skip


def _image_id(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or IMAGE_ID_RE.fullmatch(value) is None:
        raise ParameterError(
            "image_id must be 1 to 64 lowercase letters and digits (^[a-z0-9]{1,64}$); omit "
            "it for an id made from a digest of the image or vector"
        )
    return value


def _check_caption_size(caption: str, image_id: str) -> None:
    limit = MAX_STRING_BYTES - len(image_suffix(image_id).encode("utf-8"))
    size = len(caption.encode("utf-8"))
    if size > limit:
        raise ParameterError(
            f"caption is {size} bytes; with image_id {image_id} it may be at most {limit} "
            f"bytes (the stored content, the caption plus [image:{image_id}], must fit in "
            f"{MAX_STRING_BYTES} bytes)"
        )


def _pairs(raw: object, content: str) -> list[dict[str, str]]:
    """parent_of, read as lambo_derive's; each end, framed with the image's content, must
    fit the embedding-text limit."""
    pairs = read_pairs(TOOL, check_list("parent_of", raw, MAX_PARENT_OF_PAIRS, what="pairs"))
    for i, pair in enumerate(pairs):
        for end in PARENT_OF_ARGS:
            framed = len(f"{pair[end]}{FRAME_SEPARATOR}{content}".encode())
            if framed > MAX_STRING_BYTES:
                raise ParameterError(
                    f"parent_of[{i}].{end} framed with the image's content is {framed} bytes; "
                    f"the embedding-text limit is {MAX_STRING_BYTES} bytes; shorten it"
                )
    return pairs


def admit_derive_image(
    image_call: ImageCall, graph: SessionGraph, *, layer: str | None = None
) -> Admitted:
    """Name the call's parent_of ends against the graph (the caller holds the index lock)
    and refuse a Hierarchical cycle; the payload the intent stores. ``layer`` names this
    session when it is a shared layer: a bare relative path is refused, as on lambo_derive."""
    if layer is not None:
        refuse_relative_in_derive(layer, None, [], image_call.pairs)
    content = image_call.content
    scope = CallScope(graph, None)
    scope.place_own(content, image_call.concept_type)
    ids = [
        scope.pair(f"parent_of[{i}].", p["parent"], p["child"], scope.land)
        for i, p in enumerate(image_call.pairs)
    ]
    check_hierarchy_acyclic(graph, ids)
    vector = np.ascontiguousarray(image_call.vector, dtype="<f4")
    payload: dict[str, Any] = {
        "kind": "derive_image",
        "event_time": image_call.event_time,
        "content": content,
        "key": canonical_key(content),
        "type": image_call.concept_type.value,
        "image_id": image_call.image_id,
        "source": image_call.source,
        # checked against the session's when the call arrived, and again when it is applied
        # (a replay under another model must not file this vector in the wrong space)
        "contract": dict(image_call.contract),
        # float32 bytes in base64: exact, and a quarter of the JSON a list of floats takes
        "vector": base64.b64encode(vector.tobytes()).decode("ascii"),
        "parent_of": image_call.pairs,
    }
    return Admitted(
        tool=TOOL,
        agent_id=image_call.agent_id,
        summary=(
            f"accepted image '{show_safely(content)}' for background write; validated, "
            "embedded and ordered, not yet applied"
        ),
        payload=payload,
    )


def payload_vector(payload: Mapping[str, Any], contract: EmbeddingContract) -> Vector:
    """The unit vector a stored derive_image payload holds, or the store error its receipt
    gives when it is not in the session's embedding space any more (a replay under another
    model) or cannot be read (a payload this build cannot apply is not applied)."""
    stored = payload.get("contract")
    if not isinstance(stored, dict) or not contracts_equal(stored, dict(contract)):
        raise StoreError(
            "this image's vector was checked against another embedding contract than the "
            "session's now; re-check the session's embedding contract (lambo_stats) and send "
            "it again; nothing was written"
        )
    dim = int(contract["dim"])
    try:
        raw = base64.b64decode(str(payload["vector"]), validate=True)
        vector = np.frombuffer(raw, dtype="<f4").astype(np.float32)
    except Exception:
        vector = np.zeros(0, dtype=np.float32)
    if vector.shape[0] != dim or not np.isfinite(vector).all():
        raise StoreError(
            "this image's stored vector does not fit the session's embedding contract; "
            "re-check the session's embedding contract (lambo_stats) and send it again; "
            "nothing was written"
        )
    return vector
