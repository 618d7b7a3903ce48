"""The test environment stays sealed: conftest clears every variable lambo reads.

conftest clears every ``LAMBO_*`` and a short list of foreign variables. These tests fail when
the code starts reading a variable that neither covers, so the list cannot drift again.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

from lambo_core.config_schema import KEYS
from tests.conftest import FOREIGN_VARIABLES, inherited_variables

ROOT = Path(__file__).resolve().parents[1]


def _reads_environment(receiver: ast.expr) -> bool:
    # env.get, os.environ.get, self._env.get, (os.environ if env is None else env).get ...
    return "env" in ast.unparse(receiver).lower()


def variables_read(source: str) -> Iterator[str]:
    """Names read as ``<env>.get("X")``, ``<env>["X"]``, ``os.getenv("X")`` in one module."""
    for node in ast.walk(ast.parse(source)):
        key: ast.expr | None = None
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "get":
                key = node.args[0] if _reads_environment(func.value) else None
            elif isinstance(func, ast.Attribute | ast.Name) and ast.unparse(func).endswith(
                "getenv"
            ):
                key = node.args[0]
        elif isinstance(node, ast.Subscript) and _reads_environment(node.value):
            key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            yield key.value


def test_variables_read_finds_each_way_of_reading() -> None:
    source = (
        "import os\n"
        "a = os.environ.get('A_ONE')\n"
        "b = env['B_TWO']\n"
        "c = os.getenv('C_THREE')\n"
        "d = (os.environ if env is None else env).get('D_FOUR')\n"
        "e = headers.get('Content-Range')\n"
    )
    assert sorted(variables_read(source)) == ["A_ONE", "B_TWO", "C_THREE", "D_FOUR"]


def test_every_variable_lambo_core_reads_is_cleared_for_tests() -> None:
    read = {
        (name, str(path.relative_to(ROOT)))
        for path in sorted((ROOT / "lambo_core").rglob("*.py"))
        for name in variables_read(path.read_text(encoding="utf-8"))
    }
    uncovered = sorted(
        (name, where)
        for name, where in read
        if not name.startswith("LAMBO_") and name not in FOREIGN_VARIABLES
    )
    assert not uncovered, "add these to conftest.FOREIGN_VARIABLES: " + repr(uncovered)
    assert {name for name, _ in read} >= {"LAMBO_HOME", "XDG_RUNTIME_DIR"}  # the scan sees reads


def test_every_config_key_has_a_lambo_variable() -> None:
    assert [k.env for k in KEYS if k.env and not k.env.startswith("LAMBO_")] == []


def test_the_fixture_clears_every_lambo_variable_of_the_shell() -> None:
    shell = {"LAMBO_HUB_URL": "x", "LAMBO_SOMETHING_NEW": "y", "PATH": "/bin", "HOME": "/h"}
    assert inherited_variables(shell) == sorted(
        ["LAMBO_HUB_URL", "LAMBO_SOMETHING_NEW", *FOREIGN_VARIABLES]
    )


def test_a_test_starts_with_only_its_own_lambo_home(lambo_home: Path) -> None:
    assert {k: v for k, v in os.environ.items() if k.startswith("LAMBO_")} == {
        "LAMBO_HOME": str(lambo_home)
    }
    assert all(name not in os.environ for name in FOREIGN_VARIABLES)
