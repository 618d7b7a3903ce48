"""CLI start: the wall time of ``lambo --version`` and ``lambo recall --help``, here and at
another commit.

Run by hand (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/cli_start.py [--runs 15] [--against 0194bfc] [--importtime]

- ``this checkout``: this venv's installed ``lambo`` console script.
- ``REF``: the same commands from a temporary ``git worktree`` of REF (default 0194bfc, the
  commit before issue #14's work), as ``python -m lambo_core`` with PYTHONPATH set to the
  worktree (REF's ``lambo.py`` when REF has no ``lambo_core/__main__.py``), same interpreter.

One untimed warm run of each command first (page cache, .pyc files); then the runs alternate
between the two trees so both see the same load on the machine. Prints the median of each
and the ratio REF / this checkout; asserts nothing. ``--importtime`` also prints the slowest
imports (``python -X importtime``, cumulative) of each command in this checkout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = (("--version",), ("recall", "--help"))
TIMEOUT_S = 60.0


@contextmanager
def worktree_at(ref: str) -> Iterator[Path]:
    """A detached worktree of ``ref`` under /tmp, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="lambo-cli-start-"))
    tree = where / "tree"
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), ref],
        check=True,
    )
    try:
        yield tree
    finally:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
        )
        shutil.rmtree(where, ignore_errors=True)


def installed_lambo() -> list[str]:
    script = Path(sys.executable).parent / "lambo"
    if not script.exists():
        raise SystemExit(f"no installed lambo next to {sys.executable}")
    return [str(script)]


def lambo_at(tree: Path) -> list[str]:
    if (tree / "lambo_core" / "__main__.py").is_file():
        return [sys.executable, "-m", "lambo_core"]
    return [sys.executable, str(tree / "lambo.py")]


def time_once(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        argv, env=env, cwd=cwd, capture_output=True, timeout=TIMEOUT_S, check=False
    )
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()}")
    return took


def slowest_imports(words: tuple[str, ...], env: dict[str, str], cwd: Path, top: int) -> list[str]:
    """This checkout's ``top`` imports by cumulative time for ``lambo WORDS``, slowest first."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "lambo_core", *words],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    rows: list[tuple[int, str]] = []
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative, name = line.removeprefix("import time:").split("|")
        rows.append((int(cumulative), name.rstrip()))
    rows.sort(reverse=True)
    return [f"{us / 1000:8.1f} ms {name}" for us, name in rows[:top]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--against", default="0194bfc", help="the git ref to compare with")
    parser.add_argument("--importtime", action="store_true", help="also list slow imports")
    args = parser.parse_args()

    here = installed_lambo()
    scratch = Path(tempfile.mkdtemp(prefix="lambo-cli-start-home-"))
    # No lambo.toml, no LAMBO_* of the shell: both trees start the same way.
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("LAMBO_", "PYTHON"))}
    base_env["LAMBO_HOME"] = str(scratch / "home")
    try:
        with worktree_at(args.against) as tree:
            there = lambo_at(tree)
            there_env = {**base_env, "PYTHONPATH": str(tree)}
            print(f"this checkout: {' '.join(here)}")
            print(f"{args.against}: {' '.join(there)} (PYTHONPATH={tree})")
            print(f"runs: {args.runs} each, after one warm run")
            for words in COMMANDS:
                time_once([*here, *words], base_env, scratch)
                time_once([*there, *words], there_env, scratch)
                ours: list[float] = []
                theirs: list[float] = []
                for _ in range(args.runs):
                    ours.append(time_once([*here, *words], base_env, scratch))
                    theirs.append(time_once([*there, *words], there_env, scratch))
                mine, old = statistics.median(ours), statistics.median(theirs)
                print(
                    f"lambo {' '.join(words):<14} this checkout {mine * 1000:6.0f} ms   "
                    f"{args.against} {old * 1000:6.0f} ms   ratio {old / mine:4.2f}x"
                )
            if args.importtime:
                for words in COMMANDS:
                    print(f"\nslowest imports of `lambo {' '.join(words)}` (cumulative):")
                    for row in slowest_imports(words, base_env, scratch, 12):
                        print(f"  {row}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
