"""The part one serve plays for its session: hub, forwarder, or electing one.

``SessionHub`` takes the lease when it may and becomes the hub, else forwards
to the holder; when the hub vanishes it answers the call in flight with a
clear error and takes the session over once a call needs it. Spec: "More than
one client on one machine".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from ..clock import Clock
from ..errors import LamboError
from ..model import Lease
from ..paths import APP, socket_dir
from ..store.base import Store
from .answers import (
    HUB_SILENT_TEXT,
    LEASE_LOST_CALL_TEXT,
    hub_gone_result,
    tool_error,
    unavailable_result,
)
from .forwarder import DEFAULT_FORWARD_TIMEOUT_S, Forwarder, HubGone, HubSilent
from .lease import (
    HEARTBEAT,
    LEASE_TTL,
    LeaseKeeper,
    held_on_another_host,
    holder_description,
    lease_free,
    other_host_refusal,
)
from .server import HubServer
from .socket_dir import (
    SocketDirRefused,
    SocketPathTooLong,
    WarnOnce,
    current_uid,
    hub_candidates,
    prepare_socket_dir,
    socket_path,
)
from .wire import Handler, ToolNames

log = logging.getLogger("lambo.hub")

Role = Literal["starting", "hub", "forwarder", "electing", "closed"]


def fenced_handler(handler: Handler, keeper: LeaseKeeper) -> Handler:
    """``handler`` while ``keeper`` holds the lease; once it is lost, every call (local or
    forwarded) answers the spec's conflict error for a lost lease, and so does a call the
    loss refused midway: this serve is no longer the session's writer, and the election
    finds the one that is."""

    async def guarded(tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
        if keeper.lost.is_set():
            return tool_error(LEASE_LOST_CALL_TEXT)
        result = await handler(tool, arguments)
        if keeper.lost.is_set() and result.get("isError"):
            return tool_error(LEASE_LOST_CALL_TEXT)
        return result

    return guarded


class SessionHub:
    """The part one serve plays for its session: hub, forwarder, or waiting to be one.

    ``start`` takes the lease if it can (then calls ``on_become_hub(keeper)``
    for the handler of tool calls, publishes the socket and records its path
    with the lease) or else connects to the holder's socket. ``call`` answers
    a tool call whichever the role. A call no hub answers gets a clear error
    saying why (``unavailable_result``). When a forwarded call finds the hub
    gone, this serve elects again: it takes the lease as soon as the takeover rule
    allows (at once when the old holder is a dead process on this host) and
    becomes the hub, or forwards to whichever serve took it first. A hub that
    loses its lease stops (``on_stop_hub``) and elects again. ``close`` stops
    the hub (``on_stop_hub`` runs before the lease is released, so the serve
    flushes while it still holds the session).

    Taking the lease is on demand once this serve has settled: while starting
    it takes a free lease at once, but after it has forwarded (or lost its
    lease) it looks only for a published hub until a call asks for memory. A
    connection that merely drops (the hub died or closed, no call waiting)
    does not take the session over, so a serve whose client leaves next
    closes at once instead of opening the session and waiting out a model
    load. ``close`` never abandons a takeover in progress: it lets it finish
    and then stops the hub, so no half-opened service is left running.

    A holder on another host (its ``LAMBO_HOST``) is never forwarded to, its
    socket being that machine's: calls are refused naming it and when its lease
    expires (``other_host_refusal``), and the election keeps taking the lease
    until it has. ``location`` names the store in socket names (a SQLite path,
    a database server's ``store_location``); None publishes nothing (a memory
    store no other process reaches).
    """

    def __init__(
        self,
        store: Store,
        session: str,
        location: str | os.PathLike[str] | None,
        agent: str,
        on_become_hub: Callable[[LeaseKeeper], Awaitable[Handler]],
        *,
        on_stop_hub: Callable[[], Awaitable[bool | None]] | None = None,
        tool_names: ToolNames | None = None,
        env: Mapping[str, str] | None = None,
        clock: Clock | None = None,
        ttl: float = LEASE_TTL,
        heartbeat: float = HEARTBEAT,
        poll: float = 0.1,
        settle_wait: float = 1.5,
        keeper: LeaseKeeper | None = None,
        forward_timeout_s: float | None = DEFAULT_FORWARD_TIMEOUT_S,
    ) -> None:
        self.session = session
        self.forward_timeout_s = forward_timeout_s
        self.location = location
        self.keeper = keeper or LeaseKeeper(store, session, agent, clock, ttl, heartbeat)
        self._on_become_hub = on_become_hub
        self._on_stop_hub = on_stop_hub
        self._tool_names = tool_names
        self._env = os.environ if env is None else env
        self.poll = poll
        self.settle_wait = settle_wait
        self.role: Role = "starting"
        #: where this serve published (hub) or forwards to (forwarder); None when neither
        self.socket: Path | None = None
        #: why this serve publishes nothing (an unsafe socket directory, a too-long path), if so
        self.publish_problem: str | None = None
        #: what is wrong with this serve's socket directory, without its path (for callers)
        self._dir_rule: str | None = None
        self._own_path: Path | None = None
        #: the private directory this serve made to publish in, when the spec's was unusable
        self._private_dir: Path | None = None
        #: the holder is looked for every second: a warning about its socket is said once
        self._warn = WarnOnce()
        self._handler: Handler | None = None
        self._server: HubServer | None = None
        self._forwarder: Forwarder | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._election: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()
        self._waiting_logged = False
        #: the token of the lease on another host this serve last said it waits out
        self._elsewhere_logged: int | None = None
        #: seconds until the lease on another host expires, as the last election saw it
        self._expires_in: float | None = None
        self._background: set[asyncio.Task[None]] = set()
        #: whether the election may take the lease (see the class docstring)
        self._want_lease = True
        #: a call found no hub and none has been answered since: that demand for the
        #: session outlives a forwarder that reached a dying hub and then dropped
        self._unmet_call = False
        #: set while the election takes the lease and opens the hub; ``close`` waits it out
        self._taking_over = False
        #: wakes the election loop early when a call asks for the session
        self._wake = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> Role:
        """Elect: hub if the lease is ours, forwarder if a holder answers, else keep trying."""
        if self.location is not None:
            try:
                own_dir = prepare_socket_dir(socket_dir(self._env))
                self._own_path = socket_path(own_dir, self.session, self.location)
            except (SocketDirRefused, SocketPathTooLong) as exc:
                if isinstance(exc, SocketDirRefused):
                    self._dir_rule = exc.rule
                self._publish_privately(exc.message)
        if not await self._elect():
            self._start_election()
        return self.role

    def _publish_privately(self, why: str) -> None:
        """The spec's directory cannot be used (another account made it, it is not 700, the
        path is too long): publish in a fresh private directory of this serve's own, which
        no other account can have made first, and which forwarders find through the lease
        record. Only if even that fails does the serve publish nothing (and still serves its
        own client)."""
        assert self.location is not None
        try:
            private = Path(tempfile.mkdtemp(prefix=f"{APP}-{current_uid()}-", dir="/tmp"))
        except OSError as exc:
            self.publish_problem = why
            log.warning(
                "hub: %s, and no private directory could be made (%s); this serve publishes "
                "nothing (other serves of the session cannot forward to it), and serves its "
                "own client when it holds the session",
                why,
                exc.strerror,
            )
            return
        self._private_dir = private
        try:
            self._own_path = socket_path(private, self.session, self.location)
        except SocketPathTooLong as exc:
            self.publish_problem = f"{why}; {exc.message}"
            log.warning("hub: %s; this serve publishes nothing", self.publish_problem)
            return
        log.warning(
            "hub: %s; this serve publishes in a private directory of its own instead, %s "
            "(other serves find it through the session lease)",
            why,
            private,
        )

    async def close(self) -> None:
        self.role = "closed"
        self._settled.set()
        self._wake.set()
        for task in (self._election, self._watch):
            if task is None:
                continue
            if task is self._election and self._taking_over:
                # Cancelling would abandon the worker thread opening the service (and the
                # model load it starts) unstopped; let it finish, _stop_hub below stops it.
                with contextlib.suppress(Exception):
                    await asyncio.shield(task)
                continue
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._forwarder is not None:
            await self._forwarder.close()
            self._forwarder = None
        await self._stop_hub()
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        private, self._private_dir = self._private_dir, None
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)

    # -- calls -------------------------------------------------------------------------

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Answer one tool call: locally as the hub, else through the hub."""
        if self.role not in ("hub", "forwarder"):
            self._ask_for_lease()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.settle_wait):
                    await self._settled.wait()
        handler, forwarder = self._handler, self._forwarder
        if handler is not None:
            # the hub's service, also while it stops (role "closed"): it still answers
            # reads and waits, and refuses writes as dropped (closing)
            return await handler(tool, arguments)
        if self.role == "hub" and self.keeper.lost.is_set():
            # this serve's service has stopped on losing its lease; the election follows
            return tool_error(LEASE_LOST_CALL_TEXT)
        if self.role == "forwarder" and forwarder is not None:
            try:
                answered = await forwarder.call(tool, arguments, meta)
            except HubGone as exc:
                log.warning("hub: a forwarded %s found no hub: %s", tool, exc)
                self._unmet_call = True
                self._hub_gone(forwarder)
                self._ask_for_lease()
                if isinstance(exc, HubSilent):  # it read the call: it may still act on it
                    return tool_error(HUB_SILENT_TEXT.format(secs=exc.bound_s))
                # The hub stopped answering this call (a holder that dies closes its
                # sockets before its pid reads as gone, so the lease cannot tell yet).
                return hub_gone_result()
            self._unmet_call = False
            return answered
        return await self._unavailable()

    async def _unavailable(self) -> dict[str, Any]:
        """The error of a call no hub answered, saying why from the lease as it is now."""
        try:
            lease = await asyncio.to_thread(self.keeper.current)
        except LamboError as exc:
            log.warning("hub: the lease could not be read: %s (%s)", exc.message, exc.detail)
            lease = None
        return unavailable_result(
            lease,
            self.session,
            self.location,
            own_holder=self.keeper.holder,
            now=self.keeper.clock.now(),
            dir_rule=self._dir_rule,
            warn=self._warn,
            host=self.keeper.host,
        )

    def request_lease(self) -> None:
        """Something needs this session and no hub answers: take it over when allowed (a
        layer's merged recall asks without waiting for the answer)."""
        self._unmet_call = True
        self._ask_for_lease()

    def _ask_for_lease(self) -> None:
        """A call needs memory and no hub answers: let the election take the lease."""
        if self.role in ("electing", "starting"):
            self._want_lease = True
            self._wake.set()

    # -- the election ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.role == "closed"

    async def _current_lease(self) -> Lease | None:
        """The session's lease as the store has it now; None (logged) when it cannot be read."""
        try:
            return await asyncio.to_thread(self.keeper.current)
        except LamboError as exc:
            log.warning("hub: the lease could not be read: %s (%s)", exc.message, exc.detail)
            return None

    async def _candidates(self) -> list[Path]:
        if self.location is None:
            return []
        lease = await self._current_lease()
        if lease is None:
            return []
        return hub_candidates(
            self.session, self.location, self._env, lease, self._warn, host=self.keeper.host
        )

    async def _elect(self) -> bool:
        """One attempt: True when this serve is now the hub or a connected forwarder."""
        if self.role == "closed":
            return True
        if self._want_lease:
            self._taking_over = True
            try:
                lease = await asyncio.to_thread(self.keeper.try_acquire)
                if lease is not None:
                    if self.closed:  # closed meanwhile: give the lease back unused
                        await asyncio.to_thread(self.keeper.release)
                        return True
                    await self._become_hub()
                    return True
            finally:
                self._taking_over = False
        forwarder = Forwarder(self._candidates, timeout_s=self.forward_timeout_s)
        try:
            path = await forwarder.connect()
        except HubGone as exc:
            current = await self._current_lease()
            now = self.keeper.clock.now()
            if current is not None and held_on_another_host(current, now, host=self.keeper.host):
                # no socket reaches that hub: take the session over once its lease expires
                self._want_lease = True
                self._expires_in = max(0.0, current.expires_at - now)
                if self._elsewhere_logged != current.token:
                    self._elsewhere_logged = current.token
                    log.warning("hub: %s", other_host_refusal(self.session, current, now).message)
                return False
            if not self._waiting_logged:
                self._waiting_logged = True
                held = (
                    "nobody (the lease is free)"
                    if lease_free(current, now) or current is None
                    else holder_description(current, now)
                )
                log.warning(
                    "hub: no holder of session %r answers (%s); lease held by %s; %s",
                    self.session,
                    exc,
                    held,
                    "waiting for a holder to answer or for the lease to come free"
                    if self._want_lease
                    else "waiting for a holder to answer; this serve takes the session "
                    "over when a call needs it",
                )
            return False
        if self.closed:
            await forwarder.close()
            return True
        forwarder.on_drop = lambda: self._hub_gone(forwarder)
        self._forwarder, self.socket, self.role = forwarder, path, "forwarder"
        self._want_lease = False  # settled: from now on the lease is taken only on demand
        self._waiting_logged = False
        self._settled.set()
        log.info("hub: forwarding session %r to %s", self.session, path)
        return True

    def _start_election(self) -> None:
        if self.role == "closed" or (self._election is not None and not self._election.done()):
            return
        self.role = "electing"
        self._settled.clear()
        self._election = asyncio.create_task(self._elect_until_settled())

    async def _elect_until_settled(self) -> None:
        backoff = self.poll
        while self.role == "electing":
            self._wake.clear()
            self._expires_in = None
            try:
                if await self._elect():
                    return
                # a live holder that does not answer (yet): look less often, at most 1 s apart
                backoff = min(backoff * 1.5, max(self.poll, 1.0))
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("hub: electing a holder for session %r failed", self.session)
                backoff = min(backoff * 2, 5.0)
            # a lease on another host is looked at again the moment it would expire
            wait = backoff if self._expires_in is None else min(backoff, self._expires_in)
            # a call asking for the session cuts the wait short
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._wake.wait()

    def _hub_gone(self, forwarder: Forwarder) -> None:
        if self._forwarder is not forwarder:
            return
        self._forwarder, self.socket = None, None
        log.warning("hub: the holder of session %r is gone; electing a new one", self.session)
        if self._unmet_call:
            self._want_lease = True
        task = asyncio.get_running_loop().create_task(forwarder.close())
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        self._start_election()

    async def _become_hub(self) -> None:
        keeper = self.keeper
        self._heartbeat = asyncio.create_task(keeper.run())
        try:
            handler = fenced_handler(await self._on_become_hub(keeper), keeper)
        except BaseException:
            self._heartbeat.cancel()
            await asyncio.to_thread(keeper.release)
            raise
        self._handler = handler
        self.socket = None
        if self._own_path is not None:
            server = HubServer(handler, self._own_path, self._tool_names)
            try:
                await server.start()
            except (OSError, LamboError) as exc:
                log.warning(
                    "hub: could not publish session %r at %s (%s); serving this client alone",
                    self.session,
                    self._own_path,
                    exc,
                )
            else:
                self._server, self.socket = server, self._own_path
        # where other serves find this hub, whatever their environment ("": nowhere)
        await asyncio.to_thread(keeper.record_socket, os.fspath(self.socket or ""))
        self._want_lease = self._unmet_call = False
        if self.role == "closed":
            return  # closed while becoming the hub: close() stops it next
        self.role = "hub"
        self._settled.set()
        self._watch = asyncio.create_task(self._watch_lease())
        log.info("hub: holding session %r as %s", self.session, keeper.holder)

    async def _watch_lease(self) -> None:
        await self.keeper.lost.wait()
        if self.role != "hub":
            return
        await self._stop_hub()
        self._start_election()

    async def _stop_hub(self) -> None:
        # The service stops first, while the socket still answers the calls in flight (a
        # forwarded wait hears its receipt settle) and the heartbeat still holds the lease.
        was_hub = self._handler is not None
        keep_lease = False
        if was_hub and self._on_stop_hub is not None:
            try:
                keep_lease = (await self._on_stop_hub()) is False
            except Exception:
                log.exception("hub: stopping the hub's service failed")
        self._handler = None
        server, self._server = self._server, None
        if server is not None:
            await server.close(unlink=not self.keeper.lost.is_set())
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if keep_lease:
            # A write may still be committing: handing the lease over now could let two
            # writers overlap. It lapses with this process (a dead holder is taken over).
            log.warning(
                "hub: keeping the lease of session %r until this process exits", self.session
            )
        else:
            await asyncio.to_thread(self.keeper.release)
        if self.role == "hub":
            self.socket = None
