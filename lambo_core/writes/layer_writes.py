"""What a write into a layer adds to its ack, beyond the ack every write gets.

A write scoped to a layer (such as general) is submitted through the project's session and
applied by the layer's own queue: its receipt is issued to (agent, project), its intent
records the project as its destination, and its ack names the layer (spec: lambo_derive,
"Writing to a layer", L305-L306).
"""

from __future__ import annotations

from ..session import Session
from .outcome import layer_closed_warning


def ack_warnings(
    health_note: str | None, session: Session, via: str | None, receipt_id: str | None
) -> list[str]:
    """The ack's warning lines: the store's health, and for a write into a layer that began
    closing once the write was admitted, not to send it again (it is applied, or replayed
    by the layer's next holder: spec L306)."""
    warnings = [health_note] if health_note is not None else []
    if via is not None and receipt_id is not None and session.receipts.closing:
        warnings.append(layer_closed_warning(session.name, receipt_id))
    return warnings
