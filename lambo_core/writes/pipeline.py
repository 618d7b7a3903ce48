"""The write pipeline: admit, commit the intent, ack; then apply in order on one thread.

An acked write's intent is in the store before its ack, so it survives ``kill -9``: the
next server replays the intents still pending. The apply worker is the session's only
writer; background jobs that write run on it, between writes. Spec: lambo_derive (the ack
and its receipt), lambo_stats ("What a crash can lose"); docs/design.md, the write path.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from ..contradiction import DEFAULT_EDGE_MIN_AGE_S
from ..cross_refs import CrossSession
from ..derive_image import ImageCall
from ..errors import LamboError, StoreError, internal_fault
from ..forget import FORGET_TOOL
from ..health import StoreHealth
from ..model import IntentState, WriteBatch, WriteIntent
from ..rates import WriteRates
from ..receipts import ReceiptState
from ..scoped_intent import opened, settled_form
from ..session import Session
from ..store.base import LEASE_LOST_TEXT, FencedOut, IntentNotPending
from .admit import admit_write
from .builder import plan_write
from .embedding import DEFAULT_EMBED_BATCH, Prepared, WriteEmbedding, fit_batch
from .faults import (
    STORE_REFUSED_WRITE,
    HandedOn,
    NotPending,
    TransientFailure,
    failure_detail,
    record_failure,
    settled_state,
)
from .forget import apply_forget
from .layer_writes import ack_warnings
from .outcome import Ack, add_stale_report, durable_outcome, outcome_of, render_ack
from .periodic import PeriodicJobs
from .queue_keys import write_queue_keys
from .stop_report import StopReport
from .write_behind import ACCESS_FLUSH_INTERVAL_S, AccessCountFlush

log = logging.getLogger(__name__)


class WritePipeline:
    """One session's write queue and its apply worker."""

    def __init__(
        self,
        session: Session,
        *,
        embed_wait_s: float | None = None,
        edge_min_age_s: float = DEFAULT_EDGE_MIN_AGE_S,
        embed_batch: int = DEFAULT_EMBED_BATCH,
    ) -> None:
        self.session = session
        # [writes] embed_batch: the most queued writes one embedder call takes (1: each alone)
        self.embed_batch = max(1, embed_batch)
        self.edge_min_age_s = edge_min_age_s  # canonization_edge_min_age, for the stale report
        self._admit_lock = threading.Lock()
        self._queue: queue.Queue[WriteIntent | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._probe: threading.Thread | None = None
        self.rates = WriteRates()
        self.health = StoreHealth(session.name, session.clock)
        # Set by close(): the worker finishes the write in hand and takes no other.
        self._stopping = threading.Event()
        self._embedding = WriteEmbedding(session, embed_wait_s, self._stopping)
        self._write_behind = AccessCountFlush(session, self.health, self._lease_lost)
        # Writes the worker took from the queue and has not applied, in order: the rest of
        # the batch in hand, and a write it handed back (a stop, a lost lease). The worker
        # starts each only by taking it from here under the lock, and the stop claims them
        # all at once (_take_unapplied), so each is applied or handed on, never both.
        self._held: deque[WriteIntent] = deque()
        self._claimed = False  # the stop took what was held: nothing more is held
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
        self.periodic = PeriodicJobs(
            ACCESS_FLUSH_INTERVAL_S, lambda: self._fenced is not None, self._lease_lost
        )
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
        if probe:
            self._probe = self._embedding.start_probe(self.rates)
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
        # A write in hand may wait for the model until then; the worker ends before the join.
        self._embedding.stop_deadline = deadline - 2 * reserve
        self._stopping.set()
        self._queue.put(None)  # wakes a worker waiting for work
        worker = self._thread
        if worker is not None:
            # at least a moment, even on a tiny budget: an idle worker needs no more
            worker.join(max(0.2, deadline - reserve - time.monotonic()))
        stopped = worker is None or not worker.is_alive()
        left = self._take_unapplied()
        own = [i for i in left if not i.payload.get("_replay")]
        lease_ok = self._lease_ok(lease_held)
        flushed = self._write_behind.final_flush(lease_ok)
        state = ReceiptState.INTENT_DURABLE if flushed else ReceiptState.CLOSE_UNFLUSHED
        for intent in own:
            receipts.settle(intent.receipt_id, state)
        # A retried flush that completes vouches for them after all.
        if not flushed and own and self._write_behind.retry_final_flush(deadline, lease_ok):
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
        ones it holds first: taken from the queue before the rest)."""
        with self._idle:
            left = list(self._held)
            self._held.clear()
            self._claimed = True
            self._in_flight -= len(left)
            self._idle.notify_all()
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

    def _lease_ok(self, lease_held: Callable[[], bool] | None) -> Callable[[], bool]:
        """Whether this server still holds the lease (not fenced out, and ``lease_held``)."""
        return lambda: self._fenced is None and (lease_held is None or lease_held())

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
    def submit(
        self,
        tool: str,
        args: object,
        *,
        via: str | None = None,
        foreign: Mapping[str, str] | None = None,
        image_call: ImageCall | None = None,
    ) -> Ack:
        """Admit one write call and ack it (a lambo_derive_image call as ``image_call``
        read, its image embedded, before any lock is taken).

        ``via`` names the session a write into this one (a layer) was submitted through:
        its receipt is that session's to be told (``writes.layer_writes``). ``foreign``
        maps a reference to the other session that holds it (``writes.cross_session``).
        """
        session = self.session
        via = None if via == session.name else via
        destination = via or session.name
        layer = session.name if via is not None else None  # what the ack names
        with self._admit_lock:
            self._refuse_if_fenced()
            with session.index.lock:
                cross = CrossSession.of(foreign, via)
                admitted = admit_write(session, tool, args, cross, image_call)
            receipt = session.receipts.issue(admitted.agent_id, destination, tool)
            if receipt.state is not ReceiptState.PENDING:
                # the receipt line says why ("nothing was written: your lane of 64 …")
                return render_ack(
                    "this call was not queued", receipt, admitted.agent_id, session=layer
                )
            assert receipt.receipt_id is not None
            intent = WriteIntent(
                receipt_id=receipt.receipt_id,
                session=session.name,
                agent_id=admitted.agent_id,
                tool=tool,
                payload=admitted.payload,
                created_at=session.clock.now(),
                via=destination,
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
        warnings = ack_warnings(self.health.note(), session, via, receipt.receipt_id)
        return render_ack(
            admitted.summary, receipt, admitted.agent_id, session=layer, warnings=warnings
        )

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
        """Run ``job`` on the writer thread between writes (``PeriodicJobs.every``)."""
        self.periodic.every(interval_s, job, first_in_s=first_in_s)

    def _run(self) -> None:
        while not self._stopping.is_set() and self._fenced is None:
            # the next write follows the last back to back
            waiting = self._queue.qsize() > 0 or bool(self._held)
            intent = self._next_held()
            if intent is None:
                try:
                    intent = self._queue.get(timeout=self.periodic.next_wait())
                except queue.Empty:
                    self.rates.idle()
                    if not self._stopping.is_set():
                        self.periodic.run_due()
                    continue
                if intent is None:
                    continue  # close() woke us: the loop's test says whether to stop
            if self._fenced is not None:
                self._hand_back(intent)  # not attempted: the stop settles it with the rest
                return
            self._apply_batch(intent, back_to_back=waiting)
            if not self._stopping.is_set():  # a stop runs no background job of its own
                self.periodic.run_due()

    def _next_held(self, expected: WriteIntent | None = None) -> WriteIntent | None:
        """Take the oldest held write into the worker's hands (only ``expected``, when
        given), or None: nothing held, or the stop claimed it."""
        with self._lock:
            if not self._held or (expected is not None and self._held[0] is not expected):
                return None
            return self._held.popleft()

    def _hand_back(self, intent: WriteIntent) -> None:
        """The worker lets go of a write it will not apply: first in line for the stop."""
        with self._idle:
            if not self._claimed:
                self._held.appendleft(intent)
                return
            # The stop has already settled what was held; this one's intent is in the store
            # and the next server replays it, but no receipt of this server will say so.
            self._in_flight -= 1
            self._idle.notify_all()
        log.warning("write %s was handed on after the stop ended", intent.receipt_id)

    def _apply_batch(self, head: WriteIntent, *, back_to_back: bool) -> None:
        """Apply ``head`` and the writes queued behind it that fit one embedder call: their
        texts embedded together (``WriteEmbedding.prefetch``), then each applied in its turn
        with its own vectors, as alone. A stop or a lost lease lets the ones not reached be
        handed on; one that fails fails alone."""
        batch, texts = self._take_batch(head)
        prepared: list[Prepared | None] = [None] * len(batch)
        if len(batch) > 1:
            try:
                prepared = list(self._embedding.prefetch(texts))
            except HandedOn:  # a stop ended the wait for the model: hand them all on
                self._hand_back(head)
                return
        for i, (intent, ready) in enumerate(zip(batch, prepared, strict=True)):
            if i:
                with self._lock:
                    if self._stopping.is_set() or self._fenced is not None:
                        return  # the stop hands on the rest, as it does the queue
                if self._next_held(intent) is None:
                    return  # the stop claimed the rest while this worker was busy
            if not self._turn(intent, ready, back_to_back=back_to_back or i > 0):
                return  # handed back: the writes behind it wait with it

    def _take_batch(self, head: WriteIntent) -> tuple[list[WriteIntent], list[list[str] | None]]:
        """``head`` and the held or queued writes behind it, bounded by ``embed_batch``
        writes and MAX_BATCH_CHARS characters of text; those after ``head`` stay held (a
        stop may claim them) until their turn, and one past the bounds stays for the next."""
        if self.embed_batch == 1 or not self.session.embeds:
            return [head], [None]  # each write alone, as without batching
        with self._lock:
            while len(self._held) < self.embed_batch - 1 and not self._claimed:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:  # a None only wakes an idle worker
                    self._held.append(item)
            behind = list(self._held)[: self.embed_batch - 1]
        return fit_batch([head, *behind])

    def _turn(self, intent: WriteIntent, prepared: Prepared | None, *, back_to_back: bool) -> bool:
        """Apply one write in its turn; False when it was handed back, not settled."""
        done = True
        try:
            if intent.tool == FORGET_TOOL:
                done = self._apply_forget(intent)
            else:
                done = self._apply_one(intent, back_to_back=back_to_back, prepared=prepared)
        finally:
            if done:
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()
            if intent.payload.get("_replay"):
                # its outcome is in the store now: waits on it ask again
                self.session.receipts.replay_settled()
        return done

    def flush_access_counts(self) -> int:
        """Write the access counts recalls left in RAM behind, on this (the writer's) thread;
        how many concepts' counts were written."""
        return self._write_behind.flush()[1]

    def flush_lag_ms(self) -> float:
        """Age of the oldest change the store does not hold yet (0 when none waits)."""
        return self._write_behind.lag_ms()

    def _apply_one(
        self, intent: WriteIntent, *, back_to_back: bool = False, prepared: Prepared | None = None
    ) -> bool:
        """Apply one write (with what a batched call made for it, if one did); False when
        it was handed back (a stop, a lost lease), True when it settled."""
        session = self.session
        replay = bool(intent.payload.get("_replay"))
        payload = {k: v for k, v in intent.payload.items() if k != "_replay"}
        stored_as = settled_form(payload)  # a scoped payload, without its scope once settled
        started = time.monotonic()
        if replay and self._settled_elsewhere(intent):
            return True
        try:
            try:
                payload = opened(payload)  # a stored form this build cannot apply fails here
                vectors = self._embedding.vectors(payload, prepared)
            except HandedOn:
                self._hand_back(intent)  # the stop settles it with the rest of the queue
                return False
            with session.index.lock:
                plan = plan_write(session, intent, payload, vectors)
            if any(c.vector is not None for c in plan.batch.concepts):
                session.stamp_before_write()
            outcome = outcome_of(plan)
            plan.batch.intent_receipt_id = intent.receipt_id
            plan.batch.intent_outcome = durable_outcome(outcome)
            plan.batch.intent_payload = stored_as
            try:
                self._commit(plan.batch)
            except NotPending:
                if replay and self._settled_elsewhere(intent):
                    return True
                raise TransientFailure(STORE_REFUSED_WRITE, detail="intent not pending") from None
            try:
                session.index.apply(plan.batch)
            except Exception:  # committed: the write happened; the RAM copy catches up on open
                log.exception("write %s committed but not mirrored in RAM", intent.receipt_id)
        except FencedOut as exc:  # its commit (or the contract's stamp) found the lease gone
            self._lease_lost(exc)
            self._hand_back(intent)  # not applied by this writer: the new holder replays it
            return False
        except TransientFailure as exc:
            self._fail(intent, exc, keep_intent=True, replay=replay)
            return True
        except LamboError as exc:
            self._fail(intent, exc, keep_intent=False, replay=replay)
            return True
        except Exception as exc:  # a handler fault: the write failed, the worker lives on
            log.exception("applying write %s failed", intent.receipt_id)
            self._fail(intent, internal_fault(repr(exc)), keep_intent=False, replay=replay)
            return True
        if plan.against_targets:
            add_stale_report(session, outcome, plan.against_targets, self.edge_min_age_s)
        # A batched write's time is its own turn plus its share of the batch's one embedder
        # call (by the characters of its texts); it is counted done as if the writes behind
        # it had not been embedded yet, so back-to-back intervals add up to the real time.
        now = time.monotonic()
        share_ms = prepared.share_ms if prepared is not None else 0.0
        later_ms = prepared.later_ms if prepared is not None else 0.0
        elapsed_ms = (now - started) * 1000.0 + share_ms
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
                done_at=now - later_ms / 1000.0,
            )
        log.debug("applied %s in %.1f ms", intent.receipt_id, elapsed_ms)
        if replay:  # an earlier server's receipt: the store answers it with what it keeps
            kept = durable_outcome(outcome)
            session.receipts.recovered(intent, ReceiptState.APPLIED_AFTER_RESTART, kept)
        session.receipts.settle(
            intent.receipt_id, ReceiptState.APPLIED, outcome["detail"], outcome["data"]
        )
        return True

    def _apply_forget(self, intent: WriteIntent) -> bool:
        """A forget intent (``writes/forget.py``), its failures handled as a write's are;
        False when it was handed back (a lost lease)."""
        replay = bool(intent.payload.get("_replay"))
        try:
            outcome = apply_forget(self.session, intent, self.health)
        except FencedOut as exc:
            self._lease_lost(exc)
            self._hand_back(intent)
            return False
        except NotPending:
            if not (replay and self._settled_elsewhere(intent)):
                failure = TransientFailure(STORE_REFUSED_WRITE, detail="intent not pending")
                self._fail(intent, failure, keep_intent=True, replay=replay)
            return True
        except LamboError as exc:
            self._fail(intent, exc, keep_intent=isinstance(exc, TransientFailure), replay=replay)
            return True
        with self._lock:
            self.replayed, self.replay_owed = self.replayed + replay, self.replay_owed - replay
            self.applied += not replay
        if replay:  # an earlier server's receipt: the store answers it
            self.session.receipts.recovered(intent, ReceiptState.APPLIED_AFTER_RESTART, outcome)
        self.session.receipts.settle(
            intent.receipt_id, ReceiptState.APPLIED, outcome["detail"], outcome["data"]
        )
        return True

    def _commit(self, batch: WriteBatch) -> None:
        """The one store transaction of a write; a refusal by the store itself (not by a
        rule of the write) keeps the intent for the next server and degrades the session."""
        try:
            self.session.store.apply(batch)
        except FencedOut:
            raise  # not a store failure: the lease passed on (see _apply_one)
        except IntentNotPending:
            raise NotPending from None
        except LamboError as exc:
            self.health.refused("an applied write", exc.detail or exc.message)
            raise TransientFailure(STORE_REFUSED_WRITE) from None  # health logged why
        self.health.wrote()

    def _settled_elsewhere(self, intent: WriteIntent) -> bool:
        """Whether a replayed intent was settled since it was queued (``settled_state``):
        then it is counted replayed and never applied twice."""
        state = settled_state(self.session, intent)
        if state is None:
            return False
        with self._lock:
            self.replay_owed -= 1
            self.replayed += state is IntentState.APPLIED
        return True

    def _fail(
        self, intent: WriteIntent, exc: LamboError, *, keep_intent: bool, replay: bool
    ) -> None:
        session = self.session
        detail = failure_detail(intent, exc, keep_intent)
        if not keep_intent:
            try:
                record_failure(session, intent, detail)
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
                intent.receipt_id, intent.agent_id, intent.destination, detail
            )
        if replay:
            session.receipts.recovered(intent, ReceiptState.FAILED, {"detail": detail})
        session.receipts.settle(intent.receipt_id, ReceiptState.FAILED, detail, {})

    def stats(self) -> dict[str, Any]:
        """The write_queue_* keys, every figure measured (or null until it is)."""
        with self._lock:
            replayed, owed = self.replayed, self.replay_owed
        return write_queue_keys(self.session.receipts.stats(), self.rates, replayed, owed)

    def health_keys(self) -> dict[str, Any]:
        """flush_lag_ms, dead_lettered and degraded, as lambo_stats reports them."""
        return {
            "flush_lag_ms": round(self.flush_lag_ms(), 3),
            "dead_lettered": self.health.dead_lettered,
            "degraded": self.health.degraded,
        }
