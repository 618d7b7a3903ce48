"""`lambo setup CLIENT`: the MCP client configuration that runs ``lambo serve``, printed or
merged into the client's own file (claude, cursor, codex, generic). The spec's "HTTP for a
machine with several independent clients" names the files; how a merge keeps the rest of a
file is in docs/design.md. Paths follow ``HOME``, so tests point it at a temporary directory.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from .errors import ConfigError
from .text import check_string

CLIENTS = ("claude", "cursor", "codex", "generic")
SERVER_NAME = "lambo"
FALLBACK_SESSION = "default"


@dataclass(frozen=True)
class ServerCommand:
    """How a client starts the server: a command and its arguments."""

    command: str
    args: tuple[str, ...]

    def as_entry(self) -> dict[str, Any]:
        return {"command": self.command, "args": list(self.args)}

    def shell(self) -> str:
        return shlex.join([self.command, *self.args])


def default_session(cwd: Path | None = None) -> str:
    """The current directory's name (``default`` at the root)."""
    name = (cwd or Path.cwd()).name
    return name if name.strip() else FALLBACK_SESSION


def server_command(session: str, pyz: str | None = None) -> ServerCommand:
    """``lambo serve --session NAME``, or ``python3 /abs/PATH serve --session NAME``."""
    session = check_string("--session", session)
    if pyz is None:
        return ServerCommand("lambo", ("serve", "--session", session))
    path = Path(pyz).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--pyz {pyz}: no such file; build it with `python build_zipapp.py`")
    return ServerCommand("python3", (str(path), "serve", "--session", session))


# =====================================================================================
# where each client's file is
# =====================================================================================


def cursor_file(home: Path) -> Path:
    return home / ".cursor" / "mcp.json"


def codex_file(home: Path, env: dict[str, str] | None = None) -> Path:
    codex_home = (os.environ if env is None else env).get("CODEX_HOME")
    return (Path(codex_home).expanduser() if codex_home else home / ".codex") / "config.toml"


def generic_file(cwd: Path) -> Path:
    return cwd / ".mcp.json"


def client_file(client: str, home: Path | None = None, cwd: Path | None = None) -> Path | None:
    """The file ``--write`` merges into for ``client`` (None for Claude Code)."""
    home = home or Path.home()
    if client == "cursor":
        return cursor_file(home)
    if client == "codex":
        return codex_file(home)
    if client == "generic":
        return generic_file(cwd or Path.cwd())
    return None


def _shown(path: Path, home: Path) -> str:
    """``~/.cursor/mcp.json`` for a path under home, else the path itself."""
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)


# =====================================================================================
# the printed forms
# =====================================================================================


def json_document(server: ServerCommand) -> str:
    """``{"mcpServers": {"lambo": {...}}}``: Cursor's and the generic ``.mcp.json`` form."""
    return json.dumps({"mcpServers": {SERVER_NAME: server.as_entry()}}, indent=2) + "\n"


def toml_document(server: ServerCommand) -> str:
    """``[mcp_servers.lambo]`` with command and args: Codex's form (args on one line)."""

    def literal(value: str) -> str:
        # A JSON string without ASCII escaping is a valid TOML basic string.
        return json.dumps(value, ensure_ascii=False)

    text = (
        f"[mcp_servers.{SERVER_NAME}]\n"
        f"command = {literal(server.command)}\n"
        f"args = [{', '.join(literal(a) for a in server.args)}]\n"
    )
    if tomllib.loads(text) != {"mcp_servers": {SERVER_NAME: server.as_entry()}}:
        raise AssertionError(f"the printed TOML does not read back: {text!r}")
    return text


def claude_text(server: ServerCommand) -> str:
    add = shlex.join(["claude", "mcp", "add", SERVER_NAME, "--", server.command, *server.args])
    entry = {"type": "stdio", **server.as_entry()}
    add_json = shlex.join(["claude", "mcp", "add-json", SERVER_NAME, json.dumps(entry)])
    return (
        "# Claude Code: register lambo with its own CLI (`claude mcp add --scope user ...` "
        "makes it available in every project)\n"
        f"{add}\n"
        "\n"
        "# the same as JSON\n"
        f"{add_json}\n"
        "\n"
        "# then check it answers: claude mcp list\n"
    )


def render(
    client: str, server: ServerCommand, home: Path | None = None, cwd: Path | None = None
) -> str:
    """What ``lambo setup CLIENT`` prints without ``--write``."""
    home = home or Path.home()
    if client == "claude":
        return claude_text(server)
    path = client_file(client, home, cwd)
    assert path is not None
    if client == "cursor":
        return (
            f"# Cursor: merge this into {_shown(path, home)} (or run again with --write)\n"
            f"{json_document(server)}"
            "# the Cursor Agent CLI lists the tools once enabled: cursor-agent mcp enable lambo\n"
        )
    if client == "codex":
        return (
            f"# Codex: add this to {_shown(path, home)} (or run again with --write)\n"
            f"{toml_document(server)}"
        )
    if client == "generic":
        return (
            f"# any MCP client that reads a project .mcp.json: {path} "
            "(or run again with --write)\n"
            f"{json_document(server)}"
        )
    raise ConfigError(f"unknown client {client!r}; one of: {', '.join(CLIENTS)}")


# =====================================================================================
# --write: merge into the client's file
# =====================================================================================


@dataclass(frozen=True)
class WriteReport:
    path: Path
    backup: Path | None  # the previous file's copy; None when there was none
    changed: bool  # False: the file already held exactly this entry
    note: str | None = None


def _merge_json(text: str | None, path: Path, server: ServerCommand) -> tuple[str, bool]:
    data: Any = {}
    if text is not None and text.strip():
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _refused(
                path, f"is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
            ) from None
    if not isinstance(data, dict):
        raise _refused(path, "does not hold a JSON object")
    servers = data.get("mcpServers", {})
    if not isinstance(servers, dict):
        raise _refused(path, 'has an "mcpServers" that is not an object')
    entry = server.as_entry()
    if servers.get(SERVER_NAME) == entry:
        return text or "", False
    merged = dict(data)
    merged["mcpServers"] = {**servers, SERVER_NAME: entry}
    return json.dumps(merged, indent=2, ensure_ascii=False) + "\n", True


def _merge_toml(text: str | None, path: Path, server: ServerCommand) -> tuple[str, bool]:
    data: dict[str, Any] = {}
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _refused(path, f"is not valid TOML ({exc})") from None
    servers = data.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise _refused(path, "has an mcp_servers that is not a table")
    entry = server.as_entry()
    if servers.get(SERVER_NAME) == entry:
        return text or "", False
    merged = dict(data)
    merged["mcp_servers"] = {**servers, SERVER_NAME: entry}
    return tomli_w.dumps(merged), True


def _refused(path: Path, why: str) -> ConfigError:
    return ConfigError(
        f"{path} {why}; it was left untouched. Fix it (or move it aside) and run again, or "
        "add the entry by hand (run without --write to print it)"
    )


def write_config(
    client: str, server: ServerCommand, home: Path | None = None, cwd: Path | None = None
) -> WriteReport:
    """Merge the ``lambo`` entry into ``client``'s file (see the module docstring)."""
    path = client_file(client, home, cwd)
    if path is None:
        raise ConfigError(f"{client} has no file lambo writes")
    merge: Callable[[str | None, Path, ServerCommand], tuple[str, bool]] = (
        _merge_toml if client == "codex" else _merge_json
    )
    try:
        text: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} could not be read ({exc}); it was left untouched") from None
    new, changed = merge(text, path, server)
    if not changed:
        return WriteReport(path, None, False)
    backup: Path | None = None
    note: str | None = None
    if text is not None:
        backup = path.with_name(path.name + ".bak")
        shutil.copy2(path, backup)
        if client == "codex" and any(line.lstrip().startswith("#") for line in text.splitlines()):
            note = (
                "the rewritten file keeps every setting but not the comments of the old one; "
                "the .bak still has them"
            )
    _replace_atomically(path, new)
    return WriteReport(path, backup, True, note)


def _replace_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = stat.S_IMODE(path.stat().st_mode) if path.exists() else 0o600
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# =====================================================================================
# the command
# =====================================================================================


def setup_client(
    client: str,
    *,
    session: str | None = None,
    pyz: str | None = None,
    write: bool = False,
    home: Path | None = None,
    cwd: Path | None = None,
) -> str:
    """What ``lambo setup CLIENT [--pyz PATH] [--session NAME] [--write]`` prints.

    Raises ``ConfigError`` for a file ``--write`` refuses (left untouched) or a
    ``--pyz`` that does not exist, ``ParameterError`` for a bad session name.
    """
    if client not in CLIENTS:
        raise ConfigError(f"unknown client {client!r}; one of: {', '.join(CLIENTS)}")
    home = home or Path.home()
    cwd = cwd or Path.cwd()
    server = server_command(session if session is not None else default_session(cwd), pyz)
    printed = render(client, server, home, cwd)
    if not write:
        return printed
    if client == "claude":
        return (
            printed + "\n# --write: nothing written. Claude Code keeps its own configuration; "
            "run the `claude mcp add` command above.\n"
        )
    report = write_config(client, server, home, cwd)
    shown = _shown(report.path, home)
    if not report.changed:
        return f"{shown} already holds this lambo entry; nothing written\n"
    lines = [f"wrote the lambo entry into {shown}: `{server.shell()}`"]
    if report.backup is not None:
        lines.append(f"the previous file is kept as {_shown(report.backup, home)}")
    if report.note:
        lines.append(f"note: {report.note}")
    if client == "cursor":
        lines.append(
            "the Cursor Agent CLI lists the tools once enabled: cursor-agent mcp enable lambo"
        )
    return "\n".join(lines) + "\n"
