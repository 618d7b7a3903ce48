"""`lambo model pull` against a local HTTP server that serves a fixture hub repository.

The real download code runs: the hub listing, the resolve redirect, Range
resumes, size and checksum checks, the atomic install, the progress bar.
"""

from __future__ import annotations

import hashlib
import io
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from lambo_core.cli.model import model_group
from lambo_core.config import load_config
from lambo_core.embed import catalog as catalog_module
from lambo_core.embed.catalog import BGE_M3, CatalogFile, CatalogModel
from lambo_core.embed.download import ModelFetchError, pull_model
from lambo_core.embed.installed import list_models
from lambo_core.embed.loader import LoadedModels
from lambo_core.embed.manifest import MANIFEST_NAME, ModelManifest
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.embed.progress import Progress
from lambo_core.embed.verify import verify_model
from lambo_core.errors import ConfigError, DownloadError, ErrorKind, ParameterError
from tests.embed_fixtures import FakeHub, HubFile, minilm_source_dir, tiny_bge_m3, unit

COMMIT = "0123456789abcdef0123456789abcdef01234567"
TOK_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture
def hub() -> Iterator[FakeHub]:
    server = FakeHub()
    yield server
    server.stop()


def _tiny_files(tmp_path: Path, hidden: int = 8) -> tuple[bytes, bytes]:
    tiny = tiny_bge_m3(tmp_path / "tiny-src", layout="dense", hidden=hidden)
    return (tiny.dir / "model.onnx").read_bytes(), (tiny.dir / "tokenizer.json").read_bytes()


def _entry(name: str = "tiny", tokenizer_repo: str = "acme/tok") -> CatalogModel:
    """A catalog entry like bge-m3's: model and tokenizer from two repositories."""
    return CatalogModel(
        name=name,
        summary="tiny test model",
        files=(
            CatalogFile("acme/tiny-onnx", COMMIT, "onnx/model_quantized.onnx", "model.onnx"),
            CatalogFile(tokenizer_repo, TOK_COMMIT, "tokenizer.json", "tokenizer.json"),
        ),
        model_file="model.onnx",
        pooling="cls",
        output="dense_vecs",
        dim=8,
        max_length=64,
        token_type_ids=False,
        pad_id=1,
        pad_token="<pad>",
        merge_threshold=0.8,
        quantization="float",
        license="MIT",
    )


@pytest.fixture
def served(hub: FakeHub, tmp_path: Path) -> tuple[str, dict[str, CatalogModel], bytes]:
    model, tokenizer = _tiny_files(tmp_path)
    hub.add("acme/tiny-onnx", COMMIT, {"onnx/model_quantized.onnx": model, "README.md": b"hi"})
    hub.add("acme/tok", TOK_COMMIT, {"tokenizer.json": HubFile(tokenizer, lfs=False)})
    return hub.start(), {"tiny": _entry()}, model


def test_pull_installs_a_verified_model_that_embeds(
    served: tuple[str, dict[str, CatalogModel], bytes], tmp_path: Path
) -> None:
    base, catalog, model = served
    models = tmp_path / "models"
    path = pull_model("tiny", models, base, progress=False, catalog=catalog)
    assert path == models / "tiny"
    manifest = ModelManifest.read(path)
    assert manifest.files["model.onnx"].sha256 == hashlib.sha256(model).hexdigest()
    assert manifest.source["kind"] == "catalog"
    assert [f["commit"] for f in manifest.source["files"]] == [COMMIT, TOK_COMMIT]
    # The tokenizer is a plain git file: verified by its git blob sha1.
    assert manifest.source["files"][1]["sha256"] is None
    assert manifest.source["files"][1]["git_sha1"]
    assert sorted(p.name for p in models.iterdir() if not p.name.startswith(".lock")) == ["tiny"]
    vectors = OnnxEmbedder(path, threads=1).embed(["the cat", "blue sea"])
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_a_cut_transfer_resumes_with_range(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, model = served
    models = tmp_path / "models"
    hub.cut_once.add("onnx/model_quantized.onnx")
    with pytest.raises(ModelFetchError) as caught:
        pull_model("tiny", models, base, progress=False, catalog=catalog, retries=0)
    assert "stopped at 50%" in caught.value.message
    assert "run `lambo model pull tiny` again to resume" in caught.value.message
    assert not (models / "tiny").exists()  # nothing installed
    (part,) = (models / ".pull-tiny").glob("*.part")
    have = part.stat().st_size
    assert have == len(model) // 2
    hub.requests.clear()
    pull_model("tiny", models, base, progress=False, catalog=catalog, retries=0)
    model_gets = [r for r in hub.file_gets() if "model_quantized" in r[0]]
    assert model_gets == [(model_gets[0][0], f"bytes={have}-")]  # one request, from the offset
    assert (models / "tiny" / "model.onnx").read_bytes() == model
    assert not (models / ".pull-tiny").exists()


def test_a_cut_is_retried_within_one_pull(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, model = served
    hub.cut_once.add("onnx/model_quantized.onnx")
    err = io.StringIO()
    pull_model("tiny", tmp_path / "m", base, catalog=catalog, retry_wait=0, stream=err)
    ranges = [r for _, r in hub.file_gets() if r]
    assert ranges == [f"bytes={len(model) // 2}-"]
    assert "model.onnx: the server closed the transfer early at 50%; resuming" in err.getvalue()
    assert (tmp_path / "m" / "tiny" / "model.onnx").read_bytes() == model


def test_a_checksum_mismatch_installs_nothing_and_says_why(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, _ = served
    models = tmp_path / "models"
    hub.corrupt.add("onnx/model_quantized.onnx")
    with pytest.raises(ModelFetchError) as caught:
        pull_model("tiny", models, base, progress=False, catalog=catalog)
    assert isinstance(caught.value, DownloadError)
    assert caught.value.kind is ErrorKind.DOWNLOAD
    text = caught.value.render()
    assert text.startswith(
        "download error: model.onnx (acme/tiny-onnx/onnx/model_quantized.onnx): checksum "
        "mismatch, its sha256 is "
    )
    assert "the download was deleted and nothing was installed" in text
    # the next step: again, then suspect what sits between here and the hub, or go offline
    assert "run `lambo model pull tiny` again; if it fails the same way" in text
    assert "`[embedder] hub_url`" in text
    assert "`lambo model import DIR --name tiny`" in text
    assert "store error" not in text
    assert str(tmp_path) not in text and ".part" not in text
    assert not (models / "tiny").exists()
    assert not list((models / ".pull-tiny").glob("*.part"))  # the bad bytes are gone


def test_a_corrupt_git_file_is_caught_by_its_blob_sha1(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, _ = served
    hub.corrupt.add("tokenizer.json")
    with pytest.raises(ModelFetchError, match="its git blob sha1 is"):
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog)
    assert not (tmp_path / "m" / "tiny").exists()


def test_a_failed_update_leaves_the_installed_model_alone(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, model = served
    models = tmp_path / "models"
    pull_model("tiny", models, base, progress=False, catalog=catalog)
    before = (models / "tiny" / MANIFEST_NAME).read_text()
    hub.corrupt.add("onnx/model_quantized.onnx")
    with pytest.raises(ModelFetchError):
        pull_model("tiny", models, base, progress=False, catalog=catalog, force=True)
    assert (models / "tiny" / MANIFEST_NAME).read_text() == before
    assert (models / "tiny" / "model.onnx").read_bytes() == model


def test_a_size_the_hub_does_not_list_is_refused(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, model = served
    hub.lie_size["onnx/model_quantized.onnx"] = len(model) - 10
    with pytest.raises(ModelFetchError, match=f"lists {len(model) - 10}"):
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog, retries=0)
    assert not (tmp_path / "m" / "tiny").exists()


def test_an_installed_current_model_is_not_downloaded_again(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, _ = served
    pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog)
    hub.requests.clear()
    err = io.StringIO()
    pull_model("tiny", tmp_path / "m", base, catalog=catalog, stream=err)
    assert hub.file_gets() == []
    assert "already installed" in err.getvalue()
    pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog, force=True)
    assert len(hub.file_gets()) == 2


def test_the_progress_bar_renders_without_a_terminal(
    served: tuple[str, dict[str, CatalogModel], bytes], tmp_path: Path
) -> None:
    base, catalog, _ = served
    err = io.StringIO()
    pull_model("tiny", tmp_path / "m", base, catalog=catalog, stream=err)
    lines = [line for line in err.getvalue().splitlines() if line.startswith("model.onnx:")]
    assert lines[0].startswith("model.onnx:   0%") and lines[-1].startswith("model.onnx: 100%")
    assert all(re.fullmatch(r"model\.onnx: +\d+% \(.+ of .+\)", line) for line in lines)
    assert "\r" not in err.getvalue()


def test_the_progress_bar_redraws_on_a_terminal() -> None:
    err = io.StringIO()
    bar = Progress("model.onnx", 2_000_000, err, tty=True)
    bar.begin(0)
    bar.update(1_000_000, force=True)
    bar.update(2_000_000)
    bar.finish()
    text = err.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n")
    assert "[###############...............]  50% 1.0 MB/2.0 MB" in text
    assert "100% 2.0 MB/2.0 MB" in text


def test_hub_errors_are_clear(
    served: tuple[str, dict[str, CatalogModel], bytes], tmp_path: Path
) -> None:
    """A hub that answers but does not hold the model, a model name not in the catalog, a
    hub URL that is not one: the settings are wrong, which is a configuration error."""
    base, catalog, _ = served
    missing = {"tiny": _entry(tokenizer_repo="acme/nope")}
    with pytest.raises(ConfigError, match=r"has no model acme/nope at revision .* 404") as wrong:
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog=missing)
    text = wrong.value.render()
    assert text.startswith(f"configuration error: the hub at {base} has no model acme/nope")
    assert "check that `[embedder] hub_url` (LAMBO_HUB_URL) names a Hugging Face hub" in text
    assert "`lambo model import DIR --name tiny`" in text
    with pytest.raises(ParameterError, match="no catalog model is called nosuch"):
        pull_model("nosuch", tmp_path / "m", base, progress=False, catalog=catalog)
    with pytest.raises(ConfigError, match=r"embedder\.hub_url must start with http"):
        pull_model("tiny", tmp_path / "m", "ftp://example.org", catalog=catalog)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_hub_is_a_download_error_naming_the_next_step(
    served: tuple[str, dict[str, CatalogModel], bytes], tmp_path: Path
) -> None:
    _, catalog, _ = served
    port = _closed_port()
    with pytest.raises(ModelFetchError) as caught:
        pull_model("tiny", tmp_path / "m", f"http://127.0.0.1:{port}", catalog=catalog)
    err = caught.value
    assert isinstance(err, DownloadError) and err.kind is ErrorKind.DOWNLOAD
    text = err.render()
    assert text == (
        f"download error: could not reach the hub at http://127.0.0.1:{port} (connection "
        "refused), so nothing was downloaded; check the network and `[embedder] hub_url` "
        "(LAMBO_HUB_URL), then run `lambo model pull tiny` again, or install a local copy "
        "offline with `lambo model import DIR --name tiny`"
    )
    assert "Errno" not in text
    assert "ConnectionRefusedError" in (err.detail or "")  # logged, not shown
    assert not (tmp_path / "m" / "tiny").exists()
    # a password in the URL is never echoed
    with pytest.raises(ModelFetchError) as caught:
        pull_model("tiny", tmp_path / "m", f"http://me:s3cret@127.0.0.1:{port}", catalog=catalog)
    assert caught.value.render().startswith("download error: could not reach the hub at http")
    assert "s3cret" not in caught.value.render()


def test_an_http_error_status_is_a_download_error(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, _ = served
    # the listing
    hub.status["/api/models/acme/tok/"] = 502
    with pytest.raises(ModelFetchError) as caught:
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog)
    assert caught.value.kind is ErrorKind.DOWNLOAD
    assert caught.value.render().startswith(
        f"download error: the hub at {base} answered HTTP 502 to the listing of acme/tok, so "
        "nothing was downloaded; check the network and `[embedder] hub_url`"
    )
    # a file
    hub.status.clear()
    hub.status["/cdn/acme/tiny-onnx/"] = 503
    with pytest.raises(ModelFetchError) as caught:
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog)
    text = caught.value.render()
    assert text.startswith(
        "download error: the download of model.onnx (acme/tiny-onnx/onnx/model_quantized.onnx) "
        "failed: the hub answered HTTP 503, and nothing was installed; check the network"
    )
    assert "then run `lambo model pull tiny` again" in text
    assert "`lambo model import DIR --name tiny`" in text
    assert "injected" not in text  # the body the hub sent is never echoed
    assert not (tmp_path / "m" / "tiny").exists()


def test_a_listing_that_is_not_a_hub_listing_is_a_configuration_error(
    hub: FakeHub, tmp_path: Path
) -> None:
    base = hub.start()  # holds no repositories: every listing is a 404
    hub.status["/api/models/"] = 200  # ... answered 200 with a body that is no listing
    with pytest.raises(ConfigError) as caught:
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog={"tiny": _entry()})
    text = caught.value.render()
    assert text.startswith(f"configuration error: the hub at {base} answered the listing of ")
    assert "without its list of files" in text and "`[embedder] hub_url`" in text


def test_a_graph_needing_unfetched_weights_installs_nothing(hub: FakeHub, tmp_path: Path) -> None:
    tiny = tiny_bge_m3(tmp_path / "src", layout="dense", external_data="model.onnx_data")
    hub.add(
        "acme/tiny-onnx",
        COMMIT,
        {"onnx/model_quantized.onnx": (tiny.dir / "model.onnx").read_bytes()},
    )
    hub.add("acme/tok", TOK_COMMIT, {"tokenizer.json": (tiny.dir / "tokenizer.json").read_bytes()})
    base = hub.start()
    with pytest.raises(ModelFetchError, match=r"keeps weights in model\.onnx_data"):
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog={"tiny": _entry()})
    assert not (tmp_path / "m" / "tiny").exists()


def test_a_file_missing_from_the_listing_is_named(hub: FakeHub, tmp_path: Path) -> None:
    hub.add("acme/tiny-onnx", COMMIT, {"other.onnx": b"x"})
    hub.add("acme/tok", TOK_COMMIT, {"tokenizer.json": b"{}"})
    base = hub.start()
    with pytest.raises(ConfigError, match=r"lists no file onnx/model_quantized\.onnx"):
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog={"tiny": _entry()})


def test_the_bge_m3_catalog_entry_pulls_and_loads(
    hub: FakeHub, tmp_path: Path, lambo_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real bge-m3 entry (repos, revisions, paths, settings) against a stand-in model
    with its shapes: 1024-d dense_vecs first, no token_type_ids, pad id 1."""
    model, tokenizer = _tiny_files(tmp_path, hidden=1024)
    onnx_file, tok_file = BGE_M3.files
    hub.add(onnx_file.repo, onnx_file.revision, {onnx_file.path: model})
    hub.add(tok_file.repo, tok_file.revision, {tok_file.path: tokenizer})
    monkeypatch.setenv("LAMBO_HUB_URL", hub.start())
    config = load_config()
    pull_model("bge-m3", config.paths.models_dir, str(config.get("embedder.hub_url")), False)
    embedder = LoadedModels().load(load_config())  # the default model is bge-m3
    assert embedder.contract == {"kind": "onnx", "model": None, "dim": 1024}
    assert embedder.merge_threshold == 0.85
    assert isinstance(embedder, OnnxEmbedder)
    assert embedder.feeds == ["input_ids", "attention_mask"]
    assert embedder.output_name == "dense_vecs"
    raw = embedder.raw_output(["the cat sat"])
    np.testing.assert_allclose(embedder.embed(["the cat sat"])[0], unit(raw[0]), atol=1e-5)


# --------------------------------------------------------------------------- the commands


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(model_group, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_cli_pull_list_verify(
    served: tuple[str, dict[str, CatalogModel], bytes],
    monkeypatch: pytest.MonkeyPatch,
    lambo_home: Path,
) -> None:
    base, catalog, _ = served
    monkeypatch.setitem(catalog_module.CATALOG, "tiny", catalog["tiny"])
    monkeypatch.setenv("LAMBO_HUB_URL", base)
    code, out, err = _invoke("pull", "tiny")
    assert code == 0, err
    assert out.startswith("tiny: installed in ")
    assert "model.onnx: 100%" in err

    code, out, _ = _invoke("list")
    assert code == 0
    assert "tiny" in out and "float" in out and "catalog" in out
    assert '{"kind": "onnx", "model": "tiny", "dim": 8}  embeds text\n' in out

    code, out, _ = _invoke("verify", "tiny")
    assert code == 0
    assert 'contract:     {"kind": "onnx", "model": "tiny", "dim": 8}' in out
    assert "files:        2 checked" in out
    assert re.search(r"timing: +load [\d.]+ s, first embed [\d.]+ ms", out)


def test_cli_import_and_its_refusals(tmp_path: Path, lambo_home: Path) -> None:
    src = minilm_source_dir(tmp_path / "minilm")
    code, out, err = _invoke("import", str(src), "--name", "mini", "--pooling", "mean")
    assert code == 0, err
    assert "mini: imported (384-d, int8-weight-only, pooling mean" in out
    assert [m.name for m in list_models(load_config().paths.models_dir)] == ["mini"]

    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "model.onnx").write_bytes(b"")
    code, _, err = _invoke("import", str(tmp_path / "empty"), "--name", "x")
    assert code == 2
    assert err.strip().startswith(
        "lambo: configuration error: the directory given has no tokenizer.json"
    )

    code, _, err = _invoke("import", str(src), "--name", "Bad Name")
    assert code == 2 and "--name must be 1 to 64 lowercase" in err


def test_cli_verify_catches_a_changed_file(tmp_path: Path, lambo_home: Path) -> None:
    src = minilm_source_dir(tmp_path / "minilm")
    assert _invoke("import", str(src), "--name", "mini", "--pooling", "mean")[0] == 0
    tok = load_config().paths.models_dir / "mini" / "tokenizer.json"
    tok.write_bytes(tok.read_bytes() + b" ")  # still valid JSON, other bytes
    code, _, err = _invoke("verify", "mini")
    assert code == 2 and "tokenizer.json does not match the sha256" in err


def test_verify_reports_contract_and_timing(tmp_path: Path) -> None:
    from lambo_core.embed.importer import import_model

    models = tmp_path / "models"
    import_model(minilm_source_dir(tmp_path / "src"), "mini", models, "mean")
    report = verify_model("mini", models, threads=1)
    assert report.contract == {"kind": "onnx", "model": "mini", "dim": 384}
    assert report.files_checked == 2 and report.embed_ms > 0 and report.load_seconds > 0
    assert any("weight-only" in note for note in report.notes)


def test_the_group_reads_the_root_config_flag(tmp_path: Path, lambo_home: Path) -> None:
    """Mounted under a root group like `lambo`'s, the group honours its --config."""
    import click

    from lambo_core.cli.common import Context

    @click.group()
    @click.option("--config", "config_path")
    @click.pass_context
    def root(ctx: click.Context, config_path: str | None) -> None:
        ctx.obj = Context(config_path)

    root.add_command(model_group)
    elsewhere = tmp_path / "conf" / "other.toml"
    elsewhere.parent.mkdir()
    elsewhere.write_text('[embedder]\nmodel = "nosuch"\n')
    result = CliRunner().invoke(root, ["--config", str(elsewhere), "model", "verify"])
    assert result.exit_code == 2
    assert result.stderr.startswith('lambo: configuration error: embedder.model "nosuch" is not')
    result = CliRunner().invoke(root, ["model", "verify"])  # without it: the default, bge-m3
    assert 'no embedding model is installed for embedder.model = "bge-m3"' in result.stderr


def test_files_verified_by_a_failed_pull_are_not_fetched_again(
    served: tuple[str, dict[str, CatalogModel], bytes], hub: FakeHub, tmp_path: Path
) -> None:
    base, catalog, model = served
    hub.corrupt.add("tokenizer.json")
    with pytest.raises(ModelFetchError):
        pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog)
    assert (tmp_path / "m" / ".pull-tiny" / hashlib.sha256(model).hexdigest()).is_file()
    hub.corrupt.clear()
    hub.requests.clear()
    pull_model("tiny", tmp_path / "m", base, progress=False, catalog=catalog)
    assert [path.rsplit("/", 1)[1] for path, _ in hub.file_gets()] == ["tokenizer.json"]
    assert (tmp_path / "m" / "tiny" / "model.onnx").read_bytes() == model
