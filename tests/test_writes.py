"""The write pipeline end to end in-process: real SQLite, real MiniLM, real apply worker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.embed.loader import LoadedModels
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.model import EdgeType, IntentState, short_id
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore
from lambo_core.writes import WritePipeline


def open_pipeline(store: Any, plan: EmbedderPlan, name: str = "s") -> WritePipeline:
    return WritePipeline(Session.open(store, name, plan)).start()


@pytest.fixture
def pipeline(tmp_path: Path, minilm: OnnxEmbedder) -> Iterator[WritePipeline]:
    p = open_pipeline(SqliteStore(tmp_path / "w.db"), EmbedderPlan.ready(minilm))
    yield p
    p.close()


def derive(p: WritePipeline, *concepts: dict[str, Any], agent: str = "agent-a", **kw: Any) -> Any:
    return p.submit("lambo_derive", {"agent_id": agent, "concepts": list(concepts), **kw})


def c(content: str, ctype: str = "logic", **kw: Any) -> dict[str, Any]:
    return {"content": content, "concept_type": ctype, **kw}


def settled(p: WritePipeline, ack: Any, agent: str = "agent-a") -> Any:
    view = p.session.receipts.wait(ack.structured["receipt"], agent, p.session.name, 30_000)
    assert view.state is not ReceiptState.PENDING
    return view


def test_ack_shape_matches_the_spec(pipeline: WritePipeline) -> None:
    ack = derive(pipeline, c("user schema", "entity"))
    rid = ack.structured["receipt"]
    assert ack.text.splitlines() == [
        "accepted 1 concept(s) for background write; validated and ordered, not yet applied",
        f"receipt {rid}: pending — admitted, not yet applied; ask again",
        "The outcome arrives on your next tool response. To wait for it, call lambo_stats "
        f"with receipt={rid} (add wait_ms to block).",
        'Recorded under agent_id "agent-a"; send this same id on every call.',
    ]
    assert ack.structured == {
        "summary": "accepted 1 concept(s) for background write; validated and ordered, "
        "not yet applied",
        "receipt": rid,
        "receipt_state": "pending",
        "agent_id": "agent-a",
        "warnings": [],
    }
    assert "created" not in ack.structured and "matched" not in ack.structured


def test_applied_receipt_carries_ids_and_counts(pipeline: WritePipeline) -> None:
    view = settled(pipeline, derive(pipeline, c("user schema", "entity"), c("auth uses JWT")))
    assert view.state is ReceiptState.APPLIED
    assert view.detail == "derived 2 concept(s): 2 created (2 embedded), 0 matched existing"
    assert view.data["created_count"] == 2 and view.data["matched_count"] == 0
    graph = pipeline.session.index.graph
    schema = graph.concepts_with_key("user schema")[0]
    assert schema.id in view.data["created"]
    assert pipeline.session.index.vectors is not None
    assert len(pipeline.session.index.vectors) == 2
    # Stamped with the model's contract at the first write.
    record = pipeline.session.store.get_session("s")
    assert record is not None and record.embedding_contract is not None
    assert record.embedding_contract["dim"] == 384

    again = settled(pipeline, derive(pipeline, c("user \u200d schema", "entity")))
    assert again.data["matched"] == [schema.id] and again.data["created_count"] == 0


def test_citations_and_contradictions_become_edges(pipeline: WritePipeline) -> None:
    ruling = settled(pipeline, derive(pipeline, c("flush retries keep the lease")))
    rid = ruling.data["created"][0]
    view = settled(
        pipeline,
        derive(pipeline, c("lease TTL is 45s because of the flush", depends_on=[short_id(rid)])),
    )
    assert view.detail.endswith("; 1 citation(s) recorded")
    new = view.data["created"][0]
    graph = pipeline.session.index.graph
    assert graph.edge(new, rid, EdgeType.DEPENDENCY) is not None
    assert graph.blast_radius(rid) == 1
    view = settled(
        pipeline,
        derive(pipeline, c("flushes give up after three attempts", "observation", against=[rid])),
    )
    # The first line; the next ones are the stale report (the citation is under 60 s old,
    # so it does not outweigh the contradiction: see tests/test_writes_extras.py).
    assert view.detail.split("\n")[0].endswith("; 1 contradiction(s) recorded")
    assert graph.edge(view.data["created"][0], rid, EdgeType.CONTRADICTS) is not None
    assert graph.blast_radius(rid) == 1  # a contradiction adds no dependent


def test_parent_of_and_record_action(pipeline: WritePipeline) -> None:
    view = settled(
        pipeline,
        derive(
            pipeline,
            c("auth design", "entity"),
            parent_of=[{"parent": "auth design", "child": "tokens expire after 1h"}],
        ),
    )
    graph = pipeline.session.index.graph
    parent = graph.concepts_with_key("auth design")[0].id
    child = graph.concepts_with_key("tokens expire after 1h")[0].id
    assert graph.edge(parent, child, EdgeType.HIERARCHICAL) is not None
    assert view.data["created_count"] == 2

    ack = pipeline.submit(
        "lambo_record_action",
        {
            "agent_id": "agent-a",
            "action": "created migrations/003.sql",
            "produces": ["migrations/003.sql"],
            "depends_on": ["auth design"],
        },
    )
    assert ack.structured["summary"].startswith("accepted action 'created migrations/003.sql'")
    view = settled(pipeline, ack)
    assert view.state is ReceiptState.APPLIED
    act = view.data["action_node"]
    assert graph.edge(act, parent, EdgeType.DEPENDENCY) is not None
    produced = graph.concepts_with_key("migrations/003.sql")[0].id
    assert graph.edge(act, produced, EdgeType.PRODUCES) is not None
    assert graph.blast_radius(parent) == 2  # its parent_of child and the action


def test_one_agents_writes_apply_in_send_order(pipeline: WritePipeline) -> None:
    acks = [derive(pipeline, c(f"step {i} of the rollout")) for i in range(20)]
    views = [settled(pipeline, a) for a in acks]
    created = [v.data["created"][0] for v in views]
    graph = pipeline.session.index.graph
    times = [graph.concept(node) for node in created]
    assert all(t is not None for t in times)
    intents = [pipeline.session.store.get_intent(a.structured["receipt"]) for a in acks]
    seqs = [i.seq for i in intents if i is not None]
    assert seqs == sorted(seqs) and len(seqs) == 20
    assert all(i is not None and i.state is IntentState.APPLIED for i in intents)


def test_a_reference_that_changed_fails_on_the_receipt(pipeline: WritePipeline) -> None:
    ruling = settled(pipeline, derive(pipeline, c("the old ruling")))
    rid = ruling.data["created"][0]
    # Admit a citation, then remove the cited concept before the worker reaches it.
    with pipeline.session.index.lock:
        ack = derive(pipeline, c("a decision", depends_on=[rid]))
        pipeline.session.store.delete_concepts("s", [rid])
        pipeline.session.index.remove_concepts([rid])
    view = settled(pipeline, ack)
    assert view.state is ReceiptState.FAILED
    assert "named something else when the write was applied" in view.detail
    assert view.detail.endswith("nothing was written")
    assert pipeline.session.index.graph.concepts_with_key("a decision") == []


def test_acked_writes_survive_a_restart_and_apply_once(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    path = tmp_path / "r.db"
    store = SqliteStore(path)
    session = Session.open(store, "s", EmbedderPlan.ready(minilm))
    pipeline = WritePipeline(session)  # never started: the "server" dies before applying
    acks = [derive(pipeline, c(f"fact number {i}")) for i in range(5)]
    assert len(store.pending_intents("s")) == 5
    store.close()

    store2 = SqliteStore(path)
    p2 = open_pipeline(store2, EmbedderPlan.ready(minilm))
    assert p2.wait_idle(60)
    assert p2.replayed == 5 and p2.replay_owed == 0
    assert store2.pending_intents("s") == []
    keys = {c.canonical_key for c in store2.concepts("s")}
    assert keys == {f"fact number {i}" for i in range(5)}
    for ack in acks:
        intent = store2.get_intent(ack.structured["receipt"])
        assert intent is not None and intent.state is IntentState.APPLIED
        # The new server answers the old server's receipts from their durable intents.
        view = p2.session.receipts.lookup(ack.structured["receipt"], "agent-a", "s")
        assert view.state is ReceiptState.APPLIED_AFTER_RESTART
        assert view.detail.startswith("derived 1 concept(s): 1 created")
        other = p2.session.receipts.lookup(ack.structured["receipt"], "intruder", "s")
        assert other.state is ReceiptState.FORBIDDEN
    unknown = acks[0].structured["receipt"].rsplit(".", 1)[0] + ".999"
    assert p2.session.receipts.lookup(unknown, "agent-a", "s").state is ReceiptState.RESTART_LOST
    p2.close()
    # A third start finds nothing owed: each write applied exactly once.
    p3 = open_pipeline(SqliteStore(path), EmbedderPlan.ready(minilm))
    assert p3.replay_owed == 0 and len(list(p3.session.store.concepts("s"))) == 5
    p3.close()


def test_lane_bound_drops_with_a_clear_receipt(tmp_path: Path, minilm: OnnxEmbedder) -> None:
    store = SqliteStore(tmp_path / "l.db")
    session = Session.open(store, "s", EmbedderPlan.ready(minilm))
    pipeline = WritePipeline(session)  # not started, so nothing drains the lane
    for i in range(64):
        assert derive(pipeline, c(f"x{i}")).structured["receipt_state"] == "pending"
    ack = derive(pipeline, c("one too many"))
    assert ack.structured["receipt_state"] == "dropped"
    # one "nothing was written", on the receipt line that says which bound refused it
    assert ack.structured["summary"] == "this call was not queued"
    assert ack.text.count("nothing was written") == 1
    assert "dropped — nothing was written: your lane of 64 outstanding writes" in ack.text
    assert len(store.pending_intents("s")) == 64
    # Another agent still has its own lane.
    assert derive(pipeline, c("other"), agent="agent-b").structured["receipt_state"] == "pending"


def test_keyword_only_session_writes_without_an_embedder() -> None:
    plan = EmbedderPlan(lazy=None, contract=None)
    p = open_pipeline(MemoryStore(), plan)
    view = settled(p, derive(p, c("canonical mode concept")))
    assert view.detail == "derived 1 concept(s): 1 created (0 embedded), 0 matched existing"
    stats = p.stats()
    assert stats["write_queue_applied"] == 1 and stats["write_queue_bound"] == 1024
    assert stats["write_queue_lane_bound"] == 64
    p.close()


def test_texts_differing_only_in_case_are_two_concepts_by_key() -> None:
    # Keys keep case (#15): with no vectors nothing but the key can join them.
    p = open_pipeline(MemoryStore(), EmbedderPlan(lazy=None, contract=None))
    first = settled(p, derive(p, c("Case Test"), c("src/Main.rs", "resource")))
    again = settled(p, derive(p, c("case test"), c("src/main.rs", "resource"), c("Case  Test")))
    assert again.data["created_count"] == 2 and again.data["matched"] == first.data["created"][:1]
    graph = p.session.index.graph
    assert [x.content for x in graph.concepts_with_key("Case Test")] == ["Case Test"]
    assert [x.content for x in graph.concepts_with_key("case test")] == ["case test"]
    assert len(graph.concepts_with_folded_key("case test")) == 2
    p.close()


@pytest.mark.parametrize(
    ("older", "newer"),
    [
        # the two (MiniLM cosine 0.839 and 0.861, over its 0.73 threshold)
        (
            "the third decision: keep SQLite for the store",
            "the fourth decision: keep SQLite for the store",
        ),
        ("tokens expire after one hour", "tokens expire after ninety minutes instead"),
        ("the build passed on main", "the build failed on main"),
        ("the API depends on the cache", "the cache depends on the API"),
    ],
)
def test_a_near_match_that_changes_a_fact_is_not_merged(
    pipeline: WritePipeline, older: str, newer: str
) -> None:
    first = settled(pipeline, derive(pipeline, c(older)))
    other = settled(pipeline, derive(pipeline, c(newer)))
    assert other.data["created_count"] == 1 and other.data["semantic_merged"] == 0
    assert first.data["created"] != other.data["created"]


def test_the_same_number_spelled_two_ways_merges(pipeline: WritePipeline) -> None:
    first = settled(pipeline, derive(pipeline, c("flush retries three times")))
    again = settled(pipeline, derive(pipeline, c("the flush retries 3 times")))
    assert again.data["matched"] == first.data["created"] and again.data["semantic_merged"] == 1


def test_similar_wording_merges_but_different_numbers_do_not(pipeline: WritePipeline) -> None:
    first = settled(pipeline, derive(pipeline, c("the embedder listens on port 8080")))
    other = settled(pipeline, derive(pipeline, c("the embedder listens on port 8081")))
    assert other.data["created_count"] == 1  # numbers differ: never merged
    assert first.data["created"] != other.data["created"]


def test_without_a_model_writes_fail_on_the_receipt_and_stay_owed(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    from lambo_core.config import load_config

    config = load_config(env={"LAMBO_HOME": str(tmp_path / "home")}, cwd=tmp_path)
    # nothing installed under this LAMBO_HOME
    plan = EmbedderPlan.from_config(config, LoadedModels())
    path = tmp_path / "n.db"
    p = open_pipeline(SqliteStore(path), plan)
    view = settled(p, derive(p, c("needs an embedder")))
    assert view.state is ReceiptState.FAILED
    assert "lambo model pull" in view.detail and "canonical" in view.detail
    # not "nothing was written" alone: the intent is kept, and says so
    assert view.detail.endswith(
        "; nothing was written by this server, and the write's intent is kept: the next "
        "server on this session replays it"
    )
    assert p.session.index.graph.concepts_with_key("needs an embedder") == []
    p.close()
    # The intent is kept: a server that has the model applies it.
    p2 = open_pipeline(SqliteStore(path), EmbedderPlan.ready(minilm))
    assert p2.wait_idle(60) and p2.replayed == 1
    assert p2.session.index.graph.concepts_with_key("needs an embedder")
    p2.close()


def test_concurrent_agents_never_see_each_others_receipts(pipeline: WritePipeline) -> None:
    import threading

    sent: dict[str, list[tuple[str, str]]] = {}
    errors: list[BaseException] = []

    def agent(n: int) -> None:
        name = f"agent-{n}"
        try:
            for i in range(15):
                content = f"{name} wrote fact {i}"
                ack = derive(pipeline, c(content), agent=name)
                sent.setdefault(name, []).append((ack.structured["receipt"], content))
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=agent, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    graph = pipeline.session.index.graph
    for name, writes in sent.items():
        last_seq = 0
        for receipt, content in writes:
            view = settled(pipeline, type("A", (), {"structured": {"receipt": receipt}})(), name)
            assert view.state is ReceiptState.APPLIED
            (node,) = view.data["created"]
            concept = graph.concept(node)
            assert concept is not None and concept.content == content
            assert concept.agent_id == name
            # Another agent asking for it is refused and learns nothing.
            other = pipeline.session.receipts.lookup(receipt, "intruder", "s")
            assert other.state is ReceiptState.FORBIDDEN and not other.data
            intent = pipeline.session.store.get_intent(receipt)
            assert intent is not None and intent.seq > last_seq  # each agent's order kept
            last_seq = intent.seq
