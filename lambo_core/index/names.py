"""A name -> node ids index for the graph's lookups by short id and by canonical key.

Nearly every name has exactly one id, so the common case costs no container of its own.
"""

from __future__ import annotations

# name -> one node id, or an insertion-ordered set of them
MultiIndex = dict[str, str | dict[str, None]]


def multi_add(index: MultiIndex, name: str, node_id: str) -> None:
    held = index.get(name)
    if held is None or held == node_id:
        index[name] = node_id
    elif isinstance(held, str):
        index[name] = {held: None, node_id: None}
    else:
        held[node_id] = None


def multi_remove(index: MultiIndex, name: str, node_id: str) -> None:
    held = index.get(name)
    if held is None:
        return
    if isinstance(held, str):
        if held == node_id:
            del index[name]
        return
    held.pop(node_id, None)
    if len(held) == 1:
        index[name] = next(iter(held))


def multi_get(index: MultiIndex, name: str) -> list[str]:
    held = index.get(name)
    if held is None:
        return []
    return [held] if isinstance(held, str) else list(held)
