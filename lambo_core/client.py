"""Tool calls from a shell command: forwarded to the session's hub, or served locally.

With a serve holding the session the command forwards to it; otherwise it takes the
lease, answers the call itself, waits for the writes it admitted and gives the lease
back. A holder that does not answer yet is waited for up to ``HUB_START_WAIT_S``.
Spec: "More than one client on one machine".
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import shlex
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.to_thread

from .admin_tools import ADMIN_TOOLS, answer_admin
from .config import Config
from .embed.loader import LoadedModels
from .errors import ConflictError, ErrorKind, LamboError
from .hub import (
    Forwarder,
    LeaseKeeper,
    WarnOnce,
    connect_to_hub,
    held_on_another_host,
    holder_dead_here,
    holder_description,
    lease_free,
    other_host_refusal,
)
from .layers.handle import LayerHandle
from .limits import WAIT_MS_MAX
from .model import Lease
from .serve import (
    ServeOptions,
    attach_layers,
    lease_ttl,
    open_service,
    shutdown_budget,
    stop_service,
)
from .service import LEDGER_KEY, MemoryService
from .store import open_config_store, open_store, store_location
from .store.base import Store
from .store.sqlite import read_lease
from .text import show_safely

log = logging.getLogger(__name__)

Call = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

# Tools whose answer depends on the embedding model: a one-shot call waits for it to
# load (a serve's recall waits a bounded time; the one-shot process has nothing else to do).
_USES_MODEL = frozenset({"lambo_recall"})
_WRITES = frozenset({"lambo_derive", "lambo_record_action"})
#: how long a command waits for a live holder of the lease that does not answer yet
HUB_START_WAIT_S = 10.0
HUB_POLL_S = 0.1


class NotRun(LamboError):
    """A call the CLI refuses to make on its own (nothing was read, written or created).

    Told in the CLI's words without a class prefix: the session is not in the
    store, or the call needs a serve that is not running.
    """

    kind = ErrorKind.CONFLICT  # a run-time refusal, not a bad flag: the CLI exits 1

    def render(self) -> str:
        return self.message


def _shown(session: str) -> str:
    return f"'{show_safely(session, 64)}'"


def _missing(config: Config, session: str, session_list: str) -> NotRun:
    if config.store_kind == "memory":
        where = "a memory store, which starts empty for every command"
    elif config.store_kind != "sqlite" or config.store_path.is_file():
        where = f"the store {store_location(config)}"
    else:
        where = f"the store {config.store_path}, which does not exist yet"
    return NotRun(
        f"no session named {_shown(session)} in {where}; nothing was read, and nothing was "
        f"created; `{session_list}` lists the sessions a store has"
    )


@asynccontextmanager
async def open_client(
    config: Config,
    session: str,
    agent: str,
    *,
    creates: bool = True,
    needs_serve: bool = False,
    session_list: str = "lambo session list",
    serve_command: str | None = None,
    layers: tuple[str, ...] = (),
) -> AsyncIterator[Call]:
    """A ``call(tool, arguments) -> CallToolResult JSON`` bound to ``session``.

    ``creates``: a write opens the session, creating it on its first write; a read
    (False) refuses a session the store does not have. ``needs_serve``: the call is
    made only through the serve that holds the session (a lock lives there).
    ``session_list`` and ``serve_command`` are the commands a refusal points to,
    written by the caller with its own flags. ``layers``: the session's layers, attached
    when the command serves the session itself (a serve that holds it has its own).
    """
    sqlite = config.store_kind == "sqlite"
    if not creates and not needs_serve and sqlite and not config.store_path.is_file():
        raise _missing(config, session, session_list)  # before anything could create the file
    # a store other processes share (a file, a database server): its hub may hold it
    shared = _SharedStore(config, session) if config.store_kind != "memory" else None
    deadline = time.monotonic() + HUB_START_WAIT_S
    try:
        while shared is not None:
            forwarder = await _hub_or_free_lease(config, shared, deadline)
            if forwarder is not None:
                try:
                    yield _public(forwarder.call)
                finally:
                    await forwarder.close()
                return
            if needs_serve:
                break
            store = shared.open()
            if not creates and store.get_session(session) is None:
                raise _missing(config, session, session_list)
            keeper = _keeper(store, config, session, agent)
            if keeper.try_acquire() is not None:
                async with _served_locally(store, config, keeper, layers) as call:
                    yield call
                return
            # another command took the lease between the look and the take: wait for it too
            if time.monotonic() >= deadline:
                raise _not_answering(session, shared.lease())
    finally:
        if shared is not None:
            shared.close()
    if needs_serve:
        serve = serve_command or shlex.join(["lambo", "serve", "--session", session])
        raise NotRun(
            f"no lambo serve holds session {_shown(session)}, and locks live in the serve "
            "that holds a session: a lock taken by this command would end with it, so "
            f"nothing was locked or released; start `{serve}` (an agent's MCP client runs "
            "one) and run this again while it runs, or use lambo_reserve from the agent"
        )
    store = open_store(config.store_kind, None)  # a memory store: this command's own
    try:
        if not creates and store.get_session(session) is None:
            raise _missing(config, session, session_list)
        keeper = _keeper(store, config, session, agent)
        if keeper.try_acquire() is None:  # pragma: no cover - a fresh memory store is free
            raise _not_answering(session, keeper.current())
        async with _served_locally(store, config, keeper, layers) as call:
            yield call
    finally:
        store.close()


class _SharedStore:
    """A store other processes share, as a one-shot command reaches it: the lease read
    without creating anything (a SQLite file that is not there yet is read as no lease), and
    the store opened once, when the command serves the session itself."""

    def __init__(self, config: Config, session: str) -> None:
        self.config = config
        self.session = session
        self.location = store_location(config)
        self._store: Store | None = None

    def open(self) -> Store:
        if self._store is None:
            self._store = open_config_store(self.config)
        return self._store

    def lease(self) -> Lease | None:
        if self._store is None and self.config.store_kind == "sqlite":
            return read_lease(self.config.store_path, self.session)
        return self.open().get_lease(self.session)

    def close(self) -> None:
        store, self._store = self._store, None
        if store is not None and not _UNFINISHED.is_set():  # a thread may still write through it
            store.close()


def _keeper(store: Store, config: Config, session: str, agent: str) -> LeaseKeeper:
    ttl = lease_ttl(config)
    return LeaseKeeper(store, session, agent, ttl=ttl, heartbeat=ttl / 3)


async def _hub_or_free_lease(
    config: Config, shared: _SharedStore, deadline: float
) -> Forwarder | None:
    """A forwarder to the hub of the session once one answers, or None once the lease is
    free (or held by a dead process) so this command may take it; a live holder that does
    not answer is polled until ``deadline``, then refused (``_not_answering``), and one on
    another host is refused at once (no Unix socket reaches it)."""
    session = shared.session
    timeout_s = float(config.get("serve.forward_timeout_s"))
    waiting = False
    warn = WarnOnce()  # polled every HUB_POLL_S: a warning about the holder's socket once
    while True:
        forwarder = await connect_to_hub(
            session, shared.location, timeout_s=timeout_s, warn=warn, lease_of=shared.lease
        )
        if forwarder is not None:
            return forwarder
        lease = await anyio.to_thread.run_sync(shared.lease)
        now = time.time()
        if lease is None or lease_free(lease, now) or holder_dead_here(lease):
            return None
        if held_on_another_host(lease, now):
            raise other_host_refusal(session, lease, now, command=True)
        if time.monotonic() >= deadline:
            raise _not_answering(session, lease)
        if not waiting:
            waiting = True
            log.info(
                "session %s: waiting up to %g s for its holder (pid %d) to answer",
                show_safely(session, 64),
                HUB_START_WAIT_S,
                lease.pid,
            )
        await anyio.sleep(HUB_POLL_S)


def _not_answering(session: str, lease: Lease | None) -> ConflictError:
    """The refusal once the wait for a live holder that does not answer has run out."""
    if lease is None:  # gone meanwhile: nobody to name
        return ConflictError(
            f"session {_shown(session)} was held by another process that did not answer "
            f"within {HUB_START_WAIT_S:g} s; nothing was read or written; try again"
        )
    holder = holder_description(lease)
    if lease.socket is None:
        what = (
            f"which published no socket within {HUB_START_WAIT_S:g} s: a lambo serve still "
            "opening the session, or another lambo command using it; try again once it "
            "answers or exits"
        )
    elif not lease.socket:
        what = (
            "which publishes no socket (its log says why), so a command cannot reach it; "
            "stop that serve, or give it a socket directory it can use, to run commands "
            "against this session"
        )
    else:
        what = (
            f"whose socket did not answer within {HUB_START_WAIT_S:g} s; restart that serve, "
            "or stop it so this command can take the session"
        )
    return ConflictError(
        f"session {_shown(session)} is held by {holder}, {what}; nothing was read or written"
    )


@asynccontextmanager
async def _served_locally(
    store: Store, config: Config, keeper: LeaseKeeper, layers: tuple[str, ...] = ()
) -> AsyncIterator[Call]:
    """Serve the calls here, under the lease ``keeper`` has just taken: heartbeating it, so
    a command that runs past the lease's TTL keeps it (and is fenced out if it loses it).
    A layered session's ``layers`` are attached as a serve attaches them."""
    session, agent = keeper.session, keeper.agent
    options = ServeOptions(session=session, agent=agent, layers=layers)
    heartbeat = asyncio.create_task(keeper.run())
    clean = True
    attached: list[LayerHandle] = []
    try:
        models = LoadedModels()
        service = await anyio.to_thread.run_sync(
            functools.partial(open_service, store, config, options, models=models)
        )
        answer: Call = _answering(service)
        if layers:
            layered, attached = await attach_layers(config, options, service, models, store)
            answer = layered.call

        admitted: list[tuple[str, object]] = []  # (receipt, agent_id) of writes made here

        async def call(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            lazy = service.session.plan.lazy
            if tool in _USES_MODEL and lazy is not None:
                # Loaded, or failed to (the recall then says it is keyword-only).
                await anyio.to_thread.run_sync(lazy.wait)
            if tool in ADMIN_TOOLS:  # routed as the hub's socket routes them
                result = await answer_admin(service, tool, arguments)
            else:
                result = await answer(tool, arguments)
            result.pop(LEDGER_KEY, None)  # a serve's --ledger part; a command has no ledger
            receipt = (result.get("structuredContent") or {}).get("receipt")
            writes = tool in _WRITES or tool in ADMIN_TOOLS
            if writes and not result["isError"] and isinstance(receipt, str):
                admitted.append((receipt, arguments.get("agent_id")))
            return result

        try:
            yield call
            # A write admitted here is applied before the lease is given back, also one the
            # command did not wait for (--no-wait): a stop would hand it on unapplied, to
            # whichever process next opens the session long enough to replay it.
            for receipt, writer in admitted:
                await answer(
                    "lambo_stats", {"agent_id": writer, "receipt": receipt, "wait_ms": WAIT_MS_MAX}
                )
        finally:
            lease_held = _holding(keeper)
            clean = False  # a stop that raises may have left the worker running
            try:
                stopped = await anyio.to_thread.run_sync(
                    functools.partial(
                        stop_service, service, shutdown_budget(config), lease_held=lease_held
                    )
                )
                clean = stopped.clean
            finally:  # a layer held here hands its queue on as a serve's does, in any case
                for handle in attached:
                    await handle.close()
                    clean = clean and not handle.serve.unfinished
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat
        if clean:
            keeper.release()
        else:  # a write may still be committing: the lease lapses with this process instead
            _UNFINISHED.set()
            log.warning("session %s: keeping the lease until this command exits", session)


def _public(call: Call) -> Call:
    """``call`` with the answers a command prints: without a serve's --ledger part (the
    hub's answer carries it for a forwarding serve's own ledger line)."""

    async def public(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        answer = await call(tool, arguments)
        answer.pop(LEDGER_KEY, None)
        return answer

    return public


def _answering(service: MemoryService) -> Call:
    async def answer(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return (await service.call(tool, arguments)).to_json()

    return answer


# Set when a command's own stop left part of the session running in a thread: the process
# must then end without the interpreter's teardown (cli.main), as an unfinished serve does.
_UNFINISHED = threading.Event()


def stop_was_unfinished() -> bool:
    return _UNFINISHED.is_set()


def _holding(keeper: LeaseKeeper) -> Callable[[], bool]:
    def held() -> bool:
        return keeper.lease is not None and not keeper.lost.is_set()

    return held
