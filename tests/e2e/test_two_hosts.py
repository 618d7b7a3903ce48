"""Two "machines" on one store, SQLite and PostgreSQL (issue #18, item 3): real `lambo serve`
processes with their own XDG_RUNTIME_DIR and LAMBO_HOST, so neither may forward to the
other's Unix socket.

The second refuses while the first holds the session, naming it; SIGKILL the first and the
second takes over once the lease expires, replaying what the first had acked; SIGSTOP a hub
past its lease, let the other take over, SIGCONT it: it commits nothing more, and says it
lost the lease.

Each serve runs with a hook (a sitecustomize) that logs every store method that changed
something and returned (so committed), and that holds every ``apply`` while a gate file
exists, so acked writes stay queued in a hub at the moment it is killed or paused.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from lambo_core.hub import LEASE_LOST_CALL_TEXT
from lambo_core.model import IntentState, Lease
from lambo_core.store.base import Store
from tests.e2e.conftest import (
    SHARED_KINDS,
    lambo_argv,
    open_served_store,
    serve_env,
    sitecustomize,
    store_table,
)

SESSION = "two"
LEASE_TTL_S = 3.0
ANSWER_BOUND_S = 60.0  # a failure bound for one answer on a loaded 2-core machine
DEADLINE_S = 90.0  # a failure bound for a whole phase
OTHER_HOST = "conflict: the session is held on another host"

# Logs "<pid> <method> <time>" for every store write that returned, and holds each apply
# while the gate file exists (no transaction is open while it waits).
HOOK = """
import os, time
_log = os.path.join(os.environ["LAMBO_E2E_AUDIT"], f"{os.getpid()}.log")
_gate = os.environ.get("LAMBO_E2E_APPLY_GATE")
WRITES = (
    "apply", "add_intent", "settle_intent", "delete_concepts", "delete_edges", "set_status",
    "add_access_counts", "bump_gc_survived", "add_canon_event", "stamp_contract",
    "mark_shared_layer", "set_gc_clock", "ensure_session", "forget",
)

def _audited(name, method):
    def audited(self, *args, **kwargs):
        if name == "apply" and _gate:
            while os.path.exists(_gate):
                time.sleep(0.01)
        out = method(self, *args, **kwargs)
        with open(_log, "a") as fh:
            fh.write(f"{os.getpid()} {name} {time.time()!r}\\n")
        return out
    return audited

def _hook(cls):
    for name in WRITES:
        if hasattr(cls, name):
            setattr(cls, name, _audited(name, getattr(cls, name)))

from lambo_core.store.sqlite import SqliteStore
_hook(SqliteStore)
try:
    from lambo_core.store.postgres.store import PostgresStore
except ImportError:
    pass
else:
    _hook(PostgresStore)
"""


@dataclass(frozen=True)
class Backing:
    """The store both machines share: its kind and [store] table, and how the test reads it."""

    kind: str
    table: str
    home: Path
    request: pytest.FixtureRequest

    def open(self) -> Store:
        return open_served_store(self.kind, self.home, self.request)


@pytest.fixture(params=SHARED_KINDS)
def backing(request: pytest.FixtureRequest, lambo_home: Path) -> Backing:
    kind = str(request.param)
    return Backing(kind, store_table(kind, request), lambo_home, request)


@pytest.fixture
def home(lambo_home: Path, backing: Backing) -> Path:
    config = lambo_home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        backing.table + '[embedder]\nkind = "none"\n'
        f"[serve]\nlease_ttl_s = {LEASE_TTL_S}\nshutdown_budget_s = 1.5\n"
        "forward_timeout_s = 2.0\n"
    )
    return lambo_home


@pytest.fixture
def runtime_dirs() -> Iterator[list[Path]]:
    made: list[Path] = []

    def make() -> Path:
        made.append(Path(tempfile.mkdtemp(dir="/tmp", prefix="l2h-")))
        return made[-1]

    yield [make(), make()]
    for where in made:
        shutil.rmtree(where, ignore_errors=True)


class Machine:
    """A `lambo serve` of SESSION as one machine runs it, spoken to in raw JSON-RPC lines,
    every answer awaited at most ANSWER_BOUND_S; its log in ``log``."""

    def __init__(self, home: Path, host: str, runtime: Path, env: dict[str, str]) -> None:
        self.host = host
        self.log = home / f"{host}.log"
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [*lambo_argv(), "serve", "--session", SESSION],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log_file,
            env={
                **serve_env(home),
                **env,
                "LAMBO_HOST": host,
                "XDG_RUNTIME_DIR": str(runtime),
            },
            cwd=home,
        )
        assert self.proc.stdout is not None
        self._fd = self.proc.stdout.fileno()
        self._buf = b""
        self._next = 0
        self.request("initialize", {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "two-hosts", "version": "1"},
        })  # fmt: skip
        self._send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def _line(self, until: float) -> bytes:
        while b"\n" not in self._buf:
            left = until - time.monotonic()
            assert left > 0, f"no answer in time; {self.host}'s log:\n{self.log.read_text()}"
            if select.select([self._fd], [], [], left)[0]:
                chunk = os.read(self._fd, 1 << 16)
                assert chunk, f"{self.host} closed its stdout; its log:\n{self.log.read_text()}"
                self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next += 1
        rid = self._next
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        until = time.monotonic() + ANSWER_BOUND_S
        while True:
            message = json.loads(self._line(until))
            if message.get("id") == rid:
                return dict(message)

    def call(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        reply = self.request("tools/call", {"name": tool, "arguments": arguments})
        return dict(reply["result"])

    def stats(self, **extra: Any) -> dict[str, Any]:
        return self.call("lambo_stats", {"agent_id": "agent-a", **extra})

    def derive(self, content: str) -> dict[str, Any]:
        return self.call(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [{"content": content, "concept_type": "logic"}]},
        )

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            os.kill(self.proc.pid, signal.SIGCONT)
        if self.proc.stdin is not None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log_file.close()


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def acked(result: dict[str, Any]) -> str:
    assert not result["isError"], result
    assert result["structuredContent"]["receipt_state"] == "pending", result
    return str(result["structuredContent"]["receipt"])


def assert_refused_naming(result: dict[str, Any], holder: Machine) -> None:
    """The refusal of a call on a session held on another host: names the holder and when
    this serve takes over."""
    assert result["isError"], result
    said = text(result)
    assert said.startswith(f"{OTHER_HOST} ({holder.host}), and a serve cannot forward"), said
    assert f"is held by lambo-serve@{holder.host}#{holder.pid} (agent lambo-serve" in said
    assert "nothing was read and nothing was written here" in said
    assert "this serve takes the session over once that lease expires, at " in said


def until_served(machine: Machine, gone: Machine) -> dict[str, Any]:
    """lambo_stats through ``machine`` until it serves the session itself, every refusal on
    the way naming ``gone`` as the holder; its stats."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        result = machine.stats()
        if not result["isError"]:
            return dict(result["structuredContent"])
        assert_refused_naming(result, gone)
        time.sleep(0.1)
    raise AssertionError(f"{machine.host} never took the session over")


def lease_of(backing: Backing) -> Lease:
    store = backing.open()
    try:
        lease = store.get_lease(SESSION)
    finally:
        store.close()
    assert lease is not None
    return lease


def report_takeover(what: str, old: Lease, new: Lease, stopped_at: float) -> None:
    """The measured takeover (not asserted): the lease passes once it expired, how soon."""
    assert new.token == old.token + 1 and new.acquired_at >= old.expires_at
    print(
        f"\ntakeover after {what}: lease acquired {new.acquired_at - stopped_at:.2f} s after "
        f"the {what}, {new.acquired_at - old.expires_at:.3f} s after the old lease expired "
        f"(lease_ttl_s = {LEASE_TTL_S:g})"
    )


def audited(audit: Path, pid: int) -> list[str]:
    path = audit / f"{pid}.log"
    return path.read_text().splitlines() if path.exists() else []


def wait_for_log(machine: Machine, needle: str) -> str:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        logged = machine.log.read_text()
        if needle in logged:
            return logged
        assert time.monotonic() < deadline, f"no {needle!r} in {machine.host}'s log:\n{logged}"
        time.sleep(0.05)


def assert_each_once(store: Store, contents: list[str], receipts: list[str]) -> None:
    """Every acked write present once in the store, applied; none left pending."""
    found = [c.content for c in store.concepts(SESSION)]
    assert sorted(found) == sorted(contents)
    for receipt in receipts:
        intent = store.get_intent(receipt)
        assert intent is not None and intent.state is IntentState.APPLIED, intent
    assert store.pending_intents(SESSION) == []


def _hooked(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """The environment that runs HOOK in a serve, and the directory it logs into."""
    audit = tmp_path / "audit"
    audit.mkdir()
    return {**sitecustomize(tmp_path / "site", HOOK), "LAMBO_E2E_AUDIT": str(audit)}, audit


def test_the_second_machine_refuses_naming_the_holder_then_takes_over_after_sigkill(
    home: Path, backing: Backing, tmp_path: Path, runtime_dirs: list[Path]
) -> None:
    gate = tmp_path / "apply-gate"
    hooked, _ = _hooked(tmp_path)
    hooked_a = {**hooked, "LAMBO_E2E_APPLY_GATE": str(gate)}
    machines: list[Machine] = []
    try:
        a = Machine(home, "machine-a", runtime_dirs[0], hooked_a)
        machines.append(a)
        first = a.stats()
        assert not first["isError"], first
        assert first["structuredContent"]["holder_pid"] == a.pid
        contents = [f"applied on machine-a number {n}" for n in range(3)]
        receipts = [acked(a.derive(c)) for c in contents]
        for receipt in receipts:
            done = a.stats(receipt=receipt, wait_ms=20_000)["structuredContent"]
            assert done["receipt"]["state"] == "applied", done

        b = Machine(home, "machine-b", runtime_dirs[1], {})
        machines.append(b)
        # (a) b refuses, naming a, reads and writes alike; nothing it was sent is written
        assert_refused_naming(b.stats(), a)
        assert_refused_naming(b.derive("sent to machine-b while machine-a holds"), a)

        # acked by a and still queued there when it dies
        gate.write_text("closed")
        queued = [f"queued on machine-a number {n}" for n in range(4)]
        queued_receipts = [acked(a.derive(c)) for c in queued]
        a.proc.send_signal(signal.SIGKILL)
        killed_at = time.time()
        a.proc.wait(30)
        old = lease_of(backing)  # a's last renewal

        # (b) b takes the session over once a's lease has expired, and replays a's intents
        took_over = until_served(b, a)
        assert took_over["holder_pid"] == b.pid
        report_takeover("SIGKILL", old, lease_of(backing), killed_at)
        for receipt in queued_receipts:
            done = b.stats(receipt=receipt, wait_ms=20_000)["structuredContent"]
            assert done["receipt"]["state"] == "applied_after_restart", done
    finally:
        for machine in machines:
            machine.stop()
    store = backing.open()
    try:
        assert_each_once(store, contents + queued, receipts + queued_receipts)
    finally:
        store.close()


def test_a_hub_paused_past_its_lease_writes_nothing_once_the_other_machine_took_over(
    home: Path, backing: Backing, tmp_path: Path, runtime_dirs: list[Path]
) -> None:
    gate = tmp_path / "apply-gate"
    hooked_b, audit = _hooked(tmp_path)
    hooked_a = {**hooked_b, "LAMBO_E2E_APPLY_GATE": str(gate)}
    machines: list[Machine] = []
    try:
        a = Machine(home, "machine-a", runtime_dirs[0], hooked_a)
        machines.append(a)
        assert a.stats()["structuredContent"]["holder_pid"] == a.pid
        b = Machine(home, "machine-b", runtime_dirs[1], hooked_b)
        machines.append(b)
        assert_refused_naming(b.stats(), a)

        gate.write_text("closed")  # a's applies wait: acked writes stay queued in it
        queued = [f"queued in the paused hub number {n}" for n in range(4)]
        receipts = [acked(a.derive(c)) for c in queued]
        os.kill(a.pid, signal.SIGSTOP)
        paused_at = time.time()
        commits_at_pause = len(audited(audit, a.pid))
        old = lease_of(backing)  # a's last renewal before the pause
        assert commits_at_pause > 0  # the hook sees its writes (the intents it acked)

        took_over = until_served(b, a)
        assert took_over["holder_pid"] == b.pid
        report_takeover("SIGSTOP", old, lease_of(backing), paused_at)
        for receipt in receipts:
            done = b.stats(receipt=receipt, wait_ms=20_000)["structuredContent"]
            assert done["receipt"]["state"] == "applied_after_restart", done
        later = "written on machine-b after the takeover"
        later_receipt = acked(b.derive(later))
        assert (
            b.stats(receipt=later_receipt, wait_ms=20_000)["structuredContent"]["receipt"]["state"]
            == "applied"
        )

        # resume a with its queued applies let go: each is refused by the fencing token
        gate.unlink()
        os.kill(a.pid, signal.SIGCONT)
        logged = wait_for_log(a, f"hub: session '{SESSION}' lost: ")
        assert "this serve stops writing" in logged
        # its own client hears the lease is lost, then who holds the session now
        deadline = time.monotonic() + DEADLINE_S
        while True:
            result = a.derive("sent to the resumed machine-a")
            assert result["isError"], result  # never acked
            if text(result) != LEASE_LOST_CALL_TEXT:
                assert_refused_naming(result, b)
                break
            assert time.monotonic() < deadline, "machine-a never named the new holder"
            time.sleep(0.1)
        assert_refused_naming(a.stats(), b)

        # zero writes of machine-a since its pause, and every acked write there once
        assert len(audited(audit, a.pid)) == commits_at_pause
        store = backing.open()
        try:
            assert_each_once(store, [*queued, later], [*receipts, later_receipt])
            lease = store.get_lease(SESSION)
            assert lease is not None and lease.holder == f"lambo-serve@machine-b#{b.pid}"
        finally:
            store.close()
    finally:
        for machine in machines:
            machine.stop()
