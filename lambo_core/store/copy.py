"""`lambo store copy`: sessions moved from one store to another over the ``Store`` protocol.

Every row of a session goes, ids and fields as they are: the session record (created
time, embedding contract, shared-layer flag, gc clock), interactions, concepts with their
vector bytes, edges with weights and times, write intents in every state (settled ones
with their outcome, settled time and payload), canonization events and the forget audit.
Writes go through ``apply`` / ``add_intent`` / ``settle_intent`` / ``add_canon_event`` /
``add_forget_event`` in batches.

Rules (why each is safe):
- ``--from`` is only read (``SourceView`` has no write method), and a session a live
  serve holds there is refused: the copy could not take that lease without writing into
  ``--from``, and a session being written meanwhile would copy torn.
- While it writes a session into ``--to`` the copy holds that session's lease there
  (holder ``store-copy@host#pid``, renewed between batches, every write fenced by its
  token), so a serve of ``--to`` waits for it; a session a live serve holds in ``--to``
  is refused.
- A session already in ``--to`` is refused unless nothing conflicts: every row ``--to``
  has of it is also in ``--from``, equal field for field (an interrupted copy, or an
  empty session), and its record agrees. Then only the missing rows are written. Any
  other difference refuses the copy before that session is written, naming the table.
- Two things the store assigns itself are renumbered, not copied: an intent's ``seq``
  (store-wide apply order; intents are added oldest first, so their order is kept) and
  the session's ``mutation_count`` (what ``--to`` counted while writing); ``last_gc_epoch``
  is shifted by the same amount, so the mutations since the last sweep stay as they were.
- At the end the rows of each session are counted on both sides, table by table.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from ..errors import ConflictError, LamboError, ParameterError
from ..model import (
    CanonizationEvent,
    Concept,
    Edge,
    ForgetEvent,
    IntentState,
    Interaction,
    Lease,
    SessionRecord,
    WriteBatch,
    WriteIntent,
)
from .base import Fence, Store
from .copy_rows import RowKeys, concept_digest, event_key

ROWS_PER_BATCH = 500  # concepts or edges per transaction
LEASE_TTL = 45.0  # as a serve's lease (hub/lease.py)
RENEW_EVERY = 15.0
HOLDER_AGENT = "store-copy"

TABLES = (
    "interactions",
    "concepts",
    "edges",
    "write_intents",
    "canonization_events",
    "forget_events",
)

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


class SourceView(Protocol):
    """What a copy may do to ``--from``: read."""

    def list_sessions(self) -> list[SessionRecord]: ...

    def get_session(self, name: str) -> SessionRecord | None: ...

    def get_lease(self, session: str) -> Lease | None: ...

    def interactions(self, session: str) -> Iterator[Interaction]: ...

    def concepts(self, session: str, *, vectors: bool = True) -> Iterator[Concept]: ...

    def edges(self, session: str) -> Iterator[Edge]: ...

    def intents(self, session: str) -> Iterator[WriteIntent]: ...

    def canon_events(self, session: str) -> list[CanonizationEvent]: ...

    def forget_events(self, session: str) -> list[ForgetEvent]: ...


class Progress(Protocol):
    """Told how a session's copy goes (the CLI draws it)."""

    def start(self, label: str, total: int) -> None: ...

    def advance(self, rows: int) -> None: ...

    def finish(self) -> None: ...


class NoProgress:
    def start(self, label: str, total: int) -> None:
        pass

    def advance(self, rows: int) -> None:
        pass

    def finish(self) -> None:
        pass


@dataclass
class SessionCount:
    """One session's rows per table, in ``--from`` and in ``--to`` after the copy."""

    session: str
    source: dict[str, int]
    target: dict[str, int] = field(default_factory=dict)
    written: int = 0  # rows this run wrote (an interrupted copy's rows are kept, not counted)

    @property
    def mismatched(self) -> list[str]:
        return [t for t in TABLES if self.source.get(t, 0) != self.target.get(t, 0)]


@dataclass
class CopyReport:
    sessions: list[SessionCount]
    seconds: float

    @property
    def mismatched(self) -> list[tuple[str, str]]:
        return [(s.session, t) for s in self.sessions for t in s.mismatched]


def holder_name() -> str:
    from ..hub.lease import this_host

    return f"{HOLDER_AGENT}@{this_host()}#{os.getpid()}"


def count_rows(store: SourceView, session: str) -> dict[str, int]:
    """The session's rows, table by table."""
    return {
        "interactions": _count(store.interactions(session)),
        "concepts": _count(store.concepts(session, vectors=False)),
        "edges": _count(store.edges(session)),
        "write_intents": _count(store.intents(session)),
        "canonization_events": len(store.canon_events(session)),
        "forget_events": len(store.forget_events(session)),
    }


def _count(rows: Iterable[object]) -> int:
    return sum(1 for _ in rows)


def chunks(rows: Iterable[T], size: int) -> Iterator[list[T]]:
    chunk: list[T] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def choose_sessions(source: SourceView, wanted: Iterable[str]) -> list[str]:
    """The sessions to copy: those named (each must be in ``--from``), else all of them."""
    known = [r.name for r in source.list_sessions()]
    names = list(dict.fromkeys(wanted))
    if not names:
        return known
    missing = [n for n in names if n not in known]
    if missing:
        listed = ", ".join(known[:10]) or "none"
        raise ParameterError(
            f"--session {missing[0]!r}: no session of that name in --from (its sessions: "
            f"{listed}); nothing was copied"
        )
    return names


def _held(lease: Lease | None, now: float) -> bool:
    """A live lease, unless its holder is a process of this host that no longer runs (a
    killed serve or copy): that one is taken over at once, as a serve takes it."""
    from ..hub.lease import holder_dead_here

    return lease is not None and lease.expires_at > now and not holder_dead_here(lease)


def check_source_free(source: SourceView, session: str, now: float) -> None:
    lease = source.get_lease(session)
    if lease is not None and _held(lease, now):
        from ..hub.lease import holder_description

        raise ConflictError(
            f"session {session!r} in --from is held by {holder_description(lease, now)}; "
            "stop that serve (or wait for its lease to expire) so the copy reads a session "
            "nobody is writing; nothing was copied"
        )


def check_target_free(target: Store, session: str, now: float) -> None:
    lease = target.get_lease(session)
    if lease is not None and _held(lease, now):
        raise _held_in_target(session, lease, now)


def _held_in_target(session: str, lease: Lease | None, now: float) -> ConflictError:
    from ..hub.lease import holder_description

    who = holder_description(lease, now) if lease is not None else "another holder"
    return ConflictError(
        f"session {session!r} in --to is held by {who}; stop that serve before copying "
        "into it; nothing was copied"
    )


class _TargetLease:
    """The copy's hold on one session's lease in ``--to``, renewed between batches."""

    def __init__(self, target: Store, session: str, clock: Callable[[], float]) -> None:
        self.target, self.session, self.clock = target, session, clock
        now = clock()
        wanted = Lease(
            session=session,
            holder=holder_name(),
            pid=os.getpid(),
            agent=HOLDER_AGENT,
            acquired_at=now,
            heartbeat_at=now,
            expires_at=now + LEASE_TTL,
            token=0,
        )
        current = target.get_lease(session)
        if current is not None and current.expires_at > now and not _held(current, now):
            target.release_lease(session, current.token)  # its holder is dead: take it over
        got = target.acquire_lease(wanted, now)
        if got is None:
            raise _held_in_target(session, target.get_lease(session), now)
        self.token = got.token
        self._renewed = now
        target.record_lease_socket(session, self.token, "")  # no hub socket: nobody to forward to
        target.fence(session, Fence(self.token, clock))

    def keep(self) -> None:
        now = self.clock()
        if now - self._renewed >= RENEW_EVERY:
            if not self.target.renew_lease(self.session, self.token, now, LEASE_TTL):
                raise ConflictError(f"the copy lost its lease on session {self.session!r} in --to")
            self._renewed = now

    def release(self) -> None:
        self.target.fence(self.session, None)
        self.target.release_lease(self.session, self.token)


def _target_rows(target: Store, session: str) -> RowKeys:
    keys = RowKeys()
    keys.interactions = {i.id: i for i in target.interactions(session)}
    keys.concepts = {c.id: concept_digest(c) for c in target.concepts(session)}
    keys.edges = {(e.src, e.dst, e.edge_type): e for e in target.edges(session)}
    keys.intents = {i.receipt_id: i for i in target.intents(session)}
    keys.events = Counter(event_key(e) for e in target.canon_events(session))
    keys.forgets = Counter(target.forget_events(session))
    return keys


def _record_conflict(source: SessionRecord, target: SessionRecord) -> str | None:
    if source.created_at != target.created_at:
        return "its session record was created at another time"
    contract = target.embedding_contract
    if contract is not None and contract != source.embedding_contract:
        return "its embedding contract differs"
    if target.shared_layer and not source.shared_layer:
        return "it is marked a shared layer there and not in --from"
    return None


def find_conflict(source: SourceView, target: Store, session: str) -> tuple[RowKeys, str | None]:
    """``--to``'s rows of the session, and why they conflict with ``--from``'s (None: they
    don't: every one is also in ``--from``, equal)."""
    record = target.get_session(session)
    keys = RowKeys()
    if record is None:
        return keys, None
    src_record = source.get_session(session)
    assert src_record is not None
    problem = _record_conflict(src_record, record)
    if problem is not None:
        return keys, problem
    keys = _target_rows(target, session)
    if keys.empty:
        return keys, None
    return keys, keys.compare(source, session)


def _refuse_conflict(session: str, target_shown: str, problem: str) -> ConflictError:
    return ConflictError(
        f"--to {target_shown} already holds session {session!r} and {problem}; a copy "
        "never overwrites rows, so nothing of that session was copied (copy it into "
        f"another store, or leave --session {session} out)"
    )


def copy_sessions(
    source: SourceView,
    target: Store,
    sessions: list[str],
    *,
    target_shown: str,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.time,
    batch: int = ROWS_PER_BATCH,
) -> CopyReport:
    """Copy ``sessions`` (already chosen) from ``source`` into ``target``; the counts after.

    Everything is checked before the first write: each session free in ``--from``, and
    none conflicting in ``--to``; each is then checked again under its ``--to`` lease.
    """
    shown = progress or NoProgress()
    started = time.monotonic()
    for name in sessions:
        check_source_free(source, name, clock())
        check_target_free(target, name, clock())
        _, problem = find_conflict(source, target, name)
        if problem is not None:
            raise _refuse_conflict(name, target_shown, problem)
    counts: list[SessionCount] = []
    for name in sessions:
        try:
            counts.append(_copy_one(source, target, name, target_shown, shown, clock, batch))
        except LamboError as exc:
            raise _stopped(exc, name, [c.session for c in counts]) from exc
    return CopyReport(counts, time.monotonic() - started)


def _stopped(exc: LamboError, name: str, done: list[str]) -> LamboError:
    """``exc`` saying what a copy stopped part way leaves: run again, it continues."""
    copied = f"sessions copied before it: {', '.join(done)}; " if done else ""
    note = (
        f" (the copy stopped at session {name!r}; {copied}what was written of it stays, and "
        "the same copy run again continues from there)"
    )
    return type(exc)(exc.message + note, detail=exc.detail)


def _copy_one(
    source: SourceView,
    target: Store,
    name: str,
    target_shown: str,
    progress: Progress,
    clock: Callable[[], float],
    batch: int,
) -> SessionCount:
    before = source.get_lease(name)
    count = SessionCount(name, count_rows(source, name))
    lease = _TargetLease(target, name, clock)
    try:
        have, problem = find_conflict(source, target, name)  # again, now under the lease
        if problem is not None:
            raise _refuse_conflict(name, target_shown, problem)
        record = source.get_session(name)
        assert record is not None
        progress.start(f"session {name}", sum(count.source.values()))
        try:
            count.written = _write_session(source, target, record, have, progress, lease, batch)
        finally:
            progress.finish()
    finally:
        lease.release()
    after = source.get_lease(name)
    if (after.token if after else None) != (before.token if before else None):
        raise ConflictError(
            f"a serve took session {name!r} in --from while it was copied; its rows may "
            "have changed meanwhile, so check the counts with a copy run again"
        )
    count.target = count_rows(target, name)
    return count


def _write_session(
    source: SourceView,
    target: Store,
    record: SessionRecord,
    have: RowKeys,
    progress: Progress,
    lease: _TargetLease,
    batch: int,
) -> int:
    """Write what ``--to`` lacks of the session; how many rows were written."""
    name = record.name
    written = 0

    def advance(rows: int, new: int) -> None:
        nonlocal written
        written += new
        progress.advance(rows)
        lease.keep()

    target.ensure_session(name, record.created_at)
    if record.embedding_contract is not None:
        target.stamp_contract(name, record.embedding_contract)
    if record.shared_layer:
        target.mark_shared_layer(name)
    # interactions first: a Derives edge starts at one
    for interaction in source.interactions(name):
        new = interaction.id not in have.interactions
        if new:  # one per batch: a WriteBatch carries at most one interaction
            target.apply(WriteBatch(session=name, interaction=interaction))
        advance(1, int(new))
    for chunk in chunks(source.concepts(name), batch):
        fresh = [c for c in chunk if c.id not in have.concepts]
        if fresh:
            target.apply(WriteBatch(session=name, concepts=fresh))
        advance(len(chunk), len(fresh))
    for edges in chunks(source.edges(name), batch):
        fresh_edges = [e for e in edges if (e.src, e.dst, e.edge_type) not in have.edges]
        if fresh_edges:
            target.apply(WriteBatch(session=name, edges=fresh_edges))
        advance(len(edges), len(fresh_edges))
    for intent in source.intents(name):
        advance(1, _write_intent(target, intent, have.intents.get(intent.receipt_id)))
    _add_missing(source.canon_events(name), have.events, event_key, target.add_canon_event, advance)
    _add_missing(source.forget_events(name), have.forgets, _same, target.add_forget_event, advance)
    _copy_gc_clock(target, record)
    return written


def _same(event: ForgetEvent) -> ForgetEvent:
    return event  # frozen: its own key


def _add_missing(
    events: Iterable[T],
    have: Counter[K],
    key: Callable[[T], K],
    add: Callable[[T], None],
    advance: Callable[[int, int], None],
) -> None:
    """Add the events ``--to`` lacks. Events have no id: each one ``--to`` has already
    (an interrupted copy's) stands for one equal event of ``--from``, so none goes twice."""
    already = Counter(have)
    for event in events:
        k = key(event)
        if already[k] > 0:
            already[k] -= 1
            advance(1, 0)
            continue
        add(event)
        advance(1, 1)


def _write_intent(target: Store, intent: WriteIntent, there: WriteIntent | None) -> int:
    """Add the intent (and settle it as it was settled); 1 when anything was written."""
    if there is None:
        target.add_intent(intent)
    elif there.state is not IntentState.PENDING or intent.state is IntentState.PENDING:
        return 0  # equal already (find_conflict checked)
    if intent.state is IntentState.PENDING:
        return 1
    when = intent.settled_at if intent.settled_at is not None else intent.created_at
    target.settle_intent(intent.receipt_id, intent.state.value, intent.outcome or {}, when)
    return 1


def _copy_gc_clock(target: Store, record: SessionRecord) -> None:
    """The gc clock, with the epoch moved so the mutations since the last sweep are kept."""
    now_there = target.get_session(record.name)
    assert now_there is not None
    since_sweep = record.mutation_count - record.last_gc_epoch
    target.set_gc_clock(record.name, record.last_gc_at, now_there.mutation_count - since_sweep)


__all__ = [
    "TABLES",
    "CopyReport",
    "NoProgress",
    "Progress",
    "SessionCount",
    "SourceView",
    "choose_sessions",
    "copy_sessions",
    "count_rows",
]
