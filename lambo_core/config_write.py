"""Setting one key in a lambo.toml (`lambo model use`), keeping the rest of the file.

The line is edited in place when the table is written the plain way (``[section]``
then ``key = "..."`` on one line), so comments and layout survive; the result is read
back and must equal the old file's values with only that key changed. Any other form
(a dotted key, an inline table, a multi-line string) is rewritten through tomli-w,
which keeps every key but no comment: the caller is told so.
"""

from __future__ import annotations

import contextlib
import os
import re
import tomllib
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from .errors import ConfigError
from .text import show_safely

_HEADER = re.compile(r"^\s*\[\s*([A-Za-z0-9_-]+)\s*\]\s*(#.*)?$")
_ANY_HEADER = re.compile(r"^\s*\[")
_STRING = r"(\"(?:[^\"\\]|\\.)*\"|'[^']*')"


@dataclass(frozen=True)
class Written:
    path: Path
    created: bool
    comments_kept: bool  # False: rewritten by tomli-w, the file's comments are gone


def _literal(value: str) -> str:
    return tomli_w.dumps({"v": value}).strip()[4:]


def _edit_in_place(text: str, section: str, key: str, value: str) -> str | None:
    """The text with ``key`` set in ``[section]``, or None when the table is not plain."""
    newline = "\r\n" if "\r\n" in text else "\n"
    lines = text.splitlines(keepends=True)
    headers = [i for i, line in enumerate(lines) if _ANY_HEADER.match(line)]
    mine = [i for i in headers if (m := _HEADER.match(lines[i])) and m.group(1) == section]
    entry = f"{key} = {_literal(value)}{newline}"
    if not mine:
        tail = "" if not text or text.endswith(("\n", "\r\n")) else newline
        gap = newline if text.strip() else ""
        return f"{text}{tail}{gap}[{section}]{newline}{entry}"
    if len(mine) > 1:
        return None
    start = mine[0]
    end = next((i for i in headers if i > start), len(lines))
    pattern = re.compile(rf"^(\s*)({key}|\"{key}\"|'{key}')(\s*=\s*){_STRING}(\s*(#.*)?)$")
    for i in range(start + 1, end):
        body = lines[i].rstrip("\r\n")
        if re.match(rf"^\s*(\"{key}\"|'{key}'|{key})\s*=", body):
            m = pattern.match(body)
            if m is None:
                return None  # a value lambo does not edit in place (multi-line, not a string)
            ending = lines[i][len(body) :] or newline
            lines[i] = f"{m.group(1)}{m.group(2)}{m.group(3)}{_literal(value)}{m.group(5)}{ending}"
            return "".join(lines)
    if not lines[start].endswith(("\n", "\r\n")):
        lines[start] += newline
    lines.insert(start + 1, entry)
    return "".join(lines)


def _write_atomically(path: Path, text: str) -> None:
    mode = path.stat().st_mode & 0o777 if path.exists() else 0o644
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def set_string(path: Path, section: str, key: str, value: str) -> Written:
    """Set ``[section] key = value`` in the TOML file at ``path`` (made if missing)."""
    created = not path.exists()
    try:
        # bytes, not read_text: universal newlines would turn a CRLF file into LF
        text = "" if created else path.read_bytes().decode("utf-8")
        data: dict[str, Any] = tomllib.loads(text)
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"{show_safely(str(path), 200)} could not be read") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path.name} is not valid TOML ({exc}); nothing was written") from None
    table = data.setdefault(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{section} in {path.name} must be a table; nothing was written")
    table[key] = value
    edited = _edit_in_place(text, section, key, value)
    kept = True
    if edited is None or _parsed(edited) != data:
        edited, kept = tomli_w.dumps(data), "#" not in text
    # A symlinked lambo.toml (dotfiles) is written through: os.replace on the link itself
    # would put a regular file in its place and leave the real file as it was.
    shown = show_safely(str(path), 200)
    try:
        real: Path | None = path.resolve()
    except RuntimeError:  # a symlink loop: Python before 3.13 raises this, not OSError
        real = None
    if real is None or real.is_symlink():  # 3.13 stops at the looping link instead
        raise ConfigError(f"{shown} is a symlink loop; nothing was changed")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
        _write_atomically(real, edited)
    except OSError as exc:
        reason = show_safely(exc.strerror or type(exc).__name__)
        raise ConfigError(f"{shown} could not be written ({reason}); nothing was changed") from None
    return Written(path, created, kept)


def _parsed(text: str) -> dict[str, Any] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None
