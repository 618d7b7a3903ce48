"""The record of this process's write receipts: issue, settle, retain, piggyback, count.

A write is acked with a receipt before it is applied; the apply worker settles it. Ids,
admission bounds (64 outstanding per agent, 1024 per server), retention (300 s or 4096
receipts) and the ``write receipts:`` piggyback live here; answering questions about a
receipt (lookups, waits) is ``book.ReceiptBook``'s. Spec: lambo_derive, lambo_stats.

Threading: the apply worker settles, the event loop issues and reads. Everything shared
sits behind one lock; one condition on it wakes waiters when anything settles. A settle
listener (``listen``) hears each outcome after the lock is let go, on the settling thread.
"""

from __future__ import annotations

import logging
import secrets
import threading
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..clock import Clock, SystemClock
from ..model import WriteIntent
from .states import (
    BOUND,
    CLOSE_STATES,
    DEFAULT_DETAILS,
    DROPPED_BOUND_DETAIL,
    DROPPED_CLOSING_DETAIL,
    DROPPED_LANE_DETAIL,
    EVICTED_OWNERS_MAX,
    LANE_BOUND,
    PIGGYBACK_MAX,
    RETAIN_MAX,
    RETAIN_SECONDS,
    SETTLE_STATES,
    WITHDRAWN_DETAIL,
    Entry,
    ReceiptState,
    ReceiptStats,
    ReceiptView,
    SettledReceipt,
    SettleListener,
    not_ours,
    parse_receipt_id,
)
from .waits import WaitSlots

log = logging.getLogger(__name__)

#: what a receipt recovered after a restart can settle as, told by the serve replaying it
RECOVERED_STATES = frozenset({ReceiptState.APPLIED_AFTER_RESTART, ReceiptState.FAILED})


@dataclass(frozen=True)
class Expired:
    """One of our ids whose outcome and owner this book has both let go of."""

    receipt_id: str


class ReceiptLedger:
    """Issues, settles, retains and counts this process's write receipts."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        nonce: int | None = None,
        lane_bound: int = LANE_BOUND,
        bound: int = BOUND,
        retain_seconds: float = RETAIN_SECONDS,
        retain_max: int = RETAIN_MAX,
    ) -> None:
        self._clock: Clock = clock or SystemClock()
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
        self._entries: dict[str, Entry] = {}
        # Settled entries in settle order: eviction always takes from the front.
        self._settled: OrderedDict[str, Entry] = OrderedDict()
        self._lanes: dict[str, int] = {}
        self._piggyback: dict[tuple[str, str], deque[str]] = {}
        self._slots = WaitSlots()  # the waits on this book, counted under its lock
        # (agent, session) of receipts evicted from _entries, oldest first.
        self._evicted: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._listener: SettleListener | None = None

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

    def listen(self, listener: SettleListener | None) -> None:
        """Tell ``listener`` each write's outcome from now on (None: stop telling): once as
        a receipt settles (dropped at its ack, applied, failed, or handed on at a stop),
        again only when a stop's retried flush turns close_unflushed into intent_durable,
        and for a receipt an earlier server issued once this one replays it
        (``recovered``). It runs on the settling thread (the apply worker's, the stop's),
        so it must return at once; whatever it raises is logged, never passed on."""
        self._listener = listener

    @staticmethod
    def _told(entry: Entry) -> SettledReceipt:
        """What the listener hears of ``entry``, taken under the lock (a copy)."""
        return SettledReceipt(entry.view(), entry.agent_id, entry.session, entry.tool)

    def _tell(self, told: SettledReceipt) -> None:
        """The listener hears one outcome (called with the lock let go)."""
        listener = self._listener
        if listener is None:
            return
        try:
            listener(told)
        except Exception:  # a listener's fault is never the write's
            log.exception("the settle listener failed on receipt %s", told.view.receipt_id)

    def recovered(
        self, intent: WriteIntent, state: ReceiptState, outcome: Mapping[str, Any]
    ) -> None:
        """A write an earlier server acked, replayed here, has settled (the store answers
        its receipt): the listener hears what its intent keeps of ``outcome`` (its
        ``detail`` and ``data``), under the session it was submitted through."""
        if state not in RECOVERED_STATES:
            raise ValueError(f"a recovered receipt cannot settle as {state.value}")
        detail = str(outcome.get("detail") or DEFAULT_DETAILS[state])
        view = ReceiptView(intent.receipt_id, state, detail, dict(outcome.get("data") or {}))
        self._tell(SettledReceipt(view, intent.agent_id, intent.destination, intent.tool))

    def _is_ours(self, parsed: tuple[str, str, int]) -> bool:
        return parsed[0] == self._nonce and parsed[1] == self._start_hex

    def issued_here(self, receipt_id: str) -> bool:
        """Whether this book issued the id (its nonce and start): where a serve holding
        several sessions' books routes a lookup. Says nothing of who may read it."""
        parsed = parse_receipt_id(receipt_id)
        return parsed is not None and self._is_ours(parsed)

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
            entry = Entry(self._prefix + str(self._seq), agent_id, session, tool, now)
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
            told = self._told(entry)
        if told.view.state is ReceiptState.DROPPED:
            self._tell(told)
        return told.view

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
                entry, ReceiptState.NEVER_ISSUED, WITHDRAWN_DETAIL, None, self._clock.now()
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
        if state not in SETTLE_STATES:
            raise ValueError(f"a receipt cannot be settled as {state.value}")
        with self._cond:
            entry = self._entries.get(receipt_id)
            if entry is None:
                return False
            if entry.state is ReceiptState.PENDING:
                self._release_lane_locked(entry)
            elif entry.state in CLOSE_STATES and state in CLOSE_STATES:
                self._count_locked(entry.state, -1)
            else:
                return False
            changed = entry.state is not state  # the same close outcome again: not retold
            self._count_locked(state, +1)
            entry.delivered = False
            self._mark_settled_locked(entry, state, detail, data, self._clock.now())
            self._piggyback.setdefault((entry.agent_id, entry.session), deque()).append(
                entry.receipt_id
            )
            self._evict_locked()
            self._cond.notify_all()
            told = self._told(entry)
        if changed:
            self._tell(told)
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

    def _release_lane_locked(self, entry: Entry) -> None:
        self._outstanding -= 1
        left = self._lanes[entry.agent_id] - 1
        if left:
            self._lanes[entry.agent_id] = left
        else:
            del self._lanes[entry.agent_id]

    def _mark_settled_locked(
        self,
        entry: Entry,
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

    def _owned_locked(
        self, receipt_id: str, seq: int, agent_id: str, session: str
    ) -> Entry | ReceiptView | Expired:
        """Our own id: the entry if the caller owns it, else the answer to give (or, for an
        expired id whose owner this book no longer remembers, ``Expired``: ask the store)."""
        entry = self._entries.get(receipt_id)
        if entry is None:
            if seq > self._seq:
                return not_ours(receipt_id, ReceiptState.NEVER_ISSUED)
            # We issued it and have since let go of its outcome, not of whose it is.
            owner = self._evicted.get(receipt_id)
            if owner is None:
                return Expired(receipt_id)
            if owner != (agent_id, session):
                return not_ours(receipt_id, ReceiptState.FORBIDDEN)
            return not_ours(receipt_id, ReceiptState.EXPIRED)
        if entry.state is ReceiptState.NEVER_ISSUED:
            return entry.view()
        if entry.agent_id != agent_id or entry.session != session:
            return not_ours(receipt_id, ReceiptState.FORBIDDEN)
        return entry

    def _owner_view_locked(self, entry: Entry) -> ReceiptView:
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

    def waiting(self, agent_id: str, session: str, *, exclude: str | None = None) -> int:
        """How many settled receipts ``take_piggyback(agent_id, session)`` would hand out
        with no limit (``exclude`` not counted): what a fair share across books is cut from."""
        with self._lock:
            self._evict_locked()
            queue = self._piggyback.get((agent_id, session), ())
            return len({rid for rid in queue if rid != exclude and self._deliverable_locked(rid)})

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
                waits=self._slots.held,
            )
