"""Memory only its owner can read: store files 600, the directories lambo makes 700."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
from pathlib import Path

import pytest

from lambo_core.serve import warn_if_readable_by_others
from lambo_core.store import SqliteStore
from lambo_core.store.files import make_private_dirs, readable_by_others
from tests.e2e.conftest import lambo_argv


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_a_fresh_store_and_its_directories_are_private(tmp_path: Path, umask: int) -> None:
    path = tmp_path / "new" / "data" / "lambo.db"
    old = os.umask(umask)
    try:
        store = SqliteStore(path)
        store.ensure_session("s", 0.0)  # a write: the -wal and -shm files exist now
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        assert wal.exists() and shm.exists()
        assert [mode(p) for p in (path, wal, shm)] == [0o600] * 3
        assert [mode(p) for p in (path.parent, path.parent.parent)] == [0o700] * 2
        store.close()
    finally:
        os.umask(old)


def test_an_existing_directory_and_store_keep_their_owners_modes(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    os.chmod(shared, 0o755)
    path = shared / "lambo.db"
    SqliteStore(path).close()
    assert mode(shared) == 0o755  # not lambo's to change
    os.chmod(path, 0o644)
    SqliteStore(path).close()
    assert mode(path) == 0o644  # never chmod-ed behind its owner's back: warned about instead
    assert readable_by_others(path) == "644"


def test_make_private_dirs_leaves_existing_parents_alone(tmp_path: Path) -> None:
    os.chmod(tmp_path, 0o755)
    make_private_dirs(tmp_path / "a" / "b")
    assert mode(tmp_path) == 0o755
    assert mode(tmp_path / "a") == mode(tmp_path / "a" / "b") == 0o700


def test_a_serve_warns_about_a_store_others_can_read(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "lambo.db"
    SqliteStore(path).close()
    with caplog.at_level(logging.WARNING):
        warn_if_readable_by_others(path)
    assert not caplog.records  # 600: nothing to say
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING):
        warn_if_readable_by_others(path)
    (record,) = [r for r in caplog.records if str(path) in r.getMessage()]
    assert "can be read by other accounts (mode 644)" in record.getMessage()
    assert "chmod 600" in record.getMessage()


def test_the_cli_creates_a_private_memory(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "lambo.toml").write_text('[embedder]\nmatch_strategy = "canonical"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBO_")}
    env["LAMBO_HOME"] = str(home)
    out = subprocess.run(
        [*lambo_argv(), "derive", "--session", "p", "--content", "the deploy key is in vault 7"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    store = home / "data" / "lambo.db"
    assert mode(store.parent) == 0o700
    assert mode(store) == 0o600
    for suffix in ("-wal", "-shm"):
        extra = Path(f"{store}{suffix}")
        if extra.exists():
            assert mode(extra) == 0o600
