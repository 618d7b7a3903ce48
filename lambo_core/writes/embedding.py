"""A write's vectors: its texts framed as the spec frames them, embedded in one batch.

Several queued writes are embedded in one embedder call (``prefetch``), each write's texts
framed exactly as alone, so its vectors are the ones it would get on its own. The writer
thread waits for a loading model here, within the write's bound and a stop's budget; the
startup probe times the same embedding once the model has loaded (``rates``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..admission import FRAME_SEPARATOR, call_text
from ..config_schema import KEYS_BY_DOTTED
from ..embed.base import Embedder
from ..embed.loader import EmbedderLoading
from ..errors import LamboError
from ..model import Vector, WriteIntent
from ..rates import PROBE_CONCEPTS, WriteRates, run_probe
from ..scoped_intent import opened
from ..session import Session
from .faults import HandedOn, TransientFailure

log = logging.getLogger(__name__)

#: [writes] embed_batch's default (the schema holds it): the most queued writes one
#: embedder call takes.
DEFAULT_EMBED_BATCH = int(str(KEYS_BY_DOTTED["writes.embed_batch"].default))

#: The most text (characters, every framed text of every write) one batched call takes:
#: about 16k tokens at ~4 characters a token, the padded tokens of one full model run of
#: OnnxEmbedder (MAX_BATCH_TOKENS). So a batch holds its first write's receipt back by at
#: most about one full model run more than that write alone; a bigger write goes alone.
MAX_BATCH_CHARS = 64 * 1024


def texts_to_embed(payload: dict[str, Any]) -> list[str]:
    """Every text the write might create a concept for, framed as the spec frames it."""
    if payload["kind"] == "derive":
        contents = [c["content"] for c in payload["concepts"]]
        frame_with = call_text(contents)
        items = contents + [e for p in payload["parent_of"] for e in (p["parent"], p["child"])]
        return [f"{item}{FRAME_SEPARATOR}{frame_with}" for item in items]
    if payload["kind"] == "derive_image":  # its own vector came with it: only its ends
        return [
            f"{e}{FRAME_SEPARATOR}{payload['content']}"
            for p in payload["parent_of"]
            for e in (p["parent"], p["child"])
        ]
    targets = payload["produces"] + payload["modifies"]
    targets += [d["ref"] for d in payload["depends_on"] if not d.get("node_id")]
    return [payload["action"], *targets]


def batch_texts(payload: dict[str, Any] | None) -> list[str] | None:
    """A write's framed texts for a batched call, or None when it is left to its turn (its
    stored form does not open, or holds no text to embed): its turn fails or embeds alone."""
    if payload is None:
        return None
    try:
        texts = texts_to_embed(payload)
    except Exception:  # a malformed payload: its own turn fails it, as alone
        return None
    return texts or None


def batch_size(texts: Sequence[str]) -> int:
    return sum(len(t) for t in texts)


@dataclass
class Prepared:
    """What a batched call made for one write, used at its turn (``WriteEmbedding.vectors``)."""

    vectors: list[Vector] | None = None  # None: it embeds alone at its turn
    failure: LamboError | None = None  # its wait for the model ended: it fails with this
    share_ms: float = 0.0  # its share of the batched call, by the characters of its texts
    later_ms: float = 0.0  # the shares of the batch's writes after it


class WriteEmbedding:
    """Embeds the writes of one session's pipeline with the session's model."""

    def __init__(self, session: Session, wait_s: float | None, stopping: threading.Event) -> None:
        self.session = session
        self._wait_s = wait_s  # None: wait for a loading model as long as it takes
        self._stopping = stopping  # the pipeline's: set when its stop begins
        # Until when a stopping worker may still wait for a loading model for the write in
        # its hands (time.monotonic); past it, that write is handed on too.
        self.stop_deadline = 0.0

    def vectors(
        self, payload: dict[str, Any], prepared: Prepared | None = None
    ) -> list[Vector] | None:
        """One vector per text of the write (None for a keyword-only session): what a
        batched call made for it (``prepared``), else embedded alone.

        Raises ``HandedOn`` when a stop ends the wait for the model, and ``TransientFailure``
        when the model is missing, still loading past the bound, or fails on the texts.
        """
        if not self.session.embeds:
            return None
        if prepared is not None:
            if prepared.failure is not None:
                raise prepared.failure
            if prepared.vectors is not None:
                return prepared.vectors
        texts = texts_to_embed(payload)
        if not texts:  # an image write with no parent_of: its vector came with it
            return []
        embedder = self._embedder()
        try:
            matrix = embedder.embed(texts)
        except LamboError:
            raise
        except Exception as exc:
            raise TransientFailure(
                "the embedder failed on this write; the detail was logged", detail=repr(exc)
            ) from None
        return [matrix[i] for i in range(len(texts))]

    def prefetch(self, texts: Sequence[list[str] | None]) -> list[Prepared]:
        """Embed several writes' texts (``batch_texts``; None: left to its turn) in one
        embedder call; one ``Prepared`` per write, in order.

        The wait for the model is the first write's, as it would be alone: when it ends
        (``TransientFailure``) that write fails with it and the others embed alone at their
        turns, each waiting in its own bound. When the call itself fails, every write embeds
        alone at its turn, so one bad text fails only its own write. Raises ``HandedOn``
        when a stop ends the wait for the model: the batch is handed on.
        """
        out = [Prepared() for _ in texts]
        rows = [i for i, t in enumerate(texts) if t]
        if not rows or not self.session.embeds:
            return out
        started = time.monotonic()
        try:
            embedder = self._embedder()
        except TransientFailure as exc:
            out[rows[0]].failure = exc
            return out
        flat = [text for i in rows for text in texts[i] or ()]
        try:
            matrix = embedder.embed(flat)
        except Exception as exc:
            log.warning(
                "session %s: a batched embedding of %d writes failed (%r); they embed one by one",
                self.session.name,
                len(rows),
                exc,
            )
            matrix = None
        if matrix is not None and len(matrix) != len(flat):
            log.warning(
                "session %s: a batched embedding returned %d rows for %d texts; they "
                "embed one by one",
                self.session.name,
                len(matrix),
                len(flat),
            )
            matrix = None
        spent_ms = (time.monotonic() - started) * 1000.0
        total = sum(batch_size(texts[i] or ()) for i in rows) or 1
        at, later = 0, spent_ms
        for i in rows:
            own = texts[i] or []
            if matrix is not None:
                out[i].vectors = [matrix[at + k] for k in range(len(own))]
            out[i].share_ms = spent_ms * batch_size(own) / total
            later -= out[i].share_ms
            out[i].later_ms = max(0.0, later)
            at += len(own)
        return out

    def _embedder(self) -> Embedder:
        """The loaded embedder; a missing or still-loading model as ``TransientFailure``."""
        try:
            return self._wait_for_embedder()
        except EmbedderLoading:
            raise TransientFailure(
                "the embedder did not finish loading in time", detail="embedder still loading"
            ) from None
        except LamboError as exc:
            # No model installed (or it failed to load): this write fails, but its intent
            # is kept so a server that has the model replays it.
            raise TransientFailure(exc.render()) from None

    def _wait_for_embedder(self) -> Embedder:
        """The loaded embedder, waiting for a loading one (up to ``wait_s``) in short
        slices: a stop lets the write in hand wait for the model within its budget, and
        past that hands it on rather than be held up behind the load."""
        wait_s = self._wait_s
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            if self._stopping.is_set() and time.monotonic() >= self.stop_deadline:
                raise HandedOn
            left = 0.1 if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                return self.session.embedder(min(0.1, left))
            except EmbedderLoading:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    def start_probe(self, rates: WriteRates) -> threading.Thread | None:
        """The startup probe's thread, started (None: nothing to probe, no model loads)."""
        if not self.session.embeds or self.session.plan.lazy is None:
            return None
        thread = threading.Thread(
            target=self.run_probe,
            args=(rates,),
            name=f"lambo-probe-{self.session.name}",
            daemon=True,
        )
        thread.start()
        return thread

    def run_probe(self, rates: WriteRates) -> None:
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
        texts = texts_to_embed(
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
        rates.probed(serial, wide)
        log.info(
            "session %s: startup probe: %s writes/s one at a time, %s four at once",
            self.session.name,
            f"{serial:.1f}" if serial is not None else "n/a",
            f"{wide:.1f}" if wide is not None else "n/a",
        )


def intent_texts(intent: WriteIntent) -> list[str] | None:
    """The texts a queued write embeds, or None when it has none to share a call with
    (a forget, or a stored form this build cannot open: its turn fails it, as alone)."""
    payload = {k: v for k, v in intent.payload.items() if k != "_replay"}
    try:
        return batch_texts(opened(payload))
    except Exception:
        return None


def fit_batch(
    intents: Sequence[WriteIntent],
) -> tuple[list[WriteIntent], list[list[str] | None]]:
    """The first of ``intents`` and those behind it whose texts fit MAX_BATCH_CHARS
    together (a write bigger than that alone is embedded alone), with their texts."""
    batch: list[WriteIntent] = []
    texts: list[list[str] | None] = []
    size = 0
    for intent in intents:
        own = intent_texts(intent)
        size += batch_size(own or ())
        if batch and size > MAX_BATCH_CHARS:
            break
        batch.append(intent)
        texts.append(own)
    return batch, texts
