"""A full disk: receipts and stats during the outage match what is on disk after a restart.

The serve runs under a file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so a write
past it fails with EFBIG as on a full filesystem, and SQLite reports the disk full). It
is fed writes until the store refuses them; every answer is recorded; then it stops, and
a serve without the limit opens the same file. What each write was told must be what
happened:

- applied: in the store, exactly once;
- failed with its intent kept: replayed by the next serve, answered
  applied_after_restart there, in the store exactly once;
- refused before its ack (store error): not in the store.

And while the store refused writes, lambo_stats said degraded.
"""

from __future__ import annotations

import os
import resource
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from lambo_core.store import SqliteStore
from tests.e2e.raw_serve import RawServe

SESSION = "full"
ROOM = 96 * 1024  # what the limit leaves above the largest store file
PADDING = "x" * 1500  # each fact about 1.5 KB, so the room fills within a few dozen writes


def keyword_only(home: Path) -> None:
    config = home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[embedder]\nmatch_strategy = "canonical"\n')


def fact(i: int) -> str:
    return f"full disk fact {i} {PADDING}"


def file_size_limit(limit: int) -> Callable[[], None]:
    """Run in the child before exec: no file may grow past ``limit`` bytes, and a write
    past it fails (EFBIG) instead of killing the process (SIGXFSZ ignored, kept by exec)."""

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limited


def largest_file(store: Path) -> int:
    sizes = [os.path.getsize(p) for p in store.parent.glob(store.name + "*")]
    return max(sizes)


def test_a_full_disk_tells_each_write_what_really_happened(
    lambo_home: Path, tmp_path: Path
) -> None:
    keyword_only(lambo_home)
    store_path = tmp_path / "full.db"
    first = RawServe(lambo_home, store_path, session=SESSION)  # the session, with room
    first.call(
        "lambo_derive",
        {"agent_id": "a", "concepts": [{"content": "before", "concept_type": "logic"}]},
    )
    assert first.proc.stdin is not None
    first.proc.stdin.close()
    assert first.proc.wait(60) == 0
    first.close()

    limit = file_size_limit(largest_file(store_path) + ROOM)
    serve = RawServe(lambo_home, store_path, session=SESSION, preexec=limit)
    applied: list[int] = []
    kept: list[tuple[int, str]] = []
    refused: list[int] = []
    for i in range(400):
        reply = serve.request(
            "tools/call",
            {
                "name": "lambo_derive",
                "arguments": {
                    "agent_id": "a",
                    "concepts": [{"content": fact(i), "concept_type": "logic"}],
                },
            },
        )["result"]
        if reply["isError"]:
            text = reply["content"][0]["text"]
            assert text.startswith("store error: the store refused the write"), text
            assert "this session is degraded" in text
            refused.append(i)
        else:
            receipt = reply["structuredContent"]["receipt"]
            outcome = serve.call(
                "lambo_stats", {"agent_id": "a", "receipt": receipt, "wait_ms": 30_000}
            )
            state = outcome["receipt"]["state"]
            if state == "applied":
                applied.append(i)
            else:
                assert state == "failed", outcome["receipt"]
                detail = outcome["receipt"]["detail"]
                assert "the write's intent is kept" in detail, detail
                assert not detail.endswith("; nothing was written")
                kept.append((i, receipt))
        if len(refused) >= 5:
            break
    # The disk filled, after some writes went in (with this room some are usually applied
    # and some kept for replay: which ones depends on how SQLite lays out its pages).
    assert refused and (applied or kept), (applied, kept, refused)
    assert serve.call("lambo_stats", {"agent_id": "a"})["degraded"] is True
    assert serve.proc.stdin is not None
    serve.proc.stdin.close()
    assert serve.proc.wait(60) == 0
    serve.close()

    again = RawServe(lambo_home, store_path, session=SESSION)
    try:
        for _, receipt in kept:
            answer = again.call(
                "lambo_stats", {"agent_id": "a", "receipt": receipt, "wait_ms": 30_000}
            )
            assert answer["receipt"]["state"] == "applied_after_restart", answer["receipt"]
        assert again.call("lambo_stats", {"agent_id": "a"})["degraded"] is False
    finally:
        assert again.proc.stdin is not None
        again.proc.stdin.close()
        assert again.proc.wait(60) == 0
        again.close()

    store = SqliteStore(store_path)
    try:
        contents = Counter(c.content for c in store.concepts(SESSION))
    finally:
        store.close()
    for i in applied + [i for i, _ in kept]:
        assert contents[fact(i)] == 1, i  # what was applied or kept is there, once
    for i in refused:
        assert contents[fact(i)] == 0, i  # what was refused before its ack is not
