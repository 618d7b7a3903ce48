"""Which sessions the caller of one tool call may reach: its HTTP credential's ``sessions``.

An HTTP serve checks the session in the URL itself (404), but a layered session's tools
also reach its layers by ``scope``: a credential that does not reach a layer gets the same
refusal as for a scope that does not exist, and its merged recall reads only what it
reaches (spec: lambo_derive, "Writing to a layer"). The HTTP app puts the credential's
sessions in the request (``REACH_SCOPE_KEY``), the MCP server sets ``reaching`` around the
call, and the layered service reads ``reachable``; over a hub socket the reach travels in
the request's ``meta`` (``reach_meta``), so a forwarded call is narrowed alike. None means
every session (no credential, or ``sessions = ["*"]``), the default for stdio and the CLI.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

#: the ASGI scope key the HTTP app puts the credential's sessions under (a frozenset, or
#: None for every session)
REACH_SCOPE_KEY = "lambo.reach"
#: the key of a forwarded request's ``meta`` that carries them (a sorted list)
REACH_META_KEY = "reach"

_reach: ContextVar[frozenset[str] | None] = ContextVar("lambo_reach", default=None)


def current_reach() -> frozenset[str] | None:
    """The sessions this call may reach; None: every one."""
    return _reach.get()


@contextlib.contextmanager
def reaching(sessions: frozenset[str] | None) -> Iterator[None]:
    """Run the body of one call as a caller reaching only ``sessions`` (None: all)."""
    token = _reach.set(sessions)
    try:
        yield
    finally:
        _reach.reset(token)


def reachable(names: Sequence[str]) -> tuple[str, ...]:
    """``names`` less those this call may not reach, in their order."""
    reach = _reach.get()
    return tuple(names) if reach is None else tuple(n for n in names if n in reach)


def reach_of(value: object) -> frozenset[str] | None:
    """The reach a request carries (a set or a list of names), or None for every session.
    Anything malformed reaches nothing: a narrowing that cannot be read must not widen."""
    if value is None:
        return None
    if isinstance(value, (frozenset, set, list, tuple)):
        return frozenset(v for v in value if isinstance(v, str))
    return frozenset()


def reach_meta() -> dict[str, Any]:
    """The ``meta`` a forwarded call carries for this call's reach (empty: every session)."""
    reach = _reach.get()
    return {} if reach is None else {REACH_META_KEY: sorted(reach)}


def reach_in_meta(meta: object) -> frozenset[str] | None:
    """The reach a forwarded request's ``meta`` carries."""
    if not isinstance(meta, Mapping):
        return None
    return reach_of(meta.get(REACH_META_KEY))
