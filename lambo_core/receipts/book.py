"""ReceiptBook: a ledger of receipts that answers for them, to lookups and to waits.

An id this server issued is answered from the ledger; one an earlier server issued, from its
durable intent through the ``foreign_lookup`` hook (``intents.intent_answer``). A wait holds
a server slot and an agent slot while it blocks (``waits``). Spec: lambo_stats, ``receipt``
and ``wait_ms``.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from ..clock import Clock
from .ledger import Expired, ReceiptLedger
from .states import (
    BOUND,
    DEFAULT_DETAILS,
    LANE_BOUND,
    MALFORMED_DETAIL,
    RETAIN_MAX,
    RETAIN_SECONDS,
    ForeignLookup,
    ReceiptState,
    ReceiptView,
    not_ours,
    parse_receipt_id,
)
from .waits import ReplayTicket, WaitTicket, busy, clamp_wait_ms


class ReceiptBook(ReceiptLedger):
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
        super().__init__(
            clock,
            nonce=nonce,
            lane_bound=lane_bound,
            bound=bound,
            retain_seconds=retain_seconds,
            retain_max=retain_max,
        )
        self._foreign_lookup = foreign_lookup
        # Bumped whenever this server settles a durable intent an earlier server left
        # owed, so a wait on a pending_replay receipt wakes and asks the store again.
        self._replays_settled = 0
        # Replays this server attempted that failed for a transient cause: the intent is
        # still owed (to the next server), but here its answer is failed, not a wait.
        # receipt id -> (agent, session, detail), oldest first.
        self._replays_failed: OrderedDict[str, tuple[str, str, str]] = OrderedDict()

    # -------------------------------------------------------------- answer

    def lookup(self, receipt_id: str, agent_id: str, session: str) -> ReceiptView:
        """What happened to one write, as its owner (agent and session) may ask.

        The owner reading a settled outcome consumes its piggyback; anyone else
        gets forbidden and consumes nothing.
        """
        begun = self._begin_wait(receipt_id, agent_id, session, 0)  # a wait of 0 never waits
        if isinstance(begun, str):
            return self._foreign(begun, agent_id, session)
        if isinstance(begun, Expired):
            return self._expired(begun.receipt_id, agent_id, session)
        if isinstance(begun, WaitTicket | ReplayTicket):  # pragma: no cover
            raise AssertionError("a zero wait took a wait slot")
        return begun

    def _expired(self, receipt_id: str, agent_id: str, session: str) -> ReceiptView:
        """An id of ours let go so long ago that its owner is forgotten here: the durable
        intent names the owner (a dropped write has none, and nothing to reveal)."""
        answer = (
            self._foreign_lookup(receipt_id, agent_id, session) if self._foreign_lookup else None
        )
        if answer is not None and answer[0] is ReceiptState.FORBIDDEN:
            return not_ours(receipt_id, ReceiptState.FORBIDDEN)
        return not_ours(receipt_id, ReceiptState.EXPIRED)

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
                return not_ours(receipt_id, ReceiptState.FORBIDDEN)
            return ReceiptView(receipt_id, ReceiptState.FAILED, failed_here[2])
        answer = None
        if self._foreign_lookup is not None:
            answer = self._foreign_lookup(receipt_id, agent_id, session)
        if answer is None:
            return not_ours(receipt_id, ReceiptState.RESTART_LOST)
        state, detail, data = answer
        return ReceiptView(receipt_id, state, detail or DEFAULT_DETAILS[state], dict(data))

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
        if isinstance(begun, Expired):
            return self._expired(begun.receipt_id, agent_id, session)
        if isinstance(begun, ReplayTicket):
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
        if isinstance(begun, Expired):
            return await anyio.to_thread.run_sync(
                self._expired, begun.receipt_id, agent_id, session
            )
        finish: Callable[[Any], ReceiptView] = (
            self._finish_replay_wait if isinstance(begun, ReplayTicket) else self._finish_wait
        )
        try:
            return await anyio.to_thread.run_sync(
                finish, begun, abandon_on_cancel=True, limiter=self._slots.limiter()
            )
        except BaseException:
            self._abandon_wait(begun)
            raise

    def _begin_wait(
        self, receipt_id: str, agent_id: str, session: str, wait_ms: int
    ) -> ReceiptView | str | Expired | WaitTicket | ReplayTicket:
        """Non-blocking half of a wait: an answer now, a foreign id for the hook (a wait of
        0), an expired id whose owner the store knows, or a ticket holding a server slot and
        an agent slot (on one of our receipts, or on an earlier server's)."""
        timeout_s = clamp_wait_ms(wait_ms) / 1000.0
        parsed = parse_receipt_id(receipt_id)
        if parsed is None:
            return not_ours(None, ReceiptState.NEVER_ISSUED, MALFORMED_DETAIL)
        canonical = receipt_id.strip()
        if not self._is_ours(parsed):
            if timeout_s <= 0:
                return canonical
            with self._lock:
                if self._slots.refusal(agent_id) is not None:
                    return canonical  # answered at once, as a wait over the bound is
                self._slots.take(agent_id)
                return ReplayTicket(canonical, agent_id, session, timeout_s)
        with self._lock:
            self._evict_locked()
            found = self._owned_locked(canonical, parsed[2], agent_id, session)
            if isinstance(found, ReceiptView | Expired):
                return found
            if found.state is not ReceiptState.PENDING or timeout_s <= 0:
                return self._owner_view_locked(found)
            refusal = self._slots.refusal(agent_id)
            if refusal is not None:
                return busy(found, refusal)
            self._slots.take(agent_id)
            return WaitTicket(found, agent_id, timeout_s)

    def _finish_replay_wait(self, ticket: ReplayTicket) -> ReceiptView:
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
                self._slots.release(ticket)

    def _sleep_until_replay(self, ticket: ReplayTicket, seen: int, timeout_s: float) -> bool:
        """Block until a replay settles after ``seen``; False when cancelled, or when this
        server is closing (no replay of its will settle any more: answer what is known)."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._replays_settled != seen or ticket.cancelled or self._closing,
                timeout=timeout_s,
            )
            return not (ticket.cancelled or self._closing)

    def _finish_wait(self, ticket: WaitTicket) -> ReceiptView:
        with self._cond:
            try:
                self._block_locked(ticket)
            finally:
                self._slots.release(ticket)
            if ticket.cancelled:
                # Nobody will read this answer: leave the outcome owed to the piggyback.
                return ticket.entry.view()
            return self._owner_view_locked(ticket.entry)

    def _block_locked(self, ticket: WaitTicket) -> None:
        """Sleep on the condition until settled, cancelled or timed out (lock held)."""
        entry = ticket.entry
        self._cond.wait_for(
            lambda: entry.state is not ReceiptState.PENDING or ticket.cancelled,
            timeout=ticket.timeout_s,
        )

    def _abandon_wait(self, ticket: WaitTicket | ReplayTicket) -> None:
        with self._cond:
            ticket.cancelled = True
            self._slots.release(ticket)
            self._cond.notify_all()
