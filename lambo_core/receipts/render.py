"""A receipt as text and as structured content (spec: lambo_derive, the ``write receipts:``
block and ``structuredContent.write_receipts``; lambo_stats, ``receipt``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .states import ReceiptView

_RESERVED_KEYS = frozenset({"receipt", "state", "detail"})


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
