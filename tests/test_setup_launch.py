"""`lambo setup`'s absolute paths and environment: which executable the entry names (the
console script, `python -m lambo_core`, a checkout's lambo.py, a library call), each run as
a real process where it can be, and which LAMBO_* variables it carries (set, unset, made
absolute, never a secret) in every client's format. The .pyz and the spawn of a written
entry are in tests/e2e/test_setup_spawn.py."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
import types
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambo_core.cli import cli
from lambo_core.errors import ConfigError
from lambo_core.setup_check import check_report
from lambo_core.setup_clients import CLIENTS, setup_client
from lambo_core.setup_launch import (
    NOT_FOR_SERVE,
    PASSED,
    SECRETS,
    is_secret,
    running_launcher,
    server_environment,
)
from tests.setup_home import body

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / "lambo"  # the venv's console script (pip install -e)
SECRET = "s3cr3t-Pa55"


def run_setup(argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """A real ``lambo setup`` process: this checkout first on the path, no LAMBO_* but ``env``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("LAMBO_")}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    out = subprocess.run(
        [*argv, "setup", "cursor", "--session", "s"],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out


def cursor_entry(printed: str) -> dict[str, Any]:
    return dict(json.loads(body(printed))["mcpServers"]["lambo"])


# --------------------------------------------------------------------------- the executable


@pytest.mark.skipif(not SCRIPT.is_file(), reason="lambo is not installed in this venv")
def test_the_console_script_that_runs_is_written_absolute(tmp_path: Path) -> None:
    out = run_setup([str(SCRIPT)], tmp_path)
    entry = cursor_entry(out.stdout)
    assert entry["command"] == str(SCRIPT)
    assert entry["args"] == ["serve", "--session", "s"]
    assert out.stderr == ""  # nothing to explain: the script that ran is the one written
    # Called by a relative path through a symlink (pipx's ~/.local/bin layout): made
    # absolute, the link kept, so a reinstall behind it keeps working.
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "lambo").symlink_to(SCRIPT)
    entry = cursor_entry(run_setup(["bin/lambo"], tmp_path).stdout)
    assert entry["command"] == str(tmp_path / "bin" / "lambo")


def test_python_dash_m_writes_this_python_and_dash_m(tmp_path: Path) -> None:
    out = run_setup([sys.executable, "-m", "lambo_core"], tmp_path)
    entry = cursor_entry(out.stdout)
    assert entry["command"] == os.path.abspath(sys.executable)
    assert entry["args"] == ["-m", "lambo_core", "serve", "--session", "s"]
    assert "run as `python -m lambo_core`" in out.stderr


def test_a_checkout_script_is_run_by_this_python(tmp_path: Path) -> None:
    """lambo.py starts with ``#!/usr/bin/env python3``: run by itself it would need PATH."""
    out = run_setup([sys.executable, str(ROOT / "lambo.py")], tmp_path)
    entry = cursor_entry(out.stdout)
    assert entry["command"] == os.path.abspath(sys.executable)
    assert entry["args"][:1] == [str(ROOT / "lambo.py")]
    assert "finds its Python on PATH" in out.stderr


def lambo_script(where: Path, shebang: str) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    script = where / "lambo"
    script.write_text(
        f"#!{shebang}\nimport sys\nfrom lambo_core.cli import main\nsys.exit(main())\n"
    )
    script.chmod(0o755)
    return script


def test_a_library_call_falls_back_to_the_script_beside_python_then_dash_m(
    tmp_path: Path,
) -> None:
    pytest_main = types.ModuleType("__main__")  # what a test runner's __main__ looks like
    python = tmp_path / "venv" / "bin" / "python"
    notes: list[str] = []
    kwargs: dict[str, Any] = {"argv0": "/usr/bin/pytest", "main": pytest_main, "archive": ""}
    launcher = running_launcher(notes.append, executable=str(python), **kwargs)
    assert (launcher.command, launcher.prefix) == (str(python), ("-m", "lambo_core"))
    assert "no lambo script is beside this Python" in notes[-1]
    beside = lambo_script(python.parent, str(python))
    launcher = running_launcher(notes.append, executable=str(python), **kwargs)
    assert (launcher.command, launcher.prefix) == (str(beside), ())
    assert f"the entry runs {beside}, beside this Python" in notes[-1]
    # a script beside it that finds its Python through PATH is not taken
    lambo_script(python.parent, "/usr/bin/env python3")
    launcher = running_launcher(executable=str(python), **kwargs)
    assert launcher.prefix == ("-m", "lambo_core")
    # a script that is not lambo's (pytest's own) is never written
    other = tmp_path / "bin" / "pytest"
    other.parent.mkdir()
    other.write_text(f"#!{python}\nimport pytest\n")
    other.chmod(0o755)
    launcher = running_launcher(executable=str(python), **{**kwargs, "argv0": str(other)})
    assert launcher.command != str(other)


def test_the_archive_wins_and_an_unknown_python_is_refused(tmp_path: Path) -> None:
    main = types.ModuleType("__main__")
    archive = str(tmp_path / "lambo.pyz")
    launcher = running_launcher(argv0=archive, executable="/usr/bin/python3.11", main=main,
                                archive=archive)  # fmt: skip
    assert (launcher.command, launcher.prefix) == ("/usr/bin/python3.11", (archive,))
    with pytest.raises(ConfigError, match=r"sys\.executable is empty"):
        running_launcher(argv0=archive, executable="", main=main, archive=archive)


# --------------------------------------------------------------------------- the variables


def test_only_the_variables_set_are_passed_and_paths_made_absolute(tmp_path: Path) -> None:
    notes: list[str] = []
    env = {
        "LAMBO_HOME": "state/home",
        "LAMBO_SQLITE_PATH": "~/mem.db",
        "LAMBO_EMBEDDER_MODEL": "./models/mini",
        "LAMBO_STORE": "sqlite",
        "LAMBO_LOG": "",  # set but empty: not in effect
        "LAMBO_HOST": "box-1",
        "XDG_RUNTIME_DIR": "/run/user/1",  # LAMBO_HOME set: lambo reads no XDG directory
    }
    got = server_environment(env, tmp_path, note=notes.append)
    home = Path(os.path.expanduser("~"))
    assert got == {
        "LAMBO_HOME": str(tmp_path / "state" / "home"),
        "LAMBO_SQLITE_PATH": str(home / "mem.db"),
        "LAMBO_EMBEDDER_MODEL": str(tmp_path / "models" / "mini"),
        "LAMBO_STORE": "sqlite",
        "LAMBO_HOST": "box-1",
    }
    assert notes == [
        "made absolute (a client starts lambo in another directory): LAMBO_HOME, "
        "LAMBO_SQLITE_PATH, LAMBO_EMBEDDER_MODEL"
    ]
    # a model given by name stays a name; nothing set, nothing passed
    assert server_environment({"LAMBO_EMBEDDER_MODEL": "minilm"}, tmp_path) == {
        "LAMBO_EMBEDDER_MODEL": "minilm"
    }
    assert server_environment({"PATH": "/bin", "HOME": "/h"}, tmp_path) == {}


def test_without_lambo_home_the_xdg_directories_go_along(tmp_path: Path) -> None:
    env = {"XDG_RUNTIME_DIR": "/run/user/1000", "XDG_DATA_HOME": "data", "XDG_STATE_HOME": "/s"}
    assert server_environment(env, tmp_path) == {
        "XDG_RUNTIME_DIR": "/run/user/1000",
        "XDG_DATA_HOME": str(tmp_path / "data"),
    }


def test_secrets_and_dsns_are_never_written_in_any_client(home: Path) -> None:
    environ = {
        "LAMBO_HOME": str(home / "lh"),
        "LAMBO_AUTH_TOKEN": SECRET,
        "LAMBO_POSTGRES_DSN": f"postgresql://me:{SECRET}@db/lambo",
        "LAMBO_COCKROACH_DSN": f"host=db password={SECRET}",
        "LAMBO_CI_TOKEN": SECRET,
        "LAMBO_API_KEY": SECRET,
        "LAMBO_HUB_URL": f"https://u:{SECRET}@mirror/",
        "LAMBO_SOMETHING_NEW": SECRET,
    }
    printed: dict[str, str] = {}
    notes: list[str] = []
    for client in CLIENTS:
        printed[client] = setup_client(client, environ=environ, note=notes.append)
        if client != "claude":
            notes.append(setup_client(client, environ=environ, write=True))
    assert SECRET not in "\n".join([*printed.values(), *notes])
    written = [p for p in [*home.rglob("*"), *Path.cwd().rglob("*")] if p.is_file()]
    assert len(written) == 4  # cursor's, codex's, pi's and the project .mcp.json
    for path in written:
        assert SECRET not in path.read_text(), path
    assert cursor_entry(printed["cursor"])["env"] == {"LAMBO_HOME": str(home / "lh")}
    for line in (
        "not written: LAMBO_AUTH_TOKEN (a bearer token)",
        "not written: LAMBO_POSTGRES_DSN (a DSN, which may carry a password); put store.dsn "
        "without the password in lambo.toml",
        "not written: LAMBO_CI_TOKEN (its name says it is a secret)",
        "not written: LAMBO_API_KEY (its name says it is a secret)",
        "not written: LAMBO_HUB_URL (only `lambo model pull` reads it)",
        "not written: LAMBO_SOMETHING_NEW (lambo reads no such variable)",
    ):
        assert any(note.startswith(line) for note in notes), line


def test_every_lambo_variable_in_the_source_is_passed_or_left_out_on_purpose() -> None:
    """A new LAMBO_* read anywhere must be sorted into setup_launch's lists."""
    names = {
        name
        for path in (ROOT / "lambo_core").rglob("*.py")
        for name in re.findall(r"[\"'](LAMBO_[A-Z][A-Z0-9_]*)[\"']", path.read_text())
    }
    assert names >= {"LAMBO_HOME", "LAMBO_CONFIG", "LAMBO_AUTH_TOKEN"}  # the scan sees them
    unsorted = sorted(names - PASSED.keys() - SECRETS.keys() - NOT_FOR_SERVE.keys())
    unsorted = [name for name in unsorted if not is_secret(name)]
    assert unsorted == [], (
        f"sort these into setup_launch.PASSED, SECRETS or NOT_FOR_SERVE: {unsorted}"
    )
    assert not any(is_secret(name) for name in PASSED)


def test_config_flag_beats_lambo_config_and_a_local_lambo_toml_is_named(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (Path.cwd() / "lambo.toml").write_text('[embedder]\nmodel = "minilm"\n')
    notes: list[str] = []
    entry = cursor_entry(setup_client("cursor", note=notes.append))
    assert entry["env"]["LAMBO_CONFIG"] == str(Path.cwd() / "lambo.toml")
    assert any("./lambo.toml holds the settings here" in note for note in notes)
    monkeypatch.setenv("LAMBO_CONFIG", "conf/a.toml")
    entry = cursor_entry(setup_client("cursor"))
    assert entry["env"]["LAMBO_CONFIG"] == str(Path.cwd() / "conf" / "a.toml")
    runner = CliRunner()
    out = runner.invoke(cli, ["--config", "other.toml", "setup", "cursor"])
    assert out.exit_code == 0, out.output
    assert cursor_entry(out.stdout)["env"]["LAMBO_CONFIG"] == str(Path.cwd() / "other.toml")
    assert "lambo: the entry names --config other.toml in LAMBO_CONFIG" in out.stderr


def test_a_value_a_client_would_expand_is_left_out_and_pi_escapes_a_bang(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBO_HOST", "!whoami")
    monkeypatch.setenv("LAMBO_EMBEDDER_MODEL", "/models/${USER}")
    notes: list[str] = []
    pi = cursor_entry(setup_client("pi", note=notes.append))
    assert pi["env"]["LAMBO_HOST"] == "!!whoami"  # Pi runs a leading ! as a command
    assert "LAMBO_EMBEDDER_MODEL" not in pi["env"]
    assert any("not written: LAMBO_EMBEDDER_MODEL, its value holds `${`" in n for n in notes)
    assert cursor_entry(setup_client("cursor"))["env"]["LAMBO_HOST"] == "!whoami"


# --------------------------------------------------------------------------- every format


def test_every_client_format_carries_the_command_and_env(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBO_EMBEDDER_MODEL", "minilm")
    monkeypatch.setenv("LAMBO_LOG", "INFO")
    launcher = running_launcher()
    args = [*launcher.prefix, "serve", "--session", "myproj"]
    env = {
        "LAMBO_EMBEDDER_MODEL": "minilm",
        "LAMBO_HOME": os.environ["LAMBO_HOME"],
        "LAMBO_LOG": "INFO",
    }
    expected = {"command": launcher.command, "args": args, "env": env}
    # claude: the `claude mcp add` line and the add-json line say the same
    lines = setup_client("claude").splitlines()
    add = shlex.split(next(line for line in lines if line.startswith("claude mcp add lambo")))
    assert add[:4] == ["claude", "mcp", "add", "lambo"]
    dash = add.index("--")
    assert add[4:dash] == [part for k, v in env.items() for part in ("-e", f"{k}={v}")]
    assert add[dash + 1 :] == [launcher.command, *args]
    add_json = shlex.split(next(line for line in lines if line.startswith("claude mcp add-json")))
    assert json.loads(add_json[4]) == {"type": "stdio", **expected}
    # the JSON clients, printed and written
    files = {
        "cursor": home / ".cursor" / "mcp.json",
        "pi": home / ".pi" / "agent" / "mcp.json",
        "generic": Path.cwd() / ".mcp.json",
    }
    for client, path in files.items():
        assert cursor_entry(setup_client(client)) == expected, client
        setup_client(client, write=True)
        assert json.loads(path.read_text())["mcpServers"]["lambo"] == expected, client
    # codex: the printed inline table and the merged file read back alike
    printed = setup_client("codex")
    assert tomllib.loads(body(printed))["mcp_servers"]["lambo"] == expected
    setup_client("codex", write=True)
    merged = tomllib.loads((home / ".codex" / "config.toml").read_text())
    assert merged["mcp_servers"]["lambo"] == expected
    # and --check reads what was written as runnable: nothing flagged
    report, flagged = check_report()
    assert not flagged, report


# --------------------------------------------------------------------------- the command


def test_the_command_says_its_choices_on_stderr_and_nothing_on_a_refusal(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LAMBO_HOME", "rel/home")
    monkeypatch.setenv("LAMBO_AUTH_TOKEN", SECRET)
    out = CliRunner().invoke(cli, ["setup", "codex"])
    assert out.exit_code == 0, out.output
    assert tomllib.loads(body(out.stdout))["mcp_servers"]["lambo"]["env"] == {
        "LAMBO_HOME": str(Path.cwd() / "rel" / "home")
    }
    assert "lambo: made absolute (a client starts lambo in another directory): LAMBO_HOME\n" in (
        out.stderr
    )
    assert "lambo: not written: LAMBO_AUTH_TOKEN (a bearer token)\n" in out.stderr
    assert SECRET not in out.output
    refused = CliRunner().invoke(cli, ["setup", "codex", "--pyz", "missing.pyz"])
    assert refused.exit_code == 2
    assert refused.stderr == (
        "lambo: configuration error: --pyz missing.pyz: no such file; build it with "
        "`python build_zipapp.py`\n"
    )
