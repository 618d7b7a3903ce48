"""Receipts across a session and its layers: one response's fair share of each book, and
the answer for a receipt no serving pipeline knows while a layer is down.

A write into a layer is receipted by the layer's book under (agent, the session written
through), so the session's responses carry receipts from several books. At most 8 ride on
one response across them all, each book with receipts waiting giving at least one (spec:
lambo_derive, "Writing to a layer", L305). Nothing is taken that is not delivered: each
book is asked how many it holds (``waiting``) and then handed out only its share, so what
does not fit stays queued for the next response.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .ledger import ReceiptLedger
from .states import PIGGYBACK_MAX, ReceiptState, ReceiptView

LAYER_DOWN_DETAIL = (
    "this receipt may belong to layer {layer}, which is not serving right now; ask again"
)


def fair_shares(waiting: Sequence[int], limit: int = PIGGYBACK_MAX) -> list[int]:
    """How many receipts to take from each book, given how many each has waiting, in the
    order given (the session first, then its layers as configured).

    Round robin, one at a time: every book with receipts waiting gets one before any gets
    a second, and the total is at most ``limit`` and at most what is waiting. Past
    ``limit`` books with receipts, the later ones get none this time (the bound wins).
    """
    shares = [0] * len(waiting)
    left = max(0, limit)
    while left:
        gave = False
        for i, count in enumerate(waiting):
            if left and shares[i] < count:
                shares[i] += 1
                left -= 1
                gave = True
        if not gave:
            break
    return shares


@dataclass(frozen=True)
class PiggybackSource:
    """One book a response's receipts come from, and the key they are queued under: the
    session the caller addressed (a layer's book queues its writes under that session)."""

    book: ReceiptLedger
    session: str
    exclude: str | None = None  # the response's own ack: its outcome rides on the next one


def fair_piggyback(
    agent_id: str, sources: Sequence[PiggybackSource], limit: int = PIGGYBACK_MAX
) -> list[ReceiptView]:
    """The receipts one response carries from books this process holds, each book's in its
    own settle order, books in the order given; the rest stay queued."""
    counts = [s.book.waiting(agent_id, s.session, exclude=s.exclude) for s in sources]
    out: list[ReceiptView] = []
    for source, share in zip(sources, fair_shares(counts, limit), strict=True):
        if share:
            out.extend(
                source.book.take_piggyback(agent_id, source.session, share, exclude=source.exclude)
            )
    return out


def layer_down_view(receipt_id: str, layer: str) -> ReceiptView:
    """A receipt no serving pipeline knows while ``layer`` is not serving: it may be that
    layer's, so pending, and to ask again (spec: lambo_stats ``receipt``, L485)."""
    return ReceiptView(
        receipt_id.strip(), ReceiptState.PENDING, LAYER_DOWN_DETAIL.format(layer=layer)
    )
