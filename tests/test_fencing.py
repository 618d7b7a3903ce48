"""Fencing: a writer whose lease passed to another commits nothing, stops, and says so.

Real SQLite files (and the RAM store), real threads, real Unix sockets; the embedder is
gated where a test must hold the apply worker inside a write while the lease moves.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.clock import ManualClock
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.forget import ForgetRequest
from lambo_core.hub import (
    LEASE_LOST_CALL_TEXT,
    Forwarder,
    HubGone,
    HubSilent,
    LeaseKeeper,
    call_timeout,
    fenced_handler,
)
from lambo_core.limits import WAIT_MS_MAX
from lambo_core.model import (
    CanonizationEvent,
    Concept,
    ConceptType,
    EdgeType,
    ForgetEvent,
    IntentState,
    Lease,
    Status,
    WriteBatch,
    WriteIntent,
)
from lambo_core.receipts import ReceiptState
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import MemoryStore, SqliteStore, open_store
from lambo_core.store.base import LEASE_LOST_TEXT, Fence, FencedOut, Store
from lambo_core.writes import WritePipeline
from tests.test_stop import DEADLINE_S, GatedEmbedder, derive, state

S = "s"


@pytest.fixture(params=["sqlite", "memory", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store
    if request.param == "postgres":
        made = open_store("postgres", None, request.getfixturevalue("pg_dsn"))
    else:
        made = SqliteStore(tmp_path / "f.db") if request.param == "sqlite" else MemoryStore()
    yield made
    made.close()


def lease(holder: str, now: float, ttl: float = 45.0) -> Lease:
    return Lease(S, holder, 1, "agent", now, now, now + ttl, 0)


def concept(node_id: str, now: float) -> Concept:
    return Concept(
        node_id, S, f"fact {node_id}", f"fact {node_id}", ConceptType.LOGIC, now, now, "agent"
    )


def test_every_write_of_a_fenced_out_writer_is_refused_and_changes_nothing(store: Store) -> None:
    clock = ManualClock(1000.0)
    old = LeaseKeeper(store, S, "old", clock, pid=11, host="h")
    assert old.try_acquire() is not None
    store.ensure_session(S, clock.now())
    store.apply(WriteBatch(session=S, concepts=[concept("a", clock.now())]))  # still ours
    store.add_intent(WriteIntent("r-kept", S, "agent", "lambo_derive", {"k": 1}, clock.now()))

    # Another holder takes the lease over once it has expired.
    clock.advance(46.0)
    new = LeaseKeeper(store, S, "new", clock, pid=12, host="h")
    taken = new.try_acquire()
    assert taken is not None and taken.token == 2
    # The old writer's view: its own fence, as it is in the old writer's process.
    lost: list[str] = []
    store.fence(S, Fence(1, clock.now, lost.append))

    writes: list[tuple[str, Any]] = [
        ("apply", lambda: store.apply(WriteBatch(session=S, concepts=[concept("b", 1.0)]))),
        ("add_access_counts", lambda: store.add_access_counts(S, {"a": 3})),
        (
            "add_intent",
            lambda: store.add_intent(WriteIntent("r-new", S, "agent", "lambo_derive", {}, 1.0)),
        ),
        ("settle_intent", lambda: store.settle_intent("r-kept", "applied", {}, 1.0)),
        ("set_status", lambda: store.set_status(S, "a", Status.CANDIDATE)),
        ("delete_concepts", lambda: store.delete_concepts(S, ["a"])),
        ("delete_edges", lambda: store.delete_edges(S, [("a", "a", EdgeType.COOCCURRENCE)])),
        ("bump_gc_survived", lambda: store.bump_gc_survived(S, ["a"])),
        (
            "add_canon_event",
            lambda: store.add_canon_event(
                CanonizationEvent(S, "a", Status.NONE, Status.CANDIDATE, None, 1.0)
            ),
        ),
        (
            "forget",
            lambda: store.forget(ForgetRequest(S, "op", 1.0, ("a",), ("x",), False, "r-kept")),
        ),
        (
            "add_forget_event",
            lambda: store.add_forget_event(
                ForgetEvent(S, "op", 1.0, ("a",), ("0",), 0, False, None)
            ),
        ),
        ("set_gc_clock", lambda: store.set_gc_clock(S, 1.0, 1)),
        ("stamp_contract", lambda: store.stamp_contract(S, {"kind": "x"})),
        ("ensure_session", lambda: store.ensure_session("s", 1.0)),
    ]
    for name, write in writes:
        with pytest.raises(FencedOut) as refused:
            write()
        assert refused.value.message == LEASE_LOST_TEXT, name
        assert "token is 2 now, not this writer's 1" in (refused.value.detail or ""), name
    assert len(lost) == len(writes)

    # Nothing changed: one concept, its counts and status as they were, the intent pending.
    [only] = list(store.concepts(S))
    assert (only.id, only.access_count, only.status, only.gc_survived) == ("a", 0, Status.NONE, 0)
    kept = store.get_intent("r-kept")
    assert kept is not None and kept.state is IntentState.PENDING
    assert store.get_intent("r-new") is None
    assert store.canon_events(S) == []
    assert store.forget_events(S) == []

    # The new holder writes as usual.
    store.fence(S, Fence(2, clock.now))
    store.settle_intent("r-kept", "applied", {}, clock.now())


def test_an_expired_lease_fences_its_own_holder_out(store: Store) -> None:
    clock = ManualClock(1000.0)
    keeper = LeaseKeeper(store, S, "a", clock, ttl=3.0, pid=11, host="h")
    assert keeper.try_acquire() is not None
    store.ensure_session(S, clock.now())
    clock.advance(3.5)  # paused past its lease: nobody took it, but it is no longer held
    with pytest.raises(FencedOut) as refused:
        store.add_access_counts(S, {"x": 1})
    assert "expired" in (refused.value.detail or "")
    assert keeper.lost.is_set() and keeper.lease is None


def test_a_fenced_out_write_in_a_worker_thread_sets_lost_on_the_loop(tmp_path: Path) -> None:
    async def scenario() -> None:
        store = SqliteStore(tmp_path / "t.db")
        keeper = LeaseKeeper(store, S, "a", pid=11, host="h")
        assert keeper.try_acquire() is not None
        await asyncio.to_thread(store.ensure_session, S, 1.0)
        store.release_lease(S, 1)  # as if another process expired it
        with pytest.raises(FencedOut):
            await asyncio.to_thread(store.add_access_counts, S, {"x": 1})
        async with asyncio.timeout(DEADLINE_S):
            await keeper.lost.wait()
        store.close()

    asyncio.run(scenario())


Opener = Callable[[], Store]


@pytest.fixture(params=["sqlite", "postgres"])
def reopen(request: pytest.FixtureRequest, tmp_path: Path) -> Opener:
    """Opens another store on one shared location, as another process would: a SQLite file
    or a PostgreSQL database."""
    if request.param == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        return lambda: open_store("postgres", None, dsn)
    path = tmp_path / "shared.db"
    return lambda: SqliteStore(path)


def _take_over(reopen: Opener) -> None:
    """Another process's takeover, as it reaches the store: the old lease expired, a new one."""
    other = reopen()
    try:
        current = other.get_lease(S)
        assert current is not None
        other.release_lease(S, current.token)
        assert other.acquire_lease(lease("other@h#99", 2e9, 45.0), 2e9 - 1) is not None
    finally:
        other.close()


def test_a_fenced_pipeline_refuses_new_writes_and_settles_what_it_holds(
    reopen: Opener, minilm: OnnxEmbedder
) -> None:
    gated = GatedEmbedder(minilm)
    store = reopen()
    keeper = LeaseKeeper(store, S, "old", pid=11, host="h")
    assert keeper.try_acquire() is not None
    p = WritePipeline(Session.open(store, S, EmbedderPlan.ready(gated))).start()
    receipts = [derive(p, f"fenced fact {i}") for i in range(5)]
    assert gated.entered.wait(DEADLINE_S)  # the worker is inside the first write
    _take_over(reopen)
    gated.gate.set()
    assert p._thread is not None
    p._thread.join(DEADLINE_S)
    assert not p._thread.is_alive() and p.fenced and keeper.lost.is_set()

    with pytest.raises(FencedOut) as refused:
        p.submit(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [{"content": "late", "concept_type": "logic"}]},
        )
    assert refused.value.render() == f"conflict: {LEASE_LOST_TEXT}"

    report = p.close(DEADLINE_S, lease_held=lambda: False)
    assert report.worker_stopped and not report.flushed
    assert (report.applied, report.deferred, report.unflushed) == (0, 0, 5)
    assert [state(p, r) for r in receipts] == [ReceiptState.CLOSE_UNFLUSHED] * 5
    store.close()

    # The new holder replays every one of them, once.
    fresh = reopen()
    owed = fresh.pending_intents(S)
    assert [i.receipt_id for i in owed] == receipts
    fresh.release_lease(S, 2)
    again = LeaseKeeper(fresh, S, "new", pid=12, host="h")
    assert again.try_acquire() is not None
    q = WritePipeline(Session.open(fresh, S, EmbedderPlan.ready(minilm))).start()
    assert q.wait_idle(DEADLINE_S)
    assert q.replayed == 5 and q.replay_owed == 0
    contents = sorted(c.content for c in fresh.concepts(S))
    assert contents == sorted(f"fenced fact {i}" for i in range(5))
    q.close(DEADLINE_S)
    fresh.close()


def test_a_replay_of_an_intent_settled_meanwhile_is_not_applied_twice(
    tmp_path: Path, minilm: OnnxEmbedder
) -> None:
    path = tmp_path / "r.db"
    store = SqliteStore(path)
    store.ensure_session(S, 1.0)
    for i in range(3):
        store.add_intent(
            WriteIntent(
                f"r{i}",
                S,
                "agent-a",
                "lambo_derive",
                {
                    "kind": "derive",
                    "concepts": [
                        {"content": f"owed fact {i}", "type": "logic", "against": [],
                         "depends_on": []}
                    ],
                    "parent_of": [],
                },
                1.0,
            )
        )  # fmt: skip
    gated = GatedEmbedder(minilm)
    p = WritePipeline(Session.open(store, S, EmbedderPlan.ready(gated))).start()
    assert gated.entered.wait(DEADLINE_S)  # queued all three; inside the first
    # An earlier holder settled the second applied before it let go (as the old code did).
    store.settle_intent("r1", "applied", {"detail": "applied earlier"}, 2.0)
    gated.gate.set()
    assert p.wait_idle(DEADLINE_S)
    assert p.replayed == 3 and p.replay_owed == 0 and p.failed == 0
    contents = sorted(c.content for c in store.concepts(S))
    assert contents == ["owed fact 0", "owed fact 2"]  # r1 was not applied again
    states = [store.get_intent(f"r{i}") for i in range(3)]
    assert [s.state for s in states if s is not None] == [IntentState.APPLIED] * 3
    p.close(DEADLINE_S)
    store.close()


# --------------------------------------------------------------------------- forwarding


def test_a_forwarded_call_waits_its_base_plus_its_own_wait_ms() -> None:
    assert call_timeout(None, {"wait_ms": 100}) is None
    assert call_timeout(2.0, {}) == 2.0
    assert call_timeout(2.0, {"wait_ms": 1500}) == 3.5
    assert call_timeout(2.0, {"wait_ms": 10**9}) == 2.0 + WAIT_MS_MAX / 1000
    for odd in (True, "5000", -3, None):
        assert call_timeout(2.0, {"wait_ms": odd}) == 2.0


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(dir="/tmp", prefix="lfz-"))
    try:
        yield where
    finally:
        shutil.rmtree(where, ignore_errors=True)


def test_a_hub_that_never_answers_gives_hub_gone_within_the_bound(sock_dir: Path) -> None:
    """A hub that accepts and reads but never answers (a paused process): every call on the
    connection gets HubGone once the bound has passed, and the connection is dropped."""
    path = sock_dir / "h.sock"
    drops: list[None] = []

    async def scenario() -> None:
        heard = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readline()
                heard.set()
                await reader.read()  # never answers
            finally:
                writer.close()  # the hub's end of the connection, left open it leaks

        server = await asyncio.start_unix_server(silent, path=str(path))
        forwarder = Forwarder(path, timeout_s=0.2, on_drop=lambda: drops.append(None))
        try:
            async with asyncio.timeout(DEADLINE_S):  # a failure bound, not the one tested
                with pytest.raises(HubGone) as gone:
                    await forwarder.call("lambo_stats", {"agent_id": "a"})
            assert heard.is_set()
            assert "did not answer lambo_stats within 0.2 s" in str(gone.value)
            # it read the call: unlike a hub that is gone, it may still act on it
            assert isinstance(gone.value, HubSilent) and gone.value.bound_s == 0.2
            assert not forwarder.connected and drops == [None]
        finally:
            await forwarder.close()
            server.close()
            await server.wait_closed()

    asyncio.run(scenario())


def test_a_hub_that_lost_its_lease_answers_hub_gone(store: Store) -> None:
    async def scenario() -> None:
        keeper = LeaseKeeper(store, S, "a", pid=11, host="h")
        assert keeper.try_acquire() is not None
        calls: list[str] = []

        async def handler(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            calls.append(tool)
            if tool == "lambo_derive":  # the write that finds the lease gone
                keeper._mark_lost("fenced")
                return {"content": [{"type": "text", "text": "conflict"}], "isError": True}
            return {"content": [], "isError": False}

        guarded = fenced_handler(handler, keeper)
        assert (await guarded("lambo_recall", {}))["isError"] is False
        gone = await guarded("lambo_derive", {})
        assert gone["isError"] and gone["content"][0]["text"] == LEASE_LOST_CALL_TEXT
        assert gone["content"][0]["text"].startswith("conflict: ")  # the spec's class
        again = await guarded("lambo_recall", {})  # not even asked: this serve is no hub
        assert again["content"][0]["text"] == LEASE_LOST_CALL_TEXT
        assert calls == ["lambo_recall", "lambo_derive"]

    asyncio.run(scenario())


def test_a_heartbeat_thread_and_a_fenced_write_race_without_harm(reopen: Opener) -> None:
    """Two threads writing under one fence after the takeover: both refused, lost set once."""
    store = reopen()
    keeper = LeaseKeeper(store, S, "a", pid=11, host="h")
    assert keeper.try_acquire() is not None
    store.ensure_session(S, 1.0)
    _take_over(reopen)
    refusals: list[BaseException] = []

    def write() -> None:
        try:
            store.add_access_counts(S, {"x": 1})
        except FencedOut as exc:
            refusals.append(exc)

    threads = [threading.Thread(target=write) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert len(refusals) == 2 and keeper.lost.is_set()
    store.close()


# --------------------------------------------------------------------------- the lease TTL


def test_the_lease_ttl_is_configured_and_bounds_the_shutdown_budget(tmp_path: Path) -> None:
    from lambo_core.config import load_config
    from lambo_core.errors import ConfigError
    from lambo_core.serve import lease_ttl, shutdown_budget

    def config(text: str) -> Any:
        (tmp_path / "lambo.toml").write_text(text)
        return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)

    short = config("[serve]\nlease_ttl_s = 3.0\nshutdown_budget_s = 2.0\n")
    assert lease_ttl(short) == 3.0 and shutdown_budget(short) == 2.0
    assert float(short.get("serve.forward_timeout_s")) == 30.0
    with pytest.raises(ConfigError) as refused:
        shutdown_budget(config("[serve]\nlease_ttl_s = 3.0\n"))  # the default budget, 15 s
    assert refused.value.message.startswith(
        "serve.shutdown_budget_s is 15 s; it must be at most 2 s (two thirds of the 3 s "
        "session lease, serve.lease_ttl_s)"
    )
