"""check_client_vector and vector_digest: every refusal of the spec's vector rows, and the
unit float32 row a good vector becomes. No refusal repeats a value or the contract sent."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from lambo_core.client_vectors import MAX_VALUES, check_client_vector, vector_digest
from lambo_core.embed.base import make_contract
from lambo_core.errors import ParameterError
from lambo_core.image_input import DIGEST_CHARS

DIM = 8
SESSION = make_contract("onnx", "minilm-test", DIM)
SHOWN = "{kind: onnx, model: minilm-test, dim: 8}"
# values no message could hold by chance: a leak of any of them is visible
VALUES = [0.7315926, -0.2468135, 0.1357924, 0.8642097, -0.5791346, 0.3141593, 0.2718282, 0.6180339]


def sent(values: object = None, **contract: object) -> dict[str, object]:
    return {
        "values": list(VALUES) if values is None else values,
        "contract": {**SESSION, **contract},
    }


def refused(value: object) -> str:
    with pytest.raises(ParameterError) as info:
        check_client_vector("query_vector", value, SESSION)
    return info.value.render()


def payload_texts(value: object) -> list[str]:
    """What was sent, as text a leak would show: each number's digits, each string."""
    out: list[str] = []
    if isinstance(value, dict):
        for item in value.values():
            out += payload_texts(item)
    elif isinstance(value, list):
        for item in value[:64]:
            out += payload_texts(item)
    elif isinstance(value, float) and np.isfinite(value):
        out.append(repr(value)[:8])
    elif isinstance(value, str) and len(value) > 2 and value not in ("onnx", "minilm-test"):
        out.append(value)
    return out


MISMATCH = "query_vector.contract differs from the session's in "
FIX = f"; the session's embedding contract is {SHOWN} (lambo_stats embedding_contract)"
REFUSALS: list[tuple[str, object, str]] = [
    ("not an object", VALUES, "query_vector must be an object {values, contract}"),
    ("no values", {"contract": dict(SESSION)}, "query_vector.values is required"),
    ("no contract", {"values": VALUES}, "query_vector.contract is required"),
    (
        "an extra key",
        {**sent(), "scale": 2},
        "query_vector.scale is not a field of query_vector; it takes values, contract",
    ),
    ("values not an array", sent("0.73, -0.24"), "query_vector.values must be an array of numbers"),
    (
        "4097 values (counted before any is read)",
        sent(["not a number"] * (MAX_VALUES + 1)),
        "query_vector.values has 4097 values; at most 4096 are accepted",
    ),
    (
        "a contract that is a string",
        {"values": VALUES, "contract": "onnx"},
        "query_vector.contract must be an object {kind, model, dim}" + FIX,
    ),
    (
        "a contract without dim",
        {"values": VALUES, "contract": {"kind": "onnx", "model": "minilm-test"}},
        "query_vector.contract.dim is required",
    ),
    (
        "a contract with an extra key",
        sent(pooling="mean"),
        "query_vector.contract.pooling is not a field of query_vector.contract; "
        "it takes kind, model, dim",
    ),
    ("kind differs", sent(kind="candle"), MISMATCH + "kind" + FIX),
    ("model differs", sent(model="bge-m3-secret-model"), MISMATCH + "model" + FIX),
    ("model null", sent(model=None), MISMATCH + "model" + FIX),
    ("dim differs", sent(VALUES[:7], dim=7), MISMATCH + "dim" + FIX),
    ("dim as a float", sent(dim=8.0), MISMATCH + "dim" + FIX),
    ("dim as a string", sent(dim="8"), MISMATCH + "dim" + FIX),
    ("kind and dim differ", sent(kind="gemini", dim=768), MISMATCH + "kind and dim" + FIX),
    (
        "all three differ",
        sent(kind="gemini", model="text-embedding-4", dim=768),
        MISMATCH + "kind, model and dim" + FIX,
    ),
    (
        "too few values",
        sent(VALUES[:7]),
        "query_vector.values has 7 values, but the session's embedding contract has dim 8",
    ),
    ("no values at all", sent([]), "query_vector.values has 0 values, but the session's"),
    (
        "a bool among the values",
        sent([*VALUES[:3], True, *VALUES[4:]]),
        "query_vector.values[3] must be a number (true and false are not numbers)",
    ),
    (
        "a string among the values",
        sent([*VALUES[:5], "0.1", *VALUES[6:]]),
        "query_vector.values[5] must be a number",
    ),
    (
        "a null among the values",
        sent([None, *VALUES[1:]]),
        "query_vector.values[0] must be a number",
    ),
    (
        "NaN",
        sent([*VALUES[:2], float("nan"), *VALUES[3:]]),
        "query_vector.values[2] is not finite (NaN and infinity are refused)",
    ),
    ("infinity", sent([*VALUES[:7], float("inf")]), "query_vector.values[7] is not finite"),
    ("minus infinity", sent([float("-inf"), *VALUES[1:]]), "query_vector.values[0] is not finite"),
    (
        "an integer past float64",
        sent([*VALUES[:4], 10**400, *VALUES[5:]]),
        "query_vector.values[4] is not finite",
    ),
    (
        "the zero vector",
        sent([0.0] * DIM),
        "query_vector.values has zero length; a vector must not be all zeros",
    ),
    ("the zero vector in integers", sent([0] * DIM), "query_vector.values has zero length"),
]


@pytest.mark.parametrize(
    ("value", "start"), [(v, s) for _, v, s in REFUSALS], ids=[c for c, *_ in REFUSALS]
)
def test_every_refusal_names_the_field_and_rule_and_never_the_payload(
    value: object, start: str
) -> None:
    message = refused(value)
    assert message.startswith(start), message
    for text in payload_texts(value):
        assert text not in message, (text, message)


def test_the_count_is_refused_before_the_contract_or_any_value() -> None:
    # a wrong contract and bad values too: the count alone answers
    value = {"values": [float("nan")] * 5000, "contract": {"kind": "x", "model": "y", "dim": 1}}
    assert refused(value) == "query_vector.values has 5000 values; at most 4096 are accepted"


def test_a_good_vector_becomes_a_read_only_unit_float32_row() -> None:
    row = check_client_vector("query_vector", sent(), SESSION)
    assert row.dtype == np.float32 and row.shape == (DIM,)
    assert abs(float(np.linalg.norm(row)) - 1.0) < 1e-6
    expected = np.array(VALUES) / np.linalg.norm(VALUES)
    assert np.allclose(row, expected, atol=1e-6)
    assert not row.flags.writeable
    # integers count as numbers; at the 4096 bound of a 4096-d contract too
    wide = make_contract("onnx", "wide", MAX_VALUES)
    big = check_client_vector("vector", {"values": [1] * MAX_VALUES, "contract": dict(wide)}, wide)
    assert abs(float(np.linalg.norm(big)) - 1.0) < 1e-6


@pytest.mark.parametrize("scale", [1e-300, 1e-30, 1.0, 1e30, 1e300])
def test_any_scale_normalizes_to_the_same_row_and_digest(scale: float) -> None:
    base = check_client_vector("query_vector", sent(), SESSION)
    scaled = check_client_vector("query_vector", sent([v * scale for v in VALUES]), SESSION)
    assert np.allclose(base, scaled, atol=1e-6)
    assert vector_digest(scaled) == vector_digest(base)


def test_a_model_of_null_matches_a_session_whose_model_is_null() -> None:
    default = make_contract("onnx", None, DIM)
    row = check_client_vector("vector", {"values": VALUES, "contract": dict(default)}, default)
    assert row.shape == (DIM,)
    with pytest.raises(ParameterError) as info:
        check_client_vector("vector", sent(), default)  # "minilm-test" is not null
    assert info.value.render().startswith("vector.contract differs from the session's in model")
    assert "{kind: onnx, model: null, dim: 8}" in info.value.render()
    assert "minilm-test" not in info.value.render()


def test_the_digest_is_a_default_image_id_of_the_normalized_bytes() -> None:
    row = check_client_vector("query_vector", sent(), SESSION)
    digest = vector_digest(row)
    assert len(digest) == DIGEST_CHARS == 16
    assert re.fullmatch(r"[a-z0-9]{1,64}", digest)
    assert digest == hashlib.sha256(row.astype("<f4").tobytes()).hexdigest()[:16]
    other = check_client_vector("query_vector", sent([*VALUES[:7], -VALUES[7]]), SESSION)
    assert vector_digest(other) != digest
