"""A serve's side of ``--ledger``: the line of each call it answers, and its heartbeats.

The lines themselves are ``ledger_lines``'; the file is ``ledger_writer``'s, which never
lets a line delay a call. Spec: lambo_stats (the ``ledger_*`` keys, promotion_policy on
every heartbeat line).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

import anyio
import anyio.to_thread

from .ledger_lines import call_line, heartbeat_line
from .ledger_writer import LedgerWriter


class LedgeredServe(Protocol):
    """What the heartbeats read of a serve (``serve.Serve``)."""

    ledger: LedgerWriter | None
    hub: Any  # its role: hub, forwarder or electing
    options: Any  # its session

    @property
    def serving(self) -> bool: ...

    @property
    def service(self) -> Any: ...

    async def joined(self) -> None: ...


log = logging.getLogger(__name__)

#: how long a stopping serve gives its ledger to write what is queued
LEDGER_CLOSE_BUDGET_S = 2.0


def record_call(
    ledger: LedgerWriter,
    session: str,
    tool: str,
    arguments: object,
    answer: dict[str, Any],
    started: float,
    private: object = None,
) -> None:
    """Queue the line of one call answered (``started``: its monotonic start; ``private``:
    the answer's ledger part, ``service.LEDGER_KEY``, already popped from it)."""
    line = call_line(
        session=session,
        tool=tool,
        arguments=arguments,
        answer=answer,
        private=private,
        ms=(time.monotonic() - started) * 1000,
        at=time.time(),
    )
    ledger.append(session, line)


async def record_heartbeat(serve: LedgeredServe, ledger: LedgerWriter) -> None:
    """One heartbeat line: the lambo_stats payload where ``serve`` holds its session, else
    its role and its ledger's counts."""
    session = serve.options.session
    service = serve.service if serve.serving else None
    stats: dict[str, Any] = {}
    if service is not None:
        stats = await anyio.to_thread.run_sync(service.stats_payload)
    stats.update(ledger.stats_keys(session))
    line = heartbeat_line(session=session, role=serve.hub.role, stats=stats, at=time.time())
    ledger.append(session, line)


async def heartbeats(serves: Sequence[LedgeredServe], interval_s: float, stop: anyio.Event) -> None:
    """A heartbeat line per served session once it has joined its session, then every
    ``interval_s`` until ``stop``."""
    for serve in serves:
        await serve.joined()
    while not stop.is_set():
        for serve in serves:
            if serve.ledger is None:
                continue
            try:
                await record_heartbeat(serve, serve.ledger)
            except Exception:  # a heartbeat is never worth a serve
                log.exception("session %s: the ledger heartbeat failed", serve.options.session)
        with anyio.move_on_after(interval_s):
            await stop.wait()
