"""The official `@modelcontextprotocol/server-memory`'s ``memory.jsonl``, read as lambo writes
(docs/import-export.md, "From server-memory").

Its lines are ``{"type":"entity","name","entityType","observations":[...]}`` and
``{"type":"relation","from","to","relationType"}``. The mapping:

- an entity is an Entity concept ``name``; each observation an Observation concept, the
  entity's parent_of child; ``entityType`` an Entity concept that is the entity's parent
  (so every ``person`` hangs under one ``person``). One lambo_derive per entity, so each
  observation is embedded framed with its entity's name and its sibling observations
  (``writes/embedding.py``): "speaks Spanish" is found as something about that person. An
  entity with many observations is sent in several calls, each within the call limits.
- a relation is a Logic concept ``"<from> <relationType> <to>"`` that depends_on both ends,
  so it sits in both entities' blast radius and a recall of either finds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..admission import MAX_CONCEPTS_PER_DERIVE
from ..text import check_string, show_safely
from .lines import LineRefused

ENTITY_FIELDS = ("type", "name", "entityType", "observations")
RELATION_FIELDS = ("type", "from", "to", "relationType")
# One call's concepts joined by "; " stay well under the 16 KiB embedding-text limit, so
# every observation also fits once framed with them (admission._check_embedding_text).
CALL_TEXT_BUDGET = 7_000


def is_server_memory(obj: Mapping[str, Any]) -> bool:
    """A line of server-memory's format: ``type`` entity (with a name) or relation (with a
    from), and neither ``kind`` nor ``content``, which our lines have (ours also say
    ``"type": "entity"``, for a concept's type)."""
    if "kind" in obj or "content" in obj:
        return False
    kind = obj.get("type")
    return (kind == "entity" and "name" in obj) or (kind == "relation" and "from" in obj)


@dataclass
class MemoryLine:
    """One server-memory line, checked: an entity with its observations, or a relation."""

    number: int
    kind: str  # "entity" | "relation"
    name: str = ""
    entity_type: str | None = None
    observations: list[str] = field(default_factory=list)
    source: str = ""
    target: str = ""
    relation: str = ""

    @property
    def sentence(self) -> str:
        return f"{self.source} {self.relation} {self.target}"


def check_memory_line(number: int, obj: Mapping[str, Any]) -> MemoryLine:
    """``obj`` read as server-memory's; ``LineRefused`` names the field and the rule."""
    kind = obj.get("type")
    if kind not in ("entity", "relation"):
        raise LineRefused(
            "type must be entity or relation: this file is in server-memory's format "
            "(its first line said so)"
        )
    allowed = ENTITY_FIELDS if kind == "entity" else RELATION_FIELDS
    for name in obj:
        if name not in allowed:
            raise LineRefused(
                f"{show_safely(name, 64)} is not a field of a server-memory {kind} line; its "
                f"fields are {', '.join(allowed)}"
            )
    if kind == "entity":
        if "name" not in obj:
            raise LineRefused("name is missing; an entity line needs it")
        line = MemoryLine(number, "entity", name=check_string("name", obj["name"]))
        if obj.get("entityType") is not None:
            line.entity_type = check_string("entityType", obj["entityType"])
        observations = obj.get("observations") or []
        if not isinstance(observations, list):
            raise LineRefused("observations must be a list of strings")
        line.observations = [
            check_string(f"observations[{i}]", o) for i, o in enumerate(observations)
        ]
        return line
    for name in ("from", "to", "relationType"):
        if name not in obj:
            raise LineRefused(f"{name} is missing; a relation line needs from, to and relationType")
    return MemoryLine(
        number,
        "relation",
        source=check_string("from", obj["from"]),
        target=check_string("to", obj["to"]),
        relation=check_string("relationType", obj["relationType"]),
    )


def entity_calls(line: MemoryLine, agent: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """The lambo_derive arguments for one entity, and for each call the field -> line-field
    names its refusals are told in. At least one call; more when the observations do not
    fit one call's limits (the entity concept is in every call, matched after the first)."""
    chunks: list[list[int]] = [[]]
    size = len(line.name.encode())
    for i, text in enumerate(line.observations):
        grown = size + len(text.encode()) + 2
        if chunks[-1] and (
            grown > CALL_TEXT_BUDGET or len(chunks[-1]) >= MAX_CONCEPTS_PER_DERIVE - 1
        ):
            chunks.append([])
            grown = len(line.name.encode()) + len(text.encode()) + 2
        chunks[-1].append(i)
        size = grown
    calls = []
    for n, chunk in enumerate(chunks):
        concepts = [{"content": line.name, "concept_type": "entity"}]
        pairs = []
        names = {"concepts[0].content": "name"}
        if n == 0 and line.entity_type is not None:
            pairs.append({"parent": line.entity_type, "child": line.name})
            names["parent_of[0].parent"] = "entityType"
            names["parent_of[0].child"] = "name"
        for j, i in enumerate(chunk, start=1):
            text = line.observations[i]
            concepts.append({"content": text, "concept_type": "observation"})
            names[f"concepts[{j}].content"] = f"observations[{i}]"
            names[f"parent_of[{len(pairs)}].parent"] = "name"
            names[f"parent_of[{len(pairs)}].child"] = f"observations[{i}]"
            pairs.append({"parent": line.name, "child": text})
        arguments: dict[str, Any] = {"agent_id": agent, "concepts": concepts}
        if pairs:
            arguments["parent_of"] = pairs
        calls.append((arguments, names))
    return calls


def relation_call(line: MemoryLine, agent: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The lambo_derive arguments for one relation (a self-relation depends on its end once)."""
    ends = [line.source] if line.source == line.target else [line.source, line.target]
    concept = {"content": line.sentence, "concept_type": "logic", "depends_on": ends}
    names = {"concepts[0].content": "relationType", "concepts[0].depends_on[0]": "from"}
    names["concepts[0].depends_on[1]"] = "to"
    return {"agent_id": agent, "concepts": [concept]}, names
