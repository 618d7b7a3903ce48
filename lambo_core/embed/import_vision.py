"""The image side of `lambo model import`: finding a two-tower export's towers, reading its
vision graph and its ``preprocessor_config.json``.

A directory is a two-tower model when it holds a ``vision_model*.onnx`` (beside the other
files or in ``onnx/``). Its text tower is the ``text_model*.onnx`` with the same suffix:
``text_model.onnx`` + ``vision_model.onnx``, or transformers.js's
``onnx/text_model_quantized.onnx`` + ``onnx/vision_model_quantized.onnx`` (also ``_fp16``,
``_int8``...). With several such pairs, ``--model-file`` names the text tower and the
vision tower is its pair. A combined graph (``model.onnx`` taking both text and pixels) is
not a tower and is left out. The preprocessing is read from ``preprocessor_config.json``
(beside the other files, or beside the vision graph), which a two-tower import requires.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .graph_scan import scan_local_model
from .infer import Inferred, read_json
from .preprocess import PREPROCESSOR_FILE, RESAMPLE, ImagePreprocess, read_preprocessor

_VISION_RE = re.compile(r"vision_model(.*)\.onnx")
_TEXT_RE = re.compile(r"text_model(.*)\.onnx")
# The pooled image output a CLIP vision export names, tried before any other 2-d output.
_POOLED_IMAGE_OUTPUTS = ("image_embeds", "image_embeddings", "pooler_output")


@dataclass(frozen=True)
class VisionPlan:
    """The vision tower an import installs: its graph, feed, output and preprocessing."""

    model_path: Path
    preprocessor_path: Path
    input: str
    output: str
    preprocess: ImagePreprocess
    external_data: frozenset[str]
    inferred: list[Inferred]


def _rel(root: Path, path: Path) -> str:
    return str(path.relative_to(root))


def find_towers(src: Path, model_file: str | None) -> tuple[Path, Path] | None:
    """(text graph, vision graph) of a two-tower directory; None when it has no vision graph."""
    visions = sorted(
        p for d in (src, src / "onnx") for p in d.glob("vision_model*.onnx") if p.is_file()
    )
    if not visions:
        return None
    if model_file:
        text = src / model_file
        matched = _TEXT_RE.fullmatch(text.name)
        if matched is None:
            raise ConfigError(
                "--model-file: in a two-tower directory it names the text tower, a "
                "text_model*.onnx (the vision tower is the vision_model*.onnx beside it)"
            )
        vision = text.parent / f"vision_model{matched.group(1)}.onnx"
        if not vision.is_file():
            raise ConfigError(
                f"--model-file: there is no {_rel(src, vision)} to pair with "
                f"{_rel(src, text)}; a two-tower import needs both towers"
            )
        return text, vision
    pairs = []
    for vision in visions:
        matched = _VISION_RE.fullmatch(vision.name)
        assert matched is not None
        text = vision.parent / f"text_model{matched.group(1)}.onnx"
        if text.is_file():
            pairs.append((text, vision))
    if not pairs:
        names = ", ".join(_rel(src, v) for v in visions)
        raise ConfigError(
            f"the directory given holds a vision tower ({names}) but no text_model*.onnx of "
            "the same suffix; a two-tower import needs both towers"
        )
    if len(pairs) > 1:
        shown = "; ".join(f"{_rel(src, t)} + {_rel(src, v)}" for t, v in pairs)
        raise ConfigError(
            f"the directory given holds several two-tower exports ({shown}); name the text "
            "tower with --model-file (its vision_model pair comes with it)"
        )
    return pairs[0]


def _preprocessor(root: Path, vision_path: Path, where: str) -> Path:
    for candidate in (root / PREPROCESSOR_FILE, vision_path.parent / PREPROCESSOR_FILE):
        if candidate.is_file():
            return candidate
    raise ConfigError(
        f"{where} has a vision tower but no {PREPROCESSOR_FILE}; lambo preprocesses images "
        "exactly as that file says, and guessing would give other vectors than the model's own"
    )


def _session(path: Path, where: str) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
    except Exception as exc:
        raise ConfigError(
            f"onnxruntime could not load {path.name} from {where}", detail=repr(exc)
        ) from None


def _output_width(session: Any, name: str, preprocess: ImagePreprocess, input_name: str) -> int:
    """The output's width from its shape, else from a run on one blank image."""
    import numpy as np

    shape = next(o.shape for o in session.get_outputs() if o.name == name)
    if shape and isinstance(shape[-1], int):
        return int(shape[-1])
    height, width = preprocess.fixed_size or (224, 224)
    blank = np.zeros((1, 3, height, width), dtype=np.float32)
    return int(session.run([name], {input_name: blank})[0].shape[-1])


def plan_vision(root: Path, vision_path: Path, text_dim: int, where: str) -> VisionPlan:
    """Read the vision graph and the preprocessing; refuse towers that do not share a space."""
    preprocessor_path = _preprocessor(root, vision_path, where)
    read = read_preprocessor(read_json(preprocessor_path), _rel(root, preprocessor_path))
    scan = scan_local_model(vision_path, where)
    session = _session(vision_path, where)
    inputs = [i for i in session.get_inputs()]
    if len(inputs) != 1 or len(inputs[0].shape or []) != 4:
        names = ", ".join(i.name for i in inputs)
        raise ConfigError(
            f"{vision_path.name} in {where} takes {names}; lambo feeds a vision tower one "
            "input, the pixels [batch, 3, height, width]"
        )
    outputs = {o.name: o.shape for o in session.get_outputs()}
    output = next((o for o in _POOLED_IMAGE_OUTPUTS if o in outputs), None)
    if output is None:
        output = next((o for o, shape in outputs.items() if shape and len(shape) == 2), None)
    if output is None:
        raise ConfigError(
            f"{vision_path.name} in {where} has no pooled image output [batch, dim] (it has "
            f"{', '.join(outputs)})"
        )
    dim = _output_width(session, output, read.preprocess, inputs[0].name)
    if dim != text_dim:
        raise ConfigError(
            f"the vision tower {vision_path.name} makes {dim}-d vectors and the text tower "
            f"{text_dim}-d; the two towers of one model share one space"
        )
    inferred = [
        Inferred("modalities", "text, image", f"the two towers, {vision_path.name} for images"),
        Inferred("vision output", f"{output}, {dim}-d", "the graph"),
        Inferred("vision input", str(inputs[0].name), "the graph"),
    ]
    for setting, value, source in read.lines:
        resample = setting == "resample" and isinstance(value, int)
        shown = f"{value} ({RESAMPLE[int(str(value))]})" if resample else value
        inferred.append(Inferred(f"image {setting}", shown, source))
    return VisionPlan(
        model_path=vision_path,
        preprocessor_path=preprocessor_path,
        input=str(inputs[0].name),
        output=output,
        preprocess=read.preprocess,
        external_data=scan.external_data,
        inferred=inferred,
    )
