"""A repo_scope in a write's payload, and in the durable intent that stores it (issue #17).

The spec's "After a restart" (lambo_derive, "Repository-scoped paths"): a scoped write still
waiting when a session closes is replayed under its scope by the next serve. Its payload is
wrapped, ``{"kind": "repo_scoped", "repo_scope": ..., "write": <the derive or action>}``, so a
build older than this one, which knows only the kinds derive and action, fails the row rather
than replay it as an unscoped path. At replay the stored scope is only checked to be nonempty;
a row this build cannot replay (an empty scope, a malformed wrapper, a kind it does not know)
settles failed with the reason. Once settled, the stored row keeps the write without its
scope (``settled_form``), so an older build can still load the session.

A payload without a scope is stored exactly as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import StoreError
from .repo_scope import check_repo_scope

SCOPED_KIND = "repo_scoped"
WRITE_KINDS = ("derive", "action", "derive_image")
NOTHING_WRITTEN = "; nothing was written"


def admitted_repo_scope(call: Mapping[str, Any]) -> str | None:
    """The call's repo_scope, trimmed and NFC, refused before the ack (repo_scope.py);
    None when omitted or null (null is omitted, as for scope)."""
    value = call.get("repo_scope")
    return None if value is None else check_repo_scope("repo_scope", value)


def scoped_payload(payload: dict[str, Any], repo: str | None) -> dict[str, Any]:
    """``payload`` as admission hands it to the intent: wrapped under a scope, else as is."""
    if repo is None:
        return payload
    return {"kind": SCOPED_KIND, "repo_scope": repo, "write": payload}


def opened(payload: Mapping[str, Any]) -> dict[str, Any]:
    """The write a stored payload holds, with ``repo_scope`` set when it is scoped, or
    ``StoreError`` naming why this build cannot apply it (the write settles failed)."""
    kind = payload.get("kind")
    if kind in WRITE_KINDS:
        return dict(payload)
    if kind != SCOPED_KIND:
        raise unknown_kind(kind)
    repo = payload.get("repo_scope")
    write = payload.get("write")
    if not isinstance(repo, str) or not repo.strip():
        raise StoreError(
            "this write's stored repo_scope is empty, so it cannot be replayed under its "
            "repository" + NOTHING_WRITTEN
        )
    if not isinstance(write, dict) or write.get("kind") not in WRITE_KINDS:
        raise StoreError(
            "this write's stored repo_scope wrapper is malformed (it holds no derive or "
            "action), so it cannot be replayed" + NOTHING_WRITTEN
        )
    return {**write, "repo_scope": repo}


def unknown_kind(kind: object) -> StoreError:
    shown = kind if isinstance(kind, str) and len(kind) <= 40 else type(kind).__name__
    return StoreError(
        f"this write was stored in a form this build cannot apply (kind {shown!r}), so it "
        "was not applied" + NOTHING_WRITTEN
    )


def settled_form(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a settled intent stores in place of a scoped payload: the write without its
    scope; None when the payload carries no scope (the row is left as it is)."""
    if payload.get("kind") != SCOPED_KIND:
        return None
    write = payload.get("write")
    return dict(write) if isinstance(write, dict) else {}
