"""An HTTP serve's sessions over one layer, in process: the serves ``serve_http`` builds
(``layer_serves``), held in its order, called as its endpoints call them.

Each layer is one serve for every session of the process: general served at its own address
is the very serve the projects' layer handles use, and a layer not served at an address is a
serve of its own that the projects share. No second election runs for a layer, and a stop
leaves no lease held and nothing running. The credential's reach narrows a layered call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.clock import SystemClock
from lambo_core.config import load_config
from lambo_core.embed.loader import LoadedModels
from lambo_core.hub import lease_free
from lambo_core.mcp.http.serve import layer_serves
from lambo_core.reach import reaching
from lambo_core.serve import Serve, ServeOptions
from lambo_core.store import SqliteStore

AGENT = "agent-a"
PREFERENCE = "worktree branches are always rebased onto origin main first"


def config(tmp_path: Path):  # type: ignore[no-untyped-def]
    (tmp_path / "lambo.toml").write_text(
        f'[store]\nkind = "sqlite"\npath = "{tmp_path}/m.db"\n'
        '[embedder]\nmatch_strategy = "canonical"\n'  # keyword memory: no model to load
    )
    return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path, flags={})


def options(served_general: bool) -> list[ServeOptions]:
    layered = [ServeOptions("a", layers=("general",)), ServeOptions("b", layers=("general",))]
    return [*layered, ServeOptions("general", as_layer=True)] if served_general else layered


async def held(tmp_path: Path, served_general: bool) -> tuple[list[Serve], list[Serve]]:
    """The serves as serve_http builds and holds them (layers first)."""
    cfg = config(tmp_path)
    opts = options(served_general)
    models = LoadedModels()
    layers, unserved = layer_serves(cfg, opts, models)
    serves = [
        layers.get(o.session) or Serve(cfg, o, models=models, layer_serves=layers) for o in opts
    ]
    for serve in serves:
        if serve.options.as_layer:
            await serve.hold()
    for serve in unserved:
        await serve.start()
    for serve in serves:
        if not serve.options.as_layer:
            await serve.hold()
    return serves, unserved


def body(result: dict[str, Any]) -> dict[str, Any]:
    assert not result.get("isError"), result["content"]
    structured = result["structuredContent"]
    assert isinstance(structured, dict)
    return structured


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


async def write_general(a: Serve) -> str:
    ack = body(
        await a(
            "lambo_derive",
            {
                "agent_id": AGENT,
                "scope": "general",
                "concepts": [{"content": PREFERENCE, "concept_type": "logic"}],
            },
        )
    )
    assert ack["session"] == "general"
    return str(ack["receipt"])


async def receipt_state(serve: Serve, receipt: str) -> str:
    answer = body(
        await serve("lambo_stats", {"agent_id": AGENT, "receipt": receipt, "wait_ms": 20_000})
    )
    return str(answer["receipt"]["state"])


def leases_free(path: Path, sessions: tuple[str, ...]) -> bool:
    store = SqliteStore(path)
    try:
        now = SystemClock().now()
        return all(lease_free(store.get_lease(s), now) for s in sessions)
    finally:
        store.close()


async def stop_all(everything: list[Serve]) -> None:
    async with anyio.create_task_group() as tg:
        for serve in everything:
            tg.start_soon(serve.close)


@pytest.mark.parametrize("served_general", [True, False], ids=["general-served", "general-hidden"])
def test_two_projects_share_one_in_process_general(tmp_path: Path, served_general: bool) -> None:
    async def scenario() -> None:
        serves, unserved = await held(tmp_path, served_general)
        a, b = serves[0], serves[1]
        general = serves[2] if served_general else unserved[0]
        try:
            # one serve of general for the process: the projects' handles use it, no
            # election of their own
            assert [h.serve for h in a.layers] == [general]
            assert [h.serve for h in b.layers] == [general]
            assert general.hub.role == "hub"
            receipt = await write_general(a)
            assert await receipt_state(a, receipt) == "applied"
            recalled = body(await b("lambo_recall", {"agent_id": AGENT, "query": "rebased"}))
            hit = recalled["hits"][0]
            assert (hit["content"], hit["session"]) == (PREFERENCE, "general")
            assert "from general" in text(
                await b("lambo_recall", {"agent_id": AGENT, "query": "rebased"})
            )
            # the receipt answers only through the session it was written through
            assert await receipt_state(b, receipt) == "forbidden"
            assert await receipt_state(general, receipt) == "forbidden"
        finally:
            with anyio.CancelScope(shield=True):
                await stop_all([*serves, *unserved])
        assert not any(s.unfinished for s in [*serves, *unserved])
        assert all(s.hub.role == "closed" for s in [*serves, *unserved])
        assert leases_free(tmp_path / "m.db", ("a", "b", "general"))

    anyio.run(scenario)


def test_a_credential_not_reaching_the_layer_is_refused_as_for_an_unknown_scope(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        serves, unserved = await held(tmp_path, served_general=True)
        a = serves[0]
        try:
            receipt = await write_general(a)
            assert await receipt_state(a, receipt) == "applied"
            with reaching(frozenset({"a"})):
                write = await a(
                    "lambo_derive",
                    {"agent_id": AGENT, "scope": "general", "concepts": [{"content": "x"}]},
                )
                read = await a(
                    "lambo_inspect", {"agent_id": AGENT, "scope": "general", "focus": "x"}
                )
                merged = body(await a("lambo_recall", {"agent_id": AGENT, "query": "rebased"}))
                stats = body(await a("lambo_stats", {"agent_id": AGENT, "receipt": receipt}))
            assert write["isError"] and text(write) == (
                "scope must name this session or one of its layers: a"
            )
            assert read["isError"] and text(read) == (
                'scope "general" is not a scope of this session; its scopes are: a'
            )
            # the merged recall reads only what the credential reaches, without a word
            assert merged["hits"] == []
            assert not any("general" in w for w in merged.get("warnings", []))
            # a receipt of a write into the layer it cannot reach is not known to it (not
            # even from the store's durable intent, which names general's concepts)
            assert stats["receipt"]["state"] == "restart_lost"
            assert "created" not in stats["receipt"]
            # the same session, reached in full, still reads general
            with reaching(frozenset({"a", "general"})):
                full = body(await a("lambo_recall", {"agent_id": AGENT, "query": "rebased"}))
            assert [h["session"] for h in full["hits"]] == ["general"]
        finally:
            with anyio.CancelScope(shield=True):
                await stop_all([*serves, *unserved])

    anyio.run(scenario)
