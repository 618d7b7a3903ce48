"""repo_scope on writes, end to end in-process: admission, the apply builder, the by-path index
and the durable intent (spec: lambo_derive, "Repository-scoped paths"). Real SQLite; an
embedder whose vectors are all one, so every pair of concepts is a similarity match and only
the rules keep a scoped path apart."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest

from lambo_core.embed.base import EmbeddingContract, make_contract
from lambo_core.errors import ReferenceRefused
from lambo_core.model import Concept, ConceptType, EdgeType, IntentState, Vector, WriteIntent
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline

WIDGETS = "github.com/acme/widgets"
GADGETS = "github.com/acme/gadgets"


class OneVector:
    """Every text embeds to the same unit vector: cosine 1 between any two."""

    contract: EmbeddingContract = make_contract("onnx", "minilm", 8)
    modalities: ClassVar[list[str]] = ["text"]
    dim = 8
    merge_threshold = 0.85

    def embed(self, texts: Sequence[str]) -> Vector:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        out[:, 0] = 1.0
        return out

    def embed_query(self, text: str) -> Vector:
        vector: Vector = self.embed([text])[0]
        return vector


def open_pipeline(store: SqliteStore) -> WritePipeline:
    return WritePipeline(Session.open(store, "s", EmbedderPlan.ready(OneVector()))).start()


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[WritePipeline]:
    p = open_pipeline(SqliteStore(tmp_path / "w.db"))
    yield p
    p.close()


def settled(p: WritePipeline, ack: Any) -> Any:
    view = p.session.receipts.wait(ack.structured["receipt"], "agent-a", "s", 30_000)
    assert view.state is not ReceiptState.PENDING
    return view


def derive(p: WritePipeline, *concepts: dict[str, Any], **kw: Any) -> Any:
    ack = p.submit("lambo_derive", {"agent_id": "agent-a", "concepts": list(concepts), **kw})
    return settled(p, ack)


def act(p: WritePipeline, action: str, **kw: Any) -> Any:
    return settled(
        p, p.submit("lambo_record_action", {"agent_id": "agent-a", "action": action, **kw})
    )


def c(content: str, ctype: str = "resource", **kw: Any) -> dict[str, Any]:
    return {"content": content, "concept_type": ctype, **kw}


def named(p: WritePipeline, content: str) -> list[Concept]:
    """The session's concepts written exactly so, oldest first."""
    found = p.session.index.graph.concepts_with_key(content)
    return sorted(found, key=lambda x: (x.created_at, x.id))


def scoped(p: WritePipeline, repo: str, path: str) -> Concept:
    from lambo_core.repo_scope import lookup_key

    graph = p.session.index.graph
    ids = graph.paths.ids(lookup_key(repo, path))
    assert len(ids) == 1, ids
    concept = graph.concept(ids[0])
    assert concept is not None
    return concept


def targets(p: WritePipeline, action: str, etype: EdgeType) -> set[str]:
    graph = p.session.index.graph
    (node,) = named(p, action)
    return {e.dst for e in graph.edges_out(node.id, (etype,))}


# --- what a scope separates ----------------------------------------------------------------


def test_each_repository_gets_its_own_concept_for_a_path(pipeline: WritePipeline) -> None:
    for repo in (WIDGETS, GADGETS):
        view = act(pipeline, "rewrote the build notes", repo_scope=repo, modifies=["README.md"])
        assert view.state is ReceiptState.APPLIED, view.detail
    act(pipeline, "rewrote the build notes", modifies=["README.md"])
    readmes = named(pipeline, "README.md")
    assert sorted(r.repo_scope or "" for r in readmes) == ["", GADGETS, WIDGETS]
    assert all(r.concept_type is ConceptType.RESOURCE for r in readmes)
    assert len(pipeline.session.index.graph.paths) == 2
    # every scoped copy is its own, and each action modifies all three through one concept
    assert targets(pipeline, "rewrote the build notes", EdgeType.MODIFIES) == {
        r.id for r in readmes
    }


def test_a_line_reference_names_the_file_whose_content_keeps_its_first_spelling(
    pipeline: WritePipeline,
) -> None:
    act(pipeline, "fixed the parser", repo_scope=WIDGETS, modifies=["src/main.rs:12"])
    act(pipeline, "fixed the lexer", repo_scope=WIDGETS, modifies=["src/main.rs#L40"])
    act(pipeline, "reviewed the parser", repo_scope=WIDGETS, depends_on=["src/main.rs"])
    file = scoped(pipeline, WIDGETS, "src/main.rs")
    assert file.content == "src/main.rs:12"
    assert targets(pipeline, "fixed the lexer", EdgeType.MODIFIES) == {file.id}
    assert targets(pipeline, "reviewed the parser", EdgeType.DEPENDENCY) == {file.id}
    assert named(pipeline, "src/main.rs") == []  # no plain concept was made


def test_exact_text_case_and_spelling_count(pipeline: WritePipeline) -> None:
    act(
        pipeline,
        "edited",
        repo_scope=WIDGETS,
        modifies=["src/main.rs", "src/Main.rs", "./src/main.rs"],
    )
    ids = targets(pipeline, "edited", EdgeType.MODIFIES)
    assert len(ids) == 3


def test_producing_then_depending_names_one_concept_and_a_clear_spelling_either_order(
    pipeline: WritePipeline,
) -> None:
    act(pipeline, "wrote the config", repo_scope=WIDGETS, produces=["config.toml"])
    act(pipeline, "started the server", repo_scope=WIDGETS, depends_on=["config.toml"])
    config = scoped(pipeline, WIDGETS, "config.toml")
    assert targets(pipeline, "started the server", EdgeType.DEPENDENCY) == {config.id}
    # a name only loosely a path, met first by a depends_on, is plain text...
    act(pipeline, "ran the build", repo_scope=WIDGETS, depends_on=["scripts/build"])
    (plain,) = named(pipeline, "scripts/build")
    assert plain.repo_scope is None and plain.concept_type is ConceptType.ENTITY
    # ...and a later produces of it is a separate scoped path
    act(pipeline, "wrote the build script", repo_scope=WIDGETS, produces=["scripts/build"])
    assert scoped(pipeline, WIDGETS, "scripts/build").id != plain.id
    # written as a clear path, a depends_on met first creates the scoped path itself
    act(pipeline, "ran the deploy", repo_scope=WIDGETS, depends_on=["scripts/deploy/"])
    deploy = scoped(pipeline, WIDGETS, "scripts/deploy")
    assert deploy.concept_type is ConceptType.RESOURCE and deploy.repo_scope == WIDGETS
    act(pipeline, "wrote the deploy script", repo_scope=WIDGETS, produces=["scripts/deploy"])
    assert targets(pipeline, "wrote the deploy script", EdgeType.PRODUCES) == {deploy.id}


@pytest.mark.parametrize("prose", ["TCP/IP", "CI/CD", "I/O", "and/or", "docs/reference"])
def test_slash_prose_and_a_bare_directory_stay_plain_text(
    pipeline: WritePipeline, prose: str
) -> None:
    act(pipeline, "read about it", repo_scope=WIDGETS, depends_on=[prose])
    (plain,) = named(pipeline, prose)
    assert plain.repo_scope is None and plain.concept_type is ConceptType.ENTITY
    assert len(pipeline.session.index.graph.paths) == 0


def test_a_directory_with_and_without_its_slash_is_one_and_a_parent_is_its_childs(
    pipeline: WritePipeline,
) -> None:
    view = derive(
        pipeline,
        c("src/main.rs"),
        parent_of=[{"parent": "src", "child": "src/main.rs"}],
        repo_scope=WIDGETS,
    )
    assert view.state is ReceiptState.APPLIED, view.detail
    directory = scoped(pipeline, WIDGETS, "src/")
    assert directory.content == "src" and directory.repo_scope == WIDGETS
    file = scoped(pipeline, WIDGETS, "src/main.rs")
    graph = pipeline.session.index.graph
    assert graph.edge(directory.id, file.id, EdgeType.HIERARCHICAL) is not None
    # another repository's src is another directory, and an unscoped one is the shared word
    derive(pipeline, c("src/main.rs"), parent_of=[{"parent": "src", "child": "src/main.rs"}],
           repo_scope=GADGETS)  # fmt: skip
    assert scoped(pipeline, GADGETS, "src").id != directory.id
    derive(pipeline, c("docs/", "resource"), repo_scope=WIDGETS)
    act(pipeline, "read the docs", repo_scope=WIDGETS, depends_on=["docs"])
    assert targets(pipeline, "read the docs", EdgeType.DEPENDENCY) == {
        scoped(pipeline, WIDGETS, "docs").id
    }


def test_a_scoped_path_never_merges_by_similarity_either_way(pipeline: WritePipeline) -> None:
    first = derive(pipeline, c("the build notes live in the wiki", "logic"))
    assert first.state is ReceiptState.APPLIED
    view = derive(pipeline, c("README.md"), repo_scope=WIDGETS)
    assert view.data["created_count"] == 1 and view.data["matched_count"] == 0
    readme = scoped(pipeline, WIDGETS, "README.md")
    later = derive(pipeline, c("the readme of the widgets project", "logic"))
    assert readme.id not in later.data.get("matched", [])
    # with the same vector, a plain Logic does merge into the other plain one
    assert later.data["matched_count"] == 1


def test_no_fallback_between_scoped_and_unscoped(pipeline: WritePipeline) -> None:
    act(pipeline, "wrote the readme", produces=["README.md"])  # unscoped
    (unscoped,) = named(pipeline, "README.md")
    with pytest.raises(ReferenceRefused) as info:
        pipeline.submit(
            "lambo_derive",
            {"agent_id": "agent-a", "repo_scope": WIDGETS,
             "concepts": [c("the readme is current", "logic", depends_on=["README.md"])]},
        )  # fmt: skip
    assert info.value.args[0] == (
        f'concepts[0].depends_on[0] "README.md" matches nothing in this session under '
        f'repo_scope "{WIDGETS}"; a path written under another repository or none is named '
        f"by text only there: cite it by its id ({unscoped.id[:8]}); nothing was written"
    )
    # an id works with a scope
    cited = derive(pipeline, c("the readme is current", "logic", depends_on=[unscoped.id[:8]]),
                   repo_scope=WIDGETS)  # fmt: skip
    assert cited.state is ReceiptState.APPLIED and "1 citation(s) recorded" in cited.detail
    # a scoped path is not found by an unscoped write's text, and an unscoped depends_on
    # names the unscoped file as before
    act(pipeline, "edited the widgets readme", repo_scope=WIDGETS, modifies=["README.md"])
    act(pipeline, "checked the readme", depends_on=["README.md"])
    assert targets(pipeline, "checked the readme", EdgeType.DEPENDENCY) == {unscoped.id}
    # a scoped-only path, cited by an unscoped write's text, is refused the same way
    act(pipeline, "wrote the guide", repo_scope=WIDGETS, produces=["GUIDE.md"])
    guide = scoped(pipeline, WIDGETS, "GUIDE.md")
    with pytest.raises(ReferenceRefused) as info:
        pipeline.submit(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [c("x", "logic", against=["GUIDE.md"])]},
        )
    assert info.value.args[0] == (
        'concepts[0].against[0] "GUIDE.md" matches nothing in this session without a '
        "repo_scope; a path written under another repository or none is named by text only "
        f"there: cite it by its id ({guide.id[:8]}); nothing was written"
    )


def test_a_concept_of_another_type_under_the_plain_key_is_that_concept(
    pipeline: WritePipeline,
) -> None:
    derive(pipeline, c("config.toml", "logic"))
    (logic,) = named(pipeline, "config.toml")
    act(pipeline, "loaded the settings", repo_scope=WIDGETS, depends_on=["config.toml"])
    assert targets(pipeline, "loaded the settings", EdgeType.DEPENDENCY) == {logic.id}


def test_a_scoped_path_and_another_concept_at_once_is_refused_listing_each(
    pipeline: WritePipeline,
) -> None:
    derive(pipeline, c("config.toml", "logic"))
    act(pipeline, "wrote the config", repo_scope=WIDGETS, produces=["config.toml"])
    (logic,) = [x for x in named(pipeline, "config.toml") if x.repo_scope is None]
    file = scoped(pipeline, WIDGETS, "config.toml")
    with pytest.raises(Exception) as info:
        pipeline.submit(
            "lambo_record_action",
            {"agent_id": "agent-a", "action": "read it", "depends_on": ["config.toml"],
             "repo_scope": WIDGETS},
        )  # fmt: skip
    assert info.value.args[0] == (
        f'depends_on[0] "config.toml" matches several: {file.id[:8]} "config.toml" '
        f'[Resource, repo "{WIDGETS}"], {logic.id[:8]} "config.toml" [Logic]; '
        "name one by its id; nothing was written"
    )
    with pytest.raises(Exception) as info:
        pipeline.submit(
            "lambo_derive",
            {"agent_id": "agent-a", "repo_scope": WIDGETS,
             "concepts": [c("settings are read once", "logic", against=["config.toml"])]},
        )  # fmt: skip
    assert "matches several" in info.value.args[0] and "[Logic]" in info.value.args[0]
    # by id, both are named
    ok = act(pipeline, "read it", repo_scope=WIDGETS, depends_on=[file.id, logic.id[:8]])
    assert ok.state is ReceiptState.APPLIED


def test_a_citation_never_creates_a_scoped_path(pipeline: WritePipeline) -> None:
    with pytest.raises(Exception) as info:
        pipeline.submit(
            "lambo_derive",
            {"agent_id": "agent-a", "repo_scope": WIDGETS,
             "concepts": [c("it builds", "logic", depends_on=["Makefile"])]},
        )  # fmt: skip
    assert info.value.args[0] == (
        'concepts[0].depends_on[0] "Makefile" matches nothing in this session; nothing was written'
    )


def test_a_call_without_repo_scope_stores_the_payload_as_before(pipeline: WritePipeline) -> None:
    ack = pipeline.submit("lambo_derive", {"agent_id": "agent-a", "concepts": [c("README.md")]})
    intent = pipeline.session.store.get_intent(ack.structured["receipt"])
    assert intent is not None and intent.payload["kind"] == "derive"
    settled(pipeline, ack)
    assert named(pipeline, "README.md")[0].repo_scope is None


# --- durable intents ------------------------------------------------------------------------


def test_a_waiting_scoped_write_replays_under_its_scope_and_settles_without_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "r.db"
    store = SqliteStore(path)
    pipeline = WritePipeline(Session.open(store, "s", EmbedderPlan.ready(OneVector())))
    ack = pipeline.submit(
        "lambo_record_action",
        {
            "agent_id": "agent-a",
            "action": "rewrote the build notes",
            "modifies": ["README.md"],
            "repo_scope": WIDGETS,
        },
    )  # fmt: skip  (never started: the server dies before applying)
    (waiting,) = store.pending_intents("s")
    assert waiting.payload["kind"] == "repo_scoped" and waiting.payload["repo_scope"] == WIDGETS
    assert waiting.payload["write"]["kind"] == "action"
    store.close()

    store2 = SqliteStore(path)
    p2 = open_pipeline(store2)
    assert p2.wait_idle(30) and p2.replayed == 1
    assert scoped(p2, WIDGETS, "README.md").repo_scope == WIDGETS
    done = store2.get_intent(ack.structured["receipt"])
    assert done is not None and done.state is IntentState.APPLIED
    assert done.payload["kind"] == "action" and "repo_scope" not in str(done.payload)
    p2.close()


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (
            {"kind": "repo_scoped", "repo_scope": "  ", "write": {"kind": "action"}},
            "store error: this write's stored repo_scope is empty, so it cannot be replayed "
            "under its repository; nothing was written",
        ),
        (
            {"kind": "repo_scoped", "repo_scope": WIDGETS, "write": ["not", "a", "write"]},
            "store error: this write's stored repo_scope wrapper is malformed (it holds no "
            "derive or action), so it cannot be replayed; nothing was written",
        ),
        (
            {"kind": "repo_scoped", "repo_scope": WIDGETS},
            "store error: this write's stored repo_scope wrapper is malformed (it holds no "
            "derive or action), so it cannot be replayed; nothing was written",
        ),
        (
            {"kind": "derive_v9", "concepts": []},
            "store error: this write was stored in a form this build cannot apply (kind "
            "'derive_v9'), so it was not applied; nothing was written",
        ),
    ],
)
def test_a_stored_row_this_build_cannot_replay_settles_failed_with_the_reason(
    tmp_path: Path, payload: dict[str, Any], reason: str
) -> None:
    path = tmp_path / "bad.db"
    store = SqliteStore(path)
    Session.open(store, "s", EmbedderPlan.ready(OneVector()))
    store.add_intent(WriteIntent("lwr1.x.1.1", "s", "agent-a", "lambo_derive", payload, 1.0))
    store.close()
    store2 = SqliteStore(path)
    p2 = open_pipeline(store2)
    assert p2.wait_idle(30)
    stored = store2.get_intent("lwr1.x.1.1")
    assert stored is not None and stored.state is IntentState.FAILED
    assert stored.outcome is not None and stored.outcome["detail"] == reason
    assert "repo_scope" not in str(stored.payload)  # an older build can load the session
    assert len(p2.session.index.graph) == 0
    p2.close()


def test_the_tool_schemas_take_repo_scope_on_derive_and_record_action_only() -> None:
    from lambo_core.mcp.tools import SCHEMAS

    for tool, schema in SCHEMAS.items():
        has = "repo_scope" in schema["properties"]
        assert has is (tool in ("lambo_derive", "lambo_record_action")), tool
    assert SCHEMAS["lambo_derive"]["properties"]["repo_scope"]["type"] == "string"
