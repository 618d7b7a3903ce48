"""e2e fixtures: a LAMBO_HOME with the real MiniLM model imported, how to spawn `lambo`, and
the helpers several e2e modules share."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from lambo_core.embed.importer import import_model
from lambo_core.paths import resolve_paths
from lambo_core.store import SqliteStore, open_store
from lambo_core.store.base import Store
from tests.embed_fixtures import minilm_source_dir

ROOT = Path(__file__).resolve().parents[2]


def lambo_argv() -> list[str]:
    """The installed console script when present, else the checkout's lambo.py."""
    script = Path(sys.executable).parent / "lambo"
    if script.exists():
        return [str(script)]
    return [sys.executable, str(ROOT / "lambo.py")]


@pytest.fixture
def served_home(lambo_home: Path, tmp_path: Path) -> Path:
    """LAMBO_HOME with MiniLM imported as the configured model."""
    import_model(
        minilm_source_dir(tmp_path / "minilm-src"),
        "minilm",
        lambo_home / "cache" / "models",
        pooling="mean",
    )
    config = lambo_home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text('[embedder]\nmodel = "minilm"\nthreads = 1\n')
    return lambo_home


#: the stores the e2e tool tests run on, each through a real `lambo serve`
STORE_KINDS = ("sqlite", "memory", "postgres")


#: the stores that outlive a serve (a crash, a takeover): every kind but memory
SHARED_KINDS = tuple(kind for kind in STORE_KINDS if kind != "memory")


def store_table(kind: str, request: pytest.FixtureRequest) -> str:
    """The [store] table of a config on ``kind`` (sqlite: the default store file)."""
    if kind == "sqlite":
        return ""
    if kind == "memory":
        return '[store]\nkind = "memory"\n'
    if kind == "postgres":
        # the test's own database on the tests' server, reached by child processes alike
        return f'[store]\nkind = "postgres"\ndsn = "{request.getfixturevalue("pg_dsn")}"\n'
    raise AssertionError(f"no e2e store {kind!r}")


def open_served_store(kind: str, home: Path, request: pytest.FixtureRequest) -> Store:
    """The store the serves of ``home`` used (``store_table``), opened for a test's checks."""
    if kind == "sqlite":
        return SqliteStore(resolve_paths(serve_env(home)).default_store)
    if kind == "postgres":
        return open_store("postgres", None, request.getfixturevalue("pg_dsn"))
    raise AssertionError(f"no shared e2e store {kind!r}")


@pytest.fixture(params=STORE_KINDS)
def served_store(request: pytest.FixtureRequest, served_home: Path) -> str:
    """``served_home`` on each of the e2e stores in turn; the store's kind."""
    kind = str(request.param)
    config = served_home / "config" / "lambo.toml"
    config.write_text(config.read_text() + store_table(kind, request))
    return kind


@pytest.fixture(params=SHARED_KINDS)
def served_shared_store(request: pytest.FixtureRequest, served_home: Path) -> str:
    """``served_home`` on each store that outlives a serve; the store's kind."""
    kind = str(request.param)
    config = served_home / "config" / "lambo.toml"
    config.write_text(config.read_text() + store_table(kind, request))
    return kind


def serve_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LAMBO_")}
    env["LAMBO_HOME"] = str(home)
    env["LAMBO_LOG"] = "INFO"
    return env


def run_lambo(
    home: Path, *args: str, stdin: str | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """One ``lambo`` command with ``home`` as its LAMBO_HOME and working directory."""
    return subprocess.run(
        [*lambo_argv(), *args],
        capture_output=True,
        text=True,
        input=stdin if stdin is not None else "",
        env=serve_env(home),
        cwd=home,
        timeout=timeout,
    )


def stdio_params(home: Path, session: str, *extra: str) -> StdioServerParameters:
    """How an MCP client spawns ``lambo serve --session session`` with ``home``."""
    argv = lambo_argv()
    return StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", session, *extra],
        env=serve_env(home),
        cwd=str(home),
    )


def sitecustomize(where: Path, code: str) -> dict[str, str]:
    """The environment that makes a serve run ``code`` at start (a sitecustomize in ``where``)."""
    where.mkdir()
    (where / "sitecustomize.py").write_text(code)
    path = os.pathsep.join(filter(None, [str(where), os.environ.get("PYTHONPATH")]))
    return {"PYTHONPATH": path}


def body(result: Any) -> dict[str, Any]:
    """A tool result's structured content; the result must not be an error."""
    assert not result.is_error, result.content
    return dict(result.structured_content)


async def derive(client: Client, content: str) -> str:
    """Write one logic concept as agent-a; its receipt."""
    ack = body(
        await client.call_tool(
            "lambo_derive",
            {"agent_id": "agent-a", "concepts": [{"content": content, "concept_type": "logic"}]},
        )
    )
    return str(ack["receipt"])


BUILD_TIMEOUT_S = 1800


# --------------------------------------------------------------------------- the .pyz


@pytest.fixture(scope="session")
def pyz() -> Path:
    """dist/lambo-<version>-<tag>-<platform>.pyz, built unless dist/ already holds one built
    from this checkout (build_zipapp.py --if-stale; the dependencies stay staged in build/)."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "build_zipapp.py"), "--if-stale"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    path = Path(out.stdout.strip().splitlines()[-1])
    assert path.is_file() and path.parent == ROOT / "dist", out.stdout
    return path


def manifest_of(archive: Path) -> dict[str, Any]:
    with zipfile.ZipFile(archive) as zf:
        return dict(json.loads(zf.read("lambo_pyz.json")))


def _lacks_our_deps(argv: list[str], cache_tag: str) -> bool:
    probe = "import sys; print(sys.implementation.cache_tag); import numpy"
    try:
        out = subprocess.run(
            [*argv, "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
        )
    except OSError:
        return False
    return (
        out.stdout.strip() == cache_tag
        and out.returncode != 0
        and "No module named 'numpy'" in out.stderr
    )


@pytest.fixture(scope="session")
def bare_python(pyz: Path) -> list[str]:
    """A Python of the archive's version with none of lambo's dependencies: the system's
    python3.11 / python3 when they qualify (``import numpy`` must fail), else this venv's
    interpreter with ``-I -S`` (no site-packages at all)."""
    tag = manifest_of(pyz)["cache_tag"]
    minor = tag.removeprefix("cpython-")
    version = f"{minor[0]}.{minor[1:]}"
    seen: set[str] = set()
    for name in (f"/usr/bin/python{version}", "/usr/bin/python3", f"python{version}", "python3"):
        found = shutil.which(name, path="/usr/bin:/bin:/usr/local/bin")
        if found and found not in seen:
            seen.add(found)
            if _lacks_our_deps([found], tag):
                return [found]
    fallback = [sys.executable, "-I", "-S"]
    assert _lacks_our_deps(fallback, tag), "even `python -I -S` imports numpy"
    return fallback


@pytest.fixture
def drop_unpacked(tmp_path: Path) -> Iterator[None]:
    """A test that starts the archive unpacks ~170 MB under its tmp_path; pytest keeps
    recent tmp dirs, so drop it (``pytestmark = pytest.mark.usefixtures("drop_unpacked")``)."""
    yield
    for cache in tmp_path.glob("*/cache/pyz"):
        shutil.rmtree(cache, ignore_errors=True)
