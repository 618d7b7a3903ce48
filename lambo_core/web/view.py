"""The web window's read-only view of one session: the store opened without the lease, the
session's indices rebuilt from it, and rebuilt again when the store's figures move.

Nothing here writes: no lease is taken, no intent is replayed, no session is created
(``Session.open`` would insert the session row, so the ``Session`` is built directly),
and recall's access counts stay in this process's RAM. A serve holding the session
keeps writing beside it; the view notices through a cheap fingerprint (the session's
mutation count, its canonization events and its gc epoch), read at most once a
``refresh_s``, and reloads the index when it changed.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..canon.history import CanonHistory
from ..canon.rules import CanonRules
from ..clock import SystemClock
from ..config import Config
from ..embed.loader import LoadedModels
from ..errors import ConfigError, StoreError
from ..index.session_index import SessionIndex
from ..receipts import ReceiptBook
from ..session import EmbedderPlan, Session, contracts_equal, describe_contract
from ..store.base import Store
from ..store.migrations import LATEST_VERSION, applied_versions
from ..store_reports import open_existing_store, require_session

log = logging.getLogger(__name__)

REFRESH_S = 0.5  # the fingerprint is read at most this often


@dataclass(frozen=True)
class Fingerprint:
    """What changes whenever a writer commits something the view shows."""

    mutations: int
    canon_events: int
    gc_epoch: int


@dataclass(frozen=True)
class Loaded:
    """One load of the session: the session object recall and inspect read, its history."""

    session: Session
    history: CanonHistory
    fingerprint: Fingerprint
    loaded_at: float


class ReadOnlyView:
    """One session of one store, read without its lease, reloaded when the store moves."""

    def __init__(
        self,
        store: Store,
        name: str,
        config: Config,
        plan: EmbedderPlan,
        *,
        refresh_s: float = REFRESH_S,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.name = name
        self.config = config
        self.rules = CanonRules.from_config(config)
        self.plan, self.keyword_note = _usable_plan(store, name, plan)
        self.refresh_s = refresh_s
        self._now = now
        self._lock = threading.Lock()
        self._checked_at = 0.0
        self.reloads = 0
        self._loaded = self._load(self._fingerprint())

    @classmethod
    def open(cls, config: Config, name: str) -> ReadOnlyView:
        """The configured store, opened only if it exists, is current and holds ``name``."""
        if config.store_kind == "sqlite":
            refuse_older_schema(config.store_path)
        store = open_existing_store(config)
        try:
            require_session(store, name)
            plan = EmbedderPlan.from_config(config, LoadedModels())
            return cls(store, name, config, plan)
        except BaseException:
            store.close()
            raise

    def close(self) -> None:
        self.store.close()

    # -- the current load ---------------------------------------------------------------
    def current(self) -> Loaded:
        """The session as last loaded, reloaded first when the store has moved since."""
        with self._lock:
            moment = time.monotonic()
            if moment - self._checked_at < self.refresh_s:
                return self._loaded
            self._checked_at = moment
            seen = self._fingerprint()
            if seen != self._loaded.fingerprint:
                self._loaded = self._load(seen)
                self.reloads += 1
            return self._loaded

    def _fingerprint(self) -> Fingerprint:
        record = self.store.get_session(self.name)
        return Fingerprint(
            mutations=record.mutation_count if record is not None else 0,
            canon_events=len(self.store.canon_events(self.name)),
            gc_epoch=record.last_gc_epoch if record is not None else 0,
        )

    def _load(self, fingerprint: Fingerprint) -> Loaded:
        clock = SystemClock()
        index = SessionIndex.open(self.store, self.name)
        record = self.store.get_session(self.name)
        session = Session(
            self.name,
            self.store,
            index,
            self.plan,
            ReceiptBook(clock),  # no write is made here, so no receipt is ever issued
            clock,
            relabel=False,
            shared_layer=record.shared_layer if record is not None else False,
        )
        return Loaded(session, CanonHistory(session, self.rules), fingerprint, self._now())


def refuse_older_schema(path: Path) -> None:
    """Opening a store migrates it, which is a write: a file at an older schema is refused
    (read first through a read-only connection), not migrated."""
    if not path.is_file():
        return  # open_existing_store refuses it, naming the path
    try:
        conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
        try:
            done = applied_versions(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise StoreError("the store file could not be read", detail=str(exc)) from None
    have = done[-1] if done else 0
    if have < LATEST_VERSION:
        raise ConfigError(
            f"the store at {path} is at schema version {have} and this lambo's is "
            f"{LATEST_VERSION}; serve-web writes nothing, so it does not migrate it: run "
            f"`lambo provision --store {path}` (or serve the session once) first"
        )


def _usable_plan(store: Store, name: str, plan: EmbedderPlan) -> tuple[EmbedderPlan, str | None]:
    """The server's plan, or keyword-only with the reason when the session was stamped
    with another model's contract (its stored vectors cannot be compared with ours, and a
    read-only view relabels nothing)."""
    record = store.get_session(name)
    stamped = record.embedding_contract if record is not None else None
    if stamped and plan.contract and not contracts_equal(dict(stamped), dict(plan.contract)):
        note = (
            f"the session was written with {describe_contract(dict(stamped))} and this "
            f"process embeds with {describe_contract(dict(plan.contract))}: recall here is "
            "keyword-only"
        )
        log.warning("%s", note)
        return EmbedderPlan(lazy=None, contract=None), note
    return plan, None
