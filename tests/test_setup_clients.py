"""`lambo setup CLIENT`: each client's printed form, --pyz, and --write's merge."""

from __future__ import annotations

import json
import os
import shlex
import stat
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambo_core.cli import cli
from lambo_core.errors import ConfigError, ParameterError
from lambo_core.setup_clients import server_command, setup_client
from tests.setup_home import body, lambo_entry

# --------------------------------------------------------------------------- printed forms


def test_claude_prints_the_mcp_add_command_and_its_json_form(home: Path) -> None:
    out = setup_client("claude")
    lines = out.splitlines()
    entry = lambo_entry()
    command = shlex.join([entry["command"], *entry["args"]])
    home_var = f"LAMBO_HOME={os.environ['LAMBO_HOME']}"
    # -e after the name: before it, Claude Code's variadic -e would take the name
    assert f"claude mcp add lambo -e {shlex.quote(home_var)} -- {command}" in lines
    add_json = next(line for line in lines if line.startswith("claude mcp add-json"))
    argv = shlex.split(add_json)
    assert argv[:4] == ["claude", "mcp", "add-json", "lambo"]
    assert json.loads(argv[4]) == {"type": "stdio", **entry}


def test_cursor_prints_its_mcp_json_entry(home: Path) -> None:
    out = setup_client("cursor")
    assert out.splitlines()[0].startswith("# Cursor: merge this into ~/.cursor/mcp.json")
    assert json.loads(body(out)) == {"mcpServers": {"lambo": lambo_entry()}}
    assert "cursor-agent mcp enable lambo" in out


def test_codex_prints_its_config_toml_table(home: Path) -> None:
    out = setup_client("codex")
    assert out.splitlines()[0].startswith("# Codex: add this to ~/.codex/config.toml")
    assert "[mcp_servers.lambo]" in out
    assert f'env = {{ "LAMBO_HOME" = "{os.environ["LAMBO_HOME"]}" }}' in out
    assert tomllib.loads(body(out)) == {"mcp_servers": {"lambo": lambo_entry()}}


def test_generic_prints_a_project_mcp_json(home: Path) -> None:
    out = setup_client("generic")
    assert f"{Path.cwd() / '.mcp.json'}" in out.splitlines()[0]
    assert json.loads(body(out)) == {"mcpServers": {"lambo": lambo_entry()}}


def test_session_flag_and_odd_names_are_quoted(home: Path) -> None:
    out = setup_client("claude", session="my proj")
    assert " serve --session 'my proj'\n" in out
    toml = setup_client("codex", session='we"ird ü')
    assert tomllib.loads(body(toml))["mcp_servers"]["lambo"]["args"][-1] == 'we"ird ü'
    with pytest.raises(ParameterError):
        setup_client("cursor", session="  ")


def test_pyz_form_runs_this_python_on_the_absolute_path(home: Path) -> None:
    pyz = Path("dist") / "lambo-0.3.0-py311-linux.pyz"
    pyz.parent.mkdir()
    fake_archive(pyz, sys.implementation.cache_tag)
    absolute = str(pyz.resolve())
    python = os.path.abspath(sys.executable)
    notes: list[str] = []
    out = setup_client("claude", pyz=str(pyz), note=notes.append)
    assert f"-- {python} {absolute} serve --session myproj" in out
    assert notes == [f"--pyz: the entry runs the archive under this Python, {python} "
                     f"(CPython {sys.version_info[0]}.{sys.version_info[1]})"]  # fmt: skip
    entry = json.loads(body(setup_client("cursor", pyz=str(pyz))))["mcpServers"]["lambo"]
    assert entry == {
        "command": python,
        "args": [absolute, "serve", "--session", "myproj"],
        "env": {"LAMBO_HOME": os.environ["LAMBO_HOME"]},
    }
    toml = tomllib.loads(body(setup_client("codex", pyz=str(pyz))))
    assert toml["mcp_servers"]["lambo"]["command"] == python
    with pytest.raises(ConfigError, match="no such file"):
        server_command("s", "dist/missing.pyz")


def fake_archive(path: Path, cache_tag: str) -> None:
    """A zip holding only a lambo_pyz.json: what setup reads of an archive."""
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("lambo_pyz.json", json.dumps({"cache_tag": cache_tag, "format": 1}))


def test_pyz_built_for_another_python_runs_under_that_one_or_is_refused(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pyz = Path("other.pyz")
    fake_archive(pyz, "cpython-399")
    bin_dir = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(ConfigError) as caught:
        server_command("s", str(pyz))
    assert "the archive runs on CPython 3.99" in caught.value.message
    assert "nor a python3.99 on PATH" in caught.value.message
    bin_dir.mkdir()
    (bin_dir / "python3.99").write_text("#!/bin/sh\n")
    (bin_dir / "python3.99").chmod(0o755)
    notes: list[str] = []
    server = server_command("s", str(pyz), note=notes.append)
    assert server.command == str(bin_dir / "python3.99")
    assert server.args[0] == str(pyz.resolve())
    assert "built for CPython 3.99" in notes[0] and str(bin_dir / "python3.99") in notes[0]
    Path("not-an-archive.pyz").write_bytes(b"PK")
    with pytest.raises(ConfigError, match="not a lambo archive"):
        server_command("s", "not-an-archive.pyz")


# --------------------------------------------------------------------------- --write


def test_write_cursor_merges_keeps_others_and_a_bak(home: Path) -> None:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    old: dict[str, Any] = {
        "mcpServers": {
            "github": {"command": "gh-mcp", "env": {"TOKEN": "x"}},
            "lambo": {"command": "old-lambo", "args": []},
        },
        "theme": "dark",
    }
    old_text = json.dumps(old)
    path.write_text(old_text)
    os.chmod(path, 0o640)
    out = setup_client("cursor", write=True)
    assert "wrote the lambo entry into ~/.cursor/mcp.json" in out
    assert "kept as ~/.cursor/mcp.json.bak" in out
    merged = json.loads(path.read_text())
    assert merged == {
        "mcpServers": {"github": old["mcpServers"]["github"], "lambo": lambo_entry()},
        "theme": "dark",
    }
    assert list(merged["mcpServers"]) == ["github", "lambo"]
    assert (path.parent / "mcp.json.bak").read_text() == old_text
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in path.parent.iterdir()) == ["mcp.json", "mcp.json.bak"]
    # Run again: nothing to change, nothing written.
    before = path.stat().st_mtime_ns
    again = setup_client("cursor", write=True)
    assert "already holds this lambo entry; nothing written" in again
    assert path.stat().st_mtime_ns == before
    assert (path.parent / "mcp.json.bak").read_text() == old_text


def test_write_creates_a_missing_file_without_a_bak(home: Path) -> None:
    out = setup_client("cursor", write=True, session="s")
    path = home / ".cursor" / "mcp.json"
    assert json.loads(path.read_text())["mcpServers"]["lambo"]["args"] == [
        "serve",
        "--session",
        "s",
    ]
    assert not (path.parent / "mcp.json.bak").exists()
    assert "kept as" not in out


@pytest.mark.parametrize(
    "text, why",
    [
        ('{"mcpServers": {"a": {}},', "is not valid JSON"),
        ("[1, 2]", "does not hold a JSON object"),
        ('{"mcpServers": []}', '"mcpServers" that is not an object'),
    ],
)
def test_write_refuses_a_file_that_does_not_parse(home: Path, text: str, why: str) -> None:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    path.write_text(text)
    with pytest.raises(ConfigError, match=why) as caught:
        setup_client("cursor", write=True)
    assert "left untouched" in caught.value.message
    assert path.read_text() == text
    assert sorted(p.name for p in path.parent.iterdir()) == ["mcp.json"]


def test_write_codex_merges_into_config_toml(home: Path) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    old_text = (
        "# my settings\n"
        'model = "o3"\n'
        "[mcp_servers.docs]\n"
        'command = "docs-mcp"\n'
        'args = ["--port", "1"]\n'
        "[mcp_servers.lambo]\n"
        'command = "stale"\n'
        "[profiles.fast]\n"
        "temperature = 0.1\n"
    )
    path.write_text(old_text)
    out = setup_client("codex", write=True)
    assert "wrote the lambo entry into ~/.codex/config.toml" in out
    assert "not the comments" in out
    merged = tomllib.loads(path.read_text())
    assert merged == {
        "model": "o3",
        "mcp_servers": {
            "docs": {"command": "docs-mcp", "args": ["--port", "1"]},
            "lambo": lambo_entry(),
        },
        "profiles": {"fast": {"temperature": 0.1}},
    }
    assert (path.parent / "config.toml.bak").read_text() == old_text


def test_write_codex_refuses_broken_toml_and_follows_codex_home(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text("[mcp_servers.lambo\ncommand = 1\n")
    with pytest.raises(ConfigError, match="is not valid TOML"):
        setup_client("codex", write=True)
    assert path.read_text() == "[mcp_servers.lambo\ncommand = 1\n"
    elsewhere = tmp_path / "codex-home"
    monkeypatch.setenv("CODEX_HOME", str(elsewhere))
    setup_client("codex", write=True)
    assert tomllib.loads((elsewhere / "config.toml").read_text()) == {
        "mcp_servers": {"lambo": lambo_entry()}
    }


def test_write_generic_goes_to_the_current_directory(home: Path) -> None:
    (Path.cwd() / ".mcp.json").write_text('{"mcpServers": {"other": {"url": "http://x"}}}')
    setup_client("generic", write=True)
    merged = json.loads((Path.cwd() / ".mcp.json").read_text())
    assert merged == {"mcpServers": {"other": {"url": "http://x"}, "lambo": lambo_entry()}}
    assert (Path.cwd() / ".mcp.json.bak").exists()


def test_write_claude_prints_the_command_and_writes_nothing(home: Path) -> None:
    out = setup_client("claude", write=True)
    assert "claude mcp add lambo -e " in out and " serve --session myproj\n" in out
    assert "nothing written" in out and "own configuration" in out
    assert list(home.iterdir()) == []
    assert list(Path.cwd().iterdir()) == []


# --------------------------------------------------------------------------- the command


def test_command_prints_and_refuses_with_exit_2(home: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["setup", "codex", "--session", "abc"])
    assert out.exit_code == 0, out.output
    assert '"serve", "--session", "abc"]' in out.output
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    path.write_text("{nope")
    out = runner.invoke(cli, ["setup", "cursor", "--write"])
    assert out.exit_code == 2
    assert "is not valid JSON" in out.output and "left untouched" in out.output
    assert path.read_text() == "{nope"
    out = runner.invoke(cli, ["setup", "vscode"])
    assert out.exit_code == 2
