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
"""

from __future__ import annotations

import logging
import queue
import statistics
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .admission import FRAME_SEPARATOR, admit_action, admit_derive, call_text
from .embed.base import Embedder
from .embed.onnx import EmbedderLoading
from .errors import LamboError, StoreError, internal_fault
from .index.graph import SessionGraph
from .matching import merge_forbidden
from .model import (
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    Vector,
    WriteBatch,
    WriteIntent,
    new_id,
    short_id,
)
from .receipts import ReceiptState, ReceiptView, render_line
from .references import refuse_changed, still_names
from .session import Session
from .text import canonical_key

log = logging.getLogger(__name__)

COOCCURRENCE_PAIRS_PER_CALL = 10
COOCCURRENCE_WEIGHT = 0.5
MERGE_CANDIDATES = 8
APPLY_SAMPLES = 256
_NOTHING_WRITTEN = "; nothing was written"


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


class _TransientFailure(LamboError):
    """The embedder did not answer: the receipt fails, the intent is kept for the next server."""

    def render(self) -> str:
        return self.message


class WritePipeline:
    """One session's write queue and its apply worker."""

    def __init__(self, session: Session, *, embed_wait_s: float | None = None) -> None:
        self.session = session
        self._embed_wait_s = embed_wait_s  # None: wait for a loading model as long as it takes
        self._admit_lock = threading.Lock()
        self._queue: queue.Queue[WriteIntent | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._apply_ms: deque[float] = deque(maxlen=APPLY_SAMPLES)
        self._lock = threading.Lock()
        self.replayed = 0
        self.replay_owed = 0
        self.applied = 0
        self.failed = 0
        self._idle = threading.Condition(self._lock)
        self._in_flight = 0

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> WritePipeline:
        """Queue intents a previous server left owed, then start the worker."""
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
        return self

    def close(self, timeout: float = 15.0) -> None:
        """Stop taking writes; apply what is queued within ``timeout``, leave the rest durable."""
        self.session.receipts.close()
        self._queue.put(None)
        if self._thread is not None:
            self._thread.join(timeout)

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
                summary = f"nothing was written: {receipt.detail}"
                return render_ack(summary, receipt, admitted.agent_id)
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
            except LamboError:
                session.receipts.withdraw(receipt.receipt_id)
                raise
            with self._lock:
                self._in_flight += 1
            self._queue.put(intent)
        return render_ack(admitted.summary, receipt, admitted.agent_id)

    # -- the worker ------------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            intent = self._queue.get()
            if intent is None:
                return
            try:
                self._apply_one(intent)
            finally:
                with self._idle:
                    self._in_flight -= 1
                    self._idle.notify_all()

    def _apply_one(self, intent: WriteIntent) -> None:
        session = self.session
        replay = bool(intent.payload.get("_replay"))
        payload = {k: v for k, v in intent.payload.items() if k != "_replay"}
        started = time.monotonic()
        try:
            vectors = self._embed(payload)
            with session.index.lock:
                plan = self._plan(intent, payload, vectors)
            if any(c.vector is not None for c in plan.batch.concepts):
                session.stamp_before_write()
            outcome = self._outcome(plan)
            plan.batch.intent_receipt_id = intent.receipt_id
            plan.batch.intent_outcome = outcome
            session.store.apply(plan.batch)
            session.index.apply(plan.batch)
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
        elapsed_ms = (time.monotonic() - started) * 1000.0
        with self._lock:
            if replay:
                self.replayed += 1
                self.replay_owed -= 1
            else:
                self.applied += 1
                self._apply_ms.append((session.clock.now() - intent.created_at) * 1000.0)
        log.debug("applied %s in %.1f ms", intent.receipt_id, elapsed_ms)
        session.receipts.settle(
            intent.receipt_id, ReceiptState.APPLIED, outcome["detail"], outcome["data"]
        )

    def _fail(
        self, intent: WriteIntent, exc: LamboError, *, keep_intent: bool, replay: bool
    ) -> None:
        session = self.session
        if exc.detail:
            log.warning("write %s failed: %s", intent.receipt_id, exc.detail)
        detail = exc.render()
        if not detail.endswith(_NOTHING_WRITTEN):
            detail += _NOTHING_WRITTEN
        if not keep_intent:
            try:
                session.store.settle_intent(
                    intent.receipt_id, "failed", {"detail": detail}, session.clock.now()
                )
            except LamboError as store_exc:
                log.warning(
                    "could not record the failure of %s: %s", intent.receipt_id, store_exc.detail
                )
        with self._lock:
            if replay:
                self.replay_owed -= 1
            else:
                self.failed += 1
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

    def _embed(self, payload: dict[str, Any]) -> list[Vector] | None:
        if not self.session.embeds:
            return None
        try:
            embedder: Embedder = self.session.embedder(self._embed_wait_s)
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
        builder = _Builder(self, plan, intent.agent_id, now, about, interaction.id)
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
        return {"detail": detail, "data": data}

    # -- lambo_stats -----------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """The write_queue_* keys, with honest values."""
        book = self.session.receipts.stats()
        with self._lock:
            samples = sorted(self._apply_ms)
            replayed, owed = self.replayed, self.replay_owed
        p50 = statistics.median(samples) if samples else None
        p90 = samples[min(len(samples) - 1, int(0.9 * len(samples)))] if samples else None
        serial_rate = (1000.0 / p50) if p50 else None
        keys: dict[str, Any] = {
            "write_queue_bound": book.bound,
            "write_queue_lane_bound": book.lane_bound,
            "write_queue_measured": bool(samples),
            "write_queue_bound_source": "observed" if samples else "unmeasured",
            "write_queue_items_per_sec": None,
            "write_queue_serial_items_per_sec": serial_rate,
            "write_queue_probe_serial_items_per_sec": None,
            "write_queue_probe_optimism": None,
            "write_queue_apply_samples": len(samples),
            "write_queue_apply_ms_p50": p50,
            "write_queue_apply_ms_p90": p90,
            "write_queue_apply_ms_max": samples[-1] if samples else None,
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
    ) -> None:
        self.session = pipeline.session
        self.graph: SessionGraph = pipeline.session.index.graph
        self.plan = plan
        self.agent_id = agent_id
        self.now = now
        self.about = about
        self.interaction_id = interaction_id
        self._by_key: dict[str, str] = {}  # keys this call already placed -> node id
        self._edges: dict[tuple[str, str, EdgeType], Edge] = {}
        embedder = pipeline.session.plan
        self._threshold = 0.85
        if embedder.lazy is not None and embedder.lazy.ready:
            self._threshold = embedder.lazy.get().merge_threshold

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
            target = self._merge_target(content, vector, never_into or set()) if merge else None
            if target is not None:
                self.plan.semantic_merged += 1
                self._matched(target)
                node_id = target
            else:
                node_id = self._create(content, key, ctype, vector)
        self._by_key[key] = node_id
        return node_id

    def _matched(self, node_id: str) -> None:
        if node_id not in self.plan.matched and node_id not in self.plan.created:
            self.plan.matched.append(node_id)

    def _merge_target(
        self, content: str, vector: Vector | None, never_into: set[str]
    ) -> str | None:
        matrix = self.session.index.vectors
        if vector is None or matrix is None or len(matrix) == 0 or matrix.dim != vector.shape[0]:
            return None
        for node_id, cosine in matrix.top_k(vector, MERGE_CANDIDATES):
            if cosine < self._threshold:
                break
            if node_id in never_into:
                continue
            candidate = self.graph.concept(node_id)
            if candidate is None or merge_forbidden(content, candidate.content):
                continue
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
                    continue
                dependency_pairs.append((node, dep))
                self.edge(node, dep, EdgeType.DEPENDENCY)
                self.plan.citations += 1
            for target in against:
                if target != node:
                    self.edge(node, target, EdgeType.CONTRADICTS)
                    self.plan.contradictions += 1
        if self.graph.batch_closes_cycle(dependency_pairs, (EdgeType.DEPENDENCY,)) is not None:
            raise StoreError(
                "depends_on would close a dependency loop with a write applied since this one "
                "was accepted" + _NOTHING_WRITTEN
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
        if self.graph.batch_closes_cycle(hierarchy, (EdgeType.HIERARCHICAL,)) is not None:
            raise StoreError(
                "parent_of would close a Hierarchical cycle (the hierarchy must stay acyclic)"
                + _NOTHING_WRITTEN
            )
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
        causal = (EdgeType.PRODUCES, EdgeType.MODIFIES, EdgeType.DEPENDENCY)
        if (
            any(a == b for a, b in pairs)
            or self.graph.batch_closes_cycle(pairs, causal) is not None
        ):
            raise StoreError(
                "record_action would close a Causal or Dependency cycle (produces, modifies and "
                "depends_on must stay acyclic)" + _NOTHING_WRITTEN
            )
        self._finish()
