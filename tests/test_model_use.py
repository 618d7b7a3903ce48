"""`lambo model use NAME`: writes [embedder] model into the lambo.toml in effect, keeping the
file's other content and comments (or saying they are gone), refuses an unknown or broken
model listing the installed ones, and warns about sessions stamped with another contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambo_core.cli.main import cli
from lambo_core.cli.model import model_group
from lambo_core.config import load_config
from lambo_core.config_write import set_string
from lambo_core.embed.importer import import_model
from lambo_core.embed.manifest import MANIFEST_NAME
from lambo_core.errors import ConfigError
from lambo_core.store import SqliteStore
from tests.embed_fixtures import minilm_source_dir


def _invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(model_group, list(args), catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def installed(tmp_path: Path, lambo_home: Path) -> Path:
    """MiniLM imported as `mini` into this test's LAMBO_HOME; the models dir."""
    models = load_config().paths.models_dir
    import_model(minilm_source_dir(tmp_path / "src"), "mini", models, "mean")
    return models


COMMENTED = """\
# my lambo settings
[store]
path = "work.db"  # the team's store

[embedder]
# the model: was the default
model = "bge-m3"   # change with `lambo model use`
threads = 1

[recall]
top_k = 7
"""


def test_use_edits_the_line_and_keeps_everything_else(installed: Path, lambo_home: Path) -> None:
    user_file = load_config().paths.user_config_file
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text(COMMENTED)
    code, out, err = _invoke("use", "mini")
    assert code == 0, err
    assert out == f'embedder.model = "mini" written to {user_file}\n'
    assert err == ""  # no session, nothing overriding: nothing to warn about
    assert user_file.read_text() == COMMENTED.replace('model = "bge-m3"', 'model = "mini"')
    config = load_config()
    assert config.get("embedder.model") == "mini"
    assert config.get("recall.top_k") == 7 and config.get("embedder.threads") == 1

    code, out, _ = _invoke("verify")  # no name: the default, now mini
    assert code == 0
    assert 'contract:     {"kind": "onnx", "model": "mini", "dim": 384}' in out


def test_the_file_in_effect_is_the_one_written(
    installed: Path, tmp_path: Path, lambo_home: Path
) -> None:
    local = tmp_path / "lambo.toml"  # ./lambo.toml wins over the user file
    local.write_text("[recall]\ntop_k = 3\n")
    code, out, err = _invoke("use", "mini")
    assert code == 0, err
    assert out == f'embedder.model = "mini" written to {local}\n'
    assert local.read_text() == '[recall]\ntop_k = 3\n\n[embedder]\nmodel = "mini"\n'
    assert not load_config().paths.user_config_file.exists()


def test_a_table_lambo_cannot_edit_in_place_keeps_every_key(
    installed: Path, tmp_path: Path
) -> None:
    local = tmp_path / "lambo.toml"
    local.write_text('# inline\nembedder = { model = "bge-m3", threads = 1 }\n')
    code, _, err = _invoke("use", "mini")
    assert code == 0
    assert "was rewritten whole" in err and "every key is kept, its comments are not" in err
    assert tomllib.loads(local.read_text()) == {"embedder": {"model": "mini", "threads": 1}}


@pytest.mark.parametrize(
    ("before", "after"),
    [
        ("", '[embedder]\nmodel = "m"\n'),
        ("[embedder]\nthreads = 2\n", '[embedder]\nmodel = "m"\nthreads = 2\n'),
        ("[embedder]\r\nmodel = 'x' # c\r\n", '[embedder]\r\nmodel = "m" # c\r\n'),
        ('[store]\nkind = "memory"', '[store]\nkind = "memory"\n\n[embedder]\nmodel = "m"\n'),
        ('[embedder]\n"model" = "x"\n', '[embedder]\n"model" = "m"\n'),
    ],
)
def test_set_string_in_place(tmp_path: Path, before: str, after: str) -> None:
    path = tmp_path / "l.toml"
    path.write_bytes(before.encode())
    written = set_string(path, "embedder", "model", "m")
    assert written.comments_kept
    assert path.read_bytes().decode() == after


def test_set_string_falls_back_and_refuses_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "l.toml"
    path.write_text('[embedder]\nmodel = """\nx"""\n# c\n')  # a multi-line string
    assert not set_string(path, "embedder", "model", "m").comments_kept
    assert tomllib.loads(path.read_text()) == {"embedder": {"model": "m"}}
    path.write_text("[embedder\n")
    with pytest.raises(Exception, match="is not valid TOML") as caught:
        set_string(path, "embedder", "model", "m")
    assert "nothing was written" in str(caught.value)
    assert path.read_text() == "[embedder\n"


def test_a_symlinked_file_keeps_its_link_and_its_target_is_written(tmp_path: Path) -> None:
    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    real = dotfiles / "lambo.toml"
    real.write_text(COMMENTED)
    real.chmod(0o600)
    home = tmp_path / "home"
    home.mkdir()
    link = home / "lambo.toml"
    link.symlink_to("../dotfiles/lambo.toml")  # relative, as dotfile managers make them
    written = set_string(link, "embedder", "model", "m")
    assert written.comments_kept and not written.created and written.path == link
    assert link.is_symlink() and os.readlink(link) == "../dotfiles/lambo.toml"
    assert real.read_text() == COMMENTED.replace('model = "bge-m3"', 'model = "m"')
    assert real.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in home.iterdir()) == ["lambo.toml"]
    assert sorted(p.name for p in dotfiles.iterdir()) == ["lambo.toml"]
    loop = home / "loop.toml"
    loop.symlink_to("loop.toml")
    with pytest.raises(ConfigError, match=r"loop\.toml is a symlink loop; nothing was changed$"):
        set_string(loop, "embedder", "model", "m")
    assert loop.is_symlink() and os.readlink(loop) == "loop.toml"


def test_an_unwritable_place_is_refused_naming_the_file(installed: Path, lambo_home: Path) -> None:
    # root ignores modes: a regular file where the config directory should be fails for anyone
    user_file = load_config().paths.user_config_file
    user_file.parent.parent.mkdir(parents=True, exist_ok=True)
    user_file.parent.write_text("not a directory")
    result = CliRunner().invoke(model_group, ["use", "mini"])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert result.stderr == (
        f"lambo: configuration error: {user_file} could not be written (File exists); "
        "nothing was changed\n"
    )
    assert user_file.parent.read_text() == "not a directory"


def test_an_immutable_file_named_by_config_is_refused(installed: Path, tmp_path: Path) -> None:
    # the reviewer's case: `lambo --config F model use` with F chattr +i; the directory is
    # writable, so the temp file is made and os.replace is what fails
    path = tmp_path / "conf" / "lambo.toml"
    path.parent.mkdir()
    path.write_text(COMMENTED)
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, check=False)
    if made.returncode != 0:
        pytest.skip("chattr +i is not available here (needs ext4-like fs and CAP_LINUX_IMMUTABLE)")
    try:
        result = CliRunner().invoke(cli, ["--config", str(path), "model", "use", "mini"])
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)
    assert result.exit_code == 2, result.output
    assert result.stderr == (
        f"lambo: configuration error: {path} could not be written (Operation not permitted); "
        "nothing was changed\n"
    )
    assert path.read_text() == COMMENTED
    assert sorted(p.name for p in path.parent.iterdir()) == ["lambo.toml"]


_FULL_DISK = """
import resource, signal, sys
from pathlib import Path
from lambo_core.config_write import set_string
from lambo_core.errors import ConfigError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (16, 16))
try:
    set_string(Path(sys.argv[1]), "embedder", "model", "a-model-name-long-enough")
except ConfigError as exc:
    print(exc.message)
"""


def test_a_failed_write_leaves_the_file_and_no_temp_file(tmp_path: Path) -> None:
    # a real process whose file size limit makes the temp file's write fail, as a full disk does
    path = tmp_path / "lambo.toml"
    path.write_text("[embedder]\n")
    done = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(path)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    assert done.stdout == f"{path} could not be written (File too large); nothing was changed\n"
    assert path.read_text() == "[embedder]\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lambo.toml"]


def test_unknown_and_broken_models_are_refused(installed: Path, lambo_home: Path) -> None:
    code, _, err = _invoke("use", "nosuch")
    assert code == 2
    assert err.startswith(
        "lambo: configuration error: no installed model is called nosuch (installed: mini); "
    )
    code, _, err = _invoke("use", "Bad Name\x1b")
    assert code == 2 and "NAME must be 1 to 64 lowercase" in err and "\x1b" not in err
    (installed / "mini" / MANIFEST_NAME).write_text("{}")
    code, _, err = _invoke("use", "mini")
    assert code == 2
    assert err.startswith("lambo: configuration error: installed model mini is broken (")
    assert "(usable: none)" in err
    assert not load_config().paths.user_config_file.exists()  # nothing written


def test_a_model_missing_a_file_is_refused(installed: Path) -> None:
    (installed / "mini" / "tokenizer.json").unlink()
    code, _, err = _invoke("use", "mini")
    assert code == 2
    assert "installed model mini is broken: its file tokenizer.json is missing" in err


def test_warns_about_sessions_of_another_contract_and_overrides(
    installed: Path, lambo_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config()
    config.store_path.parent.mkdir(parents=True, exist_ok=True)
    store = SqliteStore(config.store_path)
    stamps: list[tuple[str, dict[str, Any] | None]] = [
        ("old-a", {"kind": "onnx", "model": None, "dim": 1024}),
        ("old-b", {"kind": "onnx", "model": None, "dim": 1024}),
        ("same", {"kind": "onnx", "model": "mini", "dim": 384}),
        ("fresh", None),
    ]
    for name, contract in stamps:
        store.ensure_session(name, 0.0)
        if contract:
            store.stamp_contract(name, contract)
    store.close()
    monkeypatch.setenv("LAMBO_EMBEDDER_MODEL", "bge-m3")
    code, _, err = _invoke("use", "mini")
    assert code == 0
    warnings = [line for line in err.splitlines() if line.startswith("lambo: warning: ")]
    assert warnings == [
        "lambo: warning: LAMBO_EMBEDDER_MODEL is set and overrides the file: this shell "
        "still uses bge-m3; unset it to use mini",
        "lambo: warning: session(s) old-a, old-b were written with embedding contract "
        "{kind: onnx, model: null, dim: 1024}, not this model's {kind: onnx, model: mini, "
        "dim: 384}: `lambo serve` refuses to open them (vectors of different models cannot be "
        "compared) unless started with --allow-embedding-mismatch, which relabels such a "
        "session to the new contract",
    ]
    monkeypatch.delenv("LAMBO_EMBEDDER_MODEL")
    assert load_config().get("embedder.model") == "mini"
    # the contracts in the store are only read
    store = SqliteStore(config.store_path)
    record = store.get_session("old-a")
    store.close()
    assert record is not None and json.dumps(record.embedding_contract) == (
        '{"kind": "onnx", "model": null, "dim": 1024}'
    )
