"""The web API's query parameters, checked: each refusal names the parameter and its rule and
never repeats what was sent (it may be anything a browser or a script put in a URL)."""

from __future__ import annotations

from collections.abc import Collection, Mapping

from ..errors import ParameterError
from ..inspect import DEPTH_RANGE
from ..recall.request import TOP_K_RANGE

TEXT_MAX_CHARS = 2000  # q and focus


def check_known(params: Mapping[str, str], endpoint: str, known: Collection[str]) -> None:
    """Refuse a parameter the endpoint does not take (named by the list of those it does)."""
    if any(name not in known for name in params):
        takes = ", ".join(known) if known else "no parameters"
        raise ParameterError(f"{endpoint} takes {takes}; another parameter was sent")


def optional_text(params: Mapping[str, str], name: str) -> str | None:
    """A text that may be left out (None), else as ``text_param`` checks it."""
    return text_param(params, name) if name in params else None


def text_param(params: Mapping[str, str], name: str) -> str:
    """A required text: 1..=TEXT_MAX_CHARS characters, no control characters."""
    value = params.get(name)
    if value is None or not value.strip():
        raise ParameterError(f"{name} is required: a text of 1..={TEXT_MAX_CHARS} characters")
    if len(value) > TEXT_MAX_CHARS or not all(ch.isprintable() or ch == " " for ch in value):
        raise ParameterError(
            f"{name} must be a text of 1..={TEXT_MAX_CHARS} characters without control characters"
        )
    return value.strip()


def int_param(
    params: Mapping[str, str], name: str, bounds: tuple[int, int | None], default: int | None
) -> int | None:
    """An optional integer within ``bounds`` (an upper bound of None: none)."""
    low, high = bounds
    rule = f"{low}..={high}" if high is not None else f">= {low}"
    value = params.get(name)
    if value is None:
        return default
    text = value.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 20:
        raise ParameterError(f"{name} must be an integer {rule}")
    number = int(text)
    if number < low or (high is not None and number > high):
        raise ParameterError(f"{name} must be an integer {rule}")
    return number


def top_k_param(params: Mapping[str, str]) -> int | None:
    return int_param(params, "top_k", TOP_K_RANGE, None)


def depth_param(params: Mapping[str, str], default: int) -> int:
    found = int_param(params, "depth", DEPTH_RANGE, default)
    assert found is not None
    return found


def since_param(params: Mapping[str, str]) -> int | None:
    return int_param(params, "since", (0, None), None)
