"""What a caller is told about a layer: the spec's texts, and ours where it gives none.

Spec: lambo_recall, "Layered sessions" (L228, L229); lambo_derive, "Writing to a layer"
(L306).
"""

from __future__ import annotations

from ..errors import ConfigError, ConflictError, LamboError


def layer_hit_warning(layer: str) -> str:
    return (
        f"recall: these hits are from layer {layer}, and their ids belong to it; "
        f'pass scope = "{layer}" to lambo_inspect to inspect one'
    )


def not_serving(layer: str, session: str, state: str) -> LamboError:
    """A scoped call to a layer that is not serving: retryable unless its attach failed."""
    if state == "failed":
        return ConfigError(
            f'scope "{layer}" cannot be served: attaching layer {layer} failed for good '
            "(the reason is in the serve's log), so nothing was read or written; ask the "
            "operator to fix it"
        )
    why = (
        "it is being detached"
        if state == "detaching"
        else "another lambo serve holds its lease and cannot be reached"
    )
    return ConflictError(
        f'scope "{layer}" is not serving right now ({why}), so nothing was read or written; '
        f"retry shortly, or call without scope to act on {session}"
    )


def stopped_during_call(layer: str, session: str) -> LamboError:
    """Spec (Writing to a layer): the layer closed or lost its lease before the ack."""
    return ConflictError(
        f"layer {layer} stopped serving during this call (it closed or lost its lease), so "
        f"nothing was applied to it; retry shortly, or call without scope to act on {session}"
    )
