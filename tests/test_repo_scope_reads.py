"""Reading repository-scoped paths back: recall's label and hit, an inspect focus in several
repositories, and the dependency question naming one (spec: lambo_derive, Repository-scoped
paths, "Reading them back"). Keyword-only sessions on a real SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.errors import LamboError, ReferenceRefused
from lambo_core.inspect import run_inspect
from lambo_core.model import short_id
from lambo_core.recall import recall
from lambo_core.recall.request import RecallDefaults, RecallResult
from lambo_core.repo_scope import lookup_key
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline

WIDGETS = "github.com/acme/widgets"
GADGETS = "github.com/acme/gadgets"
PLAN = EmbedderPlan(lazy=None, contract=None)


@pytest.fixture
def pipeline(tmp_path: Path) -> Iterator[WritePipeline]:
    p = WritePipeline(Session.open(SqliteStore(tmp_path / "r.db"), "s", PLAN)).start()
    yield p
    p.close()


def act(p: WritePipeline, action: str, **kw: Any) -> None:
    ack = p.submit("lambo_record_action", {"agent_id": "agent-a", "action": action, **kw})
    assert ack.structured["receipt_state"] == "pending", ack.text
    assert p.wait_idle(10)


def scoped_id(p: WritePipeline, repo: str, path: str) -> str:
    (node_id,) = p.session.index.graph.paths.ids(lookup_key(repo, path))
    return node_id


def ask(p: WritePipeline, query: str, **kw: Any) -> RecallResult:
    args = {"agent_id": "agent-a", "query": query, **kw}
    return recall(p.session, args, defaults=RecallDefaults())


def test_a_scoped_hit_names_its_repository_and_an_unscoped_one_is_unchanged(
    pipeline: WritePipeline,
) -> None:
    act(pipeline, "rewrote the build notes", modifies=["README.md"], repo_scope=WIDGETS)
    act(pipeline, "edited the changelog", modifies=["CHANGELOG.md"])
    result = ask(pipeline, "README.md", top_k=10)
    widgets = scoped_id(pipeline, WIDGETS, "README.md")
    (hit,) = [h for h in result.hits if h["node_id"] == widgets]
    assert hit["repo_scope"] == WIDGETS
    label = next(line for line in result.context.splitlines() if line.startswith("README.md ["))
    assert label.startswith(f'README.md [Resource, repo "{WIDGETS}"] (score ')
    plain = ask(pipeline, "CHANGELOG.md", top_k=10)
    (changelog,) = [h for h in plain.hits if h["content"] == "CHANGELOG.md"]
    assert "repo_scope" not in changelog
    assert any(
        line.startswith("CHANGELOG.md [Resource] (score ") for line in plain.context.splitlines()
    )


def test_an_inspect_focus_in_several_repositories_lists_each_with_its_repository(
    pipeline: WritePipeline,
) -> None:
    act(pipeline, "fixed the parser", modifies=["src/main.rs:12"], repo_scope=WIDGETS)
    act(pipeline, "fixed the lexer", modifies=["src/main.rs"], repo_scope=GADGETS)
    widgets = scoped_id(pipeline, WIDGETS, "src/main.rs")
    gadgets = scoped_id(pipeline, GADGETS, "src/main.rs")
    with pytest.raises(LamboError) as caught:
        run_inspect(
            pipeline.session, {"agent_id": "a", "focus": "src/main.rs"}, promotion_policy="swarm"
        )
    assert isinstance(caught.value, ReferenceRefused)
    lines = caught.value.render().split("\n")
    assert lines[1:] == [
        f'- {gadgets} "src/main.rs" [Resource, repo "{GADGETS}"]',
        f'- {widgets} "src/main.rs:12" [Resource, repo "{WIDGETS}"]',
    ] or lines[1:] == [
        f'- {widgets} "src/main.rs:12" [Resource, repo "{WIDGETS}"]',
        f'- {gadgets} "src/main.rs" [Resource, repo "{GADGETS}"]',
    ]
    text, data = run_inspect(
        pipeline.session, {"agent_id": "a", "focus": widgets}, promotion_policy="swarm"
    )
    assert text.startswith(f'src/main.rs:12 [Resource, repo "{WIDGETS}"] (id {short_id(widgets)}')
    assert data["repo_scope"] == WIDGETS


def test_a_dependency_question_on_a_path_in_several_repositories_answers_none(
    pipeline: WritePipeline,
) -> None:
    act(pipeline, "built the docs", depends_on=["README.md"], repo_scope=WIDGETS)
    act(pipeline, "linted the docs", depends_on=["README.md"], repo_scope=GADGETS)
    widgets = scoped_id(pipeline, WIDGETS, "README.md")
    gadgets = scoped_id(pipeline, GADGETS, "README.md")
    result = ask(pipeline, "what depends on README.md")
    assert result.hits == []
    assert result.warnings == [
        f'recall: "README.md" names 2 concepts in different repositories: {short_id(widgets)} '
        f'README.md (repo "{WIDGETS}"); {short_id(gadgets)} README.md (repo "{GADGETS}"); '
        "name the repository in the question to ask about one"
    ]
    one = ask(pipeline, f"what depends on README.md in {GADGETS}")
    assert [h["content"] for h in one.hits] == ["linted the docs"]
    assert one.context.startswith('Answered by graph traversal: 1 concept depends on "README.md"')
    # an id no candidate holds names none of them
    other = ask(pipeline, "what depends on README.md in github.com/acme/other")
    assert other.hits == [] and len(other.warnings) == 1


def test_a_path_in_one_repository_is_answered_as_before(pipeline: WritePipeline) -> None:
    act(pipeline, "built the docs", depends_on=["README.md"], repo_scope=WIDGETS)
    result = ask(pipeline, "what depends on README.md")
    assert [h["content"] for h in result.hits] == ["built the docs"]
    assert result.warnings == []
