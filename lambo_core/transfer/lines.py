"""The JSONL line format `lambo import` reads and `lambo export` writes (docs/import-export.md).

One JSON object per line. ``parse_lines`` reads a whole file into ``Line``s, each with its
1-based line number, or a ``Refusal`` naming the line and the rule it broke: the line's raw
bytes are never echoed, only field names and values made safe by ``show_safely``. The
checks are the ones admission makes (``text.check_string``, ``check_concept_type``,
``parse_event_time``), so a line refused here reads as lambo_derive would refuse it.

References (depends_on, against, parent_of ends, produces, modifies) are strings: the id of
an EARLIER line of the file, else text or a store node id passed to admission as written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import LamboError
from ..text import check_concept_type, check_string, parse_event_time, show_safely

FORMAT = "lambo-jsonl"
VERSION = 1

KINDS = ("header", "concept", "parent_of", "action")
STATUSES = ("none", "candidate", "venerable", "canonical")
# Each kind's fields (kind itself is optional on a line whose fields say what it is).
FIELDS: Mapping[str, tuple[str, ...]] = {
    "header": ("kind", "format", "version", "session", "exported_at", "note"),
    "concept": (
        "kind",
        "id",
        "content",
        "type",
        "event_time",
        "depends_on",
        "against",
        "status",
        "vector",
    ),
    "parent_of": ("kind", "parent", "child"),
    "action": (
        "kind",
        "id",
        "action",
        "event_time",
        "produces",
        "modifies",
        "depends_on",
        "against",
        "status",
        "vector",
    ),
}
REFERENCE_FIELDS: Mapping[str, tuple[str, ...]] = {
    "concept": ("depends_on", "against"),
    "action": ("produces", "modifies", "depends_on", "against"),
}
MAX_REFS = 64  # the most a record_action takes; admission applies its own per-field caps


@dataclass(frozen=True)
class Refusal:
    """A line that was not written: its number and why (safe to print)."""

    line: int
    reason: str

    def render(self) -> str:
        return f"line {self.line}: {self.reason}"


class LineRefused(LamboError):
    """A line broke a rule of the format; ``message`` names the field, never the raw line."""


@dataclass
class Line:
    """One line of our format, checked. ``refs`` holds each reference field's entries."""

    number: int
    kind: str
    id: str | None = None
    content: str = ""  # a concept's content, an action's action text
    concept_type: str = "entity"
    event_time: str | None = None
    status: str | None = None
    refs: dict[str, list[str]] = field(default_factory=dict)
    parent: str = ""
    child: str = ""


def _kind_of(obj: Mapping[str, Any]) -> str:
    kind = obj.get("kind")
    if kind is None:
        if "content" in obj:
            return "concept"
        if "action" in obj:
            return "action"
        if "parent" in obj or "child" in obj:
            return "parent_of"
        raise LineRefused(
            "kind is missing and the fields do not say it: a concept line has content, an "
            "action line has action, a parent_of line has parent and child"
        )
    if not isinstance(kind, str) or kind not in KINDS:
        shown = show_safely(kind, 32) if isinstance(kind, str) else "(not a string)"
        raise LineRefused(f"kind: unknown variant {shown}, expected one of {', '.join(KINDS)}")
    return kind


def _check_fields(kind: str, obj: Mapping[str, Any]) -> None:
    allowed = FIELDS[kind]
    for name in obj:
        if name not in allowed:
            raise LineRefused(
                f"{show_safely(name, 64)} is not a field of a {kind} line; its fields are "
                f"{', '.join(allowed)}"
            )


def _refs(name: str, value: object) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise LineRefused(f"{name} must be a list of strings")
    if len(value) > MAX_REFS:
        raise LineRefused(f"{name} holds {len(value)} references; at most {MAX_REFS} per line")
    return [check_string(f"{name}[{i}]", v) for i, v in enumerate(value)]


def _check_line(number: int, obj: Mapping[str, Any]) -> Line:
    kind = _kind_of(obj)
    _check_fields(kind, obj)
    line = Line(number=number, kind=kind)
    if kind == "header":
        if obj.get("format") != FORMAT:
            raise LineRefused(f"format must be {FORMAT!r} on a header line")
        if obj.get("version") != VERSION:
            raise LineRefused(f"version must be {VERSION}; this lambo reads version {VERSION}")
        return line
    if kind == "parent_of":
        if "parent" not in obj or "child" not in obj:
            raise LineRefused("a parent_of line needs both parent and child")
        line.parent = check_string("parent", obj["parent"])
        line.child = check_string("child", obj["child"])
        return line
    if obj.get("id") is not None:
        line.id = check_string("id", obj["id"])
    text_field = "content" if kind == "concept" else "action"
    if text_field not in obj:
        raise LineRefused(f"{text_field} is missing; a {kind} line needs it")
    line.content = check_string(text_field, obj[text_field])
    if kind == "concept":
        if "type" not in obj:
            raise LineRefused(
                "type is missing; a concept line needs one of entity, logic, constraint, "
                "resource, observation"
            )
        line.concept_type = check_concept_type("type", obj["type"]).value
    else:
        line.concept_type = "resource"  # an action is a Resource concept (spec)
    if obj.get("event_time") is not None:
        parse_event_time("event_time", obj["event_time"])  # checked here, sent as written
        line.event_time = obj["event_time"]
    status = obj.get("status")
    if status is not None and status not in STATUSES:
        raise LineRefused(f"status must be one of {', '.join(STATUSES)}")
    line.status = status
    vector = obj.get("vector")
    if vector is not None and not (
        isinstance(vector, list) and all(isinstance(x, (int, float)) for x in vector)
    ):
        raise LineRefused("vector must be a list of numbers")
    for name in REFERENCE_FIELDS[kind]:
        line.refs[name] = _refs(name, obj.get(name))
    return line


def decode_line(number: int, raw: bytes) -> dict[str, Any] | None:
    """The JSON object on one raw line, None for a blank line; ``LineRefused`` otherwise."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise LineRefused("is not UTF-8 text") from None
    if text.strip() == "":
        return None
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        raise LineRefused("is not JSON: each line must be one JSON object") from None
    if not isinstance(obj, dict):
        raise LineRefused("must be a JSON object")
    return obj


def split_lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(1-based number, raw bytes) per line; a trailing newline opens no extra line."""
    for i, raw in enumerate(data.split(b"\n"), start=1):
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        yield i, raw


@dataclass
class Parsed:
    """A file read into lines: what will be sent, and what was refused already."""

    lines: list[Line]
    refused: list[Refusal]
    total: int  # non-blank lines read, headers included


def parse_objects(objects: Iterable[tuple[int, dict[str, Any]]]) -> Parsed:
    """Our lines from decoded objects, with the file-wide rules: an id used once, and a
    reference to a line's id only from a later line (forward references are refused)."""
    lines: list[Line] = []
    refused: list[Refusal] = []
    total = 0
    ids: dict[str, int] = {}
    pending: list[tuple[int, dict[str, Any]]] = list(objects)
    # every id first, so a reference to a LATER line's id is told as such
    later: dict[str, int] = {}
    for number, obj in pending:
        value = obj.get("id")
        if isinstance(value, str):
            later.setdefault(value, number)
    for number, obj in pending:
        total += 1
        try:
            line = _check_line(number, obj)
            if line.kind == "header":
                continue
            for name, refs in _named_refs(line):
                for i, ref in enumerate(refs):
                    where = later.get(ref)
                    if ref not in ids and where is not None and where >= number:
                        raise LineRefused(
                            f"{entry_name(line, name, i)} names the id of line {where}; a "
                            "line may refer only to the lines before it"
                        )
            if line.id is not None:
                if line.id in ids:
                    raise LineRefused(f"id is already the id of line {ids[line.id]}")
                ids[line.id] = number
        except LamboError as exc:
            refused.append(Refusal(number, exc.message))
            continue
        lines.append(line)
    return Parsed(lines, refused, total)


def _named_refs(line: Line) -> list[tuple[str, list[str]]]:
    if line.kind == "parent_of":
        return [("parent", [line.parent]), ("child", [line.child])]
    return list(line.refs.items())


def entry_name(line: Line, name: str, index: int) -> str:
    """How a refusal names one reference: ``depends_on[2]``, or a parent_of end's field."""
    return name if line.kind == "parent_of" else f"{name}[{index}]"


def named_refs(line: Line) -> list[tuple[str, list[str]]]:
    """Each reference field of ``line`` with its entries (parent_of: its two ends)."""
    return _named_refs(line)
