"""A session held on another host (issue #18, item 3): its hub's Unix socket is that
machine's, so a serve never forwards to it; calls are refused naming the holder and when
its lease expires, and the serve takes the session over once it has.

Two "machines" in one process: each ``SessionHub`` gets a ``LeaseKeeper`` naming its own
host and a socket directory of its own, on one real SQLite file. A ``ManualClock`` moves
the leases past their expiry without sleeping.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core import client
from lambo_core.clock import ManualClock, SystemClock
from lambo_core.config import load_config
from lambo_core.errors import ConfigError, ConflictError
from lambo_core.hub import LeaseKeeper, SessionHub, this_host
from lambo_core.hub.answers import answered_by_hub
from lambo_core.hub.lease import LEASE_TTL, held_on_another_host, on_another_host
from lambo_core.hub.socket_dir import hub_candidates, socket_name, store_identity
from lambo_core.hub.wire import Handler
from lambo_core.model import Lease
from lambo_core.serve import Serve, ServeOptions
from lambo_core.store import SqliteStore, store_location
from lambo_core.text import format_rfc3339

S = "s"
OPENING = "conflict: the session is held on another host"


def run(main: Callable[[], Awaitable[Any]], timeout: float = 60.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(main(), timeout)

    return asyncio.run(bounded())


def _short_dir() -> Path:
    return Path(tempfile.mkdtemp(dir="/tmp", prefix="lhh-"))


@pytest.fixture
def machines() -> Iterator[tuple[Path, Path]]:
    """Two socket directories (XDG_RUNTIME_DIR), one per "machine"."""
    a, b = _short_dir(), _short_dir()
    try:
        yield a, b
    finally:
        shutil.rmtree(a, ignore_errors=True)
        shutil.rmtree(b, ignore_errors=True)


def named(name: str) -> Callable[[LeaseKeeper], Awaitable[Handler]]:
    async def on_become_hub(keeper: LeaseKeeper) -> Handler:
        async def handler(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            return {"content": [], "structuredContent": {"who": name}, "isError": False}

        return handler

    return on_become_hub


async def eventually(check: Callable[[], bool], within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "not within the deadline"
        await asyncio.sleep(0.02)


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


# --------------------------------------------------------------------------- LAMBO_HOST


def test_lambo_host_names_this_machine_in_the_holder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("LAMBO_HOST", raising=False)
    assert this_host() == socket.gethostname()
    monkeypatch.setenv("LAMBO_HOST", "build-box-2.example")
    assert this_host() == "build-box-2.example"
    store = SqliteStore(tmp_path / "h.db")
    try:
        keeper = LeaseKeeper(store, S, "agent")
        assert keeper.holder == f"agent@build-box-2.example#{os.getpid()}"
        got = keeper.try_acquire()
        assert got is not None and got.holder == keeper.holder
        assert not on_another_host(got)
        monkeypatch.setenv("LAMBO_HOST", "")  # empty: the system's name
        assert this_host() == socket.gethostname()
        assert on_another_host(got)
    finally:
        store.close()


@pytest.mark.parametrize("value", ["a@b", "a#1", "two words", "tab\there", "bell\x07", "x" * 254])
def test_a_lambo_host_that_would_not_parse_back_is_refused_naming_the_rule(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    monkeypatch.setenv("LAMBO_HOST", value)
    with pytest.raises(ConfigError) as refused:
        this_host()
    message = refused.value.message
    assert message.startswith("LAMBO_HOST must be a host name of at most 253 printable")
    assert value not in message  # the rule, not the raw value


# --------------------------------------------------------------------------- the election


def test_a_holder_on_another_host_is_refused_naming_it_then_taken_over_on_expiry(
    machines: tuple[Path, Path], tmp_path: Path
) -> None:
    db = tmp_path / "shared.db"
    runtime_a, runtime_b = machines
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    clock = ManualClock(time.time())

    async def main() -> None:
        keeper_a = LeaseKeeper(store_a, S, "agent-a", clock, host="machine-a")
        keeper_b = LeaseKeeper(store_b, S, "agent-b", clock, host="machine-b")
        a = SessionHub(
            store_a, S, db, "agent-a", named("a"), keeper=keeper_a,
            env={"XDG_RUNTIME_DIR": str(runtime_a)}, settle_wait=0.2,
        )  # fmt: skip
        b = SessionHub(
            store_b, S, db, "agent-b", named("b"), keeper=keeper_b,
            env={"XDG_RUNTIME_DIR": str(runtime_b)}, settle_wait=0.2,
        )  # fmt: skip
        try:
            assert await a.start() == "hub"
            held = store_a.get_lease(S)
            assert held is not None and held.socket == str(a.socket)
            # b could reach that socket on this one box: it must not, it is machine-a's
            assert hub_candidates(S, db, {}, held, host="machine-a") == [a.socket]
            assert hub_candidates(S, db, {}, held, host="machine-b") == []
            assert await b.start() == "electing"

            refused = await b.call("lambo_stats", {})
            assert refused["isError"]
            said = text(refused)
            assert said.startswith(f"{OPENING} (machine-a), and a serve cannot forward"), said
            assert "nothing was read and nothing was written here" in said
            assert f"held by agent-a@machine-a#{os.getpid()} (agent agent-a" in said
            assert (
                "this serve takes the session over once that lease expires, at "
                f"{format_rfc3339(held.expires_at)} unless its holder renews it"
            ) in said
            assert answered_by_hub(refused) == "unavailable"  # no tool ran
            assert b.role == "electing"

            # machine-a stops renewing (paused, cut off): once its lease expires, b holds
            clock.advance(LEASE_TTL + 1)
            await eventually(lambda: b.role == "hub")
            taken = store_b.get_lease(S)
            assert taken is not None and taken.token == held.token + 1
            assert taken.holder == f"agent-b@machine-b#{os.getpid()}"
            assert (await b.call("lambo_stats", {}))["structuredContent"] == {"who": "b"}

            # machine-a's next heartbeat finds the lease gone; it stops and cannot forward
            assert not keeper_a.renew()
            await eventually(lambda: a.role == "electing")
            back = await a.call("lambo_stats", {})
            assert text(back).startswith(f"{OPENING} (machine-b)")
            assert f"held by agent-b@machine-b#{os.getpid()}" in text(back)
        finally:
            await b.close()
            await a.close()

    try:
        run(main)
    finally:
        store_a.close()
        store_b.close()


def test_a_holder_on_this_host_under_another_runtime_dir_is_still_forwarded_to(
    machines: tuple[Path, Path], tmp_path: Path
) -> None:
    """Only the host decides: two environments of one host forward as before."""
    db = tmp_path / "shared.db"
    runtime_a, runtime_b = machines
    store_a, store_b = SqliteStore(db), SqliteStore(db)

    async def main() -> None:
        a = SessionHub(
            store_a, S, db, "agent-a", named("a"), env={"XDG_RUNTIME_DIR": str(runtime_a)}
        )
        b = SessionHub(
            store_b, S, db, "agent-b", named("b"), env={"XDG_RUNTIME_DIR": str(runtime_b)}
        )
        try:
            assert await a.start() == "hub"
            assert await b.start() == "forwarder"
            assert (await b.call("lambo_stats", {}))["structuredContent"] == {"who": "a"}
        finally:
            await b.close()
            await a.close()

    try:
        run(main)
    finally:
        store_a.close()
        store_b.close()


# --------------------------------------------------------------------------- commands, HTTP


def _config(tmp_path: Path, ttl: float = 45.0) -> Any:
    (tmp_path / "lambo.toml").write_text(
        f'[store]\npath = "{tmp_path / "c.db"}"\n[embedder]\nkind = "none"\n'
        f"[serve]\nlease_ttl_s = {ttl}\nshutdown_budget_s = {ttl / 2}\n"
    )
    return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)


def _plant(path: Path, expires_in: float) -> tuple[SqliteStore, Lease]:
    """A live lease of a holder on machine-a (this process's pid: alive wherever looked at)."""
    store = SqliteStore(path)
    now = SystemClock().now()
    holder = f"other@machine-a#{os.getpid()}"
    got = store.acquire_lease(
        Lease(S, holder, os.getpid(), "other", now, now, now + expires_in, 0), now
    )
    assert got is not None
    assert store.record_lease_socket(S, got.token, "/tmp/lambo-machine-a/lambo-x.sock")
    return store, got


def test_a_command_on_a_session_held_on_another_host_is_refused_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client, "HUB_START_WAIT_S", 600.0)  # a wait would fail the run's bound
    config = _config(tmp_path)
    holder, lease = _plant(config.store_path, 3600)

    async def call() -> None:
        async with client.open_client(config, S, "shell") as call:
            await call("lambo_stats", {"agent_id": "shell"})

    try:
        assert held_on_another_host(lease, SystemClock().now())
        with pytest.raises(ConflictError) as refused:
            run(call)
    finally:
        holder.close()
    said = refused.value.render()
    assert said.startswith(f"{OPENING} (machine-a), and a command cannot forward"), said
    assert f"session '{S}' is held by other@machine-a#{os.getpid()}" in said
    assert said.endswith(
        f"run it on that host, or again once that lease expires (at "
        f"{format_rfc3339(lease.expires_at)} unless its holder renews it)"
    )


def test_an_http_serve_of_a_session_held_on_another_host_starts_and_takes_it_on_expiry(
    tmp_path: Path, machines: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(machines[1]))
    config = _config(tmp_path, ttl=3.0)
    holder, lease = _plant(config.store_path, 2.0)

    async def main() -> None:
        serve = Serve(config, ServeOptions(S))
        try:
            await serve.hold()  # not refused: no serve of this host writes the session
            assert serve.hub.role == "electing"
            refused = await serve("lambo_stats", {"agent_id": "a"})
            assert refused["isError"]
            assert text(refused).startswith(f"{OPENING} (machine-a)")
            assert f"held by other@machine-a#{os.getpid()}" in text(refused)
            await eventually(lambda: serve.serving)
            stats = await serve("lambo_stats", {"agent_id": "a"})
            assert not stats["isError"], stats
            assert stats["structuredContent"]["holder_pid"] == os.getpid()
            now = store_lease(holder)
            assert now.token == lease.token + 1 and now.holder.endswith(
                f"@{this_host()}#{os.getpid()}"
            )
        finally:
            await serve.close()

    try:
        run(main)
    finally:
        holder.close()


def store_lease(store: SqliteStore) -> Lease:
    got = store.get_lease(S)
    assert got is not None
    return got


def test_a_database_servers_location_names_its_socket_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    location = "postgresql://lambo@db.example:5432/memory"
    assert store_identity(location) == location  # no file: never resolved against the cwd
    name = socket_name(S, location)
    monkeypatch.chdir("/")
    assert socket_name(S, location) == name
    assert socket_name(S, "postgresql://lambo@db.example:5432/other") != name
    assert store_identity("x.db") == "/x.db"  # a relative SQLite path still resolves


def test_a_command_on_a_postgres_store_names_it_without_its_password(
    tmp_path: Path, pg_dsn: str
) -> None:
    """The wiring: a one-shot read on a database server's store refuses a session it does
    not have, naming the store by its location; the DSN's password appears nowhere."""
    secret = "s3cret-pw"
    with_password = pg_dsn.replace("postgres:@", f"postgres:{secret}@", 1)
    assert secret in with_password
    (tmp_path / "lambo.toml").write_text(
        f'[store]\nkind = "postgres"\ndsn = "{with_password}"\n[embedder]\nkind = "none"\n'
    )
    config = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)

    async def read() -> None:
        async with client.open_client(config, "absent", "shell", creates=False) as call:
            await call("lambo_stats", {"agent_id": "shell"})

    with pytest.raises(client.NotRun) as refused:
        run(read)
    said = refused.value.render()
    assert said.startswith(f"no session named 'absent' in the store {store_location(config)};")
    assert secret not in said and secret not in store_location(config)
