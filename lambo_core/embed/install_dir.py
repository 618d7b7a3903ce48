"""Putting a model directory in place: whole or not at all, one writer per name.

Files are gathered in a hidden directory beside the target, each synced, then the
directory is moved into place with one ``os.replace`` (an older copy is swapped
out). A lock file per name keeps two pulls or imports of one model apart, across
processes. The hashes here are what a manifest records and `verify` checks.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from ..errors import ConflictError
from .manifest import FileRecord

CHUNK = 1 << 20


def file_hashes(path: Path, size: int) -> tuple[str, str]:
    """(sha256, git blob sha1) of a file in one pass."""
    sha256 = hashlib.sha256()
    sha1 = hashlib.sha1(f"blob {size}\0".encode())
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            sha256.update(chunk)
            sha1.update(chunk)
    return sha256.hexdigest(), sha1.hexdigest()


def copy_hashing(
    src: Path, dest: Path, progress: Callable[[int], None] | None = None
) -> FileRecord:
    """Copy ``src`` to ``dest`` and hash it in one pass; ``progress`` gets the bytes done."""
    sha256 = hashlib.sha256()
    size = 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as fin, dest.open("wb") as fout:
        while chunk := fin.read(CHUNK):
            sha256.update(chunk)
            fout.write(chunk)
            size += len(chunk)
            if progress is not None:
                progress(size)
    return FileRecord(size, sha256.hexdigest())


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def install_dir(tmp: Path, target: Path) -> None:
    """Move a complete, synced directory into place; an older one is swapped out."""
    for item in tmp.rglob("*"):
        if item.is_file():
            with item.open("rb") as fh:
                os.fsync(fh.fileno())
    _fsync_dir(tmp)
    aside: Path | None = None
    if target.exists():
        aside = target.with_name(f".old-{target.name}-{uuid.uuid4().hex[:8]}")
        os.replace(target, aside)
    os.replace(tmp, target)
    _fsync_dir(target.parent)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def exclusive(models_dir: Path, name: str) -> Iterator[None]:
    """One pull or import per model name at a time, across processes."""
    models_dir.mkdir(parents=True, exist_ok=True)
    lock_path = models_dir / f".lock-{name}"
    with lock_path.open("a") as fh:
        try:
            import fcntl

            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except ImportError:  # not POSIX: no cross-process lock
            pass
        except OSError:
            raise ConflictError(
                f"another `lambo model pull` or `import` of {name} is running"
            ) from None
        yield
