"""A forget as a write: admitted against the graph, acked once its intent is stored, applied
on the session's writer thread in order with the writes around it.

Admission reads each reference as every tool does (``references.match_reference``: a node
id, an 8-hex short id, the concept's exact text) and refuses the whole call, removing
nothing, when any reference names no concept, several, an interaction, or a Canonical
concept without ``force``. The intent stores the resolved node ids only, never the text a
reference gave. Applying it re-checks each id (the daemon may have promoted one
meanwhile) and refuses while an older write is still owed a replay, then the store removes
the concepts and redacts the rows that held their text in one transaction (``forget.py``)
and the RAM index follows, so the next recall no longer finds them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..admission import Admitted
from ..errors import (
    ConflictError,
    LamboError,
    ParameterError,
    ReferenceRefused,
    StoreError,
    internal_fault,
)
from ..forget import FORGET_TOOL, ForgetRequest
from ..health import StoreHealth
from ..index.graph import SessionGraph
from ..model import Status, WriteIntent, short_id
from ..references import describe_candidates, match_reference
from ..session import Session
from ..store.base import FencedOut, IntentNotPending
from ..text import check_agent_id, check_string, show_safely
from .faults import STORE_REFUSED_WRITE, NotPending, TransientFailure

log = logging.getLogger(__name__)

#: references one forget may name (a larger cleanup is several calls)
MAX_FORGET_IDS = 1000
_ARGUMENTS = ("agent_id", "ids", "force")
_SHOWN_REF_CHARS = 80
NOTHING_REMOVED = "; nothing was removed"


def _refs(args: Mapping[str, Any]) -> list[str]:
    ids = args.get("ids")
    if not isinstance(ids, list) or not ids:
        raise ParameterError("ids must be a non-empty array of concept ids")
    if len(ids) > MAX_FORGET_IDS:
        raise ParameterError(f"ids may name at most {MAX_FORGET_IDS} concepts in one forget")
    return [check_string(f"ids[{i}]", ref) for i, ref in enumerate(ids)]


def _problem(ref: str, graph: SessionGraph, force: bool) -> tuple[str | None, str | None]:
    """(the node id ``ref`` names, why it cannot be forgotten): exactly one is None."""
    match = match_reference(ref, graph)
    shown = f'"{show_safely(ref, _SHOWN_REF_CHARS)}"'
    if match.interaction:
        return None, f"{shown} is an interaction's id, not a concept's"
    if not match.concepts:
        return None, f"{shown} names no concept in this session"
    if len(match.concepts) > 1:
        listing = describe_candidates(match.concepts, full_ids=match.form == "short_id")
        how = "its full node id" if match.form == "short_id" else "its id"
        return None, f"{shown} matches several: {listing}; name one by {how}"
    concept = match.concepts[0]
    if concept.status is Status.CANONICAL and not force:
        return None, (
            f"{shown} is Canonical ({short_id(concept.id)}); forgetting a Canonical concept "
            "needs --force"
        )
    return concept.id, None


def admit_forget(args: object, graph: SessionGraph) -> Admitted:
    """A forget that names only concepts it may remove (call under the index lock)."""
    if not isinstance(args, Mapping):
        raise ParameterError(f"the arguments of {FORGET_TOOL} must be an object")
    unknown = [k for k in args if k not in _ARGUMENTS]
    if unknown:
        raise ParameterError(f"unknown argument {show_safely(str(unknown[0]), 64)}")
    agent = check_agent_id(args.get("agent_id"))
    force = args.get("force", False)
    if not isinstance(force, bool):
        raise ParameterError("force must be true or false")
    node_ids: list[str] = []
    problems: list[str] = []
    for ref in _refs(args):
        node_id, problem = _problem(ref, graph, force)
        if problem is not None:
            problems.append(problem)
        elif node_id not in node_ids:
            node_ids.append(node_id)  # type: ignore[arg-type]  # set when no problem
    if problems:
        raise ReferenceRefused("; ".join(problems) + NOTHING_REMOVED)
    shown = ", ".join(short_id(n) for n in node_ids)
    return Admitted(
        tool=FORGET_TOOL,
        agent_id=agent,
        summary=f"forget of {len(node_ids)} concept(s) accepted: {shown}",
        payload={"kind": "forget", "node_ids": node_ids, "force": force},
    )


#: receipts an owed-replay refusal names
_SHOWN_OWED = 5


def _refuse_behind_owed_writes(session: Session, intent: WriteIntent) -> None:
    """A write admitted before the forget and still pending (a transient failure kept it
    for a replay) would land the forgotten text again once replayed after the forget, and
    which text it will land on is only known then: the forget waits for it, refused."""
    owed = [
        i.receipt_id
        for i in session.store.pending_intents(session.name)
        if i.seq < intent.seq and i.receipt_id != intent.receipt_id
    ]
    if owed:
        shown = ", ".join(owed[:_SHOWN_OWED]) + (", …" if len(owed) > _SHOWN_OWED else "")
        raise ConflictError(
            f"{len(owed)} earlier write(s) of this session are still owed a replay ({shown}); "
            "forget once they are applied" + NOTHING_REMOVED
        )


def plan_forget(session: Session, intent: WriteIntent) -> ForgetRequest:
    """What the forget removes now (call under the index lock): refused while an older
    write is owed a replay; ids gone meanwhile are skipped; one that turned Canonical since
    its admission refuses the whole forget."""
    _refuse_behind_owed_writes(session, intent)
    payload = intent.payload
    graph = session.index.graph
    force = bool(payload.get("force"))
    ids: list[str] = []
    contents: list[str] = []
    for node_id in payload.get("node_ids", []):
        concept = graph.concept(str(node_id))
        if concept is None:
            continue  # collected meanwhile: nothing left to remove
        if concept.status is Status.CANONICAL and not force:
            raise ConflictError(
                f"concept {short_id(concept.id)} became Canonical after the forget was "
                "accepted; forgetting it needs --force" + NOTHING_REMOVED
            )
        ids.append(concept.id)
        contents.append(concept.content)
    return ForgetRequest(
        session=session.name,
        agent_id=intent.agent_id,
        occurred_at=session.clock.now(),
        node_ids=tuple(ids),
        contents=tuple(contents),
        forced=force,
        receipt_id=intent.receipt_id,
    )


def apply_forget(session: Session, intent: WriteIntent, health: StoreHealth) -> dict[str, Any]:
    """Apply one forget intent on the writer thread; its receipt's outcome.

    Raises as the pipeline's write path does: ``NotPending`` (settled already),
    ``FencedOut``, ``TransientFailure`` for a store refusal (the intent is kept and the
    session degraded), another ``LamboError`` for a forget refused by its rules; any
    other fault comes out as an internal fault."""
    try:
        with session.index.lock:
            request = plan_forget(session, intent)
        try:
            edges = session.store.forget(request)
        except IntentNotPending:
            raise NotPending from None
        except FencedOut:
            raise
        except StoreError as exc:
            health.refused("a forget", exc.detail or exc.message)
            raise TransientFailure(STORE_REFUSED_WRITE) from None
    except (NotPending, LamboError):
        raise
    except Exception as exc:  # a fault: the forget fails, the writer lives on
        log.exception("applying forget %s failed", intent.receipt_id)
        raise internal_fault(repr(exc)) from exc
    health.wrote()
    session.index.remove_concepts(request.node_ids)  # recall stops finding them now
    return request.outcome(edges)
