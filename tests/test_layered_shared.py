"""Two projects layered over one general on a SQLite file, as two serves would hold them: the
first project's serve holds general, the second's forwards general's calls to it over the
hub socket (the internal tools, lambo.layer_*). A receipt is answered only through the
project that wrote it. Spec: lambo_derive "Writing to a layer" (L305), receipts (L513)."""

from __future__ import annotations

from pathlib import Path

import anyio

from lambo_core.serve import Serve, ServeOptions
from tests.layered_serve import (
    AGENT,
    PREFERENCE,
    PROJECT_FACT,
    body,
    concept,
    derive,
    layered_config,
    serving,
)


def layer_serve(serve: Serve) -> Serve:
    layer = serve.layers[0].serve
    assert isinstance(layer, Serve)
    return layer


def test_two_projects_share_general_through_its_holder(tmp_path: Path) -> None:
    config = layered_config(tmp_path, sqlite=True)

    async def main() -> None:
        async with serving(config, "proj-a") as a, serving(config, "proj-b") as b:
            assert layer_serve(a).hub.role == "hub"
            assert layer_serve(b).hub.role == "forwarder"  # general's calls go to a's serve
            assert b.layers[0].state == "serving"
            shared = await derive(b, PREFERENCE, scope="general")
            await derive(b, PROJECT_FACT)
            # a reads b's preference from general, and not b's project fact
            merged = body(await a("lambo_recall", {"agent_id": AGENT, "query": "worktree tarball"}))
            assert [(h["node_id"], h["session"]) for h in merged["hits"]] == [(shared, "general")]
            # b's next layer write: its receipt is b's alone, also for the same agent_id
            ack = body(
                await b(
                    "lambo_derive",
                    {
                        "agent_id": AGENT,
                        "concepts": [concept("prefer rg over grep")],
                        "scope": "general",
                    },
                )
            )
            holder = layer_serve(a).service
            assert holder is not None
            assert await anyio.to_thread.run_sync(holder.pipeline.wait_idle, 20.0)
            asked = body(await a("lambo_stats", {"agent_id": AGENT, "receipt": ack["receipt"]}))
            assert asked["receipt"]["state"] == "forbidden"
            assert "write_receipts" not in body(await a("lambo_saints", {"agent_id": AGENT}))
            carried = body(await b("lambo_saints", {"agent_id": AGENT}))
            assert [r["receipt"] for r in carried["write_receipts"]] == [ack["receipt"]]
            assert carried["write_receipts"][0]["state"] == "applied"

    anyio.run(main)


def test_a_layer_served_by_the_same_process_is_forwarded_to_not_held_twice(
    tmp_path: Path,
) -> None:
    """An HTTP serve of lambo and general holds general first; lambo's layer must then be
    general's serve in this process (by its socket), not a second holder of the same lease:
    a serve's holder name is its agent, host and pid, the same for both."""
    config = layered_config(tmp_path, sqlite=True)

    async def main() -> None:
        general = Serve(config, ServeOptions(session="general", as_layer=True))
        await general.hold()
        try:
            async with serving(config) as lambo:
                assert layer_serve(lambo).hub.role == "forwarder"
                shared = await derive(lambo, PREFERENCE, scope="general")
                direct = body(
                    await general("lambo_recall", {"agent_id": AGENT, "query": "rebased"})
                )
                assert [h["node_id"] for h in direct["hits"]] == [shared]
                assert not general.hub.keeper.lost.is_set()
        finally:
            await general.close()

    anyio.run(main)


def test_a_layer_receipt_still_rides_on_the_next_response_after_the_projects_serve_changes(
    tmp_path: Path,
) -> None:
    """Spec L305: a layer write's outcome is delivered on the next tool response through the
    session written through. The layer's book outlives that session's serve (general is
    held by proj-a's serve): a new serve of proj-b still carries the receipt."""
    config = layered_config(tmp_path, sqlite=True)

    async def main() -> None:
        async with serving(config, "proj-a") as a:
            async with serving(config, "proj-b") as b:
                assert layer_serve(b).hub.role == "forwarder"
                ack = body(
                    await b(
                        "lambo_derive",
                        {
                            "agent_id": AGENT,
                            "concepts": [concept("prefer rg over grep")],
                            "scope": "general",
                        },
                    )
                )
                holder = layer_serve(a).service
                assert holder is not None
                assert await anyio.to_thread.run_sync(holder.pipeline.wait_idle, 20.0)
            async with serving(config, "proj-b") as again:
                carried = body(await again("lambo_saints", {"agent_id": AGENT}))
                assert [r["receipt"] for r in carried["write_receipts"]] == [ack["receipt"]]
                assert "write_receipts" not in body(
                    await again("lambo_saints", {"agent_id": AGENT})
                )

    anyio.run(main)
