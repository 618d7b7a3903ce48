"""`lambo setup CLIENT`: the MCP client configuration for lambo, printed or merged into the
client's own file (claude, cursor, codex, pi, generic). The entry either runs ``serve`` with
the absolute path of the running lambo and the ``LAMBO_*`` settings in effect (the command
form; setup_launch.py says which executable and which variables) or, with ``--url``, points
at an HTTP serve (the url form, built in setup_url.py). The spec's "HTTP for a machine with
several independent clients" names the files; how a merge keeps the rest of a file is in
docs/design.md. Paths follow ``HOME`` (and ``CODEX_HOME``, ``PI_CODING_AGENT_DIR``), so
tests point them at a temporary directory.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import tempfile
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from .errors import ConfigError, ParameterError
from .setup_launch import Note, client_env, pyz_launcher, running_launcher, server_environment
from .setup_url import ServerUrl, check_token_env, check_url
from .text import check_string

CLIENTS = ("claude", "cursor", "codex", "pi", "generic")
SERVER_NAME = "lambo"
FALLBACK_SESSION = "default"


@dataclass(frozen=True)
class ServerCommand:
    """How a client starts the server: a command, its arguments and the variables it sets."""

    command: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()

    def entry(self, client: str) -> dict[str, Any]:
        """The ``command``/``args`` entry, with ``env`` when there are variables, in
        ``client``'s form (every client reads the same keys)."""
        entry: dict[str, Any] = {"command": self.command, "args": list(self.args)}
        if self.env:
            entry["env"] = client_env(dict(self.env), client)
        return entry

    def shell(self) -> str:
        return shlex.join([self.command, *self.args])

    def describe(self) -> str:
        names = ", ".join(name for name, _ in self.env)
        return f"`{self.shell()}`" + (f" with {names}" if names else "")


Server = ServerCommand | ServerUrl


def default_session(cwd: Path | None = None) -> str:
    """The current directory's name (``default`` at the root)."""
    name = (cwd or Path.cwd()).name
    return name if name.strip() else FALLBACK_SESSION


def server_command(
    session: str,
    pyz: str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    note: Note | None = None,
) -> ServerCommand:
    """``/abs/lambo serve --session NAME`` (or the running Python with ``-m lambo_core``, or
    with the archive), or with ``pyz`` ``/abs/python /abs/PATH serve --session NAME``;
    ``env`` is what the entry sets (``setup_launch.server_environment``)."""
    session = check_string("--session", session)
    launcher = running_launcher(note) if pyz is None else pyz_launcher(pyz, note)
    return ServerCommand(
        launcher.command,
        (*launcher.prefix, "serve", "--session", session),
        tuple(sorted((env or {}).items())),
    )


def server_for(
    *,
    session: str | None,
    pyz: str | None,
    url: str | None,
    token_env: str | None,
    cwd: Path,
    config_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    note: Note | None = None,
) -> Server:
    """The server ``lambo setup``'s flags describe; refuses flags that do not go together."""
    if url is None:
        if token_env is not None:
            raise ParameterError(
                "--auth-token-env needs --url: a bearer token is for an HTTP serve, and the "
                "command form starts its own"
            )
        name = session if session is not None else default_session(cwd)
        heard: list[str] = []  # said after the executable's choice, which reads first
        environ = os.environ if environ is None else environ
        env = server_environment(environ, cwd, config_path, heard.append)
        server = server_command(name, pyz, env=env, note=note)
        if note is not None:
            for text in heard:
                note(text)
        return server
    if pyz is not None:
        raise ParameterError(
            "--url and --pyz do not go together: --pyz says how a client starts lambo, "
            "--url where it reaches a serve that is already running"
        )
    if session is not None:
        raise ParameterError(
            "--url and --session do not go together: the session is in the URL "
            "(/mcp/s/<session>, or /mcp for the serve's default session)"
        )
    return ServerUrl(check_url(url), None if token_env is None else check_token_env(token_env))


# =====================================================================================
# where each client's file is
# =====================================================================================


def _environ(env: dict[str, str] | None) -> dict[str, str] | os._Environ[str]:
    return os.environ if env is None else env


def cursor_file(home: Path) -> Path:
    return home / ".cursor" / "mcp.json"


def codex_file(home: Path, env: dict[str, str] | None = None) -> Path:
    codex_home = _environ(env).get("CODEX_HOME")
    return (Path(codex_home).expanduser() if codex_home else home / ".codex") / "config.toml"


def pi_file(home: Path, env: dict[str, str] | None = None) -> Path:
    """Pi's own MCP file (read by its pi-mcp-adapter extension)."""
    agent_dir = _environ(env).get("PI_CODING_AGENT_DIR")
    return (Path(agent_dir).expanduser() if agent_dir else home / ".pi" / "agent") / "mcp.json"


def generic_file(cwd: Path) -> Path:
    return cwd / ".mcp.json"


def client_file(client: str, home: Path | None = None, cwd: Path | None = None) -> Path | None:
    """The file ``--write`` merges into for ``client`` (None for Claude Code)."""
    home = home or Path.home()
    if client == "cursor":
        return cursor_file(home)
    if client == "codex":
        return codex_file(home)
    if client == "pi":
        return pi_file(home)
    if client == "generic":
        return generic_file(cwd or Path.cwd())
    return None


def shown(path: Path, home: Path) -> str:
    """``~/.cursor/mcp.json`` for a path under home, else the path itself."""
    try:
        return "~/" + str(path.relative_to(home))
    except ValueError:
        return str(path)


# =====================================================================================
# the printed forms
# =====================================================================================


def json_document(server: Server, client: str = "generic") -> str:
    """``{"mcpServers": {"lambo": {...}}}``: Cursor's, Pi's and the ``.mcp.json`` form."""
    return json.dumps({"mcpServers": {SERVER_NAME: server.entry(client)}}, indent=2) + "\n"


def toml_document(server: Server) -> str:
    """``[mcp_servers.lambo]``: Codex's form (a list on one line)."""

    def literal(value: str) -> str:
        # A JSON string without ASCII escaping is a valid TOML basic string.
        return json.dumps(value, ensure_ascii=False)

    def shown_value(value: object) -> str:
        if isinstance(value, list):
            return f"[{', '.join(literal(v) for v in value)}]"
        if isinstance(value, dict):  # env: an inline table on one line
            pairs = ", ".join(f"{literal(k)} = {literal(v)}" for k, v in value.items())
            return f"{{ {pairs} }}"
        return literal(str(value))

    entry = server.entry("codex")
    lines = [f"[mcp_servers.{SERVER_NAME}]"]
    for key, value in entry.items():
        lines.append(f"{key} = {shown_value(value)}")
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != {"mcp_servers": {SERVER_NAME: entry}}:
        raise AssertionError(f"the printed TOML does not read back: {text!r}")
    return text


def claude_text(server: Server) -> str:
    if isinstance(server, ServerUrl):
        return claude_url_text(server)
    # -e after the name: before it, Claude Code's variadic -e takes the name for a variable
    env = [part for name, value in server.env for part in ("-e", f"{name}={value}")]
    add = shlex.join(
        ["claude", "mcp", "add", SERVER_NAME, *env, "--", server.command, *server.args]
    )
    entry = {"type": "stdio", **server.entry("claude")}
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


def claude_url_text(server: ServerUrl) -> str:
    """``claude mcp add --transport http``; with a token, in the project scope, where Claude
    Code expands ``${VAR}``, so only the variable's name is ever written."""
    entry = server.entry("claude")
    scope = ["--scope", "project"] if server.token_env else []
    add = ["claude", "mcp", "add", "--transport", "http", *scope, SERVER_NAME, server.url]
    if server.token_env:
        add += ["--header", f"Authorization: {entry['headers']['Authorization']}"]
    add_json = ["claude", "mcp", "add-json", *scope, SERVER_NAME, json.dumps(entry)]
    first = (
        "# Claude Code: register lambo's HTTP endpoint in the project scope (.mcp.json): Claude "
        f"Code expands ${{{server.token_env}}} there, so the token stays in the environment\n"
        if server.token_env
        else "# Claude Code: register lambo's HTTP endpoint with its own CLI "
        "(`claude mcp add --transport http --scope user ...` makes it available in every "
        "project)\n"
    )
    return (
        f"{first}"
        f"{shlex.join(add)}\n"
        "\n"
        "# the same as JSON\n"
        f"{shlex.join(add_json)}\n"
        "\n"
        "# or the project's .mcp.json (`lambo setup generic --url ... --write` merges it)\n"
        f"{json_document(server, 'claude')}"
        "\n"
        "# then check it answers: claude mcp list\n"
    )


def render(client: str, server: Server, home: Path | None = None, cwd: Path | None = None) -> str:
    """What ``lambo setup CLIENT`` prints without ``--write``."""
    home = home or Path.home()
    if client == "claude":
        return claude_text(server)
    path = client_file(client, home, cwd)
    assert path is not None
    if client == "cursor":
        return (
            f"# Cursor: merge this into {shown(path, home)} (or run again with --write)\n"
            f"{json_document(server, client)}"
            "# the Cursor Agent CLI lists the tools once enabled: cursor-agent mcp enable lambo\n"
        )
    if client == "codex":
        return (
            f"# Codex: add this to {shown(path, home)} (or run again with --write)\n"
            f"{toml_document(server)}"
        )
    if client == "pi":
        return (
            f"# Pi (its pi-mcp-adapter extension reads MCP servers): merge this into "
            f"{shown(path, home)} (or run again with --write)\n"
            f"{json_document(server, client)}"
        )
    if client == "generic":
        return (
            f"# any MCP client that reads a project .mcp.json: {path} "
            "(or run again with --write)\n"
            f"{json_document(server, client)}"
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
    replaced: str | None = None  # the form of a lambo entry of the other form it replaced


def entry_form(entry: object) -> str:
    """``command``, ``url``, ``both`` or ``other`` (neither) for one server entry."""
    if not isinstance(entry, dict):
        return "other"
    has_command, has_url = "command" in entry, "url" in entry
    if has_command and has_url:
        return "both"
    return "command" if has_command else "url" if has_url else "other"


Merged = tuple[str, bool, object]  # the new text, whether it changed, the old lambo entry


def _merge_json(text: str | None, path: Path, entry: dict[str, Any]) -> Merged:
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
    old = servers.get(SERVER_NAME)
    if old == entry:
        return text or "", False, old
    merged = dict(data)
    # The whole entry is replaced: a command left beside a url (or the reverse) is rejected.
    merged["mcpServers"] = {**servers, SERVER_NAME: entry}
    return json.dumps(merged, indent=2, ensure_ascii=False) + "\n", True, old


def _merge_toml(text: str | None, path: Path, entry: dict[str, Any]) -> Merged:
    data: dict[str, Any] = {}
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise _refused(path, f"is not valid TOML ({exc})") from None
    servers = data.get("mcp_servers", {})
    if not isinstance(servers, dict):
        raise _refused(path, "has an mcp_servers that is not a table")
    old = servers.get(SERVER_NAME)
    if old == entry:
        return text or "", False, old
    merged = dict(data)
    merged["mcp_servers"] = {**servers, SERVER_NAME: entry}
    return tomli_w.dumps(merged), True, old


def _refused(path: Path, why: str) -> ConfigError:
    return ConfigError(
        f"{path} {why}; it was left untouched. Fix it (or move it aside) and run again, or "
        "add the entry by hand (run without --write to print it)"
    )


def write_config(
    client: str, server: Server, home: Path | None = None, cwd: Path | None = None
) -> WriteReport:
    """Merge the ``lambo`` entry into ``client``'s file (see the module docstring)."""
    path = client_file(client, home, cwd)
    if path is None:
        raise ConfigError(f"{client} has no file lambo writes")
    merge: Callable[[str | None, Path, dict[str, Any]], Merged] = (
        _merge_toml if client == "codex" else _merge_json
    )
    try:
        text: str | None = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        text = None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} could not be read ({exc}); it was left untouched") from None
    entry = server.entry(client)
    new, changed, old = merge(text, path, entry)
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
    old_form = None if old is None else entry_form(old)
    replaced = old_form if old_form not in (None, entry_form(entry)) else None
    return WriteReport(path, backup, True, note, replaced)


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
    url: str | None = None,
    token_env: str | None = None,
    write: bool = False,
    home: Path | None = None,
    cwd: Path | None = None,
    config_path: str | None = None,
    environ: Mapping[str, str] | None = None,
    note: Note | None = None,
) -> str:
    """What ``lambo [--config FILE] setup CLIENT [--pyz PATH] [--session NAME] [--url URL
    [--auth-token-env VAR]] [--write]`` prints. ``environ`` (default ``os.environ``) is
    where the ``LAMBO_*`` settings are read; ``note`` hears what was chosen and why.

    Raises ``ConfigError`` for a file ``--write`` refuses (left untouched) or a
    ``--pyz`` that does not exist or is not a lambo archive, ``ParameterError`` for a bad
    session name, URL or variable name, or flags that do not go together.
    """
    if client not in CLIENTS:
        raise ConfigError(f"unknown client {client!r}; one of: {', '.join(CLIENTS)}")
    home = home or Path.home()
    cwd = cwd or Path.cwd()
    server = server_for(
        session=session,
        pyz=pyz,
        url=url,
        token_env=token_env,
        cwd=cwd,
        config_path=config_path,
        environ=environ,
        note=note,
    )
    printed = render(client, server, home, cwd)
    if not write:
        return printed
    if client == "claude":
        return (
            printed + "\n# --write: nothing written. Claude Code keeps its own configuration; "
            "run the `claude mcp add` command above.\n"
        )
    return _written(client, write_config(client, server, home, cwd), server, home)


def _written(client: str, report: WriteReport, server: Server, home: Path) -> str:
    where = shown(report.path, home)
    if not report.changed:
        return f"{where} already holds this lambo entry; nothing written\n"
    lines = [f"wrote the lambo entry into {where}: {server.describe()}"]
    if report.replaced is not None:
        lines.append(
            f"it replaces the whole {report.replaced} entry lambo had there "
            "(command and url never sit side by side)"
        )
    if report.backup is not None:
        lines.append(f"the previous file is kept as {shown(report.backup, home)}")
    if report.note:
        lines.append(f"note: {report.note}")
    if client == "cursor":
        lines.append(
            "the Cursor Agent CLI lists the tools once enabled: cursor-agent mcp enable lambo"
        )
    return "\n".join(lines) + "\n"
