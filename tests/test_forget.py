"""`lambo forget`'s rules on every store (SQLite, memory, PostgreSQL): the hub's admin tool
through a real service and its writer thread, the store's one transaction, the scrub of the
forgotten text from stored writes, the audit event, and the refusals that remove nothing.

Through a running `lambo serve` and from the shell: tests/e2e/test_forget_backup.py.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.admin_tools import answer_admin
from lambo_core.config import load_config
from lambo_core.forget import FORGET_TOOL, ForgetRequest, content_digest
from lambo_core.model import Concept, ConceptType, Status, WriteBatch, WriteIntent
from lambo_core.serve import ServeOptions, open_service, stop_service
from lambo_core.service import MemoryService
from lambo_core.store import SqliteStore
from lambo_core.store.base import Store
from tests.test_store import STORE_KINDS, T0, open_kind

S = "s"
SECRET = "the staging api key is sk-live-Zq81hunter2XyZ"
TOKEN = "sk-live-Zq81hunter2XyZ"
FTS_TERM = b"zq81hunter2xyz"  # how FTS5 (unicode61) keeps the token in its index


@dataclass
class World:
    kind: str
    store: Store
    service: MemoryService
    path: Path | None  # the SQLite file, for the byte checks

    def call(self, tool: str, **args: Any) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            if tool == FORGET_TOOL:
                return await answer_admin(self.service, tool, args)
            return (await self.service.call(tool, args)).to_json()

        return anyio.run(go)

    def wait(self, receipt: str, agent: str = "a") -> dict[str, Any]:
        stats = self.call("lambo_stats", agent_id=agent, receipt=receipt, wait_ms=20000)
        assert not stats["isError"], stats
        return dict(stats["structuredContent"]["receipt"])

    def derive(self, content: str, **extra: Any) -> str:
        concept = {"content": content, "concept_type": "logic", **extra}
        ack = self.call("lambo_derive", agent_id="a", concepts=[concept])
        assert not ack["isError"], ack
        outcome = self.wait(ack["structuredContent"]["receipt"])
        assert outcome["state"] == "applied", outcome
        return str((outcome["created"] or outcome["matched"])[0])

    def forget(self, *ids: str, force: bool = False) -> dict[str, Any]:
        """The ack when refused, else the applied receipt."""
        ack = self.call(FORGET_TOOL, agent_id="operator", ids=list(ids), force=force)
        if ack["isError"]:
            return ack
        return self.wait(ack["structuredContent"]["receipt"], "operator")

    def recall(self, query: str) -> str:
        result = self.call("lambo_recall", agent_id="a", query=query)
        assert not result["isError"], result
        return str(result["content"][0]["text"])


def _config(tmp_path: Path) -> Any:
    (tmp_path / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)


@pytest.fixture(params=STORE_KINDS)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    store = open_kind(request.param, request, tmp_path)
    store.ensure_session(S, T0)
    seed(store)
    service = open_service(store, _config(tmp_path), ServeOptions(session=S))
    path = store.path if isinstance(store, SqliteStore) else None
    yield World(str(request.param), store, service, path)
    stop_service(service)
    store.close()


# two concepts whose ids share their first 8 hex digits: their short id is ambiguous
TWIN_A = "abcdef12-0000-4000-8000-000000000001"
TWIN_B = "abcdef12-0000-4000-8000-000000000002"


def seed(store: Store) -> None:
    twins = [
        Concept(node_id, S, text, text, ConceptType.ENTITY, T0, T0, "seed")
        for node_id, text in ((TWIN_A, "first twin"), (TWIN_B, "second twin"))
    ]
    store.apply(WriteBatch(session=S, concepts=twins))


def _edges_touching(store: Store, node_id: str) -> int:
    return sum(1 for e in store.edges(S) if node_id in (e.src, e.dst))


def test_forget_removes_the_concept_its_edges_and_recall_stops_finding_it(world: World) -> None:
    secret = world.derive(SECRET)
    cites = world.derive("deploys read the staging api key", depends_on=[SECRET])
    assert "sk-live" in world.recall("staging api key")
    edges_before = _edges_touching(world.store, secret)
    assert edges_before >= 2  # its derives edge and the citation

    out = world.forget(secret[:8])  # the short id recall shows
    assert out["state"] == "applied", out
    assert out["forgotten"] == [secret]
    assert out["edges_removed"] == edges_before
    assert f"forgot 1 concept(s) ({secret[:8]}) and {edges_before} edge(s)" in out["detail"]

    assert world.store.get_concept(S, secret) is None
    assert _edges_touching(world.store, secret) == 0
    assert world.store.get_concept(S, cites) is not None  # its dependent stays
    shown = world.recall("staging api key")
    assert "sk-live" not in shown and cites[:8] in shown
    graph = world.service.session.index.graph
    assert graph.concept(secret) is None
    assert all(secret not in (e.src, e.dst) for e in graph.iter_edges())
    keywords = world.store.keyword_index(S).search(TOKEN, 10)
    assert secret not in [node_id for node_id, _ in keywords]
    # the operator's forget leaves the session a plain one
    record = world.store.get_session(S)
    assert record is not None and not record.shared_layer


def test_the_text_is_scrubbed_from_stored_writes_and_the_audit_keeps_a_digest(
    world: World,
) -> None:
    secret = world.derive(SECRET)
    world.derive("deploys read the staging api key", depends_on=[SECRET])
    assert any(TOKEN in json.dumps(i.payload) for i in world.store.intents(S))

    out = world.forget(SECRET)  # by its exact text, as references read
    assert out["state"] == "applied", out

    for stored in world.store.intents(S):
        assert TOKEN not in json.dumps(stored.payload), stored.payload
        assert TOKEN not in json.dumps(stored.outcome), stored.outcome
    summaries = [i.summary for i in world.store.interactions(S)]
    assert summaries and all(TOKEN not in s for s in summaries)
    digest = content_digest(SECRET)
    assert any(f"[forgotten {digest[:12]}]" in s for s in summaries)
    (event,) = world.store.forget_events(S)
    assert event.node_ids == (secret,)
    assert event.digests == (hashlib.sha256(SECRET.encode()).hexdigest(),)
    assert event.agent_id == "operator" and not event.forced
    assert event.edges_removed == out["edges_removed"]
    assert TOKEN not in repr(event)
    if world.path is not None:  # the file's bytes, WAL included, once a checkpoint resets it
        assert isinstance(world.store, SqliteStore)
        assert world.store._db.checkpoint("TRUNCATE")[0] == 0  # the forget's own is PASSIVE
        for part in (world.path, world.path.with_name(world.path.name + "-wal")):
            if part.exists():
                data = part.read_bytes()
                assert TOKEN.encode() not in data, part
                assert FTS_TERM not in data, part  # the keyword index's own copy of it


def _held(world: World, token: str) -> list[str]:
    """Where ``token`` is still stored: intents' payloads and outcomes, interactions."""
    found = [
        f"intent {i.receipt_id} payload" for i in world.store.intents(S)
        if token in json.dumps(i.payload)
    ] + [
        f"intent {i.receipt_id} outcome" for i in world.store.intents(S)
        if token in json.dumps(i.outcome)
    ]  # fmt: skip
    return found + [
        f"interaction {i.id}" for i in world.store.interactions(S) if token in i.summary
    ]


def test_writes_that_merged_into_or_named_the_concept_are_redacted_too(world: World) -> None:
    """A variant with the same key, and an action's produces text resolved to it, keep
    the secret in their own payload and summary: those rows go too, others stay as they were."""
    secret = world.derive("The deploy API key is sk-live-ABC123XYZ")
    assert world.derive("The deploy  API key is sk-live-ABC123XYZ") == secret  # matched
    ack = world.call(
        "lambo_record_action", agent_id="a", action="rotated the deploy credentials",
        produces=["The deploy API key is sk-live-ABC123XYZ"],
    )  # fmt: skip
    assert not ack["isError"], ack
    assert world.wait(ack["structuredContent"]["receipt"])["matched"] == [secret]
    other = world.derive("the build runs on two cores")
    untouched = {
        i.receipt_id: (i.payload, i.outcome) for i in world.store.intents(S)
        if other in json.dumps(i.outcome)
    }  # fmt: skip
    assert len(untouched) == 1
    assert _held(world, "sk-live-ABC123XYZ")

    out = world.forget(secret)
    assert out["state"] == "applied", out
    assert _held(world, "sk-live-ABC123XYZ") == []
    marker = f"[forgotten {content_digest('The deploy API key is sk-live-ABC123XYZ')[:12]}]"
    summaries = [i.summary for i in world.store.interactions(S)]
    assert summaries.count(marker) == 2  # the two derives that landed on it, whole
    assert "rotated the deploy credentials" in summaries  # its own text did not name it
    assert "the build runs on two cores" in summaries
    for receipt_id, (payload, outcome) in untouched.items():
        stored = world.store.get_intent(receipt_id)
        assert stored is not None and (stored.payload, stored.outcome) == (payload, outcome)


def test_forgetting_a_common_word_leaves_other_writes_alone(world: World) -> None:
    """No scrub by string equality: a concept whose content is "type" takes neither the
    key nor the word out of other rows."""
    before_other = world.derive("the type of the field is logic")
    word = world.derive("type")
    rows = {
        i.receipt_id: (i.payload, i.outcome) for i in world.store.intents(S)
        if word not in json.dumps(i.outcome)
    }  # fmt: skip
    assert world.forget(word)["state"] == "applied"
    for receipt_id, (payload, outcome) in rows.items():
        stored = world.store.get_intent(receipt_id)
        assert stored is not None and (stored.payload, stored.outcome) == (payload, outcome)
    summaries = [i.summary for i in world.store.interactions(S)]
    assert "the type of the field is logic" in summaries
    assert world.store.get_concept(S, before_other) is not None


def test_a_forget_behind_an_older_write_owed_a_replay_is_refused(world: World) -> None:
    """A write kept pending (a transient failure) would be replayed after the forget and
    bring the text back: the forget refuses until it has been applied."""
    secret = world.derive(SECRET)
    world.store.add_intent(
        WriteIntent(
            receipt_id="r-owed", session=S, agent_id="a", tool="lambo_derive",
            payload={"kind": "derive", "concepts": [{"content": SECRET}]},
            created_at=T0, via=S,
        )
    )  # fmt: skip
    out = world.forget(secret)
    assert out["state"] == "failed", out
    assert out["detail"] == (
        "conflict: 1 earlier write(s) of this session are still owed a replay (r-owed); "
        "forget once they are applied; nothing was removed; nothing was written"
    )  # the pipeline's failed-receipt suffix follows the forget's own
    assert world.store.get_concept(S, secret) is not None
    assert world.store.forget_events(S) == []


def test_a_canonical_concept_needs_force(world: World) -> None:
    node = world.derive("the canonical fact about the billing service")
    world.store.set_status(S, node, Status.CANONICAL)  # as the daemon promotes it
    with world.service.session.index.lock:
        world.service.session.index.graph.set_status(node, Status.CANONICAL)

    refused = world.forget(node)
    assert refused["isError"]
    text = refused["content"][0]["text"]
    assert f"is Canonical ({node[:8]})" in text and "needs --force" in text
    assert text.endswith("; nothing was removed")
    assert world.store.get_concept(S, node) is not None

    out = world.forget(node, force=True)
    assert out["state"] == "applied" and out["forced"] is True
    assert world.store.get_concept(S, node) is None
    assert world.store.forget_events(S)[-1].forced


def test_refusals_name_the_id_and_remove_nothing(world: World) -> None:
    kept = world.derive("a fact that must survive a refused forget")

    unknown = world.forget(kept, "0badc0de")
    assert unknown["isError"]
    assert unknown["content"][0]["text"] == (
        'reference refused: "0badc0de" names no concept in this session; nothing was removed'
    )
    several = world.forget("abcdef12")
    text = several["content"][0]["text"]
    assert several["isError"] and '"abcdef12" matches several:' in text
    assert TWIN_A in text and TWIN_B in text and "name one by its full node id" in text
    both = world.forget("nothing like this", "abcdef12", kept)
    text = both["content"][0]["text"]
    assert "names no concept" in text and "matches several" in text  # every problem at once
    interaction = next(iter(world.store.interactions(S))).id
    assert "is an interaction's id" in world.forget(interaction)["content"][0]["text"]
    for bad, says in (
        ({"ids": []}, "ids must be a non-empty array"),
        ({"ids": [kept], "force": "yes"}, "force must be true or false"),
        ({"ids": [kept], "extra": 1}, "unknown argument extra"),
    ):
        answer = world.call(FORGET_TOOL, agent_id="operator", **bad)
        assert answer["isError"] and says in answer["content"][0]["text"], answer

    assert world.store.get_concept(S, kept) is not None
    assert world.store.get_concept(S, TWIN_A) is not None
    assert world.store.forget_events(S) == []
    out = world.forget(TWIN_A)  # the full id names one of the twins
    assert out["state"] == "applied" and out["forgotten"] == [TWIN_A]
    assert world.store.get_concept(S, TWIN_B) is not None


def test_a_forget_left_pending_is_replayed_by_the_next_writer(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Its intent is durable before the ack: a crash before the apply loses nothing."""
    store = open_kind("sqlite", request, tmp_path)
    store.ensure_session(S, T0)
    seed(store)
    store.add_intent(
        WriteIntent(
            receipt_id="r-forget",
            session=S,
            agent_id="operator",
            tool=FORGET_TOOL,
            payload={"kind": "forget", "node_ids": [TWIN_A], "force": False},
            created_at=T0,
            via=S,
        )
    )
    service = open_service(store, _config(tmp_path), ServeOptions(session=S))
    try:
        assert service.pipeline.wait_idle(20)
        assert store.get_concept(S, TWIN_A) is None
        settled = store.get_intent("r-forget")
        assert settled is not None and settled.state.value == "applied"
        assert settled.outcome is not None and settled.outcome["data"]["forgotten"] == [TWIN_A]
        assert service.session.index.graph.concept(TWIN_A) is None
    finally:
        stop_service(service)
        store.close()


def test_the_redaction_takes_rows_by_the_ids_they_name_never_by_their_text() -> None:
    request = ForgetRequest(S, "op", T0, ("id-1", "id-2"), ("abc", "type"), False, None)
    redaction = request.redaction()
    one, two = (f"[forgotten {content_digest(t)[:12]}]" for t in ("abc", "type"))
    # a key or a text equal to a forgotten content is no tie; only an id as a value is
    untied = json.dumps({"type": "abc", "id-1": "type"})
    assert redaction.intent("applied", untied, None) is None
    payload = json.dumps({"kind": "derive", "concepts": [{"content": "abc", "type": "logic"}]})
    outcome = json.dumps({
        "detail": "derived 1 concept(s): 0 created (0 embedded), 1 matched existing\nrows",
        "data": {"created": [], "matched": ["id-1"], "matched_count": 1,
                 "stale_report": {"rows": [{"snippet": "abc"}]}},
    })  # fmt: skip
    redacted = redaction.intent("applied", payload, outcome)
    assert redacted is not None
    assert json.loads(redacted[0]) == {"kind": "derive", "forgotten": [one]}
    assert json.loads(str(redacted[1])) == {
        "detail": "derived 1 concept(s): 0 created (0 embedded), 1 matched existing",
        "data": {"created": [], "matched": ["id-1"], "matched_count": 1},
        "forgotten": [one],
    }
    refused = redaction.intent("failed", json.dumps({"kind": "derive", "r": "id-2"}),
                               json.dumps({"detail": 'ref "abc" changed', "data": {}}))  # fmt: skip
    assert refused is not None and "abc" not in refused[1]  # type: ignore[operator]
    assert redaction.summary(["id-2", "id-1", "id-2"]) == f"{one} {two}"
    assert request.event(2).digests == (content_digest("abc"), content_digest("type"))
    assert "abc" not in json.dumps(request.outcome(2))


def test_the_bytes_go_even_where_sqlite_keeps_freed_cells_by_default(tmp_path: Path) -> None:
    """This machine's SQLite zeroes freed cells by default; with that turned off (as other
    builds ship it), a plain delete leaves the text in the file and the forget does not."""
    secret = f"the key is {TOKEN}"

    def stored(name: str) -> tuple[SqliteStore, Concept]:
        store = SqliteStore(tmp_path / name / "lambo.db")
        store._db.write_conn.execute("PRAGMA secure_delete = 0")
        store.ensure_session(S, T0)
        filler = [
            Concept(f"{i:08x}-0000-4000-8000-000000000000", S, f"filler {i}", f"filler {i}",
                    ConceptType.ENTITY, T0, T0, "a")
            for i in range(500)
        ]  # fmt: skip
        store.apply(WriteBatch(session=S, concepts=filler))
        concept = Concept(TWIN_A, S, secret, secret, ConceptType.ENTITY, T0, T0, "a")
        store.apply(WriteBatch(session=S, concepts=[concept]))
        return store, concept

    def held(store: SqliteStore) -> bool:
        parts = (store.path, store.path.with_name(store.path.name + "-wal"))
        return any(TOKEN.encode() in p.read_bytes() for p in parts if p.exists())

    plain, concept = stored("plain")
    plain.delete_concepts(S, [concept.id])
    plain._db.checkpoint("TRUNCATE")
    assert held(plain)  # the deleted cell's bytes are still in the file
    plain.close()
    forgotten, concept = stored("forgotten")
    forgotten.forget(ForgetRequest(S, "op", T0, (concept.id,), (secret,), False, None))
    forgotten._db.checkpoint("TRUNCATE")  # the old frames go at a later checkpoint
    assert not held(forgotten)
    assert forgotten._db.write_conn.execute("PRAGMA secure_delete").fetchone() == (0,)
    forgotten.close()


def test_the_forget_checkpoints_passively_behind_a_reader(tmp_path: Path) -> None:
    """A TRUNCATE checkpoint would hold the session's writer up to the busy timeout behind
    a reader (a running backup): the forget's checkpoint is PASSIVE, and the frames it could
    not copy go at a later checkpoint."""
    store = SqliteStore(tmp_path / "lambo.db")
    store.ensure_session(S, T0)
    seed(store)
    reader = sqlite3.connect(store.path)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM concepts").fetchone()  # holds a read snapshot
    ran: list[str] = []
    store._db.write_conn.set_trace_callback(ran.append)
    try:
        store.forget(ForgetRequest(S, "op", T0, (TWIN_A,), ("first twin",), False, None))
    finally:
        store._db.write_conn.set_trace_callback(None)
        reader.rollback()
        reader.close()
    checkpoints = [q for q in ran if "wal_checkpoint" in q]
    assert checkpoints == ["PRAGMA wal_checkpoint(PASSIVE)"], checkpoints
    assert store.get_concept(S, TWIN_A) is None
    store.close()
