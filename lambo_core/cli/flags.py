"""What the shell commands take: the ``--store`` rule, whole numbers, ``-`` for standard input,
and the flag that gave each field of a tool call, so a refusal names ``--kind`` rather than
``concepts[0].concept_type``.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import IO, Any, TypeVar

import click

from ..errors import ErrorKind, ParameterError

F = TypeVar("F", bound=Callable[..., Any])

STDIN = "-"


# --- --store ---------------------------------------------------------------------------


def check_store_flag(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """``--store PATH`` must name a file in a directory that exists: lambo creates the store
    file, never the directories above it (a typo must not leave a tree behind). The default
    location, chosen when the flag is absent, is created as before."""
    if value is None or value == "memory":
        return value
    if value.strip() == "":
        raise click.BadParameter("must name a SQLite file, or be `memory`", ctx, param)
    directory = Path(value).expanduser().parent
    if not directory.is_dir():
        raise click.BadParameter(
            f"the directory {click.format_filename(directory)} does not exist; lambo creates "
            "the store file but not its directory, so create the directory first or name a "
            "file in one that exists",
            ctx,
            param,
        )
    return value


def store_option(help: str) -> Callable[[F], F]:
    """The ``--store PATH|memory`` option every store-using command takes."""
    return click.option(
        "--store",
        "store",
        metavar="PATH|memory",
        callback=check_store_flag,
        help=help,
    )


# --- whole numbers -------------------------------------------------------------------------


def whole_number(ctx: click.Context, param: click.Parameter, value: str | None) -> int | None:
    """An integer flag's value; a refusal names the flag and the rule, never the value."""
    if value is None:
        return None
    try:
        return int(value.strip(), 10)
    except ValueError:
        raise click.BadParameter("must be a whole number", ctx, param) from None


def integer_option(*names: str, help: str) -> Callable[[F], F]:
    return click.option(*names, metavar="INTEGER", callback=whole_number, help=help)


# --- `-` reads standard input --------------------------------------------------------------


def text_or_stdin(flag: str, value: str, stream: IO[bytes] | None = None) -> str:
    """``value``, or when it is ``-`` the text on standard input with one trailing newline
    dropped. Empty input, input that is not UTF-8 and input over the string cap are refused
    naming ``flag`` (the input itself is never echoed)."""
    if value != STDIN:
        return value
    from ..text import MAX_STRING_BYTES  # text.py loads numpy: only when stdin is read

    source = stream if stream is not None else sys.stdin.buffer
    raw = source.read(MAX_STRING_BYTES + 3)  # the cap, a CRLF, and one byte to see "over"
    if raw.endswith(b"\r\n"):
        raw = raw[:-2]
    elif raw.endswith(b"\n"):
        raw = raw[:-1]
    if not raw:
        raise ParameterError(
            f"{flag} - reads standard input, which was empty; pipe the text in, "
            f"or give it as {flag} TEXT"
        )
    if len(raw) > MAX_STRING_BYTES:
        raise ParameterError(
            f"{flag} - read more than {MAX_STRING_BYTES} bytes from standard input; "
            f"the cap is {MAX_STRING_BYTES} bytes"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ParameterError(f"{flag} - read standard input that is not UTF-8 text") from None


# --- the flag behind each field ------------------------------------------------------------

# A field path as refusals write it: `top_k`, `produces[2]`, `concepts[0].depends_on[1]`.
_FIELD = r"[a-z_]+(?:\[\d+\])?(?:\.[a-z_]+(?:\[\d+\])?)*"
# Refusals name their field(s) first: one, or a list ("produces, modifies and depends_on").
_LEADING_FIELDS = re.compile(rf"({_FIELD})((?:(?:, | and | or ){_FIELD})*)(?=[ :;,]|$)")
_SEPARATORS = re.compile(r"(, | and | or )")
# The class prefix a non-parameter refusal carries ("reference refused: ").
_PREFIXES = tuple(f"{kind.value}: " for kind in ErrorKind)

# Tool arguments whose flag is not simply --<argument-with-dashes>.
_RENAMED = {"agent_id": "--agent", "node_id": "--node"}


def numbered(flag: str, index: int, count: int) -> str:
    """The ``index``-th (from 0) of ``count`` uses of a repeated flag: ``--produces #2``."""
    return flag if count <= 1 else f"{flag} #{index + 1}"


class FieldFlags:
    """Which flag gave each field of one tool call.

    Built from the arguments the command sends: a top-level argument ``top_k``
    is ``--top-k`` (``agent_id`` is ``--agent``), and the entries of a list
    argument are numbered when the flag was given more than once. A command
    whose arguments nest (derive's concepts) adds its paths with ``add``.
    """

    def __init__(self, arguments: Mapping[str, Any]) -> None:
        self._flags: dict[str, str] = {}
        for name, value in arguments.items():
            flag = _RENAMED.get(name, "--" + name.replace("_", "-"))
            self._flags[name] = flag
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                self.add_entries(name, flag, len(value))

    def add(self, field: str, flag: str) -> FieldFlags:
        self._flags[field] = flag
        return self

    def add_entries(self, field: str, flag: str, count: int, part: str = "") -> FieldFlags:
        """``field[i]`` (or ``field[i].part``) for ``count`` uses of ``flag``."""
        suffix = f".{part}" if part else ""
        for i in range(count):
            self._flags[f"{field}[{i}]{suffix}"] = numbered(flag, i, count)
        return self

    def flag(self, field: str) -> str | None:
        return self._flags.get(field)

    def fields(self) -> Iterable[str]:
        return self._flags.keys()

    def rewrite(self, message: str) -> str:
        """``message`` (a refusal, or a failed write's detail) with the fields it opens with
        named by their flags. Only the opening fields are touched, never the rest of the
        message, where the caller's own text may be quoted."""
        prefix = next((p for p in _PREFIXES if message.startswith(p)), "")
        body = message[len(prefix) :]
        match = _LEADING_FIELDS.match(body)
        if match is None:
            return message
        parts = _SEPARATORS.split(match.group(0))
        named = [
            self._flags.get(part, part) if i % 2 == 0 else part for i, part in enumerate(parts)
        ]
        if named == parts:
            return message
        return prefix + "".join(named) + body[match.end() :]
