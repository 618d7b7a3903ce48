"""A hub paused past its lease (SIGSTOP, as a client's Ctrl-Z does) under three forwarding
clients: every call is answered within the configured wait, another serve takes over, and
the old hub, resumed, commits nothing more; every acked write is recallable exactly once.

Real `lambo serve` processes on one SQLite file. Each serve runs with an audit hook that
records, inside every store transaction that changed something, the lease row as that
transaction sees it: so "committed by the old hub after the takeover" is read from the
transactions themselves, not guessed from timings.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import shutil
import signal
import sqlite3
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.hub import HUB_GONE_TEXT, HUB_SILENT_TEXT, LEASE_LOST_CALL_TEXT
from lambo_core.paths import resolve_paths
from tests.e2e.conftest import lambo_argv, serve_env, sitecustomize

SESSION = "paused"
LEASE_TTL_S = 3.0
FORWARD_TIMEOUT_S = 1.0
#: SessionHub's settle_wait: a call made while its serve elects waits this long for it
SETTLE_WAIT_S = 1.5
#: the configured longest answer (an election's wait, then the forwarded call's bound),
#: plus room for a noisy 2-core machine running five serves: a failure bound
ANSWER_BOUND_S = SETTLE_WAIT_S + FORWARD_TIMEOUT_S + 5.0
DEADLINE_S = 60.0  # a failure bound for whole phases
UNAVAILABLE = "lambo memory is unavailable for this call: "
# A forwarded call the paused hub had read: its outcome is unknown, and it says so.
SILENT = re.compile(re.escape(HUB_SILENT_TEXT).replace(r"\{secs:g\}", r"[0-9.]+"))


def no_hub(text: str) -> bool:
    """A call no hub answered: gone (nothing done) or silent (it may still act on it)."""
    return text == HUB_GONE_TEXT or SILENT.fullmatch(text) is not None


# Every serve records each store transaction that changed something: its pid, and the
# session lease's holder pid, token and expiry as that same transaction read them.
# The first hub also holds every store.apply while the gate file exists (acked writes
# stay queued, and no transaction is open while it is paused).
AUDIT = """
import os, sys, time
from contextlib import contextmanager
from lambo_core.store.sqlite import SqliteStore
from lambo_core.store.sqlite_connection import Connections

_write = Connections.write
_log = os.path.join(os.environ["LAMBO_E2E_AUDIT"], f"{os.getpid()}.log")

@contextmanager
def _audited(self, *args, **kwargs):
    with _write(self, *args, **kwargs) as conn:
        before = conn.total_changes
        yield conn
        if conn.total_changes > before:
            row = conn.execute(
                "SELECT pid, token, expires_at FROM session_leases WHERE session = ?",
                (os.environ["LAMBO_E2E_SESSION"],),
            ).fetchone()
            with open(_log, "a") as fh:
                fh.write(f"{os.getpid()} {row[0]} {row[1]} {row[2]!r} {time.time()!r}\\n")

Connections.write = _audited

_gate = os.environ.get("LAMBO_E2E_APPLY_GATE")
if _gate:
    _apply = SqliteStore.apply

    def _gated_apply(self, batch):
        while os.path.exists(_gate):
            time.sleep(0.01)
        _apply(self, batch)

    SqliteStore.apply = _gated_apply
"""


class Serve:
    """A `lambo serve` spoken to in raw JSON-RPC lines, every answer awaited at most
    ``ANSWER_BOUND_S`` (read with select on the pipe, so a hang fails the test)."""

    def __init__(self, home: Path, env: dict[str, str], log: Path) -> None:
        argv = [*lambo_argv(), "serve", "--session", SESSION]
        self._log = log.open("wb")  # read when a test fails
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env={**serve_env(home), **env},
            cwd=home,
        )
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        self._buf = b""
        self._next = 0
        self.longest_s = 0.0
        self.request("initialize", {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "paused-test", "version": "1"},
        })  # fmt: skip
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def _line(self, until: float) -> bytes:
        while b"\n" not in self._buf:
            left = until - time.monotonic()
            assert left > 0, f"no answer within {ANSWER_BOUND_S} s"
            ready, _, _ = select.select([self._fd], [], [], left)
            if ready:
                chunk = os.read(self._fd, 1 << 16)
                assert chunk, "the serve closed its stdout"
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        rid = self._next
        started = time.monotonic()
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            message = json.loads(self._line(started + ANSWER_BOUND_S))
            if message.get("id") == rid:
                self.longest_s = max(self.longest_s, time.monotonic() - started)
                return dict(message)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        return dict(reply["result"])

    def stats(self, *, unavailable: bool = False, **extra: Any) -> dict[str, Any] | None:
        """lambo_stats' payload, or None when the call answered the hub-gone error (with
        ``unavailable``, any of the clear errors saying memory is unavailable for it)."""
        result = self.call("lambo_stats", {"agent_id": "agent-a", **extra})
        if result["isError"]:
            text = result["content"][0]["text"]
            if unavailable:
                # the resumed hub's own client: its lease is gone, or no hub answers yet
                assert (
                    text == LEASE_LOST_CALL_TEXT
                    or no_hub(text)
                    or (
                        text.startswith(UNAVAILABLE)
                        and "nothing was read and nothing was written" in text
                    )
                ), result
            else:
                assert no_hub(text), result
            return None
        return dict(result["structuredContent"])

    def derive(self, content: str) -> str | None:
        """The receipt of an acked derive, or None when it answered the hub-gone error."""
        result = self.call(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [{"content": content, "concept_type": "logic"}]},
        )
        if result["isError"]:
            assert no_hub(result["content"][0]["text"]), result
            return None
        assert result["structuredContent"]["receipt_state"] == "pending", result
        return str(result["structuredContent"]["receipt"])

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGCONT)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


@pytest.fixture
def runtime_dir() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(dir="/tmp", prefix="lph-"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def _audit(audit: Path, pid: int) -> list[tuple[int, int, int, float, float]]:
    path = audit / f"{pid}.log"
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        own, holder, token, expires_at, at = line.split()
        rows.append((int(own), int(holder), int(token), float(expires_at), float(at)))
    return rows


def _lease(db: Path) -> tuple[int, int]:
    """(holder pid, token) of the session's lease, read from the file."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        row = conn.execute(
            "SELECT pid, token FROM session_leases WHERE session = ?", (SESSION,)
        ).fetchone()
    finally:
        conn.close()
    assert row is not None
    return int(row[0]), int(row[1])


def _until_hub(serve: Serve, not_pid: int) -> dict[str, Any]:
    """lambo_stats until a hub other than ``not_pid`` answers (each refusal one of the clear
    errors saying memory is unavailable, answered within the bound): the resumed hub's own
    client, while its serve stops being the hub and finds the new one."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        seen = serve.stats(unavailable=True)
        if seen is not None and seen["holder_pid"] != not_pid:
            return seen
    raise AssertionError("no other hub answered")


def _write_until_taken_over(forwarders: list[Serve], old_pid: int, acked: dict[str, str]) -> int:
    """Each forwarder's client writes (and adds what was acked to ``acked``) until a hub
    other than ``old_pid`` answers it; how many writes were refused on the way."""
    errors: list[BaseException] = []
    refused = [0] * len(forwarders)

    def keep_calling(i: int, f: Serve) -> None:
        try:
            n = 0
            while True:
                n += 1
                receipt = f.derive(f"written during the pause by client {i} number {n}")
                if receipt is None:
                    refused[i] += 1
                    continue
                acked[receipt] = f"written during the pause by client {i} number {n}"
                seen = f.stats()
                if seen is not None and seen["holder_pid"] != old_pid:
                    return
        except BaseException as exc:  # the main thread re-raises it
            errors.append(exc)

    threads = [threading.Thread(target=keep_calling, args=(i, f)) for i, f in enumerate(forwarders)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    return sum(refused)


def _assert_each_recalled_once(live: Serve, acked: dict[str, str]) -> None:
    for receipt, content in acked.items():
        state = live.stats(receipt=receipt, wait_ms=20_000)
        assert state is not None
        assert state["receipt"]["state"] in {"applied", "applied_after_restart"}, state
        found = live.call("lambo_recall", {"agent_id": "agent-a", "query": content})
        assert not found["isError"], found
        hits = [h["content"] for h in found["structuredContent"]["hits"]]
        assert hits.count(content) == 1, (content, hits)


def _concept_counts_and_pending(db: Path) -> tuple[dict[str, int], int]:
    """The session's concepts by content (how many of each) and its pending intents."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        counts = dict(
            conn.execute(
                "SELECT content, COUNT(*) FROM concepts WHERE session = ? GROUP BY content",
                (SESSION,),
            ).fetchall()
        )
        pending = conn.execute(
            "SELECT COUNT(*) FROM write_intents WHERE session = ? AND state = 'pending'",
            (SESSION,),
        ).fetchone()[0]
    finally:
        conn.close()
    return counts, int(pending)


def test_a_hub_paused_past_its_lease_is_fenced_out_and_loses_no_acked_write(
    lambo_home: Path, tmp_path: Path, runtime_dir: Path
) -> None:
    config = lambo_home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        '[embedder]\nkind = "none"\n'
        f"[serve]\nlease_ttl_s = {LEASE_TTL_S}\nshutdown_budget_s = 2.0\n"
        f"forward_timeout_s = {FORWARD_TIMEOUT_S}\n"
    )
    db = resolve_paths(serve_env(lambo_home)).default_store
    audit = tmp_path / "audit"
    audit.mkdir()
    gate = tmp_path / "apply-gate"
    base = {
        **sitecustomize(tmp_path / "site", AUDIT),
        "LAMBO_E2E_AUDIT": str(audit),
        "LAMBO_E2E_SESSION": SESSION,
        "XDG_RUNTIME_DIR": str(runtime_dir),
    }
    serves: list[Serve] = []
    try:
        old = Serve(lambo_home, {**base, "LAMBO_E2E_APPLY_GATE": str(gate)}, tmp_path / "old.log")
        serves.append(old)
        first = old.stats()
        assert first is not None
        old_pid = first["holder_pid"]
        forwarders = [Serve(lambo_home, base, tmp_path / f"serve-{i}.log") for i in range(3)]
        serves += forwarders
        for f in forwarders:
            seen = f.stats()
            assert seen is not None and seen["holder_pid"] == old_pid  # they forward
        old_holder, old_token = _lease(db)
        assert old_holder == old_pid

        acked: dict[str, str] = {}  # receipt -> content, every write any client was acked
        for n, f in enumerate(forwarders):
            content = f"applied before the pause number {n}"
            receipt = f.derive(content)
            assert receipt is not None
            acked[receipt] = content
            done = f.stats(receipt=receipt, wait_ms=20_000)
            assert done is not None and done["receipt"]["state"] == "applied", done

        # Acked writes left queued in the hub, then the hub paused with them.
        gate.write_text("closed")
        queued = []
        for n in range(6):
            content = f"queued in the paused hub number {n}"
            receipt = (old if n % 2 else forwarders[n % 3]).derive(content)
            assert receipt is not None
            acked[receipt] = content
            queued.append(receipt)
        os.kill(old_pid, signal.SIGSTOP)
        audited_at_pause = len(_audit(audit, old_pid))

        # Three clients keep calling through their serves: every call answers (the clear
        # error while nobody holds the session), until one serve has taken it over.
        refused = _write_until_taken_over(forwarders, old_pid, acked)
        assert refused >= 1  # the pause was seen, and answered, not hung on
        new_pid, new_token = _lease(db)
        assert new_pid != old_pid and new_token > old_token
        assert new_pid in {f.proc.pid for f in forwarders}
        # the hub's queued writes are the new hub's replay now
        for receipt in queued:
            done = forwarders[0].stats(receipt=receipt, wait_ms=20_000)
            assert done is not None
            assert done["receipt"]["state"] == "applied_after_restart", done

        # Resume the old hub, its applies no longer held: it must commit nothing more.
        gate.unlink()
        os.kill(old_pid, signal.SIGCONT)
        resumed = _until_hub(old, old_pid)  # its own client: the clear error, then forwarded
        assert resumed["holder_pid"] == new_pid
        late = old.derive("acked by the old hub's serve after it resumed")
        assert late is not None  # acked by the new hub, through the old hub's serve
        acked[late] = "acked by the old hub's serve after it resumed"
        done = old.stats(receipt=late, wait_ms=20_000)
        assert done is not None and done["receipt"]["state"] == "applied", done

        # Zero commits by the old hub after the pause, and every commit of every serve was
        # made while the lease row named that serve.
        old_commits = _audit(audit, old_pid)
        assert len(old_commits) == audited_at_pause
        assert {token for _, _, token, _, _ in old_commits} == {old_token}
        for pid in [s.proc.pid for s in serves]:
            for own, holder, token, _expires_at, _at in _audit(audit, pid):
                assert holder == own, (own, holder, token)

        # Every acked write recallable through the live hub, exactly once.
        live = next(f for f in forwarders if f.proc.pid == new_pid)
        _assert_each_recalled_once(live, acked)
        counts, pending = _concept_counts_and_pending(db)
        assert sorted(counts) == sorted(acked.values())
        assert set(counts.values()) == {1}
        assert pending == 0
        for s in serves:
            assert s.longest_s <= ANSWER_BOUND_S
    finally:
        for s in serves:
            s.stop()
