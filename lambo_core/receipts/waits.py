"""Waiting on a receipt: the wait bounds, the tickets a wait holds, and their slots.

Spec: lambo_stats, ``wait_ms`` (clamped to 0..34000; at most 16 waits on a server and 8 per
agent_id, a wait over either bound answering at once with the current state).
"""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from ..limits import WAIT_MS_MAX
from .states import Entry, ReceiptView

SERVER_WAIT_BOUND = 16
AGENT_WAIT_BOUND = 8


def clamp_wait_ms(wait_ms: int | float) -> int:
    """wait_ms is clamped to 0..34000, never refused (negative is validated elsewhere)."""
    return int(min(max(wait_ms, 0), WAIT_MS_MAX))


@dataclass(eq=False)
class ReplayTicket:
    """A wait on a receipt an earlier server issued, holding the same two slots."""

    receipt_id: str
    agent_id: str
    session: str
    timeout_s: float
    cancelled: bool = False
    released: bool = False


@dataclass(eq=False)
class WaitTicket:
    """One wait holding a server slot and an agent slot until released."""

    entry: Entry
    agent_id: str
    timeout_s: float
    cancelled: bool = False
    released: bool = False


class WaitSlots:
    """The server's and each agent's wait slots. Not locked itself: the book calls it with
    its own lock held, so a slot is taken and counted in one step with what it waits on."""

    def __init__(self) -> None:
        self.held = 0
        self._per_agent: dict[str, int] = {}
        self._limiter: anyio.CapacityLimiter | None = None

    def refusal(self, agent_id: str) -> str | None:
        """Why ``agent_id`` may not take another wait now, or None."""
        if self.held >= SERVER_WAIT_BOUND:
            return f"this server already holds {SERVER_WAIT_BOUND} waits"
        if self._per_agent.get(agent_id, 0) >= AGENT_WAIT_BOUND:
            return f"your agent_id already holds {AGENT_WAIT_BOUND} waits"
        return None

    def take(self, agent_id: str) -> None:
        self.held += 1
        self._per_agent[agent_id] = self._per_agent.get(agent_id, 0) + 1

    def release(self, ticket: WaitTicket | ReplayTicket) -> None:
        # Both the thread and a cancelled caller release: only the first counts.
        if ticket.released:
            return
        ticket.released = True
        self.held -= 1
        left = self._per_agent[ticket.agent_id] - 1
        if left:
            self._per_agent[ticket.agent_id] = left
        else:
            del self._per_agent[ticket.agent_id]

    def limiter(self) -> anyio.CapacityLimiter:
        """The worker threads blocking waits run on: as many as the server's wait bound, so
        they never starve anyio's default pool (made on first use, inside the event loop)."""
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(SERVER_WAIT_BOUND)
        return self._limiter


def busy(entry: Entry, why: str) -> ReceiptView:
    """The current state of a receipt whose wait was refused, saying why it was not waited."""
    view = entry.view()
    return ReceiptView(view.receipt_id, view.state, f"{view.detail} (not waited: {why})", view.data)
