"""The server instructions (spec: "How the server introduces itself"): an unlayered session's
as before, byte for byte; a layered session's with the layered paragraph appended, the session's
and layers' names filled in. Both texts below are the spec's, verbatim."""

from __future__ import annotations

from typing import Any

from lambo_core.mcp.server import build_server
from lambo_core.mcp.tools import SCHEMAS, instructions

# The spec's instructions "for a session called demo".
DEMO = """\
Lambo agentic graph memory for session 'demo'. Call lambo_recall before acting on a task
to load relevant prior memory, lambo_derive and lambo_record_action to write what you
learned and did, lambo_reserve before editing a shared concept, and lambo_inspect /
lambo_saints / lambo_stats to look around. A concept is one fact, stated atomically and
short, such as a decision with its reason; it is not a log line or a paragraph, and
activity goes to lambo_record_action. When a write rests on a ruling or decision recall
showed you, cite it by its id (the 8 hex characters recall shows) in depends_on:
lambo_record_action's, or the concept's on lambo_derive. When a write shows an existing
concept to be wrong, name it the same way in against. Every tool takes your agent_id:
use one stable id for as long as you run, never one per call, task or topic: your model or client id
(<your-model-id>), with a stable instance suffix if several of you run at once. It is
caller-asserted and unverified. Work is recorded under it, so a stable id keeps
attribution whole. Soft locks are held under it: distinct ids contend for a node, and
callers sharing an id share its locks and can release each other's, so concurrent agents
that must keep out of each other's edits need distinct stable ids. created_at is
server-stamped: do not send a client flush timestamp. lambo_derive and lambo_record_action
may take optional RFC3339 event_time for historical about-time, such as a commit or
document date; omit it for a live fact, which is about now. Ordering is yours to manage,
and writes are applied in the BACKGROUND: lambo_derive and lambo_record_action return once
your input is validated and ordered, and their ack carries a receipt id. Their outcome
arrives on your next tool response. If you need a write visible to the very next read,
call lambo_stats with that receipt and a wait_ms first; otherwise carry on — writes you
send one after another are applied in that order (two you fire at once have no order to
keep)."""

# The spec's paragraph "for lambo layered with general".
LAMBO_OVER_GENERAL = """\
lambo_recall in session 'lambo' also searches its shared layers: general. Every recall hit
names the session it is from (structuredContent hits[].session, and 'from <session>' in a
layer hit's block), and its id belongs to that session: pass the same scope (scope =
"general") to lambo_inspect to inspect a hit from that layer. Pass scope = "general" to
lambo_recall to read that layer alone, or scope = "lambo" for this session alone. Writes
go to session 'lambo' unless you pass scope: write a ruling or preference that applies in
every project with scope = "general", and project facts, file actions and decisions without
a scope. A write's depends_on must name concepts in the session it writes to, and a write
into a layer refuses relative file paths. Writes to different sessions have no ordering
between them. lambo_reserve and lambo_saints take the same scope, and lambo_stats finds a
receipt from any of them."""


def test_an_unlayered_session_reads_as_before() -> None:
    assert instructions("demo") == DEMO
    assert instructions("demo", ()) == DEMO
    assert instructions("demo", []) == DEMO


def test_a_layered_session_appends_the_spec_paragraph() -> None:
    assert instructions("lambo", ("general",)) == (
        DEMO.replace("'demo'", "'lambo'") + "\n\n" + LAMBO_OVER_GENERAL
    )


def test_the_names_are_filled_in_and_several_layers_are_listed() -> None:
    text = instructions("acme", ["shared", "team"])
    paragraph = text.split("\n\n")[1]
    expected = (
        LAMBO_OVER_GENERAL.replace("'lambo'", "'acme'")
        .replace('"lambo"', '"acme"')
        .replace("layers: general.", "layers: shared, team.")
        .replace('"general"', '"shared"')  # the examples name the first layer
    )
    assert paragraph == expected
    assert "general" not in text and "'lambo'" not in text and '"lambo"' not in text
    assert paragraph.count('"shared"') == 3 and "team" not in paragraph.replace(
        "layers: shared, team", ""
    )


def test_build_server_introduces_the_layers() -> None:
    async def handler(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError("not called")

    assert build_server("demo", handler, list).instructions == DEMO
    layered = build_server("lambo", handler, list, ("general",))
    assert layered.instructions == instructions("lambo", ("general",))


def test_every_scope_says_it_may_name_a_layer() -> None:
    described = {
        tool: schema["properties"]["scope"]["description"]
        for tool, schema in SCHEMAS.items()
        if "scope" in schema["properties"]
    }
    assert sorted(described) == [
        "lambo_derive",
        "lambo_derive_image",
        "lambo_inspect",
        "lambo_recall",
        "lambo_record_action",
        "lambo_reserve",
        "lambo_saints",
        "lambo_stale",
    ]
    assert set(described.values()) == {
        "The session to act on: omit it (or send this session's name) for this session, "
        "or name one of its layers."
    }
