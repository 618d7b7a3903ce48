"""`lambo serve-web` over real HTTP on 127.0.0.1, against a real SQLite session built by
`lambo demo`: each endpoint, the refusals, that it never takes the lease (a serve started
after it still holds the session), and that it shows writes made after it started."""

from __future__ import annotations

import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import pytest

from lambo_core.model import IntentState
from lambo_core.store import SqliteStore, migrations
from lambo_core.store.sqlite import read_lease
from tests.e2e.conftest import body, derive, run_lambo
from tests.e2e.http_serve import HttpServe, http_client
from tests.e2e.web_serve import WebServe, demo_session, get_json, query

SCHEMA = "user schema"
DEPENDENT = "GET /users/{id} returns one user"
TOKEN = "web-window-token-0123456789abcdef"
SEEN_BOUND_S = 60.0  # a write the window has not shown by then is a failure


@pytest.fixture
def demo(lambo_home: Path, tmp_path: Path) -> Path:
    store = tmp_path / "demo.sqlite"
    demo_session(lambo_home, store)
    return store


def _store_figures(store: Path) -> tuple[int, int, int]:
    held = SqliteStore(store)
    try:
        concepts = sum(1 for _ in held.concepts("demo", vectors=False))
        applied = sum(1 for i in held.intents("demo") if i.state is IntentState.APPLIED)
        events = len(held.canon_events("demo"))
    finally:
        held.close()
    return concepts, applied, events


def test_each_endpoint_answers_from_the_store(lambo_home: Path, demo: Path) -> None:
    concepts, applied, canon_events = _store_figures(demo)
    with WebServe(lambo_home, demo) as web:
        status, health = web.get("/healthz")
        assert (status, health["read_only"], health["session"]) == (200, True, "demo")

        _, session = web.get("/api/session")
        assert session["read_only"] is True and session["held_by"] is None
        assert session["recall_mode"] == "keyword-only"

        _, stats = web.get("/api/stats")
        assert stats["concept_count"] == concepts
        assert stats["write_queue_applied"] == applied
        assert stats["recorded_promotions"] + stats["recorded_demotions"] == canon_events
        assert stats["canonical_count"] == 1
        assert "flush_lag_ms" in stats["absent"] and "flush_lag_ms" not in stats

        _, pulse = web.get("/api/pulse")
        assert pulse["concepts"] == concepts and pulse["health"] == "ok"
        assert pulse["served"] is False and pulse["last_write_at"]

        _, feed = web.get("/api/events?" + query(since=0))
        kinds = [e["kind"] for e in feed["events"]]
        assert kinds.count("write") == applied
        assert kinds.count("promotion") == canon_events
        to_canonical = [e for e in feed["events"] if e.get("to") == "Canonical"]
        assert [e["label"] for e in to_canonical] == [SCHEMA]
        _, after = web.get("/api/events?" + query(since=feed["cursor"]))
        assert after["events"] == []  # nothing newer than the last one seen

        _, recalled = web.get("/api/recall?" + query(q=SCHEMA, top_k=3))
        assert any(line.startswith("⚑ Load-bearing pillar") for line in recalled["warnings"])
        assert any(line.startswith("⚠ Contradicted at") for line in recalled["warnings"])
        assert "⚠ Contradicted at" in recalled["context"]
        assert recalled["hits"][0]["content"] == SCHEMA
        # hits[].annotations: each a kind with the warning line the context block shows
        notes = [a for hit in recalled["hits"] for a in hit["annotations"]]
        assert [a["kind"] for a in recalled["hits"][0]["annotations"]] == ["contradiction"]
        assert {"contradiction", "contradicts", "rests_on_contradicted"} <= {
            a["kind"] for a in notes
        }
        assert all(a["line"] in recalled["context"] for a in notes)

        _, schema = web.get("/api/inspect?" + query(focus=SCHEMA))
        assert schema["status"] == "Canonical" and schema["admission"]["status"] == "Canonical"
        _, dependent = web.get("/api/inspect?" + query(focus=DEPENDENT))
        admission = dependent["admission"]
        assert admission["next"] == "Candidate" and admission["checks"]
        assert {"gate", "current", "bar", "met"} <= set(admission["checks"][0])

        _, graph = web.get("/api/graph?" + query(focus=SCHEMA, depth=1))
        ids = {n["id"] for n in graph["nodes"]}
        assert graph["focus"] in ids and len(ids) == len(graph["nodes"]) > 1
        assert {"contradicts", "dependency"} <= {e["edge_type"] for e in graph["edges"]}
        assert all(e["source"] in ids and e["target"] in ids for e in graph["edges"])
        _, pillar = web.get("/api/graph")  # no focus: the largest pillar's
        assert pillar["focus"] == schema["node_id"] and pillar["nodes"] == graph["nodes"]
        assert web.stop() == 0


SENT = "zq<b>sent"  # a value no refusal may repeat


@pytest.mark.parametrize(
    ("path", "status", "names"),
    [
        ("/api/recall", 400, "q is required"),
        ("/api/recall?" + query(q=SCHEMA, top_k=0), 400, "top_k must be an integer 1..=100"),
        ("/api/recall?" + query(q=SCHEMA, top_k=SENT), 400, "top_k must be an integer"),
        ("/api/recall?" + query(q=SENT + "\x01"), 400, "q must be a text"),
        ("/api/recall?" + query(q="x" * 2001), 400, "q must be a text of 1..=2000"),
        ("/api/inspect?" + query(focus=SENT), 404, "the focus matches no concept"),
        ("/api/graph?" + query(focus=" "), 400, "focus is required"),
        ("/api/graph?" + query(focus=SCHEMA, depth=9), 400, "depth must be an integer 0..=5"),
        ("/api/events?" + query(since=-1), 400, "since must be an integer >= 0"),
        ("/api/events?" + query(since=SENT), 400, "since must be an integer >= 0"),
        ("/api/stats?" + query(**{SENT: 1}), 400, "/api/stats takes no parameters"),
        ("/api/recall?" + query(q=SCHEMA, **{SENT: 1}), 400, "/api/recall takes q, top_k"),
        ("/nothing-here", 404, "no such page"),
        ("/static/" + "secret.txt", 404, "no such file"),
    ],
)
def test_bad_requests_are_refused_naming_the_rule(
    lambo_home: Path, demo: Path, path: str, status: int, names: str
) -> None:
    with WebServe(lambo_home, demo) as web:
        got, refusal = web.get(path)
        assert got == status, refusal
        assert names in refusal["message"]
        assert SENT not in refusal["message"] and "zq" not in refusal["message"]


def test_writes_and_other_hosts_are_refused(lambo_home: Path, demo: Path) -> None:
    with WebServe(lambo_home, demo) as web:
        base = web.wait_started()
        post = urllib.request.Request(base + "/api/recall", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(post, timeout=60)
        assert refused.value.code == 405
        refused.value.close()
        status, refusal = get_json(base + "/api/session", {"Host": "evil.example:80"})
        assert status == 421 and "its own address" in refusal["message"]


def test_it_never_takes_the_lease_and_shows_later_writes(lambo_home: Path, demo: Path) -> None:
    with WebServe(lambo_home, demo) as web:
        _, before = web.get("/api/pulse")
        _, seen = web.get("/api/events")
        idle = read_lease(demo, "demo")  # the demo released its lease; the window took none
        assert idle is None or idle.expires_at <= time.time()
        # a serve started after the window still becomes the session's hub
        with HttpServe(lambo_home, demo, ("demo",)) as serve:
            url = serve.url("demo")  # it says where it listens once it holds the session
            lease = read_lease(demo, "demo")
            assert lease is not None and lease.expires_at > time.time()

            async def write() -> None:
                async with http_client(url) as client:
                    receipt = await derive(client, "the session window shows this write")
                    waited = body(
                        await client.call_tool(
                            "lambo_stats",
                            {"agent_id": "agent-a", "receipt": receipt, "wait_ms": 30_000},
                        )
                    )
                    assert waited["receipt"]["state"] == "applied"

            anyio.run(write)
            _, session = web.get("/api/session")
            assert session["held_by"] == lease.holder
            shown = _wait_for_write(web, seen["cursor"], "the session window shows this write")
            assert shown["agent_id"] == "agent-a" and shown["tool"] == "lambo_derive"
            _, after = web.get("/api/pulse")
            assert after["concepts"] == before["concepts"] + 1 and after["served"] is True
            _, recalled = web.get("/api/recall?" + query(q="session window"))
            assert recalled["hits"][0]["content"] == "the session window shows this write"
            assert serve.stop() == 0
        assert web.stop() == 0


def _wait_for_write(web: WebServe, cursor: int, label: str) -> dict[str, Any]:
    """The feed's event for the write that created ``label``, polled until it appears (the
    window reloads when the store's fingerprint moves)."""
    ends = time.monotonic() + SEEN_BOUND_S
    while time.monotonic() < ends:
        _, feed = web.get("/api/events?" + query(since=cursor))
        for event in feed["events"]:
            if any(c["label"] == label for c in event.get("created", [])):
                return dict(event)
        time.sleep(0.1)
    raise AssertionError(f"the window never showed the write; its log:\n{web.log}")


def test_off_loopback_it_needs_a_credential(lambo_home: Path, demo: Path) -> None:
    out = run_lambo(
        lambo_home, "serve-web", "--session", "demo", "--store", str(demo), "--bind", "0.0.0.0"
    )
    assert out.returncode == 2, out.stderr
    assert "--bind 0.0.0.0 is not a loopback address" in out.stderr
    assert "--auth-token" in out.stderr


def test_with_a_credential_the_api_needs_the_token(lambo_home: Path, demo: Path) -> None:
    with WebServe(lambo_home, demo, "demo", "--auth-token", TOKEN) as web:
        status, refusal = web.get("/api/session")
        assert status == 401 and refusal["error"] == "unauthorized"
        assert TOKEN not in web.log
        status, session = web.get("/api/session", {"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and session["session"] == "demo"
        status, _ = web.get("/api/session", {"Authorization": "Bearer wrong-token-0123456789"})
        assert status == 401
        page = urllib.request.urlopen(web.wait_started() + "/", timeout=60)
        with page:
            assert page.status == 200 and b"/static/app.js" in page.read()


def test_a_store_or_session_that_is_not_there_is_refused(
    lambo_home: Path, demo: Path, tmp_path: Path
) -> None:
    missing = tmp_path / "nothing.sqlite"
    out = run_lambo(lambo_home, "serve-web", "--session", "demo", "--store", str(missing))
    assert out.returncode == 2 and "no store at" in out.stderr
    assert not missing.exists()
    out = run_lambo(lambo_home, "serve-web", "--session", "other", "--store", str(demo))
    assert out.returncode == 2 and "no session named 'other'" in out.stderr


def test_a_store_at_an_older_schema_is_refused_not_migrated(
    lambo_home: Path, tmp_path: Path
) -> None:
    lambo_home.mkdir(parents=True, exist_ok=True)  # the command's working directory
    old = tmp_path / "old.sqlite"
    conn = sqlite3.connect(old, isolation_level=None)
    try:
        migrations.migrate(conn, upto=1)
    finally:
        conn.close()
    before = old.read_bytes()
    out = run_lambo(lambo_home, "serve-web", "--session", "demo", "--store", str(old))
    assert out.returncode == 2, out.stderr
    assert f"is at schema version 1 and this lambo's is {migrations.LATEST_VERSION}" in out.stderr
    assert "serve-web writes nothing, so it does not migrate it" in out.stderr
    assert old.read_bytes() == before
