"""``OnnxEmbedder``: any Hugging-Face-style ONNX directory run by onnxruntime.

A model directory holds the ONNX graph, ``tokenizer.json`` and the manifest
lambo writes, ``lambo-model.json`` (``ModelManifest``): pooling, output,
width, token limit, pad token and the files with their sizes and sha256.

How a call runs: every text is tokenized once (truncated at the max length),
the texts are sorted by token count so each batch holds texts of similar
length, each batch is padded to its own longest text and bounded by count and
by padded tokens (long texts in big batches are what blow memory up), and the
rows come back in input order. The graph's output decides the pooling: a
per-token ``[b, s, h]`` output (``last_hidden_state``) is pooled by CLS or by
the attention-masked mean; an already-pooled ``[b, h]`` output (bge-m3's
``dense_vecs``) is taken as it is. Either way rows are L2-normalized.

One model per process: ``load_embedder(config)`` loads once and hands the
same embedder to every caller; ``LazyEmbedder`` loads it in a background
thread so a serve can answer before the model is ready.
"""

from __future__ import annotations

import json
import logging
import mmap
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..errors import ConfigError, InternalError, LamboError, ParameterError
from ..model import Vector
from .base import (
    DEFAULT_MERGE_THRESHOLD,
    QUERY_CACHE_SIZE,
    EmbeddingContract,
    QueryCache,
    make_contract,
    normalize_rows,
)
from .catalog import DEFAULT_MODEL

if TYPE_CHECKING:
    from ..config import Config
    from .base import Embedder

log = logging.getLogger("lambo.embed")

MANIFEST_NAME = "lambo-model.json"
MANIFEST_FORMAT = 1
KIND = "onnx"

# Padded tokens per batch. A batch of 32 texts at 8192 tokens would be 256k
# tokens, and attention memory grows with the square of the length; 16k keeps
# a bge-m3 batch within a few GB while short texts still batch 32 at a time.
MAX_BATCH_TOKENS = 16_384

# The inputs lambo knows how to fill; a graph wanting anything else is refused.
_KNOWN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")

# Ops that mean real int8 arithmetic (activations quantized at run time) versus
# int8 storage that is turned back into float before a float MatMul.
_INT8_COMPUTE_OPS = frozenset(
    {
        "MatMulInteger",
        "DynamicQuantizeMatMul",
        "MatMulIntegerToFloat",
        "QLinearMatMul",
        "QAttention",
        "QGemm",
        "DynamicQuantizeLinear",
    }
)
_WEIGHT_ONLY_OPS = frozenset({"MatMulNBits", "DequantizeLinear", "GatherBlockQuantized"})


# --------------------------------------------------------------------------- manifest


@dataclass(frozen=True)
class FileRecord:
    size: int
    sha256: str


@dataclass(frozen=True)
class ModelManifest:
    """``lambo-model.json``: how to run the model in this directory."""

    name: str
    model_file: str
    tokenizer_file: str
    pooling: str  # "cls" | "mean"; used when the output is per-token
    output: str | int  # an output name, or its index among the graph's outputs
    dim: int
    max_length: int
    token_type_ids: bool
    pad_id: int
    pad_token: str
    normalize: bool = True
    merge_threshold: float | None = None
    quantization: str = "unknown"
    files: dict[str, FileRecord] = field(default_factory=dict)
    source: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": MANIFEST_FORMAT,
            "name": self.name,
            "model_file": self.model_file,
            "tokenizer_file": self.tokenizer_file,
            "pooling": self.pooling,
            "output": self.output,
            "normalize": self.normalize,
            "dim": self.dim,
            "max_length": self.max_length,
            "token_type_ids": self.token_type_ids,
            "pad_id": self.pad_id,
            "pad_token": self.pad_token,
            "merge_threshold": self.merge_threshold,
            "quantization": self.quantization,
            "files": {k: {"size": v.size, "sha256": v.sha256} for k, v in self.files.items()},
            "source": self.source,
        }

    @classmethod
    def from_json(cls, data: object, where: str) -> ModelManifest:
        """Check every field; a refusal names the field and the rule, never the file's text."""

        def bad(fieldname: str, rule: str) -> ConfigError:
            return ConfigError(f"{MANIFEST_NAME} of model {where}: {fieldname} {rule}")

        if not isinstance(data, dict):
            raise bad("the file", "must hold a JSON object")
        if data.get("format") != MANIFEST_FORMAT:
            raise bad("format", f"must be {MANIFEST_FORMAT}")

        def text(key: str) -> str:
            value = data.get(key)
            if not isinstance(value, str) or not value:
                raise bad(key, "must be a non-empty string")
            return value

        def integer(key: str, low: int) -> int:
            value = data.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise bad(key, f"must be an integer of at least {low}")
            return value

        def flag(key: str) -> bool:
            value = data.get(key)
            if not isinstance(value, bool):
                raise bad(key, "must be true or false")
            return value

        pooling = text("pooling")
        if pooling not in ("cls", "mean"):
            raise bad("pooling", "must be cls or mean")
        output = data.get("output")
        if isinstance(output, bool) or not isinstance(output, str | int) or output == "":
            raise bad("output", "must be an output name or index")
        if isinstance(output, int) and output < 0:
            raise bad("output", "must be an output name or index")
        if not flag("normalize"):
            raise bad("normalize", "must be true: lambo compares unit vectors")
        threshold = data.get("merge_threshold")
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0.0 < threshold <= 1.0
        ):
            raise bad("merge_threshold", "must be null or a number in (0, 1]")
        raw_files = data.get("files", {})
        if not isinstance(raw_files, dict):
            raise bad("files", "must be an object")
        files: dict[str, FileRecord] = {}
        for fname, rec in raw_files.items():
            if not _plain_name(fname):
                raise bad("files", "must name files inside the model directory")
            if (
                not isinstance(rec, dict)
                or not isinstance(rec.get("size"), int)
                or not isinstance(rec.get("sha256"), str)
            ):
                raise bad(f"files.{fname}", "must be {size, sha256}")
            files[fname] = FileRecord(int(rec["size"]), str(rec["sha256"]))
        model_file = text("model_file")
        tokenizer_file = text("tokenizer_file")
        for key, value in (("model_file", model_file), ("tokenizer_file", tokenizer_file)):
            if not _plain_name(value):
                raise bad(key, "must name a file inside the model directory")
        source = data.get("source", {})
        if not isinstance(source, dict):
            raise bad("source", "must be an object")
        quantization = data.get("quantization", "unknown")
        return cls(
            name=text("name"),
            model_file=model_file,
            tokenizer_file=tokenizer_file,
            pooling=pooling,
            output=output,
            normalize=True,
            dim=integer("dim", 1),
            max_length=integer("max_length", 2),
            token_type_ids=flag("token_type_ids"),
            pad_id=integer("pad_id", 0),
            pad_token=text("pad_token"),
            merge_threshold=None if threshold is None else float(threshold),
            quantization=quantization if isinstance(quantization, str) else "unknown",
            files=files,
            source=source,
        )

    @classmethod
    def read(cls, model_dir: Path, where: str | None = None) -> ModelManifest:
        where = where or model_dir.name
        path = model_dir / MANIFEST_NAME
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(
                f"model {where} has no {MANIFEST_NAME}; register the directory with "
                "`lambo model import DIR --name NAME`"
            ) from None
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ConfigError(
                f"{MANIFEST_NAME} of model {where} could not be read as JSON", detail=repr(exc)
            ) from None
        return cls.from_json(data, where)

    def write(self, model_dir: Path) -> None:
        path = model_dir / MANIFEST_NAME
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", encoding="utf-8") as fh:
            json.dump(self.to_json(), fh, indent=2, sort_keys=False)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)

    def contract(self) -> EmbeddingContract:
        # The spec: model is null for the embedder's default model.
        return make_contract(KIND, None if self.name == DEFAULT_MODEL else self.name, self.dim)


def _plain_name(name: object) -> bool:
    """A relative path that stays inside the model directory."""
    if not isinstance(name, str) or not name or name.startswith(("/", "\\")):
        return False
    parts = name.replace("\\", "/").split("/")
    return all(p not in ("", ".", "..") for p in parts)


# --------------------------------------------------------------------------- graph scan


@dataclass(frozen=True)
class GraphScan:
    """What a protobuf walk of an ``.onnx`` file found, without loading it."""

    op_types: Counter[str]
    int8_initializers: int
    external_data: frozenset[str]

    @property
    def quantization(self) -> str:
        """``int8-dynamic`` (int8 MatMuls), ``int8-weight-only``, or ``float``."""
        ops = set(self.op_types)
        if ops & _INT8_COMPUTE_OPS:
            return "int8-dynamic"
        if ops & _WEIGHT_ONLY_OPS or self.int8_initializers:
            return "int8-weight-only"
        return "float"


def _varint(buf: Any, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return result, pos


def _fields(buf: Any, start: int, end: int) -> Iterator[tuple[int, int, Any]]:
    """(field number, wire type, value) of one protobuf message; length-delimited values
    are (start, end) offsets so large tensors are skipped, never copied."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
            yield number, wire, value
        elif wire == 1:
            yield number, wire, None
            pos += 8
        elif wire == 5:
            yield number, wire, None
            pos += 4
        elif wire == 2:
            length, pos = _varint(buf, pos)
            yield number, wire, (pos, pos + length)
            pos += length
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def scan_onnx(path: Path) -> GraphScan:
    """Op types, int8 initializers and external data files of an ONNX model.

    A minimal walk of the protobuf (ModelProto.graph=7; GraphProto.node=1,
    initializer=5; NodeProto.op_type=4; TensorProto.data_type=2,
    external_data=13 with key/value 1/2), so lambo needs no ``onnx`` package.
    """
    ops: Counter[str] = Counter()
    int8 = 0
    external: set[str] = set()
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        for number, wire, value in _fields(buf, 0, len(buf)):
            if number != 7 or wire != 2:
                continue
            for g_num, g_wire, g_val in _fields(buf, *value):
                if g_wire != 2:
                    continue
                if g_num == 1:
                    for n_num, n_wire, n_val in _fields(buf, *g_val):
                        if n_num == 4 and n_wire == 2:
                            ops[bytes(buf[n_val[0] : n_val[1]]).decode("utf-8", "replace")] += 1
                elif g_num == 5:
                    for t_num, t_wire, t_val in _fields(buf, *g_val):
                        if t_num == 2 and t_wire == 0 and t_val in (2, 3):  # UINT8, INT8
                            int8 += 1
                        elif t_num == 13 and t_wire == 2:
                            entry = dict(
                                (k, bytes(buf[v[0] : v[1]]).decode("utf-8", "replace"))
                                for k, w, v in _fields(buf, *t_val)
                                if w == 2
                            )
                            if entry.get(1) == "location" and 2 in entry:
                                external.add(entry[2])
    return GraphScan(ops, int8, frozenset(external))


# --------------------------------------------------------------------------- the embedder


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
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if batch_size < 1:
            raise ParameterError("batch_size must be at least 1")
        if threads < 0 or max_length < 0 or max_batch_tokens < 1:
            raise ParameterError("threads and max_length must be >= 0, max_batch_tokens >= 1")
        self.model_dir = Path(model_dir)
        self.manifest = manifest = ModelManifest.read(self.model_dir)
        name = manifest.name
        for fname, rec in manifest.files.items():
            try:
                size = (self.model_dir / fname).stat().st_size
            except OSError:
                raise ConfigError(
                    f"model {name} is missing its file {fname}; pull or import it again"
                ) from None
            if size != rec.size:
                raise ConfigError(
                    f"model {name}: {fname} is {size} bytes but the manifest says {rec.size}; "
                    "pull or import it again"
                )
        if expected_dim and expected_dim != manifest.dim:
            raise ConfigError(
                f"embedder.dim is {expected_dim} but model {name} makes {manifest.dim}-d vectors; "
                "set embedder.dim = 0 to take the model's own"
            )

        # --- tokenizer: truncate at the max length, no fixed padding (we pad per batch)
        try:
            tokenizer = Tokenizer.from_file(str(self.model_dir / manifest.tokenizer_file))
        except Exception as exc:
            raise ConfigError(
                f"model {name}: {manifest.tokenizer_file} is not a tokenizers JSON file",
                detail=repr(exc),
            ) from None
        if tokenizer.token_to_id(manifest.pad_token) != manifest.pad_id:
            raise ConfigError(
                f"model {name}: pad_token {manifest.pad_token} is not id {manifest.pad_id} "
                "in its tokenizer"
            )
        self.max_length = (
            min(max_length, manifest.max_length) if max_length else manifest.max_length
        )
        # Shipped tokenizers often pad to a fixed length (the test MiniLM pads to
        # 128): reset it. Padding is done per sorted batch in _pad, because the
        # tokenizer's own pad-to-longest would pad a whole call to its longest text.
        tokenizer.no_padding()
        tokenizer.no_truncation()
        tokenizer.enable_truncation(max_length=self.max_length)
        self._tokenizer = tokenizer

        # --- session
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
            self._session = ort.InferenceSession(
                str(self.model_dir / manifest.model_file),
                sess_options=options,
                providers=["CPUExecutionProvider"],
            )
        except Exception as exc:
            raise ConfigError(
                f"model {name}: onnxruntime could not load {manifest.model_file}",
                detail=repr(exc),
            ) from None
        self.threads = options.intra_op_num_threads
        self._inputs: dict[str, np.dtype[Any]] = {}
        for meta in self._session.get_inputs():
            if meta.name not in _KNOWN_INPUTS:
                raise ConfigError(
                    f"model {name} wants an input lambo cannot feed: {meta.name} "
                    f"(lambo feeds {', '.join(_KNOWN_INPUTS)})"
                )
            self._inputs[meta.name] = np.dtype(
                np.int32 if meta.type == "tensor(int32)" else np.int64
            )
        if "input_ids" not in self._inputs:
            raise ConfigError(f"model {name} has no input_ids input")
        outputs: list[str] = [str(o.name) for o in self._session.get_outputs()]
        if isinstance(manifest.output, int):
            if manifest.output >= len(outputs):
                raise ConfigError(f"model {name}: output {manifest.output} does not exist")
            self._output = outputs[manifest.output]
        elif manifest.output in outputs:
            self._output = manifest.output
        else:
            raise ConfigError(
                f"model {name} has no output {manifest.output}; it has {', '.join(outputs)}"
            )

        self.batch_size = batch_size
        self.max_batch_tokens = max_batch_tokens
        self._merge_threshold = (
            merge_threshold
            if merge_threshold
            else manifest.merge_threshold or DEFAULT_MERGE_THRESHOLD
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


# --------------------------------------------------------------------------- one per process


_LOAD_LOCK = threading.Lock()
_LOADED: dict[tuple[Any, ...], OnnxEmbedder] = {}


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
    from .pull import resolve_model_dir

    _check_wanted(config)
    model_dir = resolve_model_dir(config)
    contract = ModelManifest.read(model_dir).contract()
    return contract


def load_embedder(config: Config) -> Embedder:
    """The process's embedder for ``config``, loaded on first use and then shared."""
    from .pull import resolve_model_dir

    _check_wanted(config)
    model_dir = resolve_model_dir(config).resolve()
    threads = int(config.get("embedder.threads"))
    batch_size = int(config.get("embedder.batch_size"))
    max_length = int(config.get("embedder.max_length"))
    threshold = float(config.get("embedder.merge_threshold")) or None
    dim = int(config.get("embedder.dim"))
    key = (str(model_dir), threads, batch_size, max_length, threshold, dim)
    with _LOAD_LOCK:
        found = _LOADED.get(key)
        if found is None:
            started = time.monotonic()
            found = OnnxEmbedder(
                model_dir,
                threads=threads,
                batch_size=batch_size,
                max_length=max_length,
                merge_threshold=threshold,
                expected_dim=dim,
            )
            log.info("loaded model %s in %.1fs", found.name, time.monotonic() - started)
            _LOADED[key] = found
    return found


def _forget_loaded() -> None:
    """Drop the process cache (tests only)."""
    with _LOAD_LOCK:
        _LOADED.clear()


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

    def start(self) -> LazyEmbedder:
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


def start_embedder(config: Config) -> LazyEmbedder:
    """Begin loading the configured embedder in the background."""
    return LazyEmbedder(lambda: load_embedder(config)).start()
