"""From a configuration to an embedder: whether one is wanted, its contract, its loading.

``LoadedModels`` keeps the embedders its owner loaded, so the sessions of one serve
share one model; ``LazyEmbedder`` loads in a background thread, so a serve answers
before the model is ready (writes wait for it on their receipts; spec: lambo_derive,
"A derive needs the embedder"). The contract is read from the model's manifest
without loading it (spec: lambo_stats' ``embedding_contract``), and so are its
modalities (``embedding_modalities``); a manifest with a vision tower loads as a
``TwoTowerEmbedder``, any other as an ``OnnxEmbedder``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from ..errors import ConfigError, LamboError
from .base import Embedder, EmbeddingContract
from .installed import resolve_model_dir
from .manifest import ModelManifest
from .onnx import OnnxEmbedder
from .two_tower import TwoTowerEmbedder

if TYPE_CHECKING:
    from ..config import Config

log = logging.getLogger("lambo.embed")


def wants_embedder(config: Config) -> bool:
    """False when the configuration declares keyword-only memory (no embedder)."""
    return bool(
        config.get("embedder.kind") != "none"
        and config.get("embedder.match_strategy") != "canonical"
    )


def _check_wanted(config: Config) -> None:
    if config.get("embedder.kind") == "none":
        raise ConfigError("embedder.kind is none, so this server has no embedder")
    if config.get("embedder.match_strategy") == "canonical":
        raise ConfigError(
            'embedder.match_strategy is "canonical" (keyword-only), so no embedder is loaded'
        )


def read_contract(config: Config) -> EmbeddingContract:
    """The configured model's contract from its manifest, without loading the model."""
    return read_model_facts(config)[0]


def read_model_facts(config: Config) -> tuple[EmbeddingContract, list[str]]:
    """The configured model's contract and modalities from its manifest, without loading it."""
    _check_wanted(config)
    manifest = ModelManifest.read(resolve_model_dir(config))
    return manifest.contract(), manifest.modalities


def open_embedder(model_dir: Path, **options: Any) -> OnnxEmbedder | TwoTowerEmbedder:
    """The embedder the manifest in ``model_dir`` describes: two towers or one."""
    if ModelManifest.read(model_dir).vision is not None:
        return TwoTowerEmbedder(model_dir, **options)
    return OnnxEmbedder(model_dir, **options)


class LoadedModels:
    """The ONNX embedders one owner has loaded, by what they were loaded with.

    Whoever opens services makes one (a serve, a one-shot command) and hands it to
    each ``EmbedderPlan``, so the sessions it opens share one loaded model; a test
    makes its own. Loads run one at a time, under the cache's lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loaded: dict[tuple[Any, ...], OnnxEmbedder | TwoTowerEmbedder] = {}

    def load(self, config: Config) -> Embedder:
        """The embedder for ``config``, loaded on first use and then shared."""
        _check_wanted(config)
        model_dir = resolve_model_dir(config).resolve()
        threads = int(config.get("embedder.threads"))
        batch_size = int(config.get("embedder.batch_size"))
        max_length = int(config.get("embedder.max_length"))
        threshold = float(config.get("embedder.merge_threshold")) or None
        dim = int(config.get("embedder.dim"))
        key = (str(model_dir), threads, batch_size, max_length, threshold, dim)
        with self._lock:
            found = self._loaded.get(key)
            if found is None:
                started = time.monotonic()
                found = open_embedder(
                    model_dir,
                    threads=threads,
                    batch_size=batch_size,
                    max_length=max_length,
                    merge_threshold=threshold,
                    expected_dim=dim,
                )
                log.info("loaded model %s in %.1fs", found.name, time.monotonic() - started)
                self._loaded[key] = found
        return found


class LazyEmbedder:
    """Loads an embedder in a background thread so the caller can start at once.

    ``start()`` begins loading (once); ``ready`` says it succeeded, ``error``
    holds the ``LamboError`` it failed with (a missing model is a
    ``ConfigError`` naming `lambo model pull`), ``wait(timeout)`` blocks until
    it is done either way and returns ``ready``, and ``get(timeout)`` returns
    the embedder or raises the error (or ``EmbedderLoading`` if still loading).
    """

    def __init__(
        self, load: Callable[[], Embedder], *, thread_name: str = "lambo-embedder"
    ) -> None:
        self._load = load
        self._thread_name = thread_name
        self._done = threading.Event()
        self._start_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._embedder: Embedder | None = None
        self._error: LamboError | None = None

    def start(self) -> Self:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=self._thread_name, daemon=True
                )
                self._thread.start()
        return self

    def _run(self) -> None:
        try:
            self._embedder = self._load()
        except LamboError as exc:
            if exc.detail:
                log.warning("%s: %s", exc.kind.value, exc.detail)
            self._error = exc
        except Exception as exc:  # a fault in the loader must not kill the serve
            log.exception("the embedder failed to load")
            self._error = ConfigError(
                "the embedder failed to load; the detail was logged", detail=repr(exc)
            )
        finally:
            self._done.set()

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def ready(self) -> bool:
        return self._done.is_set() and self._embedder is not None

    @property
    def loading(self) -> bool:
        return self.started and not self._done.is_set()

    @property
    def error(self) -> LamboError | None:
        return self._error if self._done.is_set() else None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until loading ends (or ``timeout`` seconds pass); True if the model is ready."""
        self.start()
        self._done.wait(timeout)
        return self.ready

    def get(self, timeout: float | None = 0.0) -> Embedder:
        self.wait(timeout)
        if self._embedder is not None:
            return self._embedder
        if self._error is not None and self._done.is_set():
            raise self._error
        raise EmbedderLoading("the embedder is still loading; the write waits for it")


class EmbedderLoading(ConfigError):
    """Raised by ``LazyEmbedder.get`` while the model is still loading."""


def start_embedder(config: Config, models: LoadedModels) -> LazyEmbedder:
    """Begin loading the configured embedder in the background, through ``models``."""
    return LazyEmbedder(lambda: models.load(config)).start()
