"""The write pipeline: admit, commit the intent, ack; then apply in order on one thread.

``WritePipeline.submit`` runs admission (``admission.py``), issues a receipt,
commits the write intent to the store and only then returns the ack, so an
acked write survives ``kill -9``: the next server replays intents still
pending. Admission, receipt and intent happen under one lock, so the order
writes are acked in is the order they are applied in.

The apply worker is the session's only writer. For each intent it embeds all
of the call's texts in one batch (each framed with the call's text), matches
or merges each concept, builds edges, commits everything in one store
transaction that also marks the intent applied, mirrors the batch into the
in-RAM indices and settles the receipt.

Beside what it writes, a derive reads its near neighbours once (the top-k
vector hits the similarity merge already reads) for two spec features:

- Replacement candidates (lambo_derive, "Replacement candidates"): for each
  concept the write created, the existing concepts it may replace, listed on
  the settled receipt only; nothing is recorded.
- Possibly superseded (lambo_recall, "Possibly superseded, not declared",
  #198): a created concept that is a near match of an older one of its type,
  refused the merge because an identifier or number differs, and differing
  from it in exactly one value (``supersession.flags``), records a
  SUPERSEDES_SUSPECTED edge from the newer concept to the older one.

A write carrying against also gets a stale report on its receipt: the direct
dependents of its targets that now rest on a contradicted concept, by the
rule in ``contradiction.py``, read from the graph right after the commit.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .admission import (
    FRAME_SEPARATOR,
    NOTHING_WRITTEN,
    admit_action,
    admit_derive,
    call_text,
    check_action_acyclic,
    check_hierarchy_acyclic,
)
from .contradiction import DEFAULT_EDGE_MIN_AGE_S, StaleReport, stale_dependents
from .embed.base import Embedder
from .embed.loader import EmbedderLoading
from .errors import LamboError, StoreError, internal_fault
from .health import MAX_FLUSH_ATTEMPTS, StoreHealth
from .index.graph import SessionGraph
from .matching import MERGE_CANDIDATES, merge_forbidden
from .model import (
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    IntentState,
    Interaction,
    InteractionKind,
    Vector,
    WriteBatch,
    WriteIntent,
    new_id,
    short_id,
)
from .rates import PROBE_CONCEPTS, WriteRates, run_probe
from .receipts import ReceiptState, ReceiptView, render_line
from .references import refuse_changed, still_names
from .session import Session
from .store.base import LEASE_LOST_TEXT, FencedOut, IntentNotPending
from .supersession import Side, comparable, flags
from .text import canonical_key, show_safely

log = logging.getLogger(__name__)

COOCCURRENCE_PAIRS_PER_CALL = 10
COOCCURRENCE_WEIGHT = 0.5
ACCESS_FLUSH_INTERVAL_S = 1.0  # write-behind of recall access counts
# Replacement candidates (spec: lambo_derive, "Replacement candidates").
CANDIDATES_PER_CONCEPT = 3
CANDIDATE_BYTES = 2048
EXCERPT_CHARS = 80
_CANDIDATES_CLAUSE = (
    "; {n} replacement candidate(s): existing concepts this write may replace "
    "(nothing recorded; cite one in against on a later call only if it really is replaced)"
)
_MERGED_SUFFIX = "; merged with this write, may be replaced"
_NEWER_SUFFIX = (
    "; newer: dated after this write, so it may replace this write, not the other way round; "
    "do not cite it in against"
)


@dataclass
class Ack:
    """What a write tool answers: its text and its structuredContent."""

    text: str
    structured: dict[str, Any]


def render_ack(summary: str, receipt: ReceiptView, agent_id: str) -> Ack:
    rid = receipt.receipt_id or ""
    lines = [summary, render_line(receipt)]
    if receipt.state is ReceiptState.PENDING:
        lines.append(
            "The outcome arrives on your next tool response. To wait for it, call lambo_stats "
            f"with receipt={rid} (add wait_ms to block)."
        )
    lines.append(f'Recorded under agent_id "{agent_id}"; send this same id on every call.')
    return Ack(
        text="\n".join(lines),
        structured={
            "summary": summary,
            "receipt": rid,
            "receipt_state": receipt.state.value,
            "agent_id": agent_id,
            "warnings": [],
        },
    )


def _durable_outcome(outcome: dict[str, Any]) -> dict[str, Any]:
    """What the intent keeps of the outcome: the summary line and counts, not the lists.

    A receipt recovered after a restart keeps only its summary (spec: replacement
    candidates, stale report); the rows stay on the in-process receipt.
    """
    data = {k: v for k, v in outcome["data"].items() if k != "replacement_candidates"}
    return {"detail": outcome["detail"].split("\n", 1)[0], "data": data}


def _candidate_line(row: dict[str, Any]) -> str:
    line = f'- {row["id"]} "{row["excerpt"]}" (cosine {row["cosine"]:.4f}, for {row["new_id"]})'
    if row.get("merged"):
        line += _MERGED_SUFFIX
    if row.get("newer"):
        line += _NEWER_SUFFIX
    return line


def _row_bytes(row: dict[str, Any]) -> int:
    """A candidate row's size as the byte bound counts it: its compact serialized JSON."""
    return len(json.dumps(row, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _stale_lines(report: StaleReport) -> list[str]:
    lines = [
        f"{report.total} dependent(s) now rest on a contradicted concept "
        "(direct depends_on citations; lambo_stale lists them):"
    ]
    lines += [
        f'- {short_id(r.node_id)} "{r.snippet}" cites {short_id(r.cited_id)}' for r in report.rows
    ]
    left = report.total - len(report.rows)
    if left:
        lines.append(f"- … {left} more; lambo_stale pages through them all")
    return lines


@dataclass
class _Placement:
    """One derive concept placed by similarity search: what it hit, and where it landed."""

    node_id: str
    content: str
    ctype: ConceptType
    hits: list[tuple[str, float]]  # top-k hits at or above the threshold, closest first
    never_into: set[str]
    merged_cosine: float | None = None  # set when the write merged into node_id


@dataclass
class _Plan:
    """What one intent will write, worked out under the index lock."""

    batch: WriteBatch
    created: list[str] = field(default_factory=list)
    matched: list[str] = field(default_factory=list)
    embedded: int = 0
    semantic_merged: int = 0
    reinforced: int = 0
    citations: int = 0
    contradictions: int = 0
    action_node: str | None = None
    candidates: list[dict[str, Any]] = field(default_factory=list)  # within the byte bound
    candidate_total: int = 0
    supersessions: int = 0
    against_targets: list[str] = field(default_factory=list)


@dataclass
class _Periodic:
    interval_s: float
    job: Callable[[], object]
    next_at: float


class _TransientFailure(LamboError):
    """The embedder did not answer: the receipt fails, the intent is kept for the next server."""

    def render(self) -> str:
        return self.message


class _NotPending(Exception):
    """The write's intent was settled already, so its batch was not committed."""


class _HandedOn(Exception):
    """The session is stopping while this write waits for the model: it is not attempted
    here, and the stop hands it on as a durable intent."""


KEPT_FOR_REPLAY = (
    "; nothing was written by this server, and the write's intent is kept: the next server "
    "on this session replays it"
)
STORE_REFUSED_WRITE = "the store refused this write (the detail is in the serve's log)"


@dataclass(frozen=True)
class StopReport:
    """What a clean stop did with the writes it had not applied."""

    worker_stopped: bool  # False: the worker was still busy when the budget ran out
    flushed: bool  # the final flush completed (and the session was healthy and held)
    applied: int  # this server's own writes applied before the stop (all of its run)
    deferred: int  # this server's writes handed on as durable intents (intent_durable)
    unflushed: int  # this server's writes the stop could not vouch for (close_unflushed)
    replays_left: int  # an earlier server's intents still owed, left for the next one
    elapsed_s: float

    def summary(self) -> str:
        line = (
            f"stopped in {self.elapsed_s:.1f} s: {self.applied} write(s) applied, "
            f"{self.deferred} handed on as durable intents (intent_durable), "
            f"{self.unflushed} close_unflushed, {self.replays_left} replay(s) left owed"
        )
        if not self.flushed:
            line += "; the final flush did not complete"
        if not self.worker_stopped:
            line += (
                "; the worker was still busy (a write or a background job) when the "
                "shutdown budget ran out"
            )
        return line


class WritePipeline:
    """One session's write queue and its apply worker."""

    def __init__(
        self,
        session: Session,
        *,
        embed_wait_s: float | None = None,
        edge_min_age_s: float = DEFAULT_EDGE_MIN_AGE_S,
    ) -> None:
        self.session = session
        self._embed_wait_s = embed_wait_s  # None: wait for a loading model as long as it takes
        self.edge_min_age_s = edge_min_age_s  # canonization_edge_min_age, for the stale report
        self._admit_lock = threading.Lock()
        self._queue: queue.Queue[WriteIntent | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._probe: threading.Thread | None = None
        self.rates = WriteRates()
        self.health = StoreHealth(session.name, session.clock)
        # Set by close(): the worker finishes the write in hand and takes no other.
        self._stopping = threading.Event()
        # Until when a stopping worker may still wait for a loading model for the write in
        # its hands (time.monotonic); past it, that write is handed on too.
        self._stop_deadline = 0.0
        self._handed_on: WriteIntent | None = None  # the write the worker gave back at stop
        self._flush_failures = 0  # consecutive refusals of the write-behind batch
        # Why the store fenced this writer out (its lease passed to another writer), once it
        # has: from then on nothing is written, admitted or acked here (see _lease_lost).
        self._fenced: str | None = None
        self._lock = threading.Lock()
        self.replayed = 0
        self.replay_owed = 0
        self.applied = 0
        self.failed = 0
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0
        self._periodic: list[_Periodic] = []
        self.every(ACCESS_FLUSH_INTERVAL_S, self.flush_access_counts)

    # -- lifecycle -------------------------------------------------------------------------
    def start(self, *, probe: bool = False) -> WritePipeline:
        """Queue intents a previous server left owed, then start the worker (and, with
        ``probe``, the startup probe of the embedder once the model has loaded)."""
        owed = self.session.store.pending_intents(self.session.name)
        with self._lock:
            self.replay_owed = len(owed)
            self._in_flight += len(owed)
        for intent in owed:
            intent.payload = {**intent.payload, "_replay": True}
            self._queue.put(intent)
        self._thread = threading.Thread(
            target=self._run, name=f"lambo-apply-{self.session.name}", daemon=True
        )
        self._thread.start()
        if probe and self.session.embeds and self.session.plan.lazy is not None:
            self._probe = threading.Thread(
                target=self._run_probe, name=f"lambo-probe-{self.session.name}", daemon=True
            )
            self._probe.start()
        return self

    def close(
        self, timeout: float = 15.0, *, lease_held: Callable[[], bool] | None = None
    ) -> StopReport:
        """A clean stop within ``timeout`` seconds, handing on what was not applied.

        Admission closes (later writes answer dropped, closing); the worker finishes
        the write it is applying and takes no other; the write-behind is flushed; and
        every write of this server left unapplied is settled ``intent_durable`` (its
        intent is in the store and the next server replays it) when the flush completed
        and ``lease_held()`` says the lease is still this server's, else
        ``close_unflushed``. A flush that fails is retried until the
        budget ends, and one that then completes turns those receipts intent_durable.
        The caller keeps the lease until this returns, and gives it up only when
        ``worker_stopped``.
        """
        started = time.monotonic()
        deadline = started + timeout
        receipts = self.session.receipts
        receipts.close()
        with self._admit_lock:
            pass  # an admission already past its receipt has queued its intent now
        # Leave a little of the budget for the flush and the receipts.
        reserve = min(1.0, timeout / 4)
        self._stop_deadline = deadline - 2 * reserve  # then the worker ends before the join
        self._stopping.set()
        self._queue.put(None)  # wakes a worker waiting for work
        worker = self._thread
        if worker is not None:
            # at least a moment, even on a tiny budget: an idle worker needs no more
            worker.join(max(0.2, deadline - reserve - time.monotonic()))
        stopped = worker is None or not worker.is_alive()
        left = self._take_unapplied()
        own = [i for i in left if not i.payload.get("_replay")]
        flushed = self._final_flush(lease_held)
        state = ReceiptState.INTENT_DURABLE if flushed else ReceiptState.CLOSE_UNFLUSHED
        for intent in own:
            receipts.settle(intent.receipt_id, state)
        # A retried flush that completes vouches for them after all.
        if not flushed and own and self._retry_flush(deadline, lease_held):
            flushed = True
            for intent in own:
                receipts.settle(intent.receipt_id, ReceiptState.INTENT_DURABLE)
        probe = self._probe
        if probe is not None:
            probe.join(max(0.0, deadline - time.monotonic()))
        with self._lock:
            applied = self.applied
        return StopReport(
            worker_stopped=stopped,
            flushed=flushed,
            applied=applied,
            deferred=len(own) if flushed else 0,
            unflushed=0 if flushed else len(own),
            replays_left=len(left) - len(own),
            elapsed_s=time.monotonic() - started,
        )

    def _take_unapplied(self) -> list[WriteIntent]:
        """Every queued write the worker will not apply, in the order they were acked (the
        one it handed back first: it sets that only once it has let go of it)."""
        left: list[WriteIntent] = []
        handed_on, self._handed_on = self._handed_on, None
        if handed_on is not None:
            left.append(handed_on)
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                left.append(item)
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()
        return left

    def _final_flush(self, lease_held: Callable[[], bool] | None) -> bool:
        """Whether the stop can vouch for the intents it hands on: the lease still this
        server's and the write-behind flushed. Their intents were committed before their
        acks, so a store refusing other writes (degraded) does not undo them."""
        if self._fenced is not None or (lease_held is not None and not lease_held()):
            log.warning(
                "session %s: the lease passed to another writer before the stop",
                self.session.name,
            )
            return False
        flushed, _ = self._flush_write_behind(final=True)
        return flushed

    def _retry_flush(self, deadline: float, lease_held: Callable[[], bool] | None) -> bool:
        pause = 0.1
        while time.monotonic() + pause < deadline:
            if self._fenced is not None or (lease_held is not None and not lease_held()):
                return False  # a lost lease does not come back: nothing to retry for
            time.sleep(pause)
            if self._final_flush(lease_held):
                return True
            pause = min(pause * 2, 1.0)
        return False

    def wait_idle(self, timeout: float) -> bool:
        """Block until every queued write has been applied or failed (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    # -- admission -------------------------------------------------------------------------
    def submit(self, tool: str, args: object) -> Ack:
        """Admit one lambo_derive / lambo_record_action call and ack it."""
        session = self.session
        with self._admit_lock:
            self._refuse_if_fenced()
            with session.index.lock:
                graph = session.index.graph
                if tool == "lambo_derive":
                    admitted = admit_derive(
                        args, session=session.name, graph=graph, embeds=session.embeds
                    )
                elif tool == "lambo_record_action":
                    admitted = admit_action(args, session=session.name, graph=graph)
                else:  # pragma: no cover - the service routes only write tools here
                    raise ValueError(f"not a write tool: {tool}")
            receipt = session.receipts.issue(admitted.agent_id, session.name, tool)
            if receipt.state is not ReceiptState.PENDING:
                # the receipt line says why ("nothing was written: your lane of 64 …")
                return render_ack("this call was not queued", receipt, admitted.agent_id)
            assert receipt.receipt_id is not None
            intent = WriteIntent(
                receipt_id=receipt.receipt_id,
                session=session.name,
                agent_id=admitted.agent_id,
                tool=tool,
                payload=admitted.payload,
                created_at=session.clock.now(),
            )
            try:
                intent = session.store.add_intent(intent)
            except LamboError as exc:
                session.receipts.withdraw(receipt.receipt_id)
                if isinstance(exc, FencedOut):
                    self._lease_lost(exc)
                    raise
                if not isinstance(exc, StoreError):
                    raise
                self.health.refused("a write's intent", exc.detail or exc.message)
                # health logged why (once, then counted): not again for every call
                raise StoreError(f"{exc.message}; {self.health.note()}") from None
            with self._lock:
                self._in_flight += 1
            self._queue.put(intent)
        ack = render_ack(admitted.summary, receipt, admitted.agent_id)
        note = self.health.note()
        if note is not None:  # admitted, but the store has been refusing this session's writes
            ack.text += f"\nwarning: {note}"
            ack.structured["warnings"].append(note)
        return ack

    # -- the lease -------------------------------------------------------------------------
    @property
    def fenced(self) -> bool:
        """Whether the store has fenced this writer out (its lease passed to another)."""
        return self._fenced is not None

    def _lease_lost(self, exc: FencedOut) -> None:
        """The store refused a write because this server's lease passed to another writer:
        stop writing at once. The worker takes no other write, admission refuses, and the
        stop settles what is held close_unflushed (the new holder replays the intents)."""
        if self._fenced is None:
            self._fenced = exc.detail or exc.message
            log.error(
                "session %s: the store fenced out this serve's writes (%s); it stops writing "
                "and acks nothing more; the writes it holds are left to the new holder's replay",
                self.session.name,
                self._fenced,
            )
        self._queue.put(None)  # wakes a worker waiting for work, so it ends

    def _refuse_if_fenced(self) -> None:
        if self._fenced is not None:
            raise FencedOut(LEASE_LOST_TEXT, detail=self._fenced)

    # -- the worker ------------------------------------------------------------------------
    def every(
        self, interval_s: float, job: Callable[[], object], *, first_in_s: float | None = None
    ) -> None:
        """Run ``job`` on the writer thread about every ``interval_s`` seconds, the first
        time after ``first_in_s`` (default: one interval; 0 runs it as soon as the worker is
        free).

        Background work that writes (access counts, the daemon's cycles) runs
        here, between writes, so the session keeps exactly one writer.
        """
        first = interval_s if first_in_s is None else first_in_s
        with self._lock:
            self._periodic.append(_Periodic(interval_s, job, time.monotonic() + first))

    def _run_due(self) -> None:
        now = time.monotonic()
        with self._lock:
            due = [p for p in self._periodic if p.next_at <= now]
        for periodic in due:
            if self._fenced is not None:
                return
            periodic.next_at = now + periodic.interval_s
            try:
                periodic.job()
            except FencedOut as exc:  # the daemon's write found the lease gone
                self._lease_lost(exc)
            except Exception:  # a background job's fault must not stop the writer
                log.exception("background job %r failed", periodic.job)

    def _next_wait(self) -> float:
        with self._lock:
            if not self._periodic:
                return ACCESS_FLUSH_INTERVAL_S
            soonest = min(p.next_at for p in self._periodic)
        return max(0.0, min(ACCESS_FLUSH_INTERVAL_S, soonest - time.monotonic()))

    def _run(self) -> None:
        while not self._stopping.is_set() and self._fenced is None:
            waiting = self._queue.qsize() > 0  # the next write follows the last back to back
            try:
                intent = self._queue.get(timeout=self._next_wait())
            except queue.Empty:
                self.rates.idle()
                if not self._stopping.is_set():
                    self._run_due()
                continue
            if intent is None:
                continue  # close() woke us: the loop's test says whether to stop
            if self._fenced is not None:
                self._handed_on = intent  # not attempted: the stop settles it with the rest
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()
                return
            try:
                self._apply_one(intent, back_to_back=waiting)
            finally:
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()
                if intent.payload.get("_replay"):
                    # its outcome is in the store now: waits on it ask again
                    self.session.receipts.replay_settled()
            if not self._stopping.is_set():  # a stop runs no background job of its own
                self._run_due()

    def flush_access_counts(self) -> int:
        """Write the access counts recalls left in RAM behind, on this (the writer's) thread;
        how many concepts' counts were written."""
        return self._flush_write_behind()[1]

    def _flush_write_behind(self, *, final: bool = False) -> tuple[bool, int]:
        """(whether nothing is left unflushed, how many concepts' counts were written).

        Recalls never write to the store; their counts are batched here about once a
        second. A refused flush hands the counts back for the next one, until the same
        batch has been refused MAX_FLUSH_ATTEMPTS times in a row: then it is dropped
        (dead-lettered) so the lag says what is really owed. The final flush of a stop
        never dead-letters: its failure is what close_unflushed reports.
        """
        since = self.session.access_counts.pending_since()
        counts = self.session.access_counts.drain()
        if not counts:
            return True, 0
        try:
            self.session.store.add_access_counts(self.session.name, counts)
        except FencedOut as exc:
            # Not this writer's to write any more (the new holder counts its own recalls).
            self._lease_lost(exc)
            return False, 0
        except LamboError as exc:
            self._flush_failures += 1
            self.health.refused("the write-behind of access counts", exc.detail or exc.message)
            if self._flush_failures >= MAX_FLUSH_ATTEMPTS and not final:
                self._flush_failures = 0
                self.health.dead_letter(f"the access counts of {len(counts)} concept(s)")
                return True, 0
            self.session.access_counts.restore(counts, since)
            return False, 0
        self._flush_failures = 0
        self.health.wrote()
        with self.session.index.lock:
            for node_id, n in counts.items():
                concept = self.session.index.graph.concept(node_id)
                if concept is not None:
                    concept.access_count += n
        return True, len(counts)

    def flush_lag_ms(self) -> float:
        """Age of the oldest change the store does not hold yet (0 when none waits)."""
        since = self.session.access_counts.pending_since()
        return 0.0 if since is None else max(0.0, (time.monotonic() - since) * 1000.0)

    def _apply_one(self, intent: WriteIntent, *, back_to_back: bool = False) -> None:
        session = self.session
        replay = bool(intent.payload.get("_replay"))
        payload = {k: v for k, v in intent.payload.items() if k != "_replay"}
        started = time.monotonic()
        if replay and self._settled_elsewhere(intent):
            return
        try:
            try:
                vectors = self._embed(payload)
            except _HandedOn:
                self._handed_on = intent  # the stop settles it with the rest of the queue
                return
            with session.index.lock:
                plan = self._plan(intent, payload, vectors)
            if any(c.vector is not None for c in plan.batch.concepts):
                session.stamp_before_write()
            outcome = self._outcome(plan)
            plan.batch.intent_receipt_id = intent.receipt_id
            plan.batch.intent_outcome = _durable_outcome(outcome)
            try:
                self._commit(plan.batch)
            except _NotPending:
                if replay and self._settled_elsewhere(intent):
                    return
                raise _TransientFailure(STORE_REFUSED_WRITE, detail="intent not pending") from None
            try:
                session.index.apply(plan.batch)
            except Exception:  # committed: the write happened; the RAM copy catches up on open
                log.exception("write %s committed but not mirrored in RAM", intent.receipt_id)
        except FencedOut as exc:  # its commit (or the contract's stamp) found the lease gone
            self._lease_lost(exc)
            self._handed_on = intent  # not applied by this writer: the new holder replays it
            return
        except _TransientFailure as exc:
            self._fail(intent, exc, keep_intent=True, replay=replay)
            return
        except LamboError as exc:
            self._fail(intent, exc, keep_intent=False, replay=replay)
            return
        except Exception as exc:  # a handler fault: the write failed, the worker lives on
            log.exception("applying write %s failed", intent.receipt_id)
            self._fail(intent, internal_fault(repr(exc)), keep_intent=False, replay=replay)
            return
        if plan.against_targets:
            self._add_stale_report(outcome, plan.against_targets)
        elapsed_ms = (time.monotonic() - started) * 1000.0
        with self._lock:
            if replay:
                self.replayed += 1
                self.replay_owed -= 1
            else:
                self.applied += 1
        if not replay:
            self.rates.applied(
                (session.clock.now() - intent.created_at) * 1000.0,
                elapsed_ms,
                queue_was_busy=back_to_back,
            )
        log.debug("applied %s in %.1f ms", intent.receipt_id, elapsed_ms)
        session.receipts.settle(
            intent.receipt_id, ReceiptState.APPLIED, outcome["detail"], outcome["data"]
        )

    def _commit(self, batch: WriteBatch) -> None:
        """The one store transaction of a write; a refusal by the store itself (not by a
        rule of the write) keeps the intent for the next server and degrades the session."""
        try:
            self.session.store.apply(batch)
        except FencedOut:
            raise  # not a store failure: the lease passed on (see _apply_one)
        except IntentNotPending:
            raise _NotPending from None
        except LamboError as exc:
            self.health.refused("an applied write", exc.detail or exc.message)
            raise _TransientFailure(STORE_REFUSED_WRITE) from None  # health logged why
        self.health.wrote()

    def _settled_elsewhere(self, intent: WriteIntent) -> bool:
        """Whether a replayed intent was settled since it was queued (an earlier holder
        applied it before it let go): then it is counted replayed and never applied twice;
        a wait on its receipt reads the outcome from the store."""
        try:
            stored = self.session.store.get_intent(intent.receipt_id)
        except LamboError as exc:
            log.warning("replay %s: intent not readable: %s", intent.receipt_id, exc.detail)
            return False
        if stored is None or stored.state is IntentState.PENDING:
            return False
        log.info(
            "replay %s: already settled %s in the store; not applied again",
            intent.receipt_id,
            stored.state.value,
        )
        with self._lock:
            self.replay_owed -= 1
            if stored.state is IntentState.APPLIED:
                self.replayed += 1
        return True

    def _fail(
        self, intent: WriteIntent, exc: LamboError, *, keep_intent: bool, replay: bool
    ) -> None:
        session = self.session
        if exc.detail:
            log.warning("write %s failed: %s", intent.receipt_id, exc.detail)
        detail = exc.render()
        if keep_intent:
            # Not "nothing was written" alone: a later server applies it from its intent.
            detail = detail.removesuffix(NOTHING_WRITTEN) + KEPT_FOR_REPLAY
        elif not detail.endswith(NOTHING_WRITTEN):
            detail += NOTHING_WRITTEN
        if not keep_intent:
            try:
                session.store.settle_intent(
                    intent.receipt_id, "failed", {"detail": detail}, session.clock.now()
                )
            except FencedOut as store_exc:
                self._lease_lost(store_exc)
            except LamboError as store_exc:
                self.health.refused("the record of a failed write", store_exc.detail or "")
                log.warning(
                    "could not record the failure of %s: %s", intent.receipt_id, store_exc.detail
                )
        with self._lock:
            if replay:
                self.replay_owed -= 1
            else:
                self.failed += 1
        if replay and keep_intent:
            session.receipts.replay_failed(
                intent.receipt_id, intent.agent_id, intent.session, detail
            )
        session.receipts.settle(intent.receipt_id, ReceiptState.FAILED, detail, {})

    # -- embedding -------------------------------------------------------------------------
    def _texts_to_embed(self, payload: dict[str, Any]) -> list[str]:
        """Every text the write might create a concept for, framed as the spec frames it."""
        if payload["kind"] == "derive":
            contents = [c["content"] for c in payload["concepts"]]
            frame_with = call_text(contents)
            items = contents + [e for p in payload["parent_of"] for e in (p["parent"], p["child"])]
            return [f"{item}{FRAME_SEPARATOR}{frame_with}" for item in items]
        targets = payload["produces"] + payload["modifies"]
        targets += [d["ref"] for d in payload["depends_on"] if not d.get("node_id")]
        return [payload["action"], *targets]

    def _wait_for_embedder(self) -> Embedder:
        """The loaded embedder, waiting for a loading one (up to ``embed_wait_s``) in short
        slices: a stop lets the write in hand wait for the model within its budget, and
        past that hands it on rather than be held up behind the load."""
        wait_s = self._embed_wait_s
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            if self._stopping.is_set() and time.monotonic() >= self._stop_deadline:
                raise _HandedOn
            left = 0.1 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return self.session.embedder(min(0.1, left))
            except EmbedderLoading:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def _embed(self, payload: dict[str, Any]) -> list[Vector] | None:
        if not self.session.embeds:
            return None
        try:
            embedder: Embedder = self._wait_for_embedder()
        except EmbedderLoading:
            raise _TransientFailure(
                "the embedder did not finish loading in time", detail="embedder still loading"
            ) from None
        except LamboError as exc:
            # No model installed (or it failed to load): this write fails, but its intent
            # is kept so a server that has the model replays it.
            raise _TransientFailure(exc.render()) from None
        texts = self._texts_to_embed(payload)
        try:
            matrix = embedder.embed(texts)
        except LamboError:
            raise
        except Exception as exc:
            raise _TransientFailure(
                "the embedder failed on this write; the detail was logged", detail=repr(exc)
            ) from None
        return [matrix[i] for i in range(len(texts))]

    # -- planning (under the index lock) ---------------------------------------------------
    def _plan(
        self, intent: WriteIntent, payload: dict[str, Any], vectors: list[Vector] | None
    ) -> _Plan:
        session = self.session
        now = session.clock.now()
        event_time = payload.get("event_time")
        about = min(float(event_time), now) if event_time is not None else now
        kind = InteractionKind.DERIVE if payload["kind"] == "derive" else InteractionKind.ACTION
        summary = (
            call_text([c["content"] for c in payload["concepts"]])
            if payload["kind"] == "derive"
            else payload["action"]
        )
        interaction = Interaction(
            new_id(), session.name, intent.agent_id, kind, now, about, summary
        )
        plan = _Plan(batch=WriteBatch(session=session.name, interaction=interaction))
        # The vectors came from the loaded embedder: its threshold is the one they merge by.
        threshold = session.embedder(0).merge_threshold if vectors is not None else None
        builder = _Builder(self, plan, intent.agent_id, now, about, interaction.id, threshold)
        if payload["kind"] == "derive":
            builder.derive(payload, vectors)
        else:
            builder.action(payload, vectors)
        return plan

    def _outcome(self, plan: _Plan) -> dict[str, Any]:
        if plan.action_node is not None:
            detail = (
                f"recorded action {short_id(plan.action_node)}: {len(plan.created)} created "
                f"({plan.embedded} embedded), {len(plan.matched)} matched existing; "
                f"{len(plan.batch.edges)} edge(s)"
            )
        else:
            n = len(plan.created) + len(plan.matched)
            detail = (
                f"derived {n} concept(s): {len(plan.created)} created ({plan.embedded} embedded), "
                f"{len(plan.matched)} matched existing"
            )
            if plan.semantic_merged:
                detail += f" ({plan.semantic_merged} by similarity)"
        if plan.citations:
            detail += f"; {plan.citations} citation(s) recorded"
        if plan.contradictions:
            detail += f"; {plan.contradictions} contradiction(s) recorded"
        if plan.supersessions:
            detail += f"; {plan.supersessions} possible undeclared supersession(s) flagged"
        if plan.candidate_total:
            detail += _CANDIDATES_CLAUSE.format(n=plan.candidate_total)
            detail += "".join("\n" + _candidate_line(row) for row in plan.candidates)
            left = plan.candidate_total - len(plan.candidates)
            if left:
                detail += f"\n- … {left} more not listed (the receipt lists at most 2048 bytes)"
        data: dict[str, Any] = {
            "created": plan.created,
            "matched": plan.matched,
            "created_count": len(plan.created),
            "matched_count": len(plan.matched),
            "semantic_merged": plan.semantic_merged,
            "reinforced": plan.reinforced,
            "edges": len(plan.batch.edges),
            "embedded": plan.embedded,
        }
        if plan.action_node is not None:
            data["action_node"] = plan.action_node
        if plan.supersessions:
            data["possible_supersessions"] = plan.supersessions
        if plan.candidate_total:
            data["replacement_candidates"] = {
                "candidates": plan.candidates,
                "total": plan.candidate_total,
            }
        return {"detail": detail, "data": data}

    def _add_stale_report(self, outcome: dict[str, Any], targets: list[str]) -> None:
        """The stale report on the against targets, read from the graph as just committed."""
        session = self.session
        try:
            with session.index.lock:
                report = stale_dependents(
                    session.index.graph, targets, session.clock.now(), self.edge_min_age_s
                )
        except Exception:  # the write is committed: a fault here must not fail its receipt
            log.exception("stale report for a write against %s failed", targets)
            return
        outcome["data"]["stale_report"] = report.as_dict()
        if report.total:
            outcome["detail"] += "\n" + "\n".join(_stale_lines(report))

    # -- the startup probe ---------------------------------------------------------------
    def _run_probe(self) -> None:
        """Time a representative write's embedding once the model has loaded (rates.py)."""
        lazy = self.session.plan.lazy
        assert lazy is not None
        while not self._stopping.is_set():
            if lazy.ready or lazy.error is not None:
                break
            lazy.wait(0.1)
        if self._stopping.is_set() or not lazy.ready:
            return
        embedder = lazy.get()
        texts = self._texts_to_embed(
            {
                "kind": "derive",
                "concepts": [{"content": c} for c in PROBE_CONCEPTS],
                "parent_of": [],
            }
        )
        try:
            serial, wide = run_probe(embedder.embed, texts, self._stopping)
        except Exception:  # telemetry: a failing probe leaves the keys unmeasured
            log.exception("session %s: the startup probe failed", self.session.name)
            return
        self.rates.probed(serial, wide)
        log.info(
            "session %s: startup probe: %s writes/s one at a time, %s four at once",
            self.session.name,
            f"{serial:.1f}" if serial is not None else "n/a",
            f"{wide:.1f}" if wide is not None else "n/a",
        )

    # -- lambo_stats -----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The write_queue_* keys, every figure measured (or null until it is)."""
        book = self.session.receipts.stats()
        with self._lock:
            replayed, owed = self.replayed, self.replay_owed
        keys: dict[str, Any] = {
            "write_queue_bound": book.bound,
            "write_queue_lane_bound": book.lane_bound,
            **self.rates.keys(),
            "write_queue_outstanding": book.outstanding,
            "write_queue_accepted": book.accepted,
            "write_queue_applied": book.applied,
            "write_queue_failed": book.failed,
            "write_queue_abandoned": book.abandoned,
            "write_queue_deferred": book.deferred,
            "write_queue_replayed": replayed,
            "write_queue_replay_owed": owed,
            "write_queue_dropped": book.dropped,
            "write_queue_dropped_closed": book.dropped_closed,
            "receipts_retained": book.receipts_retained,
        }
        return keys

    def health_keys(self) -> dict[str, Any]:
        """flush_lag_ms, dead_lettered and degraded, as lambo_stats reports them."""
        return {
            "flush_lag_ms": round(self.flush_lag_ms(), 3),
            "dead_lettered": self.health.dead_lettered,
            "degraded": self.health.degraded,
        }


class _Builder:
    """Turns one resolved intent into concepts and edges against the current graph."""

    def __init__(
        self,
        pipeline: WritePipeline,
        plan: _Plan,
        agent_id: str,
        now: float,
        about: float,
        interaction_id: str,
        merge_threshold: float | None,
    ) -> None:
        self.session = pipeline.session
        self.graph: SessionGraph = pipeline.session.index.graph
        self.plan = plan
        self.agent_id = agent_id
        self.now = now
        self.about = about
        self.interaction_id = interaction_id
        self._by_key: dict[str, str] = {}  # keys this call already placed -> node id
        self._placements: list[_Placement] = []  # placed by similarity search, in call order
        self._cites_itself: set[str] = set()  # merged into a concept its depends_on names
        self._edges: dict[tuple[str, str, EdgeType], Edge] = {}
        self._threshold = merge_threshold  # None: this write has no vectors

    # -- concepts ---------------------------------------------------------------------------
    def place(
        self,
        content: str,
        ctype: ConceptType,
        vector: Vector | None,
        *,
        merge: bool = True,
        never_into: set[str] | None = None,
    ) -> str:
        """The node id ``content`` lands on: this call's, an existing key, a merge, or new."""
        key = canonical_key(content)
        if key in self._by_key:
            return self._by_key[key]
        existing = self.graph.concepts_with_key(key)
        if existing:
            node_id = existing[0].id
            self._matched(node_id)
        else:
            barred = never_into or set()
            hits = self._near(vector) if merge else []
            target = self._merge_target(content, hits, barred)
            if target is not None:
                self.plan.semantic_merged += 1
                self._matched(target)
                node_id = target
            else:
                node_id = self._create(content, key, ctype, vector)
            if merge and hits:
                placed = _Placement(node_id, content, ctype, hits, barred)
                if target is not None:
                    placed.merged_cosine = dict(hits)[target]
                self._placements.append(placed)
        self._by_key[key] = node_id
        return node_id

    def _matched(self, node_id: str) -> None:
        if node_id not in self.plan.matched and node_id not in self.plan.created:
            self.plan.matched.append(node_id)

    def _near(self, vector: Vector | None) -> list[tuple[str, float]]:
        """The one vector search a placement makes: top-k hits at or above the threshold.

        The merge, the replacement candidates and the possibly-superseded flag all
        read these hits; nothing searches again.
        """
        matrix = self.session.index.vectors
        if vector is None or self._threshold is None or matrix is None or len(matrix) == 0:
            return []
        if matrix.dim != vector.shape[0]:
            return []
        hits = matrix.top_k(vector, MERGE_CANDIDATES)
        return [(node_id, cosine) for node_id, cosine in hits if cosine >= self._threshold]

    def _mergeable(self, content: str, node_id: str, never_into: set[str]) -> bool:
        if node_id in never_into:
            return False
        candidate = self.graph.concept(node_id)
        return candidate is not None and merge_forbidden(content, candidate.content) is None

    def _merge_target(
        self, content: str, hits: list[tuple[str, float]], never_into: set[str]
    ) -> str | None:
        for node_id, _cosine in hits:
            if self._mergeable(content, node_id, never_into):
                return node_id
        return None

    def _create(self, content: str, key: str, ctype: ConceptType, vector: Vector | None) -> str:
        node_id = new_id()
        self.plan.batch.concepts.append(
            Concept(
                id=node_id,
                session=self.session.name,
                content=content,
                canonical_key=key,
                concept_type=ctype,
                created_at=self.now,
                about_time=self.about,
                agent_id=self.agent_id,
                interaction_id=self.interaction_id,
                vector=vector,
            )
        )
        self.plan.created.append(node_id)
        if vector is not None:
            self.plan.embedded += 1
        return node_id

    # -- edges ------------------------------------------------------------------------------
    def edge(self, src: str, dst: str, etype: EdgeType, weight: float = 1.0) -> None:
        key = (src, dst, etype)
        if key in self._edges:
            return
        if self.graph.edge(src, dst, etype) is not None:
            self.plan.reinforced += 1
        self._edges[key] = Edge(
            self.session.name,
            src,
            dst,
            etype,
            weight,
            self.interaction_id,
            self.agent_id,
            self.now,
            self.about,
        )

    def _finish(self) -> None:
        self.plan.batch.edges = list(self._edges.values())

    def _linked(self, a: str, b: str, *, stored: bool = True) -> bool:
        """An against or depends_on between ``a`` and ``b``, either way: in this call, and
        (``stored``) already in the graph."""
        for etype in (EdgeType.DEPENDENCY, EdgeType.CONTRADICTS):
            for src, dst in ((a, b), (b, a)):
                if (src, dst, etype) in self._edges:
                    return True
                if stored and self.graph.edge(src, dst, etype) is not None:
                    return True
        return False

    # -- replacement candidates and possible supersessions -----------------------------------
    def _neighbours(self) -> None:
        """Replacement candidates and possibly-superseded flags for this derive's placements.

        Runs after the call's edges are built, so a depends_on or against written by
        this same call excludes a pair. Never lists a concept this call wrote or
        re-derived, except the concept a placement merged into (marked merged).
        """
        this_call = set(self.plan.created) | set(self.plan.matched)
        rows: list[dict[str, Any]] = []
        seen: set[tuple[str, str]] = set()
        for placed in self._placements:
            for row in self._candidates(placed, this_call):
                pair = (row["node_id"], row["new_id"])
                if pair not in seen:  # two texts of the call merged into one concept
                    seen.add(pair)
                    rows.append(row)
            if placed.merged_cosine is None:
                self._flag_supersessions(placed, this_call)
        used = 0
        for row in rows:
            size = _row_bytes(row)
            if used + size > CANDIDATE_BYTES:
                break  # rows stay a prefix, in call order then closest first
            self.plan.candidates.append(row)
            used += size
        self.plan.candidate_total = len(rows)

    def _eligible(self, placed: _Placement, hit: Concept) -> bool:
        """Same type (logic, constraint, observation), same repository scope (this write
        records none; none do today), not an image."""
        return comparable(placed.ctype, hit)

    def _candidates(self, placed: _Placement, this_call: set[str]) -> list[dict[str, Any]]:
        merged_with: set[str] = set()
        if placed.merged_cosine is not None:
            # The concept merged into, and any other it tied with for the merge.
            tie = round(placed.merged_cosine, 4)
            merged_with = {
                node_id
                for node_id, cosine in placed.hits
                if round(cosine, 4) == tie
                and self._mergeable(placed.content, node_id, placed.never_into)
            }
        out: list[dict[str, Any]] = []
        for node_id, cosine in placed.hits:
            if len(out) >= CANDIDATES_PER_CONCEPT:
                break
            merged = node_id in merged_with
            if placed.merged_cosine is not None and not merged:
                continue  # nothing was created: only what it merged with is listed
            if not merged and node_id in this_call:
                continue
            hit = self.graph.concept(node_id)
            if hit is None or not self._eligible(placed, hit):
                continue
            if node_id == placed.node_id:
                if node_id in self._cites_itself:
                    continue  # the write cites what it merged into: a depends_on between them
            elif self._linked(placed.node_id, node_id, stored=not merged):
                # A created concept has no stored edges but this call's; for a merge the
                # write's concept is the one merged into, and only what this write itself
                # declares (its depends_on, its against) ties it to another tied concept.
                continue
            row: dict[str, Any] = {
                "id": short_id(node_id),
                "node_id": node_id,
                "excerpt": show_safely(hit.content, EXCERPT_CHARS),
                "cosine": round(cosine, 4),
                "new_id": short_id(placed.node_id),
            }
            if merged:
                row["merged"] = True
            if hit.about_time > self.about:
                row["newer"] = True
            out.append(row)
        return out

    def _flag_supersessions(self, placed: _Placement, this_call: set[str]) -> None:
        """SUPERSEDES_SUSPECTED, newer -> older by about-time, for a created concept's hits."""
        for node_id, _cosine in placed.hits:
            if node_id in this_call:
                continue
            hit = self.graph.concept(node_id)
            if hit is None or not self._eligible(placed, hit):
                continue
            # a backfilled write (dated before the hit) makes the hit the newer fact
            flagged = flags(
                Side(placed.node_id, placed.content, self.about),
                Side(node_id, hit.content, hit.about_time),
                self._linked,
            )
            if flagged is None:
                continue
            newer, older = flagged
            self.edge(newer.node_id, older.node_id, EdgeType.SUPERSEDES_SUSPECTED)
            self.plan.supersessions += 1

    def _check_ref(self, field: str, ref: dict[str, Any]) -> str:
        """The node a reference fixed at admission still names, or the receipt's refusal."""
        node_id = str(ref["node_id"])
        if not still_names(str(ref["ref"]), node_id, self.graph):
            raise refuse_changed(field, str(ref["ref"]))
        return node_id

    # -- lambo_derive -----------------------------------------------------------------------
    def derive(self, payload: dict[str, Any], vectors: list[Vector] | None) -> None:
        concepts = payload["concepts"]
        nodes: list[str] = []
        dependency_pairs: list[tuple[str, str]] = []
        for i, c in enumerate(concepts):
            against = [
                self._check_ref(f"concepts[{i}].against[{j}]", r)
                for j, r in enumerate(c["against"])
            ]
            depends = [
                self._check_ref(f"concepts[{i}].depends_on[{j}]", r)
                for j, r in enumerate(c["depends_on"])
            ]
            vector = vectors[i] if vectors is not None else None
            node = self.place(c["content"], ConceptType(c["type"]), vector, never_into=set(against))
            nodes.append(node)
            self.edge(self.interaction_id, node, EdgeType.DERIVES)
            for dep in depends:
                if dep == node:  # merged into what it cites: the merge already ties them
                    self.plan.reinforced += 1
                    self._cites_itself.add(node)
                    continue
                dependency_pairs.append((node, dep))
                self.edge(node, dep, EdgeType.DEPENDENCY)
                self.plan.citations += 1
            for target in against:
                if target != node:
                    self.edge(node, target, EdgeType.CONTRADICTS)
                    self.plan.contradictions += 1
                    self.plan.against_targets.append(target)
        if self.graph.batch_closes_cycle(dependency_pairs, (EdgeType.DEPENDENCY,)) is not None:
            raise StoreError(
                "depends_on would close a dependency loop with a write applied since this one "
                "was accepted" + NOTHING_WRITTEN
            )
        distinct = list(dict.fromkeys(nodes))
        pairs = [(a, b) for i, a in enumerate(distinct) for b in distinct[i + 1 :]]
        for a, b in pairs[:COOCCURRENCE_PAIRS_PER_CALL]:
            self.edge(a, b, EdgeType.COOCCURRENCE, COOCCURRENCE_WEIGHT)

        offset = len(concepts)
        hierarchy: list[tuple[str, str]] = []
        for i, pair in enumerate(payload["parent_of"]):
            ends = []
            for j, end in enumerate(("parent", "child")):
                vector = vectors[offset + 2 * i + j] if vectors is not None else None
                ends.append(self.place(pair[end], ConceptType.ENTITY, vector, merge=False))
            hierarchy.append((ends[0], ends[1]))
            self.edge(ends[0], ends[1], EdgeType.HIERARCHICAL)
        check_hierarchy_acyclic(self.graph, hierarchy)
        self._neighbours()
        self._finish()

    # -- lambo_record_action ----------------------------------------------------------------
    def action(self, payload: dict[str, Any], vectors: list[Vector] | None) -> None:
        vector_of = iter(vectors or [])

        def next_vector() -> Vector | None:
            return next(vector_of, None) if vectors is not None else None

        against = [self._check_ref(f"against[{j}]", r) for j, r in enumerate(payload["against"])]
        act = self.place(payload["action"], ConceptType.RESOURCE, next_vector(), merge=False)
        self.plan.action_node = act
        self.edge(self.interaction_id, act, EdgeType.DERIVES)
        pairs: list[tuple[str, str]] = []
        for field_name, etype in (("produces", EdgeType.PRODUCES), ("modifies", EdgeType.MODIFIES)):
            for target in payload[field_name]:
                node = self.place(target, ConceptType.RESOURCE, next_vector(), merge=False)
                pairs.append((act, node))
                self.edge(act, node, etype)
        for j, dep in enumerate(payload["depends_on"]):
            if dep.get("node_id"):
                node = self._check_ref(f"depends_on[{j}]", dep)
            else:
                node = self.place(dep["ref"], ConceptType.ENTITY, next_vector(), merge=False)
            pairs.append((act, node))
            self.edge(act, node, EdgeType.DEPENDENCY)
            self.plan.citations += 1
        for target in against:
            self.edge(act, target, EdgeType.CONTRADICTS)
            self.plan.contradictions += 1
            self.plan.against_targets.append(target)
        check_action_acyclic(self.graph, pairs)
        self._finish()
