"""Where `lambo store copy` reads and writes: a SQLite path or a PostgreSQL DSN, shown masked.

``--from`` is opened for reading only: a SQLite file must exist and already carry this
lambo's schema (opening an older one would migrate it, a write), and nothing here creates
it. ``--to`` is opened as any store is, created and migrated if need be; a SQLite file's
directory must exist (as for ``--store``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError, ParameterError, StoreError
from . import migrations
from .base import Store
from .postgres.dsn import dsn_identity, dsn_problem, looks_like_dsn, mask_dsn
from .sqlite import SqliteStore


@dataclass(frozen=True)
class Location:
    """One side of a copy: ``flag`` (``--from`` / ``--to``) and a path or a DSN."""

    flag: str
    path: Path | None = None
    dsn: str | None = None

    @property
    def shown(self) -> str:
        """How messages name it: the path, or the DSN without its password."""
        if self.dsn is not None:
            return mask_dsn(self.dsn)
        return str(self.path)

    def same_as(self, other: Location) -> bool:
        if self.path is not None and other.path is not None:
            return _same_file(self.path, other.path)
        if self.dsn is not None and other.dsn is not None:
            return dsn_identity(self.dsn) == dsn_identity(other.dsn)
        return False


def parse_location(flag: str, text: str) -> Location:
    """``text`` as a DSN when it looks like one, else a SQLite path; refusals name ``flag``."""
    if text.strip() == "":
        raise ParameterError(f"{flag} must name a SQLite file or a PostgreSQL DSN")
    if "://" in text or looks_like_dsn(text):
        # a URI of another scheme is refused, not taken for a path and echoed
        problem = dsn_problem(text)
        if problem is not None:
            raise ParameterError(f"{flag} is no SQLite path and no PostgreSQL DSN: a DSN {problem}")
        return Location(flag, dsn=text.strip())
    if text == "memory":
        raise ParameterError(
            f"{flag} memory names a store in RAM, which a copy could not read back; "
            "name a SQLite file or a PostgreSQL DSN"
        )
    return Location(flag, path=Path(text).expanduser())


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return a.samefile(b)
        return a.resolve() == b.resolve()
    except OSError:
        return False


def _sqlite_schema(path: Path) -> list[int] | None:
    """The migrations recorded in the file, read read-only; None when it is no lambo store."""
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except (sqlite3.Error, OSError, ValueError):
        return None
    try:
        return migrations.applied_versions(conn)
    except Exception:
        return None
    finally:
        conn.close()


def _check_schema(
    location: Location, versions: list[int] | None, latest: int, provision: str
) -> None:
    """Refuse a ``--from`` that is no lambo store, or whose schema opening would migrate."""
    if not versions:
        raise ParameterError(
            f"{location.flag} {location.shown} is not a lambo store (no schema recorded)"
        )
    if versions[-1] < latest:
        raise ConfigError(
            f"{location.flag} {location.shown} has schema version {versions[-1]}, older than "
            f"this lambo's {latest}; a copy never writes into {location.flag}, so migrate it "
            f"first: {provision}"
        )


def _postgres_schema(location: Location) -> list[int]:
    """The migrations a database records, read on one connection that writes nothing."""
    from .postgres.connection import connect
    from .postgres.schema import applied_versions

    assert location.dsn is not None
    try:
        conn = connect(location.dsn)
    except StoreError as exc:
        raise StoreError(
            f"{location.flag} {location.shown}: {exc.message}", detail=exc.detail
        ) from None
    try:
        return applied_versions(conn)
    finally:
        conn.close()


def open_source(location: Location) -> Store:
    """``--from``, opened without writing into it: its schema must be current already."""
    if location.dsn is not None:
        from .postgres.schema import LATEST_VERSION

        provision = "`lambo provision` with this database as the configured store"
        _check_schema(location, _postgres_schema(location), LATEST_VERSION, provision)
        return _open_postgres(location)
    assert location.path is not None
    path = location.path
    if not path.is_file():
        raise ParameterError(f"{location.flag} names no SQLite store file ({path})")
    provision = f"`lambo provision --store {path}`"
    _check_schema(location, _sqlite_schema(path), migrations.LATEST_VERSION, provision)
    return SqliteStore(path)


def open_target(location: Location) -> Store:
    """``--to``, created and migrated if need be."""
    if location.dsn is not None:
        return _open_postgres(location)
    assert location.path is not None
    if not location.path.parent.is_dir():
        raise ParameterError(
            f"{location.flag}: the directory {location.path.parent} does not exist; lambo "
            "creates the store file but not its directory"
        )
    return SqliteStore(location.path)


def _open_postgres(location: Location) -> Store:
    """A PostgreSQL store (psycopg is imported only here); its schema is migrated on open,
    as by any serve of it. A failure names the side and the DSN, masked."""
    from . import open_store

    assert location.dsn is not None
    try:
        return open_store("postgres", None, location.dsn)
    except StoreError as exc:
        raise StoreError(
            f"{location.flag} {location.shown}: {exc.message}", detail=exc.detail
        ) from None
