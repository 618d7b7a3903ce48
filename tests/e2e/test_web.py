"""The serve-web page in a real browser: Debian's headless Chromium driven by Playwright,
against a real `lambo serve-web` on a demo-built SQLite session. It loads the page, types
a recall, opens a concept and its neighbourhood, and asserts on what is rendered.

.ci/run installs chromium (apt) and Playwright (the test extra). Outside CI a machine
without them skips this test; under CI a missing one fails.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

import pytest

from lambo_core.store import SqliteStore
from tests.e2e.web_serve import WebServe, demo_session

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
WAIT_MS = 30_000  # a rendering not there by then is a failure


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} is not installed (see .ci/run)")
    pytest.skip(f"{what} is not installed (see .ci/run)")


@pytest.fixture
def chromium_path() -> str:
    if importlib.util.find_spec("playwright") is None:
        _missing("playwright (the test extra)")
    if shutil.which(CHROMIUM) is None:
        _missing("Debian's chromium (apt-get install chromium)")
    return CHROMIUM


def test_the_page_shows_counts_recall_gates_and_graph(
    lambo_home: Path, tmp_path: Path, chromium_path: str
) -> None:
    store = tmp_path / "demo.sqlite"
    demo_session(lambo_home, store)
    held = SqliteStore(store)
    try:
        concepts = sum(1 for _ in held.concepts("demo", vectors=False))
    finally:
        held.close()
    from playwright import sync_api

    shot = tmp_path / "serve-web.png"
    with WebServe(lambo_home, store) as web, sync_api.sync_playwright() as pw:
        base = web.wait_started()
        browser = pw.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1500})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(base + "/")

            # counts and health at a glance, and the feed
            count = page.locator("#count-concepts")
            sync_api.expect(count).to_have_text(str(concepts), timeout=WAIT_MS)
            sync_api.expect(page.locator("#count-canonical")).to_have_text("1")
            sync_api.expect(page.locator("#health")).to_have_attribute("data-health", "ok")
            promotion = page.locator("#feed li.promotion", has_text="Venerable → Canonical")
            sync_api.expect(promotion).to_have_count(1, timeout=WAIT_MS)

            # a recall: the context block with its contradiction and pillar lines styled
            page.fill("#recall-q", "user schema")
            page.click("#recall-form button")
            contradiction = page.locator("#recall-out .line-contradiction")
            sync_api.expect(contradiction.first).to_be_visible(timeout=WAIT_MS)
            lines = contradiction.all_inner_texts()
            assert any(line.startswith("⚠ Contradicted at") for line in lines), lines
            pillar = page.locator("#recall-out .line-pillar")
            sync_api.expect(pillar).to_have_count(1)
            assert pillar.inner_text().startswith("⚑ Load-bearing pillar — 9 nodes depend on")
            colour = pillar.evaluate("el => getComputedStyle(el).color")
            assert colour != contradiction.first.evaluate("el => getComputedStyle(el).color")

            # the hits' annotation kinds (/api/recall's hits[].annotations) beside them
            schema_hit = page.locator("#recall-out .line-hit", has_text="user schema [Entity")
            sync_api.expect(schema_hit.locator(".annotation")).to_have_text(["contradiction"])
            kinds = set(page.locator("#recall-out .annotation").all_inner_texts())
            assert {"contradiction", "contradicts", "rests_on_contradicted"} <= kinds

            # a concept from the recall: a dependent, still short of Candidate
            page.locator("#recall-out .line-hit", has_text="GET /users/{id}").click()
            stage = page.locator("#gate-stage")
            sync_api.expect(stage).to_have_text("None → Candidate (not yet)", timeout=WAIT_MS)
            gates = page.locator("#gates .gate")
            assert gates.count() >= 1
            assert page.locator("#gates .gate.unmet").count() >= 1
            sync_api.expect(page.locator("#concept-head .content")).to_have_text(
                "GET /users/{id} returns one user"
            )

            # its neighbourhood as a graph, drawn by cytoscape
            page.click("#show-graph")
            sync_api.expect(page.locator("#graph canvas").first).to_be_attached(timeout=WAIT_MS)
            page.wait_for_function(
                "() => window.lamboGraph && window.lamboGraph.nodes().length > 1"
            )
            drawn = page.evaluate("window.lamboGraph.nodes().length")
            focus = page.evaluate("window.lamboGraph.nodes('[focus = 1]').data('label')")
            assert drawn > 1 and focus.startswith("GET /users/{id}")

            # a node tapped opens that concept: the schema, Canonical already
            page.evaluate(
                "window.lamboGraph.nodes().filter(n => n.data('label') === 'user schema')"
                ".emit('tap')"
            )
            sync_api.expect(stage).to_have_text("Canonical (the last stage)", timeout=WAIT_MS)
            # a function, not an expression: the page's CSP forbids eval, which an expression needs
            page.wait_for_function(
                "() => window.lamboGraph.nodes('[focus = 1]').data('label') === 'user schema'"
            )
            page.screenshot(path=str(shot), full_page=True)
            assert errors == []
        finally:
            browser.close()
        assert web.stop() == 0
    assert shot.stat().st_size > 10_000
    print(f"screenshot: {shot}")
