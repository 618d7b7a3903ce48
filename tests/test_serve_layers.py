"""Which layers a serve attaches: [serve] layers or --layer, checked like [serve] sessions, and
passed to each served session's ServeOptions (a served layer itself reads none)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambo_core import serve as serve_module
from lambo_core import serve_signals
from lambo_core.cli import cli
from lambo_core.cli.serve import layers_of, served_layers
from lambo_core.config import load_config, render_default_file
from lambo_core.errors import ConfigError
from lambo_core.mcp.http import serve as http_serve
from lambo_core.serve import ServeOptions


def config(tmp_path: Path, toml: str = ""):  # type: ignore[no-untyped-def]
    (tmp_path / "lambo.toml").write_text(toml)
    return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path, flags={})


def test_the_key_reads_a_list_of_names_and_defaults_to_none(tmp_path: Path) -> None:
    assert config(tmp_path).get("serve.layers") == ()
    got = config(tmp_path, '[serve]\nlayers = ["general", "team"]\n')
    assert got.get("serve.layers") == ("general", "team")
    assert got.source("serve.layers").startswith("file ")
    with pytest.raises(ConfigError) as info:
        config(tmp_path, '[serve]\nlayers = ["general", 3]\n')
    assert "serve.layers" in info.value.render()
    assert "must be a list of non-empty strings" in info.value.render()
    assert "\nlayers = []\n" in render_default_file()  # lambo config init writes it out


def test_flags_replace_the_configured_list() -> None:
    assert served_layers(("a", "b"), ("general",), ["lambo"]) == ("a", "b")
    assert served_layers((), ("general",), ["lambo"]) == ("general",)
    assert served_layers((), (), ["lambo"]) == ()


@pytest.mark.parametrize(
    ("flags", "configured", "text"),
    [
        ((), ("general", "general"), "serve.layers names the session 'general' twice"),
        (("g", "g"), (), "--layer names the session 'g' twice"),
        ((), (" ",), "serve.layers must not be empty or blank"),
        (
            ("bad\x1b[31m",),
            (),
            "--layer contains a disallowed control character (U+001B); only tab and newline "
            "are accepted, so control sequences cannot reach stored content",
        ),
        (
            ("lambo",),
            (),
            "--layer names 'lambo', the session to serve: a session cannot be its own "
            "layer; name the project session with --session and its shared sessions with "
            "--layer",
        ),
    ],
)
def test_refusals_name_the_flag_or_the_key(
    flags: tuple[str, ...], configured: tuple[str, ...], text: str
) -> None:
    with pytest.raises(ConfigError) as info:
        served_layers(flags, configured, ["lambo"])
    assert info.value.message == text
    assert info.value.render() == f"configuration error: {text}"


def test_every_served_session_named_as_a_layer_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        served_layers(("a", "b", "c"), (), ["a", "b"])
    assert info.value.message == (
        "--layer names every session to serve ('a', 'b'): a session cannot be its "
        "own layer; name the project session with --session and its shared sessions with "
        "--layer"
    )


def test_a_served_layer_is_served_unlayered() -> None:
    # HTTP serving the project and general: general is served on its own address, unlayered.
    layers = served_layers(("general",), (), ["lambo", "general"])
    assert layers_of("lambo", layers) == ("general",)
    assert layers_of("general", layers) == ()
    # A shared lambo.toml that layers general still lets general be served alone.
    assert layers_of("general", served_layers((), ("general",), ["general"])) == ()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What `lambo serve` would start, recorded instead of run."""
    calls: list[Any] = []
    monkeypatch.setattr(serve_signals, "exit_cleanly_until_serving", lambda: None)
    monkeypatch.setattr(
        serve_module, "run_stdio", lambda config, o, ledger_path=None: calls.append(o)
    )
    monkeypatch.setattr(http_serve, "run_http", lambda config, o, ledger_path=None: calls.append(o))
    return calls


def serve(tmp_path: Path, *args: str, toml: str = "") -> Any:
    (tmp_path / "lambo.toml").write_text(toml)
    return CliRunner().invoke(
        cli,
        ["--config", str(tmp_path / "lambo.toml"), "serve", "--store", "memory", *args],
        env={"LAMBO_HOME": str(tmp_path)},
    )


def test_serve_layer_flags_reach_serve_options(tmp_path: Path, started: list[Any]) -> None:
    result = serve(tmp_path, "--session", "lambo", "--layer", "general", "--layer", "team")
    assert result.exit_code == 0, result.output
    assert started == [ServeOptions(session="lambo", layers=("general", "team"))]


def test_serve_takes_the_configured_layers(tmp_path: Path, started: list[Any]) -> None:
    toml = '[serve]\nlayers = ["general"]\nsessions = ["lambo", "general"]\n'
    result = serve(tmp_path, "--transport", "http", toml=toml)
    assert result.exit_code == 0, result.output
    assert started == [
        [
            ServeOptions(session="lambo", layers=("general",)),
            ServeOptions(session="general", as_layer=True),
        ]
    ]


def test_serve_refuses_a_session_as_its_own_layer(tmp_path: Path, started: list[Any]) -> None:
    result = serve(tmp_path, "--session", "general", "--layer", "general")
    assert result.exit_code == 2
    assert result.output.strip().splitlines()[-1] == (
        "lambo: configuration error: --layer names 'general', the session to serve: "
        "a session cannot be its own layer; name the project session with --session and its "
        "shared sessions with --layer"
    )
    assert started == []
