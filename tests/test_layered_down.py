"""A layered session whose layer is not serving: detached (its handle closed), its attach
failed for good, or held by a serve that cannot be reached. A merged recall answers from the
project with the unavailable warning, a scoped call is refused (retryably, or as permanent),
and a receipt no book knows answers pending with the layer-down detail. Also: lambo_stats
through the project refuses a bad call before it looks a layer's receipt up. Spec: lambo_recall
"Layered sessions" (L229), lambo_derive "Writing to a layer" (L306), lambo_stats receipt
(L485)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core import serve as serve_module
from lambo_core.errors import ConfigError
from lambo_core.hub import LeaseKeeper
from lambo_core.receipts.layered import LAYER_DOWN_DETAIL
from lambo_core.serve import Serve
from lambo_core.store import open_store
from tests.layered_serve import (
    AGENT,
    PREFERENCE,
    PROJECT_FACT,
    UNAVAILABLE,
    body,
    concept,
    derive,
    layered_config,
    refusal,
    serving,
    text,
)

#: a receipt id of a book that is not this serve's (well formed, unknown nonce)
UNKNOWN_RECEIPT = "lwr1.0000000000000000.1a2342fd97f.2"
DETACHING = (
    'conflict: scope "general" is not serving right now (it is being detached), so nothing was '
    "read or written; retry shortly, or call without scope to act on lambo"
)
UNREACHABLE = (
    'conflict: scope "general" is not serving right now (another lambo serve holds its lease '
    "and cannot be reached), so nothing was read or written; retry shortly, or call without "
    "scope to act on lambo"
)
FAILED = (
    'configuration error: scope "general" cannot be served: attaching layer general failed for '
    "good (the reason is in the serve's log), so nothing was read or written; ask the operator "
    "to fix it"
)
SCOPED_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("lambo_recall", {"query": "rebased"}),
    ("lambo_inspect", {"focus": "rebased"}),
    ("lambo_saints", {}),
    ("lambo_stale", {}),
    ("lambo_reserve", {"node_id": "478416c2-0000-4000-8000-000000000000"}),
    ("lambo_derive", {"concepts": [concept("a shared rule")]}),
    ("lambo_record_action", {"action": "ran the tests"}),
]


async def the_layer_is_down(
    serve: Serve, refused: str, calls: list[tuple[str, dict[str, Any]]] = SCOPED_CALLS
) -> None:
    """What every call sees of a layer that is not serving, the project answering alone."""
    merged = body(await serve("lambo_recall", {"agent_id": AGENT, "query": "widgets tarball"}))
    assert merged["warnings"] == [UNAVAILABLE]
    assert [(h["content"], h["session"]) for h in merged["hits"]] == [(PROJECT_FACT, "lambo")]
    for tool, extra in calls:
        answer = await serve(tool, {"agent_id": AGENT, **extra, "scope": "general"})
        assert refusal(answer) == refused, tool
    stats = body(await serve("lambo_stats", {"agent_id": AGENT, "receipt": UNKNOWN_RECEIPT}))
    assert stats["receipt"] == {
        "receipt": UNKNOWN_RECEIPT,
        "state": "pending",
        "detail": LAYER_DOWN_DETAIL.format(layer="general"),
    }
    assert stats["session"] == "lambo"
    # the project itself still reads and writes
    assert body(await serve("lambo_derive", {"agent_id": AGENT, "concepts": [concept("x y")]}))
    assert body(await serve("lambo_recall", {"agent_id": AGENT, "query": "x", "scope": "lambo"}))


def test_a_detached_layer_is_refused_retryably(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(layered_config(tmp_path)) as serve:
            await derive(serve, PREFERENCE, scope="general")
            await derive(serve, PROJECT_FACT)
            await serve.layers[0].close()
            assert serve.layers[0].state == "detaching"
            await the_layer_is_down(serve, DETACHING)

    anyio.run(main)


def test_a_layer_whose_attach_failed_is_refused_as_permanent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = serve_module.open_service

    def open_service(store: Any, config: Any, options: Any, **kw: Any) -> Any:
        if options.session == "general":
            raise ConfigError("the layer's embedder does not match its store")
        return real(store, config, options, **kw)

    monkeypatch.setattr(serve_module, "open_service", open_service)

    async def main() -> None:
        async with serving(layered_config(tmp_path)) as serve:
            assert serve.layers[0].state == "failed"
            await derive(serve, PROJECT_FACT)
            await the_layer_is_down(serve, FAILED)

    anyio.run(main)


def test_a_layer_held_by_a_serve_that_cannot_be_reached_is_refused_retryably(
    tmp_path: Path,
) -> None:
    config = layered_config(tmp_path, sqlite=True)
    other = open_store("sqlite", config.store_path)
    # another holder of general, alive (this process) and publishing no socket
    holder = LeaseKeeper(other, "general", "elsewhere", ttl=60.0, heartbeat=20.0)
    assert holder.try_acquire() is not None

    async def main() -> None:
        async with serving(config) as serve:
            assert serve.layers[0].state == "unreachable"
            await derive(serve, PROJECT_FACT)
            # a scoped call waits out the election's short settle first: a read and a write
            await the_layer_is_down(serve, UNREACHABLE, [SCOPED_CALLS[0], SCOPED_CALLS[-2]])

    try:
        anyio.run(main)
    finally:
        holder.release()
        other.close()


# --- lambo_stats through the project -------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "refused"),
    [
        (
            {"scope": "general"},
            "scope is not an argument of lambo_stats; it takes agent_id, receipt, wait_ms",
        ),
        (
            {"wait_ms": -1},
            "wait_ms must be an integer in 0..=34000 (a larger value is clamped to 34000)",
        ),
        ({"wait_ms": "soon"}, "wait_ms must be an integer"),
    ],
)
def test_stats_refuses_a_bad_call_before_it_takes_a_layer_receipt(
    tmp_path: Path, extra: dict[str, Any], refused: str
) -> None:
    async def main() -> None:
        async with serving(layered_config(tmp_path)) as serve:
            ack = body(
                await serve(
                    "lambo_derive",
                    {"agent_id": AGENT, "concepts": [concept(PREFERENCE)], "scope": "general"},
                )
            )
            layer = serve.layers[0].serve
            assert isinstance(layer, Serve) and layer.service is not None
            assert await anyio.to_thread.run_sync(layer.service.pipeline.wait_idle, 20.0)
            asked = {"agent_id": AGENT, "receipt": ack["receipt"], **extra}
            assert refusal(await serve("lambo_stats", asked)).startswith(refused)
            # the refused call took nothing: the receipt rides on the next response
            carried = body(await serve("lambo_saints", {"agent_id": AGENT}))
            assert [r["receipt"] for r in carried.get("write_receipts", [])] == [ack["receipt"]]

    anyio.run(main)


def test_stats_refuses_an_empty_agent_id_with_a_layer_receipt(tmp_path: Path) -> None:
    async def main() -> None:
        async with serving(layered_config(tmp_path)) as serve:
            ack = body(
                await serve(
                    "lambo_derive",
                    {"agent_id": AGENT, "concepts": [concept(PREFERENCE)], "scope": "general"},
                )
            )
            answer = await serve("lambo_stats", {"agent_id": "", "receipt": ack["receipt"]})
            assert "agent_id" in refusal(answer)
            assert text(answer) == text(await serve("lambo_stats", {"agent_id": ""}))

    anyio.run(main)


STOPPED = (
    "conflict: layer general stopped serving during this call (it closed or lost its lease), "
    "so nothing was applied to it; retry shortly, or call without scope to act on lambo"
)


def test_a_write_into_a_layer_that_began_stopping_is_refused_as_the_spec_says(
    tmp_path: Path,
) -> None:
    """Spec L306: a layer that closes while the call holds it, before the write is admitted,
    answers 'stopped serving during this call'; nothing is applied to it."""

    async def main() -> None:
        async with serving(layered_config(tmp_path)) as serve:
            layer = serve.layers[0].serve
            assert isinstance(layer, Serve) and layer.service is not None
            layer.service.session.receipts.close()  # the first step of the layer's stop
            refused = await serve(
                "lambo_derive",
                {"agent_id": AGENT, "scope": "general", "concepts": [concept(PREFERENCE)]},
            )
            assert refusal(refused) == STOPPED
            assert len(layer.service.session.index.graph) == 0

    anyio.run(main)
