"""`lambo setup CLIENT --url URL`: each client's url form, the merge that swaps the whole
entry between the command and url forms, --auth-token-env, and every refusal."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambo_core.cli import cli
from lambo_core.errors import ParameterError
from lambo_core.setup_clients import setup_client
from lambo_core.setup_url import URL_EXAMPLE, ServerUrl, check_url, url_warnings
from tests.setup_home import body, lambo_entry

URL = "http://127.0.0.1:7700/mcp/s/myproj"
SECRET = "s3cr3t-token-value"


@pytest.fixture
def home(home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shared set-up HOME (tests/setup_home.py), with a token in the variable the tests
    name."""
    monkeypatch.setenv("LAMBO_TOKEN", SECRET)
    return home


def every_file_text(*roots: Path) -> str:
    return "".join(p.read_text() for root in roots for p in root.rglob("*") if p.is_file())


# --------------------------------------------------------------------------- printed forms


@pytest.mark.parametrize(
    "client, entry",
    [
        ("cursor", {"url": URL}),
        ("pi", {"url": URL}),
        ("generic", {"type": "http", "url": URL}),
    ],
)
def test_json_clients_print_their_url_entry(home: Path, client: str, entry: Any) -> None:
    out = setup_client(client, url=URL)
    assert json.loads(body(out)) == {"mcpServers": {"lambo": entry}}
    assert "command" not in out


def test_pi_names_its_file_and_the_adapter(home: Path) -> None:
    out = setup_client("pi", url=URL)
    assert out.splitlines()[0].startswith("# Pi (its pi-mcp-adapter extension")
    assert "~/.pi/agent/mcp.json" in out.splitlines()[0]


def test_codex_prints_a_url_table(home: Path) -> None:
    out = setup_client("codex", url=URL)
    assert body(out) == f'[mcp_servers.lambo]\nurl = "{URL}"'
    assert tomllib.loads(body(out)) == {"mcp_servers": {"lambo": {"url": URL}}}


def test_claude_prints_mcp_add_transport_http_and_the_project_form(home: Path) -> None:
    out = setup_client("claude", url=URL)
    lines = out.splitlines()
    assert f"claude mcp add --transport http lambo {URL}" in lines
    add_json = shlex.split(next(line for line in lines if line.startswith("claude mcp add-json")))
    assert add_json[:4] == ["claude", "mcp", "add-json", "lambo"]
    assert json.loads(add_json[4]) == {"type": "http", "url": URL}
    document = out[out.index("{\n") : out.index("}\n\n") + 2]
    assert json.loads(document) == {"mcpServers": {"lambo": {"type": "http", "url": URL}}}
    written = setup_client("claude", url=URL, write=True)
    assert "nothing written" in written
    assert list(home.iterdir()) == [] and list(Path.cwd().iterdir()) == []


def test_auth_token_env_writes_each_clients_reference_never_the_token(home: Path) -> None:
    headers = {"Authorization": "Bearer ${LAMBO_TOKEN}"}
    cursor = json.loads(body(setup_client("cursor", url=URL, token_env="LAMBO_TOKEN")))
    assert cursor["mcpServers"]["lambo"] == {
        "url": URL,
        "headers": {"Authorization": "Bearer ${env:LAMBO_TOKEN}"},
    }
    pi = json.loads(body(setup_client("pi", url=URL, token_env="LAMBO_TOKEN")))
    assert pi["mcpServers"]["lambo"] == {"url": URL, "headers": headers}
    generic = json.loads(body(setup_client("generic", url=URL, token_env="LAMBO_TOKEN")))
    assert generic["mcpServers"]["lambo"] == {"type": "http", "url": URL, "headers": headers}
    codex = tomllib.loads(body(setup_client("codex", url=URL, token_env="LAMBO_TOKEN")))
    assert codex["mcp_servers"]["lambo"] == {"url": URL, "bearer_token_env_var": "LAMBO_TOKEN"}
    claude = setup_client("claude", url=URL, token_env="LAMBO_TOKEN")
    add = next(line for line in claude.splitlines() if line.startswith("claude mcp add "))
    assert shlex.split(add) == [
        "claude", "mcp", "add", "--transport", "http", "--scope", "project", "lambo", URL,
        "--header", "Authorization: Bearer ${LAMBO_TOKEN}",
    ]  # fmt: skip
    outputs = [setup_client(c, url=URL, token_env="LAMBO_TOKEN", write=True) for c in
               ("cursor", "codex", "pi", "generic")]  # fmt: skip
    assert SECRET not in "".join(outputs) + claude
    assert SECRET not in every_file_text(home, Path.cwd())
    assert "the bearer token from $LAMBO_TOKEN" in outputs[0]


# --------------------------------------------------------------------------- --write merges


def test_write_replaces_a_command_entry_and_keeps_the_rest(home: Path) -> None:
    path = home / ".cursor" / "mcp.json"
    path.parent.mkdir()
    other = {"command": "gh-mcp", "env": {"TOKEN": "x"}}
    old = {
        "mcpServers": {
            "github": other,
            "lambo": {"command": "lambo", "args": ["serve"], "env": {"A": "1"}},
        },
        "theme": "dark",
    }
    path.write_text(json.dumps(old))
    out = setup_client("cursor", url=URL, write=True)
    assert f"wrote the lambo entry into ~/.cursor/mcp.json: url {URL}" in out
    assert "replaces the whole command entry" in out
    assert json.loads(path.read_text()) == {
        "mcpServers": {"github": other, "lambo": {"url": URL}},
        "theme": "dark",
    }
    assert json.loads((path.parent / "mcp.json.bak").read_text()) == old
    # and back: the command form replaces the url entry whole (no url, no headers left)
    setup_client("cursor", url=URL, token_env="LAMBO_TOKEN", write=True)
    back = setup_client("cursor", write=True)
    assert "replaces the whole url entry" in back
    assert json.loads(path.read_text())["mcpServers"] == {"github": other, "lambo": lambo_entry()}
    again = setup_client("cursor", write=True)
    assert "already holds this lambo entry; nothing written" in again


@pytest.mark.parametrize("client, relative", [("pi", ".pi/agent/mcp.json"), ("generic", None)])
def test_write_json_clients_merge_the_url_form(
    home: Path, client: str, relative: str | None
) -> None:
    path = home / relative if relative else Path.cwd() / ".mcp.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "settings": {"toolPrefix": "short"},
                "mcpServers": {
                    "docs": {"url": "http://docs/mcp"},
                    "lambo": {"command": "lambo", "args": [], "url": "http://stale/mcp"},
                },
            }
        )
    )
    out = setup_client(client, url=URL, write=True)
    assert "replaces the whole both entry" in out
    expected = {"url": URL} if client == "pi" else {"type": "http", "url": URL}
    assert json.loads(path.read_text()) == {
        "settings": {"toolPrefix": "short"},
        "mcpServers": {"docs": {"url": "http://docs/mcp"}, "lambo": expected},
    }


def test_write_codex_swaps_command_for_url(home: Path) -> None:
    path = home / ".codex" / "config.toml"
    path.parent.mkdir()
    path.write_text(
        'model = "o3"\n'
        "[mcp_servers.docs]\n"
        'command = "docs-mcp"\n'
        "[mcp_servers.lambo]\n"
        'command = "lambo"\n'
        'args = ["serve", "--session", "myproj"]\n'
        "startup_timeout_sec = 30\n"
    )
    out = setup_client("codex", url=URL, token_env="LAMBO_TOKEN", write=True)
    assert "replaces the whole command entry" in out
    assert tomllib.loads(path.read_text()) == {
        "model": "o3",
        "mcp_servers": {
            "docs": {"command": "docs-mcp"},
            "lambo": {"url": URL, "bearer_token_env_var": "LAMBO_TOKEN"},
        },
    }


def test_pi_command_form_and_its_agent_dir(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = lambo_entry()
    assert json.loads(body(setup_client("pi"))) == {"mcpServers": {"lambo": entry}}
    setup_client("pi", write=True)
    assert json.loads((home / ".pi" / "agent" / "mcp.json").read_text()) == {
        "mcpServers": {"lambo": entry}
    }
    elsewhere = tmp_path / "pi-agent"
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(elsewhere))
    setup_client("pi", url=URL, write=True)
    assert json.loads((elsewhere / "mcp.json").read_text()) == {
        "mcpServers": {"lambo": {"url": URL}}
    }


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    "value, rule",
    [
        ("ftp://127.0.0.1/mcp", "does not start with http:// or https://"),
        ("127.0.0.1:7700/mcp", "does not start with http:// or https://"),
        ("localhost:7700/mcp", "does not start with http:// or https://"),
        ("http:///mcp", "has no host"),
        ("http://127.0.0.1:7700", "has no path"),
        ("http://127.0.0.1:7700/", "has no path"),
        ("http://127.0.0.1:99999/mcp", "does not parse as a URL"),
        ("http://127.0.0.1:port/mcp", "does not parse as a URL"),
        ("http://[::1/mcp", "does not parse as a URL"),
        ("http://127.0.0.1:0/mcp", "has port 0"),
        ("", "must not be empty"),
    ],
)
def test_url_rules(value: str, rule: str) -> None:
    with pytest.raises(ParameterError, match=rule) as caught:
        check_url(value)
    message = caught.value.message
    assert message.startswith("--url ")
    if rule != "must not be empty":
        assert "http:// or https:// URL with a host and a path" in message
    assert value == "" or value not in message.replace(URL_EXAMPLE, "<the example>")


@pytest.mark.parametrize(
    "value, codepoint",
    [
        ("http://127.0.0.1/mcp\x1b[2J", "U+001B"),
        ("http://127.0.0.1/mcp\n", "U+000A"),
        ("http://127.0.0.1/mcp\tx", "U+0009"),
        ("http://127.0.0.1/m cp", "U+0020"),
        ("http://127.0.0.1/mcp\u200b", "U+200B"),
        ("http://127.0.0.1/mcp\u200d", "U+200D"),  # allowed in content, not in a URL
        ("http://127.0.0.1/mcp\u202e", "U+202E"),
        ("http://127.0.0.1/mcp\u3164", "U+3164"),
    ],
)
def test_url_with_a_control_or_invisible_character_is_refused_by_codepoint(
    value: str, codepoint: str
) -> None:
    with pytest.raises(ParameterError) as caught:
        check_url(value)
    message = caught.value.message
    assert message.startswith("--url must not contain a control, whitespace or invisible")
    assert f"found {codepoint}" in message
    assert "127.0.0.1" not in message and "/m" not in message
    char = chr(int(codepoint[2:], 16))
    assert char == " " or char not in message


def test_url_with_a_user_or_password_is_refused_without_echo() -> None:
    for value in ("http://me:hunter2@127.0.0.1:7700/mcp", "https://hunter2@example.com/mcp"):
        with pytest.raises(ParameterError, match="must not carry a user or password") as caught:
            check_url(value)
        assert "hunter2" not in caught.value.message
        assert "--auth-token-env" in caught.value.message


def test_flags_that_do_not_go_with_url(home: Path) -> None:
    pyz = Path("lambo.pyz")
    pyz.write_bytes(b"PK")  # refused for going with --url before it is read
    with pytest.raises(ParameterError, match="--url and --pyz do not go together"):
        setup_client("cursor", url=URL, pyz=str(pyz))
    with pytest.raises(ParameterError, match="--url and --session do not go together"):
        setup_client("cursor", url=URL, session="myproj")
    with pytest.raises(ParameterError, match="--auth-token-env needs --url"):
        setup_client("cursor", token_env="LAMBO_TOKEN")
    for name in ("my-token", "1TOKEN", SECRET, "TOKEN\n", ""):
        with pytest.raises(ParameterError, match="--auth-token-env must name an environment") as c:
            setup_client("codex", url=URL, token_env=name)
        assert SECRET not in c.value.message
    assert list(home.iterdir()) == []


def test_command_refusals_exit_2_and_write_nothing(home: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["setup", "cursor", "--write", "--url", "http://u:hunter2@h/mcp"])
    assert out.exit_code == 2
    assert out.stderr.startswith("lambo: --url must not carry a user or password")
    assert "hunter2" not in out.output
    out = runner.invoke(cli, ["setup", "codex", "--url", "http://127.0.0.1/mcp\x1b]0;x\x07"])
    assert out.exit_code == 2 and "U+001B" in out.stderr and "\x1b" not in out.output
    out = runner.invoke(cli, ["setup", "pi", "--url", URL, "--pyz", "x.pyz"])
    assert out.exit_code == 2 and "--url and --pyz" in out.stderr
    out = runner.invoke(cli, ["setup", "--url", URL])
    assert out.exit_code == 2 and "needs a CLIENT" in out.stderr
    assert list(home.iterdir()) == []


# --------------------------------------------------------------------------- warnings


def test_warnings_for_plain_http_off_loopback_and_an_unset_variable() -> None:
    env = {"SET": "x"}
    assert url_warnings(ServerUrl(URL), env) == []
    assert url_warnings(ServerUrl("http://[::1]:7700/mcp", "SET"), env) == []
    assert url_warnings(ServerUrl("https://lambo.example.com/mcp", "SET"), env) == []
    (clear,) = url_warnings(ServerUrl("http://lambo.example.com/mcp", "SET"), env)
    assert "plain http to a host that is not loopback" in clear and "in clear" in clear
    (unset,) = url_warnings(ServerUrl(URL, "UNSET"), env)
    assert "not set in this shell" in unset and "UNSET" not in unset


def test_command_prints_warnings_on_stderr(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["setup", "cursor", "--url", "http://10.1.2.3:7700/mcp"])
    assert out.exit_code == 0
    assert json.loads(body(out.stdout))["mcpServers"]["lambo"] == {
        "url": "http://10.1.2.3:7700/mcp"
    }
    assert out.stderr.startswith("lambo: warning: --url is plain http")
    out = runner.invoke(cli, ["setup", "cursor", "--url", URL, "--auth-token-env", "LAMBO_TOKEN"])
    assert out.exit_code == 0 and out.stderr == ""
    monkeypatch.delenv("LAMBO_TOKEN")
    out = runner.invoke(cli, ["setup", "cursor", "--url", URL, "--auth-token-env", "LAMBO_TOKEN"])
    assert out.exit_code == 0 and "not set in this shell" in out.stderr
