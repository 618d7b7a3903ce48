"""One session as a serve holds it: store handle, indices, embedder, receipts.

Opening a session rebuilds its read-side indices from the store and holds
the server's embedding contract against the one the session was stamped
with. A session is stamped at its first write; a serve whose contract
differs refuses the session, unless it was started with
``--allow-embedding-mismatch``, which relabels the session to the server's
contract before its first write (stored vectors of another width are then
left out of vector search, and say so in the log).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from .access import AccessCounts
from .clock import Clock, SystemClock
from .config import Config
from .embed.base import Embedder, EmbeddingContract, make_contract
from .embed.loader import (
    LazyEmbedder,
    LoadedModels,
    read_model_facts,
    start_embedder,
    wants_embedder,
)
from .errors import ConfigError, LamboError
from .gc.report import GcState
from .index.session_index import SessionIndex
from .receipts import ReceiptBook, intent_answer
from .store.base import Store

log = logging.getLogger(__name__)

# What lambo_stats reports when the session is keyword-only by declaration.
NO_EMBEDDER_CONTRACT = make_contract("none", None, 0)


@dataclass(frozen=True)
class EmbedderPlan:
    """What this server embeds with: the lazily loading model, its contract, its modalities.

    ``contract`` and ``modalities`` come from the model's manifest, so they are known
    before the model has loaded; ``problem`` is the configuration error every write
    reports when no model is installed (reads keep working).
    """

    lazy: LazyEmbedder | None
    contract: EmbeddingContract | None
    problem: LamboError | None = None
    # What the model embeds: ["text"], or ["text", "image"] for a two-tower model.
    modalities: list[str] = field(default_factory=lambda: ["text"])

    @property
    def embeds(self) -> bool:
        return self.lazy is not None or self.problem is not None

    @classmethod
    def from_config(cls, config: Config, models: LoadedModels) -> EmbedderPlan:
        """The configured model, loaded through ``models`` (shared by whoever made it)."""
        if not wants_embedder(config):
            return cls(lazy=None, contract=None)
        try:
            contract, modalities = read_model_facts(config)
        except LamboError as exc:
            # One clear line for the operator; every write reports the same on its receipt.
            log.warning("%s", exc.render())
            return cls(lazy=None, contract=None, problem=exc)
        return cls(lazy=start_embedder(config, models), contract=contract, modalities=modalities)

    @classmethod
    def ready(cls, embedder: Embedder) -> EmbedderPlan:
        """A plan around an embedder already in hand (tests, benchmarks)."""
        lazy = LazyEmbedder(lambda: embedder).start()
        return cls(lazy=lazy, contract=embedder.contract, modalities=list(embedder.modalities))


def contracts_equal(a: dict[str, Any], b: dict[str, Any]) -> bool:
    return (a.get("kind"), a.get("model"), a.get("dim")) == (
        b.get("kind"),
        b.get("model"),
        b.get("dim"),
    )


def describe_contract(c: dict[str, Any]) -> str:
    """``{kind: onnx, model: minilm, dim: 384}``; a missing model reads ``null``, as in JSON."""
    model = c.get("model")
    shown = "null" if model is None else model
    return f"{{kind: {c.get('kind')}, model: {shown}, dim: {c.get('dim')}}}"


class Session:
    """One session of one store, as held by this process."""

    def __init__(
        self,
        name: str,
        store: Store,
        index: SessionIndex,
        plan: EmbedderPlan,
        receipts: ReceiptBook,
        clock: Clock,
        *,
        relabel: bool,
        shared_layer: bool = False,
    ) -> None:
        self.name = name
        self.store = store
        self.index = index
        self.plan = plan
        self.receipts = receipts
        self.clock = clock
        self._relabel = relabel
        # A shared layer (read at open, set by mark_shared_layer): its writes refuse bare
        # relative paths, since every project reads the same text as a different file.
        self.shared_layer = shared_layer
        self._stamp_lock = threading.Lock()
        # Recall hits not yet written behind (the writer thread drains them).
        self.access_counts = AccessCounts()
        # Garbage collection's RAM state: its last sweep, the survivor bumps it owes.
        self.gc_state = GcState()

    @classmethod
    def open(
        cls,
        store: Store,
        name: str,
        plan: EmbedderPlan,
        *,
        clock: Clock | None = None,
        receipts: ReceiptBook | None = None,
        allow_embedding_mismatch: bool = False,
    ) -> Session:
        clock = clock or SystemClock()
        record = store.ensure_session(name, clock.now())
        stamped = record.embedding_contract
        relabel = False
        if stamped and plan.contract and not contracts_equal(dict(stamped), dict(plan.contract)):
            if not allow_embedding_mismatch:
                raise ConfigError(
                    f"session '{name}' was written with embedding contract "
                    f"{describe_contract(stamped)}, and this server's is "
                    f"{describe_contract(dict(plan.contract))}; vectors of different models "
                    "cannot be compared. Configure the session's model ([embedder] model), or "
                    "start with --allow-embedding-mismatch to relabel the session to this "
                    "server's contract"
                )
            log.warning(
                "session %s: relabelling from %s to %s before its first write "
                "(--allow-embedding-mismatch)",
                name,
                describe_contract(stamped),
                describe_contract(dict(plan.contract)),
            )
            relabel = True
        index = SessionIndex.open(store, name)
        return cls(
            name,
            store,
            index,
            plan,
            receipts or ReceiptBook(clock, foreign_lookup=intent_answer(store)),
            clock,
            relabel=relabel,
            shared_layer=record.shared_layer,
        )

    def mark_shared_layer(self) -> None:
        """Record in the store that this session is attached as a shared layer (a serve
        attaching it calls this); from now on every serve of it treats it as one."""
        if not self.shared_layer:
            self.store.mark_shared_layer(self.name)
            self.shared_layer = True

    # -- the embedding contract ---------------------------------------------------------
    @property
    def embeds(self) -> bool:
        """Whether this session's concepts are embedded (vector search and hybrid matching)."""
        return self.plan.embeds and self.store.has_vector_search

    @property
    def contract(self) -> EmbeddingContract:
        """The server's contract, as lambo_stats reports it."""
        if self.plan.contract is not None:
            return self.plan.contract
        return NO_EMBEDDER_CONTRACT

    @property
    def modalities(self) -> list[str]:
        """What the server's embedder embeds (lambo_stats' embedding_modalities); none
        without a model."""
        return list(self.plan.modalities) if self.plan.contract is not None else []

    def stamp_before_write(self) -> None:
        """Stamp (or, under --allow-embedding-mismatch, relabel) the session at its first write."""
        contract = self.plan.contract
        if contract is None or not self.store.has_vector_search:
            return
        with self._stamp_lock:
            record = self.store.get_session(self.name)
            stamped = record.embedding_contract if record else None
            if stamped and not self._relabel:
                return
            self.store.stamp_contract(self.name, dict(contract))
            if self._relabel:
                self._relabel = False
                self._drop_foreign_vectors(contract["dim"])

    def _drop_foreign_vectors(self, dim: int) -> None:
        vectors = self.index.vectors
        if vectors is not None and vectors.dim != dim:
            with self.index.lock:
                self.index.vectors = None
            log.warning(
                "session %s: stored vectors of width %d left out of vector search after "
                "relabelling to width %d",
                self.name,
                vectors.dim,
                dim,
            )

    def embedder(self, timeout: float | None) -> Embedder:
        """The loaded embedder, waiting up to ``timeout`` seconds while it loads.

        Raises the configuration error a missing model gives, or
        ``EmbedderLoading`` when the wait ends first.
        """
        if self.plan.problem is not None:
            raise self.plan.problem
        if self.plan.lazy is None:
            raise ConfigError(
                'this server has no embedder (match_strategy = "canonical" or embedder.kind = none)'
            )
        return self.plan.lazy.get(timeout)
