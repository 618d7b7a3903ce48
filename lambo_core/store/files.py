"""A store file only its owner can read: created 600 in directories lambo makes 700.

Memory holds whatever agents learn (a pasted secret included), so a store must
not be readable by the other accounts of a machine. SQLite creates a
database's -wal and -shm files with the database file's own mode, so creating
the file 600 before SQLite opens it makes all three private. A store that
already exists is never chmod-ed behind its owner's back: ``readable_by_others``
lets the serve warn about it instead.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700


def make_private_dirs(path: Path) -> None:
    """``path`` and any missing parents, each created 700 (existing ones are left alone).

    ``Path.mkdir(mode=...)`` applies the mode to the last directory only and goes
    through the umask, so each new one is created and then set explicitly.
    """
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=PRIVATE_DIR)
        except FileExistsError:  # made meanwhile by another process: theirs to set
            continue
        os.chmod(directory, PRIVATE_DIR)


def create_private_file(path: Path) -> None:
    """Create ``path`` empty and 600 if it does not exist (a racing creator wins)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, PRIVATE_FILE)  # the umask may have narrowed it further; never widened
    finally:
        os.close(fd)


def readable_by_others(path: Path) -> str | None:
    """The mode (``"644"``) when accounts other than the owner may read ``path``, else None."""
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return None
    return f"{mode:o}" if mode & 0o044 else None
