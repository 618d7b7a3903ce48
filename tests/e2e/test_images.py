"""Images and client vectors over stdio: a real `lambo serve`, spoken to by the MCP client.

With client vectors on (the MiniLM model's contract), three images derived by vector are each
recalled by a nearby vector and by their caption's words through the keyword leg. With the
tests' two-tower model, a generated PNG is found by a text query sharing no word with its
caption (the vector leg) and by a second, similar generated image.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from mcp import Client

from tests.e2e.conftest import body, stdio_params
from tests.two_tower import clip_home, png

AGENT = "dresscode"


def enable_client_vectors(home: Path) -> None:
    config = home / "config" / "lambo.toml"
    text = config.read_text().replace("[embedder]\n", "[embedder]\naccept_client_vectors = true\n")
    config.write_text(text)


async def wait_applied(client: Client, ack: dict[str, Any]) -> dict[str, Any]:
    stats = body(
        await client.call_tool(
            "lambo_stats", {"agent_id": AGENT, "receipt": ack["receipt"], "wait_ms": 30_000}
        )
    )
    receipt = dict(stats["receipt"])
    assert receipt["state"] == "applied", receipt
    return receipt


async def derive_image(
    client: Client, caption: str, image_id: str, **image_or_vector: Any
) -> dict[str, Any]:
    """One resource image derived as AGENT (``image=`` or ``vector=``); its applied receipt."""
    arguments = {
        "agent_id": AGENT,
        "caption": caption,
        "concept_type": "resource",
        "image_id": image_id,
        **image_or_vector,
    }
    return await wait_applied(client, body(await client.call_tool("lambo_derive_image", arguments)))


def unit(v: np.ndarray) -> list[float]:
    return [float(x) for x in v / np.linalg.norm(v)]


def hit_contents(answer: dict[str, Any]) -> list[str]:
    return [str(h["content"]) for h in answer["hits"]]


def test_three_images_by_vector_are_recalled_by_a_nearby_vector_and_by_words(
    served_home: Path,
) -> None:
    enable_client_vectors(served_home)
    rng = np.random.default_rng(20)
    captions = ["red silk saree, gold border", "indigo cotton kurta", "emerald wedding lehenga"]
    vectors = [rng.standard_normal(384) for _ in captions]

    async def scenario() -> None:
        async with Client(stdio_params(served_home, "wardrobe")) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            assert "lambo_derive_image" in tools
            stats = body(await client.call_tool("lambo_stats", {"agent_id": AGENT}))
            contract = stats["embedding_contract"]
            assert stats["embedding_modalities"] == ["text"]
            for i, (caption, vector) in enumerate(zip(captions, vectors, strict=True)):
                vector_of = {"values": unit(vector), "contract": contract}
                await derive_image(client, caption, f"w{i}", vector=vector_of)
            for i, (caption, vector) in enumerate(zip(captions, vectors, strict=True)):
                content = f"{caption} [image:w{i}]"
                nearby = vector + 0.2 * rng.standard_normal(384)
                by_vector = body(
                    await client.call_tool(
                        "lambo_recall",
                        {
                            "agent_id": AGENT,
                            "query_vector": {"values": unit(nearby), "contract": contract},
                        },
                    )
                )
                assert hit_contents(by_vector)[0] == content, by_vector["context"]
                word = caption.split()[1]  # silk, cotton, wedding: in one caption each
                by_words = body(
                    await client.call_tool("lambo_recall", {"agent_id": AGENT, "query": word})
                )
                # Found by its word: only the recent leg's fixed score (the last write's
                # interaction) may rank another image beside it.
                assert content in hit_contents(by_words)[:2], by_words["context"]

    anyio.run(scenario)


def data_of(image: bytes) -> str:
    return base64.b64encode(image).decode("ascii")


def test_a_generated_png_is_found_by_a_text_query_and_by_a_similar_image(
    lambo_home: Path, tmp_path: Path
) -> None:
    clip_home(lambo_home, tmp_path)
    red = png((230, 20, 30), (64, 48))
    blue = png((20, 30, 230), (64, 48))
    similar = png((250, 40, 20), (40, 56), patch=(0, 0, 0))  # another red, another shape

    async def scenario() -> None:
        async with Client(stdio_params(lambo_home, "wardrobe")) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            assert tools[:3] == ["lambo_recall", "lambo_derive", "lambo_derive_image"]
            stats = body(await client.call_tool("lambo_stats", {"agent_id": AGENT}))
            assert stats["embedding_modalities"] == ["text", "image"]
            for caption, image_id, image in (
                ("product one", "p1", red),
                ("product two", "p2", blue),
            ):
                image_of = {"mime": "image/png", "data": data_of(image)}
                await derive_image(client, caption, image_id, image=image_of)
            # "crimson" is in neither caption: only the vector leg can find the red image.
            by_text = body(
                await client.call_tool("lambo_recall", {"agent_id": AGENT, "query": "crimson"})
            )
            assert hit_contents(by_text)[0] == "product one [image:p1]", by_text["context"]
            by_image = body(
                await client.call_tool(
                    "lambo_recall",
                    {"agent_id": AGENT, "image": {"mime": "image/png", "data": data_of(similar)}},
                )
            )
            assert hit_contents(by_image)[0] == "product one [image:p1]", by_image["context"]
            # the image's bytes are not stored: the store holds the caption and the vector
            assert data_of(red) not in by_image["context"]

    anyio.run(scenario)


def test_a_second_serve_forwards_an_image_write_to_the_hub(served_home: Path) -> None:
    """Two serves of one session: the second lists lambo_derive_image as the first does and
    forwards the call to the hub, whose writer applies it."""
    enable_client_vectors(served_home)
    vector = unit(np.random.default_rng(5).standard_normal(384))

    async def scenario() -> None:
        async with Client(stdio_params(served_home, "shared")) as hub:
            first = body(await hub.call_tool("lambo_stats", {"agent_id": AGENT}))
            async with Client(stdio_params(served_home, "shared")) as second:
                tools = [t.name for t in (await second.list_tools()).tools]
                assert "lambo_derive_image" in tools
                contract = first["embedding_contract"]
                forwarded = {"values": vector, "contract": contract}
                await derive_image(second, "forwarded photo", "f1", vector=forwarded)
                stats = body(await second.call_tool("lambo_stats", {"agent_id": AGENT}))
                assert stats["holder_pid"] == first["holder_pid"]  # applied by the hub
            found = body(
                await hub.call_tool(
                    "lambo_recall",
                    {"agent_id": AGENT, "query_vector": {"values": vector, "contract": contract}},
                )
            )
            assert hit_contents(found)[0] == "forwarded photo [image:f1]"

    anyio.run(scenario)
