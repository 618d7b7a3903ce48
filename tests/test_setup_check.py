"""`lambo setup --check`: every config layer that names lambo over a fake HOME and project,
the migration trap (command beside url), layers that disagree, files that do not parse,
and a clean machine."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from lambo_core.cli import cli
from lambo_core.setup_check import check_report
from lambo_core.setup_clients import setup_client

URL = "http://127.0.0.1:7700/mcp/s/myproj"
COMMAND = {"command": "lambo", "args": ["serve", "--session", "myproj"]}


def put_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def servers(entry: Any, **others: Any) -> dict[str, Any]:
    return {"mcpServers": {**others, "lambo": entry}}


def check() -> Result:
    return CliRunner().invoke(cli, ["setup", "--check"])


def layer_lines(output: str) -> list[str]:
    """The indented lines under "config layers that name lambo:"."""
    lines = output.splitlines()
    start = lines.index("config layers that name lambo:") + 1
    end = lines.index("", start)
    return [line.strip() for line in lines[start:end]]


def every_layer(home: Path, project: Path, entry: Any) -> None:
    """One lambo entry in each kind of layer (and another project's, which differs)."""
    put_json(project / ".mcp.json", servers({"type": "http", **entry}))
    put_json(
        home / ".claude.json",
        {
            "numStartups": 4,
            **servers({"type": "http", **entry}),
            "projects": {
                str(project): servers({"type": "http", **entry}),
                "/elsewhere/other": servers(COMMAND),
                "/elsewhere/none": {"allowedTools": []},
            },
        },
    )
    put_json(home / ".cursor" / "mcp.json", servers(entry, github={"command": "gh"}))
    put_json(project / ".cursor" / "mcp.json", servers(entry))
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(
        f'model = "o3"\n[mcp_servers.lambo]\nurl = "{entry["url"]}"\n'
    )
    put_json(home / ".pi" / "agent" / "mcp.json", servers(entry))
    put_json(project / ".pi" / "mcp.json", servers({"directTools": True}))
    put_json(home / ".config" / "mcp" / "mcp.json", servers(entry))
    put_json(project / ".omp" / "mcp.json", servers({"type": "http", **entry}))
    put_json(home / ".omp" / "agent" / "mcp.json", servers({"type": "http", **entry}))


# --------------------------------------------------------------------------- clean runs


def test_a_clean_machine_exits_0_and_says_no_layer_names_lambo(home: Path) -> None:
    put_json(home / ".cursor" / "mcp.json", {"mcpServers": {"github": {"command": "gh"}}})
    put_json(home / ".claude.json", {"projects": {str(Path.cwd()): {"mcpServers": {}}}})
    out = check()
    assert out.exit_code == 0, out.output
    assert out.output == "no config layer on this machine names lambo\n"


def test_every_layer_kind_agreeing_on_one_url_exits_0(home: Path) -> None:
    project = Path.cwd()
    every_layer(home, project, {"url": URL})
    out = check()
    assert out.exit_code == 0, out.output
    assert layer_lines(out.output) == [
        f"{project / '.mcp.json'}: url {URL}",
        f"~/.claude.json (user scope): url {URL}",
        f"~/.claude.json (project {project}): url {URL}",
        "~/.claude.json (project /elsewhere/other): command lambo serve --session myproj"
        "  [another project: not compared]",
        f"~/.cursor/mcp.json: url {URL}",
        f"{project / '.cursor' / 'mcp.json'}: url {URL}",
        f"~/.codex/config.toml: url {URL}",
        f"~/.pi/agent/mcp.json: url {URL}",
        f"{project / '.pi' / 'mcp.json'}: neither command nor url "
        "(settings for an entry another layer defines)",
        f"~/.config/mcp/mcp.json: url {URL}",
        f"{project / '.omp' / 'mcp.json'}: url {URL}",
        f"~/.omp/agent/mcp.json: url {URL}",
    ]
    assert "flagged:" not in out.output
    assert out.output.endswith("\n12 layers name lambo; nothing flagged\n")


def test_codex_home_and_pi_agent_dir_are_followed(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    codex = tmp_path / "codex-home"
    codex.mkdir()
    (codex / "config.toml").write_text(f'[mcp_servers.lambo]\nurl = "{URL}"\n')
    pi = tmp_path / "pi-agent"
    put_json(pi / "mcp.json", servers({"url": URL}))
    monkeypatch.setenv("CODEX_HOME", str(codex))
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(pi))
    out = check()
    assert out.exit_code == 0, out.output
    assert layer_lines(out.output) == [
        f"{codex / 'config.toml'}: url {URL}",
        f"{pi / 'mcp.json'}: url {URL}",
    ]


def test_a_project_at_home_is_listed_once(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(home)
    put_json(home / ".cursor" / "mcp.json", servers({"url": URL}))
    out = check()
    assert layer_lines(out.output) == [f"~/.cursor/mcp.json: url {URL}"]


# --------------------------------------------------------------------------- flagged


def test_command_beside_url_is_flagged_with_the_file_and_the_fix(home: Path) -> None:
    both = {"command": "lambo", "args": ["serve", "--session", "myproj"], "url": URL}
    put_json(home / ".cursor" / "mcp.json", servers(both))
    put_json(home / ".claude.json", servers({"type": "http", **both}))
    put_json(Path.cwd() / ".pi" / "mcp.json", servers(both))
    out = check()
    assert out.exit_code == 1
    lines = out.output.splitlines()
    assert (
        f"  ~/.cursor/mcp.json: both: command lambo serve --session myproj and url {URL}" in lines
    )
    flagged = lines[lines.index("flagged:") + 1 :]
    cursor = next(line for line in flagged if line.startswith("  ~/.cursor/mcp.json holds"))
    assert "holds command beside url in its lambo entry" in cursor
    assert "rejects that layer even when the endpoint answers" in cursor
    assert f"Fix: `lambo setup cursor --url {URL} --write` replaces the whole entry" in cursor
    assert "copy the same registration into each layer that names lambo" in cursor
    claude = next(line for line in flagged if "~/.claude.json (user scope) holds" in line)
    assert "`claude mcp remove --scope user lambo`" in claude
    assert f"`claude mcp add --transport http --scope user lambo {URL}`" in claude
    pi = next(line for line in flagged if ".pi/mcp.json holds" in line)
    assert 'keep either "command" and "args" or "url"' in pi
    # all three head for one url: no disagreement on top
    assert not any("name lambo differently" in line for line in flagged)
    assert out.output.endswith("3 layers name lambo; 3 flagged\n")


def test_layers_that_disagree_are_flagged(home: Path) -> None:
    put_json(Path.cwd() / ".mcp.json", servers(COMMAND))
    put_json(home / ".cursor" / "mcp.json", servers({"url": URL}))
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text(
        '[mcp_servers.lambo]\nurl = "http://127.0.0.1:7701/mcp"\n'
    )
    out = check()
    assert out.exit_code == 1
    (line,) = (x for x in out.output.splitlines() if "name lambo differently" in x)
    assert f"url {URL} (~/.cursor/mcp.json)" in line
    assert "url http://127.0.0.1:7701/mcp (~/.codex/config.toml)" in line
    assert f"command lambo serve --session myproj ({Path.cwd() / '.mcp.json'})" in line
    assert "copy one registration into each layer that names lambo" in line
    assert "never edit one file and assume the others pick it up" in line


def test_another_projects_entry_is_not_compared(home: Path) -> None:
    put_json(home / ".cursor" / "mcp.json", servers({"url": URL}))
    put_json(home / ".claude.json", {"projects": {"/elsewhere": servers(COMMAND)}})
    out = check()
    assert out.exit_code == 0, out.output


def test_files_that_do_not_parse_are_named_and_the_others_still_read(home: Path) -> None:
    (home / ".cursor").mkdir()
    (home / ".cursor" / "mcp.json").write_text('{"mcpServers": {"lambo": ')
    (home / ".codex").mkdir()
    (home / ".codex" / "config.toml").write_text("[mcp_servers.lambo\n")
    put_json(home / ".claude.json", {"mcpServers": ["not", "an", "object"]})
    put_json(home / ".pi" / "agent" / "mcp.json", [1, 2])
    (home / ".omp" / "agent" / "mcp.json").mkdir(parents=True)  # a directory: cannot be read
    put_json(Path.cwd() / ".mcp.json", servers({"type": "http", "url": URL}))
    out = check()
    assert out.exit_code == 1
    assert "Traceback" not in out.output
    assert isinstance(out.exception, SystemExit)  # the exit 1, nothing raised past it
    text = out.output
    assert f"  {Path.cwd() / '.mcp.json'}: url {URL}" in text
    assert "  ~/.cursor/mcp.json: not valid JSON (line 1, column 26" in text
    assert "  ~/.codex/config.toml: not valid TOML (" in text
    assert "  ~/.claude.json: its mcpServers is not an object" in text
    assert "  ~/.pi/agent/mcp.json: does not hold a JSON object" in text
    assert "  ~/.omp/agent/mcp.json: could not be read (" in text
    flagged = text.splitlines()[text.splitlines().index("flagged:") + 1 :]
    assert any(
        line.startswith("  ~/.cursor/mcp.json: not valid JSON")
        and "Fix it or move it aside, then run `lambo setup --check` again" in line
        for line in flagged
    )
    assert text.endswith("1 layer names lambo; 5 flagged\n")


def test_only_unreadable_files_still_exit_1(home: Path) -> None:
    (home / ".cursor").mkdir()
    (home / ".cursor" / "mcp.json").write_text("{nope")
    out = check()
    assert out.exit_code == 1
    assert out.output.startswith("config files:\n  ~/.cursor/mcp.json: not valid JSON")
    assert out.output.endswith("no readable config layer names lambo; 1 flagged\n")


def test_nothing_read_from_a_file_is_printed_raw(home: Path) -> None:
    put_json(
        home / ".cursor" / "mcp.json",
        servers({"url": "http://me:hunter2@127.0.0.1:7700/mcp\x1b[2J"}),
    )
    put_json(
        Path.cwd() / ".mcp.json",
        servers({"command": "lambo\u202e", "args": ["serve\n--session", "x\x07"]}),
    )
    put_json(home / ".claude.json", {"projects": {"/x\x00\x1b[31m": servers({"url": URL})}})
    out = check()
    assert out.exit_code == 1
    assert "hunter2" not in out.output
    assert "~/.claude.json (project /x\ufffd\ufffd[31m): url" in out.output
    for raw in ("\x1b", "\u202e", "\x07", "\x00"):
        assert raw not in out.output
    assert "~/.cursor/mcp.json: url http://***@127.0.0.1:7700/mcp" in out.output
    assert "~/.cursor/mcp.json carries a user or password in its url" in out.output


def test_check_takes_no_client_or_setup_flags(home: Path) -> None:
    runner = CliRunner()
    for argv in (
        ["setup", "cursor", "--check"],
        ["setup", "--check", "--url", URL],
        ["setup", "--check", "--write"],
    ):
        out = runner.invoke(cli, argv)
        assert out.exit_code == 2, argv
        assert out.stderr.startswith("lambo: --check reads every layer and writes none")
    out = runner.invoke(cli, ["setup", "--help"])
    assert "Exit status: 0 when nothing is" in " ".join(out.output.split())


def test_check_report_follows_home_and_cwd_given(tmp_path: Path) -> None:
    home, project = tmp_path / "h", tmp_path / "p"
    put_json(home / ".cursor" / "mcp.json", servers({"url": URL, "command": "lambo"}))
    project.mkdir()
    report, flagged = check_report(home, project, env={})
    assert flagged
    assert "~/.cursor/mcp.json holds command beside url" in report


# ------------------------------------------------------------------ commands that cannot start


def test_a_command_that_cannot_start_is_flagged_with_its_fix(home: Path, tmp_path: Path) -> None:
    project = Path.cwd()
    plain = tmp_path / "not-executable"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    put_json(home / ".cursor" / "mcp.json", servers({"command": "/gone/bin/lambo", "args": []}))
    put_json(project / ".mcp.json", servers({"command": str(plain), "args": ["serve"]}))
    python = os.path.abspath(sys.executable)
    put_json(
        home / ".pi" / "agent" / "mcp.json",
        servers({"command": python, "args": ["/gone/lambo.pyz", "serve"]}),
    )
    put_json(
        home / ".claude.json",
        {
            **servers({"command": "lambo", "args": ["serve"]}),
            "projects": {"/elsewhere": servers({"command": "/gone/too", "args": []})},
        },
    )
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    report, flagged = check_report(home, project, env={}, search_path=str(empty))
    assert flagged
    lines = report.splitlines()
    got = lines[lines.index("flagged:") + 1 :]
    fix = "the client cannot start lambo. Fix: "
    assert (
        f"  ~/.cursor/mcp.json runs /gone/bin/lambo, which does not exist: {fix}"
        "`lambo setup cursor --write`, run by the lambo you use, writes its path"
    ) in got
    assert (
        f"  {project / '.mcp.json'} runs {plain}, which is not an executable file: {fix}"
        "`lambo setup generic --write`, run by the lambo you use, writes its path"
    ) in got
    assert (
        f"  ~/.pi/agent/mcp.json runs the archive /gone/lambo.pyz, which does not exist: {fix}"
        "`lambo setup pi --write`, run by the lambo you use, writes its path"
    ) in got
    assert (
        "  ~/.claude.json (user scope) runs `lambo` by name, and no lambo is on PATH here: "
        f"{fix}`lambo setup claude`, run by the lambo you use, prints the `claude mcp add` for it"
    ) in got
    assert not any("/gone/too" in line for line in got)  # another project: listed, not judged
    assert report.endswith("5 layers name lambo; 5 flagged\n")  # 4 + the disagreement


def test_a_bare_command_on_path_and_an_entry_setup_wrote_are_not_flagged(
    home: Path, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "lambo").write_text("#!/bin/sh\n")
    (bin_dir / "lambo").chmod(0o755)
    put_json(home / ".cursor" / "mcp.json", servers(COMMAND))
    report, flagged = check_report(home, Path.cwd(), env={}, search_path=str(bin_dir))
    assert not flagged, report
    setup_client("cursor", write=True, session="myproj")
    report, flagged = check_report(home, Path.cwd(), env={}, search_path=str(tmp_path / "none"))
    assert not flagged, report  # the absolute path runs whatever PATH says
