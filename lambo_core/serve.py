"""`lambo serve`: hold a session (or forward to the serve that does) and answer MCP over stdio.

The first serve of a session is its hub, the only writer and the only model load; later
ones forward to it and take over once it is gone and a call needs it (``hub``). The
handshake and ``tools/list`` answer at once: the election, opening the session and the
model load run in the background. Spec: Transports, "More than one client on one machine".
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread
from mcp.shared.exceptions import MCPError

from .admin_tools import ADMIN_TOOLS, answer_admin
from .clock import SystemClock
from .config import Config
from .daemon import Daemon
from .derive_image import image_tool_listed
from .embed.loader import LoadedModels
from .errors import ConfigError, ConflictError, LamboError, internal_fault
from .hub import (
    LeaseKeeper,
    SessionHub,
    held_on_another_host,
    holder_dead_here,
    http_refusal,
    lease_free,
)
from .layers.handle import LayerHandle, LayerServe
from .layers.internal import INTERNAL_TOOLS, answer_internal, socket_tool_names
from .layers.service import LayeredService
from .ledger_writer import LedgerWriter
from .mcp.refusals import ProtocolRefusal
from .mcp.relay import Outstanding, serve_connection
from .mcp.server import build_server
from .mcp.stdio import bounded_stdio_server
from .reach import reach_meta
from .scoring import start_summary_warm
from .serve_ledger import LEDGER_CLOSE_BUDGET_S, heartbeats, record_call
from .service import LEDGER_KEY, MemoryService, ToolResult, listed_tools
from .session import EmbedderPlan, Session
from .store import open_config_store, store_location
from .store.base import Store
from .store.files import readable_by_others
from .writes import StopReport, WritePipeline

log = logging.getLogger(__name__)

#: [serve] shutdown_budget_s's default; a stop must end well inside the lease TTL, so
#: that the lease it keeps while a write is still applying cannot pass to another writer
DEFAULT_SHUTDOWN_BUDGET_S = 15.0
#: how much longer than a layer's own recall wait a merged recall waits for a layer held
#: by another serve before it answers without it
PROBE_MARGIN_S = 2.0
#: the signals a serve stops cleanly on (a client's SIGTERM, Ctrl-C, a closed terminal)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class ServeOptions:
    session: str
    agent: str = "lambo-serve"
    allow_embedding_mismatch: bool = False
    #: the shared sessions this one also reads and writes by scope ([serve] layers)
    layers: tuple[str, ...] = ()
    #: this session is attached as another's layer: it is marked a shared layer
    as_layer: bool = False

    def layer_options(self, layer: str) -> ServeOptions:
        """How this serve attaches ``layer``: as an unlayered session of its own, under an
        agent name of its own. A lease's holder is agent, host and pid, and a holder takes
        its own lease as ours: in one process (an HTTP serve of several sessions) the
        layer's serve would otherwise hold a lease that a served session or another
        project's layer already holds, a second writer of it, instead of forwarding."""
        return ServeOptions(
            session=layer,
            agent=f"{self.agent}/{self.session}",
            allow_embedding_mismatch=self.allow_embedding_mismatch,
            as_layer=True,
        )


def open_service(
    store: Store,
    config: Config,
    options: ServeOptions,
    *,
    probe: bool = False,
    models: LoadedModels | None = None,
) -> MemoryService:
    """Open the session on ``store`` and start its apply worker: the hub's service (with
    ``probe``, the startup probe of the embedder as well: a serve's, not a one-shot's).
    ``models`` is the loaded-model cache to share; None: a cache of this service's own, so
    a caller opening several services in one process passes one to load a model once."""
    # A one-shot command opens one service: a cache of its own. A serve passes its own.
    plan = EmbedderPlan.from_config(config, models if models is not None else LoadedModels())
    session = Session.open(
        store,
        options.session,
        plan,
        allow_embedding_mismatch=options.allow_embedding_mismatch,
    )
    pipeline = WritePipeline(
        session,
        edge_min_age_s=float(config.get("canonization.edge_min_age_s")),
        embed_batch=int(config.get("writes.embed_batch")),
    ).start(probe=probe)
    # The daemon's cycles run on the pipeline's writer thread, every cycle_interval_s.
    daemon = Daemon(session, config).attach(pipeline)
    return MemoryService(session, pipeline, config, daemon)


@dataclass(frozen=True)
class StopOutcome:
    report: StopReport
    model_settled: bool  # False: the model was still loading when the budget ran out

    @property
    def clean(self) -> bool:
        """Nothing of the session still runs in a thread: the lease may be given up and the
        interpreter may exit normally."""
        return self.report.worker_stopped and self.model_settled


def stop_service(
    service: MemoryService,
    budget_s: float = DEFAULT_SHUTDOWN_BUDGET_S,
    *,
    lease_held: Callable[[], bool] | None = None,
) -> StopOutcome:
    """A clean stop inside ``budget_s``: the pipeline hands on what it did not apply
    (``WritePipeline.close``), then a model still loading may finish (onnxruntime aborts
    the process if it is torn down mid-load)."""
    deadline = time.monotonic() + budget_s
    report = service.pipeline.close(budget_s, lease_held=lease_held)
    lazy = service.session.plan.lazy
    if lazy is not None and lazy.loading:
        lazy.wait(max(0.0, deadline - time.monotonic()))
    settled = lazy is None or not lazy.loading
    log.info("session %s: %s", service.session.name, report.summary())
    if not settled:
        log.warning(
            "session %s: the model was still loading when the stop ended", service.session.name
        )
    return StopOutcome(report, settled)


def warn_if_readable_by_others(store_path: Path) -> None:
    """Memory may hold secrets: say so when other accounts can read the store's files."""
    for path in (store_path, Path(f"{store_path}-wal"), Path(f"{store_path}-shm")):
        mode = readable_by_others(path)
        if mode is not None:
            log.warning(
                "the store file %s can be read by other accounts (mode %s); memory may hold "
                "secrets: chmod 600 it (new stores are created 600)",
                path,
                mode,
            )


def tool_names(image_tool: bool = False) -> list[str]:
    """What this serve lists: every session it holds lists the same tools, lambo_derive_image
    among them where the process's settings can serve it (``image_tool_listed``)."""
    return listed_tools(image_tool)


async def attach_layers(
    config: Config,
    options: ServeOptions,
    service: MemoryService,
    models: LoadedModels,
    store: Store,
    shared: Mapping[str, LayerServe] | None = None,
) -> tuple[LayeredService, list[LayerHandle]]:
    """Attach each of ``options.layers`` to ``service``'s session: a serve of the layer on
    the same store and models, which holds it, forwards to its holder, or keeps electing.
    A layer in ``shared`` is already served in this process (an HTTP serve's, held for
    all its sessions): it is used as it is, and its owner starts and stops it."""
    shared = shared or {}
    # a layer's recall may wait [recall] model_wait_ms for a model still loading
    bound = int(config.get("recall.model_wait_ms")) / 1000 + PROBE_MARGIN_S
    handles = [
        LayerHandle(name, shared[name], owned=False, probe_timeout_s=bound)
        if name in shared
        else LayerHandle(
            name,
            Serve(config, options.layer_options(name), models, store=store),
            probe_timeout_s=bound,
        )
        for name in options.layers
    ]
    for handle in handles:
        if handle.owned:
            await handle.start()
    floor = float(config.get("recall.layer_relevance_floor"))
    layered = LayeredService(service, handles, floors=dict.fromkeys(options.layers, floor))
    return layered, handles


class Serve:
    """One serve process: its store handle, its role in the session, and its tool handler."""

    def __init__(
        self,
        config: Config,
        options: ServeOptions,
        models: LoadedModels | None = None,
        *,
        store: Store | None = None,
        layer_serves: Mapping[str, LayerServe] | None = None,
        ledger: LedgerWriter | None = None,
    ) -> None:
        self.config = config
        self.options = options
        #: serve --ledger: one line per call this serve answers (None: no ledger)
        self.ledger = ledger
        #: serves of this serve's layers that run in this process already (an HTTP serve
        #: holds each layer once for all its sessions); the others it attaches itself
        self.layer_serves = dict(layer_serves or {})
        #: a layer's serve shares its session's store (one connection, one RAM store)
        self._owns_store = store is None
        if store is None:
            store = open_config_store(config)
            if config.store_kind == "sqlite":
                warn_if_readable_by_others(config.store_path)
        self.store = store
        self.service: MemoryService | None = None
        #: the layers this serve attached while it is the session's hub
        self.layers: list[LayerHandle] = []
        #: the models this process loaded: a service opened again after a takeover reuses
        #: them, and the serves of one process (an HTTP serve's sessions) share them
        self.models = models if models is not None else LoadedModels()
        self.hub = SessionHub(
            self.store,
            options.session,
            # where other serves of a shared store find this one (a memory store is ours alone)
            None if config.store_kind == "memory" else store_location(config),
            options.agent,
            self._become_hub,
            on_stop_hub=self._stop_hub,
            # the hub socket refuses any other name as stdio does, but answers the internal
            # tools a layered session asks of its layers
            tool_names=socket_tool_names,
            ttl=lease_ttl(config),
            heartbeat=lease_ttl(config) / 3,
            forward_timeout_s=float(config.get("serve.forward_timeout_s")),
        )
        self._elected = anyio.Event()
        self.error: LamboError | None = None
        self.budget_s = shutdown_budget(config)
        self._stop_budget_s = self.budget_s  # what the service's stop gets of it
        self._keeper: LeaseKeeper | None = None
        self._stopped = False
        #: set when a stop ended with part of the session still running in a thread (a
        #: write being applied, a model loading): the process must then exit without the
        #: interpreter's teardown, and the lease is left to expire rather than handed over
        self.unfinished = False

    async def _become_hub(self, keeper: LeaseKeeper) -> Any:
        self._keeper = keeper
        self.service = await anyio.to_thread.run_sync(
            partial(
                open_service,
                self.store,
                self.config,
                self.options,
                probe=True,
                models=self.models,
            )
        )
        service = self.service
        start_summary_warm(service.session.index)  # this process serves from now on
        if self.options.as_layer and not service.session.shared_layer:
            await anyio.to_thread.run_sync(service.session.mark_shared_layer)
        layered = await self._attach_layers(service) if self.options.layers else None

        async def handle(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
            if tool in ADMIN_TOOLS:  # the operator's: the session stays a plain one
                return await answer_admin(service, tool, arguments)
            if tool in INTERNAL_TOOLS:
                return await answer_internal(service, tool, arguments)
            if layered is not None:
                return await layered.call(tool, arguments)
            # the ledger's part rides along to Serve.__call__ (here or a forwarder's), which pops it
            return (await service.call(tool, arguments)).to_json(ledger=True)

        return handle

    async def _attach_layers(self, service: MemoryService) -> LayeredService:
        layered, self.layers = await attach_layers(
            self.config, self.options, service, self.models, self.store, self.layer_serves
        )
        return layered

    async def _stop_hub(self) -> bool:
        """Stop the hub's service (a clean stop, ``stop_service``); False when something of
        it still runs, so the lease must not be given up."""
        service, self.service = self.service, None
        layers, self.layers = self.layers, []
        if service is None:
            return True
        keeper = self._keeper

        def lease_held() -> bool:
            return keeper is None or (keeper.lease is not None and not keeper.lost.is_set())

        try:
            outcome = await anyio.to_thread.run_sync(
                partial(stop_service, service, self._stop_budget_s, lease_held=lease_held)
            )
        except Exception:  # fail safe: the worker may still be running, so keep the lease
            log.exception("session %s: the stop failed", self.options.session)
            self.unfinished = True
            return False
        finally:
            # after the session, whatever its stop did: its calls into them have ended, and
            # a layer left attached would hold its lease with no owner to stop it
            await self._detach(layers)
        if not outcome.clean:
            self.unfinished = True
        return outcome.clean

    async def _detach(self, layers: list[LayerHandle]) -> None:
        for handle in layers:
            try:
                await handle.close()
            except Exception:
                log.exception(
                    "session %s: detaching layer %s failed", self.options.session, handle.name
                )
                self.unfinished = True
                continue
            if handle.owned:  # a shared layer's serve is its owner's to account for
                self.unfinished = self.unfinished or handle.serve.unfinished

    async def start(self) -> None:
        try:
            role = await self.hub.start()
            log.info("session %s: this serve is the %s", self.options.session, role)
        except LamboError as exc:
            # The operator's log gets the whole refusal (it names local paths such as the
            # socket directory); a caller's tool result gets its class and the pointer.
            log.error("%s", exc.render())
            self.error = type(exc)(
                "this lambo serve could not join its session, so nothing was read or "
                "written; the reason and the fix are in the serve's log (stderr)"
            )
        except Exception as exc:
            log.exception("joining the session failed")
            self.error = internal_fault(repr(exc))
        finally:
            self._elected.set()

    async def hold(self) -> None:
        """Take the session as its only writer, or refuse naming its holder (an HTTP serve
        does not start as a forwarder: ``http_refusal``). Opening the service happens here,
        so a session that cannot be served refuses the start rather than every call. (A
        lease lost later is handled as in any hub: the election follows.) A session held
        on another host is not refused: no serve of this host writes it, so this one
        starts, refuses its calls naming the holder, and takes it over once that lease
        expires, as a stdio serve does."""
        session = self.options.session
        try:
            lease = await anyio.to_thread.run_sync(self.store.get_lease, session)
            now = SystemClock().now()
            if (
                lease is not None
                and not lease_free(lease, now)
                and not holder_dead_here(lease)
                and not held_on_another_host(lease, now)
            ):
                raise http_refusal(session, lease)
            role = await self.hub.start()
        finally:
            self._elected.set()
        if role != "hub":  # held on another host, or another serve took it meanwhile
            lease = await anyio.to_thread.run_sync(self.store.get_lease, session)
            if role == "electing" and held_on_another_host(lease, SystemClock().now()):
                # no other serve of this host writes it: this one refuses its calls naming
                # the holder, and takes the session over once that lease expires
                return
            await self.hub.close()
            if lease is None:
                raise ConflictError(f"session {session!r} could not be taken; try again")
            raise http_refusal(session, lease)
        log.info("session %s: this serve holds it", session)

    async def joined(self) -> None:
        """Wait for the election's outcome (held, forwarding, or the error)."""
        await self._elected.wait()

    @property
    def serving(self) -> bool:
        """This serve holds the session and its service answers."""
        return self.hub.role == "hub" and self.service is not None

    async def __call__(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if self.ledger is None:
            answer = await self._answer(tool, arguments)
            answer.pop(LEDGER_KEY, None)  # the ledger's part never reaches a client
            return answer
        started = time.monotonic()
        answer = {"isError": True}  # a protocol refusal's line
        private: object = None
        try:
            answer = await self._answer(tool, arguments)
            private = answer.pop(LEDGER_KEY, None)
            if tool == "lambo_stats" and isinstance(answer.get("structuredContent"), dict):
                # this serve's own ledger, whichever process answered the call
                answer["structuredContent"].update(self.ledger.stats_keys(self.options.session))
            return answer
        finally:
            record_call(
                self.ledger, self.options.session, tool, arguments, answer, started, private
            )

    async def _answer(self, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        await self.joined()
        if self.error is not None:
            return ToolResult.error(self.error.render()).to_json()
        try:
            return await self.hub.call(tool, arguments, reach_meta())
        except ProtocolRefusal as exc:
            # refused by the hub before any tool ran: the JSON-RPC error stdio would give
            raise MCPError(exc.code, exc.message) from None

    async def stop(self, budget_s: float | None = None) -> None:
        """Stop being part of the session: a hub hands its queue on (while its transports
        still answer the calls in flight) within ``budget_s`` (default: the whole shutdown
        budget), a forwarder disconnects. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        if budget_s is not None:
            self._stop_budget_s = budget_s
        await self.hub.close()
        await self._stop_hub()

    async def close(self) -> None:
        await self.stop()
        if self._owns_store and not self.unfinished:  # a thread may still be writing through it
            self.store.close()


def lease_ttl(config: Config) -> float:
    """[serve] lease_ttl_s: the session lease's time to live (heartbeats every third of it)."""
    return float(config.get("serve.lease_ttl_s"))


def shutdown_budget(config: Config) -> float:
    """[serve] shutdown_budget_s, refused unless it ends well inside the lease TTL."""
    budget = float(config.get("serve.shutdown_budget_s"))
    ttl = lease_ttl(config)
    if budget > ttl * 2 / 3:
        raise ConfigError(
            f"serve.shutdown_budget_s is {budget:g} s; it must be at most "
            f"{ttl * 2 / 3:g} s (two thirds of the {ttl:g} s session lease, "
            "serve.lease_ttl_s), so that a stop always ends while this serve still holds "
            "the session"
        )
    return budget


#: how long calls still in flight when a stop has handed the queue on get to answer
ANSWER_GRACE_S = 2.0


async def serve_stdio(
    config: Config, options: ServeOptions, ledger: LedgerWriter | None = None
) -> Serve:
    """Serve MCP over stdio until the end of input or a stop signal; then stop cleanly.

    The stop runs while the transport still answers: a lambo_stats waiting on a receipt
    hears it settle intent_durable. Returns the Serve, whose ``unfinished`` tells the
    caller how the process may exit.
    """
    serve = Serve(config, options, ledger=ledger)
    image_tool = image_tool_listed(config)
    server = build_server(options.session, serve, lambda: tool_names(image_tool), options.layers)
    stop = anyio.Event()
    try:
        # The election is not cancelled when the client leaves: it may be opening the
        # session in a thread, which must finish before the serve can close cleanly.
        async with anyio.create_task_group() as tg:
            tg.start_soon(serve.start)
            if ledger is not None:
                tg.start_soon(heartbeats, [serve], lease_ttl(config) / 3, stop)
            async with (
                bounded_stdio_server() as (read_stream, write_stream),
                anyio.create_task_group() as signals,
            ):
                signals.start_soon(stop_on_signal, stop)
                await serve_connection(
                    server, read_stream, write_stream, stop, partial(_stop_answering, serve)
                )
                signals.cancel_scope.cancel()
                stop.set()  # the client left: the heartbeats end too
    finally:
        with anyio.CancelScope(shield=True):
            await serve.close()
        if ledger is not None:
            await anyio.to_thread.run_sync(ledger.close, LEDGER_CLOSE_BUDGET_S)
    return serve


async def _stop_answering(serve: Serve, outstanding: Outstanding) -> None:
    """Stop the serve inside its one budget, answers included: a forwarder's calls come
    back from the hub first; a hub's calls in flight are answered once the stop has given
    them their outcome (a wait on a receipt hears it settle)."""
    ends = time.monotonic() + serve.budget_s
    # a small budget keeps most of itself for the service's stop
    answer_grace = min(ANSWER_GRACE_S, serve.budget_s / 4)

    def grace() -> float:
        return max(0.0, min(answer_grace, ends - time.monotonic()))

    if serve.hub.role == "forwarder":
        with anyio.move_on_after(grace()):
            await outstanding.drained()
    await serve.stop(max(0.0, ends - time.monotonic() - answer_grace))
    with anyio.move_on_after(grace()):
        await outstanding.drained()


def run_stdio(config: Config, options: ServeOptions, ledger_path: Path | None = None) -> None:
    """``lambo serve`` over stdio, to the end of the process.

    After a stop that left part of the session running in a thread (a write still being
    applied past the budget, a model still loading), the process ends with ``os._exit``:
    the interpreter's teardown would destroy onnxruntime under that thread and abort the
    process, and everything acked is already durable in the store.
    """
    ledger = LedgerWriter(ledger_path).start() if ledger_path is not None else None
    served = anyio.run(serve_stdio, config, options, ledger)
    if served.unfinished:
        exit_without_teardown(0)


def exit_without_teardown(code: int) -> None:
    """End the process now, its output and log flushed, skipping the interpreter's teardown
    (which would destroy onnxruntime under a thread still inside it)."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def exit_cleanly_until_serving() -> None:
    """A stop signal before the serve is running (it is still importing, reading its
    config) ends the process with 0: nothing was acked yet, so there is nothing to hand
    on. ``serve_stdio`` takes the signals over once it serves."""

    def leave(signum: int, frame: object) -> None:
        log.info("%s before serving: nothing was acked yet; stopping", signal.Signals(signum).name)
        raise SystemExit(0)

    for signum in STOP_SIGNALS:
        signal.signal(signum, leave)


async def stop_on_signal(stop: anyio.Event) -> None:
    with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
        async for signum in signals:
            if not stop.is_set():
                log.info("%s: stopping cleanly", signal.Signals(signum).name)
                stop.set()
