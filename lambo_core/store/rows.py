"""What every store shares: the caller-safe write refusal, a batch's rules, row encodings.

A store keeps vectors as little-endian float32 bytes and JSON values as compact
JSON text, and refuses the same batches with the same words, so ``MemoryStore``
answers exactly as ``SqliteStore`` does (the ``Store`` protocol in ``base.py``).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from ..errors import StoreError
from ..model import ForgetEvent, IntentState, Vector, WriteBatch

WRITE_REFUSED = "the store refused the write; the detail was logged"


def refused(detail: str) -> StoreError:
    """The caller-safe write refusal; ``detail`` says why, for the log."""
    return StoreError(WRITE_REFUSED, detail=detail)


def vector_to_blob(vector: Vector | None) -> bytes | None:
    """Little-endian float32 bytes of a vector (None stays None)."""
    if vector is None:
        return None
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def blob_to_vector(blob: bytes | None) -> Vector | None:
    """A fresh, writable float32 row from little-endian float32 bytes."""
    if blob is None:
        return None
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def to_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise refused(f"value is not JSON-serialisable: {exc}") from exc


def check_batch_sessions(batch: WriteBatch) -> None:
    rows: list[Any] = [*batch.concepts, *batch.edges]
    if batch.interaction is not None:
        rows.append(batch.interaction)
    if any(row.session != batch.session for row in rows):
        raise refused("a row of the batch belongs to another session")


def batch_time(batch: WriteBatch) -> float:
    """When a batch settles its intent: its interaction's time, else its newest row's."""
    if batch.interaction is not None:
        return batch.interaction.created_at
    times = [c.created_at for c in batch.concepts] + [e.created_at for e in batch.edges]
    return max(times, default=0.0)


def settled_state(state: str) -> IntentState:
    try:
        final = IntentState(state)
    except ValueError:
        final = IntentState.PENDING
    if final is IntentState.PENDING:
        raise refused(f"an intent settles as applied or failed, not {state!r}")
    return final


FORGET_EVENT_COLUMNS = (
    "session, agent_id, occurred_at, node_ids, digests, edges_removed, forced, receipt_id"
)


def forget_event_insert(event: ForgetEvent, mark: str) -> tuple[str, tuple[Any, ...]]:
    """The INSERT of one forget_events row and its values; ``mark`` is the driver's
    placeholder (SQLite ``?``, psycopg ``%s``). ``forced`` stays a bool: SQLite keeps 1/0."""
    marks = ", ".join([mark] * 8)
    values = (
        event.session,
        event.agent_id,
        event.occurred_at,
        to_json(list(event.node_ids)),
        to_json(list(event.digests)),
        event.edges_removed,
        event.forced,
        event.receipt_id,
    )
    return f"INSERT INTO forget_events({FORGET_EVENT_COLUMNS}) VALUES ({marks})", values


def forget_settle(
    receipt_id: str, session: str, outcome: dict[str, Any], settled_at: float, mark: str
) -> tuple[str, tuple[Any, ...]]:
    """The UPDATE that settles a forget's pending intent applied (one row, or the intent
    was not pending); ``mark`` is the driver's placeholder, as for forget_event_insert."""
    m = mark
    sql = (
        f"UPDATE write_intents SET state = {m}, outcome = {m}, settled_at = {m} "
        f"WHERE receipt_id = {m} AND session = {m} AND state = {m}"
    )
    values = (IntentState.APPLIED.value, to_json(outcome), settled_at, receipt_id, session,
              IntentState.PENDING.value)  # fmt: skip
    return sql, values


def forget_event_from(row: tuple[Any, ...]) -> ForgetEvent:
    """A forget_events row (SQLite and PostgreSQL alike): ids and digests are JSON arrays."""
    return ForgetEvent(
        session=row[0],
        agent_id=row[1],
        occurred_at=float(row[2]),
        node_ids=tuple(json.loads(row[3])),
        digests=tuple(json.loads(row[4])),
        edges_removed=int(row[5]),
        forced=bool(row[6]),
        receipt_id=row[7],
    )
