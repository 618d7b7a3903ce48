"""A layered session end to end in process: `Serve(session lambo, layers general)` on one store.
scope routing on every tool that takes it, the merged recall and its labels, a scoped read of
the layer. Spec: lambo_recall "Layered sessions" (L220-L232, L257), the scope rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.serve import Serve
from tests.layered_serve import (
    AGENT,
    LAYER_WARNING,
    PREFERENCE,
    PROJECT_FACT,
    body,
    derive,
    layered_config,
    refusal,
    serving,
    text,
)

NODE = "478416c2-0000-4000-8000-000000000000"
#: each tool that takes scope, with the least it needs
SCOPED: dict[str, dict[str, Any]] = {
    "lambo_recall": {"query": "rebased"},
    "lambo_inspect": {"focus": "rebased"},
    "lambo_stale": {},
    "lambo_saints": {},
    "lambo_reserve": {"node_id": NODE},
    "lambo_derive": {"concepts": [{"content": "a note", "concept_type": "logic"}]},
    "lambo_record_action": {"action": "ran the tests"},
}
READS = [tool for tool in SCOPED if tool not in ("lambo_derive", "lambo_record_action")]
WRITE_REFUSAL = "scope must name this session or one of its layers: lambo, general"


def run(tmp_path: Path, scenario: Any) -> None:
    async def main() -> None:
        async with serving(layered_config(tmp_path)) as serve:
            await scenario(serve)

    anyio.run(main)


def call(tool: str, scope: object = "<omitted>", **extra: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"agent_id": AGENT, **SCOPED.get(tool, {}), **extra}
    if scope != "<omitted>":
        arguments["scope"] = scope
    return arguments


@pytest.mark.parametrize("tool", READS)
@pytest.mark.parametrize(
    ("scope", "shown"),
    [("", '""'), ("rustydocs", '"rustydocs"'), (" general", '" general"'), ("Lambo", '"Lambo"')],
)
def test_a_read_refuses_a_scope_that_is_not_the_session_or_a_layer(
    tmp_path: Path, tool: str, scope: str, shown: str
) -> None:
    async def scenario(serve: Serve) -> None:
        assert refusal(await serve(tool, call(tool, scope))) == (
            f"scope {shown} is not a scope of this session; its scopes are: lambo, general"
        )

    run(tmp_path, scenario)


@pytest.mark.parametrize("tool", ["lambo_derive", "lambo_record_action"])
@pytest.mark.parametrize("scope", ["", "rustydocs", " general", "GENERAL"])
def test_a_write_refuses_a_scope_that_is_not_the_session_or_a_layer(
    tmp_path: Path, tool: str, scope: str
) -> None:
    async def scenario(serve: Serve) -> None:
        assert refusal(await serve(tool, call(tool, scope))) == WRITE_REFUSAL
        # nothing was written, in either session
        for session in (serve, serve.layers[0].serve):
            stats = body(await session("lambo_stats", {"agent_id": AGENT}))
            assert stats["write_queue_accepted"] == 0

    run(tmp_path, scenario)


def test_each_scope_reaches_its_own_session(tmp_path: Path) -> None:
    """Omitted, null and the session's own name act on lambo; "general" on the layer."""

    async def scenario(serve: Serve) -> None:
        await derive(serve, PREFERENCE, scope="general")
        own = await derive(serve, PROJECT_FACT)
        for scope in ("<omitted>", None, "lambo"):
            saints = await serve("lambo_saints", call("lambo_saints", scope))
            assert text(saints).startswith('no canonical concepts in session "lambo"')
            inspected = await serve(
                "lambo_inspect", call("lambo_inspect", scope, focus=PROJECT_FACT)
            )
            assert text(inspected).startswith(f"{PROJECT_FACT} [Logic] (id {own[:8]}")
            missing = await serve("lambo_inspect", call("lambo_inspect", scope, focus=PREFERENCE))
            assert "matches no concept in this session" in refusal(missing)
        saints = await serve("lambo_saints", call("lambo_saints", "general"))
        assert text(saints).startswith('no canonical concepts in session "general"')
        inspected = await serve("lambo_inspect", call("lambo_inspect", "general", focus=PREFERENCE))
        assert text(inspected).startswith(f"{PREFERENCE} [Logic] (id ")
        stale = await serve("lambo_stale", call("lambo_stale", "general"))
        assert text(stale) == "no direct dependency rests on a contradicted concept"

    run(tmp_path, scenario)


def test_reserve_with_scope_locks_in_that_session(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        layer_id = await derive(serve, PREFERENCE, scope="general")
        own = await serve("lambo_reserve", call("lambo_reserve", node_id=layer_id))
        assert refusal(own) == (
            f"reference refused: node_id {layer_id} matches no concept in this session; "
            "nothing was reserved"
        )
        held = body(
            await serve("lambo_reserve", call("lambo_reserve", "general", node_id=layer_id))
        )
        assert held["node_id"] == layer_id
        # the lock lives in general: another agent is refused there, and lambo has none
        other = {"agent_id": "agent-b", "node_id": layer_id, "scope": "general"}
        assert "agent-a" in refusal(await serve("lambo_reserve", other))
        released = call("lambo_reserve", "general", node_id=layer_id, release=True)
        assert not (await serve("lambo_reserve", released))["isError"]

    run(tmp_path, scenario)


def test_stats_takes_no_scope(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        for scope in ("general", "lambo", None):
            answer = await serve("lambo_stats", {"agent_id": AGENT, "scope": scope})
            assert refusal(answer) == (
                "scope is not an argument of lambo_stats; it takes agent_id, receipt, wait_ms"
            )
        assert body(await serve("lambo_stats", {"agent_id": AGENT}))["session"] == "lambo"

    run(tmp_path, scenario)


# --- merged recall ------------------------------------------------------------------------


def test_a_merged_recall_reads_both_and_names_each_hits_session(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        layer_id = await derive(serve, PREFERENCE, scope="general")
        own_id = await derive(serve, "worktree branches of the widgets repo live in ../wt")
        merged = await serve("lambo_recall", call("lambo_recall", query="worktree branches"))
        found = body(merged)
        sessions = {hit["node_id"]: hit["session"] for hit in found["hits"]}
        assert sessions == {own_id: "lambo", layer_id: "general"}
        assert found["warnings"] == []
        blocks = text(merged).split("\n\n")
        (layer_block,) = [b for b in blocks if b.startswith(PREFERENCE)]
        assert layer_block.endswith(f", id {layer_id[:8]}, from general)")
        (own_block,) = [b for b in blocks if not b.startswith(PREFERENCE)]
        assert "from general" not in own_block and f"id {own_id[:8]}" in own_block
        # null is omitted: the same merged read
        again = body(await serve("lambo_recall", call("lambo_recall", None, query="worktree")))
        assert {hit["session"] for hit in again["hits"]} == {"lambo", "general"}

    run(tmp_path, scenario)


def test_a_merged_recall_counts_each_shown_hit_in_its_own_session(tmp_path: Path) -> None:
    """Access counts feed the base score (and so GC and canonization): a layer hit a merged
    recall shows counts in the layer, as a recall of the layer would count it."""

    async def scenario(serve: Serve) -> None:
        layer_id = await derive(serve, PREFERENCE, scope="general")
        own_id = await derive(serve, "worktree branches of the widgets repo live in ../wt")
        project = serve.service
        layer = serve.layers[0].serve
        assert project is not None and isinstance(layer, Serve) and layer.service is not None
        general = layer.service.session
        before = (
            project.session.access_counts.pending(own_id),
            general.access_counts.pending(layer_id),
        )
        body(await serve("lambo_recall", call("lambo_recall", query="worktree branches")))
        after = (
            project.session.access_counts.pending(own_id),
            general.access_counts.pending(layer_id),
        )
        assert after == (before[0] + 1, before[1] + 1)
        assert project.session.access_counts.pending(layer_id) == 0  # not the project's id

    run(tmp_path, scenario)


def test_a_recall_scoped_to_the_session_reads_only_the_project(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        await derive(serve, PREFERENCE, scope="general")
        own_id = await derive(serve, "worktree branches of the widgets repo live in ../wt")
        scoped = await serve("lambo_recall", call("lambo_recall", "lambo", query="worktree"))
        found = body(scoped)
        assert [(h["node_id"], h["session"]) for h in found["hits"]] == [(own_id, "lambo")]
        assert found["warnings"] == []
        assert "from general" not in text(scoped)

    run(tmp_path, scenario)


def test_a_recall_scoped_to_the_layer_warns_that_its_ids_are_the_layers(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        layer_id = await derive(serve, PREFERENCE, scope="general")
        await derive(serve, "worktree branches of the widgets repo live in ../wt")
        scoped = await serve("lambo_recall", call("lambo_recall", "general", query="worktree"))
        found = body(scoped)
        assert [(h["node_id"], h["session"]) for h in found["hits"]] == [(layer_id, "general")]
        assert found["warnings"] == [LAYER_WARNING]
        # rendered as the layer's own plain recall: no "from general" on its block
        assert text(scoped) == f"{PREFERENCE} [Logic] (score {found['hits'][0]['score']:.2f}, " + (
            f"id {layer_id[:8]})"
        )
        # the id it gave is inspected with that scope, and is unknown to the project
        inspect = {"agent_id": AGENT, "focus": layer_id[:8]}
        assert text(await serve("lambo_inspect", {**inspect, "scope": "general"})).startswith(
            PREFERENCE
        )
        assert "matches no concept" in refusal(await serve("lambo_inspect", inspect))

    run(tmp_path, scenario)


def test_a_layer_read_does_not_redirect_later_writes(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        await derive(serve, PREFERENCE, scope="general")
        await serve("lambo_recall", call("lambo_recall", "general", query="worktree"))
        ack = body(await serve("lambo_derive", call("lambo_derive")))
        assert "session" not in ack  # a project write's ack is unchanged
        assert not text(await serve("lambo_derive", call("lambo_derive"))).endswith(
            "no ordering between them"
        )

    run(tmp_path, scenario)


def test_a_cut_block_of_a_recall_scoped_to_general_names_the_scope_in_its_marker(
    tmp_path: Path,
) -> None:
    """Spec L230: a layer block's truncation marker reads lambo_inspect <id> (scope general);
    its id belongs to the layer, so the plain marker would send the agent to the project."""

    async def scenario(serve: Serve) -> None:
        long_fact = "worktree branches " + " ".join(f"word{i}" for i in range(200))
        node = await derive(serve, long_fact, scope="general")
        cut = await serve(
            "lambo_recall", call("lambo_recall", "general", query="worktree", max_tokens=60)
        )
        found = body(cut)
        assert found["hits"][0]["truncated_in_context"] is True
        assert text(cut).endswith(f"lambo_inspect {node[:8]} (scope general) for the full concept]")
        assert found["context"] == text(cut)

    run(tmp_path, scenario)
