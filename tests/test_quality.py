"""ruff and mypy are part of the test suite, so one command checks everything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_ruff_lint() -> None:
    out = _run("ruff", "check", "lambo_core", "tests", "lambo.py")
    assert out.returncode == 0, out.stdout + out.stderr


def test_ruff_format() -> None:
    out = _run("ruff", "format", "--check", "lambo_core", "tests", "lambo.py")
    assert out.returncode == 0, out.stdout + out.stderr


def test_mypy_strict_on_lambo_core_and_checked_on_tests() -> None:
    out = _run("mypy")  # pyproject: lambo_core strict, tests with check_untyped_defs
    assert out.returncode == 0, out.stdout + out.stderr
