"""A real `lambo serve` process, driven over stdio by the mcp SDK's own client, on each
store (``served_store``: SQLite, RAM, PostgreSQL)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.e2e.conftest import lambo_argv, serve_env


def params(home: Path, *extra: str) -> StdioServerParameters:
    argv = lambo_argv()
    return StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", "e2e", *extra],
        env=serve_env(home),
        cwd=str(home),
    )


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_handshake_tools_write_and_read_your_write(
    served_home: Path, served_store: str, mode: str
) -> None:
    async def scenario() -> None:
        async with Client(params(served_home), mode=mode) as client:
            assert client.instructions is not None
            assert "session 'e2e'" in client.instructions
            tools = await client.list_tools()
            names = [t.name for t in tools.tools]
            assert names == [
                "lambo_recall",
                "lambo_derive",
                "lambo_record_action",
                "lambo_reserve",
                "lambo_inspect",
                "lambo_stale",
                "lambo_saints",
                "lambo_stats",
            ]
            for tool in tools.tools:
                assert tool.input_schema["additionalProperties"] is False

            ack = structured(
                await client.call_tool(
                    "lambo_derive",
                    {
                        "agent_id": "agent-a",
                        "concepts": [{"content": "user schema", "concept_type": "entity"}],
                    },
                )
            )
            assert ack["receipt_state"] == "pending"
            assert "created" not in ack

            stats = structured(
                await client.call_tool(
                    "lambo_stats",
                    {"agent_id": "agent-a", "receipt": ack["receipt"], "wait_ms": 30_000},
                )
            )
            assert stats["receipt"]["state"] == "applied"
            assert stats["concept_count"] == 1
            assert stats["embedding_contract"] == {"kind": "onnx", "model": "minilm", "dim": 384}
            assert stats["write_queue_lane_bound"] == 64

            recalled = await client.call_tool(
                "lambo_recall", {"agent_id": "agent-a", "query": "what is the user schema"}
            )
            hits = structured(recalled)["hits"]
            assert hits and hits[0]["content"] == "user schema"
            assert recalled.content[0].text.startswith("user schema [Entity] (score ")  # type: ignore[union-attr]

    anyio.run(scenario)


def test_refusals_are_error_results(served_home: Path, served_store: str) -> None:
    async def scenario() -> None:
        async with Client(params(served_home)) as client:
            bad = await client.call_tool(
                "lambo_derive",
                {"agent_id": "a", "concepts": [{"content": "x", "concept_type": "Entity"}]},
            )
            assert bad.is_error
            text = bad.content[0].text  # type: ignore[union-attr]
            assert text.endswith(
                "unknown variant Entity, expected one of entity, logic, "
                "constraint, resource, observation"
            )
            tools = [t.name for t in (await client.list_tools()).tools]
            assert len(tools) == 8
            for tool in tools:
                typo = await client.call_tool(tool, {"agent_id": "a", "agnet": "x"})
                assert typo.is_error
                assert "agnet is not an argument of " + tool in typo.content[0].text  # type: ignore[union-attr]

    anyio.run(scenario)


def test_piggyback_and_restart_keep_every_write(served_home: Path, served_store: str) -> None:
    async def first() -> None:
        async with Client(params(served_home)) as client:
            receipts: list[str] = []
            delivered: list[str] = []
            for i in range(5):
                ack = structured(
                    await client.call_tool(
                        "lambo_derive",
                        {
                            "agent_id": "a",
                            "concepts": [{"content": f"fact {i}", "concept_type": "logic"}],
                        },
                    )
                )
                receipts.append(ack["receipt"])
                delivered += [r["receipt"] for r in ack.get("write_receipts", [])]
            # Asking for a receipt by id consumes it, so it never rides again.
            waited = structured(
                await client.call_tool(
                    "lambo_stats", {"agent_id": "a", "receipt": receipts[-1], "wait_ms": 30_000}
                )
            )
            assert waited["receipt"]["state"] == "applied"
            delivered += [r["receipt"] for r in waited.get("write_receipts", [])]
            later = await client.call_tool("lambo_stats", {"agent_id": "a"})
            body = structured(later)
            delivered += [r["receipt"] for r in body.get("write_receipts", [])]
            if body.get("write_receipts"):
                assert later.content[1].text.startswith("write receipts:")  # type: ignore[union-attr]
            # Every other write's outcome rode on a later response, once each.
            assert sorted(delivered) == sorted(receipts[:4])
            # Another agent gets none of them, and may not ask for them.
            other = structured(
                await client.call_tool("lambo_stats", {"agent_id": "b", "receipt": receipts[0]})
            )
            assert other["receipt"]["state"] == "forbidden"
            assert "write_receipts" not in other

    anyio.run(first)

    async def second() -> None:
        async with Client(params(served_home)) as client:
            stats = structured(await client.call_tool("lambo_stats", {"agent_id": "a"}))
            # a memory store is the process's own: a restart starts it empty
            assert stats["concept_count"] == (0 if served_store == "memory" else 5)

    anyio.run(second)
