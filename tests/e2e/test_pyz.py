"""The .pyz, end to end: built from this checkout (or reused when dist/ holds one built from
exactly these sources), run by a Python that has none of lambo's dependencies, and driven by
the mcp SDK's client: handshake, tools/list, derive, wait on the receipt, recall.

Plus the unpacker on its own (a tiny synthetic archive, in process) and a race of processes
unpacking the real archive's native groups into one empty cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from lambo_core import zipapp_boot
from lambo_core.paths import resolve_paths
from tests.e2e.conftest import manifest_of

# the archive and a Python without lambo's dependencies: tests/e2e/conftest.py
pytestmark = pytest.mark.usefixtures("drop_unpacked")


def bare_env(home: Path) -> dict[str, str]:
    """What `env -i` plus the two LAMBO_ variables leaves: no PYTHONPATH, no venv."""
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LAMBO_HOME": str(home),
        "LAMBO_LOG": "INFO",
    }


def params(python: list[str], archive: Path, home: Path, session: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=python[0],
        args=[*python[1:], str(archive), "serve", "--session", session],
        env=bare_env(home),
        cwd=str(home),
    )


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return dict(result.structured_content)


def unpacked_groups(home: Path, archive: Path) -> list[str]:
    base = home / "cache" / "pyz" / manifest_of(archive)["build_id"]
    assert base.is_dir()
    leftovers = [p.name for p in base.iterdir() if p.name.startswith(".")]
    assert leftovers == [], f"temporary unpack directories left behind: {leftovers}"
    return sorted(p.name for p in base.iterdir())


# --------------------------------------------------------------------------- through MCP


def test_bare_python_spawns_the_pyz_derives_and_recalls(
    pyz: Path, bare_python: list[str], served_home: Path
) -> None:
    async def scenario() -> None:
        async with Client(params(bare_python, pyz, served_home, "s")) as client:
            assert client.instructions is not None and "session 's'" in client.instructions
            names = [t.name for t in (await client.list_tools()).tools]
            assert "lambo_derive" in names and "lambo_recall" in names and len(names) == 8
            ack = structured(
                await client.call_tool(
                    "lambo_derive",
                    {
                        "agent_id": "agent-a",
                        "concepts": [
                            {
                                "content": "the orders API paginates with opaque cursors",
                                "concept_type": "constraint",
                            }
                        ],
                    },
                )
            )
            assert ack["receipt_state"] == "pending"
            stats = structured(
                await client.call_tool(
                    "lambo_stats",
                    {"agent_id": "agent-a", "receipt": ack["receipt"], "wait_ms": 60_000},
                )
            )
            assert stats["receipt"]["state"] == "applied"
            assert stats["embedding_contract"] == {"kind": "onnx", "model": "minilm", "dim": 384}
            hits = structured(
                await client.call_tool(
                    "lambo_recall",
                    {"agent_id": "agent-b", "query": "how does the orders API paginate?"},
                )
            )["hits"]
            assert hits and hits[0]["content"] == "the orders API paginates with opaque cursors"

    anyio.run(scenario)
    # The model ran, so onnxruntime and tokenizers were unpacked (on the loading thread);
    # numpy and pydantic_core at start. A group nobody imports stays in the archive.
    groups = unpacked_groups(served_home, pyz)
    for group in ("numpy", "onnxruntime", "pydantic_core", "tokenizers"):
        assert group in groups
    assert "hf_xet" not in groups
    assert "pillow" not in groups  # no image was checked: Pillow stays in the archive


def test_two_clients_starting_at_once_share_one_unpack(
    pyz: Path, bare_python: list[str], served_home: Path
) -> None:
    """Two serves (two sessions, so each imports and embeds on its own) start at the same
    moment on an empty cache: both unpack numpy and the rest, one rename wins per group, and
    both answer and derive."""
    states: dict[str, str] = {}

    async def client(session: str) -> None:
        async with Client(params(bare_python, pyz, served_home, session)) as c:
            assert len((await c.list_tools()).tools) == 8
            concept = {"content": f"{session} uses the user schema", "concept_type": "logic"}
            ack = structured(
                await c.call_tool("lambo_derive", {"agent_id": "a", "concepts": [concept]})
            )
            wait = {"agent_id": "a", "receipt": ack["receipt"], "wait_ms": 60_000}
            states[session] = structured(await c.call_tool("lambo_stats", wait))["receipt"]["state"]

    async def both() -> None:
        with anyio.fail_after(240):
            async with anyio.create_task_group() as tg:
                tg.start_soon(client, "left")
                tg.start_soon(client, "right")

    anyio.run(both)
    assert states == {"left": "applied", "right": "applied"}
    assert {"numpy", "onnxruntime", "pydantic_core", "tokenizers"} <= set(
        unpacked_groups(served_home, pyz)
    )


# --------------------------------------------------------------------------- the unpack race

PROBE = """
import json, sys, zipfile
archive = sys.argv[1]
sys.path.insert(0, archive + "/site")
from lambo_core import zipapp_boot
manifest = json.loads(zipfile.ZipFile(archive).read("lambo_pyz.json"))
unpacker = zipapp_boot.install(archive, manifest)
import numpy, pydantic_core, tokenizers
assert numpy.__file__.startswith(str(unpacker.base)), numpy.__file__
assert float(numpy.ones(3).sum()) == 3.0
print(json.dumps(unpacker.outcomes))
"""


def test_processes_racing_on_an_empty_cache_publish_each_group_once(
    pyz: Path, bare_python: list[str], tmp_path: Path
) -> None:
    home = tmp_path / "race-home"
    procs = [
        subprocess.Popen(
            [*bare_python, "-c", PROBE, str(pyz)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=bare_env(home),
        )
        for _ in range(6)
    ]
    outcomes = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err[-3000:]
        outcomes.append(json.loads(out))
    for group in ("numpy", "pydantic_core", "tokenizers"):
        seen = [o[group] for o in outcomes]
        # Every process either wrote the group and won the rename, lost the rename and
        # discarded its copy, or found it published; exactly one won.
        assert seen.count("unpacked") == 1, seen
        assert set(seen) <= {"unpacked", "raced", "cached"}, seen
    assert unpacked_groups(home, pyz) == ["numpy", "pydantic_core", "tokenizers"]


PILLOW_PROBE = """
import base64, io, json, sys, zipfile
archive = sys.argv[1]
sys.path.insert(0, archive + "/site")
from lambo_core import zipapp_boot
manifest = json.loads(zipfile.ZipFile(archive).read("lambo_pyz.json"))
unpacker = zipapp_boot.install(archive, manifest)
from PIL import Image
from lambo_core.image_input import check_image
assert Image.__file__.startswith(str(unpacker.base)), Image.__file__
buf = io.BytesIO()
Image.new("RGB", (5, 3), (1, 2, 3)).save(buf, "WEBP")
data = base64.b64encode(buf.getvalue()).decode()
image = check_image("image", {"mime": "image/webp", "data": data})
print(json.dumps([image.width, image.height, unpacker.outcomes["pillow"]]))
"""


def test_pillow_is_a_native_group_that_decodes_images_from_the_archive(
    pyz: Path, bare_python: list[str], tmp_path: Path
) -> None:
    """Pillow's extensions (the WebP codec among them) are a native group of their own,
    unpacked on the first image a server checks, never at start."""
    assert "PIL" in manifest_of(pyz)["groups"]["pillow"]
    home = tmp_path / "pillow-home"
    out = subprocess.run(
        [*bare_python, "-c", PILLOW_PROBE, str(pyz)],
        capture_output=True,
        text=True,
        env=bare_env(home),
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout) == [5, 3, "unpacked"]


def other_pythons() -> list[str]:
    """Interpreters of another minor version: python3.N on PATH, and the siblings of this
    venv's base interpreter (a pyenv layout)."""
    found = [shutil.which(f"python3.{n}") for n in range(6, 16) if n != sys.version_info[1]]
    found += [str(p) for p in Path(sys.base_prefix).parent.glob("*/bin/python3")]
    works = []
    for cand in filter(None, found):
        try:
            out = subprocess.run(
                [cand, "-c", "import sys; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except OSError:
            continue
        if out.returncode == 0 and out.stdout.strip() != str(sys.version_info[:2]):
            works.append(cand)
    return works


def test_a_wrong_python_is_told_which_one_to_use(pyz: Path) -> None:
    manifest = manifest_of(pyz)
    assert manifest["archive"] == pyz.name
    other = {**manifest, "cache_tag": "cpython-399"}
    problem = zipapp_boot.incompatibility(other)  # type: ignore[arg-type]
    assert problem is not None and "built for cpython-399" in problem
    assert zipapp_boot.incompatibility(manifest) is None  # type: ignore[arg-type]
    wrong = other_pythons()
    if not wrong:
        pytest.skip("no Python of another version here to run the archive with")
    out = subprocess.run(
        [wrong[0], str(pyz), "serve", "--session", "s"], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 1
    assert out.stderr.startswith(f"lambo: this archive runs on CPython {sys.version_info[0]}.")
    assert "build_zipapp.py" in out.stderr


# --------------------------------------------------------------------------- the unpacker alone


@pytest.fixture
def tiny_archive(tmp_path: Path) -> Iterator[tuple[Path, zipapp_boot.Manifest]]:
    """A zip with one native group ``grp`` holding package ``tinypkg``, and a clean import
    system afterwards."""
    archive = tmp_path / "tiny.pyz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("native/grp/tinypkg/__init__.py", "VALUE = 42\n")
        zf.writestr("native/grp/tinypkg/data.txt", "beside the module\n")
        zf.writestr("native/grp/tinypkg.libs/libfake.so.1", b"\x7fELF")
    manifest: zipapp_boot.Manifest = {
        "format": 1,
        "build_id": "tinybuild",
        "version": "0",
        "cache_tag": sys.implementation.cache_tag,
        "platform": sys.platform,
        "machine": "any",
        "groups": {"grp": ["tinypkg", "tinypkg.libs"]},
        "triggers": {"tinypkg": "grp"},
    }
    saved_path, saved_meta = list(sys.path), list(sys.meta_path)
    yield archive, manifest
    sys.path[:] = saved_path
    sys.meta_path[:] = saved_meta
    sys.modules.pop("tinypkg", None)


def test_first_import_unpacks_the_group_under_lambo_home(
    tiny_archive: tuple[Path, zipapp_boot.Manifest], lambo_home: Path
) -> None:
    archive, manifest = tiny_archive
    unpacker = zipapp_boot.install(str(archive), manifest)
    assert unpacker.base == lambo_home / "cache" / "pyz" / "tinybuild"
    assert not unpacker.base.exists()
    import tinypkg  # type: ignore[import-not-found]

    assert tinypkg.VALUE == 42
    group_dir = lambo_home / "cache" / "pyz" / "tinybuild" / "grp"
    assert Path(tinypkg.__file__).parent == group_dir / "tinypkg"
    assert (group_dir / "tinypkg" / "data.txt").read_text() == "beside the module\n"
    assert (group_dir / "tinypkg.libs" / "libfake.so.1").exists()
    assert unpacker.outcomes == {"grp": "unpacked"}
    assert str(group_dir) in sys.path
    assert zipapp_boot.install(str(archive), manifest) is unpacker

    # A later process finds the directory and unpacks nothing.
    later = zipapp_boot.NativeUnpacker(str(archive), manifest, zipapp_boot.cache_root())
    assert later.ensure("grp") == group_dir
    assert later.outcomes == {"grp": "cached"}


def test_losing_the_rename_keeps_the_winner_and_drops_the_copy(
    tiny_archive: tuple[Path, zipapp_boot.Manifest], tmp_path: Path
) -> None:
    archive, manifest = tiny_archive
    unpacker = zipapp_boot.NativeUnpacker(str(archive), manifest, tmp_path / "cache")
    final = unpacker.ensure("grp")
    marker = final / "tinypkg" / "winner"
    marker.write_text("first")
    # Another process got there while this one was unpacking: its rename now fails.
    assert unpacker._unpack("grp", final) == "raced"
    assert marker.read_text() == "first"
    assert [p.name for p in unpacker.base.iterdir()] == ["grp"]


def test_an_upgrade_removes_builds_unused_for_a_month(
    tiny_archive: tuple[Path, zipapp_boot.Manifest], tmp_path: Path
) -> None:
    archive, manifest = tiny_archive
    root = tmp_path / "cache"
    old, recent = root / ("a" * 20), root / ("b" * 20)
    for build in (old, recent):
        (build / "numpy").mkdir(parents=True)
    (root / "not-a-build").mkdir()
    month = zipapp_boot.STALE_BUILD_AGE_S
    os.utime(old, (time.time() - month - 60,) * 2)
    os.utime(recent, (time.time() - month + 3600,) * 2)
    unpacker = zipapp_boot.NativeUnpacker(str(archive), manifest, root)
    unpacker.ensure("grp")
    assert unpacker.outcomes == {"grp": "unpacked"}
    assert sorted(p.name for p in root.iterdir()) == sorted(
        [recent.name, "not-a-build", "tinybuild"]
    )


def test_the_cache_is_lambos_own(lambo_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert zipapp_boot.cache_root() == lambo_home / "cache" / "pyz"
    monkeypatch.delenv("LAMBO_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(lambo_home / "xdg"))
    assert zipapp_boot.cache_root() == resolve_paths().cache_dir / "pyz"
    assert zipapp_boot.cache_root() == lambo_home / "xdg" / "lambo" / "pyz"


def test_members_outside_the_group_are_refused(tmp_path: Path) -> None:
    archive = tmp_path / "evil.pyz"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("native/grp/../../escape.py", "")
    manifest: zipapp_boot.Manifest = {
        "format": 1,
        "build_id": "evil",
        "version": "0",
        "cache_tag": sys.implementation.cache_tag,
        "platform": sys.platform,
        "machine": "any",
        "groups": {"grp": ["x"]},
        "triggers": {"x": "grp"},
    }
    unpacker = zipapp_boot.NativeUnpacker(str(archive), manifest, tmp_path / "cache")
    with pytest.raises(ImportError, match="refusing member path"):
        unpacker.ensure("grp")
    assert not (tmp_path / "escape.py").exists()
    assert os.listdir(unpacker.base) == []
