"""PostgreSQL-only store rules: migrations, DSN secrecy, fencing under a real concurrent
takeover, the keyword leg's ranking, and the refusals of a server kind with no DSN.

The contract every store keeps runs in tests/test_store.py (parametrized over all kinds);
this is what only a database server has. A real PostgreSQL (tests/pg_server.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pytest

from lambo_core.config import Config, Setting, load_config, render_show
from lambo_core.errors import ConfigError, StoreError
from lambo_core.model import Concept, ConceptType, Lease, WriteBatch, new_id
from lambo_core.store import open_config_store, open_store, provision_store, store_location
from lambo_core.store.base import Fence, FencedOut
from lambo_core.store.postgres import connection, schema
from lambo_core.store.postgres.connection import READ_FAILED, UNREACHABLE, register_vector
from lambo_core.store.postgres.dsn import dsn_identity, looks_like_dsn, mask_dsn, scrub
from lambo_core.store.postgres.store import PostgresStore
from lambo_core.store.rows import WRITE_REFUSED

S = "sess"
T0 = 1_700_000_000.0
DEADLINE_S = 30.0
SECRET = "hunter2-Secret"


@pytest.fixture
def store(pg_dsn: str) -> Iterator[PostgresStore]:
    opened = PostgresStore(pg_dsn)
    opened.ensure_session(S, T0)
    yield opened
    opened.close()


def concept(content: str, *, vector: Any = None) -> Concept:
    return Concept(new_id(), S, content, content, ConceptType.ENTITY, T0, T0, "agent-a",
                   vector=vector)  # fmt: skip


def lease(holder: str, expires_at: float) -> Lease:
    return Lease(S, holder, 7, holder.split("@")[0], T0, T0, expires_at, 0)


# -- migrations ----------------------------------------------------------------------------


def test_migrations_are_recorded_and_run_once(pg_dsn: str) -> None:
    first = PostgresStore(pg_dsn)
    assert first.migrations_applied == [m.version for m in schema.MIGRATIONS]
    assert first.schema_version() == schema.LATEST_VERSION
    assert first.migrate() == []
    first.close()
    second = PostgresStore(pg_dsn)
    assert second.migrations_applied == []
    second.close()
    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute("SELECT version, description FROM schema_migrations").fetchall()
        index = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'concepts_tsv'"
        ).fetchone()
    assert rows == [(m.version, m.description) for m in schema.MIGRATIONS]
    assert index is not None and "gin (tsv)" in index[0]


def test_racing_migrators_apply_each_version_once(pg_dsn: str) -> None:
    results: list[Any] = [None] * 4
    barrier = threading.Barrier(len(results))

    def open_one(n: int) -> None:
        barrier.wait()
        try:
            opened = PostgresStore(pg_dsn)
            results[n] = opened.migrations_applied
            opened.close()
        except Exception as exc:  # reported below
            results[n] = exc

    threads = [threading.Thread(target=open_one, args=(n,)) for n in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    assert all(isinstance(r, list) for r in results), results
    applied = sorted(version for r in results for version in r)
    assert applied == [m.version for m in schema.MIGRATIONS], results


def test_a_newer_schema_is_refused(pg_dsn: str) -> None:
    PostgresStore(pg_dsn).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("INSERT INTO schema_migrations VALUES (99, 'from the future', 0)")
    with pytest.raises(StoreError) as refused:
        PostgresStore(pg_dsn)
    assert "newer lambo (schema 99" in refused.value.message


def test_a_server_without_the_extension_is_refused_with_what_to_do(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        with pytest.raises(StoreError) as refused:
            schema.require_extension(conn, "no_such_extension")
        schema.require_extension(conn, "vector")  # installed: nothing to say
    assert "has no 'no_such_extension' extension" in refused.value.message
    assert "install pgvector on the server" in refused.value.message


# -- DSNs and their secrets ------------------------------------------------------------------


def test_dsn_masking_and_identity() -> None:
    uri = f"postgresql://lambo:{SECRET}@db.example:5433/memory?sslmode=require"
    assert mask_dsn(uri) == "postgresql://lambo:***@db.example:5433/memory?sslmode=require"
    assert (
        mask_dsn(f"postgres://u@h/d?password={SECRET}&x=1") == "postgres://u@h/d?password=***&x=1"
    )
    assert mask_dsn(f"host=h password={SECRET} dbname=d") == "host=h password=*** dbname=d"
    assert mask_dsn(f"host=h password='{SECRET} x' dbname=d") == "host=h password=*** dbname=d"
    assert (
        mask_dsn("postgresql://postgres:@/t?host=/tmp/x") == "postgresql://postgres:@/t?host=/tmp/x"
    )
    assert dsn_identity(uri) == "postgresql://lambo@db.example:5433/memory"
    assert dsn_identity(f"host=h port=5 user=u password={SECRET} dbname=d") == (
        "postgresql://u@h:5/d"
    )
    assert dsn_identity("postgresql://postgres:@/t_1?host=/tmp/pg") == (
        "postgresql://postgres@/tmp/pg:5432/t_1"
    )
    for dsn in (uri, "POSTGRES://h/d", "host=localhost dbname=x", "dbname=x"):
        assert looks_like_dsn(dsn), dsn
    for path in ("/var/lib/lambo.db", "lambo.db", "a=b.db", "./x=y/lambo.db", "memory", ""):
        assert not looks_like_dsn(path), path


def _secret_dsn(pg_dsn: str, database: str) -> str:
    base, _, query = pg_dsn.partition("?")
    head = base.rpartition("/")[0].replace("postgres:@", f"postgres:{SECRET}@")
    return f"{head}/{database}?{query}"


def test_a_dsn_password_never_reaches_a_message_or_detail(pg_dsn: str) -> None:
    for bad in (
        _secret_dsn(pg_dsn, "no_such_database"),
        f"postgresql://lambo:{SECRET}@127.0.0.1:1/x",  # nothing listens on port 1
        f"host=127.0.0.1 port=1 password={SECRET} connect_timeout=2",
    ):
        with pytest.raises(StoreError) as refused:
            PostgresStore(bad)
        assert refused.value.message == (
            "the PostgreSQL store could not be reached; the detail was logged"
        )
        assert refused.value.detail  # the driver's reason, for the log
        assert SECRET not in refused.value.render() + (refused.value.detail or "")


def test_config_show_masks_the_dsn_password(tmp_path: Path) -> None:
    env = {
        "LAMBO_HOME": str(tmp_path),
        "LAMBO_STORE": "postgres",
        "LAMBO_POSTGRES_DSN": f"postgresql://lambo:{SECRET}@db.example/memory",
    }
    config = load_config(env=env, cwd=tmp_path)
    assert config.store_dsn == env["LAMBO_POSTGRES_DSN"]
    shown = render_show(config)
    assert SECRET not in shown
    assert 'dsn = "postgresql://lambo:***@db.example/memory"  # env LAMBO_POSTGRES_DSN' in shown
    assert "# store dsn:   postgresql://lambo:***@db.example/memory" in shown
    assert store_location(config) == "postgresql://lambo@db.example:5432/memory"
    roach = load_config(
        env={"LAMBO_HOME": str(tmp_path), "LAMBO_STORE": "cockroach",
             "LAMBO_COCKROACH_DSN": f"host=r password={SECRET}"},
        cwd=tmp_path,
    )  # fmt: skip
    assert roach.store_dsn == f"host=r password={SECRET}"
    assert roach.source("store.dsn") == "env LAMBO_COCKROACH_DSN"
    assert SECRET not in render_show(roach)
    with pytest.raises(ConfigError) as both:
        load_config(env={**env, "LAMBO_COCKROACH_DSN": "host=other"}, cwd=tmp_path)
    assert "LAMBO_POSTGRES_DSN and LAMBO_COCKROACH_DSN are both set" in both.value.message
    assert SECRET not in both.value.render()


@pytest.mark.parametrize(("kind", "variable"), [("postgres", "LAMBO_POSTGRES_DSN"),
                                                ("cockroach", "LAMBO_COCKROACH_DSN")])  # fmt: skip
def test_a_server_kind_with_no_dsn_is_refused(kind: str, variable: str, tmp_path: Path) -> None:
    config = load_config(env={"LAMBO_HOME": str(tmp_path), "LAMBO_STORE": kind}, cwd=tmp_path)
    assert config.store_dsn == ""
    for attempt in (
        lambda: open_store(kind, None),
        lambda: open_store(kind, tmp_path / "x.db", ""),
        lambda: open_config_store(config),
        lambda: store_location(config),
        lambda: provision_store(config),
    ):
        with pytest.raises(ConfigError) as refused:
            attempt()
        assert refused.value.message == (
            f"store kind {kind} needs a DSN: set store.dsn in lambo.toml or {variable}"
        )


def test_open_config_store_and_provision_use_the_dsn(pg_dsn: str, tmp_path: Path) -> None:
    config = Config(
        settings={"store.kind": Setting("postgres", "env"), "store.dsn": Setting(pg_dsn, "env")},
        file=None,
    )
    first = provision_store(config)
    assert first == (
        f"store {dsn_identity(pg_dsn)}: schema version {schema.LATEST_VERSION} "
        f"(applied migrations {', '.join(str(m.version) for m in schema.MIGRATIONS)})"
    )
    assert provision_store(config).endswith("already current")
    opened = open_config_store(config)
    assert opened.kind == "postgres" and opened.vector_in_store is True
    opened.close()


# -- fencing under a real concurrent takeover --------------------------------------------------


def _waiting_on_a_lock(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock'"
        ).fetchone()
    return row is not None and row[0] > 0


def test_a_takeover_waits_for_an_open_write_and_then_fences_it_out(pg_dsn: str) -> None:
    """The old holder's write is inside its transaction (fence checked) when the lease
    expires and another host takes over: the takeover waits for the commit, and from then
    on every write of the old holder is refused."""
    old = PostgresStore(pg_dsn)
    new = PostgresStore(pg_dsn)  # another process (another machine)
    clock = [T0]
    held = old.acquire_lease(lease("old@host-a#1", T0 + 45), T0)
    assert held is not None
    old.ensure_session(S, T0)
    lost: list[str] = []
    old.fence(S, Fence(held.token, lambda: clock[0], lost.append))

    inside, release = threading.Event(), threading.Event()
    kept = concept("written while the lease was still held")

    def slow_write(cur: Any) -> None:
        cur.execute("SELECT 1")
        inside.set()
        assert release.wait(DEADLINE_S)
        old._apply(cur, WriteBatch(session=S, concepts=[kept]))

    writer = threading.Thread(target=lambda: old._db.write(S, slow_write))
    writer.start()
    assert inside.wait(DEADLINE_S)
    taken: list[Lease | None] = []
    taker = threading.Thread(
        target=lambda: taken.append(new.acquire_lease(lease("new@host-b#2", T0 + 100), T0 + 50))
    )
    taker.start()
    deadline = time.monotonic() + DEADLINE_S
    while not _waiting_on_a_lock(pg_dsn):  # the takeover blocks on the share-locked row
        assert time.monotonic() < deadline, "the takeover never waited for the write"
        time.sleep(0.02)
    assert taker.is_alive() and not taken
    release.set()
    writer.join(DEADLINE_S)
    taker.join(DEADLINE_S)
    assert taken and taken[0] is not None and taken[0].token == held.token + 1
    assert new.get_concept(S, kept.id) is not None  # committed before the takeover

    clock[0] = T0 + 50  # the old holder, resumed: its lease is gone
    late = concept("written after the takeover")
    with pytest.raises(FencedOut):
        old.apply(WriteBatch(session=S, concepts=[late]))
    assert new.get_concept(S, late.id) is None
    assert lost and f"token is {held.token + 1} now" in lost[0]
    old.close()
    new.close()


def test_a_holder_paused_inside_a_transaction_does_not_block_a_takeover_for_ever(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A holder stopped mid-transaction (its fence check share-locked the lease row) is
    ended by the server after IDLE_IN_TRANSACTION_S: the takeover then goes through, and
    what the paused transaction wrote is rolled back."""
    monkeypatch.setattr(connection, "IDLE_IN_TRANSACTION_S", 1)
    old = PostgresStore(pg_dsn)
    new = PostgresStore(pg_dsn)
    held = old.acquire_lease(lease("old@host-a#1", T0 + 45), T0)
    assert held is not None
    old.ensure_session(S, T0)
    old.fence(S, Fence(held.token, lambda: T0))
    lost = concept("written by a transaction that never commits")
    paused = old._db.pool.getconn()
    try:
        paused.execute("BEGIN")
        paused.execute("SELECT token FROM leases WHERE session = %s FOR SHARE", (S,))
        paused.execute(
            "INSERT INTO interactions (session, id, agent_id, kind, created_at, about_time, "
            "summary) VALUES (%s, %s, 'a', 'derive', 0, 0, %s)",
            (S, lost.id, lost.content),
        )
        # the paused holder: nothing more is sent on this connection
        got: list[Lease | None] = []
        taker = threading.Thread(
            target=lambda: got.append(new.acquire_lease(lease("new@host-b#2", T0 + 100), T0 + 50)),
            daemon=True,
        )
        taker.start()
        taker.join(DEADLINE_S)
        assert got, "the takeover still waits on the paused holder's lock"
        taken = got[0]
        assert taken is not None and taken.token == held.token + 1
        assert [i.id for i in new.interactions(S)] == []
    finally:
        old._db.pool.putconn(paused)
    old.close()
    new.close()


def test_lease_acquisition_is_atomic_across_stores(pg_dsn: str) -> None:
    stores = [PostgresStore(pg_dsn) for _ in range(4)]
    barrier = threading.Barrier(len(stores))
    results: list[Lease | None] = [None] * len(stores)

    def race(n: int) -> None:
        barrier.wait()
        results[n] = stores[n].acquire_lease(lease(f"a{n}@host-{n}#{n}", T0 + 45), T0)

    threads = [threading.Thread(target=race, args=(n,)) for n in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE_S)
    winners = [r for r in results if r is not None]
    assert len(winners) == 1 and winners[0].token == 1
    assert stores[0].get_lease(S) == winners[0]
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT host FROM leases WHERE session = %s", (S,)).fetchone()
    assert row is not None and row[0] == winners[0].holder.split("@")[1].split("#")[0]
    for opened in stores:
        opened.close()


# -- the keyword leg -------------------------------------------------------------------------


def test_keyword_ranking_prefers_every_word_and_exact_words(store: PostgresStore) -> None:
    both = concept("lease heartbeat")
    one = concept("lease renewal")
    longer = concept("lease renewal is what a serve does every few seconds to keep it")
    partial = concept("leaseholder heartbeats")  # neither word exactly
    store.apply(WriteBatch(session=S, concepts=[both, one, longer, partial]))
    hits = store.keyword_index(S).search("lease heartbeat", 10)
    assert [n for n, _ in hits] == [both.id, one.id, longer.id]
    assert hits[0][1] > hits[1][1] > hits[2][1] > 0
    assert store.keyword_index(S).search("lea", 10) == []  # no prefix matching, as FTS5
    assert store.keyword_index(S).search("'lease' & !heartbeat", 10)[0][0] == both.id


def test_vectors_travel_as_text_too(pg_dsn: str) -> None:
    """The text form (what the cockroach dialect uses) round-trips float32 exactly."""
    rng = np.random.default_rng(3)
    raw = rng.standard_normal(64).astype(np.float32)
    raw[0] = np.float32(-0.0)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        register_vector(conn, binary=False)
        (back,) = conn.execute("SELECT %s::vector", (raw,)).fetchone() or (None,)
    assert isinstance(back, np.ndarray) and back.dtype == np.float32
    assert back.tobytes() == raw.tobytes()


def test_a_closed_store_refuses_with_a_store_error(pg_dsn: str) -> None:
    opened = PostgresStore(pg_dsn)
    opened.ensure_session(S, T0)
    opened.close()
    opened.close()  # idempotent
    for call in (
        lambda: opened.get_session(S),
        lambda: opened.ensure_session("x", T0),
        lambda: list(opened.concepts(S)),
        lambda: opened.keyword_index(S).search("lease", 5),
    ):
        with pytest.raises(StoreError) as refused:
            call()
        assert refused.value.message in (READ_FAILED, UNREACHABLE, WRITE_REFUSED)


# -- DSNs as libpq reads them --------------------------------------------------------------


def test_a_uri_password_is_masked_where_libpq_ends_it() -> None:
    # libpq's userinfo runs to the first '@' (or '/'): '#' and '?' belong to the password
    for password in ("pw#x", "pw?x", "a#b?c"):
        uri = f"postgresql://alice:{password}@db/lambo"
        assert mask_dsn(uri) == "postgresql://alice:***@db/lambo", uri
        assert dsn_identity(uri) == "postgresql://alice@db:5432/lambo", uri
    assert dsn_identity("postgresql://alice:pw#x@db/other") != dsn_identity(
        "postgresql://alice:pw#x@db/lambo"
    )
    # a '/' ends libpq's userinfo: the rest is host:port, never shown as a password
    assert "S3c" not in mask_dsn("postgresql://alice:S3c/:x@db/lambo")
    assert scrub(f"failed: postgresql://alice:{SECRET}#x@db/lambo", "") == (
        "failed: postgresql://alice:***@db/lambo"
    )
    assert scrub(f"see mysql://root:{SECRET}@h/x and postgresql+psycopg://a:{SECRET}@h", "") == (
        "see mysql://root:***@h/x and postgresql+psycopg://a:***@h"
    )


def test_spellings_of_one_database_share_an_identity() -> None:
    one = {
        "postgresql://lambo@localhost/lambo",
        "postgresql://lambo@localhost:5432/lambo",
        "postgres://lambo:pw@localhost:5432/lambo",
        "postgresql://lambo@localhost",  # dbname defaults to the user
        "host=localhost user=lambo dbname=lambo",
        "host=localhost port=5432 user=lambo password=x",
    }
    assert {dsn_identity(dsn) for dsn in one} == {"postgresql://lambo@localhost:5432/lambo"}
    assert dsn_identity("postgresql://lambo@localhost:5433/lambo") != dsn_identity(
        "postgresql://lambo@localhost/lambo"
    )


@pytest.mark.parametrize(
    "bad",
    [
        f"postgresql+psycopg://alice:{SECRET}@db.internal/lambo",
        f"postgressql://alice:{SECRET}@db/lambo",
        f"mysql://alice:{SECRET}@db/lambo",
    ],
)
def test_a_dsn_of_another_scheme_is_refused_unechoed(bad: str, tmp_path: Path) -> None:
    for variable in ("LAMBO_POSTGRES_DSN", "LAMBO_COCKROACH_DSN"):
        env = {"LAMBO_HOME": str(tmp_path), "LAMBO_STORE": "postgres", variable: bad}
        with pytest.raises(ConfigError) as refused:
            load_config(env=env, cwd=tmp_path)
        message = refused.value.render()
        assert f"store.dsn (env {variable})" in message
        assert "postgresql:// or postgres://" in message and "key=value" in message
        assert SECRET not in message and "alice" not in message
    (tmp_path / "lambo.toml").write_text(f'[store]\nkind = "postgres"\ndsn = "{bad}"\n')
    with pytest.raises(ConfigError) as from_file:
        load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    assert "store.dsn" in from_file.value.message and SECRET not in from_file.value.render()


@pytest.mark.parametrize(
    "unread",
    [
        f"host=h password='{SECRET} dbname=x",  # a quote never closed
        f"host=h password={SECRET} cr3tpart",  # a space outside quotes
        f"host=h password=ab {SECRET}",
    ],
)
def test_a_dsn_libpq_cannot_read_is_refused_and_masked_from_its_password_on(
    unread: str, tmp_path: Path
) -> None:
    assert SECRET not in mask_dsn(unread) and "cr3tpart" not in mask_dsn(unread)
    env = {"LAMBO_HOME": str(tmp_path), "LAMBO_STORE": "postgres", "LAMBO_POSTGRES_DSN": unread}
    with pytest.raises(ConfigError) as refused:
        load_config(env=env, cwd=tmp_path)
    message = refused.value.render()
    assert "store.dsn (env LAMBO_POSTGRES_DSN)" in message and "libpq can read" in message
    assert SECRET not in message


def test_a_percent_encoded_password_key_in_a_uri_is_masked() -> None:
    # libpq decodes query keys: passw%6Frd is password
    masked = mask_dsn(f"postgresql://h/db?sslmode=require&passw%6Frd={SECRET}")
    assert masked == "postgresql://h/db?sslmode=require&passw%6Frd=***"


def test_a_store_whose_concept_ids_repeat_is_refused_migration_3(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        schema.migrate(conn, "postgres", upto=2)  # a store written before ids were unique
        for session in ("a", "b"):
            conn.execute("INSERT INTO sessions(name, created_at) VALUES (%s, 0)", (session,))
            conn.execute(
                "INSERT INTO concepts(session, id, content, canonical_key, concept_type, "
                "created_at, about_time, agent_id, tsv) "
                "VALUES (%s, 'same-id', 'x', 'x', 'entity', 0, 0, 'a', ''::tsvector)",
                (session,),
            )
    with pytest.raises(StoreError) as refused:
        PostgresStore(pg_dsn)
    assert refused.value.message.startswith(
        "the store's schema could not be migrated to version 3: rows already in the store "
        "break its new rule (concept ids unique across sessions)"
    )
    assert refused.value.detail and "same-id" in refused.value.detail


def test_migration_5_adds_vector_source_as_null_and_keeps_the_rows(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        schema.migrate(conn, "postgres", upto=4)  # a store written before image concepts
        columns = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'concepts'"
        ).fetchall()
        assert ("vector_source",) not in columns  # really the older schema
        conn.execute("INSERT INTO sessions(name, created_at) VALUES (%s, 0)", (S,))
        conn.execute(
            "INSERT INTO concepts(session, id, content, canonical_key, concept_type, "
            "created_at, about_time, agent_id, tsv, repo_scope) "
            "VALUES (%s, 'old-id', 'an old fact', 'an old fact', 'entity', 0, 0, 'a', "
            "to_tsvector('simple', 'an old fact'), 'acme/app')",
            (S,),
        )
    opened = PostgresStore(pg_dsn)
    try:
        assert opened.migrations_applied == [5]
        (old,) = list(opened.concepts(S))
        assert (old.id, old.content, old.repo_scope) == ("old-id", "an old fact", "acme/app")
        assert old.vector_source is None and not old.is_image
    finally:
        opened.close()


def test_a_migration_error_s_detail_never_carries_the_password(pg_dsn: str) -> None:
    with psycopg.connect(_secret_dsn(pg_dsn, pg_dsn.partition("?")[0].rpartition("/")[2])) as conn:
        said = schema.driver_detail(
            psycopg.Error(f"boom near {SECRET} and postgresql://u:{SECRET}@h"), conn
        )
    assert SECRET not in said and said.startswith("Error: boom near ***")


@pytest.mark.parametrize(
    "uri",
    [
        "postgresql://alice:pw#x@db/lambo",
        "postgresql://alice:a?b@db:5433/lambo?sslmode=require",
        "postgres://u@/d?host=/tmp&password=x",
        "postgresql://u:p%40x@h/d",
        "postgresql://a,b:5433/d",
        "postgresql://[::1]:5432/d",
        "postgresql://alice:S3c/:x@db/lambo",
        "postgresql://h",
    ],
)
def test_the_hand_parser_reads_a_uri_as_libpq_does(uri: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    from lambo_core.store.postgres.dsn import _parse_uri  # used where psycopg is absent

    assert _parse_uri(uri) == conninfo_to_dict(uri)
