"""`lambo setup --check`: every config layer on this machine that names the lambo server,
and what is wrong with them. The spec's migration trap ("HTTP for a machine with several
independent clients") is the rule: a client reads several layers, and one that still holds
``command`` beside the new ``url`` is rejected even when the endpoint answers, so the fix is
to copy the registration into each layer that names the server.

Flagged: an entry holding both forms, layers that apply here but name lambo differently,
an entry that applies here whose command (or ``.pyz``) does not exist or cannot run (a bare
name is looked up on this PATH), and a file that does not read or parse (reported by name,
never a traceback; the others are still read). Another project's entry in
``~/.claude.json`` is listed but not compared. Nothing read from a file is printed raw: a
target passes ``show_safely``, and a password in a URL is masked.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .setup_clients import (
    SERVER_NAME,
    codex_file,
    cursor_file,
    entry_form,
    generic_file,
    pi_file,
    shown,
)
from .text import show_safely

SHOWN_TARGET_CHARS = 200


@dataclass(frozen=True)
class LayerFile:
    """One file a client reads MCP servers from."""

    path: Path
    toml: bool = False
    writer: str | None = None  # the `lambo setup CLIENT --write` that writes this file
    claude: bool = False  # ~/.claude.json: a user scope and one scope per project


def layer_files(home: Path, cwd: Path, env: dict[str, str] | None = None) -> list[LayerFile]:
    """Every layer lambo knows, user files and the current directory's project files."""
    candidates = [
        LayerFile(generic_file(cwd), writer="generic"),  # Claude Code's project scope, Pi, OMP
        LayerFile(home / ".claude.json", claude=True),
        LayerFile(cursor_file(home), writer="cursor"),
        LayerFile(cwd / ".cursor" / "mcp.json"),
        LayerFile(codex_file(home, env), toml=True, writer="codex"),
        LayerFile(cwd / ".codex" / "config.toml", toml=True),
        LayerFile(pi_file(home, env), writer="pi"),
        LayerFile(cwd / ".pi" / "mcp.json"),
        LayerFile(home / ".config" / "mcp" / "mcp.json"),  # shared files pi-mcp-adapter reads
        LayerFile(home / ".agents" / "mcp.json"),
        LayerFile(cwd / ".omp" / "mcp.json"),  # an OMP workspace
        LayerFile(cwd / ".omp" / ".mcp.json"),
        LayerFile(home / ".omp" / "agent" / "mcp.json"),
        LayerFile(home / ".omp" / "agent" / ".mcp.json"),
    ]
    seen: set[Path] = set()
    layers: list[LayerFile] = []
    for layer in candidates:  # with cwd at HOME a project file is a user file: list it once
        key = layer.path.resolve()
        if key not in seen:
            seen.add(key)
            layers.append(layer)
    return layers


@dataclass(frozen=True)
class Registration:
    """The lambo entry of one layer."""

    where: str
    form: str  # command, url, both, other
    command: str | None
    url: str | None
    applies: bool  # read for the current directory (another project's entry is not)
    fix: str  # how to keep one form in this layer
    url_credentials: bool = False  # the url carries user:password@
    unrunnable: str | None = None  # why its command cannot start here


@dataclass
class Findings:
    registrations: list[Registration] = field(default_factory=list)
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (file, why)


# =====================================================================================
# reading the layers
# =====================================================================================


def _load(layer: LayerFile) -> tuple[Any, str | None]:
    """The file's data, or None and why it could not be had (None, None: no such file)."""
    try:
        text = layer.path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"could not be read ({exc.strerror or type(exc).__name__})"
    except UnicodeDecodeError:
        return None, "could not be read (not UTF-8)"
    if layer.toml:
        try:
            return tomllib.loads(text), None
        except tomllib.TOMLDecodeError as exc:
            return None, f"not valid TOML ({exc})"
    if not text.strip():
        return {}, None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
    if not isinstance(data, dict):
        return None, "does not hold a JSON object"
    return data, None


def _servers(data: dict[str, Any], toml: bool) -> tuple[dict[str, Any], str | None]:
    key = "mcp_servers" if toml else "mcpServers"
    servers = data.get(key, {})
    if not isinstance(servers, dict):
        return {}, f"its {key} is not {'a table' if toml else 'an object'}"
    return servers, None


def _has_credentials(value: object) -> bool:
    try:
        return isinstance(value, str) and "@" in urlsplit(value).netloc
    except ValueError:
        return False


def _shown_url(value: object) -> str:
    if not isinstance(value, str):
        return "(not a string)"
    try:
        parts = urlsplit(value)
        if "@" in parts.netloc:  # never print a password from someone's file
            value = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()
    except ValueError:
        pass
    return show_safely(value, SHOWN_TARGET_CHARS)


def _shown_command(entry: dict[str, Any]) -> str:
    command, args = entry.get("command"), entry.get("args", [])
    if (
        isinstance(command, str)
        and isinstance(args, list)
        and all(isinstance(a, str) for a in args)
    ):
        return show_safely(shlex.join([command, *args]), SHOWN_TARGET_CHARS)
    return "(not a command and a list of arguments)"


def _unrunnable(entry: dict[str, Any], cwd: Path, search_path: str | None) -> str | None:
    """Why a command entry's program (or the ``.pyz`` it runs) cannot start here, or None."""
    command, args = entry.get("command"), entry.get("args", [])
    if not isinstance(command, str) or not command:
        return None
    shown_command = show_safely(command, SHOWN_TARGET_CHARS)
    if "/" not in command:
        if shutil.which(command, path=search_path) is None:
            return f"runs `{shown_command}` by name, and no {shown_command} is on PATH here"
        return None
    program = Path(command).expanduser()
    program = program if program.is_absolute() else cwd / program
    if not program.exists():
        return f"runs {shown_command}, which does not exist"
    if not program.is_file() or not os.access(program, os.X_OK):
        return f"runs {shown_command}, which is not an executable file"
    archive = args[0] if isinstance(args, list) and args and isinstance(args[0], str) else ""
    if archive.endswith(".pyz"):
        path = Path(archive).expanduser()
        if not (path if path.is_absolute() else cwd / path).is_file():
            return (
                f"runs the archive {show_safely(archive, SHOWN_TARGET_CHARS)}, which does not exist"
            )
    return None


def _rerun(layer: LayerFile) -> str:
    """How to write an entry that runs the lambo in use, by its absolute path."""
    if layer.writer is not None:
        return f"`lambo setup {layer.writer} --write`, run by the lambo you use, writes its path"
    if layer.claude:
        return "`lambo setup claude`, run by the lambo you use, prints the `claude mcp add` for it"
    return "edit the entry to name the lambo you use by its absolute path"


def _fix(layer: LayerFile, where: str, scope: str | None, url: str) -> str:
    if layer.writer is not None:
        return f"`lambo setup {layer.writer} --url {url} --write` replaces the whole entry"
    if scope == "user":
        return (
            "`claude mcp remove --scope user lambo`, then "
            f"`claude mcp add --transport http --scope user lambo {url}`"
        )
    if scope is not None:
        return (
            f"in {scope}: `claude mcp remove --scope local lambo`, then "
            f"`claude mcp add --transport http lambo {url}`"
        )
    table = "[mcp_servers.lambo]" if layer.toml else "its lambo entry"
    return f'edit {where}: keep either "command" and "args" or "url" in {table}'


@dataclass(frozen=True)
class Here:
    """What a check reads besides the files: the directory and the PATH it runs in."""

    home: Path
    cwd: Path
    search_path: str | None


def _registration(
    layer: LayerFile, entry: object, where: str, scope: str | None, applies: bool, here: Here
) -> Registration:
    form = entry_form(entry)
    body: dict[str, Any] = entry if isinstance(entry, dict) else {}
    command = _shown_command(body) if form in ("command", "both") else None
    url = _shown_url(body.get("url")) if form in ("url", "both") else None
    fix = _fix(layer, where, scope, url or "URL")
    credentials = url is not None and _has_credentials(body.get("url"))
    # another project's entry is listed, not judged; a "both" entry is flagged for that
    why = _unrunnable(body, here.cwd, here.search_path) if form == "command" and applies else None
    unrunnable = (
        None if why is None else f"{why}: the client cannot start lambo. Fix: {_rerun(layer)}"
    )
    return Registration(where, form, command, url, applies, fix, credentials, unrunnable)


def _same_path(project: str, here: Path) -> bool:
    try:
        return Path(project).resolve() == here
    except (OSError, ValueError):  # a key no path can be (a NUL in it) names no project here
        return False


def _claude_registrations(
    layer: LayerFile, data: dict[str, Any], here: Here, found: Findings
) -> None:
    """``~/.claude.json``: the user scope's servers, then each project's (local scope)."""
    home, cwd = here.home, here.cwd
    name = shown(layer.path, home)
    servers, problem = _servers(data, toml=False)
    if problem:
        found.unreadable.append((name, problem))
    elif SERVER_NAME in servers:
        found.registrations.append(
            _registration(layer, servers[SERVER_NAME], f"{name} (user scope)", "user", True, here)
        )
    projects = data.get("projects", {})
    if not isinstance(projects, dict):
        found.unreadable.append((name, 'its "projects" is not an object'))
        return
    resolved = cwd.resolve()
    for project, settings in projects.items():
        if not isinstance(settings, dict):
            continue
        servers = settings.get("mcpServers", {})
        if isinstance(servers, dict) and SERVER_NAME in servers:
            project_shown = show_safely(shown(Path(project), home), SHOWN_TARGET_CHARS)
            applies = _same_path(project, resolved)
            where = f"{name} (project {project_shown})"
            found.registrations.append(
                _registration(layer, servers[SERVER_NAME], where, project_shown, applies, here)
            )


def find_registrations(
    home: Path, cwd: Path, env: dict[str, str] | None = None, search_path: str | None = None
) -> Findings:
    """Every layer's lambo entry, and the files that could not be read. ``search_path`` is
    where a bare command is looked up (None: this process's PATH, as ``shutil.which``)."""
    found = Findings()
    here = Here(home, cwd, search_path)
    for layer in layer_files(home, cwd, env):
        data, problem = _load(layer)
        where = shown(layer.path, home)
        if problem is not None:
            found.unreadable.append((where, problem))
            continue
        if data is None:
            continue
        if layer.claude:
            _claude_registrations(layer, data, here, found)
            continue
        servers, problem = _servers(data, layer.toml)
        if problem is not None:
            found.unreadable.append((where, problem))
        elif SERVER_NAME in servers:
            found.registrations.append(
                _registration(layer, servers[SERVER_NAME], where, None, True, here)
            )
    return found


# =====================================================================================
# the report
# =====================================================================================


def _line(reg: Registration) -> str:
    if reg.form == "both":
        target = f"both: command {reg.command} and url {reg.url}"
    elif reg.form == "command":
        target = f"command {reg.command}"
    elif reg.form == "url":
        target = f"url {reg.url}"
    else:
        target = "neither command nor url (settings for an entry another layer defines)"
    another = "" if reg.applies else "  [another project: not compared]"
    return f"  {reg.where}: {target}{another}"


def _disagreement(registrations: list[Registration]) -> str | None:
    """The layers that apply here, grouped by what they name, when that is more than one."""
    groups: dict[str, list[str]] = {}
    for reg in registrations:
        if not reg.applies or reg.form == "other":
            continue
        # A "both" entry is flagged on its own; its url is where it is heading.
        target = f"url {reg.url}" if reg.url is not None else f"command {reg.command}"
        groups.setdefault(target, []).append(reg.where)
    if len(groups) < 2:
        return None
    named = "; ".join(f"{target} ({', '.join(wheres)})" for target, wheres in groups.items())
    return (
        f"the layers that apply here name lambo differently: {named}. Fix: copy one "
        "registration into each layer that names lambo (`lambo setup CLIENT --url URL "
        "--write` for each client); never edit one file and assume the others pick it up"
    )


def check_report(
    home: Path | None = None,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    search_path: str | None = None,
) -> tuple[str, bool]:
    """What ``lambo setup --check`` prints, and whether anything is flagged (exit 1)."""
    home = home or Path.home()
    cwd = cwd or Path.cwd()
    found = find_registrations(home, cwd, env, search_path)
    flagged = [
        f"{reg.where} holds command beside url in its lambo entry: a client rejects that "
        f"layer even when the endpoint answers. Fix: {reg.fix}; then copy the same "
        "registration into each layer that names lambo"
        for reg in found.registrations
        if reg.form == "both"
    ]
    flagged += [
        f"{reg.where} carries a user or password in its url: a token belongs in the "
        "Authorization header, never in the URL (`lambo setup CLIENT --url URL "
        "--auth-token-env VAR` writes the header form)"
        for reg in found.registrations
        if reg.url_credentials
    ]
    flagged += [f"{reg.where} {reg.unrunnable}" for reg in found.registrations if reg.unrunnable]
    flagged += [
        f"{where}: {why}; the clients cannot read it either. Fix it or move it aside, then "
        "run `lambo setup --check` again"
        for where, why in found.unreadable
    ]
    disagreement = _disagreement(found.registrations)
    if disagreement:
        flagged.append(disagreement)
    lines: list[str] = []
    if found.registrations or found.unreadable:
        lines.append("config layers that name lambo:" if found.registrations else "config files:")
        lines += [_line(reg) for reg in found.registrations]
        lines += [f"  {where}: {why}" for where, why in found.unreadable]
    if flagged:
        lines += ["", "flagged:", *(f"  {text}" for text in flagged)]
    lines += ["", _summary(found, len(flagged))] if lines else [_summary(found, 0)]
    return "\n".join(lines) + "\n", bool(flagged)


def _summary(found: Findings, flagged: int) -> str:
    count = len(found.registrations)
    if count == 0 and not found.unreadable:
        return "no config layer on this machine names lambo"
    named = f"{count} layer{'s' if count != 1 else ''} name{'' if count != 1 else 's'} lambo"
    if count == 0:
        named = "no readable config layer names lambo"
    return f"{named}; {flagged} flagged" if flagged else f"{named}; nothing flagged"
