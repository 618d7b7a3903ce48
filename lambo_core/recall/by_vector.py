"""Recall by image or by vector: lambo_recall's ``image`` and ``query_vector``.

Spec: lambo_recall, "Recall by image or by vector". The vector leg searches by the image's
embedding or the client's vector instead of the text's; text beside it still feeds the
keyword leg. The vector leg is the point, so whatever keeps it from running is refused
before anything is read (a configuration error naming what is missing), and an embedder or
store failure is an error, never an answer from the other legs. Nothing is kept: the image
and the vector are not stored and not cached (the leg cache and the embedder's query cache
never see them), and no refusal repeats what was sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..client_vectors import check_client_vector
from ..errors import ParameterError
from ..image_input import ImageInput, check_image
from ..vector_input import embed_image, refuse_unconfigured

if TYPE_CHECKING:
    from ..model import Vector
    from ..session import Session

BY_IMAGE = "image"
BY_VECTOR = "vector"


@dataclass(frozen=True)
class ByVector:
    """What a recall searches the vector leg by, checked: the image or the client vector."""

    by: str  # BY_IMAGE or BY_VECTOR
    image: ImageInput | None = None
    vector: Vector | None = None

    def __repr__(self) -> str:  # neither the image nor the vector reaches a log by repr
        return f"ByVector({self.by})"


def recall_by(args: Mapping[str, Any]) -> str | None:
    """What a recall's arguments search the vector leg by: BY_IMAGE, BY_VECTOR, or None
    (by the text). Read before any check, to route the call (a layered session)."""
    if args.get("image") is not None:
        return BY_IMAGE
    if args.get("query_vector") is not None:
        return BY_VECTOR
    return None


def check_by_vector(
    session: Session, args: Mapping[str, Any], *, accept_client_vectors: bool
) -> ByVector | None:
    """The call's ``image`` or ``query_vector``, checked in the spec's order (None: neither).

    Both at once is a parameter error; then what keeps the vector leg from running is a
    configuration error naming it (an embedder that embeds images, client vectors, a store
    with vector search under match_strategy = "hybrid"); only then is the payload read.
    """
    has_image = args.get("image") is not None
    has_vector = args.get("query_vector") is not None
    if not (has_image or has_vector):
        return None
    if has_image and has_vector:
        raise ParameterError("send at most one of image, query_vector")
    what = "recall by image" if has_image else "recall by query_vector"
    refuse_unconfigured(
        session,
        what,
        image=has_image,
        vector=has_vector,
        accept_client_vectors=accept_client_vectors,
    )
    if has_image:
        return ByVector(BY_IMAGE, image=check_image("image", args["image"]))
    vector = check_client_vector("query_vector", args["query_vector"], session.contract)
    return ByVector(BY_VECTOR, vector=vector)


def search_vector(session: Session, by: ByVector, wait_s: float) -> Vector:
    """The vector the leg searches by: the client's, or the image embedded now, with no
    prompt and no cache. An embedder that is still loading past ``wait_s`` or fails on the
    image is an error (store error, the spec's class for an embedding failure)."""
    if by.vector is not None:
        return by.vector
    assert by.image is not None
    return embed_image(session, by.image, wait_s, "recall by image")
