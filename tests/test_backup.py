"""`lambo backup`: the online copy in pages under a concurrent writer, and its refusals.

A real `lambo serve` writing while `lambo backup` runs: tests/e2e/test_forget_backup.py.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest

from lambo_core.errors import ConflictError, ParameterError
from lambo_core.model import Concept, ConceptType, WriteBatch, new_id
from lambo_core.store import SqliteStore
from lambo_core.store.backup import backup_sqlite
from tests.test_cli import run

S = "s"


def batch(n: int, start: int = 0) -> WriteBatch:
    text = "a fact of some length to fill pages " * 10
    return WriteBatch(
        session=S,
        concepts=[
            Concept(new_id(), S, f"{text} {i}", f"{text} {i}", ConceptType.ENTITY, 1.0, 1.0, "a")
            for i in range(start, start + n)
        ],
    )


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "store" / "lambo.db"
    store = SqliteStore(path)
    store.ensure_session(S, 1.0)
    store.apply(batch(3000))
    store.close()
    return path


def test_the_copy_is_the_snapshot_it_began_with_while_a_writer_commits(
    store_file: Path, tmp_path: Path
) -> None:
    writer = SqliteStore(store_file)
    stop = threading.Event()
    written: list[int] = []

    def keep_writing() -> None:
        n = 3000
        while not stop.is_set():
            writer.apply(batch(5, n))
            n += 5
            written.append(n)

    steps: list[tuple[int, int]] = []
    counted: list[int] = []  # the concepts committed just before the backup, and just after

    def progress(done: int, total: int) -> None:
        steps.append((done, total))

    thread = threading.Thread(target=keep_writing)
    thread.start()
    try:
        while len(written) < 3:  # the writer is committing when the backup begins
            threading.Event().wait(0.01)
        with sqlite3.connect(store_file) as look:
            counted.append(look.execute("SELECT count(*) FROM concepts").fetchone()[0])
        report = backup_sqlite(
            store_file, tmp_path / "copy.db", progress=progress, pages_per_step=8
        )
        with sqlite3.connect(store_file) as look:
            counted.append(look.execute("SELECT count(*) FROM concepts").fetchone()[0])
    finally:
        stop.set()
        thread.join()
        writer.close()
    assert len(steps) > 10  # in pages: many steps, never started over
    assert [d for d, _ in steps] == sorted(d for d, _ in steps)
    assert steps[-1][0] == steps[-1][1] == report.pages
    assert counted[0] <= report.concepts <= counted[1]
    assert counted[1] > counted[0]  # the writer committed during the copy
    with sqlite3.connect(tmp_path / "copy.db") as copy:
        assert copy.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert copy.execute("SELECT count(*) FROM concepts").fetchone()[0] == report.concepts
    assert (tmp_path / "copy.db").stat().st_mode & 0o777 == 0o600
    reopened = SqliteStore(tmp_path / "copy.db")
    assert len(list(reopened.concepts(S, vectors=False))) == report.concepts
    reopened.close()


def test_refusals_leave_path_alone(store_file: Path, tmp_path: Path) -> None:
    target = tmp_path / "exists.db"
    target.write_text("mine")
    with pytest.raises(ParameterError, match="exists; add --force to replace it"):
        backup_sqlite(store_file, target)
    assert target.read_text() == "mine"
    with pytest.raises(ParameterError, match="PATH is the store itself"):
        backup_sqlite(store_file, store_file, force=True)
    with pytest.raises(ParameterError, match="PATH is the store itself"):
        backup_sqlite(store_file, store_file.parent / ".." / "store" / "lambo.db-wal", force=True)
    with pytest.raises(ParameterError, match="is a directory"):
        backup_sqlite(store_file, tmp_path)
    with pytest.raises(ParameterError, match=r"directory .* does not exist"):
        backup_sqlite(store_file, tmp_path / "no" / "x.db")
    with pytest.raises(ConflictError, match="does not exist yet; there is nothing to back up"):
        backup_sqlite(tmp_path / "none.db", tmp_path / "x.db")
    report = backup_sqlite(store_file, target, force=True)
    assert report.concepts == 3000 and target.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exists.db", "store"]


def test_a_refusal_shows_path_without_its_control_bytes(store_file: Path, tmp_path: Path) -> None:
    """A PATH is quoted in the message as show_safely makes it: no escape or bell reaches
    the terminal."""
    odd = tmp_path / "a\x1b[31mred\x07.db"
    odd.write_text("mine")
    with pytest.raises(ParameterError) as exists:
        backup_sqlite(store_file, odd)
    with pytest.raises(ParameterError) as missing:
        backup_sqlite(store_file, tmp_path / "d\x1b[31m\x07" / "x.db")
    directory = tmp_path / "dir\x1b[31m\x07"
    directory.mkdir()
    with pytest.raises(ParameterError) as is_dir:
        backup_sqlite(store_file, directory)
    for refused in (exists, missing, is_dir):
        message = str(refused.value)
        assert "\x1b" not in message and "\x07" not in message, message
        assert "\ufffd[31m" in message
    assert "exists; add --force" in str(exists.value) and odd.read_text() == "mine"
    out = run("backup", "--store", str(store_file), str(odd))
    assert out.returncode == 2 and "\x1b" not in out.stderr and "\x07" not in out.stderr
    assert "exists; add --force to replace it" in out.stderr


def test_the_command_prints_what_it_copied_and_refuses_stores_it_cannot(
    store_file: Path, tmp_path: Path, lambo_home: Path
) -> None:
    target = tmp_path / "b.db"
    out = run("backup", "--store", str(store_file), str(target))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(
        f"backed up {store_file} to {target}: 1 session(s), 3000 concept(s), 0 edge(s), "
    )
    again = run("backup", "--store", str(store_file), str(target))
    assert again.returncode == 2
    assert again.stderr == f"lambo: PATH {target} exists; add --force to replace it\n"
    assert run("backup", "--store", str(store_file), "--force", str(target)).returncode == 0
    memory = run("backup", "--store", "memory", str(tmp_path / "m.db"))
    assert memory.returncode == 1
    assert "memory store (RAM, gone with each process): there is nothing on disk" in memory.stderr
    config = lambo_home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[store]\nkind = "postgres"\ndsn = "postgresql://lambo@db.invalid/lambo"\n')
    pg = run("backup", str(tmp_path / "p.db"))
    assert pg.returncode == 1
    assert "the store is postgres: back it up with the database's own tools (pg_dump)" in pg.stderr
    assert "lambo store copy --from DSN --to FILE" in pg.stderr
    assert not (tmp_path / "m.db").exists() and not (tmp_path / "p.db").exists()
