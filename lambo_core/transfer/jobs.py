"""What each line of a file asks of the session: one or more write calls, the references
they need resolved first, and how their refusals name the line's own fields.

``read_jobs`` decodes a whole file (bytes), detects its format from its first JSON object
(server-memory's ``type`` entity/relation lines, else ours) and returns the jobs in file
order plus the lines already refused by the format's rules.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import LamboError
from .lines import Line, Refusal, decode_line, entry_name, parse_objects, split_lines
from .server_memory import check_memory_line, entity_calls, is_server_memory, relation_call

OURS = "lambo"
SERVER_MEMORY = "server-memory"


class Resolver(Protocol):
    """What an earlier line became: its node id (for citations), its text (for fields
    that name by text: parent_of ends, produces, modifies) and its type."""

    def node(self, ref: str) -> str: ...

    def text(self, ref: str) -> str: ...

    def landed_type(self, ref: str) -> str | None: ...


@dataclass
class Job:
    """One line's writes. ``build`` makes each call's (tool, arguments, field names) once
    the references are resolved; ``refs`` are the texts and ids the line refers to, which
    the driver waits on when an earlier line of the file makes them."""

    number: int
    id: str | None
    content: str | None  # the text of the concept the line lands on, when it has one
    concept_type: str | None
    refs: list[tuple[str, str]]  # (field as a refusal names it, reference)
    build: Callable[[Resolver], list[tuple[str, dict[str, Any], dict[str, str]]]]
    names_made: list[str] = field(default_factory=list)  # texts this line writes


@dataclass
class ReadFile:
    format: str
    jobs: list[Job]
    refused: list[Refusal]
    total: int


def _event(arguments: dict[str, Any], line: Line) -> dict[str, Any]:
    if line.event_time is not None:
        arguments["event_time"] = line.event_time
    return arguments


def _concept_job(line: Line, agent: str) -> Job:
    def build(r: Resolver) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        concept: dict[str, Any] = {"content": line.content, "concept_type": line.concept_type}
        names = {"concepts[0].content": "content", "concepts[0].concept_type": "type"}
        for name in ("depends_on", "against"):
            concept[name] = [r.node(ref) for ref in line.refs[name]]
            for i in range(len(line.refs[name])):
                names[f"concepts[0].{name}[{i}]"] = f"{name}[{i}]"
        args = _event({"agent_id": agent, "concepts": [concept]}, line)
        return [("lambo_derive", args, names)]

    return Job(
        line.number, line.id, line.content, line.concept_type, _refs_of(line), build, [line.content]
    )


def _parent_job(line: Line, agent: str) -> Job:
    def build(r: Resolver) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        # lambo_derive needs a concept: the child, which an existing concept's text matches
        # (any type); a text naming nothing is created as parent_of creates an end, an Entity
        child = r.text(line.child)
        ctype = r.landed_type(line.child) or "entity"
        args = {
            "agent_id": agent,
            "concepts": [{"content": child, "concept_type": ctype}],
            "parent_of": [{"parent": r.text(line.parent), "child": child}],
        }
        names = {
            "concepts[0].content": "child",
            "parent_of[0].parent": "parent",
            "parent_of[0].child": "child",
        }
        return [("lambo_derive", args, names)]

    return Job(line.number, None, None, None, _refs_of(line), build, [line.parent, line.child])


def _action_job(line: Line, agent: str) -> Job:
    def build(r: Resolver) -> list[tuple[str, dict[str, Any], dict[str, str]]]:
        args: dict[str, Any] = {"agent_id": agent, "action": line.content}
        for name in ("produces", "modifies"):
            args[name] = [r.text(ref) for ref in line.refs[name]]
        for name in ("depends_on", "against"):
            args[name] = [r.node(ref) for ref in line.refs[name]]
        return [("lambo_record_action", _event(args, line), {})]

    made = [line.content, *line.refs["produces"], *line.refs["modifies"]]
    return Job(line.number, line.id, line.content, "resource", _refs_of(line), build, made)


def _refs_of(line: Line) -> list[tuple[str, str]]:
    from .lines import named_refs

    return [
        (entry_name(line, name, i), ref)
        for name, refs in named_refs(line)
        for i, ref in enumerate(refs)
    ]


Calls = list[tuple[str, dict[str, Any], dict[str, str]]]


def _fixed(calls: Calls) -> Callable[[Resolver], Calls]:
    """A server-memory line's calls: they name by text, so nothing is resolved."""

    def build(_: Resolver) -> Calls:
        return calls

    return build


def _memory_jobs(
    objects: list[tuple[int, dict[str, Any]]], agent: str
) -> tuple[list[Job], list[Refusal]]:
    jobs: list[Job] = []
    refused: list[Refusal] = []
    for number, obj in objects:
        try:
            line = check_memory_line(number, obj)
        except LamboError as exc:
            refused.append(Refusal(number, exc.message))
            continue
        if line.kind == "entity":
            calls = [("lambo_derive", a, n) for a, n in entity_calls(line, agent)]
            made = [line.name, *line.observations]
            if line.entity_type is not None:
                made.append(line.entity_type)
            jobs.append(Job(number, None, line.name, "entity", [], _fixed(calls), made))
        else:
            args, names = relation_call(line, agent)
            refs = [("from", line.source), ("to", line.target)]
            jobs.append(
                Job(
                    number,
                    None,
                    line.sentence,
                    "logic",
                    refs,
                    _fixed([("lambo_derive", args, names)]),
                    [line.sentence],
                )
            )
    return jobs, refused


def read_jobs(data: bytes, agent: str) -> ReadFile:
    """Every line of ``data`` as a job, or a refusal with its line number."""
    objects: list[tuple[int, dict[str, Any]]] = []
    refused: list[Refusal] = []
    total = 0
    for number, raw in split_lines(data):
        try:
            obj = decode_line(number, raw)
        except LamboError as exc:
            total += 1
            refused.append(Refusal(number, exc.message))
            continue
        if obj is not None:
            objects.append((number, obj))
    total += len(objects)
    if objects and is_server_memory(objects[0][1]):
        jobs, more = _memory_jobs(objects, agent)
        return ReadFile(SERVER_MEMORY, jobs, sorted(refused + more, key=_by_line), total)
    parsed = parse_objects(objects)
    builders = {"concept": _concept_job, "parent_of": _parent_job, "action": _action_job}
    jobs = [builders[line.kind](line, agent) for line in parsed.lines]
    return ReadFile(OURS, jobs, sorted(refused + parsed.refused, key=_by_line), total)


def _by_line(refusal: Refusal) -> int:
    return refusal.line
