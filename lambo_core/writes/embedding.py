"""A write's vectors: its texts framed as the spec frames them, embedded in one batch.

The writer thread waits for a loading model here, within the write's bound and a stop's
budget; the startup probe times the same embedding once the model has loaded (``rates``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from ..admission import FRAME_SEPARATOR, call_text
from ..embed.base import Embedder
from ..embed.loader import EmbedderLoading
from ..errors import LamboError
from ..model import Vector
from ..rates import PROBE_CONCEPTS, WriteRates, run_probe
from ..session import Session
from .faults import HandedOn, TransientFailure

log = logging.getLogger(__name__)


def texts_to_embed(payload: dict[str, Any]) -> list[str]:
    """Every text the write might create a concept for, framed as the spec frames it."""
    if payload["kind"] == "derive":
        contents = [c["content"] for c in payload["concepts"]]
        frame_with = call_text(contents)
        items = contents + [e for p in payload["parent_of"] for e in (p["parent"], p["child"])]
        return [f"{item}{FRAME_SEPARATOR}{frame_with}" for item in items]
    targets = payload["produces"] + payload["modifies"]
    targets += [d["ref"] for d in payload["depends_on"] if not d.get("node_id")]
    return [payload["action"], *targets]


class WriteEmbedding:
    """Embeds the writes of one session's pipeline with the session's model."""

    def __init__(self, session: Session, wait_s: float | None, stopping: threading.Event) -> None:
        self.session = session
        self._wait_s = wait_s  # None: wait for a loading model as long as it takes
        self._stopping = stopping  # the pipeline's: set when its stop begins
        # Until when a stopping worker may still wait for a loading model for the write in
        # its hands (time.monotonic); past it, that write is handed on too.
        self.stop_deadline = 0.0

    def vectors(self, payload: dict[str, Any]) -> list[Vector] | None:
        """One vector per text of the write (None for a keyword-only session).

        Raises ``HandedOn`` when a stop ends the wait for the model, and ``TransientFailure``
        when the model is missing, still loading past the bound, or fails on the texts.
        """
        if not self.session.embeds:
            return None
        try:
            embedder: Embedder = self._wait_for_embedder()
        except EmbedderLoading:
            raise TransientFailure(
                "the embedder did not finish loading in time", detail="embedder still loading"
            ) from None
        except LamboError as exc:
            # No model installed (or it failed to load): this write fails, but its intent
            # is kept so a server that has the model replays it.
            raise TransientFailure(exc.render()) from None
        texts = texts_to_embed(payload)
        try:
            matrix = embedder.embed(texts)
        except LamboError:
            raise
        except Exception as exc:
            raise TransientFailure(
                "the embedder failed on this write; the detail was logged", detail=repr(exc)
            ) from None
        return [matrix[i] for i in range(len(texts))]

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
