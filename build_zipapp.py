#!/usr/bin/env python3
"""Build dist/lambo-<version>-<python tag>-<platform>.pyz: lambo and every runtime dependency
in one file, for the Python and platform running this script.

    python build_zipapp.py               # build (dependencies staged once under build/zipapp/)
    python build_zipapp.py --if-stale    # keep dist/'s archive when it matches this checkout
    python build_zipapp.py --refresh     # resolve the dependencies from PyPI again

Then ``python3 dist/lambo-*.pyz serve --session s`` on any machine with that Python. The
layout (``site/`` for pure modules, ``native/<group>/`` unpacked on first import) is read by
lambo_core/zipapp_boot.py; why this and not shiv is in docs/design.md.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib.util
import io
import json
import marshal
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lambo_core.zipapp_boot import MANIFEST_NAME  # one name for the writer and the reader

ROOT = Path(__file__).resolve().parent
FORMAT = 1
# Entries carry a fixed timestamp, so the same inputs give the same bytes.
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
NATIVE_SUFFIXES = (".so", ".pyd", ".dylib")
# Never imported by a running lambo: console scripts and the packages' own test suites.
PRUNED_DIRS = {"__pycache__", "tests"}
STAGE_SKIP_TOP = {"bin", "__pycache__"}


def log(message: str) -> None:
    print(f"build_zipapp: {message}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------ what to build


def lambo_version(root: Path = ROOT) -> str:
    text = (root / "lambo_core" / "version.py").read_text()
    match = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not match:
        raise SystemExit("build_zipapp: no __version__ in lambo_core/version.py")
    return match.group(1)


def runtime_dependencies(root: Path = ROOT) -> list[str]:
    with (root / "pyproject.toml").open("rb") as f:
        return list(tomllib.load(f)["project"]["dependencies"])


def python_tag() -> str:
    return f"cp{sys.version_info.major}{sys.version_info.minor}"


def platform_tag() -> str:
    return re.sub(r"[-.]", "_", sysconfig.get_platform())


def archive_name(root: Path = ROOT) -> str:
    return f"lambo-{lambo_version(root)}-{python_tag()}-{platform_tag()}.pyz"


def _lambo_files(root: Path) -> list[Path]:
    return sorted(
        p
        for p in (root / "lambo_core").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    )


def source_fingerprint(root: Path = ROOT) -> str:
    """A hash of everything an archive is built from here: lambo_core, the dependency list,
    this script, and the interpreter's tag and platform."""
    h = hashlib.sha256()
    h.update(
        json.dumps([FORMAT, python_tag(), platform_tag(), runtime_dependencies(root)]).encode()
    )
    h.update(Path(__file__).read_bytes())
    for path in _lambo_files(root):
        h.update(path.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


def read_manifest(archive: Path) -> dict[str, Any]:
    with zipfile.ZipFile(archive) as zf:
        return dict(json.loads(zf.read(MANIFEST_NAME)))


def fresh_archive(out_dir: Path, root: Path = ROOT) -> Path | None:
    """The archive in ``out_dir`` when it was built from exactly this checkout, else None."""
    path = out_dir / archive_name(root)
    try:
        manifest = read_manifest(path)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return path if manifest.get("sources") == source_fingerprint(root) else None


# ------------------------------------------------------------------------------ staging


def stage_dependencies(stage_root: Path, deps: list[str], refresh: bool) -> Path:
    """``pip install --target`` the runtime dependencies once per (dependency list, Python,
    platform); later builds reuse the directory. Concurrent builds each install into a
    temporary directory and the first rename wins."""
    key = hashlib.sha256(
        json.dumps([deps, sys.implementation.cache_tag, sysconfig.get_platform()]).encode()
    ).hexdigest()[:12]
    stage = stage_root / f"stage-{python_tag()}-{platform_tag()}-{key}"
    if (stage / ".complete").exists() and not refresh:
        log(f"reusing the staged dependencies in {stage}")
        return stage
    stage_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".stage-", dir=stage_root))
    try:
        log(f"pip install --target {tmp.name}: {' '.join(deps)}")
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--target",
            str(tmp),
            "--only-binary=:all:",
            "--no-compile",
            "--disable-pip-version-check",
            "--quiet",
            *deps,
        ]
        subprocess.run(cmd, check=True)
        (tmp / ".complete").write_text(time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
        if stage.exists():
            shutil.rmtree(stage)
        try:
            os.replace(tmp, stage)
        except OSError:
            if not (stage / ".complete").exists():
                raise
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return stage


# ------------------------------------------------------------------------------ classifying


@dataclass
class Distribution:
    name: str
    version: str
    group: str
    files: set[str] = field(default_factory=set)


def _is_native(rel: str) -> bool:
    base = rel.rsplit("/", 1)[-1]
    return base.endswith(NATIVE_SUFFIXES) or ".so." in base


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def read_distributions(stage: Path) -> list[Distribution]:
    dists = []
    for info in sorted(stage.glob("*.dist-info")):
        meta = (info / "METADATA").read_text(encoding="utf-8", errors="replace")
        name = re.search(r"^Name: *(.+)$", meta, re.M)
        version = re.search(r"^Version: *(.+)$", meta, re.M)
        if not name or not version:
            raise SystemExit(f"build_zipapp: {info.name} has no Name/Version")
        dist = Distribution(name[1].strip(), version[1].strip(), _normalize(name[1].strip()))
        with (info / "RECORD").open(newline="", encoding="utf-8") as f:
            for row in csv.reader(f):
                if not row:
                    continue
                rel = row[0]
                top = rel.split("/", 1)[0]
                if rel.startswith(("..", "/")) or top in STAGE_SKIP_TOP or top == info.name:
                    continue
                dist.files.add(rel)
        dists.append(dist)
    return dists


def _pruned(rel: str) -> bool:
    parts = rel.split("/")
    return (
        parts[0] in STAGE_SKIP_TOP
        or any(p in PRUNED_DIRS for p in parts[1:-1])
        or rel.endswith((".pyc", ".pyo"))
    )


def _walk(base: Path) -> Iterator[str]:
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            yield Path(dirpath, name).relative_to(base).as_posix()


@dataclass
class Plan:
    site: list[tuple[str, Path]]  # (path under site/, file)
    native: dict[str, list[tuple[str, Path]]]  # group -> [(path under native/<group>/, file)]
    triggers: dict[str, str]
    groups: dict[str, list[str]]
    dependencies: list[str]


def plan(stage: Path, root: Path = ROOT) -> Plan:
    dists = read_distributions(stage)
    owner: dict[str, Distribution] = {}
    for dist in dists:
        for rel in dist.files:
            owner[rel] = dist
    native_groups = {
        dist.group: dist for dist in dists if any(_is_native(rel) for rel in dist.files)
    }
    site: list[tuple[str, Path]] = []
    native: dict[str, list[tuple[str, Path]]] = {g: [] for g in native_groups}
    for rel in _walk(stage):
        if rel == ".complete" or _pruned(rel):
            continue
        dist = owner.get(rel)
        if dist is not None and dist.group in native_groups:
            native[dist.group].append((rel, stage / rel))
        elif _is_native(rel):
            raise SystemExit(f"build_zipapp: {rel} is native but no distribution's RECORD lists it")
        else:
            site.append((rel, stage / rel))
    for path in _lambo_files(root):
        site.append((path.relative_to(root).as_posix(), path))

    regular_site_packages = {
        rel.split("/", 1)[0] for rel, _ in site if re.fullmatch(r"[^/]+/__init__\.py", rel)
    }
    triggers: dict[str, str] = {}
    groups: dict[str, list[str]] = {}
    for group, members in native.items():
        tops = sorted({rel.split("/", 1)[0] for rel, _ in members})
        groups[group] = tops
        for top in tops:
            if any(rel.startswith(top + "/") for rel, _ in members):
                name = top  # a package directory; numpy.libs and such are not importable
            elif top.endswith(".py") or _is_native(top):
                name = top.split(".", 1)[0]  # a top-level module
            else:
                continue
            if not name.isidentifier():
                continue
            if name in regular_site_packages:
                raise SystemExit(f"build_zipapp: {name} is both a pure and a native package")
            triggers[name] = group
    deps = sorted(f"{d.name}=={d.version}" for d in dists)
    return Plan(site, native, triggers, groups, deps)


# ------------------------------------------------------------------------------ writing


def pyc_bytes(source: bytes, filename: str) -> bytes | None:
    """An unchecked-hash .pyc (PEP 552): loaded without comparing timestamps or hashing the
    source, which a zip's fixed timestamps and a fresh unpack's new mtimes both need."""
    try:
        code = compile(source, filename, "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError):
        return None
    flags = (0b01).to_bytes(4, "little")  # hash-based, check_source off
    return (
        importlib.util.MAGIC_NUMBER
        + flags
        + importlib.util.source_hash(source)
        + marshal.dumps(code)
    )


class ArchiveWriter:
    def __init__(self, fp: io.BufferedWriter) -> None:
        self.zip = zipfile.ZipFile(fp, "w", zipfile.ZIP_DEFLATED)
        self.digest = hashlib.sha256()
        self.count = 0

    def add(self, arcname: str, data: bytes, mode: int = 0o644, hashed: bool = True) -> None:
        info = zipfile.ZipInfo(arcname, ZIP_DATE)
        info.external_attr = (0o100000 | mode) << 16
        info.compress_type = zipfile.ZIP_DEFLATED
        self.zip.writestr(info, data, compresslevel=6)
        if hashed:
            self.digest.update(arcname.encode() + b"\0" + hashlib.sha256(data).digest())
        self.count += 1

    def add_dir(self, arcname: str) -> None:
        info = zipfile.ZipInfo(arcname, ZIP_DATE)
        info.external_attr = (0o040755 << 16) | 0x10
        self.zip.writestr(info, b"")
        self.digest.update(arcname.encode() + b"\0")
        self.count += 1

    def close(self) -> None:
        self.zip.close()


def _mode(path: Path) -> int:
    return 0o755 if os.stat(path).st_mode & 0o111 else 0o644


def write_site(writer: ArchiveWriter, files: Iterable[tuple[str, Path]], display: str) -> int:
    """Pure modules under site/, each .py with its .pyc; dist-info directories at the archive's
    root, the only place importlib.metadata looks inside a zip on sys.path."""
    compiled = 0
    dirs: set[str] = set()
    for rel, path in files:
        data = path.read_bytes()
        if rel.split("/", 1)[0].endswith(".dist-info"):
            writer.add(rel, data)
            continue
        # zipimport finds a namespace package (opentelemetry, ...) only by its directory entry
        head = rel.rpartition("/")[0]
        while head and head not in dirs:
            dirs.add(head)
            writer.add_dir(f"site/{head}/")
            head = head.rpartition("/")[0]
        writer.add(f"site/{rel}", data, _mode(path))
        if rel.endswith(".py"):
            pyc = pyc_bytes(data, f"{display}/site/{rel}")
            if pyc is not None:
                writer.add(f"site/{rel}c", pyc)
                compiled += 1
    return compiled


def write_native(writer: ArchiveWriter, group: str, files: Iterable[tuple[str, Path]]) -> int:
    compiled = 0
    tag = sys.implementation.cache_tag
    for rel, path in files:
        data = path.read_bytes()
        writer.add(f"native/{group}/{rel}", data, _mode(path))
        if rel.endswith(".py"):
            pyc = pyc_bytes(data, rel)
            if pyc is not None:
                head, _, base = rel.rpartition("/")
                cached = f"{head}/__pycache__/" if head else "__pycache__/"
                writer.add(f"native/{group}/{cached}{base[:-3]}.{tag}.pyc", pyc)
                compiled += 1
    return compiled


MAIN_TEMPLATE = """\
# lambo {version}, built by build_zipapp.py: pure modules run from this archive; each
# distribution with a native extension is unpacked on first import into lambo's cache
# (<cache>/pyz/<build id>/), see lambo_core/zipapp_boot.py.
import os
import sys

# Checked before any import from the archive, in syntax any Python reads.
if sys.version_info[:2] != {version_info} or sys.implementation.cache_tag != {cache_tag!r}:
    sys.exit(
        "lambo: this archive runs on CPython {python}, not on Python %s; build one for "
        "this Python with build_zipapp.py" % sys.version.split()[0]
    )
ARCHIVE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(ARCHIVE, "site"))
MANIFEST = {manifest!r}

from lambo_core import zipapp_boot  # noqa: E402

if __name__ == "__main__":
    status = zipapp_boot.boot(ARCHIVE, MANIFEST)
    if status:
        sys.exit(status)
    from lambo_core.cli import main  # noqa: E402

    sys.exit(main())
"""


def lambo_metadata(version: str, deps: list[str]) -> bytes:
    lines = ["Metadata-Version: 2.1", "Name: lambo", f"Version: {version}"]
    lines += [f"Requires-Dist: {d}" for d in deps]
    return ("\n".join(lines) + "\n").encode()


def build(out_dir: Path, stage_root: Path, refresh: bool = False, root: Path = ROOT) -> Path:
    started = time.monotonic()
    version = lambo_version(root)
    deps = runtime_dependencies(root)
    name = archive_name(root)
    stage = stage_dependencies(stage_root, deps, refresh)
    layout = plan(stage, root)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / name
    fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=out_dir)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as fp:
            fp.write(b"#!/usr/bin/env python3\n")
            writer = ArchiveWriter(fp)
            writer.add(f"lambo-{version}.dist-info/METADATA", lambo_metadata(version, deps))
            compiled = write_site(writer, layout.site, name)
            for group in sorted(layout.native):
                compiled += write_native(writer, group, layout.native[group])
            build_id = writer.digest.hexdigest()[:20]
            boot = {
                "format": FORMAT,
                "build_id": build_id,
                "version": version,
                "cache_tag": sys.implementation.cache_tag,
                "platform": sys.platform,
                "machine": platform.machine(),
                "groups": layout.groups,
                "triggers": dict(sorted(layout.triggers.items())),
            }
            manifest = {
                **boot,
                "archive": name,
                "sources": source_fingerprint(root),
                "dependencies": layout.dependencies,
                "python": platform.python_version(),
            }
            writer.add(MANIFEST_NAME, json.dumps(manifest, indent=1).encode(), hashed=False)
            writer.add(
                "__main__.py",
                MAIN_TEMPLATE.format(
                    version=version,
                    manifest=boot,
                    cache_tag=sys.implementation.cache_tag,
                    version_info=tuple(sys.version_info[:2]),
                    python=f"{sys.version_info.major}.{sys.version_info.minor}",
                ).encode(),
                hashed=False,
            )
            writer.close()
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()
    size = target.stat().st_size
    log(
        f"{target} {size / 1e6:.1f} MB, {writer.count} entries ({compiled} precompiled), "
        f"build id {build_id}, native groups {', '.join(sorted(layout.native))}; "
        f"{time.monotonic() - started:.1f} s"
    )
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="default: dist/")
    parser.add_argument(
        "--stage", type=Path, default=ROOT / "build" / "zipapp", help="default: build/zipapp/"
    )
    parser.add_argument("--refresh", action="store_true", help="install the dependencies anew")
    parser.add_argument(
        "--if-stale", action="store_true", help="keep an archive built from this checkout"
    )
    args = parser.parse_args(argv)
    if args.if_stale and not args.refresh:
        existing = fresh_archive(args.out)
        if existing is not None:
            log(f"{existing} is up to date")
            print(existing)
            return 0
    print(build(args.out, args.stage, refresh=args.refresh))
    return 0


if __name__ == "__main__":
    sys.exit(main())
