"""Startup: from spawn to an answered ``tools/list``, through the installed command and the .pyz.

Run by hand (pytest does not collect tests/bench):

    /work/venv/bin/python tests/bench/startup.py [--runs 7] [--json]

One LAMBO_HOME under /tmp with the real MiniLM imported and configured (so the model loads
in the background exactly as in use). Each run spawns ``... serve --session <fresh>``, sends
``initialize``, ``notifications/initialized`` and ``tools/list`` as raw JSON-RPC lines and
stops the clock when the tools/list answer arrives; then EOF on stdin and a wait for the exit.
Warm: one untimed run of each kind first, so the interpreter, the venv and the archive are
in the page cache.

Rows:

- ``installed lambo``: this venv's ``lambo`` console script.
- ``.pyz, first run``: the archive with an empty extraction cache (``<LAMBO_HOME>/cache/pyz``
  removed before each run), so it unpacks what the start imports (numpy, pydantic_core, ...)
  before answering; onnxruntime and tokenizers unpack on the model-loading thread.
- ``.pyz, later runs``: the cache in place.

The .pyz runs under a Python without lambo's dependencies (/usr/bin/python3.11 when it
qualifies, else this interpreter with ``-I -S``). The archive is dist/'s when it was built from
this checkout, else built first (build_zipapp.py --if-stale). Target: median <= 1.5 s for
the installed command and for later .pyz runs. Prints medians; asserts nothing.
``--json`` prints the same numbers as one JSON object (tests/bench/report.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench._serve import make_home  # noqa: E402

TIMEOUT_S = 120.0


def build_archive() -> Path:
    out = subprocess.run(
        [sys.executable, str(ROOT / "build_zipapp.py"), "--if-stale"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def bare_python(cache_tag: str) -> list[str]:
    probe = "import sys; print(sys.implementation.cache_tag); import numpy"
    minor = cache_tag.removeprefix("cpython-")
    for cand in (f"/usr/bin/python{minor[0]}.{minor[1:]}", "/usr/bin/python3"):
        if not Path(cand).exists():
            continue
        out = subprocess.run([cand, "-c", probe], capture_output=True, text=True)
        if out.stdout.strip() == cache_tag and "No module named 'numpy'" in out.stderr:
            return [cand]
    return [sys.executable, "-I", "-S"]


def env_for(home: Path) -> dict[str, str]:
    return {
        "PATH": "/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "LAMBO_HOME": str(home),
        "LAMBO_LOG": "WARNING",
    }


class Lines:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.fd = proc.stdout.fileno()
        self.buf = bytearray()

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def answer(self, request_id: int) -> dict[str, Any]:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            end = self.buf.find(b"\n")
            if end >= 0:
                line = bytes(self.buf[:end])
                del self.buf[: end + 1]
                message = json.loads(line)
                if message.get("id") == request_id:
                    return dict(message)
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"no answer to request {request_id} in {TIMEOUT_S:.0f} s")
            if select.select([self.fd], [], [], left)[0]:
                chunk = os.read(self.fd, 1 << 16)
                if not chunk:
                    raise RuntimeError("the serve closed its stdout")
                self.buf += chunk


def time_to_tools_list(argv: list[str], home: Path, session: str) -> float:
    """Seconds from spawn to the answer of tools/list; the process is stopped afterwards."""
    log = (home / f"{session}.stderr").open("wb")
    began = time.perf_counter()
    proc = subprocess.Popen(
        [*argv, "serve", "--session", session],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env=env_for(home),
        cwd=home,
    )
    try:
        lines = Lines(proc)
        lines.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "startup-bench", "version": "1"},
                },
            }
        )
        lines.answer(1)
        lines.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        lines.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}})
        reply = lines.answer(2)
        elapsed = time.perf_counter() - began
        assert len(reply["result"]["tools"]) == 8, reply
        return elapsed
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def dir_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description="spawn -> tools/list, installed and .pyz")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the table"
    )
    args = parser.parse_args()

    pyz = build_archive()
    import zipfile

    with zipfile.ZipFile(pyz) as zf:
        manifest = json.loads(zf.read("lambo_pyz.json"))
    python = bare_python(manifest["cache_tag"])
    installed = Path(sys.executable).parent / "lambo"
    if not installed.exists():
        raise SystemExit(f"no installed lambo next to {sys.executable}")

    load_before = os.getloadavg()[0]
    tmp = Path(tempfile.mkdtemp(prefix="lambo-bench-startup-"))
    try:
        home = make_home(tmp)
        cache = home / "cache" / "pyz"
        counter = iter(range(1_000_000))

        def run(argv: list[str], fresh_cache: bool) -> float:
            if fresh_cache:
                shutil.rmtree(cache, ignore_errors=True)
            return time_to_tools_list(argv, home, f"startup-{next(counter)}")

        kinds: list[tuple[str, list[str], bool]] = [
            ("installed lambo", [str(installed)], False),
            (".pyz, first run (empty cache)", [*python, str(pyz)], True),
            (".pyz, later runs", [*python, str(pyz)], False),
        ]
        for _, argv, fresh in kinds:  # warm the page cache, untimed
            run(argv, fresh)
        samples: dict[str, list[float]] = {name: [] for name, _, _ in kinds}
        for _ in range(args.runs):  # interleaved, so drift hits every kind alike
            for name, argv, fresh in kinds:
                samples[name].append(run(argv, fresh))
        shutil.rmtree(cache, ignore_errors=True)
        run([*python, str(pyz)], True)
        at_start = dir_mb(cache)
        unpacked = sorted(p.name for p in next(cache.iterdir()).iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    load_after = os.getloadavg()[0]

    if args.json:
        summary = {
            name: {
                "median_s": statistics.median(v),
                "min_s": min(v),
                "max_s": max(v),
                "runs": len(v),
            }
            for name, v in samples.items()
        }
        print(
            json.dumps(
                {
                    "installed": summary["installed lambo"],
                    "pyz_first": summary[".pyz, first run (empty cache)"],
                    "pyz_later": summary[".pyz, later runs"],
                    "archive": str(pyz.relative_to(ROOT)),
                    "archive_mb": pyz.stat().st_size / 1e6,
                    "unpacked_mb": at_start,
                    "pyz_python": " ".join(python),
                    "load": [load_before, load_after],
                }
            )
        )
        return 0

    print(f"startup: spawn -> tools/list answered, warm, {args.runs} runs each (LAMBO_HOME with")
    print(f"MiniLM configured; the model loads in the background); {os.cpu_count()} CPUs,")
    print("load average before/after: " + " / ".join(f"{a:.2f}" for a in (load_before, load_after)))
    print()
    print("| how | median | min | max |")
    print("|---|---:|---:|---:|")
    for name, values in samples.items():
        print(
            f"| {name} | {statistics.median(values):.2f} s | {min(values):.2f} s "
            f"| {max(values):.2f} s |"
        )
    print()
    print(f"archive: {pyz.relative_to(ROOT)}, {pyz.stat().st_size / 1e6:.1f} MB")
    print(f"unpacked by one run (start + model load): {', '.join(unpacked)}; {at_start:.0f} MB")
    print(f".pyz interpreter: {' '.join(python)}; installed: {installed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
