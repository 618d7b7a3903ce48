"""A call's reach (the sessions its HTTP credential reaches): set around one call, read by
the layered service, carried over a hub socket in the request's meta, and never widened by a
value that cannot be read."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

from lambo_core.hub.forwarder import Forwarder
from lambo_core.hub.server import HubServer
from lambo_core.reach import (
    current_reach,
    reach_in_meta,
    reach_meta,
    reach_of,
    reachable,
    reaching,
)


def test_reachable_keeps_the_order_and_drops_what_is_not_reached() -> None:
    assert current_reach() is None
    assert reachable(("general", "team")) == ("general", "team")
    with reaching(frozenset({"team", "a"})):
        assert reachable(("general", "team")) == ("team",)
        with reaching(None):  # an inner call reaching everything (not narrower: its own)
            assert reachable(("general", "team")) == ("general", "team")
        assert current_reach() == frozenset({"team", "a"})
    assert current_reach() is None  # reset after the call, even between calls of one task


def test_reaching_is_reset_when_the_call_raises() -> None:
    with pytest.raises(RuntimeError), reaching(frozenset()):
        raise RuntimeError
    assert current_reach() is None


@pytest.mark.parametrize(
    ("value", "reach"),
    [
        (None, None),
        (frozenset({"a"}), frozenset({"a"})),
        (["a", "general"], frozenset({"a", "general"})),
        (["a", 3, None], frozenset({"a"})),
        ("a", frozenset()),  # a string is no list of names: reaches nothing
        ({"a": 1}, frozenset()),
        (7, frozenset()),
    ],
)
def test_a_reach_that_cannot_be_read_reaches_nothing(
    value: object, reach: frozenset[str] | None
) -> None:
    assert reach_of(value) == reach


def test_the_meta_round_trip() -> None:
    assert reach_meta() == {}
    assert reach_in_meta({}) is None
    assert reach_in_meta(None) is None
    with reaching(frozenset({"b", "a"})):
        assert reach_meta() == {"reach": ["a", "b"]}
        assert reach_in_meta(reach_meta()) == frozenset({"a", "b"})
    assert reach_in_meta({"reach": "a"}) == frozenset()


def test_a_forwarded_call_is_narrowed_as_where_it_came_in() -> None:
    root = Path(tempfile.mkdtemp(dir="/tmp", prefix="lr-"))
    seen: list[frozenset[str] | None] = []

    async def handler(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        seen.append(current_reach())
        return {"content": [{"type": "text", "text": "ok"}], "isError": False}

    async def main() -> None:
        path = root / "h.sock"
        server = HubServer(handler, path)
        await server.start()
        forwarder = Forwarder(path)
        try:
            await forwarder.call("t", {})
            with reaching(frozenset({"a"})):
                await forwarder.call("t", {}, reach_meta())
            await forwarder.call("t", {}, {"reach": []})
        finally:
            await forwarder.close()
            await server.close()

    try:
        asyncio.run(asyncio.wait_for(main(), 20))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    assert seen == [None, frozenset({"a"}), frozenset()]
