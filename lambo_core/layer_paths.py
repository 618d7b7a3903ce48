"""A bare relative path refused in a write into a shared layer (issue #17).

The spec's "Writing to a layer" (lambo_derive): a layer such as general is shared by every
project, so README.md there would name a different file in each. A write into a layer refuses an
entry that is a bare relative path (``path_refs.is_relative_path``): any concept's content, a
parent_of end, and lambo_record_action's action text, produces, modifies and depends_on. A
derive's depends_on and against are references, which name existing concepts and create
nothing, so they are not checked. Under a repo_scope ("In a layer", Repository-scoped paths) an
entry the scope covers is let through, since it names one repository's file: every checked
field but the content of a concept that is not a resource, which is still refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ParameterError
from .path_refs import is_relative_path
from .text import show_safely

SHOWN_ENTRY_CHARS = 80
SHOWN_LAYER_CHARS = 80
FIX = "record file actions in the project's own session, use an absolute path, or send repo_scope"


def refuse_relative_path(field: str, entry: str, layer: str) -> ParameterError:
    shown = show_safely(entry, SHOWN_ENTRY_CHARS)
    where = show_safely(layer, SHOWN_LAYER_CHARS)
    return ParameterError(
        f'{field} "{shown}" is a relative path, refused in scope "{where}"; {FIX}; '
        "nothing was written"
    )


def _check(field: str, entry: str, layer: str, *, covered: bool) -> None:
    if not covered and is_relative_path(entry):
        raise refuse_relative_path(field, entry, layer)


def refuse_relative_in_derive(
    layer: str,
    repo: str | None,
    concepts: Sequence[Mapping[str, Any]],
    pairs: Sequence[Mapping[str, str]],
) -> None:
    """A lambo_derive into ``layer``: each concept's content, then each parent_of end."""
    for i, concept in enumerate(concepts):
        covered = repo is not None and concept["type"] == "resource"
        _check(f"concepts[{i}].content", concept["content"], layer, covered=covered)
    for i, pair in enumerate(pairs):
        for end in ("parent", "child"):
            _check(f"parent_of[{i}].{end}", pair[end], layer, covered=repo is not None)


def refuse_relative_in_action(
    layer: str, repo: str | None, action: str, targets: Mapping[str, Sequence[str]]
) -> None:
    """A lambo_record_action into ``layer``: its text, produces, modifies and depends_on."""
    covered = repo is not None
    _check("action", action, layer, covered=covered)
    for field in ("produces", "modifies", "depends_on"):
        for i, entry in enumerate(targets[field]):
            _check(f"{field}[{i}]", entry, layer, covered=covered)
