"""Every image and client-vector refusal of the spec, through a real `lambo serve` over stdio,
for lambo_derive_image and lambo_recall alike: each names its field and rule, and what was
sent appears nowhere, not in the answer, the serve's log or the store file.

Spec: lambo_derive_image ("Refusals never repeat your payload", "Client vectors"), the
Errors rows on contracts and configuration, and the image rows of "Limits".
"""

from __future__ import annotations

import base64
import io
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.paths import resolve_paths
from tests.e2e.conftest import serve_env
from tests.e2e.raw_serve import RawServe
from tests.two_tower import clip_home, png

AGENT = "dresscode"
CONTRACT = {"kind": "onnx", "model": "tiny-clip", "dim": 8}
# A value no message could hold by chance: its digits are the marker looked for.
MARK = 0.7315926535


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def wide_png(width: int, height: int) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), (200, 10, 10)).save(out, format="PNG")
    return out.getvalue()


def values(n: int = 8, first: float = MARK) -> list[float]:
    return [first] + [MARK / (i + 2) for i in range(n - 1)]


RED = b64(png((220, 20, 60)))
# 2 MiB + 1 random bytes: 2,796,204 characters, the most base64 the limit lets through, so
# it is the decoded size that is refused; four characters more are refused by their count.
TOO_BIG = b64(secrets.token_bytes(2 * 1024 * 1024 + 1))

# (case, the image or vector argument, the start of the refusal); the argument is sent as
# lambo_derive_image's image / vector and as lambo_recall's image / query_vector.
IMAGE_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("bad base64", {"mime": "image/png", "data": RED[:40] + "*" + RED[41:]}, "image.data "),
    ("no padding", {"mime": "image/png", "data": RED.rstrip("=")[:-1]}, "image.data "),
    ("line break", {"mime": "image/png", "data": RED[:40] + "\n" + RED[40:]}, "image.data "),
    ("data: prefix", {"mime": "image/png", "data": "data:image/png;base64," + RED}, "image.data "),
    ("wrong mime", {"mime": "image/jpeg", "data": RED}, "image: declared image/jpeg but"),
    ("not an image", {"mime": "image/png", "data": b64(b"GIF89a" + bytes(64))}, "image"),
    ("4097 pixels", {"mime": "image/png", "data": b64(wide_png(4097, 3))}, "image is 4097x3"),
    ("2 MiB + 1", {"mime": "image/png", "data": TOO_BIG}, "image.data decodes to 2097153"),
    ("too long", {"mime": "image/png", "data": TOO_BIG + "AAAA"}, "image.data is 2796208"),
]
SESSIONS = "; the session's embedding contract is {kind: onnx, model: tiny-clip, dim: 8}"
KIND = ".contract differs from the session's in kind" + SESSIONS
MODEL = ".contract differs from the session's in model" + SESSIONS
DIM = ".contract differs from the session's in dim" + SESSIONS
VECTOR_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("kind differs", {"values": values(), "contract": {**CONTRACT, "kind": "remote"}}, KIND),
    ("model differs", {"values": values(), "contract": {**CONTRACT, "model": "clip-b"}}, MODEL),
    ("dim differs", {"values": values(), "contract": {**CONTRACT, "dim": 9}}, DIM),
    ("NaN", {"values": [*values(7), float("nan")], "contract": CONTRACT}, ".values[7] is not"),
    ("zero vector", {"values": [0.0] * 8, "contract": CONTRACT}, ".values has zero length"),
    ("4097 values", {"values": values(4097), "contract": CONTRACT}, ".values has 4097 values"),
    ("wrong width", {"values": values(7), "contract": CONTRACT}, ".values has 7 values"),
]


def markers(argument: dict[str, Any]) -> list[str]:
    """What of ``argument`` must appear nowhere: pieces of its data, or its values' digits."""
    if "data" in argument:
        data = str(argument["data"])
        body = data.split(",", 1)[-1] if data.startswith("data:") else data
        return [body[8:40], body[-40:-8]]
    return ["7315926", "3657963", "remote", "clip-b"]  # MARK, MARK / 2, the contracts sent


@pytest.fixture
def clip_served(lambo_home: Path, tmp_path: Path) -> Iterator[tuple[RawServe, Path]]:
    """A serve of the tiny two-tower model with client vectors on: both paths can serve."""
    clip_home(lambo_home, tmp_path)
    config = lambo_home / "config" / "lambo.toml"
    config.write_text(config.read_text() + "accept_client_vectors = true\n")
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        serve = RawServe(lambo_home, None, session="wardrobe", stderr=err)
        try:
            yield serve, log
        finally:
            serve.close()


def answer(serve: RawServe, tool: str, arguments: dict[str, Any]) -> str:
    """The refusal's text: a tool error, or (a JSON value the protocol refuses) its error."""
    reply = serve.request("tools/call", {"name": tool, "arguments": arguments})
    if "error" in reply:
        return str(reply["error"]["message"])
    result = reply["result"]
    assert result["isError"] is True, result
    return str(result["content"][0]["text"])


def calls(field: str, argument: dict[str, Any]) -> list[tuple[str, dict[str, Any], str]]:
    """The two calls of one case: (tool, arguments, the field as that tool names it)."""
    recall_field = "query_vector" if field == "vector" else "image"
    derive = {
        "agent_id": AGENT,
        "caption": "refused photo",
        "concept_type": "resource",
        field: argument,
    }
    recall = {"agent_id": AGENT, recall_field: argument}
    return [("lambo_derive_image", derive, field), ("lambo_recall", recall, recall_field)]


def test_every_image_and_vector_refusal_leaks_nothing(
    clip_served: tuple[RawServe, Path], lambo_home: Path
) -> None:
    serve, log = clip_served
    seen: list[str] = []
    cases = [("image", *c) for c in IMAGE_CASES] + [("vector", *c) for c in VECTOR_CASES]
    for field, name, argument, start in cases:
        for tool, arguments, named in calls(field, argument):
            shown = answer(serve, tool, arguments)
            seen.append(shown)
            expected = start.replace("image", named, 1) if field == "image" else start
            if field == "vector":
                expected = named + start
            assert expected in shown, (name, tool, shown)
            for marker in markers(argument):
                assert marker not in shown, (name, tool, shown)
    # nothing was written, and the serve keeps answering
    stats = serve.call("lambo_stats", {"agent_id": AGENT})
    assert stats["concept_count"] == 0 and stats["write_queue_accepted"] == 0
    serve.close()
    logged = log.read_text(errors="replace")
    assert "holding session 'wardrobe'" in logged  # this is the serve's log
    store = resolve_paths(serve_env(lambo_home)).default_store.read_bytes()
    for _field, name, argument, _start in cases:
        for marker in markers(argument):
            assert marker not in logged, name
            assert marker.encode() not in store, name
    assert len(seen) == 2 * len(cases)


def test_config_off_refuses_each_path_naming_the_setting(
    served_home: Path, lambo_home: Path, tmp_path: Path
) -> None:
    """A text-only model with client vectors on: an image is refused naming the image model
    it needs; then with client vectors off, a vector is refused naming the setting (and
    lambo_derive_image is not even listed)."""
    config = served_home / "config" / "lambo.toml"
    base = config.read_text()
    minilm = {"kind": "onnx", "model": "minilm", "dim": 384}
    vector = {"values": values(384), "contract": minilm}
    image = {"mime": "image/png", "data": RED}
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        config.write_text(base + "accept_client_vectors = true\n")
        serve = RawServe(served_home, None, session="text-only", stderr=err)
        try:
            for tool, arguments, _named in calls("image", image):
                shown = answer(serve, tool, arguments)
                assert shown.startswith("configuration error: "), shown
                assert "needs an embedder that embeds images" in shown, shown
        finally:
            serve.close()
        config.write_text(base)
        serve = RawServe(served_home, None, session="text-only", stderr=err)
        try:
            listed = serve.request("tools/list", {})["result"]["tools"]
            assert "lambo_derive_image" not in [t["name"] for t in listed]
            shown = answer(serve, "lambo_recall", {"agent_id": AGENT, "query_vector": vector})
            assert shown.startswith("configuration error: "), shown
            assert "[embedder] accept_client_vectors = true" in shown
            unlisted = answer(serve, "lambo_derive_image", calls("vector", vector)[0][1])
            assert unlisted == "unknown tool; call tools/list for the tools"
        finally:
            serve.close()
    logged = log.read_text(errors="replace")
    for marker in markers(image) + markers(vector):
        assert marker not in logged
