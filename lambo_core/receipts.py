"""Write receipts: the in-process registry of what happened to each acked write.

A write is acked before it is applied, so the ack carries a receipt id instead
of node ids. This module issues those ids, enforces the queue's admission
bounds (64 outstanding per agent, 1024 per server), records each write's
outcome when the apply worker settles it, and hands outcomes back three ways:
``lookup`` (lambo_stats with ``receipt``), ``wait`` (the same with ``wait_ms``)
and ``take_piggyback`` (the ``write receipts:`` block on the agent's next
response).

The durable intents behind receipts live in the store and belong to the writes
layer; ids issued by an earlier process are answered through the
``foreign_lookup`` hook.

Threading: the apply worker thread settles, the event loop issues and reads.
Everything shared sits behind one lock; one condition on that lock wakes
waiters when anything settles.
"""

from __future__ import annotations

import enum
import logging
import re
import secrets
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from lambo_core.clock import Clock, SystemClock

from .errors import LamboError
from .limits import WAIT_MS_MAX
from .model import IntentState

if TYPE_CHECKING:
    from .store.base import Store

log = logging.getLogger(__name__)

# Spec: Limits table and lambo_stats. Fixed shares, never measured.
LANE_BOUND = 64
BOUND = 1024
RETAIN_SECONDS = 300.0
RETAIN_MAX = 4096
# Owners of receipts already let go, so an expired receipt stays its owner's. Past this
# many the durable intent (which names its agent and session) answers instead.
EVICTED_OWNERS_MAX = 16_384
SERVER_WAIT_BOUND = 16
AGENT_WAIT_BOUND = 8
PIGGYBACK_MAX = 8

# "lwr1." + 16 hex + "." + <=16 hex + "." + <=20 digits is at most 59 chars.
MAX_RECEIPT_ID_LEN = 64
_ID_RE = re.compile(r"lwr1\.([0-9a-f]{16})\.([0-9a-f]{1,16})\.([1-9][0-9]{0,19})")


class ReceiptState(enum.Enum):
    """The twelve answers a receipt can give; none of them is "unknown"."""

    APPLIED = "applied"
    PENDING = "pending"
    PENDING_REPLAY = "pending_replay"
    FAILED = "failed"
    INTENT_DURABLE = "intent_durable"
    CLOSE_UNFLUSHED = "close_unflushed"
    APPLIED_AFTER_RESTART = "applied_after_restart"
    DROPPED = "dropped"
    EXPIRED = "expired"
    RESTART_LOST = "restart_lost"
    NEVER_ISSUED = "never_issued"
    FORBIDDEN = "forbidden"


# Details a model can act on; the writes layer usually supplies a richer one
# (the applied summary, the failure's reason) when it settles.
DEFAULT_DETAILS: Mapping[ReceiptState, str] = {
    ReceiptState.APPLIED: "applied; recall finds it",
    ReceiptState.PENDING: "admitted, not yet applied; ask again",
    ReceiptState.PENDING_REPLAY: (
        "admitted by an earlier server on this session and recorded as a durable intent, "
        "still owed a replay behind a backlog replayed one write at a time; "
        "ask again, and recall rather than re-deriving"
    ),
    ReceiptState.FAILED: "attempted and rejected; nothing was written",
    ReceiptState.INTENT_DURABLE: (
        "the session closed before this write was applied and its final flush completed, "
        "so the write is kept as a durable intent; the next server on this session "
        "re-attempts it in the order you sent it; ask about this receipt there"
    ),
    ReceiptState.CLOSE_UNFLUSHED: (
        "the session closed before this write was applied and could not complete its "
        "final flush; the write may or may not have been saved as an intent; "
        "recall before re-deriving"
    ),
    ReceiptState.APPLIED_AFTER_RESTART: "applied across a restart; recall finds the concepts",
    ReceiptState.DROPPED: (
        "never attempted, the queue was full when you were acked; nothing was written"
    ),
    ReceiptState.EXPIRED: (
        "this server issued the receipt and no longer holds its outcome "
        "(receipts are kept for 300 seconds); recall to see whether the write is there"
    ),
    ReceiptState.RESTART_LOST: (
        "a different server process issued this receipt and no durable record of it "
        "survived; the write may or may not have been applied before that process ended; "
        "recall before re-deriving"
    ),
    ReceiptState.NEVER_ISSUED: "this server has never handed out that id",
    ReceiptState.FORBIDDEN: (
        "this receipt belongs to a different agent or session; ask from the agent_id "
        "and session that made the write"
    ),
}

DROPPED_LANE_DETAIL = (
    f"nothing was written: your lane of {LANE_BOUND} outstanding writes is full "
    "(write_queue_lane_bound); let some of your writes settle, then send this one again"
)
DROPPED_BOUND_DETAIL = (
    f"nothing was written: the server's queue of {BOUND} outstanding writes is full "
    "(write_queue_bound); send this one again shortly"
)
DROPPED_CLOSING_DETAIL = (
    "nothing was written: the session is shutting down and takes no new writes; "
    "send this one again to the next server on this session"
)
_MALFORMED_DETAIL = (
    "this server has never handed out that id; it is not in the form a lambo receipt id takes"
)
_WITHDRAWN_DETAIL = (
    "this server has never handed out that id; that write was refused before its ack"
)

# States the apply worker / shutdown may settle one of our own receipts into.
_SETTLE_STATES = frozenset(
    {
        ReceiptState.APPLIED,
        ReceiptState.FAILED,
        ReceiptState.INTENT_DURABLE,
        ReceiptState.CLOSE_UNFLUSHED,
    }
)
# A retried shutdown may turn one close outcome into the other (spec: a retried
# flush that completes changes close_unflushed to intent_durable).
_CLOSE_STATES = frozenset({ReceiptState.INTENT_DURABLE, ReceiptState.CLOSE_UNFLUSHED})
_RESERVED_KEYS = frozenset({"receipt", "state", "detail"})

ForeignLookup = Callable[[str, str, str], tuple[ReceiptState, str, dict[str, Any]] | None]


@dataclass(frozen=True)
class ReceiptView:
    """What a caller is told about one receipt.

    ``receipt_id`` is None only for text that is not a lambo receipt id at all:
    such input is never echoed back.
    """

    receipt_id: str | None
    state: ReceiptState
    detail: str
    data: Mapping[str, Any] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        return self.state is not ReceiptState.PENDING


# The ack's receipt is the same value a lookup returns.
Receipt = ReceiptView


@dataclass(frozen=True)
class ReceiptStats:
    """Counters behind lambo_stats's write_queue_* keys."""

    bound: int
    lane_bound: int
    outstanding: int
    accepted: int
    applied: int
    failed: int
    deferred: int
    abandoned: int
    dropped: int
    dropped_closed: int
    receipts_retained: int
    waits: int

    def write_queue_keys(self) -> dict[str, int]:
        return {
            "write_queue_bound": self.bound,
            "write_queue_lane_bound": self.lane_bound,
            "write_queue_outstanding": self.outstanding,
            "write_queue_accepted": self.accepted,
            "write_queue_applied": self.applied,
            "write_queue_failed": self.failed,
            "write_queue_deferred": self.deferred,
            "write_queue_abandoned": self.abandoned,
            "write_queue_dropped": self.dropped,
            "write_queue_dropped_closed": self.dropped_closed,
            "receipts_retained": self.receipts_retained,
        }


@dataclass(eq=False)
class _Entry:
    receipt_id: str
    agent_id: str
    session: str
    tool: str
    issued_at: float
    state: ReceiptState = ReceiptState.PENDING
    detail: str = DEFAULT_DETAILS[ReceiptState.PENDING]
    data: dict[str, Any] = field(default_factory=dict)
    settled_at: float | None = None
    # True once the owner has seen the settled outcome (piggyback, lookup or
    # the ack itself for a dropped receipt), so it never rides twice.
    delivered: bool = False

    def view(self) -> ReceiptView:
        return ReceiptView(self.receipt_id, self.state, self.detail, dict(self.data))


@dataclass(frozen=True)
class _Expired:
    """One of our ids whose outcome and owner this book has both let go of."""

    receipt_id: str


@dataclass(eq=False)
class _ReplayTicket:
    """A wait on a receipt an earlier server issued, holding the same two slots."""

    receipt_id: str
    agent_id: str
    session: str
    timeout_s: float
    cancelled: bool = False
    released: bool = False


@dataclass(eq=False)
class _WaitTicket:
    """One wait holding a server slot and an agent slot until released."""

    entry: _Entry
    agent_id: str
    timeout_s: float
    cancelled: bool = False
    released: bool = False


def clamp_wait_ms(wait_ms: int | float) -> int:
    """wait_ms is clamped to 0..34000, never refused (negative is validated elsewhere)."""
    return int(min(max(wait_ms, 0), WAIT_MS_MAX))


def parse_receipt_id(text: str) -> tuple[str, str, int] | None:
    """``(nonce_hex, start_hex, seq)`` for a well-formed lambo receipt id, else None."""
    if not isinstance(text, str) or len(text) > MAX_RECEIPT_ID_LEN:
        return None
    match = _ID_RE.fullmatch(text.strip())
    if match is None:
        return None
    return match.group(1), match.group(2), int(match.group(3))


def _not_ours(receipt_id: str | None, state: ReceiptState, detail: str = "") -> ReceiptView:
    return ReceiptView(receipt_id, state, detail or DEFAULT_DETAILS[state])


class ReceiptBook:
    """Issues, settles, retains and reports this process's write receipts."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        foreign_lookup: ForeignLookup | None = None,
        nonce: int | None = None,
        lane_bound: int = LANE_BOUND,
        bound: int = BOUND,
        retain_seconds: float = RETAIN_SECONDS,
        retain_max: int = RETAIN_MAX,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
        self._foreign_lookup = foreign_lookup
        self._nonce = f"{secrets.randbits(64) if nonce is None else nonce:016x}"
        self._start_hex = f"{int(self._clock.now() * 1000):x}"
        self._prefix = f"lwr1.{self._nonce}.{self._start_hex}."
        self._lane_bound = lane_bound
        self._bound = bound
        self._retain_seconds = retain_seconds
        self._retain_max = retain_max

        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._seq = 0
        self._closing = False
        self._entries: dict[str, _Entry] = {}
        # Settled entries in settle order: eviction always takes from the front.
        self._settled: OrderedDict[str, _Entry] = OrderedDict()
        self._lanes: dict[str, int] = {}
        self._piggyback: dict[tuple[str, str], deque[str]] = {}
        self._waits = 0
        self._agent_waits: dict[str, int] = {}
        self._wait_limiter: anyio.CapacityLimiter | None = None
        # (agent, session) of receipts evicted from _entries, oldest first.
        self._evicted: OrderedDict[str, tuple[str, str]] = OrderedDict()
        # Bumped whenever this server settles a durable intent an earlier server left
        # owed, so a wait on a pending_replay receipt wakes and asks the store again.
        self._replays_settled = 0
        # Replays this server attempted that failed for a transient cause: the intent is
        # still owed (to the next server), but here its answer is failed, not a wait.
        # receipt id -> (agent, session, detail), oldest first.
        self._replays_failed: OrderedDict[str, tuple[str, str, str]] = OrderedDict()

        self._outstanding = 0
        self._accepted = 0
        self._applied = 0
        self._failed = 0
        self._deferred = 0
        self._abandoned = 0
        self._dropped = 0
        self._dropped_closed = 0

    # ------------------------------------------------------------------ ids

    @property
    def nonce(self) -> str:
        return self._nonce

    @property
    def start_hex(self) -> str:
        return self._start_hex

    @property
    def closing(self) -> bool:
        with self._lock:
            return self._closing

    def _is_ours(self, parsed: tuple[str, str, int]) -> bool:
        return parsed[0] == self._nonce and parsed[1] == self._start_hex

    # --------------------------------------------------------------- admit

    def issue(self, agent_id: str, session: str, tool: str) -> ReceiptView:
        """A pending receipt for an admitted write, or a dropped one naming the bound.

        Dropped is not an error: the call succeeds and its receipt says nothing
        was written. Dropped receipts are retained (they answer lookups) but
        count as delivered, since the ack itself showed the outcome.
        """
        with self._lock:
            self._evict_locked()
            self._seq += 1
            now = self._clock.now()
            entry = _Entry(self._prefix + str(self._seq), agent_id, session, tool, now)
            self._entries[entry.receipt_id] = entry
            refusal = None
            if self._closing:
                refusal = DROPPED_CLOSING_DETAIL
                self._dropped_closed += 1
            # The lane first: a single busy agent should hear about its own share.
            elif self._lanes.get(agent_id, 0) >= self._lane_bound:
                refusal = DROPPED_LANE_DETAIL
            elif self._outstanding >= self._bound:
                refusal = DROPPED_BOUND_DETAIL
            if refusal is not None:
                self._dropped += 1
                entry.delivered = True
                self._mark_settled_locked(entry, ReceiptState.DROPPED, refusal, None, now)
            else:
                self._accepted += 1
                self._outstanding += 1
                self._lanes[agent_id] = self._lanes.get(agent_id, 0) + 1
            self._evict_locked()
            return entry.view()

    def withdraw(self, receipt_id: str) -> bool:
        """Take back a pending receipt whose ack never went out (admission failed
        after issue, e.g. the intent could not be committed). Frees its lane slot;
        the id answers never_issued, which is the truth for the caller."""
        with self._cond:
            entry = self._entries.get(receipt_id)
            if entry is None or entry.state is not ReceiptState.PENDING:
                return False
            self._accepted -= 1
            self._release_lane_locked(entry)
            entry.delivered = True
            self._mark_settled_locked(
                entry, ReceiptState.NEVER_ISSUED, _WITHDRAWN_DETAIL, None, self._clock.now()
            )
            self._cond.notify_all()
            return True

    def close(self) -> None:
        """From now on every issue answers dropped (closing). Pending receipts stay
        pending until the shutdown settles them intent_durable or close_unflushed."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()

    # -------------------------------------------------------------- settle

    def settle(
        self,
        receipt_id: str,
        state: ReceiptState,
        detail: str | None = None,
        data: Mapping[str, Any] | None = None,
    ) -> bool:
        """Record a write's outcome, wake its waiters and queue it for piggyback.

        Returns False (and changes nothing) for an id this book does not hold
        pending, except that a close outcome may be replaced by the other one.
        """
        if state not in _SETTLE_STATES:
            raise ValueError(f"a receipt cannot be settled as {state.value}")
        with self._cond:
            entry = self._entries.get(receipt_id)
            if entry is None:
                return False
            if entry.state is ReceiptState.PENDING:
                self._release_lane_locked(entry)
            elif entry.state in _CLOSE_STATES and state in _CLOSE_STATES:
                self._count_locked(entry.state, -1)
            else:
                return False
            self._count_locked(state, +1)
            entry.delivered = False
            self._mark_settled_locked(entry, state, detail, data, self._clock.now())
            self._piggyback.setdefault((entry.agent_id, entry.session), deque()).append(
                entry.receipt_id
            )
            self._evict_locked()
            self._cond.notify_all()
            return True

    def _count_locked(self, state: ReceiptState, delta: int) -> None:
        if state is ReceiptState.APPLIED:
            self._applied += delta
        elif state is ReceiptState.FAILED:
            self._failed += delta
        elif state is ReceiptState.INTENT_DURABLE:
            self._deferred += delta
        elif state is ReceiptState.CLOSE_UNFLUSHED:
            self._abandoned += delta

    def _release_lane_locked(self, entry: _Entry) -> None:
        self._outstanding -= 1
        left = self._lanes[entry.agent_id] - 1
        if left:
            self._lanes[entry.agent_id] = left
        else:
            del self._lanes[entry.agent_id]

    def _mark_settled_locked(
        self,
        entry: _Entry,
        state: ReceiptState,
        detail: str | None,
        data: Mapping[str, Any] | None,
        now: float,
    ) -> None:
        entry.state = state
        entry.detail = detail or DEFAULT_DETAILS[state]
        entry.data = dict(data or {})
        entry.settled_at = now
        self._settled[entry.receipt_id] = entry
        self._settled.move_to_end(entry.receipt_id)

    # ----------------------------------------------------------- retention

    def _evict_locked(self) -> None:
        """Drop settled receipts older than 300 s, then the oldest settled while
        more than 4096 are held. Pending receipts are never evicted (at most
        1024 exist, so the count bound can always be met)."""
        now = self._clock.now()
        while self._settled:
            receipt_id, entry = next(iter(self._settled.items()))
            assert entry.settled_at is not None
            too_old = now - entry.settled_at >= self._retain_seconds
            if not too_old and len(self._entries) <= self._retain_max:
                break
            del self._settled[receipt_id]
            del self._entries[receipt_id]
            if entry.state is not ReceiptState.NEVER_ISSUED:
                self._evicted[receipt_id] = (entry.agent_id, entry.session)
                while len(self._evicted) > EVICTED_OWNERS_MAX:
                    self._evicted.popitem(last=False)
            self._trim_piggyback_locked((entry.agent_id, entry.session))

    def _trim_piggyback_locked(self, key: tuple[str, str]) -> None:
        # Queues are in settle order, like eviction, so dead ids collect at the front.
        queue = self._piggyback.get(key)
        if queue is None:
            return
        while queue and not self._deliverable_locked(queue[0]):
            queue.popleft()
        if not queue:
            del self._piggyback[key]

    def _deliverable_locked(self, receipt_id: str) -> bool:
        entry = self._entries.get(receipt_id)
        return entry is not None and not entry.delivered

    # -------------------------------------------------------------- answer

    def lookup(self, receipt_id: str, agent_id: str, session: str) -> ReceiptView:
        """What happened to one write, as its owner (agent and session) may ask.

        The owner reading a settled outcome consumes its piggyback; anyone else
        gets forbidden and consumes nothing.
        """
        begun = self._begin_wait(receipt_id, agent_id, session, 0)  # a wait of 0 never waits
        if isinstance(begun, str):
            return self._foreign(begun, agent_id, session)
        if isinstance(begun, _Expired):
            return self._expired(begun.receipt_id, agent_id, session)
        if isinstance(begun, _WaitTicket | _ReplayTicket):  # pragma: no cover
            raise AssertionError("a zero wait took a wait slot")
        return begun

    def _expired(self, receipt_id: str, agent_id: str, session: str) -> ReceiptView:
        """An id of ours let go so long ago that its owner is forgotten here: the durable
        intent names the owner (a dropped write has none, and nothing to reveal)."""
        answer = (
            self._foreign_lookup(receipt_id, agent_id, session) if self._foreign_lookup else None
        )
        if answer is not None and answer[0] is ReceiptState.FORBIDDEN:
            return _not_ours(receipt_id, ReceiptState.FORBIDDEN)
        return _not_ours(receipt_id, ReceiptState.EXPIRED)

    def replay_failed(self, receipt_id: str, agent_id: str, session: str, detail: str) -> None:
        """A replay this server attempted failed and left the intent owed: answer it
        failed here (nothing in this server retries it) rather than pending_replay."""
        with self._cond:
            self._replays_failed[receipt_id] = (agent_id, session, detail)
            while len(self._replays_failed) > RETAIN_MAX:
                self._replays_failed.popitem(last=False)

    def replay_settled(self) -> None:
        """This server applied (or failed) a durable intent an earlier server left owed:
        waits on pending_replay receipts ask the store again."""
        with self._cond:
            self._replays_settled += 1
            self._cond.notify_all()

    def _foreign(self, receipt_id: str, agent_id: str, session: str) -> ReceiptView:
        """An id another process issued: only the durable intents can answer.

        Called without the lock held: the hook may read the store.
        """
        with self._lock:
            failed_here = self._replays_failed.get(receipt_id)
        if failed_here is not None:
            if failed_here[:2] != (agent_id, session):
                return _not_ours(receipt_id, ReceiptState.FORBIDDEN)
            return ReceiptView(receipt_id, ReceiptState.FAILED, failed_here[2])
        answer = None
        if self._foreign_lookup is not None:
            answer = self._foreign_lookup(receipt_id, agent_id, session)
        if answer is None:
            return _not_ours(receipt_id, ReceiptState.RESTART_LOST)
        state, detail, data = answer
        return ReceiptView(receipt_id, state, detail or DEFAULT_DETAILS[state], dict(data))

    def _owned_locked(
        self, receipt_id: str, seq: int, agent_id: str, session: str
    ) -> _Entry | ReceiptView | _Expired:
        """Our own id: the entry if the caller owns it, else the answer to give (or, for an
        expired id whose owner this book no longer remembers, ``_Expired``: ask the store)."""
        entry = self._entries.get(receipt_id)
        if entry is None:
            if seq > self._seq:
                return _not_ours(receipt_id, ReceiptState.NEVER_ISSUED)
            # We issued it and have since let go of its outcome, not of whose it is.
            owner = self._evicted.get(receipt_id)
            if owner is None:
                return _Expired(receipt_id)
            if owner != (agent_id, session):
                return _not_ours(receipt_id, ReceiptState.FORBIDDEN)
            return _not_ours(receipt_id, ReceiptState.EXPIRED)
        if entry.state is ReceiptState.NEVER_ISSUED:
            return entry.view()
        if entry.agent_id != agent_id or entry.session != session:
            return _not_ours(receipt_id, ReceiptState.FORBIDDEN)
        return entry

    def _owner_view_locked(self, entry: _Entry) -> ReceiptView:
        if entry.state is not ReceiptState.PENDING:
            # The owner has now seen it: it must not also ride on the next response.
            entry.delivered = True
        return entry.view()

    def take_piggyback(
        self,
        agent_id: str,
        session: str,
        limit: int = PIGGYBACK_MAX,
        *,
        exclude: str | None = None,
    ) -> list[ReceiptView]:
        """Settled receipts this agent has not yet seen in this session, oldest
        settled first, at most ``limit``; each is handed out once.

        ``exclude`` stays queued: a write's own ack never carries its outcome (that
        rides on the next response, after the caller has read the ack).
        """
        out: list[ReceiptView] = []
        kept: list[str] = []
        with self._lock:
            self._evict_locked()
            key = (agent_id, session)
            queue = self._piggyback.get(key)
            while queue and len(out) < limit:
                receipt_id = queue.popleft()
                if receipt_id == exclude:
                    kept.append(receipt_id)
                    continue
                entry = self._entries.get(receipt_id)
                if entry is not None and not entry.delivered:
                    entry.delivered = True
                    out.append(entry.view())
            if queue is not None and kept:
                queue.extendleft(kept)
            if queue is not None:
                self._trim_piggyback_locked(key)
        return out

    def stats(self) -> ReceiptStats:
        with self._lock:
            self._evict_locked()
            return ReceiptStats(
                bound=self._bound,
                lane_bound=self._lane_bound,
                outstanding=self._outstanding,
                accepted=self._accepted,
                applied=self._applied,
                failed=self._failed,
                deferred=self._deferred,
                abandoned=self._abandoned,
                dropped=self._dropped,
                dropped_closed=self._dropped_closed,
                receipts_retained=len(self._entries),
                waits=self._waits,
            )

    # ---------------------------------------------------------------- wait

    def wait(self, receipt_id: str, agent_id: str, session: str, wait_ms: int) -> ReceiptView:
        """Block until the receipt settles or wait_ms (clamped to 0..34000) passes.

        Over 16 waits on the server or 8 for this agent_id, answers at once with
        the current state.
        """
        begun = self._begin_wait(receipt_id, agent_id, session, wait_ms)
        if isinstance(begun, ReceiptView):
            return begun
        if isinstance(begun, str):
            return self._foreign(begun, agent_id, session)
        if isinstance(begun, _Expired):
            return self._expired(begun.receipt_id, agent_id, session)
        if isinstance(begun, _ReplayTicket):
            return self._finish_replay_wait(begun)
        return self._finish_wait(begun)

    async def wait_async(
        self, receipt_id: str, agent_id: str, session: str, wait_ms: int
    ) -> ReceiptView:
        """``wait`` without blocking the event loop.

        The slot check runs here, so a wait over the bound answers at once; only
        the blocking part goes to a worker thread, through a limiter as wide as
        the server's wait bound (so it never starves anyio's default pool). On
        cancellation the thread is abandoned and woken, which frees its slots.
        """
        begun = self._begin_wait(receipt_id, agent_id, session, wait_ms)
        if isinstance(begun, ReceiptView):
            return begun
        if isinstance(begun, str):
            # The hook may read the store: keep it off the loop too.
            return await anyio.to_thread.run_sync(self._foreign, begun, agent_id, session)
        if isinstance(begun, _Expired):
            return await anyio.to_thread.run_sync(
                self._expired, begun.receipt_id, agent_id, session
            )
        if self._wait_limiter is None:
            self._wait_limiter = anyio.CapacityLimiter(SERVER_WAIT_BOUND)
        finish: Callable[[Any], ReceiptView] = (
            self._finish_replay_wait if isinstance(begun, _ReplayTicket) else self._finish_wait
        )
        try:
            return await anyio.to_thread.run_sync(
                finish, begun, abandon_on_cancel=True, limiter=self._wait_limiter
            )
        except BaseException:
            self._abandon_wait(begun)
            raise

    def _begin_wait(
        self, receipt_id: str, agent_id: str, session: str, wait_ms: int
    ) -> ReceiptView | str | _Expired | _WaitTicket | _ReplayTicket:
        """Non-blocking half of a wait: an answer now, a foreign id for the hook (a wait of
        0), an expired id whose owner the store knows, or a ticket holding a server slot and
        an agent slot (on one of our receipts, or on an earlier server's)."""
        timeout_s = clamp_wait_ms(wait_ms) / 1000.0
        parsed = parse_receipt_id(receipt_id)
        if parsed is None:
            return _not_ours(None, ReceiptState.NEVER_ISSUED, _MALFORMED_DETAIL)
        canonical = receipt_id.strip()
        if not self._is_ours(parsed):
            if timeout_s <= 0:
                return canonical
            with self._lock:
                busy = self._wait_refusal_locked(agent_id)
                if busy is not None:
                    return canonical  # answered at once, as a wait over the bound is
                self._take_wait_slot_locked(agent_id)
                return _ReplayTicket(canonical, agent_id, session, timeout_s)
        with self._lock:
            self._evict_locked()
            found = self._owned_locked(canonical, parsed[2], agent_id, session)
            if isinstance(found, ReceiptView | _Expired):
                return found
            if found.state is not ReceiptState.PENDING or timeout_s <= 0:
                return self._owner_view_locked(found)
            busy = self._wait_refusal_locked(agent_id)
            if busy is not None:
                return _busy(found, busy)
            self._take_wait_slot_locked(agent_id)
            return _WaitTicket(found, agent_id, timeout_s)

    def _wait_refusal_locked(self, agent_id: str) -> str | None:
        if self._waits >= SERVER_WAIT_BOUND:
            return f"this server already holds {SERVER_WAIT_BOUND} waits"
        if self._agent_waits.get(agent_id, 0) >= AGENT_WAIT_BOUND:
            return f"your agent_id already holds {AGENT_WAIT_BOUND} waits"
        return None

    def _take_wait_slot_locked(self, agent_id: str) -> None:
        self._waits += 1
        self._agent_waits[agent_id] = self._agent_waits.get(agent_id, 0) + 1

    def _finish_replay_wait(self, ticket: _ReplayTicket) -> ReceiptView:
        """Wait on an earlier server's receipt: ask the store, and while it answers
        pending_replay sleep until this server settles a replayed intent (or time is up)."""
        deadline = time.monotonic() + ticket.timeout_s
        try:
            while True:
                with self._lock:
                    seen = self._replays_settled
                view = self._foreign(ticket.receipt_id, ticket.agent_id, ticket.session)
                left = deadline - time.monotonic()
                if view.state is not ReceiptState.PENDING_REPLAY or left <= 0:
                    return view
                if not self._sleep_until_replay(ticket, seen, left):
                    return view
        finally:
            with self._cond:
                self._release_wait_locked(ticket)

    def _sleep_until_replay(self, ticket: _ReplayTicket, seen: int, timeout_s: float) -> bool:
        """Block until a replay settles after ``seen``; False when cancelled, or when this
        server is closing (no replay of its will settle any more: answer what is known)."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._replays_settled != seen or ticket.cancelled or self._closing,
                timeout=timeout_s,
            )
            return not (ticket.cancelled or self._closing)

    def _finish_wait(self, ticket: _WaitTicket) -> ReceiptView:
        with self._cond:
            try:
                self._block_locked(ticket)
            finally:
                self._release_wait_locked(ticket)
            if ticket.cancelled:
                # Nobody will read this answer: leave the outcome owed to the piggyback.
                return ticket.entry.view()
            return self._owner_view_locked(ticket.entry)

    def _block_locked(self, ticket: _WaitTicket) -> None:
        """Sleep on the condition until settled, cancelled or timed out (lock held)."""
        entry = ticket.entry
        self._cond.wait_for(
            lambda: entry.state is not ReceiptState.PENDING or ticket.cancelled,
            timeout=ticket.timeout_s,
        )

    def _abandon_wait(self, ticket: _WaitTicket | _ReplayTicket) -> None:
        with self._cond:
            ticket.cancelled = True
            self._release_wait_locked(ticket)
            self._cond.notify_all()

    def _release_wait_locked(self, ticket: _WaitTicket | _ReplayTicket) -> None:
        # Both the thread and a cancelled caller release: only the first counts.
        if ticket.released:
            return
        ticket.released = True
        self._waits -= 1
        left = self._agent_waits[ticket.agent_id] - 1
        if left:
            self._agent_waits[ticket.agent_id] = left
        else:
            del self._agent_waits[ticket.agent_id]


def _busy(entry: _Entry, why: str) -> ReceiptView:
    view = entry.view()
    return ReceiptView(view.receipt_id, view.state, f"{view.detail} (not waited: {why})", view.data)


# ------------------------------------------------------------------ render


def render_line(view: ReceiptView) -> str:
    """``receipt <id>: <state> — <detail>``; a detail's extra lines are indented."""
    shown = view.receipt_id if view.receipt_id is not None else "(not a lambo receipt id)"
    first, *rest = view.detail.split("\n")
    lines = [f"receipt {shown}: {view.state.value} — {first}"]
    lines.extend(f"  {line}" for line in rest)
    return "\n".join(lines)


def render_piggyback(views: Iterable[ReceiptView]) -> str:
    """The ``write receipts:`` block for a response, or "" when there is none."""
    lines = [render_line(view) for view in views]
    if not lines:
        return ""
    return "\n".join(["write receipts:", *lines])


def to_structured(view: ReceiptView) -> dict[str, Any]:
    """One ``structuredContent.write_receipts[]`` entry / lambo_stats ``receipt`` object."""
    out: dict[str, Any] = {
        "receipt": view.receipt_id,
        "state": view.state.value,
        "detail": view.detail,
    }
    out.update((k, v) for k, v in view.data.items() if k not in _RESERVED_KEYS)
    return out


__all__ = [
    "AGENT_WAIT_BOUND",
    "BOUND",
    "DEFAULT_DETAILS",
    "LANE_BOUND",
    "PIGGYBACK_MAX",
    "RETAIN_MAX",
    "RETAIN_SECONDS",
    "SERVER_WAIT_BOUND",
    "ForeignLookup",
    "Receipt",
    "ReceiptBook",
    "ReceiptState",
    "ReceiptStats",
    "ReceiptView",
    "clamp_wait_ms",
    "parse_receipt_id",
    "render_line",
    "render_piggyback",
    "to_structured",
]


def intent_answer(
    store: Store,
) -> Callable[[str, str, str], tuple[ReceiptState, str, dict[str, Any]] | None]:
    """Answer a receipt an earlier server issued, from its durable intent in ``store``.

    The ``foreign_lookup`` of a session's ReceiptBook: applied -> applied_after_restart
    (with the summary kept on the intent), pending -> pending_replay, failed -> failed;
    another agent or session -> forbidden; no intent -> None (restart_lost).
    """

    def answer(
        receipt_id: str, agent_id: str, session: str
    ) -> tuple[ReceiptState, str, dict[str, Any]] | None:
        try:
            intent = store.get_intent(receipt_id)
        except LamboError as exc:
            log.warning("receipt %s: intent not readable: %s", receipt_id, exc.detail)
            return None
        if intent is None:
            return None
        if intent.agent_id != agent_id or intent.session != session:
            return (ReceiptState.FORBIDDEN, "this receipt belongs to another agent or session", {})
        outcome = intent.outcome or {}
        if intent.state is IntentState.APPLIED:
            return (
                ReceiptState.APPLIED_AFTER_RESTART,
                str(outcome.get("detail", "applied")),
                dict(outcome.get("data", {})),
            )
        if intent.state is IntentState.FAILED:
            return (ReceiptState.FAILED, str(outcome.get("detail", "failed")), {})
        return (
            ReceiptState.PENDING_REPLAY,
            "admitted by an earlier server and owed a replay; ask again, and recall rather "
            "than deriving it again",
            {},
        )

    return answer
