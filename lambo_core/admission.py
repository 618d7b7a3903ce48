"""Admission: everything a write call must pass before it is acked.

``admit_derive`` and ``admit_action`` check a call's arguments in the spec's
order, apply every write limit, resolve its references against the session's
current graph, refuse cycles the graph already shows, and return an
``Admitted`` write: a JSON-serialisable payload that is committed to the
store as a write intent before the ack. What each reference named is fixed
here, by node id, so the apply worker can tell when it changed in between.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .args import check_arguments, check_list, check_scope, require
from .call_names import CallNames, Named, refuse_case_variants
from .call_scope import CallScope
from .cross_refs import CrossSession, check_action_entry, check_reference
from .errors import ParameterError, StoreError
from .index.graph import SessionGraph
from .layer_paths import refuse_relative_in_action, refuse_relative_in_derive
from .model import ConceptType, EdgeType
from .references import (
    ConceptLookup,
    match_reference,
    refuse,
    refuse_cited_and_contradicted,
    refuse_cycle,
    refuse_interaction,
    refuse_no_match,
    refuse_self_reference,
    refuse_several,
    resolve_reference,
)
from .scoped_intent import admitted_repo_scope, scoped_payload
from .text import (
    MAX_STRING_BYTES,
    canonical_key,
    check_agent_id,
    check_concept_type,
    check_image_reference,
    check_string,
    has_image_suffix,
    parse_event_time,
    show_safely,
)

MAX_CONCEPTS_PER_DERIVE = 64
MAX_PARENT_OF_PAIRS = 256
MAX_CONCEPTS_AND_PAIRS = 512
MAX_REFS_PER_CONCEPT = 8
MAX_REFS_PER_CALL = 32
MAX_ACTION_TARGETS = 64
MAX_ACTION_AGAINST = 8
# The framed embedding text: "<item> — <the call's concepts joined by '; '>".
FRAME_SEPARATOR = " — "
CALL_TEXT_SEPARATOR = "; "

DERIVE_ARGS = ("agent_id", "concepts", "event_time", "parent_of", "scope", "repo_scope")
CONCEPT_ARGS = ("content", "concept_type", "depends_on", "against")
PARENT_OF_ARGS = ("parent", "child")
ACTION_ARGS = (
    "agent_id",
    "action",
    "event_time",
    "against",
    "produces",
    "modifies",
    "depends_on",
    "scope",
    "repo_scope",
)

NOTHING_WRITTEN = "; nothing was written"


@dataclass(frozen=True)
class Admitted:
    """A write that passed admission: what the ack says and what the intent stores."""

    tool: str
    agent_id: str
    summary: str  # the ack's first line
    payload: dict[str, Any]


def _frame(item: str, call_text: str) -> str:
    return f"{item}{FRAME_SEPARATOR}{call_text}"


def _utf8(text: str) -> int:
    return len(text.encode("utf-8"))


def _check_no_image_suffix(field: str, text: str) -> None:
    if has_image_suffix(text):
        raise ParameterError(
            f"{field} may not contain an image suffix ([image:<id>]); only "
            "lambo_derive_image builds one"
        )


def _event_time(args: Mapping[str, Any]) -> float | None:
    if "event_time" not in args or args["event_time"] is None:
        return None
    return parse_event_time("event_time", args["event_time"])


def _ref_strings(field: str, value: object, cap: int) -> list[str]:
    entries = check_list(field, value, cap, what="references")
    return [check_string(f"{field}[{i}]", entry) for i, entry in enumerate(entries)]


def _resolved(
    field: str,
    ref: str,
    scope: CallScope,
    cross: CrossSession | None = None,
    what: Literal["citations", "contradictions"] = "citations",
) -> dict[str, str]:
    """A depends_on / against reference fixed to one session concept.

    Read as ``references`` reads it, with the call's own texts in view: a reference
    written exactly as a concept this call creates names that concept, which cannot be
    cited ("matches nothing in this session"), not a session concept in another case;
    one that names a concept this call creates and a session concept, both in another
    case, names several. Under a repo_scope a scoped path may name it first (call_scope).
    """
    scoped = scope.cited(field, ref)
    if scoped is not None:
        return {"ref": ref, "node_id": scoped}
    graph: ConceptLookup = scope.lookup
    names: CallNames = scope.names
    match = match_reference(ref, graph)
    key = canonical_key(ref)
    if match.form == "text" and all(c.canonical_key != key for c in match.concepts):
        mine = names.new_in_any_case(ref)
        if any(canonical_key(n.content) == key for n in mine):
            raise refuse_no_match(field, ref)
        if mine and match.concepts:
            theirs = [Named(c.id, c.content) for c in match.concepts]
            raise refuse_case_variants(field, ref, theirs + mine, ids_accepted=True)
    check_reference(field, ref, match, cross, what=what)
    concept = resolve_reference(field, ref, graph)
    return {"ref": ref, "node_id": concept.id}


# --- lambo_derive ----------------------------------------------------------------


def admit_derive(
    args: object,
    *,
    session: str,
    graph: SessionGraph,
    embeds: bool,
    layer: str | None = None,
    cross: CrossSession | None = None,
) -> Admitted:
    """Validate and resolve a lambo_derive call.

    ``embeds`` is true when the session's concepts are embedded (a store with
    vector search under match_strategy hybrid): then every concept and every
    parent_of end must fit the embedding-text limit once framed with the
    call's text. ``layer`` names this session when it is a shared layer: then a bare
    relative path is refused (layer_paths). ``cross`` holds the other sessions'
    references (``cross_refs``).
    """
    call = check_arguments("lambo_derive", args, DERIVE_ARGS)
    agent_id = check_agent_id(require(call, "agent_id"))
    raw_concepts = check_list(
        "concepts", require(call, "concepts"), MAX_CONCEPTS_PER_DERIVE, what="concepts"
    )
    if not raw_concepts:
        raise ParameterError("concepts must hold at least one concept")
    event_time = _event_time(call)
    raw_pairs = check_list(
        "parent_of", call.get("parent_of") or [], MAX_PARENT_OF_PAIRS, what="pairs"
    )
    if len(raw_concepts) + len(raw_pairs) > MAX_CONCEPTS_AND_PAIRS:
        raise ParameterError(
            f"concepts and parent_of pairs together number {len(raw_concepts) + len(raw_pairs)}; "
            f"at most {MAX_CONCEPTS_AND_PAIRS} are accepted in one call"
        )
    check_scope(call.get("scope"), session, writing=True)  # null: omitted, as on reads
    repo = admitted_repo_scope(call)

    concepts: list[dict[str, Any]] = []
    total_depends = total_against = 0
    for i, raw in enumerate(raw_concepts):
        where = f"concepts[{i}]."
        item = check_arguments("lambo_derive", raw, CONCEPT_ARGS, where=where)
        content = check_string(f"{where}content", require(item, "content", where=where))
        _check_no_image_suffix(f"{where}content", content)
        ctype = check_concept_type(
            f"{where}concept_type", require(item, "concept_type", where=where)
        )
        depends = _ref_strings(
            f"{where}depends_on", item.get("depends_on") or [], MAX_REFS_PER_CONCEPT
        )
        against = _ref_strings(f"{where}against", item.get("against") or [], MAX_REFS_PER_CONCEPT)
        total_depends += len(depends)
        total_against += len(against)
        concepts.append(
            {
                "content": content,
                "key": canonical_key(content),
                "type": ctype.value,
                "depends_on": depends,
                "against": against,
            }
        )
    if total_depends > MAX_REFS_PER_CALL:
        raise ParameterError(
            f"depends_on holds {total_depends} references across the call; "
            f"at most {MAX_REFS_PER_CALL} per call are accepted"
        )
    if total_against > MAX_REFS_PER_CALL:
        raise ParameterError(
            f"against holds {total_against} references across the call; "
            f"at most {MAX_REFS_PER_CALL} per call are accepted"
        )

    pairs = read_pairs("lambo_derive", raw_pairs)

    if embeds:
        _check_embedding_text(concepts, pairs)

    if layer is not None:
        refuse_relative_in_derive(layer, repo, concepts, pairs)

    # The call's texts in the order the write applies them: its concepts, then each pair.
    scope = CallScope(graph, repo)
    for concept in concepts:
        scope.place_own(concept["content"], ConceptType(concept["type"]))
    _resolve_derive_references(concepts, graph, scope, cross)
    _check_hierarchy(pairs, scope, graph)

    n = len(concepts)
    return Admitted(
        tool="lambo_derive",
        agent_id=agent_id,
        summary=(
            f"accepted {n} concept(s) for background write; validated and ordered, not yet applied"
        ),
        payload=scoped_payload(
            {"kind": "derive", "event_time": event_time, "concepts": concepts, "parent_of": pairs},
            repo,
        ),
    )


def read_pairs(tool: str, raw_pairs: list[Any]) -> list[dict[str, str]]:
    """A write's parent_of entries (already a bounded list), each ``{parent, child}``
    checked; an end may name an image concept by its content (spec: "Referring to an
    image concept")."""
    pairs: list[dict[str, str]] = []
    for i, raw in enumerate(raw_pairs):
        where = f"parent_of[{i}]."
        pair = check_arguments(tool, raw, PARENT_OF_ARGS, where=where)
        parent = check_string(f"{where}parent", require(pair, "parent", where=where))
        child = check_string(f"{where}child", require(pair, "child", where=where))
        check_image_reference(f"{where}parent", parent)
        check_image_reference(f"{where}child", child)
        pairs.append({"parent": parent, "child": child})
    return pairs


def call_text(contents: list[str]) -> str:
    """The call's text every concept is framed with: its concepts joined by '; '."""
    return CALL_TEXT_SEPARATOR.join(contents)


def _check_embedding_text(concepts: list[dict[str, Any]], pairs: list[dict[str, str]]) -> None:
    text = call_text([c["content"] for c in concepts])
    size = _utf8(text)
    if size > MAX_STRING_BYTES:
        raise ParameterError(
            f"the whole call's text (its concepts joined by '; ') is {size} bytes; the "
            f"embedding-text limit is {MAX_STRING_BYTES} bytes; split the call"
        )
    for i, concept in enumerate(concepts):
        framed = _utf8(_frame(concept["content"], text))
        if framed > MAX_STRING_BYTES:
            raise ParameterError(
                f"concepts[{i}].content framed with the call's text is {framed} bytes; the "
                f"embedding-text limit is {MAX_STRING_BYTES} bytes (a concept sent alone may "
                "be at most 8189 bytes); shorten it or split the call"
            )
    for i, pair in enumerate(pairs):
        for end in ("parent", "child"):
            framed = _utf8(_frame(pair[end], text))
            if framed > MAX_STRING_BYTES:
                raise ParameterError(
                    f"parent_of[{i}].{end} framed with the call's text is {framed} bytes; the "
                    f"embedding-text limit is {MAX_STRING_BYTES} bytes; shorten it or split "
                    "the call"
                )


def _resolve_derive_references(
    concepts: list[dict[str, Any]],
    graph: SessionGraph,
    scope: CallScope,
    cross: CrossSession | None = None,
) -> None:
    """Fix every depends_on / against to one node id, refusing the spec's cases."""
    dependency_pairs: list[tuple[str, str]] = []
    pair_fields: list[tuple[str, str]] = []
    for i, concept in enumerate(concepts):
        existing = scope.ids_of(concept["content"], ConceptType(concept["type"]))
        self_ids = set(existing)
        me = existing[0] if existing else f"new:{concept['key']}"
        cited: list[dict[str, str]] = []
        for j, ref in enumerate(concept["depends_on"]):
            field = f"concepts[{i}].depends_on[{j}]"
            resolved = _resolved(field, ref, scope, cross)
            if resolved["node_id"] in self_ids:
                raise refuse_self_reference(field, ref)
            cited.append(resolved)
            dependency_pairs.append((me, resolved["node_id"]))
            pair_fields.append((field, ref))
        contradicted: list[dict[str, str]] = []
        cited_ids = {c["node_id"] for c in cited}
        for j, ref in enumerate(concept["against"]):
            field = f"concepts[{i}].against[{j}]"
            resolved = _resolved(field, ref, scope, cross, "contradictions")
            if resolved["node_id"] in self_ids:
                raise refuse_self_reference(field, ref)
            if resolved["node_id"] in cited_ids:
                raise refuse_cited_and_contradicted(field, ref)
            contradicted.append(resolved)
        concept["depends_on"] = cited
        concept["against"] = contradicted
    loop = graph.batch_closes_cycle(dependency_pairs, (EdgeType.DEPENDENCY,))
    if loop is not None:
        raise refuse_cycle(*pair_fields[loop])


CAUSAL_EDGES = (EdgeType.PRODUCES, EdgeType.MODIFIES, EdgeType.DEPENDENCY)


def check_hierarchy_acyclic(graph: SessionGraph, pairs: list[tuple[str, str]]) -> None:
    """Refuse (parent, child) pairs that would close a Hierarchical cycle, at admission and
    again when the write is applied (a write applied in between may have closed one)."""
    if graph.batch_closes_cycle(pairs, (EdgeType.HIERARCHICAL,)) is not None:
        raise StoreError(
            "parent_of would close a Hierarchical cycle (the hierarchy must stay acyclic)"
            + NOTHING_WRITTEN
        )


def check_action_acyclic(graph: SessionGraph, pairs: list[tuple[str, str]]) -> None:
    """Refuse an action's Causal and Dependency edges that would close a cycle (both times)."""
    if any(a == b for a, b in pairs) or graph.batch_closes_cycle(pairs, CAUSAL_EDGES) is not None:
        raise StoreError(
            "record_action would close a Causal or Dependency cycle (produces, modifies and "
            "depends_on must stay acyclic)" + NOTHING_WRITTEN
        )


def _check_hierarchy(pairs: list[dict[str, str]], scope: CallScope, graph: SessionGraph) -> None:
    """Name every parent_of end (refusing one in several cases) and refuse a cycle."""
    ids = [
        scope.pair(f"parent_of[{i}].", p["parent"], p["child"], scope.land)
        for i, p in enumerate(pairs)
    ]
    check_hierarchy_acyclic(graph, ids)


# --- lambo_record_action ---------------------------------------------------------


def admit_action(
    args: object,
    *,
    session: str,
    graph: SessionGraph,
    layer: str | None = None,
    cross: CrossSession | None = None,
) -> Admitted:
    """Validate and resolve a lambo_record_action call (``layer``, ``cross``: as
    ``admit_derive``'s)."""
    call = check_arguments("lambo_record_action", args, ACTION_ARGS)
    agent_id = check_agent_id(require(call, "agent_id"))
    action = check_string("action", require(call, "action"))
    _check_no_image_suffix("action", action)
    event_time = _event_time(call)
    against_refs = _ref_strings("against", call.get("against") or [], MAX_ACTION_AGAINST)
    targets: dict[str, list[str]] = {}
    total = 0
    for field in ("produces", "modifies", "depends_on"):
        entries = check_list(field, call.get(field) or [], MAX_ACTION_TARGETS, what="entries")
        total += len(entries)
        if total > MAX_ACTION_TARGETS:
            raise ParameterError(
                f"produces, modifies and depends_on hold more than {MAX_ACTION_TARGETS} "
                f"entries combined; at most {MAX_ACTION_TARGETS} are accepted"
            )
        texts = [check_string(f"{field}[{i}]", e) for i, e in enumerate(entries)]
        for i, text in enumerate(texts):
            check_image_reference(f"{field}[{i}]", text)
        targets[field] = texts
    check_scope(call.get("scope"), session, writing=True)  # null: omitted, as on reads
    repo = admitted_repo_scope(call)
    if layer is not None:
        refuse_relative_in_action(layer, repo, action, targets)

    # The call's texts in the order the write applies them: the action, its produces and
    # modifies, then its depends_on.
    scope = CallScope(graph, repo)
    action_ids = set(scope.ids_of(action, ConceptType.RESOURCE))
    me = scope.place_own(action, ConceptType.RESOURCE)
    pairs: list[tuple[str, str]] = []
    for field in ("produces", "modifies"):
        for i, text in enumerate(targets[field]):
            pairs.append((me, scope.place_target(f"{field}[{i}]", text)))
    depends: list[dict[str, Any]] = []
    for i, ref in enumerate(targets["depends_on"]):
        dependency, node_id = _action_dependency(f"depends_on[{i}]", ref, scope, cross)
        depends.append(dependency)
        pairs.append((me, node_id))
    depends_ids = {d["node_id"] for d in depends if d.get("node_id")}
    against: list[dict[str, str]] = []
    for i, ref in enumerate(against_refs):
        field = f"against[{i}]"
        resolved = _resolved(field, ref, scope, cross, "contradictions")
        if resolved["node_id"] in action_ids:
            raise refuse(field, ref, "names the action itself")
        if resolved["node_id"] in depends_ids:
            raise refuse(field, ref, "is both cited and contradicted by the action")
        against.append(resolved)

    # Causal (produces, modifies) and Dependency edges from the action must stay acyclic.
    check_action_acyclic(graph, pairs)

    return Admitted(
        tool="lambo_record_action",
        agent_id=agent_id,
        summary=(
            f"accepted action '{show_safely(action)}' for background write; validated and "
            "ordered, not yet applied"
        ),
        payload=scoped_payload(
            {
                "kind": "action",
                "event_time": event_time,
                "action": action,
                "produces": targets["produces"],
                "modifies": targets["modifies"],
                "depends_on": depends,
                "against": against,
            },
            repo,
        ),
    )


def _action_dependency(
    field: str, ref: str, scope: CallScope, cross: CrossSession | None = None
) -> tuple[dict[str, Any], str]:
    """A record_action depends_on entry, and the node id (or placeholder) it lands on.

    A concept's hyphenated id cites it; an interaction's id is refused. Text names a
    concept as ``call_names`` reads it (as written, else the one concept in any case;
    several in any case are refused). 8 hex characters whose text names no concept
    cite the one concept their id starts with (refused if several do). Any other
    entry is created as an Entity (under a repo_scope, text that reads as a file or a
    directory as a scoped path, and an existing scoped path comes first: call_scope). Only
    a session concept is fixed by node id; one this call creates is named again by its
    text when the write is applied.
    """
    graph: ConceptLookup = scope.lookup
    match = match_reference(ref, graph)
    if match.interaction:
        raise refuse_interaction(field, ref)
    key = canonical_key(ref)
    if match.form == "node_id":
        return {"ref": ref, "node_id": match.concepts[0].id, "key": key}, match.concepts[0].id
    new = {"ref": ref, "node_id": None, "key": key, "type": ConceptType.ENTITY.value}
    inferred = scope.infer(field, ref, ids_accepted=True)
    found = inferred.named
    if found is not None:
        scope.land(ref, inferred)
        if found.new:
            return new, found.node_id
        return {"ref": ref, "node_id": found.node_id, "key": key}, found.node_id
    if match.form == "short_id" and len(match.concepts) > 1:
        raise refuse_several(field, ref, match.concepts, full_ids=True)
    if match.form == "short_id" and match.concepts:
        return {"ref": ref, "node_id": match.concepts[0].id, "key": key}, match.concepts[0].id
    check_action_entry(field, ref, cross)  # names nothing here: another session's?
    if inferred.key is not None:
        new["type"] = ConceptType.RESOURCE.value
    return new, scope.land(ref, inferred)
