"""`lambo store copy` through a real PostgreSQL: SQLite -> PostgreSQL -> SQLite, equal.

The server is the tests' own (``pg_dsn``, tests/pg_server.py), a fresh database per test.
"""

from __future__ import annotations

from pathlib import Path

from lambo_core.store import SqliteStore, open_store
from tests.test_store_copy import dump, fill, read, run


def test_round_trip_through_postgres_keeps_every_row(tmp_path: Path, pg_dsn: str) -> None:
    source, back = tmp_path / "from.db", tmp_path / "back.db"
    store = SqliteStore(source)
    try:
        fill(store, "alpha", concepts=1200)  # more than a batch: several transactions
        fill(store, "beta", concepts=5, seed=2)
    finally:
        store.close()
    code, out, err = run("--from", str(source), "--to", pg_dsn)
    assert code == 0, err
    assert "concepts 1200/1200" in out and "write_intents 4/4" in out
    assert "forget_events 2/2 (--from/--to): ok" in out
    pg = open_store("postgres", None, pg_dsn)
    try:
        for session in ("alpha", "beta"):
            assert dump(pg, session) == read(source, session)
            assert len(pg.forget_events(session)) == 2
    finally:
        pg.close()
    code, out, err = run("--from", pg_dsn, "--to", str(back))
    assert code == 0, err
    assert "forget_events 2/2 (--from/--to): ok" in out
    for session in ("alpha", "beta"):
        assert read(back, session) == read(source, session)


def test_an_interrupted_copy_into_postgres_adds_no_audit_row_twice(
    tmp_path: Path, pg_dsn: str
) -> None:
    source = tmp_path / "from.db"
    store = SqliteStore(source)
    fill(store, "alpha", concepts=4)
    store.close()
    part, pg = SqliteStore(source), open_store("postgres", None, pg_dsn)
    try:  # as a copy cut short after the first audit row leaves it
        record = part.get_session("alpha")
        assert record is not None
        pg.ensure_session("alpha", record.created_at)
        pg.add_forget_event(part.forget_events("alpha")[0])
    finally:
        part.close()
        pg.close()
    code, out, err = run("--from", str(source), "--to", pg_dsn)
    assert code == 0, err
    assert "forget_events 2/2 (--from/--to): ok" in out
    code, out, err = run("--from", str(source), "--to", pg_dsn)
    assert code == 0, err
    assert "0 row(s) written" in out
    pg = open_store("postgres", None, pg_dsn)
    try:
        assert dump(pg, "alpha") == read(source, "alpha")
    finally:
        pg.close()


def test_a_forget_audit_count_that_differs_in_postgres_names_the_table(
    tmp_path: Path, pg_dsn: str
) -> None:
    from lambo_core.cli.store import count_lines
    from lambo_core.store.copy import copy_sessions
    from tests.test_store_copy import _late_forget_event, _WriterMeanwhile

    source = tmp_path / "from.db"
    store = SqliteStore(source)
    fill(store, "beta", concepts=5, seed=2)
    store.close()
    reader, pg = SqliteStore(source), open_store("postgres", None, pg_dsn)
    try:
        meanwhile = _WriterMeanwhile(source, _late_forget_event)
        report = copy_sessions(reader, pg, ["beta"], target_shown="pg", progress=meanwhile)
    finally:
        reader.close()
        pg.close()
    assert report.mismatched == [("beta", "forget_events")]
    _out, err = count_lines(report)
    assert err == [
        "lambo: count check failed: session 'beta', table forget_events: --from has 2 row(s), "
        "--to 3"
    ]


def test_postgres_refusals_never_show_the_password(tmp_path: Path, pg_dsn: str) -> None:
    secret = pg_dsn.replace("postgres:@", "postgres:hunter2@")
    code, out, err = run("--from", secret, "--to", pg_dsn)
    assert code == 2 and "the same store" in err
    assert "hunter2" not in out + err
    source = tmp_path / "from.db"
    store = SqliteStore(source)
    fill(store, "alpha", concepts=3)
    store.close()
    assert run("--from", str(source), "--to", pg_dsn)[0] == 0
    code, out, err = run("--from", str(source), "--to", secret)  # already there, equal
    assert code == 0, err
    assert "0 row(s) written" in out and "hunter2" not in out + err
    assert "postgres:***@" in out


def test_postgres_to_postgres_on_one_server(tmp_path: Path, pg_dsn: str) -> None:
    from tests import pg_server

    source = tmp_path / "from.db"
    store = SqliteStore(source)
    fill(store, "alpha", concepts=7)
    store.close()
    assert run("--from", str(source), "--to", pg_dsn)[0] == 0
    other = pg_server.new_database()
    try:
        code, out, err = run("--from", pg_dsn, "--to", other, "--session", "alpha")
        assert code == 0, err
        assert "concepts 7/7" in out
        pg = open_store("postgres", None, other)
        try:
            assert dump(pg, "alpha") == read(source, "alpha")
        finally:
            pg.close()
    finally:
        pg_server.drop_database(other)


def test_a_database_without_lambo_schema_is_refused_as_from_and_not_written(
    tmp_path: Path, pg_dsn: str
) -> None:
    import psycopg

    code, _, err = run("--from", pg_dsn, "--to", str(tmp_path / "to.db"))
    assert code == 2 and "is not a lambo store" in err
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT to_regclass('schema_migrations') IS NULL").fetchone()
    assert row == (True,)  # opening it would have migrated it
    assert not (tmp_path / "to.db").exists()
