"""`lambo model import`: copy a local ONNX directory in as an installed model.

The directory is copied (never linked or recorded as a path), so moving or editing
the source cannot change what a session's contract names. Inputs, output and
width come from the graph, pooling and limits from the files beside it; the copy is
loaded and run on a probe text before it is installed.
"""

from __future__ import annotations

import json
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError, ParameterError
from .catalog import CATALOG
from .graph_scan import GraphScan, scan_onnx
from .install_dir import copy_hashing, exclusive, install_dir
from .installed import check_name
from .manifest import ModelManifest
from .onnx import OnnxEmbedder

_POOLED_OUTPUTS = ("dense_vecs", "sentence_embedding", "sentence_embeddings", "embeddings")
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")


def _find_model_file(src: Path, model_file: str | None) -> Path:
    if model_file:
        path = src / model_file
        if not path.is_file():
            raise ConfigError(f"{model_file} is not a file in the directory given")
        return path
    candidates = sorted(src.glob("*.onnx")) + sorted((src / "onnx").glob("*.onnx"))
    if not candidates:
        raise ConfigError(
            "the directory given holds no .onnx model file (looked in it and in its onnx/ "
            "folder); lambo needs an ONNX export of the model"
        )
    if len(candidates) > 1:
        names = ", ".join(str(c.relative_to(src)) for c in candidates)
        raise ConfigError(f"the directory given holds several models ({names}); name one")
    return candidates[0]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _infer_pooling(src: Path) -> str | None:
    """sentence-transformers says how it pools in 1_Pooling/config.json."""
    config = _read_json(src / "1_Pooling" / "config.json")
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    return None


def _infer_max_length(src: Path, tokenizer: dict[str, Any]) -> int:
    truncation = tokenizer.get("truncation")
    if isinstance(truncation, dict) and isinstance(truncation.get("max_length"), int):
        return int(truncation["max_length"])
    config = _read_json(src / "config.json")
    positions = config.get("max_position_embeddings")
    if isinstance(positions, int) and positions > 2:
        # RoBERTa-style position ids start after the padding index.
        offset = 2 if str(config.get("model_type", "")).endswith("roberta") else 0
        return positions - offset
    return 512


def _infer_pad(tokenizer: Any, tokenizer_json: dict[str, Any]) -> tuple[int, str]:
    padding = tokenizer_json.get("padding")
    if isinstance(padding, dict):
        token, pad_id = padding.get("pad_token"), padding.get("pad_id")
        if isinstance(token, str) and tokenizer.token_to_id(token) == pad_id:
            return int(pad_id), token
    for token in ("<pad>", "[PAD]", "<|padding|>", "<|endoftext|>"):
        found = tokenizer.token_to_id(token)
        if found is not None:
            return int(found), token
    # Any id works as padding under an attention mask; keep the tokenizer's id 0.
    return 0, str(tokenizer.id_to_token(0))


@dataclass(frozen=True)
class _Source:
    """The directory given, and what was found in it before anything is copied."""

    root: Path
    model_path: Path
    tokenizer_path: Path
    tokenizer_json: dict[str, Any]
    tokenizer: Any
    scan: GraphScan


@dataclass(frozen=True)
class _Graph:
    """What the graph says: its inputs, the output chosen, how to pool it, its width."""

    inputs: list[str]
    output: str | int
    pooling: str
    dim: int


def _check_arguments(name: str, pooling: str | None, merge_threshold: float | None) -> None:
    check_name(name, "--name")
    if pooling is not None and pooling not in ("cls", "mean"):
        raise ParameterError("--pooling must be cls or mean")
    if merge_threshold is not None and not 0.0 < merge_threshold <= 1.0:
        raise ParameterError("merge_threshold must be in (0, 1]")


def _read_source(src_dir: Path | str, model_file: str | None) -> _Source:
    """The model file, its tokenizer and its external weights, each checked."""
    from tokenizers import Tokenizer

    src = Path(src_dir).expanduser()
    if not src.is_dir():
        raise ConfigError(f"{src_dir} is not a directory")
    model_path = _find_model_file(src, model_file)
    tokenizer_path = next(
        (p for p in (src / "tokenizer.json", model_path.parent / "tokenizer.json") if p.is_file()),
        None,
    )
    if tokenizer_path is None:
        raise ConfigError(
            "the directory given has no tokenizer.json; lambo needs the tokenizer in the "
            "Hugging Face `tokenizers` JSON format beside the model"
        )
    tokenizer_json = _read_json(tokenizer_path)
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:
        raise ConfigError(
            "tokenizer.json in the directory given is not a tokenizers JSON file",
            detail=repr(exc),
        ) from None
    try:
        scan = scan_onnx(model_path)
    except (OSError, ValueError, IndexError) as exc:
        raise ConfigError(
            f"{model_path.name} in the directory given is not an ONNX model", detail=repr(exc)
        ) from None
    for location in sorted(scan.external_data):
        extra = model_path.parent / location
        if ".." in Path(location).parts or Path(location).is_absolute() or not extra.is_file():
            raise ConfigError(
                f"{model_path.name} keeps weights in {location}, which is not in the "
                "directory given"
            )
    return _Source(src, model_path, tokenizer_path, tokenizer_json, tokenizer, scan)


def _choose_output(outputs: dict[str, Any], output: str | None) -> str | int:
    """``--output`` (a name or an index), else the first output of a known name."""
    if output is None:
        return next(
            (o for o in (*_POOLED_OUTPUTS, *_TOKEN_OUTPUTS) if o in outputs), next(iter(outputs))
        )
    chosen: str | int = int(output) if output.isdigit() else output
    if isinstance(chosen, str) and chosen not in outputs:
        raise ConfigError(
            f"--output: the model has no output {output}; it has {', '.join(outputs)}"
        )
    if isinstance(chosen, int) and chosen >= len(outputs):
        raise ConfigError(f"--output: the model has only {len(outputs)} outputs")
    return chosen


def _probe_width(session: Any, out_name: str, inputs: list[str], tokenizer: Any) -> int:
    """A symbolic width: run the graph once on a probe text to see it."""
    import numpy as np

    ids = tokenizer.encode("probe").ids
    feeds = {
        n: (
            [ids]
            if n == "input_ids"
            else [[1] * len(ids)]
            if n == "attention_mask"
            else [[0] * len(ids)]
        )
        for n in inputs
    }
    result = session.run([out_name], {k: np.array(v, dtype=np.int64) for k, v in feeds.items()})
    return int(result[0].shape[-1])


def _read_graph(source: _Source, pooling: str | None, output: str | None) -> _Graph:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            str(source.model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ConfigError(
            f"onnxruntime could not load {source.model_path.name} from the directory given",
            detail=repr(exc),
        ) from None
    inputs = [i.name for i in session.get_inputs()]
    outputs = {o.name: o.shape for o in session.get_outputs()}
    chosen = _choose_output(outputs, output)
    out_name = chosen if isinstance(chosen, str) else list(outputs)[chosen]
    shape = outputs[out_name]
    per_token = shape is None or len(shape) != 2
    pooling = pooling or _infer_pooling(source.root)
    if pooling is None:
        if per_token:
            raise ConfigError(
                f"the model's output {out_name} is one vector per token and the directory does "
                "not say how to pool it; pass --pooling cls or --pooling mean"
            )
        pooling = "cls"  # unused: the output is already one vector per text
    dim = shape[-1] if shape and isinstance(shape[-1], int) else 0
    if not dim:
        dim = _probe_width(session, out_name, inputs, source.tokenizer)
    return _Graph(inputs, chosen, pooling, dim)


def _copy_in(
    source: _Source,
    graph: _Graph,
    tmp: Path,
    *,
    name: str,
    limit: int,
    pad: tuple[int, str],
    threshold: float | None,
) -> None:
    """Copy the files into ``tmp``, hashing them, and write the manifest beside them."""
    model_path = source.model_path
    files = {
        model_path.name: copy_hashing(model_path, tmp / model_path.name),
        "tokenizer.json": copy_hashing(source.tokenizer_path, tmp / "tokenizer.json"),
    }
    for location in sorted(source.scan.external_data):  # checked in _read_source
        files[location] = copy_hashing(model_path.parent / location, tmp / location)
    pad_id, pad_token = pad
    ModelManifest(
        name=name,
        model_file=model_path.name,
        tokenizer_file="tokenizer.json",
        pooling=graph.pooling,
        output=graph.output,
        dim=graph.dim,
        max_length=limit,
        token_type_ids="token_type_ids" in graph.inputs,
        pad_id=pad_id,
        pad_token=pad_token,
        merge_threshold=threshold,
        quantization=source.scan.quantization,
        files=files,
        source={"kind": "import", "model_file": str(model_path.relative_to(source.root))},
    ).write(tmp)


def import_model(
    src_dir: Path | str,
    name: str,
    models_dir: Path,
    pooling: str | None = None,
    output: str | None = None,
    *,
    model_file: str | None = None,
    max_length: int | None = None,
    merge_threshold: float | None = None,
) -> Path:
    """Copy a local Hugging-Face-style ONNX directory into ``models_dir/name``.

    Needs one ``.onnx`` file (or ``model_file``) and ``tokenizer.json``. The
    inputs, the output and the width come from the graph; pooling from
    ``pooling``, else sentence-transformers' ``1_Pooling/config.json``, and a
    per-token output without either is refused rather than guessed. The copy
    is loaded and run on a probe text before it is installed.
    """
    _check_arguments(name, pooling, merge_threshold)
    source = _read_source(src_dir, model_file)
    graph = _read_graph(source, pooling, output)
    pad = _infer_pad(source.tokenizer, source.tokenizer_json)
    limit = max_length or _infer_max_length(source.root, source.tokenizer_json)
    # A local copy of a catalog model (the offline path) keeps its calibration.
    threshold = (
        merge_threshold
        if merge_threshold is not None
        else (CATALOG[name].merge_threshold if name in CATALOG else None)
    )
    models_dir.mkdir(parents=True, exist_ok=True)
    target = models_dir / name
    with exclusive(models_dir, name):
        tmp = models_dir / f".install-{name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            _copy_in(source, graph, tmp, name=name, limit=limit, pad=pad, threshold=threshold)
            probe = OnnxEmbedder(tmp, threads=1, batch_size=1)
            probe.embed(["lambo import probe"])
            del probe
            install_dir(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
