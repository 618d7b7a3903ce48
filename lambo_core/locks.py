"""lambo_reserve: advisory soft locks on a session's concepts, held in this process's RAM.

``LockTable`` keys each lock by node id under the caller's agent_id, with an expiry
read from the session's clock; ``holder`` tells a recall whose lock a node is under.
Spec: lambo_reserve, Errors ("A lock another agent holds"), Limits.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .args import check_arguments, check_bool, check_int, check_scope, require
from .clock import Clock
from .errors import ConflictError, ParameterError, ReferenceRefused
from .references import is_node_id_form, is_short_id_form
from .text import check_agent_id, check_string, format_rfc3339, show_safely

if TYPE_CHECKING:
    from .session import Session

TOOL = "lambo_reserve"
ARGUMENTS = ("agent_id", "node_id", "ttl_seconds", "release", "scope")
TTL_RANGE = (1, 3600)
DEFAULT_TTL_S = 30
NODE_ID_MAX_BYTES = 128  # a hyphenated UUID is 36; anything much longer is not one
SHOWN_CONTENT_CHARS = 80
_SWEEP_EVERY = 256  # reservations between sweeps of expired entries


def show_expiry(expires_at: float) -> str:
    """The expiry as RFC 3339, rounded up to the second: the node is free from then on."""
    return format_rfc3339(math.ceil(expires_at))


@dataclass(frozen=True)
class Reservation:
    """One live soft lock."""

    node_id: str
    agent_id: str
    expires_at: float  # UTC epoch seconds, from the session's clock


@dataclass(frozen=True)
class ReserveOutcome:
    """What ``LockTable.reserve`` did: the lock now held, and whether it was already held."""

    reservation: Reservation
    extended: bool


class LockTable:
    """One session's soft locks, in RAM, keyed by node id. Thread-safe."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._held: dict[str, Reservation] = {}
        self._since_sweep = 0

    def __len__(self) -> int:
        """Live locks (expired ones are not counted)."""
        now = self._clock.now()
        with self._lock:
            return sum(1 for r in self._held.values() if r.expires_at > now)

    def holder(self, node_id: str) -> Reservation | None:
        """The live lock on ``node_id``, or None when nobody holds it now."""
        now = self._clock.now()
        with self._lock:
            return self._live(node_id, now)

    def _live(self, node_id: str, now: float) -> Reservation | None:
        held = self._held.get(node_id)
        if held is None:
            return None
        if held.expires_at <= now:
            del self._held[node_id]
            return None
        return held

    def _sweep(self, now: float) -> None:
        self._since_sweep += 1
        if self._since_sweep < _SWEEP_EVERY:
            return
        self._since_sweep = 0
        for node_id in [n for n, r in self._held.items() if r.expires_at <= now]:
            del self._held[node_id]

    def reserve(self, node_id: str, agent_id: str, ttl_seconds: float) -> ReserveOutcome:
        """Take or extend the lock on ``node_id`` for ``agent_id``.

        Raises ``ConflictError`` while another agent_id holds it.
        """
        now = self._clock.now()
        with self._lock:
            self._sweep(now)
            held = self._live(node_id, now)
            if held is not None and held.agent_id != agent_id:
                raise conflict(held)
            expires_at = now + ttl_seconds
            if held is not None:
                expires_at = max(expires_at, held.expires_at)
            reservation = Reservation(node_id, agent_id, expires_at)
            self._held[node_id] = reservation
            return ReserveOutcome(reservation, extended=held is not None)

    def release(self, node_id: str, agent_id: str) -> bool:
        """Release ``agent_id``'s lock on ``node_id``; False when nobody held it.

        Raises ``ConflictError`` while another agent_id holds it.
        """
        now = self._clock.now()
        with self._lock:
            held = self._live(node_id, now)
            if held is None:
                return False
            if held.agent_id != agent_id:
                raise conflict(held)
            del self._held[node_id]
            return True


def conflict(held: Reservation) -> ConflictError:
    """The refusal for a node another agent holds: who, until when, and nothing changed."""
    return ConflictError(
        f'node {held.node_id} is reserved by agent "{held.agent_id}" until '
        f"{show_expiry(held.expires_at)}; nothing was reserved or released. Wait until then, "
        "or work on another node"
    )


# =====================================================================================
# the tool
# =====================================================================================


@dataclass(frozen=True)
class ReserveRequest:
    agent_id: str
    node_id: str
    ttl_seconds: int
    release: bool


def parse_request(session: Session, args: object) -> ReserveRequest:
    """Validate lambo_reserve's arguments in the spec's table order."""
    checked = check_arguments(TOOL, args, ARGUMENTS)
    agent_id = check_agent_id(require(checked, "agent_id"))
    raw = check_string("node_id", require(checked, "node_id"), max_bytes=NODE_ID_MAX_BYTES)
    if not is_node_id_form(raw):
        hint = (
            "; a short id is not enough here, use the full node_id from lambo_recall's hits "
            "or lambo_inspect"
            if is_short_id_form(raw)
            else "; name the concept by the node_id lambo_recall or lambo_inspect gives"
        )
        raise ParameterError(
            "node_id must be a full node id, a hyphenated UUID such as "
            f"478416c2-0000-4000-8000-000000000000{hint}"
        )
    ttl = DEFAULT_TTL_S
    if checked.get("ttl_seconds") is not None:
        ttl = check_int("ttl_seconds", checked["ttl_seconds"], *TTL_RANGE)
    release = False
    if checked.get("release") is not None:
        release = check_bool("release", checked["release"])
    check_scope(checked.get("scope"), session.name)
    return ReserveRequest(agent_id, raw.strip().lower(), ttl, release)


def _refuse_node(node_id: str, why: str, *, release: bool) -> ReferenceRefused:
    done = "released" if release else "reserved"
    return ReferenceRefused(f"node_id {node_id} {why}; nothing was {done}")


def run_reserve(
    session: Session, args: Mapping[str, Any], table: LockTable
) -> tuple[str, dict[str, Any]]:
    """Answer one lambo_reserve call: (text, structuredContent)."""
    request = parse_request(session, args)
    node_id = request.node_id
    with session.index.lock:
        graph = session.index.graph
        concept = graph.concept(node_id)
        is_interaction = concept is None and graph.is_interaction(node_id)
    content = show_safely(concept.content, SHOWN_CONTENT_CHARS) if concept is not None else None
    named = f'{node_id} ("{content}")' if content is not None else node_id
    base: dict[str, Any] = {"node_id": node_id, "agent_id": request.agent_id}

    if request.release:
        if concept is None:
            held = table.holder(node_id)
            if held is None or held.agent_id != request.agent_id:
                # Only a lock the caller holds on a since-removed concept is released here.
                why = (
                    "is an interaction's id, not a concept's"
                    if is_interaction
                    else "matches no concept in this session"
                )
                raise _refuse_node(node_id, why, release=True)
        if not table.release(node_id, request.agent_id):
            text = f"{named} was not reserved; nothing to release"
            return text, {**base, "released": False, "was_held": False}
        text = f'released {named}, held under agent_id "{request.agent_id}"'
        return text, {**base, "released": True, "was_held": True}

    if concept is None:
        why = (
            "is an interaction's id, not a concept's"
            if is_interaction
            else "matches no concept in this session"
        )
        raise _refuse_node(node_id, why, release=False)
    outcome = table.reserve(node_id, request.agent_id, request.ttl_seconds)
    until = show_expiry(outcome.reservation.expires_at)
    verb = "extended the reservation of" if outcome.extended else "reserved"
    text = (
        f'{verb} {named} for agent_id "{request.agent_id}" until {until} '
        f"(ttl {request.ttl_seconds} s). The lock is advisory and held in memory only: "
        "release it with release = true when the edit is done"
    )
    return text, {
        **base,
        "reserved": True,
        "extended": outcome.extended,
        "ttl_seconds": request.ttl_seconds,
        "expires_at": until,
    }
