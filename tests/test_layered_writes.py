"""Writes through a layered session, in process: a write scoped to general, its ack and its
receipt (handed out only through the session written through, at most 8 a response across the
session and the layer), cross-session references both ways, and the relative-path refusal.
Spec: lambo_derive "Writing to a layer" (L299-L307), lambo_record_action depends_on (L416),
lambo_stats receipt (L485), receipts (L513)."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.serve import Serve
from tests.layered_serve import (
    ACK_LINE,
    AGENT,
    PREFERENCE,
    PROJECT_FACT,
    body,
    concept,
    derive,
    layered_config,
    refusal,
    serving,
    text,
    wait,
)

REPO = "github.com/acme/widgets"


def run(tmp_path: Path, scenario: Any) -> None:
    async def main() -> None:
        async with serving(layered_config(tmp_path)) as serve:
            await scenario(serve)

    anyio.run(main)


def layer_of(serve: Serve) -> Serve:
    """general's own serve (its own address: unlayered, as /mcp/s/general would be)."""
    layer = serve.layers[0].serve
    assert isinstance(layer, Serve)
    return layer


async def idle(serve: Serve) -> None:
    """Wait until the serve's own queue has applied everything (no receipt is looked up)."""
    service = serve.service
    assert service is not None
    assert await anyio.to_thread.run_sync(service.pipeline.wait_idle, 20.0)


def write(content: str, scope: str | None = None, **extra: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {"agent_id": AGENT, "concepts": [concept(content)], **extra}
    if scope is not None:
        arguments["scope"] = scope
    return arguments


def receipts_on(result: dict[str, Any]) -> list[str]:
    return [r["receipt"] for r in body(result).get("write_receipts", [])]


def test_a_layer_writes_ack_names_the_layer_on_its_last_line(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        ack = await serve("lambo_derive", write(PREFERENCE, "general"))
        found = body(ack)
        assert found["session"] == "general"
        assert text(ack).splitlines()[-1] == ACK_LINE
        # the layer's own book issued it; the project's did not
        layer = layer_of(serve)
        assert layer.service is not None and serve.service is not None
        assert layer.service.session.receipts.issued_here(found["receipt"])
        assert not serve.service.session.receipts.issued_here(found["receipt"])
        # the same write with the session's own name is a project write, its ack unchanged
        own = await serve("lambo_derive", write(PROJECT_FACT, "lambo"))
        assert "session" not in body(own)
        assert ACK_LINE not in text(own)
        action = await serve(
            "lambo_record_action",
            {"agent_id": AGENT, "action": "ran the tests", "scope": "general"},
        )
        assert body(action)["session"] == "general"
        assert text(action).splitlines()[-1] == ACK_LINE

    run(tmp_path, scenario)


def test_a_layer_receipt_rides_only_on_the_projects_responses(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        layer = layer_of(serve)
        receipt = body(await serve("lambo_derive", write(PREFERENCE, "general")))["receipt"]
        await idle(layer)
        # general's own address: forbidden by id, and it hands nothing out
        asked = body(await layer("lambo_stats", {"agent_id": AGENT, "receipt": receipt}))
        assert asked["receipt"]["state"] == "forbidden"
        assert asked["receipt"]["detail"] == (
            "this receipt belongs to a different agent or session; ask from the agent_id and "
            "session that made the write"
        )
        assert receipts_on(await layer("lambo_saints", {"agent_id": AGENT})) == []
        # another agent through the project: forbidden, not consumed
        other = await serve("lambo_stats", {"agent_id": "agent-b", "receipt": receipt})
        assert body(other)["receipt"]["state"] == "forbidden"
        assert receipts_on(await serve("lambo_saints", {"agent_id": "agent-b"})) == []
        # the project's next response carries it, once
        carried = await serve("lambo_saints", {"agent_id": AGENT})
        assert receipts_on(carried) == [receipt]
        assert body(carried)["write_receipts"][0]["state"] == "applied"
        assert carried["content"][-1]["text"].startswith(
            f"write receipts:\nreceipt {receipt}: applied"
        )
        assert receipts_on(await serve("lambo_saints", {"agent_id": AGENT})) == []

    run(tmp_path, scenario)


def test_stats_through_the_project_finds_a_layer_receipt(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        receipt = body(await serve("lambo_derive", write(PREFERENCE, "general")))["receipt"]
        settled = await wait(serve, receipt)  # wait_ms, answered from the layer's book
        assert settled["state"] == "applied" and settled["created_count"] == 1
        answer = await serve("lambo_stats", {"agent_id": AGENT, "receipt": receipt})
        lines = text(answer).splitlines()
        assert lines[0].startswith(f"receipt {receipt}: applied — derived 1 concept(s)")
        assert lines[1].startswith("session lambo: ")  # the project's own figures follow
        assert body(answer)["session"] == "lambo"
        # delivered by id: it rides on no later response
        assert receipts_on(await serve("lambo_saints", {"agent_id": AGENT})) == []

    run(tmp_path, scenario)


@pytest.mark.parametrize(
    ("own", "layered", "first"),
    [(10, 3, (5, 3)), (12, 1, (7, 1)), (1, 12, (1, 7)), (3, 2, (3, 2))],
)
def test_at_most_eight_receipts_a_response_each_book_getting_one(
    tmp_path: Path, own: int, layered: int, first: tuple[int, int]
) -> None:
    async def scenario(serve: Serve) -> None:
        # the first layer write goes through the session (which then collects the layer's
        # receipts for this agent); the rest straight into each queue, so that no ack
        # carries receipts before they have all settled
        first_ack = await serve("lambo_derive", write("shared note", "general"))
        assert receipts_on(first_ack) == []
        issued = {body(first_ack)["receipt"]: "general"}
        project, layer = serve.service, layer_of(serve).service
        assert project is not None and layer is not None
        for i in range(own):
            ack = await anyio.to_thread.run_sync(
                project.pipeline.submit, "lambo_derive", write(f"project note {i}")
            )
            issued[ack.structured["receipt"]] = "lambo"
        for i in range(layered - 1):
            submit = partial(layer.pipeline.submit, via="lambo")
            ack = await anyio.to_thread.run_sync(submit, "lambo_derive", write(f"shared {i}"))
            issued[ack.structured["receipt"]] = "general"
        await idle(serve)
        await idle(layer_of(serve))
        delivered: list[str] = []
        counts: list[tuple[int, int]] = []
        for _ in range(4):
            got = receipts_on(await serve("lambo_saints", {"agent_id": AGENT}))
            assert len(got) <= 8
            counts.append(
                (
                    sum(issued[r] == "lambo" for r in got),
                    sum(issued[r] == "general" for r in got),
                )
            )
            delivered.extend(got)
        assert counts[0] == first
        # nothing lost and nothing twice: every receipt once, in the responses that followed
        assert sorted(delivered) == sorted(issued)

    run(tmp_path, scenario)


# --- cross-session references ---------------------------------------------------------------


def cross(field: str, ref: str, holder: str, *, what: str = "citations", at: str = "") -> str:
    where = at or f"concepts[0].{field}[0]"
    return (
        f'reference refused: {where} "{ref}" is in scope "{holder}"; cross-session {what} are '
        "not recorded; nothing was written"
    )


def test_a_derive_cites_and_contradicts_only_its_own_session(tmp_path: Path) -> None:
    async def scenario(serve: Serve) -> None:
        shared = await derive(serve, PREFERENCE, scope="general")
        own = await derive(serve, PROJECT_FACT)
        cases = [
            # an unscoped write citing general, by id, short id and text
            (None, "depends_on", shared, "general"),
            (None, "depends_on", shared[:8], "general"),
            (None, "depends_on", PREFERENCE, "general"),
            (None, "against", shared, "general"),
            (None, "against", PREFERENCE, "general"),
            # a write scoped to general citing the project
            ("general", "depends_on", own, "lambo"),
            ("general", "depends_on", PROJECT_FACT, "lambo"),
            ("general", "against", own[:8], "lambo"),
            ("general", "against", PROJECT_FACT, "lambo"),
        ]
        for scope, field, ref, holder in cases:
            arguments = write("a new note", scope)
            arguments["concepts"][0][field] = [ref]
            what = "contradictions" if field == "against" else "citations"
            assert refusal(await serve("lambo_derive", arguments)) == cross(
                field, ref, holder, what=what
            ), (scope, field, ref)
        # a reference nothing holds is the usual refusal, in either direction
        arguments = write("a new note", "general")
        arguments["concepts"][0]["depends_on"] = ["nothing holds this"]
        assert refusal(await serve("lambo_derive", arguments)) == (
            'reference refused: concepts[0].depends_on[0] "nothing holds this" matches nothing '
            "in this session; nothing was written"
        )
        # and a reference inside the session written to is recorded as always
        arguments = write("a rule built on the preference", "general")
        arguments["concepts"][0]["depends_on"] = [shared]
        receipt = body(await serve("lambo_derive", arguments))["receipt"]
        assert (await wait(serve, receipt))["state"] == "applied"

    run(tmp_path, scenario)


def test_an_actions_depends_on_text_may_name_a_layer_concept_but_not_its_id(
    tmp_path: Path,
) -> None:
    """L416: an id only another session holds is refused; text names (and creates) a concept
    here, except on a write scoped to a layer naming the caller's own session's concept."""

    async def scenario(serve: Serve) -> None:
        shared = await derive(serve, PREFERENCE, scope="general")
        own = await derive(serve, PROJECT_FACT)

        def action(ref: str, scope: str | None = None) -> dict[str, Any]:
            arguments = {"agent_id": AGENT, "action": "ran the linter", "depends_on": [ref]}
            return {**arguments, "scope": scope} if scope else arguments

        for ref in (shared, shared[:8]):
            assert refusal(await serve("lambo_record_action", action(ref))) == cross(
                "depends_on", ref, "general", at="depends_on[0]"
            )
        for ref in (own, own[:8], PROJECT_FACT):
            assert refusal(await serve("lambo_record_action", action(ref, "general"))) == cross(
                "depends_on", ref, "lambo", at="depends_on[0]"
            )
        # text naming only general's concept, unscoped: created in the project as usual
        receipt = body(await serve("lambo_record_action", action(PREFERENCE)))["receipt"]
        settled = await wait(serve, receipt)
        assert settled["state"] == "applied"
        inspected = await serve("lambo_inspect", {"agent_id": AGENT, "focus": PREFERENCE})
        assert text(inspected).startswith(f"{PREFERENCE} [")

    run(tmp_path, scenario)


# --- relative paths in a layer ------------------------------------------------------------


def relative(field: str, entry: str) -> str:
    return (
        f'{field} "{entry}" is a relative path, refused in scope "general"; record file '
        "actions in the project's own session, use an absolute path, or send repo_scope; "
        "nothing was written"
    )


@pytest.mark.parametrize(
    ("tool", "extra", "field", "entry"),
    [
        ("lambo_record_action", {"produces": ["README.md"]}, "produces[0]", "README.md"),
        ("lambo_record_action", {"modifies": ["src/main.rs:12"]}, "modifies[0]", "src/main.rs:12"),
        ("lambo_record_action", {"depends_on": ["./run.sh"]}, "depends_on[0]", "./run.sh"),
        ("lambo_record_action", {"action": "Cargo.toml"}, "action", "Cargo.toml"),
        (
            "lambo_derive",
            {"concepts": [concept("docs/reference/", "resource")]},
            "concepts[0].content",
            "docs/reference/",
        ),
        (
            "lambo_derive",
            {
                "concepts": [concept("a rule about sources")],
                "parent_of": [{"parent": "/srv/widgets", "child": "src/main.rs"}],
            },
            "parent_of[0].child",
            "src/main.rs",
        ),
    ],
)
def test_a_bare_relative_path_is_refused_in_general_unless_repo_scoped(
    tmp_path: Path, tool: str, extra: dict[str, Any], field: str, entry: str
) -> None:
    async def scenario(serve: Serve) -> None:
        arguments: dict[str, Any] = {"agent_id": AGENT, "action": "edited files", **extra}
        if tool == "lambo_derive":
            del arguments["action"]
        assert refusal(await serve(tool, {**arguments, "scope": "general"})) == relative(
            field, entry
        )
        # repo_scope names the repository: let through into general
        scoped = await serve(tool, {**arguments, "scope": "general", "repo_scope": REPO})
        assert (await wait(serve, body(scoped)["receipt"]))["state"] == "applied"
        # the project's own session takes it bare
        plain = await serve(tool, arguments)
        assert (await wait(serve, body(plain)["receipt"]))["state"] == "applied"

    run(tmp_path, scenario)


def test_a_write_into_one_layer_citing_another_layers_concept_is_cross_session(
    tmp_path: Path,
) -> None:
    """Spec L416: an id that names no concept here but one in another session the call reads
    is refused as cross-session; with two layers, the other layer is such a session."""

    async def main() -> None:
        async with serving(layered_config(tmp_path), layers=("general", "team")) as serve:
            teams = await derive(serve, "the team reviews every pull request", scope="team")
            refused = await serve(
                "lambo_derive",
                {
                    "agent_id": AGENT,
                    "scope": "general",
                    "concepts": [concept(PREFERENCE, depends_on=[teams])],
                },
            )
            assert refusal(refused) == cross("depends_on", teams, "team")

    anyio.run(main)
