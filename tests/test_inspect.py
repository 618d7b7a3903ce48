"""lambo_inspect on a real session: focus resolution, the rendered result, bounds, refusals."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from lambo_core.clock import ManualClock
from lambo_core.errors import LamboError, ParameterError, ReferenceRefused
from lambo_core.inspect import SCAN_CAP, run_inspect
from lambo_core.model import (
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    Status,
    WriteBatch,
    short_id,
)
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.text import canonical_key, format_rfc3339
from lambo_core.writes import WritePipeline

T0 = 1_760_000_000.0
PLAN = EmbedderPlan(lazy=None, contract=None)


class World:
    def __init__(self, store: Any) -> None:
        self.clock = ManualClock(T0)
        self.session = Session.open(store, "s", PLAN, clock=self.clock)
        self.pipeline = WritePipeline(self.session).start()

    @property
    def graph(self) -> Any:
        return self.session.index.graph

    def derive(self, content: str, agent: str = "agent-a", ctype: str = "entity", **kw: Any) -> str:
        concept = {"content": content, "concept_type": ctype, **kw}
        self.submit({"agent_id": agent, "concepts": [concept]})
        return self.id_of(content)

    def derive_many(self, contents: Sequence[str], **kw: Any) -> None:
        per_call = 32 if "depends_on" in kw else 64  # the per-call reference limit
        for start in range(0, len(contents), per_call):
            chunk = contents[start : start + per_call]
            concepts = [{"content": c, "concept_type": "logic", **kw} for c in chunk]
            ack = self.pipeline.submit(
                "lambo_derive", {"agent_id": "agent-a", "concepts": concepts}
            )
            assert ack.structured["receipt_state"] == "pending", ack.text
        assert self.pipeline.wait_idle(60)

    def submit(self, args: dict[str, Any]) -> None:
        ack = self.pipeline.submit("lambo_derive", args)
        assert ack.structured["receipt_state"] == "pending", ack.text
        assert self.pipeline.wait_idle(10)

    def id_of(self, content: str) -> str:
        found = self.graph.concepts_with_key(canonical_key(content))
        assert len(found) == 1, content
        return str(found[0].id)

    def inspect(self, policy: str = "swarm", **args: Any) -> tuple[str, dict[str, Any]]:
        return run_inspect(self.session, {"agent_id": "agent-a", **args}, promotion_policy=policy)

    def refused(self, cls: type[LamboError] = ReferenceRefused, **args: Any) -> str:
        with pytest.raises(LamboError) as caught:
            run_inspect(self.session, args, promotion_policy="swarm")
        assert isinstance(caught.value, cls), caught.value.render()
        return caught.value.render()


@pytest.fixture(params=["memory", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "i.db")
    w = World(store)
    yield w
    w.pipeline.close()


@pytest.fixture
def mem_world() -> Iterator[World]:
    w = World(MemoryStore())
    yield w
    w.pipeline.close()


def schema_world(world: World) -> tuple[str, str, str, str]:
    """user schema depends on postgres 16; login depends on it; it is parent of a column."""
    pg = world.derive("postgres 16", ctype="resource")
    schema = world.derive("user schema", depends_on=[pg])
    world.clock.advance(10)
    login = world.derive(
        "login reads the users table", agent="agent-b", ctype="logic", depends_on=[schema]
    )
    world.submit(
        {
            "agent_id": "agent-a",
            "concepts": [{"content": "user schema", "concept_type": "entity"}],
            "parent_of": [{"parent": "user schema", "child": "users.email column"}],
        }
    )
    return pg, schema, login, world.id_of("users.email column")


# =====================================================================================
# the result
# =====================================================================================


def test_inspect_renders_label_dependents_admission_and_edges(world: World) -> None:
    pg, schema, login, column = schema_world(world)
    text, data = world.inspect(focus="user schema")
    assert text.split("\n") == [
        f"user schema [Entity] (id {short_id(schema)}, blast radius 2)",
        f"node_id {schema}, status None, written by agent-a at {format_rfc3339(T0)}, "
        "access count 0",
        "dependents (2):",
        f'  {short_id(login)} "login reads the users table" [Logic] (depends on it)',
        f'  {short_id(column)} "users.email column" [Entity] (its parent_of child)',
        "canonization (Swarm): None -> Candidate refused",
        # the dependents were written 0s ago: none is past the 60s age floor yet
        "  - stage 1: dependents from 0 other interactions, needs at least 1",
        "neighbourhood (depth 2): 3 concepts, 3 edges",
        f'  hop 1: this depends on {short_id(pg)} "postgres 16"',
        f'  hop 1: {short_id(login)} "login reads the users table" depends on this',
        f'  hop 1: this is the parent of {short_id(column)} "users.email column"',
    ]
    assert data["node_id"] == schema and data["content"] == "user schema"
    assert data["concept_type"] == "Entity" and data["status"] == "None"
    assert data["is_canonical"] is False and data["blast_radius"] == 2
    assert data["resolved_by"] == "content" and data["depth"] == 2
    assert data["dependents"] == [
        {"node_id": login, "label": "login reads the users table", "edge_type": "dependency"},
        {"node_id": column, "label": "users.email column", "edge_type": "hierarchical"},
    ]
    assert data["dependents_truncated"] is False
    assert data["admission"] == {
        "policy": "Swarm",
        "status": "None",
        "next": "Candidate",
        "eligible": False,
        "checks": [
            {
                "gate": "dependents",
                "stage": 1,
                "current": 0,
                "bar": 1,
                "comparison": ">=",
                "met": False,
            }
        ],
        "reasons": ["stage 1: dependents from 0 other interactions, needs at least 1"],
    }
    assert [(n["node_id"], n["hop"]) for n in data["neighbours"]] == [
        (pg, 1),
        (login, 1),
        (column, 1),
    ]
    assert data["neighbours_truncated"] is False
    assert [(e["src"], e["dst"], e["edge_type"]) for e in data["edges"]] == [
        (schema, pg, "dependency"),
        (login, schema, "dependency"),
        (schema, column, "hierarchical"),
    ]
    assert data["warnings"] == [] and "substring_scan" not in data


def test_depth_reaches_further_hops_and_zero_walks_nothing(world: World) -> None:
    _, schema, login, _ = schema_world(world)
    text, data = world.inspect(focus="postgres 16", depth=1)
    assert {n["node_id"]: n["hop"] for n in data["neighbours"]} == {schema: 1}
    _, data = world.inspect(focus="postgres 16")
    hops = {n["node_id"]: n["hop"] for n in data["neighbours"]}
    assert hops[schema] == 1 and hops[login] == 2
    text, data = world.inspect(focus="postgres 16", depth=0)
    assert "neighbourhood (depth 0): not walked" in text.split("\n")
    assert data["neighbours"] == [] and data["edges"] == []
    assert data["dependents"][0]["node_id"] == schema  # dependents do not need a walk
    _, data = world.inspect(focus="postgres 16", depth=5)
    assert data["depth"] == 5


@pytest.mark.parametrize(
    ("depth", "message"),
    [
        (-1, "depth must be in 0..=5"),
        (6, "depth must be in 0..=5"),
        (2.0, "depth must be an integer in 0..=5"),
        (True, "depth must be an integer in 0..=5"),
    ],
)
def test_depth_bounds(world: World, depth: object, message: str) -> None:
    world.derive("user schema")
    assert world.refused(ParameterError, agent_id="a", focus="user schema", depth=depth) == message


def test_admission_follows_status_and_policy(world: World) -> None:
    node = world.derive("user schema")
    with world.session.index.lock:
        world.graph.set_status(node, Status.VENERABLE)
    text, data = world.inspect(policy="solo", focus="user schema")
    assert "canonization (Solo): Venerable -> Canonical refused" in text.split("\n")
    assert data["admission"]["next"] == "Canonical" and data["admission"]["policy"] == "Solo"
    with world.session.index.lock:
        world.graph.set_status(node, Status.CANONICAL)
    text, data = world.inspect(focus="user schema")
    lines = text.split("\n")
    assert lines[0] == f"user schema [Entity, canonical] (id {short_id(node)}, blast radius 0)"
    assert "canonization (Swarm): Canonical" in lines
    assert "  - Canonical is the last stage; there is no next promotion" in lines
    assert data["is_canonical"] is True
    assert data["admission"] == {
        "policy": "Swarm",
        "status": "Canonical",
        "eligible": False,
        "checks": [],
        "reasons": ["Canonical is the last stage; there is no next promotion"],
    }


def test_access_count_includes_unflushed_recalls(world: World) -> None:
    node = world.derive("user schema")
    world.session.access_counts.record([node, node])
    try:
        text, data = world.inspect(focus="user schema")
    finally:
        world.session.access_counts.drain()
    assert data["access_count"] == 2
    assert text.split("\n")[1].endswith("access count 2")


def test_every_contradiction_is_listed_and_what_it_rests_on(world: World) -> None:
    ruling = world.derive("the users table holds accounts", agent="a")
    world.clock.advance(5)
    dep = world.derive("login reads the users table", agent="b", depends_on=[ruling])
    world.clock.advance(100)
    first = world.derive("accounts moved to the accounts table", agent="c", against=[ruling])
    world.clock.advance(100)
    second = world.derive("accounts live in ldap now", agent="d", against=[ruling])
    text, data = world.inspect(focus="the users table holds accounts")
    expected = [
        f'⚠ Contradicted at {format_rfc3339(T0 + 205)} by d: "accounts live in ldap now" '
        f"(id {short_id(second)})",
        f'⚠ Contradicted at {format_rfc3339(T0 + 105)} by c: "accounts moved to the accounts '
        f'table" (id {short_id(first)})',
    ]
    assert data["warnings"] == expected
    assert text.split("\n")[2:4] == expected
    _, data = world.inspect(focus=dep)
    assert data["warnings"] == [
        f'⚠ Rests on a contradicted concept: "the users table holds accounts" '
        f'(id {short_id(ruling)}), contradicted by "accounts live in ldap now" '
        f"(id {short_id(second)})"
    ]


# =====================================================================================
# the 200-neighbour and dependents bounds
# =====================================================================================


def test_neighbourhood_keeps_200_neighbours_in_all(mem_world: World) -> None:
    world = mem_world
    hub = world.derive("the shared config loader")
    world.derive_many([f"service {i:03d} reads its config" for i in range(200)], depends_on=[hub])
    text, data = world.inspect(focus="the shared config loader", depth=1)
    assert len(data["neighbours"]) == 200 and data["neighbours_truncated"] is False
    assert len(data["dependents"]) == 200 and data["dependents_truncated"] is False
    assert "stops at 200" not in text and "more (dependents_truncated)" not in text

    world.derive("service 200 reads its config", depends_on=[hub])
    text, data = world.inspect(focus="the shared config loader", depth=1)
    assert len(data["neighbours"]) == 200 and data["neighbours_truncated"] is True
    assert data["blast_radius"] == 201
    assert len(data["dependents"]) == 200 and data["dependents_truncated"] is True
    lines = text.split("\n")
    assert "dependents (201):" in lines
    assert "  … and 1 more (dependents_truncated)" in lines
    assert lines[-1] == (
        "the neighbourhood stops at 200 neighbours; more concepts lie within depth 1: "
        "inspect one of them, or a smaller depth"
    )
    # 200 in all across hops, not per hop
    _, data = world.inspect(focus="the shared config loader", depth=5)
    assert len(data["neighbours"]) == 200 and data["neighbours_truncated"] is True


# =====================================================================================
# resolving the focus
# =====================================================================================


def test_focus_resolves_by_full_id_short_id_and_text(world: World) -> None:
    node = world.derive("User  Schema")
    for focus, how in [
        (node, "node_id"),
        (f" {node.upper()} ", "node_id"),
        (short_id(node), "short_id"),
        ("user schema", "content"),
    ]:
        text, data = world.inspect(focus=focus)
        assert data["node_id"] == node and data["resolved_by"] == how
        assert text.startswith("User  Schema [Entity]")


def test_exact_text_wins_over_substring_and_short_id(world: World) -> None:
    short = world.derive("user schema")
    world.derive("the user schema v2")
    _, data = world.inspect(focus="USER SCHEMA")
    assert data["node_id"] == short and data["resolved_by"] == "content"
    # text that is also 8 hex characters: the text match wins
    hexy = world.derive("deadbeef")
    _, data = world.inspect(focus="deadbeef")
    assert data["node_id"] == hexy and data["resolved_by"] == "content"


def test_a_single_substring_resolves_and_says_so(world: World) -> None:
    node = world.derive("the user schema lives in postgres")
    world.derive("auth uses JWT")
    text, data = world.inspect(focus="User Schema")
    assert data["node_id"] == node and data["resolved_by"] == "substring"
    assert text.split("\n")[0] == (
        'focus "User Schema" resolved as a substring of this one concept\'s text'
    )


def test_several_substring_matches_refuse_with_at_most_10_candidates(mem_world: World) -> None:
    world = mem_world
    world.derive_many([f"cache layer {i:02d} settings" for i in range(12)])
    message = world.refused(agent_id="a", focus="cache layer")
    lines = message.split("\n")
    assert lines[0] == (
        'reference refused: focus "cache layer" matches 12 concepts as a substring; '
        "name one exactly by its node id:"
    )
    assert len(lines) == 12  # head, 10 candidates, "and 2 more"
    assert lines[-1] == "- and 2 more"
    first = world.id_of("cache layer 00 settings")
    assert lines[1] == f'- {first} "cache layer 00 settings" [Logic]'


def test_exactly_ten_candidates_lists_them_all(mem_world: World) -> None:
    world = mem_world
    world.derive_many([f"queue worker {i} retries" for i in range(10)])
    lines = world.refused(agent_id="a", focus="queue worker").split("\n")
    assert len(lines) == 11 and not lines[-1].startswith("- and")


def test_closest_substring_candidates_come_first(mem_world: World) -> None:
    world = mem_world
    world.derive("the retry budget of the queue worker is five attempts")
    world.derive("queue worker")
    world.derive("queue worker pool size")
    # exact text wins outright
    _, data = world.inspect(focus="queue worker")
    assert data["resolved_by"] == "content"
    lines = world.refused(agent_id="a", focus="queue work").split("\n")
    assert [line.split('"')[1] for line in lines[1:]] == [
        "queue worker",
        "queue worker pool size",
        "the retry budget of the queue worker is five attempts",
    ]


def test_no_match_refuses_with_the_closest_concepts(world: World) -> None:
    node = world.derive("the billing service retries webhooks")
    world.derive("auth uses JWT")
    message = world.refused(agent_id="a", focus="webhook retries in billing")
    assert message.split("\n") == [
        'reference refused: focus "webhook retries in billing" matches no concept in this '
        "session, exactly, by short id or as a substring; the closest concepts:",
        f'- {node} "the billing service retries webhooks" [Entity]',
    ]
    message = world.refused(agent_id="a", focus="kubernetes")
    assert message == (
        'reference refused: focus "kubernetes" matches no concept in this session, exactly, '
        "by short id or as a substring; no concept shares a word with it"
    )


def test_an_interaction_id_is_refused(world: World) -> None:
    world.derive("user schema")
    interaction = next(e.src for e in world.graph.iter_edges() if e.edge_type is EdgeType.DERIVES)
    message = world.refused(agent_id="a", focus=interaction)
    assert message.startswith(f'reference refused: focus "{interaction}" is an interaction\'s id')


def direct_world(concepts: Sequence[Concept]) -> World:
    """A session whose concepts were written straight to the store (fixed ids and keys)."""
    store = MemoryStore()
    store.ensure_session("s", T0)
    iid = "00000000-1111-4000-8000-000000000000"
    inter = Interaction(iid, "s", "agent-a", InteractionKind.DERIVE, T0, T0, "call")
    edges = [Edge("s", iid, c.id, EdgeType.DERIVES, 1.0, iid, "agent-a", T0, T0) for c in concepts]
    store.apply(WriteBatch("s", inter, list(concepts), edges))
    return World(store)


def concept(node_id: str, text: str, repo: str | None = None) -> Concept:
    made = Concept(node_id, "s", text, canonical_key(text), ConceptType.RESOURCE, T0, T0, "agent-a")
    made.repo_scope = repo
    return made


def test_text_naming_several_concepts_lists_each_with_its_repository() -> None:
    a = "aaaaaaaa-0000-4000-8000-000000000001"
    b = "bbbbbbbb-0000-4000-8000-000000000002"
    world = direct_world(
        [
            concept(a, "README.md", "github.com/acme/widgets"),
            concept(b, "README.md", "github.com/acme/gadgets"),
        ]
    )
    try:
        message = world.refused(agent_id="a", focus="README.md")
        assert message.split("\n") == [
            'reference refused: focus "README.md" matches 2 concepts exactly; name one '
            "exactly by its node id:",
            f'- {a} "README.md" [Resource, repo "github.com/acme/widgets"]',
            f'- {b} "README.md" [Resource, repo "github.com/acme/gadgets"]',
        ]
        text, data = world.inspect(focus=a)
        assert text.startswith(
            f'README.md [Resource, repo "github.com/acme/widgets"] (id {short_id(a)}, '
        )
        assert data["repo_scope"] == "github.com/acme/widgets"
    finally:
        world.pipeline.close()


def test_a_short_id_several_concepts_share_is_refused_with_full_ids() -> None:
    a = "abcdef12-0000-4000-8000-000000000001"
    b = "abcdef12-0000-4000-8000-000000000002"
    world = direct_world([concept(a, "first file"), concept(b, "second file")])
    try:
        message = world.refused(agent_id="a", focus="abcdef12")
        assert message.split("\n") == [
            'reference refused: focus "abcdef12" matches 2 concepts by short id; name one '
            "exactly by its node id:",
            f'- {a} "first file" [Resource]',
            f'- {b} "second file" [Resource]',
        ]
        _, data = world.inspect(focus=b)
        assert data["node_id"] == b
    finally:
        world.pipeline.close()


def test_past_the_scan_cap_the_substring_leg_scans_a_bounded_subset(mem_world: World) -> None:
    world = mem_world
    oldest = world.derive("zebra crossing rules")
    pillar = world.derive("yak shaving policy")
    world.derive("a reader of the yak policy", depends_on=[pillar])
    world.derive_many([f"filler fact {i:04d}" for i in range(SCAN_CAP - 3)])
    assert len(world.graph) == SCAN_CAP

    # at the cap every concept is scanned, and nothing is said about it
    text, data = world.inspect(focus="zebra cross")
    assert data["node_id"] == oldest and "substring_scan" not in data
    assert "covered" not in text

    world.derive("one fact past the cap")
    total = SCAN_CAP + 1
    note = (
        f"the substring search covered {SCAN_CAP} of the session's {total} concepts (past the "
        f"{SCAN_CAP}-concept scan cap it scans up to 1000 with the largest blast radius, then "
        "the most recent); name a concept exactly or by id to reach the rest"
    )
    # the oldest concept with no dependents falls outside the subset: refused, and said so,
    # with the keyword suggestions still reaching it
    message = world.refused(agent_id="a", focus="zebra cross")
    assert message.split("\n")[0] == (
        'reference refused: focus "zebra cross" matches no concept in this session, exactly, '
        f"by short id or as a substring; {note}; the closest concepts:"
    )
    assert f'- {oldest} "zebra crossing rules" [Entity]' in message.split("\n")
    # exact text is not subject to the cap
    _, data = world.inspect(focus="zebra crossing rules")
    assert data["node_id"] == oldest
    # an old concept others depend on is in the subset by its blast radius
    text, data = world.inspect(focus="yak shav")
    assert data["node_id"] == pillar and data["resolved_by"] == "substring"
    assert data["substring_scan"] == {"scanned": SCAN_CAP, "concepts": total}
    assert text.split("\n")[0] == (
        f'focus "yak shav" resolved as a substring of this one concept\'s text; {note}'
    )
    # and the newest concepts are in it by recency
    _, data = world.inspect(focus="past the cap")
    assert data["resolved_by"] == "substring"


# =====================================================================================
# argument refusals
# =====================================================================================


def test_argument_refusals(world: World) -> None:
    world.derive("user schema")
    r = world.refused
    assert r(ParameterError, focus="user schema") == "agent_id is required"
    assert r(ParameterError, agent_id="a\u2028b", focus="x").startswith("agent_id must be one line")
    assert r(ParameterError, agent_id="a") == "focus is required"
    assert r(ParameterError, agent_id="a", focus="  ") == "focus must not be empty or blank"
    assert r(ParameterError, agent_id="a", focus=5) == "focus must be a string"
    assert r(ParameterError, agent_id="a", focus="x" * 16_385) == (
        "focus is 16385 bytes; the cap is 16384 bytes"
    )
    assert r(ParameterError, agent_id="a", focus="a\u202eb").startswith(
        "focus contains a disallowed invisible formatting character (U+202E)"
    )
    assert r(ParameterError, agent_id="a", focus="user schema", top_k=3) == (
        "top_k is not an argument of lambo_inspect; it takes agent_id, focus, depth, scope"
    )
    assert r(ParameterError, agent_id="a", focus="user schema", scope="general") == (
        'scope "general" is not a scope of this session; its scopes are: s'
    )
    # at the cap the focus is accepted (and matches nothing)
    assert r(agent_id="a", focus="x" * 16_384).startswith('reference refused: focus "xxx')
    _, data = world.inspect(focus="user schema", scope="s")
    assert data["content"] == "user schema"
