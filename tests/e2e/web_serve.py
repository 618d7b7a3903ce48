"""A `lambo serve-web` process for e2e tests (started on --port 0, its address read back
from its start line, stopped with SIGTERM), a demo-like session to show, and GETs."""

from __future__ import annotations

import contextlib
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.announced import AnnouncedProcess
from tests.e2e.conftest import lambo_argv, run_lambo, serve_env

STARTED = re.compile(r"serve-web: session \S+ at (http://\S+)/ \(read-only\)")

# keyword-only by declaration (no model to load), and the contradiction rule's age floor
# low enough that the demo's contradiction fires for the window as it did for the demo
WEB_CONFIG = '[embedder]\nmatch_strategy = "canonical"\n\n[canonization]\nedge_min_age_s = 0.01\n'


def demo_session(home: Path, store: Path, session: str = "demo") -> None:
    """``lambo demo`` run into ``store``: a Canonical pillar, a contradiction, its dependents."""
    config = home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(WEB_CONFIG)
    out = run_lambo(home, "demo", "--store", str(store), "--session", session)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "⚠ Contradicted at" in out.stdout


class WebServe(AnnouncedProcess):
    """One serve-web process; ``base`` once it answers."""

    def __init__(self, home: Path, store: Path, session: str = "demo", *extra: str) -> None:
        argv = [*lambo_argv(), "serve-web", "--session", session, "--store", str(store)]
        super().__init__([*argv, "--port", "0", *extra], home, serve_env(home), STARTED)

    def wait_started(self) -> str:
        base = self.wait_announced("serve-web")
        # the line is logged just before uvicorn accepts: wait for an answer, not a sleep
        wait_answering(base)
        return base

    def get(self, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
        return get_json(self.wait_started() + path, headers)

    def __enter__(self) -> WebServe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def get_json(url: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    """(status, parsed JSON body) of one GET."""
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, json.loads(exc.read())


def wait_answering(base: str) -> None:
    """Until /healthz answers (the socket is bound before the line, so a refused connect
    means uvicorn has not started accepting yet; each try blocks on the socket)."""
    for _ in range(1000):
        with contextlib.suppress(urllib.error.URLError, ConnectionError):
            status, _ = get_json(base + "/healthz")
            if status == 200:
                return
    raise AssertionError("serve-web never answered /healthz")


def query(**params: object) -> str:
    return urllib.parse.urlencode({k: str(v) for k, v in params.items()})
