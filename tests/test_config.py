"""Config discovery, precedence, refusals of unknown keys, and the default file."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from lambo_core.config import load_config, render_default_file, render_show
from lambo_core.config_schema import KEYS, SECTIONS
from lambo_core.errors import ConfigError
from lambo_core.paths import resolve_paths, socket_dir


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_when_no_file(tmp_path: Path) -> None:
    cfg = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    assert cfg.file is None
    assert cfg.get("store.kind") == "sqlite"
    assert cfg.get("recall.top_k") == 5
    assert cfg.get("recall.max_tokens") == 500
    assert cfg.get("recall.traversal_depth") == 2
    assert cfg.source("store.kind") == "default"
    assert cfg.store_path == tmp_path / "data" / "lambo.db"


def test_lambo_home_moves_every_dir(tmp_path: Path) -> None:
    paths = resolve_paths({"LAMBO_HOME": str(tmp_path)})
    for d in (paths.data_dir, paths.cache_dir, paths.runtime_dir, paths.config_dir):
        assert tmp_path in d.parents


def test_socket_dir_rule_ignores_tmpdir() -> None:
    assert socket_dir({"XDG_RUNTIME_DIR": "/run/user/7", "TMPDIR": "/x"}) == Path(
        "/run/user/7/lambo"
    )
    fallback = socket_dir({"TMPDIR": "/x"})
    assert str(fallback).startswith("/tmp/lambo-")


def test_discovery_order(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"LAMBO_HOME": str(home)}
    user = write(home / "config" / "lambo.toml", "[recall]\ntop_k = 7\n")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    assert load_config(env=env, cwd=cwd).file == user

    local = write(cwd / "lambo.toml", "[recall]\ntop_k = 8\n")
    assert load_config(env=env, cwd=cwd).file == local

    named = write(tmp_path / "named.toml", "[recall]\ntop_k = 9\n")
    cfg = load_config(env={**env, "LAMBO_CONFIG": str(named)}, cwd=cwd)
    assert cfg.file == named
    assert cfg.get("recall.top_k") == 9

    flagged = write(tmp_path / "flag.toml", "[recall]\ntop_k = 10\n")
    cfg = load_config(config_path=str(flagged), env={**env, "LAMBO_CONFIG": str(named)}, cwd=cwd)
    assert cfg.file == flagged
    assert cfg.get("recall.top_k") == 10
    assert cfg.source("recall.top_k") == f"file {flagged}"


def test_named_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--config"):
        load_config(config_path=str(tmp_path / "nope.toml"), env={}, cwd=tmp_path)
    with pytest.raises(ConfigError, match="LAMBO_CONFIG"):
        load_config(env={"LAMBO_CONFIG": str(tmp_path / "nope.toml")}, cwd=tmp_path)


def test_env_beats_file_and_flag_beats_env(tmp_path: Path) -> None:
    f = write(tmp_path / "lambo.toml", '[store]\nkind = "memory"\n[embedder]\ndim = 384\n')
    env = {"LAMBO_HOME": str(tmp_path), "LAMBO_STORE": "sqlite", "LAMBO_EMBED_DIM": "1024"}
    cfg = load_config(env=env, cwd=tmp_path)
    assert cfg.file == f
    assert cfg.get("store.kind") == "sqlite"
    assert cfg.source("store.kind") == "env LAMBO_STORE"
    assert cfg.get("embedder.dim") == 1024

    cfg = load_config(env=env, cwd=tmp_path, flags={"store.kind": "memory"})
    assert cfg.get("store.kind") == "memory"
    assert cfg.source("store.kind") == "flag --store"


def test_every_documented_variable_is_wired(tmp_path: Path) -> None:
    env = {
        "LAMBO_HOME": str(tmp_path),
        "LAMBO_STORE": "memory",
        "LAMBO_SQLITE_PATH": str(tmp_path / "x.db"),
        "LAMBO_EMBEDDER": "none",
        "LAMBO_EMBED_DIM": "384",
        "LAMBO_EMBEDDER_MODEL": "minilm",
        "LAMBO_PROMOTION_POLICY": "solo",
    }
    cfg = load_config(env=env, cwd=tmp_path)
    assert cfg.get("store.kind") == "memory"
    assert cfg.store_path == tmp_path / "x.db"
    assert cfg.get("embedder.kind") == "none"
    assert cfg.get("embedder.dim") == 384
    assert cfg.get("embedder.model") == "minilm"
    assert cfg.get("canonization.promotion_policy") == "solo"


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[stroe]\nkind = 'memory'\n", "unknown section [stroe]"),
        ("[store]\nknd = 'memory'\n", "unknown key store.knd"),
        ("[recall]\ntop_k = 0\n", "recall.top_k"),
        ("[recall]\ntop_k = 101\n", "at most 100"),
        ("[recall]\ntop_k = 'five'\n", "must be an integer"),
        ("[recall]\ntop_k = true\n", "must be an integer"),
        ("[store]\nkind = 'mysql'\n", "must be one of sqlite, memory, postgres, cockroach"),
        ("[selection]\nskip_redundant = 'yes please'\n", "true or false"),
        ("store = 3\n", "must be a table"),
        ("[store\n", "not valid TOML"),
    ],
)
def test_bad_files_are_refused_by_name(tmp_path: Path, text: str, needle: str) -> None:
    write(tmp_path / "lambo.toml", text)
    with pytest.raises(ConfigError) as info:
        load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    assert needle in info.value.render()


def test_bad_env_value_names_the_variable_not_the_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(env={"LAMBO_STORE": "\x1b[31mevil"}, cwd=tmp_path)
    text = info.value.render()
    assert "LAMBO_STORE" in text
    assert "\x1b" not in text and "evil" not in text


def test_default_file_round_trips_and_covers_every_key(tmp_path: Path) -> None:
    text = render_default_file()
    data = tomllib.loads(text)
    assert set(data) == set(SECTIONS)
    for key in KEYS:
        assert f"# {key.doc}" in text
        if key.secret:  # never written into the file, only pointed at
            assert key.name not in data[key.section]
            assert f"# {key.name}: set {key.env}, never here" in text
            continue
        if key.parse is not None:  # an array of tables: a commented example, read as absent
            assert key.name not in data[key.section]
            assert f"# [[{key.dotted}]]" in text
            continue
        written = data[key.section][key.name]
        assert (tuple(written) if isinstance(key.default, tuple) else written) == key.default
    write(tmp_path / "lambo.toml", text)
    cfg = load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    assert all(cfg.get(k.dotted) == k.default for k in KEYS)


def test_show_lists_every_value_with_its_source(tmp_path: Path) -> None:
    write(tmp_path / "lambo.toml", "[recall]\ntop_k = 9\n")
    cfg = load_config(env={"LAMBO_HOME": str(tmp_path), "LAMBO_AUTH_TOKEN": "s3cret"}, cwd=tmp_path)
    shown = render_show(cfg)
    for key in KEYS:
        assert f"\n{key.name} = " in shown
    assert "top_k = 9  # file" in shown
    assert "s3cret" not in shown  # a secret is reported as set, never printed
    assert "auth_token = (set)  # env LAMBO_AUTH_TOKEN" in shown


def test_a_token_in_lambo_toml_is_refused_without_echo(tmp_path: Path) -> None:
    write(tmp_path / "lambo.toml", '[serve]\nauth_token = "a-token-of-thirty-two-characters"\n')
    with pytest.raises(ConfigError) as info:
        load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    text = info.value.render()
    assert "serve.auth_token in lambo.toml: a token never goes in lambo.toml" in text
    assert "LAMBO_AUTH_TOKEN" in text and "[[serve.credential]]" in text
    assert "thirty-two" not in text
