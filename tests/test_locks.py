"""lambo_reserve: soft locks in RAM, on a real session written through the pipeline."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.clock import ManualClock
from lambo_core.errors import ConflictError, LamboError, ParameterError, ReferenceRefused
from lambo_core.locks import LockTable, run_reserve
from lambo_core.model import short_id
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.text import canonical_key, format_rfc3339
from lambo_core.writes import WritePipeline

T0 = 1_760_000_000.0


class World:
    def __init__(self, store: Any) -> None:
        self.clock = ManualClock(T0)
        self.session = Session.open(
            store, "s", EmbedderPlan(lazy=None, contract=None), clock=self.clock
        )
        self.pipeline = WritePipeline(self.session).start()
        self.table = LockTable(self.clock)

    def derive(self, content: str, agent: str = "agent-a") -> str:
        self.pipeline.submit(
            "lambo_derive",
            {"agent_id": agent, "concepts": [{"content": content, "concept_type": "entity"}]},
        )
        assert self.pipeline.wait_idle(10)
        found = self.session.index.graph.concepts_with_key(canonical_key(content))
        assert len(found) == 1
        return found[0].id

    def reserve(self, **args: Any) -> tuple[str, dict[str, Any]]:
        return run_reserve(self.session, args, self.table)


@pytest.fixture(params=["memory", "sqlite"])
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    store = MemoryStore() if request.param == "memory" else SqliteStore(tmp_path / "l.db")
    w = World(store)
    yield w
    w.pipeline.close()


def refusal(world: World, cls: type[LamboError], **args: Any) -> str:
    with pytest.raises(cls) as caught:
        world.reserve(**args)
    return caught.value.render()


def test_reserve_then_release(world: World) -> None:
    node = world.derive("user schema")
    text, data = world.reserve(agent_id="agent-a", node_id=node, ttl_seconds=60)
    until = format_rfc3339(T0 + 60)
    assert text.startswith(f'reserved {node} ("user schema") for agent_id "agent-a" until {until}')
    assert data == {
        "node_id": node,
        "agent_id": "agent-a",
        "reserved": True,
        "extended": False,
        "ttl_seconds": 60,
        "expires_at": until,
    }
    held = world.table.holder(node)
    assert held is not None and held.agent_id == "agent-a" and held.expires_at == T0 + 60

    text, data = world.reserve(agent_id="agent-a", node_id=node, release=True)
    assert text == f'released {node} ("user schema"), held under agent_id "agent-a"'
    assert data == {"node_id": node, "agent_id": "agent-a", "released": True, "was_held": True}
    assert world.table.holder(node) is None


def test_default_ttl_is_30_seconds_and_the_lock_lapses(world: World) -> None:
    node = world.derive("user schema")
    _, data = world.reserve(agent_id="agent-a", node_id=node)
    assert data["ttl_seconds"] == 30 and data["expires_at"] == format_rfc3339(T0 + 30)
    world.clock.advance(29.9)
    assert world.table.holder(node) is not None
    world.clock.advance(0.1)
    assert world.table.holder(node) is None
    # lapsed: another agent takes it without a conflict
    _, data = world.reserve(agent_id="agent-b", node_id=node)
    assert data["reserved"] is True and data["extended"] is False


def test_another_agent_gets_a_conflict_naming_holder_and_expiry(world: World) -> None:
    node = world.derive("user schema")
    world.reserve(agent_id="agent-a", node_id=node, ttl_seconds=90)
    world.clock.advance(0.5)  # a fractional expiry is shown rounded up: free from then on
    message = refusal(world, ConflictError, agent_id="agent-b", node_id=node)
    assert message == (
        f'conflict: node {node} is reserved by agent "agent-a" until '
        f"{format_rfc3339(T0 + 90)}; nothing was reserved or released. Wait until then, or "
        "work on another node"
    )
    release = refusal(world, ConflictError, agent_id="agent-b", node_id=node, release=True)
    assert release == message
    held = world.table.holder(node)
    assert held is not None and held.agent_id == "agent-a"  # untouched by either attempt


def test_expiry_rounds_up_to_the_second() -> None:
    clock = ManualClock(T0 + 0.25)
    table = LockTable(clock)
    table.reserve("n", "agent-a", 30)
    with pytest.raises(ConflictError) as caught:
        table.reserve("n", "agent-b", 30)
    assert f"until {format_rfc3339(T0 + 31)};" in caught.value.render()


def test_same_agent_id_extends_and_shares(world: World) -> None:
    node = world.derive("user schema")
    world.reserve(agent_id="agent-a", node_id=node, ttl_seconds=60)
    world.clock.advance(50)
    text, data = world.reserve(agent_id="agent-a", node_id=node, ttl_seconds=60)
    assert text.startswith(f"extended the reservation of {node}")
    assert data["extended"] is True and data["expires_at"] == format_rfc3339(T0 + 110)
    # a shorter ttl never shortens a lock the caller already holds
    _, data = world.reserve(agent_id="agent-a", node_id=node, ttl_seconds=1)
    assert data["expires_at"] == format_rfc3339(T0 + 110)
    # a second client sending the same id shares the lock and can release it
    _, data = world.reserve(agent_id="agent-a", node_id=node, release=True)
    assert data["released"] is True


def test_release_of_an_unheld_node_is_a_plain_success(world: World) -> None:
    node = world.derive("user schema")
    text, data = world.reserve(agent_id="agent-a", node_id=node, release=True)
    assert text == f'{node} ("user schema") was not reserved; nothing to release'
    assert data == {"node_id": node, "agent_id": "agent-a", "released": False, "was_held": False}


def test_distinct_nodes_are_independent(world: World) -> None:
    a = world.derive("user schema")
    b = world.derive("auth uses JWT")
    world.reserve(agent_id="agent-a", node_id=a)
    _, data = world.reserve(agent_id="agent-b", node_id=b)
    assert data["reserved"] is True
    assert len(world.table) == 2


def test_upper_case_node_id_is_the_same_node(world: World) -> None:
    node = world.derive("user schema")
    _, data = world.reserve(agent_id="agent-a", node_id=f"  {node.upper()} ")
    assert data["node_id"] == node


# -- refusals ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ttl", "ok"), [(0, False), (1, True), (3600, True), (3601, False), (-5, False)]
)
def test_ttl_bounds(world: World, ttl: int, ok: bool) -> None:
    node = world.derive("user schema")
    if ok:
        _, data = world.reserve(agent_id="agent-a", node_id=node, ttl_seconds=ttl)
        assert data["ttl_seconds"] == ttl
    else:
        message = refusal(world, ParameterError, agent_id="agent-a", node_id=node, ttl_seconds=ttl)
        assert message == "ttl_seconds must be in 1..=3600"


@pytest.mark.parametrize("ttl", [1.5, "30", True])
def test_ttl_must_be_an_integer(world: World, ttl: object) -> None:
    node = world.derive("user schema")
    message = refusal(world, ParameterError, agent_id="agent-a", node_id=node, ttl_seconds=ttl)
    assert message == "ttl_seconds must be an integer in 1..=3600"


def test_release_must_be_a_boolean(world: World) -> None:
    node = world.derive("user schema")
    message = refusal(world, ParameterError, agent_id="agent-a", node_id=node, release="yes")
    assert message == "release must be true or false"


def test_agent_id_is_required_and_one_line(world: World) -> None:
    node = world.derive("user schema")
    assert refusal(world, ParameterError, node_id=node) == "agent_id is required"
    message = refusal(world, ParameterError, agent_id="a\nb", node_id=node)
    assert message.startswith("agent_id must be one line")
    message = refusal(world, ParameterError, agent_id="x" * 257, node_id=node)
    assert message == "agent_id is 257 characters; the cap is 256 characters"


def test_unknown_argument_is_refused_by_name(world: World) -> None:
    node = world.derive("user schema")
    message = refusal(world, ParameterError, agent_id="agent-a", node_id=node, ttl=5)
    assert message == (
        "ttl is not an argument of lambo_reserve; it takes agent_id, node_id, ttl_seconds, "
        "release, scope"
    )


def test_node_id_is_required(world: World) -> None:
    assert refusal(world, ParameterError, agent_id="agent-a") == "node_id is required"


def test_short_id_or_text_is_not_a_node_id(world: World) -> None:
    node = world.derive("user schema")
    message = refusal(world, ParameterError, agent_id="agent-a", node_id=short_id(node))
    assert message.startswith("node_id must be a full node id, a hyphenated UUID")
    assert "a short id is not enough here" in message
    message = refusal(world, ParameterError, agent_id="agent-a", node_id="user schema")
    assert message.startswith("node_id must be a full node id")
    message = refusal(world, ParameterError, agent_id="agent-a", node_id="x" * 200)
    assert message == "node_id is 200 bytes; the cap is 128 bytes"


def test_unknown_node_and_interaction_ids_are_refused(world: World) -> None:
    world.derive("user schema")
    missing = "478416c2-0000-4000-8000-000000000000"
    message = refusal(world, ReferenceRefused, agent_id="agent-a", node_id=missing)
    assert message == (
        f"reference refused: node_id {missing} matches no concept in this session; "
        "nothing was reserved"
    )
    message = refusal(world, ReferenceRefused, agent_id="agent-a", node_id=missing, release=True)
    assert message.endswith("matches no concept in this session; nothing was released")
    graph = world.session.index.graph
    interaction = next(
        e.src for e in graph.iter_edges() if e.edge_type.value == "derives" and e.src
    )
    message = refusal(world, ReferenceRefused, agent_id="agent-a", node_id=interaction)
    assert "is an interaction's id, not a concept's; nothing was reserved" in message


def test_a_held_lock_on_a_removed_concept_can_still_be_released(world: World) -> None:
    node = world.derive("user schema")
    world.reserve(agent_id="agent-a", node_id=node)
    with world.session.index.lock:
        world.session.index.graph.remove_concept(node)
    with pytest.raises(ReferenceRefused):
        world.reserve(agent_id="agent-b", node_id=node, release=True)
    _, data = world.reserve(agent_id="agent-a", node_id=node, release=True)
    assert data["released"] is True


def test_scope_accepts_only_the_session_itself(world: World) -> None:
    node = world.derive("user schema")
    _, data = world.reserve(agent_id="agent-a", node_id=node, scope="s")
    assert data["reserved"] is True
    message = refusal(world, ParameterError, agent_id="agent-a", node_id=node, scope="general")
    assert message == 'scope "general" is not a scope of this session; its scopes are: s'


def test_expired_entries_are_swept() -> None:
    clock = ManualClock(T0)
    table = LockTable(clock)
    for i in range(300):
        table.reserve(f"n{i}", "agent-a", 1)
    clock.advance(2)
    for i in range(300):
        table.reserve(f"m{i}", "agent-a", 60)
    assert len(table._held) <= 300 + 256
    assert len(table) == 300
