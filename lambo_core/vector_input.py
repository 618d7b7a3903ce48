"""What an image or a client vector needs from this server, and an image's embedding.

lambo_derive_image and lambo_recall's ``image`` / ``query_vector`` share these rules (spec:
lambo_derive_image, "Listed only where it can work"; lambo_recall, "Recall by image or by
vector"): the vector leg is the point, so whatever keeps it from running is a configuration
error naming what is missing, checked before the payload is read; an image is embedded with
no prompt and no cache, and an embedder that fails on it is an error whose logged detail
never quotes the bytes. ``what`` names the call in every message ("lambo_derive_image",
"recall by image").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .embed.base import embeds_images
from .embed.loader import EmbedderLoading
from .errors import ConfigError, LamboError, ParameterError, StoreError
from .image_input import ImageInput

if TYPE_CHECKING:
    from .model import Vector
    from .session import Session


def refuse_unconfigured(
    session: Session, what: str, *, image: bool, vector: bool, accept_client_vectors: bool
) -> None:
    """The configuration error for a call this server cannot serve: an image without an
    embedder that embeds images, a client vector with client vectors off, and either without
    vector search (an embedding model under match_strategy "hybrid", a store that searches)."""
    if image and "image" not in session.modalities:
        raise no_image_embedder(session, what)
    if vector and not accept_client_vectors:
        raise ConfigError(
            f"{what} needs client vectors, which this server does not accept; the operator "
            "enables them with [embedder] accept_client_vectors = true"
        )
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


def no_image_embedder(session: Session, what: str) -> ConfigError:
    needs = f"{what} needs an embedder that embeds images"
    problem = session.plan.problem
    if problem is not None:
        return ConfigError(
            f"{needs}, and this server's embedding model is not usable: {problem.message}"
        )
    if session.plan.lazy is None:
        return ConfigError(
            f'{needs}; this server has none (match_strategy = "canonical" or embedder.kind = '
            'none). Set match_strategy = "hybrid" with an image model as [embedder] model'
        )
    return ConfigError(
        f"{needs}; this server's embedder embeds text only. Configure an image model (a "
        "two-tower model such as CLIP) as [embedder] model"
    )


def embed_image(session: Session, image: ImageInput, wait_s: float, what: str) -> Vector:
    """The unit vector the session's embedder makes of one checked image, uncached. A model
    still loading past ``wait_s``, or failing on the image, is a store error (the spec's
    class for an embedding failure), never an answer without it."""
    try:
        embedder = session.embedder(wait_s)
    except EmbedderLoading:
        raise StoreError(
            f"{what}: the embedding model is still loading, so the image was not embedded; "
            "retry shortly"
        ) from None
    if not embeds_images(embedder):  # the manifest said image; the loaded model must too
        raise no_image_embedder(session, what)
    try:
        rows = embedder.embed_images([image.data])
    except ParameterError as exc:  # the model's own refusal of this image, by its field
        raise ParameterError(exc.message.replace("images[0]", "image", 1)) from None
    except ConfigError:
        raise
    except LamboError as exc:  # the model failed on it (its own words are logged, not shown)
        raise StoreError(
            f"{what}: the embedder failed on the image; the detail was logged",
            detail=exc.detail or exc.message,
        ) from None
    except Exception as exc:
        # The exception's text is not logged: it could quote the bytes it failed on.
        raise StoreError(
            f"{what}: the embedder failed on the image; the detail was logged",
            detail=f"{type(exc).__name__} while embedding a {image.mime} image "
            f"({image.width}x{image.height}, {len(image.data)} bytes)",
        ) from None
    vector: Vector = rows[0]
    return vector
