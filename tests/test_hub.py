"""The session hub: socket directory rules, the lease, forwarding, and takeover.

Real Unix sockets and a real SQLite store throughout; socket directories live
under short /tmp paths (``runtime``), never under the long pytest tmp_path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import lambo_core.hub.socket_dir as socket_dirs
from lambo_core.clock import ManualClock
from lambo_core.errors import ConfigError, ConflictError, ParameterError
from lambo_core.hub import (
    HUB_GONE_TEXT,
    MAX_LINE,
    Forwarder,
    HubGone,
    HubServer,
    LeaseKeeper,
    SessionHub,
    connect_to_hub,
    holder_dead_here,
    holder_description,
    http_refusal,
    hub_gone_result,
    socket_name,
)
from lambo_core.hub.answers import (
    HOLDER_STARTING_TEXT,
    HOLDER_UNREACHABLE_TEXT,
    tool_error,
    unavailable_result,
)
from lambo_core.hub.lease import LEASE_TTL, parse_holder, pid_running
from lambo_core.hub.socket_dir import (
    MAX_SOCKET_PATH,
    SOCKET_DIR_ADVICE,
    SocketDirRefused,
    SocketPathTooLong,
    check_socket_dir,
    hub_candidates,
    prepare_socket_dir,
    recorded_socket,
    socket_path,
)
from lambo_core.hub.wire import TOO_LARGE, Handler
from lambo_core.mcp.refusals import (
    BATCH_TEXT,
    INVALID_ID_TEXT,
    INVALID_PARAMS,
    INVALID_REQUEST,
    INVALID_REQUEST_TEXT,
    PARSE_ERROR,
    PARSE_ERROR_TEXT,
    TOO_DEEP_TEXT,
    UNKNOWN_TOOL,
    ProtocolRefusal,
)
from lambo_core.model import Lease
from lambo_core.paths import socket_dir
from lambo_core.store import SqliteStore

REPO = Path(__file__).resolve().parents[1]
HOST = socket.gethostname()


def run(main: Callable[[], Awaitable[Any]], timeout: float = 20.0) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(main(), timeout)

    return asyncio.run(bounded())


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short XDG_RUNTIME_DIR under /tmp (socket paths must stay under 104 bytes)."""
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="lh-"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(root))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "x.db"


@pytest.fixture
def store(db: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(db)
    s.ensure_session("s", 0.0)
    try:
        yield s
    finally:
        s.close()


def answer(**structured: Any) -> dict[str, Any]:
    return {
        "content": [{"type": "text", "text": json.dumps(structured)}],
        "structuredContent": structured,
        "isError": False,
    }


async def echo(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    await asyncio.sleep(float(arguments.get("sleep", 0)))
    return answer(tool=tool, arguments=arguments)


def named(name: str) -> Handler:
    async def handler(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return answer(who=name, tool=tool)

    return handler


def own_socket(runtime: Path, db: Path, session: str = "s") -> Path:
    return socket_path(prepare_socket_dir(runtime / "lambo"), session, db)


async def eventually(check: Callable[[], bool], within: float = 10.0) -> None:
    """Wait for ``check`` to hold (a bound for a stuck test, not a latency target)."""
    deadline = time.monotonic() + within
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


def role_of(serve: SessionHub) -> str:
    return serve.role


class CountingKeeper(LeaseKeeper):
    """A LeaseKeeper that counts its looks at the lease (one an election round at least)
    and its attempts to take it."""

    def __init__(self, store: SqliteStore, session: str, agent: str) -> None:
        super().__init__(store, session, agent)
        self._count_lock = threading.Lock()  # called from worker threads
        self._looks = 0
        self._acquisitions = 0

    @property
    def looks(self) -> int:
        with self._count_lock:
            return self._looks

    @property
    def acquisitions(self) -> int:
        with self._count_lock:
            return self._acquisitions

    def current(self) -> Lease | None:
        with self._count_lock:
            self._looks += 1
        return super().current()

    def try_acquire(self, *, take_dead: bool = True) -> Lease | None:
        with self._count_lock:
            self._acquisitions += 1
        return super().try_acquire(take_dead=take_dead)


# --------------------------------------------------------------------------- socket dir


def test_socket_dir_is_created_private_whatever_the_umask(runtime: Path) -> None:
    for umask in (0o022, 0o777):
        target = runtime / f"lambo-{umask:o}"
        old = os.umask(umask)
        try:
            made = prepare_socket_dir(target)
        finally:
            os.umask(old)
        st = os.lstat(made)
        assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
        assert st.st_uid == os.getuid()
        assert prepare_socket_dir(target) == target  # an existing good one is kept


def test_a_755_socket_dir_is_refused_for_binding_and_forwarding(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    loose = runtime / "lambo"
    loose.mkdir()
    loose.chmod(0o755)
    with pytest.raises(ConfigError) as refused:
        prepare_socket_dir(loose)
    text = refused.value.render()
    assert SOCKET_DIR_ADVICE in text and "mode 755" in text and str(loose) in text

    path = loose / socket_name("s", db)

    async def bind() -> None:
        await HubServer(echo, path).start()

    with pytest.raises(ConfigError, match="XDG_RUNTIME_DIR at one you own"):
        run(bind)
    assert not path.exists()

    # forwarding: a socket recorded there (or found there) is never a candidate
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    held = plant(store, f"other@{HOST}#{os.getpid()}", os.getpid(), time.time())
    assert store.record_lease_socket("s", held.token, str(path))
    lease = store.get_lease("s")
    assert recorded_socket(lease, "s", db) == (None, "has mode 755, not 700")
    assert hub_candidates("s", db, lease=lease) == []
    store.release_lease("s", held.token)
    freed = store.acquire_lease(Lease("s", "x@h#1", 1, "x", 0.0, 0.0, time.time() + 45, 0), 0.0)
    assert freed is not None and freed.socket is None
    assert hub_candidates("s", db, lease=freed) == []  # not looked for in the 755 directory


async def _never() -> Handler:
    raise AssertionError("must not become hub")


def test_a_socket_dir_owned_by_another_uid_is_refused(
    runtime: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = prepare_socket_dir(runtime / "lambo")
    monkeypatch.setattr(socket_dirs, "current_uid", lambda: os.getuid() + 1)
    with pytest.raises(ConfigError, match=r"owned by uid \d+, not by you") as refused:
        prepare_socket_dir(target)
    assert SOCKET_DIR_ADVICE in refused.value.message
    assert isinstance(refused.value, SocketDirRefused)
    assert refused.value.rule == "is not owned by you"  # for callers: no uid, no path


def test_a_symlinked_or_non_directory_socket_dir_is_refused(runtime: Path) -> None:
    real = prepare_socket_dir(runtime / "real")
    link = runtime / "lambo"
    link.symlink_to(real)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        prepare_socket_dir(link)
    plain = runtime / "file"
    plain.write_text("")
    with pytest.raises(ConfigError, match="is not a directory"):
        prepare_socket_dir(plain)


def test_socket_paths_over_104_bytes_are_refused(runtime: Path, db: Path) -> None:
    name_len = len(socket_name("s", db))
    fits = "/tmp/" + "a" * (MAX_SOCKET_PATH - 1 - name_len - 1 - len("/tmp/"))
    assert len(str(socket_path(fits, "s", db))) == MAX_SOCKET_PATH - 1
    for extra in (1, 40):
        with pytest.raises(SocketPathTooLong, match="104") as refused:
            socket_path(fits + "b" * extra, "s", db)
        assert isinstance(refused.value, ConfigError)

    async def bind() -> None:
        await HubServer(echo, Path(fits + "b" * 40) / "x.sock").start()

    with pytest.raises(SocketPathTooLong):
        run(bind)


def test_socket_name_derives_from_session_and_store_only(
    tmp_path: Path, db: Path, runtime: Path
) -> None:
    name = socket_name("s", db)
    assert name.startswith("lambo-") and name.endswith(".sock") and len(name) == 27
    # the same whatever the directory or how the store path is spelled
    assert socket_path(runtime, "s", db).name == socket_path("/tmp/x", "s", db).name == name
    assert socket_name("s", "x.db") == name  # relative to the cwd (tmp_path)
    (tmp_path / "alias.db").symlink_to(db)
    assert socket_name("s", tmp_path / "alias.db") == name
    # and different for another session or another store
    assert socket_name("t", db) != name
    assert socket_name("s", tmp_path / "y.db") != name


def test_a_serve_publishes_only_in_the_spec_two_dirs(runtime: Path) -> None:
    uid = os.getuid()
    assert socket_dir({"XDG_RUNTIME_DIR": str(runtime)}) == runtime / "lambo"
    assert socket_dir({}) == Path(f"/tmp/lambo-{uid}")
    assert socket_dir({"TMPDIR": str(runtime)}) == Path(f"/tmp/lambo-{uid}")
    assert socket_dir({"XDG_RUNTIME_DIR": ""}) == Path(f"/tmp/lambo-{uid}")


def _bind(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()


def test_the_socket_recorded_with_the_lease_is_used_whatever_the_environment(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    other = Path(tempfile.mkdtemp(dir="/tmp", prefix="lh-"))
    try:
        published = socket_path(prepare_socket_dir(other / "lambo"), "s", db)
        _bind(published)
        held = plant(store, f"holder@{HOST}#{os.getpid()}", os.getpid(), time.time())
        # nothing recorded yet: only this environment's own directory is looked in
        assert hub_candidates("s", db, lease=store.get_lease("s")) == []
        assert store.record_lease_socket("s", held.token, str(published))
        lease = store.get_lease("s")
        for env in ({"XDG_RUNTIME_DIR": str(runtime)}, {}, {"XDG_RUNTIME_DIR": str(other)}):
            assert hub_candidates("s", db, env, lease) == [published]
        assert recorded_socket(lease, "s", db) == (published, None)
        # a recorded socket of another name (another session or store) is refused
        assert recorded_socket(lease, "t", db) == (None, None)
        assert recorded_socket(lease, "s", other / "y.db") == (None, None)
        assert hub_candidates("t", db, lease=lease) == []
        # so is one in a directory reached through a symlink
        link = runtime / "via-link"
        link.symlink_to(other / "lambo")
        assert store.record_lease_socket("s", held.token, str(link / published.name))
        lease = store.get_lease("s")
        assert recorded_socket(lease, "s", db) == (None, "is a symbolic link")
        assert hub_candidates("s", db, lease=lease) == []
        # and a relative one
        assert store.record_lease_socket("s", held.token, published.name)
        assert hub_candidates("s", db, lease=store.get_lease("s")) == []
        # "" means the holder published nowhere: nothing is looked for
        assert store.record_lease_socket("s", held.token, "")
        own = socket_path(prepare_socket_dir(runtime / "lambo"), "s", db)
        _bind(own)
        assert hub_candidates("s", db, lease=store.get_lease("s")) == []
    finally:
        shutil.rmtree(other, ignore_errors=True)


# --------------------------------------------------------------------------- forwarding


def test_round_trip_with_concurrent_calls(runtime: Path, db: Path) -> None:
    path = own_socket(runtime, db)

    async def main() -> None:
        server = HubServer(echo, path)
        await server.start()
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        fwd = Forwarder(path)
        try:
            # later calls finish first: answers are matched by id, not by order
            calls = [fwd.call("t", {"n": n, "sleep": (20 - n) * 0.005}) for n in range(20)]
            results = await asyncio.gather(*calls)
            assert [r["structuredContent"]["arguments"]["n"] for r in results] == list(range(20))
            assert all(r["isError"] is False for r in results)
            uni = await fwd.call("t", {"text": "żółw 🐢\u200d"}, {"progressToken": 1})
            assert uni["structuredContent"]["arguments"]["text"] == "żółw 🐢\u200d"
            assert fwd.connected
        finally:
            await fwd.close()
            await server.close()
        assert not path.exists()

    run(main)


def test_handler_refusals_and_faults_come_back_as_error_results(runtime: Path, db: Path) -> None:
    path = own_socket(runtime, db)

    async def failing(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if tool == "refuse":
            raise ParameterError("top_k must be in 1..=100")
        raise RuntimeError("secret /var/lib/driver detail")

    async def main() -> None:
        server = HubServer(failing, path)
        await server.start()
        fwd = Forwarder(path)
        try:
            refused = await fwd.call("refuse", {})
            assert refused == {
                "content": [{"type": "text", "text": "top_k must be in 1..=100"}],
                "isError": True,
            }
            fault = await fwd.call("boom", {})
            assert fault["isError"] is True
            assert "internal error" in fault["content"][0]["text"]
            assert "secret" not in json.dumps(fault)
        finally:
            await fwd.close()
            await server.close()

    run(main)


def test_an_oversized_line_is_answered_and_the_connection_keeps_serving(
    runtime: Path, db: Path
) -> None:
    path = own_socket(runtime, db)
    padding = b"a" * (MAX_LINE + 10)

    async def main() -> None:
        server = HubServer(echo, path)
        await server.start()
        try:
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(b'{"id": 7, "tool": "t", "arguments": {"x": "' + padding + b'"}}\n')
            writer.write(b'{"id": 8, "tool": "t", "arguments": {}}\n')
            # the id read from the end of the line when it is not at the start
            writer.write(b'{"tool": "t", "arguments": {"x": "' + padding + b'"}, "id": 9}\n')
            # no readable id at either end: null
            writer.write(b'{"tool": "t", "arguments": {"x": "' + padding + b'"}}\n')
            writer.write(b"not json\n")
            writer.write(b'{"id": 10, "tool": 5}\n')
            writer.write(b'{"id": 13, "tool": "t", "arguments": ' + b"[" * 100_000 + b"\n")
            writer.write(b'{"id": 11, "tool": "t", "arguments": {"ok": true}}\n')
            await writer.drain()
            got = [json.loads(await reader.readline()) for _ in range(8)]
            too_large = {"code": INVALID_REQUEST, "message": TOO_LARGE}
            assert TOO_LARGE == "request too large (over 4 MiB)"  # stdio's text for -32600
            assert got[0] == {"id": 7, "error": too_large}
            assert got[1]["id"] == 8 and got[1]["result"]["isError"] is False
            assert got[2] == {"id": 9, "error": too_large}
            assert got[3] == {"id": None, "error": too_large}
            parse_error = {"code": PARSE_ERROR, "message": PARSE_ERROR_TEXT}
            invalid = {"code": INVALID_REQUEST, "message": INVALID_REQUEST_TEXT}
            assert got[4] == {"id": None, "error": parse_error}
            assert got[5] == {"id": 10, "error": invalid}
            too_deep = {"code": INVALID_REQUEST, "message": TOO_DEEP_TEXT}
            assert got[6] == {"id": 13, "error": too_deep}  # nested too deeply: its id
            assert got[7]["result"]["structuredContent"]["arguments"] == {"ok": True}
            # a line cut off by the end of input is not answered
            writer.write(b'{"id": 12, "tool": "t", "arguments": {"x": "' + padding)
            writer.write_eof()
            assert await reader.read() == b""
            writer.close()
        finally:
            await server.close()

    run(main)


def test_odd_ids_batches_and_lone_surrogates_on_the_hub_socket(runtime: Path, db: Path) -> None:
    path = own_socket(runtime, db)

    async def main() -> None:
        server = HubServer(echo, path)
        await server.start()
        fwd = Forwarder(path)
        try:
            reader, writer = await asyncio.open_unix_connection(str(path))
            for raw in (b"1.5", b"true", b"{}", b"[]", b"NaN"):
                writer.write(b'{"id": ' + raw + b', "tool": "t", "arguments": {}}\n')
            writer.write(b'[{"id": 1, "tool": "t", "arguments": {}}]\n')
            await writer.drain()
            got = [json.loads(await reader.readline()) for _ in range(6)]
            bad_id = {"code": INVALID_REQUEST, "message": INVALID_ID_TEXT}
            assert got[:5] == [{"id": None, "error": bad_id}] * 5
            assert got[5] == {"id": None, "error": {"code": INVALID_REQUEST, "message": BATCH_TEXT}}
            writer.close()
            # A lone surrogate (Python's JSON reads it) is forwarded, escaped, to the handler.
            ok = await fwd.call("t", {"q": "a\ud800b"})
            assert ok["structuredContent"]["arguments"] == {"q": "a\ud800b"}
        finally:
            await fwd.close()
            await server.close()

    run(main)


def test_the_forwarder_refuses_an_oversized_request_itself(runtime: Path, db: Path) -> None:
    path = own_socket(runtime, db)

    async def main() -> None:
        server = HubServer(echo, path)
        await server.start()
        fwd = Forwarder(path)
        try:
            with pytest.raises(ProtocolRefusal) as big:
                await fwd.call("t", {"x": "a" * MAX_LINE})
            assert (big.value.code, big.value.message) == (INVALID_REQUEST, TOO_LARGE)
            assert big.value.render() == TOO_LARGE  # what the CLI prints
            ok = await fwd.call("t", {"n": 1})
            assert ok["structuredContent"]["arguments"] == {"n": 1}
        finally:
            await fwd.close()
            await server.close()

    run(main)


def test_an_unknown_tool_is_refused_as_stdio_refuses_it(runtime: Path, db: Path) -> None:
    path = own_socket(runtime, db)
    ran: list[str] = []

    async def handler(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        ran.append(tool)
        return answer(tool=tool)

    async def main() -> None:
        server = HubServer(handler, path, tool_names=lambda: ["lambo_stats"])
        await server.start()
        fwd = Forwarder(path)
        try:
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(b'{"id": 3, "tool": "lambo_nope", "arguments": {}}\n')
            await writer.drain()
            refused = json.loads(await reader.readline())
            assert refused == {"id": 3, "error": {"code": INVALID_PARAMS, "message": UNKNOWN_TOOL}}
            writer.close()
            with pytest.raises(ProtocolRefusal) as unknown:
                await fwd.call("lambo_nope", {})
            assert (unknown.value.code, unknown.value.message) == (INVALID_PARAMS, UNKNOWN_TOOL)
            assert (await fwd.call("lambo_stats", {}))["structuredContent"] == {
                "tool": "lambo_stats"
            }
            assert ran == ["lambo_stats"]  # the handler never saw the unknown name
        finally:
            await fwd.close()
            await server.close()

    run(main)


def test_a_stale_socket_is_cleared_by_the_lease_holder(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    path = own_socket(runtime, db)
    left = socket.socket(socket.AF_UNIX)
    left.bind(str(path))
    left.close()  # a crashed holder's socket file: nobody listens
    assert stat.S_ISSOCK(os.lstat(path).st_mode)

    async def main() -> None:
        with pytest.raises(HubGone):
            await Forwarder(path).call("t", {})
        keeper = LeaseKeeper(store, "s", "serve")
        assert keeper.try_acquire() is not None
        server = HubServer(echo, path)
        await server.start()
        fwd = Forwarder(path)
        try:
            assert (await fwd.call("t", {"n": 1}))["isError"] is False
        finally:
            await fwd.close()
            # a successor's socket at the same name is not the old hub's to remove
            os.unlink(path)
            successor = socket.socket(socket.AF_UNIX)
            successor.bind(str(path))
            await server.close()
            assert stat.S_ISSOCK(os.lstat(path).st_mode)
            successor.close()
            keeper.release()

    run(main)


def test_a_file_that_is_not_a_socket_is_never_removed(runtime: Path, db: Path) -> None:
    path = own_socket(runtime, db)
    path.write_text("mine")

    async def main() -> None:
        await HubServer(echo, path).start()

    with pytest.raises(ConfigError, match="not a socket"):
        run(main)
    assert path.read_text() == "mine"


def test_hub_gone_mid_call_and_after_close_then_reconnect(runtime: Path, db: Path) -> None:
    path = own_socket(runtime, db)
    drops: list[int] = []

    async def main() -> None:
        server = HubServer(echo, path)
        await server.start()
        fwd = Forwarder(path, on_drop=lambda: drops.append(1))
        try:
            await fwd.call("t", {})
            slow = asyncio.create_task(fwd.call("t", {"sleep": 30}))
            await asyncio.sleep(0.1)
            await server.close()
            with pytest.raises(HubGone):
                await slow
            assert drops == [1]
            with pytest.raises(HubGone, match="no hub answered"):
                await fwd.call("t", {})  # the socket file is gone
            # a hub published again at the same address is reached on the next call
            server = HubServer(echo, path)
            await server.start()
            assert (await fwd.call("t", {"n": 2}))["structuredContent"]["arguments"] == {"n": 2}
        finally:
            await fwd.close()
            await server.close()

    run(main)


def test_hub_gone_text_says_nothing_happened_and_memory_returns() -> None:
    result = hub_gone_result()
    assert result["isError"] is True and result["content"][0]["text"] == HUB_GONE_TEXT
    assert "nothing was read and nothing was written" in HUB_GONE_TEXT
    assert "returns once a lambo serve holds the session again" in HUB_GONE_TEXT


# --------------------------------------------------------------------------- the lease


def plant(store: SqliteStore, holder: str, pid: int, now: float, ttl: float = 45.0) -> Lease:
    agent = holder.split("@")[0]
    lease = Lease("s", holder, pid, agent, now, now, now + ttl, 0)
    got = store.acquire_lease(lease, now)
    assert got is not None
    return got


def test_lease_contention_between_two_keepers(store: SqliteStore) -> None:
    clock = ManualClock()
    a = LeaseKeeper(store, "s", "agent-a", clock)
    b = LeaseKeeper(store, "s", "agent-b", clock)
    got = a.try_acquire()
    assert got is not None and got.token == 1
    assert got.holder == f"agent-a@{HOST}#{os.getpid()}" == a.holder
    assert got.expires_at == clock.now() + 45.0 and a.token == 1
    assert b.try_acquire() is None  # a live holder (this very process) is waited out
    clock.advance(30)
    assert b.try_acquire() is None
    a.release()
    current = store.get_lease("s")
    assert current is not None and current.expires_at == 0
    got_b = b.try_acquire()
    assert got_b is not None and got_b.token == 2 and got_b.holder == b.holder
    assert a.try_acquire() is None


def test_the_heartbeat_renews_the_lease(store: SqliteStore) -> None:
    clock = ManualClock()
    keeper = LeaseKeeper(store, "s", "serve", clock, heartbeat=0.01)
    assert keeper.try_acquire() is not None
    clock.advance(30)

    def renewed() -> bool:
        lease = store.get_lease("s")
        return lease is not None and lease.heartbeat_at == clock.now()

    async def main() -> None:
        task = asyncio.create_task(keeper.run())
        await eventually(renewed)
        lease = store.get_lease("s")
        assert lease is not None and lease.expires_at == clock.now() + 45.0 and lease.token == 1
        keeper.release()
        await asyncio.wait_for(task, 1.0)
        assert not keeper.lost.is_set()

    run(main)
    # an expired lease nobody took is still ours to renew
    assert keeper.try_acquire() is not None
    clock.advance(100)
    assert keeper.renew() is True


def test_lost_fires_when_another_keeper_takes_over_after_expiry(store: SqliteStore) -> None:
    clock = ManualClock()
    a = LeaseKeeper(store, "s", "agent-a", clock, heartbeat=0.01)
    b = LeaseKeeper(store, "s", "agent-b", clock)
    assert a.try_acquire() is not None
    clock.advance(46)  # a missed its heartbeats: the lease expired
    stolen = b.try_acquire()
    assert stolen is not None and stolen.token == 2

    async def main() -> None:
        task = asyncio.create_task(a.run())
        await asyncio.wait_for(a.lost.wait(), 2.0)
        await asyncio.wait_for(task, 1.0)

    run(main)
    assert a.lease is None and a.token is None
    a.release()  # a no-op: it must not free b's lease
    current = store.get_lease("s")
    assert current is not None and current.holder == b.holder and current.expires_at > clock.now()


def test_renew_refused_sets_lost_synchronously(store: SqliteStore) -> None:
    clock = ManualClock()
    a = LeaseKeeper(store, "s", "agent-a", clock)
    assert a.try_acquire() is not None
    clock.advance(46)
    assert LeaseKeeper(store, "s", "agent-b", clock).try_acquire() is not None
    assert a.renew() is False and a.lost.is_set()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_takeover_rule_dead_local_holder_is_taken_at_once(store: SqliteStore) -> None:
    clock = ManualClock()
    pid = _dead_pid()
    assert not pid_running(pid)
    old = plant(store, f"old@{HOST}#{pid}", pid, clock.now())
    assert holder_dead_here(old)
    keeper = LeaseKeeper(store, "s", "new", clock)
    assert keeper.try_acquire(take_dead=False) is None
    got = keeper.try_acquire()
    assert got is not None and got.holder == keeper.holder and got.token == old.token + 1


@pytest.mark.parametrize(
    "case", ["other-host", "live-pid", "malformed", "pid-mismatch", "own-pid", "expired-only"]
)
def test_takeover_rule_waits_out_everything_else(store: SqliteStore, case: str) -> None:
    clock = ManualClock()
    dead = _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder, pid = {
            "other-host": (f"old@elsewhere.example#{dead}", dead),
            "live-pid": (f"old@{HOST}#{live.pid}", live.pid),
            "malformed": ("old-without-host", dead),
            "pid-mismatch": (f"old@{HOST}#{dead}", live.pid),
            "own-pid": (f"old@{HOST}#{os.getpid()}", os.getpid()),
            "expired-only": (f"old@elsewhere.example#{dead}", dead),
        }[case]
        old = plant(store, holder, pid, clock.now())
        assert not holder_dead_here(old)
        keeper = LeaseKeeper(store, "s", "new", clock)
        assert keeper.try_acquire() is None
        clock.advance(45)  # expired: now anyone may take it
        got = keeper.try_acquire()
        assert got is not None and got.token == old.token + 1
    finally:
        live.kill()
        live.wait()


def test_a_zombie_holder_counts_as_dead() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        deadline = time.monotonic() + 5
        while True:  # wait for it to exit without reaping it (poll() would reap)
            state = Path(f"/proc/{proc.pid}/stat").read_bytes().rsplit(b")", 1)[1][1:2]
            if state == b"Z":
                break
            assert time.monotonic() < deadline
            time.sleep(0.01)
        os.kill(proc.pid, 0)  # the pid still exists...
        assert not pid_running(proc.pid)  # ...but no process runs under it
    finally:
        proc.wait()


def test_holder_parsing_and_description() -> None:
    assert parse_holder("lambo-serve@box.local#123") == ("lambo-serve", "box.local", 123)
    assert parse_holder("a@b@host#7") == ("a@b", "host", 7)
    assert parse_holder("no-pid@host") is None and parse_holder("nohost#5") is None
    lease = Lease("s", "lambo-serve@box#123", 123, "lambo-serve", 100.0, 110.0, 155.0, 3)
    text = holder_description(lease, now=115.0)
    assert "lambo-serve@box#123" in text and "pid 123" in text
    assert "5 s ago" in text and "expires in 40 s" in text
    refusal = http_refusal("proj", lease, now=115.0)
    assert isinstance(refusal, ConflictError)
    assert "'proj'" in refusal.render() and "lambo-serve@box#123" in refusal.render()


# --------------------------------------------------------------------------- the election


def test_forwarder_takes_over_after_the_hub_closes(runtime: Path, db: Path) -> None:
    s1, s2 = SqliteStore(db), SqliteStore(db)
    stopped: list[float] = []

    def becomes(name: str) -> Callable[[LeaseKeeper], Awaitable[Handler]]:
        async def on_become_hub(keeper: LeaseKeeper) -> Handler:
            assert keeper.token is not None
            return named(name)

        return on_become_hub

    async def on_stop_hub() -> None:
        # the serve flushes while it still holds the lease
        lease = s1.get_lease("s")
        assert lease is not None and lease.expires_at > time.time()
        stopped.append(lease.expires_at)

    async def main() -> None:
        one = SessionHub(s1, "s", db, "one", becomes("one"), on_stop_hub=on_stop_hub)
        keeper = CountingKeeper(s2, "s", "two")
        two = SessionHub(s2, "s", db, "two", becomes("two"), keeper=keeper)
        try:
            assert await one.start() == "hub"
            assert one.socket == socket_path(runtime / "lambo", "s", db)
            assert await two.start() == "forwarder" and two.socket == one.socket
            got = await two.call("lambo_recall", {"query": "q"})
            assert got["structuredContent"] == {"who": "one", "tool": "lambo_recall"}
            assert (await one.call("t", {}))["structuredContent"]["who"] == "one"
            await one.close()
            assert stopped
            # the forwarder noticed the drop, but takes the freed lease only when a call
            # needs it (a client leaving now must not wait for a session to open)
            await eventually(lambda: two.role == "electing")
            looked = keeper.looks
            await eventually(lambda: keeper.looks >= looked + 3)  # several election rounds
            assert two.role == "electing"
            assert keeper.acquisitions == 1  # the start's: no round tried to take the lease
            freed = s2.get_lease("s")
            assert freed is not None and freed.holder == one.keeper.holder
            assert freed.expires_at <= time.time()
            # the next call takes it over and is answered by the new hub
            assert (await two.call("t", {}))["structuredContent"]["who"] == "two"
            assert role_of(two) == "hub"  # read anew: the call changed it
            lease = s2.get_lease("s")
            assert lease is not None and lease.holder == two.keeper.holder and lease.token == 2
        finally:
            await one.close()
            await two.close()
        lease = s2.get_lease("s")
        assert lease is not None and lease.expires_at == 0
        assert not (runtime / "lambo" / socket_name("s", db)).exists()

    try:
        run(main)
    finally:
        s1.close()
        s2.close()


HOLDER = r"""
import asyncio, sys
from pathlib import Path
from lambo_core.hub import HubServer, LeaseKeeper
from lambo_core.store import SqliteStore

db, session, sock = sys.argv[1:4]
keeper = LeaseKeeper(SqliteStore(Path(db)), session, "old-hub")
assert keeper.try_acquire() is not None

async def handler(tool, arguments):
    if tool == "slow":
        print("slow", flush=True)  # the call reached the hub
        await asyncio.sleep(60)
    return {"content": [], "structuredContent": {"who": "old"}, "isError": False}

async def main():
    server = HubServer(handler, Path(sock))
    await server.start()
    keeper.record_socket(sock)
    print("ready", flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def test_a_killed_hub_is_taken_over_before_its_lease_expires(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    """The new serve's clock stands still, so the old lease never expires for it: the
    takeover can only come from the rule for a dead local holder (its latency is
    tests/bench/takeover.py's)."""
    sock = own_socket(runtime, db)
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime))
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), "s", str(sock)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    became: list[int | None] = []

    async def on_become_hub(keeper: LeaseKeeper) -> Handler:
        became.append(keeper.token)
        return named("new")

    async def main() -> None:
        assert proc.stdout is not None
        assert (await asyncio.to_thread(proc.stdout.readline)).strip() == "ready"
        old = store.get_lease("s")
        assert old is not None and old.pid == proc.pid and old.holder.startswith("old-hub@")
        frozen = ManualClock(time.time())
        serve = SessionHub(store, "s", db, "forwarder", on_become_hub, clock=frozen)
        try:
            assert await serve.start() == "forwarder"
            assert (await serve.call("t", {}))["structuredContent"] == {"who": "old"}
            slow = asyncio.create_task(serve.call("slow", {}))
            assert (await asyncio.to_thread(proc.stdout.readline)).strip() == "slow"
            os.kill(proc.pid, signal.SIGKILL)
            # the call in flight gets the clear error
            assert await slow == hub_gone_result()
            # and memory returns: the dead local holder's lease is taken at once
            await eventually(lambda: serve.role == "hub")
            assert old.expires_at > frozen.now()  # not by expiry
            lease = store.get_lease("s")
            assert lease is not None and lease.holder == serve.keeper.holder
            assert lease.token == old.token + 1 and became == [lease.token]
            assert serve.socket == sock and stat.S_ISSOCK(os.lstat(sock).st_mode)
            assert (await serve.call("t", {}))["structuredContent"]["who"] == "new"
            # another serve reaches the new hub at the same address
            fwd = Forwarder(sock)
            assert (await fwd.call("t", {}))["structuredContent"]["who"] == "new"
            await fwd.close()
        finally:
            await serve.close()

    try:
        run(main)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    assert not sock.exists()


def test_a_call_that_found_no_hub_is_still_owed_when_a_dying_hub_drops_a_reconnect(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    """A hub that dies can still accept a connection on its way out: the election settles
    as a forwarder to it, which then drops. The call that found no hub still wants memory,
    so the next election takes the lease as soon as it comes free, with no new call."""
    sock = own_socket(runtime, db)
    clock = ManualClock(time.time())
    # a live process of this host (not this one): its lease is waited out, not taken at once
    old = LeaseKeeper(store, "s", "old-hub", clock, pid=os.getppid())
    assert old.try_acquire() is not None
    calls = 0

    async def dying(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # the first connection reads the call and dies unanswered; later ones are dropped
        nonlocal calls
        calls += 1
        if calls == 1:
            await reader.readline()
        writer.close()

    became: list[int | None] = []

    async def on_become_hub(keeper: LeaseKeeper) -> Handler:
        became.append(keeper.token)
        return named("new")

    async def main() -> None:
        server = await asyncio.start_unix_server(dying, path=os.fspath(sock))
        serve = SessionHub(store, "s", db, "forwarder", on_become_hub, clock=clock)
        try:
            assert await serve.start() == "forwarder"
            assert await serve.call("t", {}) == hub_gone_result()
            await eventually(lambda: calls >= 3)  # reconnected to the dying hub, dropped again
            clock.advance(LEASE_TTL + 1)  # the old lease comes free; nobody calls
            await eventually(lambda: serve.role == "hub")
            assert became == [store.get_lease("s").token]  # type: ignore[union-attr]
        finally:
            await serve.close()
            server.close()

    run(main)


def test_a_hub_that_loses_its_lease_stops_and_forwards_to_the_new_holder(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    clock = ManualClock()
    stops: list[int] = []

    async def on_become_hub(keeper: LeaseKeeper) -> Handler:
        return named("first")

    async def on_stop_hub() -> None:
        stops.append(1)

    async def main() -> None:
        first = SessionHub(
            store,
            "s",
            db,
            "first",
            on_become_hub,
            on_stop_hub=on_stop_hub,
            clock=clock,
            heartbeat=0.02,
            settle_wait=0.1,
        )
        thief_server: HubServer | None = None
        try:
            assert await first.start() == "hub"
            clock.advance(46)  # its heartbeats stalled past the TTL ...
            thief = LeaseKeeper(store, "s", "thief", clock)
            assert thief.try_acquire() is not None  # ... and another serve took over
            await eventually(lambda: first.role == "electing")
            assert stops == [1] and first.keeper.lost.is_set()
            # no hub answers yet: the call gets the clear error, nothing is written here
            starting = tool_error(HOLDER_STARTING_TEXT.format(pid=os.getpid()))
            assert await first.call("t", {}) == starting
            thief_server = HubServer(named("thief"), own_socket(runtime, db))
            await thief_server.start()
            await eventually(lambda: first.role == "forwarder")
            assert (await first.call("t", {}))["structuredContent"]["who"] == "thief"
        finally:
            await first.close()
            if thief_server is not None:
                await thief_server.close()
        current = store.get_lease("s")
        assert current is not None and current.agent == "thief" and current.expires_at > 0

    run(main)


def test_a_serve_whose_socket_path_is_too_long_publishes_in_a_private_directory(
    db: Path, store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="lh-"))
    try:
        deep = root / ("d" * 100)
        deep.mkdir()
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))

        async def on_become_hub(keeper: LeaseKeeper) -> Handler:
            return named("alone")

        async def main() -> Path:
            serve = SessionHub(store, "s", db, "serve", on_become_hub)
            try:
                assert await serve.start() == "hub"
                assert serve.publish_problem is None
                assert serve.socket is not None
                private = serve.socket.parent
                assert private.parent == Path("/tmp") and check_socket_dir(private)
                lease = store.get_lease("s")
                assert lease is not None and lease.socket == str(serve.socket)
                assert (await serve.call("t", {}))["structuredContent"]["who"] == "alone"
                return private
            finally:
                await serve.close()

        private = run(main)
        assert list((deep / "lambo").iterdir()) == []
        assert not private.exists()  # removed with the serve
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_serve_started_before_the_holder_published_forwards_once_it_does(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    holder = LeaseKeeper(store, "s", "loading-hub")
    assert holder.try_acquire() is not None  # holds the lease, still loading: no socket yet

    async def main() -> None:
        assert await connect_to_hub("s", db) is None
        serve = SessionHub(store, "s", db, "later", lambda _k: _never(), settle_wait=0.05)
        server = HubServer(named("loaded"), own_socket(runtime, db))
        try:
            assert await serve.start() == "electing"
            # the holder lives and has published nothing yet: it is still opening the session
            assert await serve.call("t", {}) == tool_error(
                HOLDER_STARTING_TEXT.format(pid=os.getpid())
            )
            await server.start()
            await eventually(lambda: serve.role == "forwarder")
            assert (await serve.call("t", {}))["structuredContent"]["who"] == "loaded"
            cli = await connect_to_hub("s", db)
            assert cli is not None and cli.path == serve.socket
            assert (await cli.call("t", {}))["structuredContent"]["who"] == "loaded"
            await cli.close()
        finally:
            await serve.close()
            await server.close()
            holder.release()

    run(main)


def _spawn_holder(runtime: Path, db: Path, sock: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_RUNTIME_DIR=str(runtime))
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db), "s", str(sock)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )


def _reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def test_a_forwarder_whose_hub_died_closes_at_once_without_taking_over(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    """No call asks for memory after the hub died: the forwarder neither takes the lease
    nor opens the session, so closing it (its client left) does not wait on either."""
    sock = own_socket(runtime, db)
    proc = _spawn_holder(runtime, db, sock)
    became: list[int | None] = []

    async def on_become_hub(keeper: LeaseKeeper) -> Handler:
        became.append(keeper.token)
        return named("new")

    async def main() -> None:
        assert proc.stdout is not None
        assert (await asyncio.to_thread(proc.stdout.readline)).strip() == "ready"
        keeper = CountingKeeper(store, "s", "forwarder")
        serve = SessionHub(store, "s", db, "forwarder", on_become_hub, keeper=keeper)
        assert await serve.start() == "forwarder"
        os.kill(proc.pid, signal.SIGKILL)
        await eventually(lambda: serve.role == "electing")
        looked = keeper.looks
        await eventually(lambda: keeper.looks >= looked + 3)  # several election rounds
        assert serve.role == "electing" and became == []
        assert keeper.acquisitions == 1  # the start's: no round tried to take the lease
        await serve.close()
        assert became == [] and keeper.acquisitions == 1

    try:
        run(main)
        lease = store.get_lease("s")
        assert lease is not None and lease.pid == proc.pid  # still the dead holder's
    finally:
        _reap(proc)


def test_closing_during_a_takeover_stops_what_the_takeover_opened(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    """A call started the takeover and the client left while the hub's service was
    opening (in a worker thread): close waits for it and stops it, never abandons it."""
    sock = own_socket(runtime, db)
    proc = _spawn_holder(runtime, db, sock)
    opened: list[str] = []
    stopped: list[str] = []
    opening = threading.Event()
    may_finish = threading.Event()

    def open_slowly() -> None:
        opening.set()
        assert may_finish.wait(10.0), "the test never let the opening finish"
        opened.append("service")

    async def on_become_hub(keeper: LeaseKeeper) -> Handler:
        await asyncio.to_thread(open_slowly)
        return named("new")

    async def on_stop_hub() -> None:
        stopped.append("service")

    async def main() -> None:
        assert proc.stdout is not None
        assert (await asyncio.to_thread(proc.stdout.readline)).strip() == "ready"
        serve = SessionHub(
            store, "s", db, "forwarder", on_become_hub, on_stop_hub=on_stop_hub, settle_wait=0.1
        )
        assert await serve.start() == "forwarder"
        os.kill(proc.pid, signal.SIGKILL)
        await eventually(lambda: serve.role == "electing")
        # the call asks for the session: the takeover starts, the call gets the clear error
        assert await serve.call("t", {}) == hub_gone_result()
        await eventually(opening.is_set)
        closing = asyncio.create_task(serve.close())
        await eventually(lambda: serve.role == "closed")  # close has begun, mid-opening
        may_finish.set()
        await closing
        # close waited for the opening and stopped it: an abandoned one is never stopped
        assert opened == ["service"] and stopped == ["service"]
        assert serve.role == "closed"

    try:
        run(main)
        lease = store.get_lease("s")
        assert lease is not None and lease.pid == os.getpid()  # taken over, then released
        assert lease.expires_at <= time.time()
        assert not sock.exists()
    finally:
        _reap(proc)


# --------------------------------------------------------------------------- finding the holder


def _short_dir() -> Path:
    return Path(tempfile.mkdtemp(dir="/tmp", prefix="lh-"))


def test_a_holder_is_found_through_its_lease_from_any_environment(runtime: Path, db: Path) -> None:
    """The holder under one XDG_RUNTIME_DIR, a serve under another and one with none."""
    other = _short_dir()
    stores = [SqliteStore(db) for _ in range(3)]

    async def main() -> None:
        holder = SessionHub(
            stores[0], "s", db, "holder", lambda _k: _handler("holder"),
            env={"XDG_RUNTIME_DIR": str(runtime)},
        )  # fmt: skip
        elsewhere = SessionHub(
            stores[1], "s", db, "b", lambda _k: _never(), env={"XDG_RUNTIME_DIR": str(other)}
        )
        unset = SessionHub(stores[2], "s", db, "c", lambda _k: _never(), env={})
        try:
            assert await holder.start() == "hub"
            published = runtime / "lambo" / socket_name("s", db)
            assert holder.socket == published
            lease = stores[0].get_lease("s")
            assert lease is not None and lease.socket == str(published)
            for serve in (elsewhere, unset):
                assert await serve.start() == "forwarder"
                assert serve.socket == published
                got = await serve.call("lambo_stats", {})
                assert got["structuredContent"] == {"who": "holder", "tool": "lambo_stats"}
            # neither published anything of its own
            assert not (other / "lambo" / socket_name("s", db)).exists()
            # a one-shot caller (the CLI) finds it from the store file too, in any environment
            for env in ({}, {"XDG_RUNTIME_DIR": str(other)}):
                cli = await connect_to_hub("s", db, env)
                assert cli is not None and cli.path == published
                assert (await cli.call("t", {}))["structuredContent"]["who"] == "holder"
                await cli.close()
        finally:
            for serve in (unset, elsewhere, holder):
                await serve.close()

    try:
        run(main)
    finally:
        for opened in stores:
            opened.close()
        shutil.rmtree(other, ignore_errors=True)


async def _handler(name: str) -> Handler:
    return named(name)


@pytest.fixture
def good_dir() -> Iterator[Path]:
    """A socket directory's parent in a second environment, one nobody squatted."""
    good = _short_dir()
    try:
        yield good
    finally:
        shutil.rmtree(good, ignore_errors=True)


@contextlib.asynccontextmanager
async def three_serves(
    db: Path, good: Path
) -> AsyncIterator[tuple[SessionHub, SessionHub, SessionHub]]:
    """A holder answering "alone", a serve in its environment, one under ``good``: each
    on a store handle of its own; all closed (serves, then stores) on leaving."""
    stores = [SqliteStore(db) for _ in range(3)]
    holder = SessionHub(stores[0], "s", db, "holder", lambda _k: _handler("alone"))
    same_env = SessionHub(stores[1], "s", db, "two", lambda _k: _never(), settle_wait=0.05)
    good_env = SessionHub(
        stores[2], "s", db, "three", lambda _k: _never(),
        env={"XDG_RUNTIME_DIR": str(good)}, settle_wait=0.05,
    )  # fmt: skip
    try:
        yield holder, same_env, good_env
    finally:
        for serve in (good_env, same_env, holder):
            await serve.close()
        for opened in stores:
            opened.close()


@pytest.mark.parametrize("squat", ["mode 755", "another owner", "a symlink"])
def test_a_squatted_socket_dir_costs_no_client_its_memory(
    runtime: Path, db: Path, good_dir: Path, caplog: pytest.LogCaptureFixture, squat: str
) -> None:
    """Another account made (or loosened) this user's socket directory: the holder
    publishes in a private directory of its own, and serves in either environment
    forward to it through the lease."""
    loose = runtime / "lambo"
    if squat == "a symlink":
        target = _short_dir()
        loose.symlink_to(target)
    else:
        loose.mkdir()
        loose.chmod(0o755 if squat == "mode 755" else 0o700)
        if squat == "another owner":
            if os.getuid() != 0:
                pytest.skip("making a directory another account owns needs root")
            os.chown(loose, 65534, 65534)

    async def main() -> None:
        async with three_serves(db, good_dir) as (holder, same_env, good_env):
            with caplog.at_level("WARNING", logger="lambo.hub"):
                assert await holder.start() == "hub"
            assert (await holder.call("t", {}))["structuredContent"]["who"] == "alone"
            assert holder.socket is not None and holder.socket.parent != loose
            assert holder.publish_problem is None
            assert any("private directory of its own" in r.getMessage() for r in caplog.records)
            if squat != "a symlink":
                assert list(loose.iterdir()) == []  # nothing of ours in their directory
            lease = holder.keeper.current()
            assert lease is not None and lease.socket == str(holder.socket)
            for forwarder in (same_env, good_env):
                assert await forwarder.start() == "forwarder"
                assert (await forwarder.call("t", {}))["structuredContent"]["who"] == "alone"

    run(main)


def test_a_holder_that_can_publish_nowhere_serves_its_client_and_others_hear_the_fix(
    runtime: Path,
    db: Path,
    good_dir: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loose = runtime / "lambo"
    loose.mkdir()
    loose.chmod(0o755)

    def no_private_dir(*args: Any, **kwargs: Any) -> str:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("lambo_core.hub.election.tempfile.mkdtemp", no_private_dir)

    async def main() -> None:
        async with three_serves(db, good_dir) as (holder, same_env, good_env):
            with caplog.at_level("WARNING", logger="lambo.hub"):
                assert await holder.start() == "hub"
            # memory for its own client, nothing published, the reason logged
            assert (await holder.call("t", {}))["structuredContent"]["who"] == "alone"
            assert holder.socket is None and list(loose.iterdir()) == []
            assert holder.publish_problem is not None and "mode 755" in holder.publish_problem
            assert any("publishes nothing" in r.getMessage() for r in caplog.records)
            lease = holder.keeper.current()
            assert lease is not None and lease.socket == ""
            # a serve in the same environment: the holder's state, and the fix
            assert await same_env.start() == "electing"
            text = (await same_env.call("t", {}))["content"][0]["text"]
            assert text == (
                HOLDER_UNREACHABLE_TEXT.format(pid=os.getpid())
                + " This serve's socket directory has mode 755, not 700: "
                + SOCKET_DIR_ADVICE
                + "."
            )
            assert str(runtime) not in text and "taking it over" not in text
            # a serve whose own directory is fine: the holder cannot be reached, no dir advice
            assert await good_env.start() == "electing"
            text = (await good_env.call("t", {}))["content"][0]["text"]
            assert text == HOLDER_UNREACHABLE_TEXT.format(pid=os.getpid())

    run(main)


def test_an_alive_holder_whose_socket_was_deleted_is_said_to_be_alive(
    runtime: Path, db: Path, store: SqliteStore
) -> None:
    sock = own_socket(runtime, db)
    proc = _spawn_holder(runtime, db, sock)

    async def main() -> None:
        assert proc.stdout is not None
        assert (await asyncio.to_thread(proc.stdout.readline)).strip() == "ready"
        lease = store.get_lease("s")
        assert lease is not None and lease.socket == str(sock)
        connected = SessionHub(store, "s", db, "early", lambda _k: _never())
        late = SessionHub(store, "s", db, "late", lambda _k: _never(), settle_wait=0.05)
        try:
            assert await connected.start() == "forwarder"
            os.unlink(sock)  # the spec: the holder is now unreachable to other clients
            assert await late.start() == "electing"
            result = await late.call("t", {})
            assert result == tool_error(HOLDER_UNREACHABLE_TEXT.format(pid=proc.pid))
            assert "taking it over" not in result["content"][0]["text"]
            assert "Restart that serve, or stop it" in result["content"][0]["text"]
            # no data at risk: the open connection still reaches the holder
            assert (await connected.call("t", {}))["structuredContent"] == {"who": "old"}
            current = store.get_lease("s")
            assert current is not None and current.pid == proc.pid  # nothing taken over
        finally:
            await late.close()
            await connected.close()

    try:
        run(main)
    finally:
        _reap(proc)


def test_a_holder_whose_socket_path_is_too_long_is_found_in_its_private_directory(
    db: Path, runtime: Path
) -> None:
    root = _short_dir()
    stores = [SqliteStore(db) for _ in range(2)]
    try:
        deep = root / ("d" * 100)
        deep.mkdir()

        async def main() -> None:
            holder = SessionHub(
                stores[0], "s", db, "holder", lambda _k: _handler("alone"),
                env={"XDG_RUNTIME_DIR": str(deep)},
            )  # fmt: skip
            other = SessionHub(stores[1], "s", db, "two", lambda _k: _never(), settle_wait=0.05)
            try:
                assert await holder.start() == "hub" and holder.socket is not None
                lease = stores[0].get_lease("s")
                assert lease is not None and lease.socket == str(holder.socket)
                assert await other.start() == "forwarder"
                assert (await other.call("t", {}))["structuredContent"]["who"] == "alone"
            finally:
                await other.close()
                await holder.close()

        run(main)
    finally:
        for opened in stores:
            opened.close()
        shutil.rmtree(root, ignore_errors=True)


def test_the_unavailable_text_follows_the_lease(runtime: Path, db: Path) -> None:
    now = 1000.0
    me = f"me@{HOST}#{os.getpid()}"

    def held(holder: str, pid: int, socket: str | None, expires: float = now + 45) -> Lease:
        return Lease("s", holder, pid, "a", now, now, expires, 3, socket)

    def text(lease: Lease | None, dir_rule: str | None = None) -> str:
        got = unavailable_result(lease, "s", db, own_holder=me, now=now, dir_rule=dir_rule)
        assert got["isError"] is True
        return str(got["content"][0]["text"])

    live = f"other@{HOST}#{os.getpid()}"
    dead = _dead_pid()
    assert text(None) == HUB_GONE_TEXT
    assert text(held(live, os.getpid(), "/x", expires=now)) == HUB_GONE_TEXT  # expired
    assert text(held(me, os.getpid(), None)) == HUB_GONE_TEXT  # this serve is taking over
    assert text(held(f"old@{HOST}#{dead}", dead, "/x")) == HUB_GONE_TEXT  # a dead holder
    alive = os.getpid()
    assert text(held(live, alive, None)) == HOLDER_STARTING_TEXT.format(pid=alive)
    assert text(held(live, alive, "")) == HOLDER_UNREACHABLE_TEXT.format(pid=alive)
    assert text(
        held(
            live,
            alive,
            "",
        ),
        "is a symbolic link",
    ) == (
        HOLDER_UNREACHABLE_TEXT.format(pid=alive)
        + f" This serve's socket directory is a symbolic link: {SOCKET_DIR_ADVICE}."
    )
    loose = runtime / "loose"
    loose.mkdir()
    loose.chmod(0o750)
    recorded = str(loose / socket_name("s", db))
    assert text(held(live, alive, recorded), "is a symbolic link") == (
        HOLDER_UNREACHABLE_TEXT.format(pid=alive)
        + f" Its socket directory has mode 750, not 700: {SOCKET_DIR_ADVICE}."
    )
    fine = prepare_socket_dir(runtime / "fine")
    assert text(held(live, alive, str(fine / socket_name("s", db)))) == (
        HOLDER_UNREACHABLE_TEXT.format(pid=alive)
    )
