"""A layered session served in process, as `lambo serve --session lambo --layer general` holds
it: a real ``Serve`` on a store (RAM, or a SQLite file where two serves must meet), with a
keyword-only embedder so that no model loads. Shared by the test_layered_* modules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from lambo_core.config import Config, load_config
from lambo_core.serve import Serve, ServeOptions

AGENT = "agent-a"
CANONICAL = '[embedder]\nmatch_strategy = "canonical"\n'  # keyword-only: no model to load
PREFERENCE = "worktree branches are always rebased onto origin main first"
PROJECT_FACT = "the widgets release tarball is built by cargo xtask dist"
UNAVAILABLE = "recall: layer general is unavailable; results are from lambo only"
LAYER_WARNING = (
    "recall: these hits are from layer general, and their ids belong to it; "
    'pass scope = "general" to lambo_inspect to inspect one'
)
ACK_LINE = (
    "written to session 'general'; writes to different sessions have no ordering between them"
)


def layered_config(tmp: Path, *, sqlite: bool = False) -> Config:
    """A keyword-only config on a RAM store, or on ``tmp``/lambo.db with ``sqlite``."""
    store = f'[store]\npath = "{tmp / "lambo.db"}"\n' if sqlite else '[store]\nkind = "memory"\n'
    (tmp / "lambo.toml").write_text(CANONICAL + store)
    return load_config(env={"LAMBO_HOME": str(tmp)}, cwd=tmp)


@asynccontextmanager
async def serving(
    config: Config, session: str = "lambo", layers: tuple[str, ...] = ("general",)
) -> AsyncIterator[Serve]:
    serve = Serve(config, ServeOptions(session=session, layers=layers))
    await serve.start()
    try:
        yield serve
    finally:
        await serve.close()


def text(result: dict[str, Any]) -> str:
    """The first text block of a tool result."""
    return str(result["content"][0]["text"])


def body(result: dict[str, Any]) -> dict[str, Any]:
    """A tool result's structured content; the result must not be an error."""
    assert not result["isError"], result["content"]
    return dict(result["structuredContent"])


def refusal(result: dict[str, Any]) -> str:
    """The text of a refused call (the result must be an error)."""
    assert result["isError"], result
    return text(result)


def concept(content: str, kind: str = "logic", **extra: Any) -> dict[str, Any]:
    return {"content": content, "concept_type": kind, **extra}


async def derive(serve: Serve, content: str, *, scope: str | None = None, **extra: Any) -> str:
    """Write one concept (through ``serve``, with ``scope``), wait for it, and return its id."""
    arguments: dict[str, Any] = {"agent_id": AGENT, "concepts": [concept(content, **extra)]}
    if scope is not None:
        arguments["scope"] = scope
    receipt = body(await serve("lambo_derive", arguments))["receipt"]
    settled = await wait(serve, receipt)
    assert settled["state"] == "applied", settled
    return str(settled["created"][0] if settled["created"] else settled["matched"][0])


async def wait(serve: Serve, receipt: str, agent: str = AGENT) -> dict[str, Any]:
    """lambo_stats with the receipt, waiting for it to settle: its structured receipt."""
    answer = await serve("lambo_stats", {"agent_id": agent, "receipt": receipt, "wait_ms": 20_000})
    return dict(body(answer)["receipt"])
