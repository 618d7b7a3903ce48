"""A one-shot command and a holder that does not answer: it waits a bounded time, takes a
lease that comes free, and otherwise refuses saying what it found (issue #13, item 7)."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from lambo_core import client
from lambo_core.config import load_config
from lambo_core.errors import ConflictError
from lambo_core.hub import this_host
from lambo_core.model import Lease
from lambo_core.store import SqliteStore

S = "held"


def _config(tmp_path: Path) -> Any:
    (tmp_path / "lambo.toml").write_text(
        f'[store]\npath = "{tmp_path / "c.db"}"\n[embedder]\nkind = "none"\n'
    )
    return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)


def _hold(path: Path, socket: str | None) -> SqliteStore:
    """A live holder's lease (this process's pid under another holder name: alive, and
    not this command's), recording ``socket``."""
    store = SqliteStore(path)
    now = 2e9  # far ahead of the clock: live for the whole test
    held = store.acquire_lease(
        Lease(S, f"other@{this_host()}#{os.getpid()}", os.getpid(), "other", now, now, now + 45, 0),
        0.0,
    )
    assert held is not None
    if socket is not None:
        assert store.record_lease_socket(S, held.token, socket)
    return store


async def _run(config: Any) -> dict[str, Any]:
    async with client.open_client(config, S, "shell") as call:
        return await call("lambo_stats", {"agent_id": "shell"})


@pytest.mark.parametrize(
    ("socket", "says"),
    [
        (None, "which published no socket within 0.2 s: a lambo serve still opening the "
               "session, or another lambo command using it; try again once it answers or exits"),
        ("", "which publishes no socket (its log says why), so a command cannot reach it; stop "
             "that serve, or give it a socket directory it can use, to run commands against "
             "this session"),
    ],
)  # fmt: skip
def test_a_holder_that_never_answers_is_refused_after_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, socket: str | None, says: str
) -> None:
    monkeypatch.setattr(client, "HUB_START_WAIT_S", 0.2)
    config = _config(tmp_path)
    holder = _hold(config.store_path, socket)
    try:
        with pytest.raises(ConflictError) as refused:
            asyncio.run(_run(config))
    finally:
        holder.close()
    text = refused.value.render()
    assert text.startswith(f"conflict: session '{S}' is held by other@{this_host()}#{os.getpid()} ")
    assert text.endswith(f", {says}; nothing was read or written"), text


def test_a_lease_that_comes_free_during_the_wait_is_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="lambo_core.client")
    monkeypatch.setattr(client, "HUB_START_WAIT_S", 30.0)  # a failure bound: freed long before
    config = _config(tmp_path)
    holder = _hold(config.store_path, None)

    async def scenario() -> dict[str, Any]:
        command = asyncio.create_task(_run(config))
        while "waiting up to 30 s for its holder" not in caplog.text:  # it found it held
            assert not command.done(), command
            await asyncio.sleep(0.01)
        lease = holder.get_lease(S)
        assert lease is not None
        holder.release_lease(S, lease.token)  # the other command finished
        return await command

    try:
        answered = asyncio.run(scenario())
    finally:
        holder.close()
    assert not answered["isError"], answered
    after = SqliteStore(config.store_path)
    try:
        lease = after.get_lease(S)
    finally:
        after.close()
    assert lease is not None and lease.holder.startswith("shell@") and lease.expires_at == 0.0
