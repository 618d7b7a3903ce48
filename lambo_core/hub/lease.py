"""The session lease: who holds a session, the takeover rule, and this process's hold.

``LeaseKeeper`` acquires, heartbeats and releases the lease and hands the
store its fencing token; ``holder_dead_here`` is the takeover rule (a holder
of this host whose pid no longer runs is taken over at once; any other is
waited out). Spec: "More than one client on one machine".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Mapping
from dataclasses import replace

from ..clock import Clock, SystemClock
from ..errors import ConfigError, ConflictError, LamboError
from ..model import Lease
from ..store.base import Fence, Store
from ..text import format_rfc3339

log = logging.getLogger("lambo.hub")

LEASE_TTL = 45.0
HEARTBEAT = 15.0


#: the variable naming this machine in the lease's holder (two "machines" on one box, a
#: container whose hostname is not stable); default: the system's host name
HOST_ENV = "LAMBO_HOST"
MAX_HOST = 253  # a DNS name's longest


def this_host(env: Mapping[str, str] | None = None) -> str:
    """The host written into this process's lease holder (``agent@host#pid``): ``LAMBO_HOST``
    when set, else the system's host name. A value that would not parse back out of the
    holder (an ``@`` or ``#``, a space or control character, over 253 characters) is
    refused naming the variable and the rule."""
    value = (os.environ if env is None else env).get(HOST_ENV)
    if value is None or value == "":
        return socket.gethostname()
    if len(value) > MAX_HOST or any(
        ch in "@#" or not ch.isprintable() or ch.isspace() for ch in value
    ):
        raise ConfigError(
            f"{HOST_ENV} must be a host name of at most {MAX_HOST} printable characters "
            "without spaces, '@' or '#' (it is written into the session lease's holder, "
            "agent@host#pid)"
        )
    return value


def parse_holder(holder: str) -> tuple[str, str, int] | None:
    """``agent@host#pid`` -> (agent, host, pid), or None when it is not in that form."""
    rest, sep, pid_text = holder.rpartition("#")
    agent, at, host = rest.rpartition("@")
    if not sep or not at or not pid_text.isdigit():
        return None
    return agent, host, int(pid_text)


def pid_running(pid: int) -> bool:
    """Whether ``pid`` is a live process on this host (an unknown answer counts as live)."""
    if pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # EPERM: it exists, it is someone else's
    # a process that exited keeps its pid as a zombie until its parent reaps it
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return True
    state = data[data.rfind(b")") + 2 :][:1]
    return state not in (b"Z", b"X")


def holder_dead_here(lease: Lease, *, host: str | None = None) -> bool:
    """The takeover rule: the lease's holder is a process of this host that no longer runs."""
    parsed = parse_holder(lease.holder)
    if parsed is None:
        return False
    _, holder_host, pid = parsed
    if holder_host != (this_host() if host is None else host):
        return False
    if pid != lease.pid or pid == os.getpid():
        return False
    return not pid_running(pid)


def lease_free(lease: Lease | None, now: float) -> bool:
    return lease is None or lease.expires_at <= now


def holder_host(lease: Lease) -> str | None:
    """The host named in the lease's holder, or None when the holder is not ``agent@host#pid``."""
    parsed = parse_holder(lease.holder)
    return parsed[1] if parsed is not None else None


def on_another_host(lease: Lease | None, *, host: str | None = None) -> bool:
    """The lease's holder names a host other than this one: its Unix socket is out of reach."""
    if lease is None:
        return False
    named = holder_host(lease)
    return named is not None and named != (this_host() if host is None else host)


def held_on_another_host(lease: Lease | None, now: float, *, host: str | None = None) -> bool:
    """A live lease of a holder on another host: this serve can neither forward to it nor
    take it over until it expires."""
    return not lease_free(lease, now) and on_another_host(lease, host=host)


def holder_description(lease: Lease, now: float | None = None) -> str:
    """Who holds a session, for logs and refusals: holder, agent, pid, heartbeat, expiry."""
    now = SystemClock().now() if now is None else now
    return (
        f"{lease.holder} (agent {lease.agent}, pid {lease.pid}; last heartbeat "
        f"{max(0.0, now - lease.heartbeat_at):.0f} s ago, lease expires in "
        f"{max(0.0, lease.expires_at - now):.0f} s)"
    )


def http_refusal(session: str, lease: Lease, now: float | None = None) -> ConflictError:
    """The refusal of a second ``--transport http`` serve on a held session."""
    return ConflictError(
        f"session {session!r} is already held by {holder_description(lease, now)}; an HTTP "
        "serve must be the session's only writer, so stop that serve first (stdio serves "
        "forward to it instead)"
    )


#: how the refusal of a session held on another host opens (``answered_by_hub`` knows it)
OTHER_HOST_OPENING = "the session is held on another host"


def other_host_refusal(
    session: str, lease: Lease, now: float | None = None, *, command: bool = False
) -> ConflictError:
    """The refusal of a call on a session held by a serve on another host: a Unix socket does
    not reach it, so a serve waits for the lease to expire (and then takes it over); a
    one-shot ``command`` is told to run again then, or on that host."""
    now = SystemClock().now() if now is None else now
    expires = format_rfc3339(lease.expires_at)
    then = (
        f"run it on that host, or again once that lease expires (at {expires} unless its "
        "holder renews it)"
        if command
        else f"this serve takes the session over once that lease expires, at {expires} "
        "unless its holder renews it (stop that serve to hand the session over sooner)"
    )
    return ConflictError(
        f"{OTHER_HOST_OPENING} ({holder_host(lease)}), and a {'command' if command else 'serve'} "
        "cannot forward to another host's hub (its Unix socket is local to that machine), so "
        f"nothing was read and nothing was written here: session {session!r} is held by "
        f"{holder_description(lease, now)}; {then}"
    )


class LeaseKeeper:
    """This process's hold on a session's lease: acquire, heartbeat, notice loss, release.

    ``lost`` is set when a heartbeat finds the lease taken over by another
    process (or could not be renewed before it expired), or when the store
    fenced out one of this holder's writes: the serve must stop writing at once.
    Each acquisition gives the store the lease's fencing token (``Store.fence``),
    so every write of the session is checked against it in its own transaction.
    """

    def __init__(
        self,
        store: Store,
        session: str,
        agent: str,
        clock: Clock | None = None,
        ttl: float = LEASE_TTL,
        heartbeat: float = HEARTBEAT,
        *,
        pid: int | None = None,
        host: str | None = None,
    ) -> None:
        self.store = store
        self.session = session
        self.agent = agent
        self.clock: Clock = clock or SystemClock()
        self.ttl = ttl
        self.heartbeat = heartbeat
        self.pid = os.getpid() if pid is None else pid
        self.host = this_host() if host is None else host
        self.holder = f"{agent}@{self.host}#{self.pid}"
        self.lease: Lease | None = None
        self.lost = asyncio.Event()
        #: the loop ``lost`` belongs to (a fenced-out write is noticed in a worker thread)
        self._loop: asyncio.AbstractEventLoop | None = None
        with contextlib.suppress(RuntimeError):
            self._loop = asyncio.get_running_loop()

    @property
    def token(self) -> int | None:
        """The fencing token of the lease held now, or None."""
        return self.lease.token if self.lease is not None else None

    def current(self) -> Lease | None:
        return self.store.get_lease(self.session)

    def try_acquire(self, *, take_dead: bool = True) -> Lease | None:
        """Take the lease if it is free, ours, or (``take_dead``) held by a dead local process.

        Returns the held lease, or None while another live holder has it.
        """
        now = self.clock.now()
        current = self.store.get_lease(self.session)
        if current is not None and current.holder != self.holder and not lease_free(current, now):
            if not (take_dead and holder_dead_here(current, host=self.host)):
                return None
            log.warning(
                "hub: session %r was held by %s, which no longer runs on this host; "
                "taking the lease over",
                self.session,
                holder_description(current, now),
            )
            self.store.release_lease(self.session, current.token)
        wanted = Lease(
            session=self.session,
            holder=self.holder,
            pid=self.pid,
            agent=self.agent,
            acquired_at=now,
            heartbeat_at=now,
            expires_at=now + self.ttl,
            token=0,
        )
        got = self.store.acquire_lease(wanted, now)
        if got is not None:
            self.store.fence(self.session, Fence(got.token, self.clock.now, self._fenced_out))
            self.lease = got
            self.lost.clear()
        return got

    def _fenced_out(self, detail: str) -> None:
        """The store refused a write of this holder (any thread): the lease is lost."""
        loop = self._loop
        if loop is None or loop.is_closed():
            self._mark_lost(detail)
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._mark_lost(detail)
        else:
            loop.call_soon_threadsafe(self._mark_lost, detail)

    def _mark_lost(self, detail: str) -> None:
        if self.lease is None and self.lost.is_set():
            return
        if self.lease is not None:
            log.error(
                "hub: session %r lost: the store fenced out a write of this serve (%s); "
                "this serve stops writing",
                self.session,
                detail,
            )
        self.lease = None
        self.lost.set()

    def renew(self) -> bool:
        """One heartbeat. False (and ``lost`` set) when the lease is no longer ours."""
        lease = self.lease
        if lease is None:
            return False
        return self._settle_renewal(lease, *self._renew_in_store(lease))

    def _renew_in_store(self, lease: Lease) -> tuple[float, bool, str | None]:
        """The store's half of a heartbeat (runs in a worker thread): (now, renewed, why lost)."""
        now = self.clock.now()
        try:
            if self.store.renew_lease(self.session, lease.token, now, self.ttl):
                return now, True, None
            current = self.store.get_lease(self.session)
        except LamboError as exc:
            log.warning("hub: the lease heartbeat failed: %s (%s)", exc.message, exc.detail)
            if now >= lease.expires_at:
                return now, False, "the lease expired while the store could not be reached"
            return now, False, None
        by = holder_description(current, now) if current is not None else "nobody"
        return now, False, f"the lease was taken over by {by}"

    def _settle_renewal(self, lease: Lease, now: float, renewed: bool, lost: str | None) -> bool:
        if self.lease is not lease:
            return renewed  # released (or re-acquired) meanwhile
        if renewed:
            self.lease = replace(lease, heartbeat_at=now, expires_at=now + self.ttl)
            return True
        if lost is not None:
            log.error("hub: session %r lost: %s; this serve stops writing", self.session, lost)
            self.lease = None
            self.lost.set()
        return False

    async def run(self) -> None:
        """Heartbeat every ``heartbeat`` seconds until released or lost."""
        self._loop = asyncio.get_running_loop()
        while self.lease is not None and not self.lost.is_set():
            await asyncio.sleep(self.heartbeat)
            lease = self.lease
            if lease is None:
                return
            outcome = await asyncio.to_thread(self._renew_in_store, lease)
            self._settle_renewal(lease, *outcome)

    def record_socket(self, socket: str) -> None:
        """Record with the held lease where this holder published ("" for nowhere)."""
        lease = self.lease
        if lease is None:
            return
        try:
            self.store.record_lease_socket(self.session, lease.token, socket)
        except LamboError as exc:
            log.warning(
                "hub: recording the socket with the lease failed: %s (%s)", exc.message, exc.detail
            )

    def release(self) -> None:
        """Give the lease up (the next holder may take it at once)."""
        lease, self.lease = self.lease, None
        if lease is None:
            return
        try:
            self.store.release_lease(self.session, lease.token)
        except LamboError as exc:
            log.warning("hub: releasing the lease failed: %s (%s)", exc.message, exc.detail)
