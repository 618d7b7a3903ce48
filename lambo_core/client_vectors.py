"""A vector a caller computed, ``{values, contract}``, checked and made a unit float32 row.

Spec: lambo_derive_image's ``vector`` row and "Client vectors"; lambo_recall's
``query_vector`` takes the same shape and checks. The declared contract must be exactly
the session's ``embedding_contract``; the values must be at most 4096 numbers, as many as
its ``dim``, finite and not all zero. Lambo cannot tell whether the vector really came
from the model the contract names, which is why ``[embedder] accept_client_vectors`` is
the operator's decision (checked by the caller of this module, not here). A refusal names
the field and the rule, and never repeats a value or the contract that was sent.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .embed.base import EmbeddingContract
from .errors import ParameterError
from .image_input import DIGEST_CHARS
from .limits import MAX_VECTOR_VALUES
from .model import Vector
from .session import describe_contract
from .text import show_safely

MAX_VALUES = MAX_VECTOR_VALUES
_FIELDS = ("values", "contract")
_CONTRACT_FIELDS = ("kind", "model", "dim")


def check_client_vector(field: str, value: object, contract: EmbeddingContract) -> Vector:
    """``value`` as a read-only unit float32 row, or a ``ParameterError`` naming ``field``'s rule.

    Checked in order: the object's keys, the number of values (counted before any is
    read), the declared contract against ``contract`` (the session's), the width, each
    value, then the length. The values are normalized in float64 after dividing by the
    largest magnitude, so neither a huge nor a tiny vector overflows or underflows before
    it is cast to float32.
    """
    if not isinstance(value, Mapping):
        raise ParameterError(f"{field} must be an object {{values, contract}}")
    _check_keys(field, value, _FIELDS)
    values = value["values"]
    if not isinstance(values, list):
        raise ParameterError(f"{field}.values must be an array of numbers")
    if len(values) > MAX_VALUES:
        raise ParameterError(
            f"{field}.values has {len(values)} values; at most {MAX_VALUES} are accepted"
        )
    _check_contract(f"{field}.contract", value["contract"], contract)
    if len(values) != contract["dim"]:
        raise ParameterError(
            f"{field}.values has {len(values)} values, but the session's embedding contract "
            f"has dim {contract['dim']}"
        )
    for i, item in enumerate(values):
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            raise ParameterError(
                f"{field}.values[{i}] must be a number (true and false are not numbers)"
            )
        if not _finite(item):
            raise ParameterError(
                f"{field}.values[{i}] is not finite (NaN and infinity are refused)"
            )
    row = np.array(values, dtype=np.float64)
    scale = float(np.max(np.abs(row))) if row.size else 0.0
    if scale == 0.0:
        raise ParameterError(f"{field}.values has zero length; a vector must not be all zeros")
    scaled = row / scale
    unit = (scaled / np.linalg.norm(scaled)).astype(np.float32)
    unit /= np.linalg.norm(unit)  # exact unit length in float32 too
    unit.setflags(write=False)
    return unit


def vector_digest(v: Vector) -> str:
    """The default image id of a client vector: the first ``DIGEST_CHARS`` hex characters of
    the sha256 of its normalized float32 bytes (little-endian), so the same vector, however
    it was scaled when sent, maps to the same concept. ``ImageInput.digest`` gives an
    image's id at the same length; both match ``^[a-z0-9]{1,64}$``."""
    row = np.ascontiguousarray(v, dtype="<f4")
    return hashlib.sha256(row.tobytes()).hexdigest()[:DIGEST_CHARS]


def _check_keys(field: str, value: Mapping[Any, Any], fields: tuple[str, ...]) -> None:
    for name in value:
        if name not in fields:
            shown = show_safely(str(name), 64)
            raise ParameterError(
                f"{field}.{shown} is not a field of {field}; it takes {', '.join(fields)}"
            )
    for name in fields:
        if name not in value or (value[name] is None and name != "model"):
            raise ParameterError(f"{field}.{name} is required")


def _check_contract(field: str, sent: object, session: EmbeddingContract) -> None:
    """Refuse a declared contract that is not exactly the session's, naming which parts
    differ and showing the session's; what was sent is never shown."""
    shown = describe_contract(dict(session))
    fix = f"the session's embedding contract is {shown} (lambo_stats embedding_contract)"
    if not isinstance(sent, Mapping):
        raise ParameterError(f"{field} must be an object {{kind, model, dim}}; {fix}")
    _check_keys(field, sent, _CONTRACT_FIELDS)
    expected: dict[str, object] = dict(session)
    differ = [name for name in _CONTRACT_FIELDS if not _same(sent[name], expected.get(name))]
    if differ:
        parts = " and ".join(differ) if len(differ) < 3 else "kind, model and dim"
        raise ParameterError(
            f"{field} differs from the session's in {parts}; {fix}, "
            "and a client vector must be in exactly that space"
        )


def _finite(item: int | float) -> bool:
    try:
        return math.isfinite(item)  # an int past float64's range overflows here
    except OverflowError:
        return False


def _same(sent: object, expected: object) -> bool:
    # Type-exact: dim 384.0, true for 1 or "384" are not the session's dim.
    return type(sent) is type(expected) and sent == expected
