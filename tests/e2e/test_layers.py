"""Two projects layered over one `general`, as real stdio serves of one store.

A preference written with scope general in one project is recalled, labelled from general,
in the other; a project fact is not. A layer hit is inspected with its scope. The layer's
holder is SIGKILLed: a merged recall answers from the project alone with the unavailable
warning, and the layer comes back by takeover."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from lambo_core.config import load_config
from lambo_core.serve import Serve, ServeOptions
from tests.e2e.conftest import body, lambo_argv, serve_env

AGENT = "agent-a"
PREFERENCE = "worktree branches are always rebased onto origin main first"
PROJECT_FACT = "the widgets release tarball is built by cargo xtask dist"
UNAVAILABLE = "recall: layer general is unavailable; results are from proj-b only"


def params(home: Path, session: str) -> StdioServerParameters:
    argv = lambo_argv()
    return StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", session, "--layer", "general"],
        env=serve_env(home),
        cwd=str(home),
    )


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def recall(client: Client, query: str, **extra: Any) -> dict[str, Any]:
    arguments = {"agent_id": AGENT, "query": query, **extra}
    return body(await client.call_tool("lambo_recall", arguments))


async def settled(client: Client, receipt: str) -> str:
    answer = body(
        await client.call_tool(
            "lambo_stats", {"agent_id": AGENT, "receipt": receipt, "wait_ms": 30_000}
        )
    )
    return str(answer["receipt"]["state"])


def test_two_projects_share_general_and_survive_its_holder_dying(served_home: Path) -> None:
    async def scenario() -> None:
        async with Client(params(served_home, "proj-a")) as a:
            assert "also searches its shared layers: general" in (a.instructions or "")
            holder = body(await a.call_tool("lambo_stats", {"agent_id": AGENT}))["holder_pid"]
            ack = await a.call_tool(
                "lambo_derive",
                {
                    "agent_id": AGENT,
                    "scope": "general",
                    "concepts": [{"content": PREFERENCE, "concept_type": "logic"}],
                },
            )
            written = body(ack)
            assert written["session"] == "general"
            assert text_of(ack).splitlines()[-1] == (
                "written to session 'general'; writes to different sessions have no "
                "ordering between them"
            )
            assert await settled(a, written["receipt"]) == "applied"
            fact = body(
                await a.call_tool(
                    "lambo_derive",
                    {
                        "agent_id": AGENT,
                        "concepts": [{"content": PROJECT_FACT, "concept_type": "logic"}],
                    },
                )
            )
            assert "session" not in fact
            assert await settled(a, fact["receipt"]) == "applied"

            async with Client(params(served_home, "proj-b")) as b:
                found = await recall(b, "how are worktree branches rebased")
                from_general = [h for h in found["hits"] if h["content"] == PREFERENCE]
                assert from_general and from_general[0]["session"] == "general"
                assert f"{PREFERENCE} [Logic]" in found["context"]
                assert "from general)" in found["context"].split(PREFERENCE, 1)[1].split("\n")[0]
                assert all("session" in hit for hit in found["hits"])
                # proj-a's own fact is not proj-b's
                other = await recall(b, "how is the widgets release tarball built")
                assert PROJECT_FACT not in [h["content"] for h in other["hits"]]

                # a layer hit is inspected in its own scope
                node = from_general[0]["node_id"]
                inspected = await b.call_tool(
                    "lambo_inspect", {"agent_id": AGENT, "focus": node, "scope": "general"}
                )
                assert not inspected.is_error, inspected.content
                assert PREFERENCE in text_of(inspected)
                unscoped = await b.call_tool("lambo_inspect", {"agent_id": AGENT, "focus": node})
                assert unscoped.is_error  # its id belongs to general, not to proj-b

                # the holder of general (proj-a's serve) dies
                os.kill(holder, signal.SIGKILL)
                alone = await recall(b, "how are worktree branches rebased")
                assert UNAVAILABLE in alone["warnings"], alone["warnings"]
                assert all(h["session"] == "proj-b" for h in alone["hits"])

                # the layer comes back by takeover: a scoped call waits for the election
                for _ in range(30):
                    scoped = await b.call_tool(
                        "lambo_recall",
                        {"agent_id": AGENT, "query": "worktree branches", "scope": "general"},
                    )
                    if not scoped.is_error:
                        break
                    assert "is not serving right now" in text_of(scoped)
                else:
                    raise AssertionError("general did not come back in 30 calls")
                back = await recall(b, "how are worktree branches rebased")
                assert UNAVAILABLE not in back["warnings"]
                assert PREFERENCE in [h["content"] for h in back["hits"]]

    anyio.run(scenario)


KEYWORD_ONLY = '[embedder]\nmatch_strategy = "canonical"\n'


def test_a_paused_holder_of_general_stalls_one_merged_recall_not_every_call(
    tmp_path: Path,
) -> None:
    """The holder of general is alive but answers nothing (SIGSTOP). A merged recall answers
    from the project after the probe's bound (not the 600 s forward timeout), and later
    calls skip the paused holder for a while instead of waiting on it again."""
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "lambo.toml").write_text(
        KEYWORD_ONLY + "[serve]\nforward_timeout_s = 600.0\n"
    )

    async def scenario() -> None:
        async with Client(params(home, "proj-a")) as a:
            holder = body(await a.call_tool("lambo_stats", {"agent_id": AGENT}))["holder_pid"]
            config = load_config(env=serve_env(home), cwd=home)
            b = Serve(config, ServeOptions(session="proj-b", layers=("general",)))
            await b.start()
            try:
                layer = b.layers[0]
                assert layer.serve.hub.role == "forwarder"  # proj-a's serve holds general
                written = await b(
                    "lambo_derive",
                    {
                        "agent_id": AGENT,
                        "scope": "general",
                        "concepts": [{"content": PREFERENCE, "concept_type": "logic"}],
                    },
                )
                assert not written["isError"], written
                os.kill(holder, signal.SIGSTOP)
                try:
                    with anyio.fail_after(120):  # a hang guard, far above the probe bound
                        for _ in range(3):
                            alone = await b(
                                "lambo_recall", {"agent_id": AGENT, "query": "worktree branches"}
                            )
                            warnings = alone["structuredContent"]["warnings"]
                            assert UNAVAILABLE in warnings, warnings
                            assert layer.quiet  # the paused holder is skipped for now
                finally:
                    os.kill(holder, signal.SIGCONT)
            finally:
                await b.close()

    anyio.run(scenario)
