"""How a client spawns the lambo that runs `lambo setup`: the absolute executable, and the
``LAMBO_*`` variables in effect that the spawned serve needs.

A client does not share the user's shell: a desktop app has its own PATH and directory,
Codex passes a spawned server only a short list of variables. So the entry names the
running lambo by absolute path, and carries the settings that decide which memory the
serve opens (the why, and the lists of variables, are in docs/design.md).

The executable, in this order:
- run from the ``.pyz`` (``zipapp_boot`` installed its unpacker): the Python running it
  and the archive, both absolute;
- ``python -m lambo_core``: this Python with ``-m lambo_core``;
- the ``lambo`` console script that is running (``sys.argv[0]``, made absolute; a script
  with a ``#!/usr/bin/env`` line, such as a checkout's lambo.py, is run by this Python);
- otherwise (lambo called as a library): the ``lambo`` script beside this Python, else
  this Python with ``-m lambo_core``.
``--pyz PATH`` names an archive instead: it runs under this Python when the archive was
built for it, else under ``pythonX.Y`` from PATH.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .errors import ConfigError
from .zipapp_boot import archive_manifest, running_archive

Note = Callable[[str], None]

# ------------------------------------------------------------------------ the variables

#: passed when set: each is a setting of the serve (what memory it opens, which model, how
#: it logs, the host it names in its lease); "path" values are made absolute
PASSED: dict[str, str] = {
    "LAMBO_HOME": "path",
    "LAMBO_CONFIG": "path",
    "LAMBO_STORE": "value",
    "LAMBO_SQLITE_PATH": "path",
    "LAMBO_EMBEDDER": "value",
    "LAMBO_EMBEDDER_MODEL": "model",  # a name, or a directory (made absolute)
    "LAMBO_EMBED_DIM": "value",
    "LAMBO_PROMOTION_POLICY": "value",
    "LAMBO_LOG": "value",
    "LAMBO_HOST": "value",
}

#: never written, whatever their value: a config file is no place for a secret
SECRETS: dict[str, str] = {
    "LAMBO_AUTH_TOKEN": "a bearer token",
    "LAMBO_POSTGRES_DSN": "a DSN, which may carry a password",
    "LAMBO_COCKROACH_DSN": "a DSN, which may carry a password",
}
#: any other LAMBO_* whose name holds one of these is treated as a secret too
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY", "DSN", "AUTH")

#: read by other commands only, so a serve does not need them
NOT_FOR_SERVE: dict[str, str] = {"LAMBO_HUB_URL": "only `lambo model pull` reads it"}

#: where lambo's files are when LAMBO_HOME is unset (platformdirs, and the socket directory
#: that lets a CLI call find the serve holding a session); passed only then
XDG_DIRS = ("XDG_DATA_HOME", "XDG_CONFIG_HOME", "XDG_CACHE_HOME", "XDG_RUNTIME_DIR")

#: what a client would expand inside a value (Claude Code and Pi ``${VAR}``, Cursor
#: ``${env:VAR}``, Pi ``$env:VAR``): such a value is not written
EXPANDED = ("${", "$env:")


def is_secret(name: str) -> bool:
    return name in SECRETS or (
        name not in PASSED and any(word in name.upper() for word in SECRET_WORDS)
    )


def _absolute(value: str, cwd: Path) -> str:
    path = Path(value).expanduser()
    return os.path.normpath(path if path.is_absolute() else cwd / path)


def _looks_like_path(value: str) -> bool:
    # embed.installed's rule for a model given as a directory rather than a name
    return "/" in value or "\\" in value or value.startswith((".", "~"))


def server_environment(
    env: Mapping[str, str],
    cwd: Path,
    config_path: str | None = None,
    note: Note | None = None,
) -> dict[str, str]:
    """The variables a spawned serve needs, from ``env`` (only those set and not empty);
    relative paths made absolute against ``cwd``. ``config_path`` is the root ``--config``,
    which beats LAMBO_CONFIG as it does for every command; without either, a
    ``./lambo.toml`` is named so a client that starts lambo elsewhere reads it too."""
    say = note or (lambda _text: None)
    out: dict[str, str] = {}
    absolute: list[str] = []
    for name, kind in PASSED.items():
        value = env.get(name, "")
        if not value:
            continue
        if kind == "path" or (kind == "model" and _looks_like_path(value)):
            made = _absolute(value, cwd)
            if made != value:
                absolute.append(name)
            value = made
        out[name] = value
    if config_path:
        out["LAMBO_CONFIG"] = _absolute(config_path, cwd)
        say(f"the entry names --config {config_path} in LAMBO_CONFIG")
    elif "LAMBO_CONFIG" not in out and (cwd / "lambo.toml").is_file():
        out["LAMBO_CONFIG"] = str(cwd / "lambo.toml")
        say(
            "./lambo.toml holds the settings here: the entry names it in LAMBO_CONFIG, so a "
            "client that starts lambo in another directory reads it too"
        )
    if "LAMBO_HOME" not in out:
        for name in XDG_DIRS:
            if env.get(name):
                out[name] = _absolute(env[name], cwd)
    for name in sorted(out):
        if any(mark in out[name] for mark in EXPANDED):
            del out[name]
            say(f"not written: {name}, its value holds `${{` or `$env:`, which a client expands")
    if absolute:
        say(f"made absolute (a client starts lambo in another directory): {', '.join(absolute)}")
    _note_left_out(env, say)
    return out


def _note_left_out(env: Mapping[str, str], say: Note) -> None:
    for name in sorted(n for n in env if n.startswith("LAMBO_") and env[n]):
        if name in PASSED:
            continue
        if is_secret(name):
            why = SECRETS.get(name, "its name says it is a secret")
            extra = (
                "; put store.dsn without the password in lambo.toml (libpq reads the "
                "password from PGPASSWORD or ~/.pgpass)"
                if "DSN" in name
                else ""
            )
            say(f"not written: {name} ({why}){extra}")
        elif name in NOT_FOR_SERVE:
            say(f"not written: {name} ({NOT_FOR_SERVE[name]})")
        else:
            say(f"not written: {name} (lambo reads no such variable)")


def client_env(env: Mapping[str, str], client: str) -> dict[str, str]:
    """``env`` in ``client``'s form: Pi runs a value that starts with ``!`` as a command,
    and reads ``!!`` as a literal ``!``."""
    if client == "pi":
        return {k: "!" + v if v.startswith("!") else v for k, v in env.items()}
    return dict(env)


# ------------------------------------------------------------------------ the executable


@dataclass(frozen=True)
class Launcher:
    """The command and the arguments before ``serve`` that start this lambo."""

    command: str
    prefix: tuple[str, ...] = ()


def _script_head(path: str) -> bytes:
    try:
        with open(path, "rb") as fh:
            return fh.read(4096)
    except OSError:
        return b""


def _runs_lambo(head: bytes) -> bool:
    return head.startswith(b"#!") and b"lambo_core" in head


def _self_contained(head: bytes) -> bool:
    """A ``#!`` line naming an interpreter by absolute path (what pip writes), not through
    ``env``, which searches PATH."""
    first = head.split(b"\n", 1)[0][2:].strip().split()
    return bool(first) and first[0].startswith(b"/") and not first[0].endswith(b"/env")


def _lambo_script(path: str) -> bool:
    head = _script_head(path)
    return os.access(path, os.X_OK) and _runs_lambo(head) and _self_contained(head)


def _python(executable: str) -> str:
    if not executable:
        raise ConfigError(
            "this Python does not say where its executable is (sys.executable is empty); "
            "run `lambo setup` from a lambo command, or give --pyz PATH"
        )
    return os.path.abspath(executable)


def running_launcher(
    note: Note | None = None,
    *,
    argv0: str | None = None,
    executable: str | None = None,
    main: ModuleType | None = None,
    archive: str | None = None,
) -> Launcher:
    """How to start the lambo that is running (see the module docstring). The keywords
    stand in for ``sys`` in tests."""
    say = note or (lambda _text: None)
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    main = sys.modules.get("__main__") if main is None else main
    archive = running_archive() if archive is None else archive or None
    if archive:
        python = _python(executable)
        say(f"running from {archive}: the entry runs it under this Python, {python}")
        return Launcher(python, (archive,))
    spec = getattr(main, "__spec__", None)
    if getattr(spec, "name", None) == "lambo_core.__main__":
        python = _python(executable)
        say(f"run as `python -m lambo_core`: the entry runs {python} -m lambo_core")
        return Launcher(python, ("-m", "lambo_core"))
    script = argv0 if os.sep in argv0 else (shutil.which(argv0) or "") if argv0 else ""
    if script and os.path.isfile(script) and _runs_lambo(_script_head(script)):
        script = os.path.abspath(script)
        if _lambo_script(script):
            return Launcher(script)
        python = _python(executable)
        say(f"{script} finds its Python on PATH: the entry runs it with {python}")
        return Launcher(python, (script,))
    if executable:
        beside = os.path.join(os.path.dirname(os.path.abspath(executable)), "lambo")
        if os.path.isfile(beside) and _lambo_script(beside):
            say(f"not run from a lambo command: the entry runs {beside}, beside this Python")
            return Launcher(beside)
    python = _python(executable)
    say(
        f"not run from a lambo command, and no lambo script is beside this Python: the entry "
        f"runs {python} -m lambo_core"
    )
    return Launcher(python, ("-m", "lambo_core"))


def pyz_launcher(pyz: str, note: Note | None = None, *, executable: str | None = None) -> Launcher:
    """``--pyz PATH``: the archive, absolute, under a Python it was built for."""
    say = note or (lambda _text: None)
    path = Path(pyz).expanduser().resolve()
    if not path.is_file():
        raise ConfigError(f"--pyz {pyz}: no such file; build it with `python build_zipapp.py`")
    manifest = archive_manifest(path)
    tag = manifest.get("cache_tag") if manifest else None
    if not isinstance(tag, str) or not tag.startswith("cpython-"):
        raise ConfigError(
            f"--pyz {pyz}: not a lambo archive (it holds no lambo_pyz.json); build one with "
            "`python build_zipapp.py`"
        )
    digits = tag.removeprefix("cpython-")
    version = f"{digits[:1]}.{digits[1:]}"
    executable = sys.executable if executable is None else executable
    if executable and sys.implementation.cache_tag == tag:
        python = os.path.abspath(executable)
        say(f"--pyz: the entry runs the archive under this Python, {python} (CPython {version})")
        return Launcher(python, (str(path),))
    found = shutil.which(f"python{version}")
    if found:
        python = os.path.abspath(found)
        say(
            f"--pyz: the archive was built for CPython {version}, this Python is "
            f"{sys.version_info[0]}.{sys.version_info[1]}: the entry runs it under {python}"
        )
        return Launcher(python, (str(path),))
    raise ConfigError(
        f"--pyz {pyz}: the archive runs on CPython {version}, and neither this Python "
        f"({sys.version_info[0]}.{sys.version_info[1]}) nor a python{version} on PATH is one; "
        f"run `lambo setup` with that Python (`python{version} {path} setup ...`)"
    )
