"""lambo_core's public surface: what ``__all__`` names resolves, cheaply and as documented."""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import lambo_core
from lambo_core import __all__ as PUBLIC

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", [n for n in PUBLIC if n != "__version__"])
def test_each_public_name_is_its_modules_own(name: str) -> None:
    value = getattr(lambo_core, name)
    defining = importlib.import_module(lambo_core._PUBLIC[name], "lambo_core")
    assert value is getattr(defining, name)
    assert name in dir(lambo_core)


def test_all_names_what_the_package_resolves() -> None:
    assert set(PUBLIC) == {"__version__", *lambo_core._PUBLIC}


def test_the_version_is_version_py_s() -> None:
    from lambo_core.version import __version__

    assert lambo_core.__version__ == __version__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'open_everything'"):
        _ = lambo_core.open_everything


def test_importing_the_package_loads_neither_numpy_nor_the_mcp_sdk() -> None:
    code = (
        "import sys, lambo_core; "
        "print(sorted(m for m in ('numpy', 'mcp', 'click') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert out.stdout.strip() == "[]"


def test_the_docstring_example_answers_a_recall() -> None:
    from lambo_core import ServeOptions, load_config, open_service, open_store, stop_service

    config = load_config()
    service = open_service(open_store("memory", None), config, ServeOptions(session="notes"))
    try:
        result = asyncio.run(
            service.call("lambo_recall", {"agent_id": "me", "query": "anything stored?"})
        )
        assert not result.is_error, result.texts
    finally:
        assert stop_service(service).clean
