"""A fresh `lambo serve` warns on the contradictions its store already holds, at once.

The daemon's first whole cycle is one interval (60 s) after start; the recall
below is made as soon as the new serve answers, so the Contradicted line can
only come from the start pass or from recall checking every hit before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
from mcp import Client

from tests.e2e.test_serve_stdio import params, structured


async def derive(client: Client, agent: str, concept: dict[str, Any]) -> None:
    ack = structured(
        await client.call_tool("lambo_derive", {"agent_id": agent, "concepts": [concept]})
    )
    stats = structured(
        await client.call_tool(
            "lambo_stats", {"agent_id": agent, "receipt": ack["receipt"], "wait_ms": 30_000}
        )
    )
    assert stats["receipt"]["state"] == "applied", stats["receipt"]


def test_recall_right_after_a_restart_shows_the_stored_contradiction(served_home: Path) -> None:
    async def write() -> None:
        async with Client(params(served_home)) as client:
            await derive(client, "agent-a", {"content": "user schema", "concept_type": "entity"})
            await derive(
                client,
                "agent-c",
                {
                    "content": "accounts replaced the users table",
                    "concept_type": "observation",
                    "against": ["user schema"],
                },
            )

    anyio.run(write)  # the serve stops at the end of its stdin

    async def read() -> tuple[str, dict[str, Any]]:
        async with Client(params(served_home)) as client:
            recalled = await client.call_tool(
                "lambo_recall", {"agent_id": "agent-b", "query": "user schema"}
            )
            body = structured(recalled)
            stats = structured(await client.call_tool("lambo_stats", {"agent_id": "agent-b"}))
            assert stats["canonization_cycles"] == 0  # no whole cycle has run in this serve
            return recalled.content[0].text, body  # type: ignore[union-attr]

    text, body = anyio.run(read)
    blocks = text.split("\n\n")
    schema = next(b for b in blocks if b.startswith("user schema [Entity]"))
    assert "⚠ Contradicted at " in schema
    assert 'by agent-c: "accounts replaced the users table" (id ' in schema
    beside = next(b for b in blocks if b.startswith("accounts replaced the users table ["))
    assert '⚠ Contradicts "user schema" (id ' in beside
    assert body["context"] == text
    assert any(w.startswith("⚠ Contradicted at ") for w in body["warnings"])
    contents = [hit["content"] for hit in body["hits"]]
    assert contents.index("user schema") < contents.index("accounts replaced the users table")
    assert all("included_in_context" not in hit for hit in body["hits"])
