"""``OnnxEmbedder``: a Hugging-Face-style ONNX model directory run by onnxruntime.

Each call tokenizes every text once (truncated at the max length), sorts the texts
by token count, cuts them into batches bounded by count and by padded tokens (long
texts in big batches are what blow memory up), pads each batch to its own longest
text, and returns the rows in input order, L2-normalized. The graph's output says
the pooling: per-token ``[b, s, h]`` is pooled by CLS or the masked mean, an
already-pooled ``[b, h]`` (bge-m3's ``dense_vecs``) is taken as it is. The model
directory and its ``lambo-model.json`` are described in ``manifest.py``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, InternalError, ParameterError
from ..matching import resolve_merge_threshold
from ..model import Vector
from .base import (
    QUERY_CACHE_SIZE,
    EmbeddingContract,
    QueryCache,
    normalize_rows,
)
from .manifest import ModelManifest

# Padded tokens per batch. A batch of 32 texts at 8192 tokens would be 256k
# tokens, and attention memory grows with the square of the length; 16k keeps
# a bge-m3 batch within a few GB while short texts still batch 32 at a time.
MAX_BATCH_TOKENS = 16_384

# The inputs lambo knows how to fill; a graph wanting anything else is refused.
_KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class _Batch:
    input_ids: npt.NDArray[np.int64]
    attention_mask: npt.NDArray[np.int64]
    token_type_ids: npt.NDArray[np.int64]


class OnnxEmbedder:
    """Embeds text with the ONNX model in ``model_dir`` (see the module docstring)."""

    def __init__(
        self,
        model_dir: Path,
        *,
        threads: int = 0,
        batch_size: int = 32,
        max_length: int = 0,
        max_batch_tokens: int = MAX_BATCH_TOKENS,
        merge_threshold: float | None = None,
        expected_dim: int = 0,
        query_cache_size: int = QUERY_CACHE_SIZE,
    ) -> None:
        if batch_size < 1:
            raise ParameterError("batch_size must be at least 1")
        if threads < 0 or max_length < 0 or max_batch_tokens < 1:
            raise ParameterError("threads and max_length must be >= 0, max_batch_tokens >= 1")
        self.model_dir = Path(model_dir)
        self.manifest = manifest = ModelManifest.read(self.model_dir)
        check_files(self.model_dir, manifest)
        if expected_dim and expected_dim != manifest.dim:
            raise ConfigError(
                f"embedder.dim is {expected_dim} but model {manifest.name} makes "
                f"{manifest.dim}-d vectors; set embedder.dim = 0 to take the model's own"
            )
        self.max_length = (
            min(max_length, manifest.max_length) if max_length else manifest.max_length
        )
        self._tokenizer = _open_tokenizer(self.model_dir, manifest, self.max_length)
        self._session, self.threads = open_session(
            self.model_dir / manifest.model_file, manifest.name, threads
        )
        self._inputs = _graph_inputs(self._session, manifest.name)
        self._output = _graph_output(self._session, manifest)

        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        # An explicit threshold wins, else the model's calibration, else the default.
        self._merge_threshold, _ = resolve_merge_threshold(
            merge_threshold or 0.0, manifest.merge_threshold, manifest.name
        )
        self._lock = threading.Lock()
        # (batch, padded length) of every model run in the last embed() call.
        self.last_batch_shapes: list[tuple[int, int]] = []
        self._queries = QueryCache(self._embed_one, query_cache_size)

    # --- the protocol

    @property
    def contract(self) -> EmbeddingContract:
        return self.manifest.contract()

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    @property
    def dim(self) -> int:
        return self.manifest.dim

    @property
    def merge_threshold(self) -> float:
        return self._merge_threshold

    @property
    def name(self) -> str:
        return self.manifest.name

    @property
    def output_name(self) -> str:
        return self._output

    @property
    def feeds(self) -> list[str]:
        """The graph inputs this embedder fills, in the graph's order."""
        return list(self._inputs)

    @property
    def query_cache(self) -> QueryCache:
        return self._queries

    def embed(self, texts: Sequence[str]) -> Vector:
        if isinstance(texts, str):
            raise TypeError("embed takes a sequence of texts, not one string")
        items = list(texts)
        for i, text in enumerate(items):
            if not isinstance(text, str):
                raise TypeError(f"texts[{i}] is not a string")
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        out = np.empty((len(items), self.dim), dtype=np.float32)
        # One call at a time: onnxruntime already uses every thread it was given,
        # and overlapping calls would only add their memory together.
        with self._lock:
            encodings = self._tokenizer.encode_batch(items, add_special_tokens=True)
            lengths = [len(e.ids) for e in encodings]
            order = sorted(range(len(items)), key=lengths.__getitem__)
            shapes: list[tuple[int, int]] = []
            for rows in self._plan(order, lengths):
                batch = self._pad([encodings[i] for i in rows])
                shapes.append((int(batch.input_ids.shape[0]), int(batch.input_ids.shape[1])))
                out[rows] = self._run(batch)
            self.last_batch_shapes = shapes
        return out

    def embed_query(self, text: str) -> Vector:
        return self._queries.get(text)

    # --- what the tests and `lambo model verify` look at

    def tokenize(self, texts: Sequence[str]) -> dict[str, npt.NDArray[np.int64]]:
        """The arrays one batch of ``texts`` would be fed as (truncated, padded to its longest)."""
        with self._lock:
            batch = self._pad(self._tokenizer.encode_batch(list(texts), add_special_tokens=True))
        return {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "token_type_ids": batch.token_type_ids,
        }

    def raw_output(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """The selected graph output for one padded batch, before pooling or normalizing."""
        with self._lock:
            batch = self._pad(self._tokenizer.encode_batch(list(texts), add_special_tokens=True))
            return self._forward(batch)

    # --- internals

    def _embed_one(self, text: str) -> Vector:
        row: Vector = self.embed([text])[0]
        return row

    def _plan(self, order: list[int], lengths: list[int]) -> Iterator[list[int]]:
        """Cut length-sorted rows into batches bounded by count and by padded tokens."""
        batch: list[int] = []
        for i in order:
            # Sorted ascending, so the newest row is the longest: it sets the padding.
            if batch and (
                len(batch) >= self.batch_size
                or (len(batch) + 1) * lengths[i] > self.max_batch_tokens
            ):
                yield batch
                batch = []
            batch.append(i)
        if batch:
            yield batch

    def _pad(self, encodings: Sequence[Any]) -> _Batch:
        width = max(len(e.ids) for e in encodings)
        n = len(encodings)
        ids = np.full((n, width), self.manifest.pad_id, dtype=np.int64)
        mask = np.zeros((n, width), dtype=np.int64)
        types = np.zeros((n, width), dtype=np.int64)
        for row, enc in enumerate(encodings):
            k = len(enc.ids)
            ids[row, :k] = enc.ids
            mask[row, :k] = 1
            types[row, :k] = enc.type_ids
        return _Batch(ids, mask, types)

    def _forward(self, batch: _Batch) -> npt.NDArray[np.float32]:
        arrays = {
            "input_ids": batch.input_ids,
            "attention_mask": batch.attention_mask,
            "token_type_ids": batch.token_type_ids,
        }
        # Feed only what the graph declares: bge-m3 takes no token_type_ids.
        feeds = {k: arrays[k].astype(dtype, copy=False) for k, dtype in self._inputs.items()}
        try:
            (result,) = self._session.run([self._output], feeds)
        except Exception as exc:
            raise InternalError(
                f"the embedder failed on a batch of {batch.input_ids.shape[0]} texts",
                detail=repr(exc),
            ) from None
        return np.asarray(result, dtype=np.float32)

    def _run(self, batch: _Batch) -> Vector:
        hidden = self._forward(batch)
        if hidden.ndim == 3:
            if self.manifest.pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                mask = batch.attention_mask[:, :, None].astype(np.float32)
                pooled = (hidden * mask).sum(axis=1) / np.maximum(mask.sum(axis=1), 1e-9)
        elif hidden.ndim == 2:
            pooled = hidden  # already one vector per text (e.g. dense_vecs)
        else:
            raise ConfigError(
                f"model {self.name}: output {self._output} has rank {hidden.ndim}; lambo takes "
                "[batch, seq, hidden] or [batch, hidden]"
            )
        if pooled.shape[1] != self.dim:
            raise ConfigError(
                f"model {self.name} made {pooled.shape[1]}-d vectors but its manifest says "
                f"{self.dim}"
            )
        return normalize_rows(pooled)


def check_files(model_dir: Path, manifest: ModelManifest) -> None:
    """Every file the manifest lists is there at its size (the hashes are `verify`'s job)."""
    for fname, rec in manifest.files.items():
        try:
            size = (model_dir / fname).stat().st_size
        except OSError:
            raise ConfigError(
                f"model {manifest.name} is missing its file {fname}; pull or import it again"
            ) from None
        if size != rec.size:
            raise ConfigError(
                f"model {manifest.name}: {fname} is {size} bytes but the manifest says "
                f"{rec.size}; pull or import it again"
            )


def _open_tokenizer(model_dir: Path, manifest: ModelManifest, max_length: int) -> Any:
    """The tokenizer, truncating at ``max_length`` and padding nothing (batches pad)."""
    from tokenizers import Tokenizer

    try:
        tokenizer = Tokenizer.from_file(str(model_dir / manifest.tokenizer_file))
    except Exception as exc:
        raise ConfigError(
            f"model {manifest.name}: {manifest.tokenizer_file} is not a tokenizers JSON file",
            detail=repr(exc),
        ) from None
    if tokenizer.token_to_id(manifest.pad_token) != manifest.pad_id:
        raise ConfigError(
            f"model {manifest.name}: pad_token {manifest.pad_token} is not id "
            f"{manifest.pad_id} in its tokenizer"
        )
    # Shipped tokenizers often pad to a fixed length (the test MiniLM pads to
    # 128): reset it. Padding is done per sorted batch in _pad, because the
    # tokenizer's own pad-to-longest would pad a whole call to its longest text.
    tokenizer.no_padding()
    tokenizer.no_truncation()
    tokenizer.enable_truncation(max_length=max_length)
    return tokenizer


def open_session(model_path: Path, name: str, threads: int) -> tuple[Any, int]:
    """The onnxruntime session on one graph of model ``name``, and the threads it runs on."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or (os.cpu_count() or 1)
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3
    # No spin-waiting between ops: a serve shares its cores with the agent and
    # its tools, and with cores busy, spinning workers starve each other.
    # Measured here with the MiniLM (2 threads, load ~2.5 on 2 cores, A/B
    # interleaved): batch 1 85 -> 166 sentences/s, batch 32 176 -> 432;
    # 1 thread unchanged. It also stops burning CPU between calls.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ConfigError(
            f"model {name}: onnxruntime could not load {model_path.name}",
            detail=repr(exc),
        ) from None
    return session, int(options.intra_op_num_threads)


def _graph_inputs(session: Any, name: str) -> dict[str, np.dtype[Any]]:
    """The graph's inputs and the integer type each is fed as; one lambo cannot fill is
    refused."""
    inputs: dict[str, np.dtype[Any]] = {}
    for meta in session.get_inputs():
        if meta.name not in _KNOWN_INPUTS:
            raise ConfigError(
                f"model {name} wants an input lambo cannot feed: {meta.name} "
                f"(lambo feeds {', '.join(_KNOWN_INPUTS)})"
            )
        inputs[meta.name] = np.dtype(np.int32 if meta.type == "tensor(int32)" else np.int64)
    if "input_ids" not in inputs:
        raise ConfigError(f"model {name} has no input_ids input")
    return inputs


def _graph_output(session: Any, manifest: ModelManifest) -> str:
    """The name of the output the manifest names (by name or by index)."""
    outputs: list[str] = [str(o.name) for o in session.get_outputs()]
    if isinstance(manifest.output, int):
        if manifest.output >= len(outputs):
            raise ConfigError(f"model {manifest.name}: output {manifest.output} does not exist")
        return outputs[manifest.output]
    if manifest.output in outputs:
        return manifest.output
    raise ConfigError(
        f"model {manifest.name} has no output {manifest.output}; it has {', '.join(outputs)}"
    )
