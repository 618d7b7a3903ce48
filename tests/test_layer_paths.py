"""Admission of repo_scope and of a write into a shared layer: the refusal texts before the ack
(spec: lambo_derive, "Writing to a layer" and "Repository-scoped paths", Refusals and In a
layer). Every example of the spec's relative-path bullet is a row."""

from __future__ import annotations

from typing import Any

import pytest

from lambo_core.admission import admit_action, admit_derive
from lambo_core.errors import LamboError, ParameterError
from lambo_core.index.graph import SessionGraph

S = "s"
LAYER = "general"
WIDGETS = "github.com/acme/widgets"

# "A bare relative path is README.md, Cargo.toml, .env, Makefile, src/main.rs,
# docs/reference/, ./run.sh, ..\lambo\AGENTS.md, also with a :12, :12:5 or #L12 line reference."
BARE = ["README.md", "Cargo.toml", ".env", "Makefile", "src/main.rs", "docs/reference/",
        "./run.sh", "..\\lambo\\AGENTS.md"]  # fmt: skip
RELATIVE = BARE + [
    p + ref for p in ("src/main.rs", "README.md") for ref in (":12", ":12:5", "#L12")
]
# "Absolute paths, URLs, git@host:path remotes, domain-led names (github.com/x/README.md),
# domain and library names (crates.io, socket.io, Node.js, vercel/next.js), branch names, repo
# slugs and prose (and/or, I/O, TCP/IP) pass, and so does a directory named without a trailing /."
PASSING = [
    "/etc/hosts", "C:\\work\\a.rs", "~/.config/x",
    "https://github.com/acme/widgets/blob/main/README.md",
    "git@github.com:acme/widgets.git",
    "github.com/x/README.md",
    "crates.io", "socket.io", "Node.js", "vercel/next.js",
    "main", "feature/layers", "origin/main",
    "acme/widgets",
    "and/or", "I/O", "TCP/IP",
    "docs/reference",
    "edit README.md first",  # a path inside prose: the entry is not a path
]  # fmt: skip


def refusal(field: str, entry: str) -> str:
    return (
        f'{field} "{entry}" is a relative path, refused in scope "general"; record file actions '
        "in the project's own session, use an absolute path, or send repo_scope; nothing was "
        "written"
    )


def derive(graph: SessionGraph, layer: str | None = LAYER, **args: Any) -> Any:
    return admit_derive(
        {"agent_id": "agent-a", **args}, session=S, graph=graph, embeds=False, layer=layer
    )


def action(graph: SessionGraph, layer: str | None = LAYER, **args: Any) -> Any:
    return admit_action({"agent_id": "agent-a", **args}, session=S, graph=graph, layer=layer)


def refused(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(LamboError) as info:
        fn(*args, **kwargs)
    return info.value.render()


@pytest.fixture
def graph() -> SessionGraph:
    return SessionGraph(S)


def one(content: str, ctype: str = "logic") -> list[dict[str, Any]]:
    return [{"content": content, "concept_type": ctype}]


# --- in a layer -------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", RELATIVE)
def test_every_checked_field_refuses_a_bare_relative_path(graph: SessionGraph, entry: str) -> None:
    for ctype in ("logic", "resource", "entity"):
        text = refused(derive, graph, concepts=one(entry, ctype))
        assert text == refusal("concepts[0].content", entry)
    pair = [{"parent": "the docs", "child": entry}]
    assert refused(derive, graph, concepts=one("x"), parent_of=pair) == refusal(
        "parent_of[0].child", entry
    )
    pair = [{"parent": entry, "child": "x"}]
    assert refused(derive, graph, concepts=one("x"), parent_of=pair) == refusal(
        "parent_of[0].parent", entry
    )
    assert refused(action, graph, action=entry) == refusal("action", entry)
    for field in ("produces", "modifies", "depends_on"):
        got = refused(action, graph, action="edited", **{field: ["the notes", entry]})
        assert got == refusal(f"{field}[1]", entry)


@pytest.mark.parametrize("entry", PASSING)
def test_what_is_not_a_bare_relative_path_passes(graph: SessionGraph, entry: str) -> None:
    assert derive(graph, concepts=one(entry, "resource"))
    assert derive(graph, concepts=one("x"), parent_of=[{"parent": entry, "child": "y"}])
    assert action(graph, action=entry)
    assert action(graph, action="edited", produces=[entry], modifies=[entry + " too"])
    assert action(graph, action="edited", depends_on=[entry])


def test_a_derive_citation_is_a_reference_not_an_entry(graph: SessionGraph) -> None:
    # depends_on / against name existing concepts and create nothing: not checked here
    text = refused(
        derive,
        graph,
        concepts=[{"content": "x", "concept_type": "logic", "depends_on": ["README.md"]}],
    )
    assert text.startswith(
        'reference refused: concepts[0].depends_on[0] "README.md" matches nothing'
    )


def test_outside_a_layer_a_relative_path_is_written_as_before(graph: SessionGraph) -> None:
    assert derive(graph, layer=None, concepts=one("README.md"))
    assert action(graph, layer=None, action="README.md", modifies=["src/main.rs"])


def test_the_layer_is_named_as_given(graph: SessionGraph) -> None:
    text = refused(action, graph, layer="team-notes", action="edited", modifies=[".env"])
    assert text.startswith('modifies[0] ".env" is a relative path, refused in scope "team-notes";')


def test_repo_scope_lets_through_what_it_covers(graph: SessionGraph) -> None:
    for entry in BARE:
        assert derive(graph, concepts=one(entry, "resource"), repo_scope=WIDGETS)
        pair = [{"parent": entry, "child": "src/lib.rs"}]
        assert derive(graph, concepts=one("x"), parent_of=pair, repo_scope=WIDGETS)
        assert action(graph, action=entry, repo_scope=WIDGETS)
        for field in ("produces", "modifies", "depends_on"):
            entries: dict[str, Any] = {field: [entry]}
            assert action(graph, action="edited", repo_scope=WIDGETS, **entries)


@pytest.mark.parametrize("ctype", ["logic", "entity", "constraint", "observation"])
def test_repo_scope_does_not_cover_a_concept_that_is_not_a_resource(
    graph: SessionGraph, ctype: str
) -> None:
    text = refused(derive, graph, concepts=one("src/main.rs:12", ctype), repo_scope=WIDGETS)
    assert text == refusal("concepts[0].content", "src/main.rs:12")


def test_repo_scope_is_checked_before_the_layer(graph: SessionGraph) -> None:
    text = refused(action, graph, action="README.md", repo_scope="")
    assert text == "repo_scope must not be empty or whitespace; nothing was written"


# --- repo_scope's own refusals, on both tools -------------------------------------------------

REFUSALS: list[tuple[object, str]] = [
    ("", "repo_scope must not be empty or whitespace; nothing was written"),
    ("  \t ", "repo_scope must not be empty or whitespace; nothing was written"),
    ("a" * 513, "repo_scope is 513 bytes; at most 512 are accepted; nothing was written"),
    (
        "github.com/acme widgets",
        "repo_scope contains whitespace inside it (U+0020); a repository id is one run of "
        "visible characters, such as github.com/acme/widgets; nothing was written",
    ),
    (
        "github.com/acme/\x07widgets",
        "repo_scope contains a disallowed control character (U+0007); a repository id is one "
        "run of visible characters, such as github.com/acme/widgets; nothing was written",
    ),
    (
        "github.com/acme/\u200bwidgets",
        "repo_scope contains a disallowed invisible formatting character (U+200B); a "
        "repository id is one run of visible characters, such as github.com/acme/widgets; "
        "nothing was written",
    ),
    (42, "repo_scope must be a string"),  # the schema's type check, as for every argument
]


@pytest.mark.parametrize(("value", "text"), REFUSALS)
def test_repo_scope_refusals_before_the_ack(graph: SessionGraph, value: object, text: str) -> None:
    with pytest.raises(ParameterError) as info:
        derive(graph, layer=None, concepts=one("README.md", "resource"), repo_scope=value)
    assert info.value.render() == text
    with pytest.raises(ParameterError) as info:
        action(graph, layer=None, action="edited", modifies=["README.md"], repo_scope=value)
    assert info.value.render() == text


def test_a_null_repo_scope_is_omitted(graph: SessionGraph) -> None:
    got = action(graph, layer=None, action="edited", modifies=["README.md"], repo_scope=None)
    assert got.payload["kind"] == "action"


def test_a_scoped_payload_is_wrapped_and_keeps_the_trimmed_nfc_id(graph: SessionGraph) -> None:
    got = action(graph, layer=None, action="edited", modifies=["README.md"],
                 repo_scope=f"  {WIDGETS}\n")  # fmt: skip
    assert got.payload["kind"] == "repo_scoped"
    assert got.payload["repo_scope"] == WIDGETS
    assert got.payload["write"]["modifies"] == ["README.md"]
    assert "repo_scope" not in got.payload["write"]
