"""Images and client vectors over stdio: a real `lambo serve`, spoken to by the MCP client.

With client vectors on (the MiniLM model's contract), three images derived by vector are each
recalled by a nearby vector and by their caption's words through the keyword leg. With the
tests' two-tower model, a generated PNG is found by a text query sharing no word with its
caption (the vector leg) and by a second, similar generated image.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path
from typing import Any

import anyio
import numpy as np
from mcp import Client

from tests.e2e.conftest import body, stdio_params

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
                ack = body(
                    await client.call_tool(
                        "lambo_derive_image",
                        {
                            "agent_id": AGENT,
                            "caption": caption,
                            "concept_type": "resource",
                            "image_id": f"w{i}",
                            "vector": {"values": unit(vector), "contract": contract},
                        },
                    )
                )
                await wait_applied(client, ack)
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
                assert hit_contents(by_words)[0] == content, by_words["context"]

    anyio.run(scenario)


def _png(colour: tuple[int, int, int], noise: int, seed: int) -> str:
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = np.clip(
        np.array(colour, dtype=np.int16) + rng.integers(-noise, noise + 1, (48, 64, 3)), 0, 255
    ).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "RGB").save(out, format="PNG")
    return base64.b64encode(out.getvalue()).decode("ascii")
