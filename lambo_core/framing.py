"""One line framer for newline-delimited JSON: stdio and the hub socket both use it.

``LineSplitter`` turns a byte stream into lines holding at most ``max_line``
bytes of one line in memory; a longer line comes out as an ``OversizedLine``
(its size and two ends). ``extract_request_id`` reads a request's id from the
ends of a line that is not parsed, so its refusal can carry the id. No I/O
here: the transports read and write. Spec: "Limits" (one request's size).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

EDGE = 512
"""How many bytes of each end of an oversized line are kept to find its id."""
MAX_ID_CHARS = 128
"""The longest string id echoed back in an error for a line that was not parsed."""

RequestId = int | str


# --- splitting the input into lines ---------------------------------------------------------


@dataclass(frozen=True)
class Line:
    """A complete line of at most ``max_line`` bytes, without its newline."""

    data: bytearray


@dataclass(frozen=True)
class OversizedLine:
    """A complete line over ``max_line`` bytes: its size and its two ends only."""

    size: int
    head: bytes
    tail: bytes


class LineSplitter:
    """Splits a byte stream on ``\\n`` holding at most ``max_line`` bytes of one line.

    A line that grows past the limit switches to discarding: only its first and
    last ``EDGE`` bytes and its size are kept until its newline arrives.
    """

    def __init__(self, max_line: int) -> None:
        if max_line < 1:
            raise ValueError("max_line must be at least 1")
        self.max_line = max_line
        self._buf = bytearray()
        self._discarding = False
        self._size = 0
        self._head = b""
        self._tail = b""

    @property
    def pending(self) -> int:
        """The size in bytes of the unfinished line read so far."""
        return self._size if self._discarding else len(self._buf)

    def feed(self, chunk: bytes) -> list[Line | OversizedLine]:
        """Take the next chunk of input; return the lines it completes, in order."""
        out: list[Line | OversizedLine] = []
        view = memoryview(chunk)
        start = 0
        while start < len(chunk):
            newline = chunk.find(b"\n", start)
            end = len(chunk) if newline < 0 else newline
            self._take(view[start:end])
            if newline < 0:
                break
            out.append(self._finish())
            start = newline + 1
        return out

    def _take(self, piece: memoryview) -> None:
        if not piece:
            return
        if not self._discarding:
            if len(self._buf) + len(piece) <= self.max_line:
                self._buf += piece
                return
            # Past the limit: keep the two ends and the size, drop the rest.
            self._discarding = True
            self._size = len(self._buf)
            self._head = bytes(self._buf[:EDGE])
            self._tail = bytes(self._buf[-EDGE:])
            self._buf = bytearray()
        if len(self._head) < EDGE:
            self._head += bytes(piece[: EDGE - len(self._head)])
        self._tail = (self._tail + bytes(piece[-EDGE:]))[-EDGE:]
        self._size += len(piece)

    def _finish(self) -> Line | OversizedLine:
        done: Line | OversizedLine
        if self._discarding:
            done = OversizedLine(self._size, self._head, self._tail)
            self._discarding = False
            self._size = 0
            self._head = self._tail = b""
        else:
            done = Line(self._buf)
            self._buf = bytearray()
        return done


# --- reading an id from the ends of a line that is not parsed -------------------------------

# A JSON integer or string, then what may follow a member's value.
_VALUE = rb'(-?(?:0|[1-9][0-9]{0,18})|"(?:[^"\\\x00-\x1f]|\\.){0,%d}")' % MAX_ID_CHARS
_ID_MEMBER = re.compile(rb'"id"\s*:\s*' + _VALUE + rb"\s*(?=[,}])")
# In the tail: "id" as a member of the outermost object, that is followed only by
# short scalar members up to the line's last closing brace.
_SCALAR = rb'(?:"(?:[^"\\]|\\.){0,256}"|-?[0-9][0-9.eE+-]{0,40}|true|false|null)'
_ID_AT_END = re.compile(
    rb'"id"\s*:\s*' + _VALUE + rb'\s*(?:,\s*"[^"\\]{1,64}"\s*:\s*' + _SCALAR + rb"\s*)*\}\s*\Z"
)


def echoable_id(value: object) -> RequestId | None:
    """``value`` if it is an id an error may echo (a short string, a 64-bit int), else None."""
    if isinstance(value, str) and len(value) <= MAX_ID_CHARS:
        return value
    if isinstance(value, int) and not isinstance(value, bool) and -(2**63) <= value < 2**63:
        return value
    return None


def _id_value(literal: bytes) -> RequestId | None:
    try:
        return echoable_id(json.loads(literal))
    except ValueError:
        return None


def _id_in_head(head: bytes) -> RequestId | None:
    """The value of the outermost object's ``"id"`` member, if it is inside ``head``."""
    depth = 0
    in_string = False
    escaped = False
    for i, byte in enumerate(head):
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
            continue
        if byte == 0x22:
            if depth == 1:
                match = _ID_MEMBER.match(head, i)
                if match is not None:
                    return _id_value(match.group(1))
            in_string = True
        elif byte in b"{[":
            depth += 1
        elif byte in b"}]":
            depth -= 1
            if depth <= 0:
                return None
    return None


def _id_in_tail(tail: bytes) -> RequestId | None:
    """The outermost object's ``"id"`` when it ends the line (only short scalars after it)."""
    # The tail may start mid-string, so try every "id" it holds, from the last.
    for start in reversed([m.start() for m in re.finditer(rb'"id"', tail)]):
        match = _ID_AT_END.match(tail, start)
        if match is not None:
            return _id_value(match.group(1))
    return None


def extract_request_id(head: bytes, tail: bytes = b"") -> RequestId | None:
    """Read a request's id from the two ends of a line that will not be parsed.

    Looks for the outermost object's ``"id"`` member in ``head`` (the start of
    the line), else at the end of ``tail`` (the end of the line), so it is found
    whether ``id`` comes before or after ``params``. Only a JSON integer (within
    64 bits) or a string of at most ``MAX_ID_CHARS`` characters is returned;
    anything else, or nothing found, gives None.
    """
    found = _id_in_head(head)
    if found is None and tail:
        found = _id_in_tail(tail)
    return found
