"""lambo_saints and lambo_stale on a real session written through the pipeline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.clock import ManualClock
from lambo_core.errors import LamboError, ParameterError
from lambo_core.model import Status
from lambo_core.saints import run_saints
from lambo_core.session import EmbedderPlan, Session
from lambo_core.stale import run_stale
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.text import canonical_key, format_rfc3339
from lambo_core.writes import WritePipeline

T0 = 1_760_000_000.0
AGE = 60.0


class World:
    def __init__(self, store: Any) -> None:
        self.clock = ManualClock(T0)
        self.session = Session.open(
            store, "s", EmbedderPlan(lazy=None, contract=None), clock=self.clock
        )
        self.pipeline = WritePipeline(self.session).start()

    def derive(self, content: str, agent: str = "agent-a", ctype: str = "entity", **kw: Any) -> str:
        concept = {"content": content, "concept_type": ctype, **kw}
        ack = self.pipeline.submit("lambo_derive", {"agent_id": agent, "concepts": [concept]})
        assert ack.structured["receipt_state"] == "pending", ack.text
        assert self.pipeline.wait_idle(10)
        return self.id_of(content)

    def parent_of(self, parent: str, child: str) -> None:
        self.pipeline.submit(
            "lambo_derive",
            {
                "agent_id": "agent-a",
                "concepts": [{"content": parent, "concept_type": "entity"}],
                "parent_of": [{"parent": parent, "child": child}],
            },
        )
        assert self.pipeline.wait_idle(10)

    def id_of(self, content: str) -> str:
        found = self.session.index.graph.concepts_with_key(canonical_key(content))
        assert len(found) == 1, content
        return found[0].id

    def canonize(self, node_id: str) -> None:
        with self.session.index.lock:
            self.session.index.graph.set_status(node_id, Status.CANONICAL)

    def saints(self, **args: Any) -> tuple[str, dict[str, Any]]:
        return run_saints(self.session, args)

    def stale(self, edge_min_age: float = AGE, **args: Any) -> tuple[str, dict[str, Any]]:
        return run_stale(self.session, args, edge_min_age=edge_min_age)


@pytest.fixture(params=["memory", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "s.db")
    w = World(store)
    yield w
    w.pipeline.close()


def refused(call: Any, **args: Any) -> str:
    with pytest.raises(LamboError) as caught:
        call(**args)
    assert isinstance(caught.value, ParameterError)
    return caught.value.render()


# =====================================================================================
# lambo_saints
# =====================================================================================


def test_saints_is_empty_for_a_young_session(world: World) -> None:
    world.derive("user schema")
    text, data = world.saints(agent_id="agent-a")
    assert text == 'no canonical concepts in session "s": none has been promoted to Canonical yet'
    assert data == {"saints": [], "total": 0}


def test_saints_lists_canonical_concepts_with_their_fields(world: World) -> None:
    schema = world.derive("user schema")
    world.clock.advance(10)
    world.derive("login reads the users table", ctype="logic", depends_on=[schema])
    world.clock.advance(10)
    jwt = world.derive("auth uses JWT", ctype="constraint")
    world.derive("not canonical")
    world.canonize(schema)
    world.canonize(jwt)
    world.session.access_counts.record([schema, schema, schema])
    try:
        text, data = world.saints(agent_id="agent-a", scope="s")
    finally:
        world.session.access_counts.drain()
    assert data["total"] == 2
    assert data["saints"] == [
        {
            "node_id": schema,
            "content": "user schema",
            "concept_type": "Entity",
            "blast_radius": 1,
            "access_count": 3,
            "created_at": format_rfc3339(T0),
        },
        {
            "node_id": jwt,
            "content": "auth uses JWT",
            "concept_type": "Constraint",
            "blast_radius": 0,
            "access_count": 0,
            "created_at": format_rfc3339(T0 + 20),
        },
    ]
    assert text.split("\n") == [
        '2 canonical concepts in session "s":',
        f"user schema [Entity] (node_id {schema}, blast radius 1, access count 3, "
        f"created {format_rfc3339(T0)})",
        f"auth uses JWT [Constraint] (node_id {jwt}, blast radius 0, access count 0, "
        f"created {format_rfc3339(T0 + 20)})",
    ]


def test_saints_text_is_one_line_per_concept_and_capped(world: World) -> None:
    long = "line one\nline two " + "x" * 400
    node = world.derive(long)
    world.canonize(node)
    text, data = world.saints(agent_id="agent-a")
    lines = text.split("\n")
    assert lines[0] == '1 canonical concept in session "s":'
    assert len(lines) == 2 and lines[1].startswith("line one line two xxx")
    assert "…" in lines[1]
    assert data["saints"][0]["content"] == long


def test_saints_refusals(world: World) -> None:
    assert refused(world.saints) == "agent_id is required"
    assert refused(world.saints, agent_id="a\tb").startswith("agent_id must be one line")
    assert refused(world.saints, agent_id="agent-a", offset=1) == (
        "offset is not an argument of lambo_saints; it takes agent_id, scope"
    )
    assert refused(world.saints, agent_id="agent-a", scope="general") == (
        'scope "general" is not a scope of this session; its scopes are: s'
    )
    assert refused(world.saints, agent_id="agent-a", scope=3) == "scope must be a string"


# =====================================================================================
# lambo_stale
# =====================================================================================


def test_stale_is_empty_without_contradictions(world: World) -> None:
    ruling = world.derive("the users table holds accounts")
    world.derive("login reads the users table", agent="b", depends_on=[ruling])
    text, data = world.stale(agent_id="agent-a")
    assert text == "no direct dependency rests on a contradicted concept"
    assert data == {"total": 0, "offset": 0, "rows": [], "next_offset": None}


def test_stale_lists_direct_dependents_of_a_contradicted_concept(world: World) -> None:
    ruling = world.derive("the users table holds accounts", agent="a")
    world.clock.advance(5)
    dep = world.derive("login reads the users table", agent="b", depends_on=[ruling])
    world.derive("audit reads the login code", agent="b", depends_on=[dep])  # indirect
    world.parent_of("the users table holds accounts", "users.email column")  # a child
    world.clock.advance(500)  # the citation aged in, but it is older than the contradiction
    world.derive("accounts moved out of the users table", agent="c", against=[ruling])
    text, data = world.stale(agent_id="agent-a", scope="s")
    assert data == {
        "total": 1,
        "offset": 0,
        "rows": [{"node_id": dep, "snippet": "login reads the users table", "cited_id": ruling}],
        "next_offset": None,
    }
    assert text.split("\n") == [
        "1 direct dependency rests on a contradicted concept; rows 1-1:",
        f'{dep} "login reads the users table" cites {ruling}',
    ]


def test_stale_pages_of_50_with_offset_and_total(world: World) -> None:
    ruling = world.derive("the users table holds accounts", agent="a")
    world.clock.advance(5)
    deps = sorted(
        world.derive(f"report {i:02d} reads the users table", agent="b", depends_on=[ruling])
        for i in range(55)
    )
    world.clock.advance(5)
    world.derive("accounts moved out of the users table", agent="c", against=[ruling])

    text, data = world.stale(agent_id="agent-a")
    assert data["total"] == 55 and data["offset"] == 0 and data["next_offset"] == 50
    assert [r["node_id"] for r in data["rows"]] == deps[:50]
    lines = text.split("\n")
    assert lines[0] == "55 direct dependencies rest on a contradicted concept; rows 1-50:"
    assert len(lines) == 52
    assert lines[-1] == "more: call lambo_stale with offset 50 for the next page"

    text, data = world.stale(agent_id="agent-a", offset=50)
    assert [r["node_id"] for r in data["rows"]] == deps[50:]
    assert data["next_offset"] is None
    assert text.split("\n")[0].endswith("; rows 51-55:")

    text, data = world.stale(agent_id="agent-a", offset=55)
    assert data["rows"] == [] and data["total"] == 55 and data["next_offset"] is None
    assert text == (
        "55 direct dependencies rest on a contradicted concept; offset 55 is past the last row"
    )
    _, data = world.stale(agent_id="agent-a", offset=10_000_000)
    assert data["rows"] == []


def test_stale_uses_the_evidence_age_it_is_given(world: World) -> None:
    ruling = world.derive("the users table holds accounts", agent="a")
    world.clock.advance(30)
    world.derive("accounts moved out of the users table", agent="c", against=[ruling])
    world.clock.advance(1)
    dep = world.derive("login reads the users table", agent="b", depends_on=[ruling])
    world.clock.advance(10)
    # The citation is newer than the contradiction but not yet 60 s old: still stale.
    _, data = world.stale(agent_id="agent-a")
    assert [r["node_id"] for r in data["rows"]] == [dep]
    # With no age floor it counts at once and outweighs the contradiction.
    assert world.stale(agent_id="agent-a", edge_min_age=0.0)[1]["total"] == 0
    world.clock.advance(60)  # aged in under the default floor too
    assert world.stale(agent_id="agent-a")[1]["total"] == 0


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        (-1, "offset must be in 0..=10000000"),
        (10_000_001, "offset must be in 0..=10000000"),
        (1.0, "offset must be an integer in 0..=10000000"),
        ("5", "offset must be an integer in 0..=10000000"),
    ],
)
def test_stale_offset_bounds(world: World, offset: object, message: str) -> None:
    assert refused(world.stale, agent_id="agent-a", offset=offset) == message


def test_stale_refusals(world: World) -> None:
    assert refused(world.stale) == "agent_id is required"
    assert refused(world.stale, agent_id="x" * 257) == (
        "agent_id is 257 characters; the cap is 256 characters"
    )
    assert refused(world.stale, agent_id="agent-a", limit=5) == (
        "limit is not an argument of lambo_stale; it takes agent_id, scope, offset"
    )
    assert refused(world.stale, agent_id="agent-a", scope="") == (
        'scope "" is not a scope of this session; its scopes are: s'
    )
