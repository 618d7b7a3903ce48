"""The catalog: the known models' settings, and the calibration of MiniLM's merge threshold."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from lambo_core.config import load_config
from lambo_core.embed.catalog import BGE_M3, CATALOG, DEFAULT_MODEL, MINILM, catalog_entry
from lambo_core.embed.importer import import_model
from lambo_core.embed.manifest import plain_name
from lambo_core.embed.onnx import OnnxEmbedder
from tests.embed_fixtures import minilm_source_dir

# The calibration set for MINILM.merge_threshold. RESTATEMENTS say one fact twice in
# other words (they should merge); DIFFERENT pairs share a topic or subject but state
# different facts (they must not); UNRELATED pairs share nothing. Written by hand for
# memory-like statements; pairs differing only in a number or name are left out (no
# cosine threshold separates those).
RESTATEMENTS = [
    ("The cat is sleeping on the sofa.", "A cat naps on the couch."),
    ("The deployment failed because the disk was full.", "Deploy broke: no space left on disk."),
    ("She bought a new car yesterday.", "Yesterday she purchased a new automobile."),
    ("How do I reset my password?", "What are the steps to change my password?"),
    (
        "The API server listens on port 8080.",
        "Port 8080 is where the API server accepts connections.",
    ),
    ("Alice is the owner of the billing service.", "The billing service is owned by Alice."),
    (
        "Use UTC for every timestamp in the database.",
        "All database timestamps must be stored in UTC.",
    ),
    ("The build takes about ten minutes.", "It takes roughly ten minutes to build."),
    (
        "Tests must pass before a pull request is merged.",
        "A pull request can only be merged once the tests pass.",
    ),
    ("The user prefers dark mode.", "The user likes the dark theme."),
    ("The meeting was moved to Thursday.", "The meeting has been rescheduled for Thursday."),
    ("Python 3.11 is required.", "You need Python version 3.11."),
    ("The cache is cleared every night.", "Every night the cache gets emptied."),
    (
        "Customers in Europe are served from Frankfurt.",
        "European customers are handled by the Frankfurt region.",
    ),
    ("The login page is slow on mobile.", "On phones, the sign-in page loads slowly."),
    ("Bob fixed the memory leak in the parser.", "The parser's memory leak was fixed by Bob."),
    ("Never commit secrets to the repository.", "Secrets must not be committed to the repo."),
    (
        "The project uses PostgreSQL as its main database.",
        "PostgreSQL is the project's primary database.",
    ),
    ("The invoice is due at the end of the month.", "Payment of the invoice is due by month end."),
    ("Logs are kept for thirty days.", "We retain logs for 30 days."),
    ("The dog barked all night.", "All night long the dog was barking."),
    (
        "The function returns None when the key is missing.",
        "If the key is absent, the function gives back None.",
    ),
    ("Backups run every six hours.", "A backup is taken every 6 hours."),
    (
        "The team decided to drop support for Windows 7.",
        "Support for Windows 7 will be dropped, the team decided.",
    ),
]
DIFFERENT = [
    ("The cat is sleeping on the sofa.", "The cat is eating in the kitchen."),
    (
        "The deployment failed because the disk was full.",
        "The deployment was scheduled for Friday evening.",
    ),
    ("Alice is the owner of the billing service.", "Alice is on vacation until Monday."),
    ("Use UTC for every timestamp in the database.", "The database is backed up every night."),
    ("The build takes about ten minutes.", "The build fails on ARM machines."),
    (
        "Tests must pass before a pull request is merged.",
        "Pull requests need two approving reviews.",
    ),
    ("The user prefers dark mode.", "The user prefers email over phone calls."),
    ("The meeting was moved to Thursday.", "The meeting notes were shared with the team."),
    ("Python 3.11 is required.", "Python 2 is no longer supported."),
    ("The login page is slow on mobile.", "The login page has a broken link on desktop."),
    ("Bob fixed the memory leak in the parser.", "Bob wrote the parser's documentation."),
    ("The project uses PostgreSQL as its main database.", "The project uses Redis for caching."),
    ("Logs are kept for thirty days.", "Logs are written in JSON format."),
    ("Backups run every six hours.", "Backups are stored in another region."),
    ("The invoice is due at the end of the month.", "The invoice was sent to the wrong address."),
    ("She bought a new car yesterday.", "She sold her old bicycle last week."),
]
UNRELATED = [
    ("The cat is sleeping on the sofa.", "Quarterly revenue grew by eight percent."),
    ("The deployment failed because the disk was full.", "She plays the violin beautifully."),
    ("She bought a new car yesterday.", "Photosynthesis turns light into chemical energy."),
    ("How do I reset my password?", "The river flooded the valley in spring."),
    ("The API server listens on port 8080.", "My grandmother bakes bread on Sundays."),
    ("Alice is the owner of the billing service.", "Volcanoes form where tectonic plates meet."),
    ("Use UTC for every timestamp in the database.", "The striker scored twice in the final."),
    ("The build takes about ten minutes.", "Tulips bloom early in the spring."),
    ("Tests must pass before a pull request is merged.", "The museum opens at nine on weekdays."),
    ("The user prefers dark mode.", "Penguins cannot fly but swim very well."),
    ("The meeting was moved to Thursday.", "Saturn has dozens of known moons."),
    ("Python 3.11 is required.", "He ordered a coffee with oat milk."),
    ("The login page is slow on mobile.", "The novel is set in nineteenth-century Paris."),
    ("Logs are kept for thirty days.", "The recipe needs two cups of flour."),
    ("Backups run every six hours.", "The children built a sandcastle at the beach."),
    ("The dog barked all night.", "Interest rates were raised by a quarter point."),
]


def test_bge_m3_is_the_default_with_xlmr_settings() -> None:
    assert DEFAULT_MODEL == "bge-m3" == load_config().get("embedder.model")
    assert catalog_entry("bge-m3") is BGE_M3
    assert (BGE_M3.pad_id, BGE_M3.pad_token, BGE_M3.token_type_ids) == (1, "<pad>", False)
    assert (BGE_M3.pooling, BGE_M3.dim, BGE_M3.max_length) == ("cls", 1024, 8192)
    assert BGE_M3.output == "dense_vecs" and BGE_M3.merge_threshold == 0.85
    # A dynamic-int8 export (MatMulInteger), the tokenizer from BAAI's own repository.
    assert BGE_M3.quantization == "int8-dynamic"
    repos = {f.local: f.repo for f in BGE_M3.files}
    assert repos == {
        "model_quantized.onnx": "gpahal/bge-m3-onnx-int8",
        "tokenizer.json": "BAAI/bge-m3",
    }


def test_minilm_settings() -> None:
    assert (MINILM.pooling, MINILM.dim, MINILM.max_length) == ("mean", 384, 256)
    assert (MINILM.pad_id, MINILM.pad_token, MINILM.token_type_ids) == (0, "[PAD]", True)
    assert MINILM.output == "last_hidden_state"


@pytest.mark.parametrize("entry", list(CATALOG.values()), ids=list(CATALOG))
def test_every_entry_is_pinned_and_complete(entry: object) -> None:
    from lambo_core.embed.catalog import CatalogModel

    assert isinstance(entry, CatalogModel)
    locals_ = [f.local for f in entry.files]
    assert entry.model_file in locals_ and entry.tokenizer_file in locals_
    if entry.vision is not None:  # a two-tower model fetches its vision graph and its config
        assert {entry.vision.model_file, entry.vision.preprocessor_file} <= set(locals_)
    assert len(set(locals_)) == len(locals_)
    for f in entry.files:
        assert re.fullmatch(r"[0-9a-f]{40}", f.revision), "pin a commit, not a branch"
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", f.repo)
        assert plain_name(f.local) and plain_name(f.path)
    assert 0.0 < entry.merge_threshold < 1.0
    assert entry.quantization in ("int8-dynamic", "int8-weight-only", "float")


@pytest.fixture(scope="module")
def minilm(tmp_path_factory: pytest.TempPathFactory) -> OnnxEmbedder:
    root = tmp_path_factory.mktemp("calibration")
    path = import_model(minilm_source_dir(root / "src"), "minilm", root / "models", "mean")
    return OnnxEmbedder(path, threads=2)


def _scores(embedder: OnnxEmbedder, pairs: list[tuple[str, str]]) -> list[float]:
    left = embedder.embed([a for a, _ in pairs])
    right = embedder.embed([b for _, b in pairs])
    return [float(x) for x in np.einsum("ij,ij->i", left, right)]


def test_minilm_merge_threshold_is_the_calibrated_midpoint(minilm: OnnxEmbedder) -> None:
    """How MINILM.merge_threshold was chosen, re-run: restatements of one fact must merge,
    different facts on the same topic and unrelated texts must not."""
    restated = _scores(minilm, RESTATEMENTS)
    different = _scores(minilm, DIFFERENT)
    unrelated = _scores(minilm, UNRELATED)
    assert len(RESTATEMENTS) == 24 and len(DIFFERENT) == 16 and len(UNRELATED) == 16
    threshold = MINILM.merge_threshold
    assert min(restated) >= threshold > max(different) > max(unrelated)
    midpoint = (min(restated) + max(different)) / 2
    assert abs(midpoint - threshold) < 0.01
    assert min(restated) == pytest.approx(0.7500, abs=0.005)
    assert max(different) == pytest.approx(0.7030, abs=0.005)


def test_the_pypi_minilm_is_weight_only(tmp_path: Path) -> None:
    from lambo_core.embed.graph_scan import scan_onnx
    from tests.embed_fixtures import minilm_files

    scan = scan_onnx(minilm_files()[0])
    assert scan.quantization == "int8-weight-only"
    assert scan.op_types["MatMul"] > 0 and scan.op_types["MatMulInteger"] == 0
    assert scan.external_data == frozenset()
