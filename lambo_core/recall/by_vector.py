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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..client_vectors import check_client_vector
from ..embed.loader import EmbedderLoading
from ..errors import ConfigError, LamboError, ParameterError, StoreError
from ..image_input import ImageInput, check_image

if TYPE_CHECKING:
    from ..model import Vector
    from ..session import Session

BY_IMAGE = "image"
BY_VECTOR = "vector"


@runtime_checkable
class _ImageEmbedder(Protocol):
    """An embedder with the image modality (spec: "An embedder that embeds images")."""

    @property
    def modalities(self) -> list[str]: ...

    def embed_images(self, images: Sequence[bytes]) -> Vector: ...


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
    if has_image and "image" not in session.modalities:
        raise _no_image_embedder(session)
    if has_vector and not accept_client_vectors:
        raise ConfigError(
            f"{what} needs client vectors, which this server does not accept; the operator "
            "enables them with [embedder] accept_client_vectors = true. Recall by text instead"
        )
    _check_vector_search(session, what)
    if has_image:
        return ByVector(BY_IMAGE, image=check_image("image", args["image"]))
    vector = check_client_vector("query_vector", args["query_vector"], session.contract)
    return ByVector(BY_VECTOR, vector=vector)


def _no_image_embedder(session: Session) -> ConfigError:
    what = "recall by image needs an embedder that embeds images"
    problem = session.plan.problem
    if problem is not None:
        return ConfigError(
            f"{what}, and this server's embedding model is not usable: {problem.message}"
        )
    if session.plan.lazy is None:
        return ConfigError(
            f'{what}; this server has none (match_strategy = "canonical" or embedder.kind = '
            'none). Set match_strategy = "hybrid" with an image model as [embedder] model'
        )
    return ConfigError(
        f"{what}; this server's embedder embeds text only. Recall by text, or configure an "
        "image model (a two-tower model such as CLIP) as [embedder] model"
    )


def _check_vector_search(session: Session, what: str) -> None:
    """The vector leg needs an embedding contract (match_strategy = "hybrid" with a model)
    and a store that searches vectors."""
    if session.plan.problem is not None:
        raise ConfigError(
            f"{what} needs the session's embedding model, which is not usable: "
            f"{session.plan.problem.message}"
        )
    if session.plan.lazy is None:
        raise ConfigError(
            f"{what} needs vector search, and this server has no embedder (match_strategy = "
            '"canonical" or embedder.kind = none); set [embedder] match_strategy = "hybrid"'
        )
    if not session.store.has_vector_search:
        raise ConfigError(
            f"{what} needs a store with vector search, and this session's store has none; "
            'use [store] kind = "sqlite", "postgres" or "cockroach"'
        )


def search_vector(session: Session, by: ByVector, wait_s: float) -> Vector:
    """The vector the leg searches by: the client's, or the image embedded now, with no
    prompt and no cache. An embedder that is still loading past ``wait_s`` or fails on the
    image is an error (store error, the spec's class for an embedding failure)."""
    if by.vector is not None:
        return by.vector
    image = by.image
    assert image is not None
    try:
        embedder = session.embedder(wait_s)
    except EmbedderLoading:
        raise StoreError(
            "recall by image: the embedding model is still loading, so the image was not "
            "embedded and nothing was searched; retry shortly"
        ) from None
    if not isinstance(embedder, _ImageEmbedder) or "image" not in embedder.modalities:
        raise _no_image_embedder(session)
    try:
        rows = embedder.embed_images([image.data])
    except LamboError:
        raise
    except Exception as exc:
        # The exception's text is not logged: it could quote the bytes it failed on.
        raise StoreError(
            "the embedder failed on the image, so nothing was searched; the detail was logged",
            detail=f"{type(exc).__name__} while embedding a {image.mime} image "
            f"({image.width}x{image.height}, {len(image.data)} bytes)",
        ) from None
    vector: Vector = rows[0]
    return vector
