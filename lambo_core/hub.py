"""One writer per session: the lease, the hub's Unix socket, forwarding, and takeover.

The first ``lambo serve`` of a session takes the session lease (``LeaseKeeper``)
and becomes its hub: it publishes a Unix socket (``HubServer``) in the private
per-user socket directory. Every later serve of the same session and store
forwards each tool call over that socket (``Forwarder``). ``SessionHub`` is the
small state machine a serve runs: it elects itself hub or forwarder, answers a
call whose hub vanished with a clear error, and then takes the lease over and
becomes the hub itself. A forwarder takes the lease over only when a call
needs it (the one that found the hub gone, or the next): becoming the hub
opens the session and starts loading the model, and a serve must let a model
load finish before it exits, so a forwarder whose client leaves right after
its hub died would otherwise stay up for that load.

Socket directory (spec, "More than one client on one machine"):
``$XDG_RUNTIME_DIR/lambo``, else ``/tmp/lambo-<uid>``, never TMPDIR. It must be
a real directory (not a symlink), owned by this uid, mode 700; it is created so
if missing. lambo never binds or forwards into one that is not (another account
may have made it first): a serve whose directory is not so, or whose socket
path there would be too long, publishes in a fresh private directory of its
own (``mkdtemp`` under /tmp, removed when it closes) and logs why; only if even
that fails does it publish nothing, and it still serves its own client.

Finding the holder: the holder records its socket's path with its lease
(``Lease.socket``; "" when it published nowhere), so a serve in any
environment reads the lease and connects to that path, after checking that its
directory is safe and that its file name is the one derived from this session
and store (``socket_name``: the session and the store's real path only). A
lease that records nothing yet (a holder still opening the session) is also
looked for under this environment's own directory.

Wire protocol (newline-delimited JSON, one object per line, UTF-8):
request ``{"id": n, "tool": str, "arguments": {...}, "meta": {...}}``, answer
``{"id": n, "result": {content, structuredContent, isError}}`` or, for a
request refused before any tool ran, ``{"id": n, "error": {"code": c,
"message": "..."}}`` with the JSON-RPC code and text stdio answers for the same
refusal (``mcp/refusals.py``): an unknown tool, a line over ``MAX_LINE``, a
line that is not a request. ``meta`` is carried for later use (a progress
token, say); the hub's handler sees only tool and arguments. Requests on one
connection may overlap; answers come back in completion order, matched by id.
A line over ``MAX_LINE`` is discarded unread up to its newline, logged with its
size only, and answered -32600 ``request too large (over 4 MiB)`` (its id when
it can be read from the start or the end of the line, else null); the
connection goes on serving. A line cut off by the end of input is not answered.

Fencing and bounded waits: each acquisition hands the store the lease's
fencing token (``LeaseKeeper``, ``Store.fence``), so a holder paused past its
lease commits nothing once another took over; a store write refused so marks
the lease lost, and the hub answers every call with the hub-gone error and
elects again. A forwarded call waits for its answer at most
``[serve] forward_timeout_s`` plus its own ``wait_ms``, then counts the hub as
gone, so a paused hub never leaves a client hanging.

Takeover rule (``holder_dead_here``): a lease held by another holder is taken
before it expires only when the holder (``agent@host#pid``) names this host,
its pid is not ours, and that pid no longer runs here (``os.kill(pid, 0)`` says
no such process, or ``/proc`` shows it a zombie). The stale lease is expired
with a release conditional on its fencing token, so exactly the lease judged
dead is expired (if another serve took it over meanwhile, the token moved and
the release does nothing), and the lease is then acquired the ordinary way.
Any other held lease is waited out until it expires (the TTL, 45 s).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import shutil
import socket
import stat
import tempfile
from collections import deque
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from .clock import Clock, SystemClock
from .errors import ConfigError, ConflictError, LamboError, internal_fault
from .framing import EDGE, Line, LineSplitter, OversizedLine, extract_request_id
from .log_limits import RateLimitedWarnings
from .mcp.refusals import (
    BATCH_TEXT,
    INVALID_ID_TEXT,
    INVALID_PARAMS,
    INVALID_REQUEST,
    INVALID_REQUEST_TEXT,
    PARSE_ERROR,
    PARSE_ERROR_TEXT,
    TOO_DEEP_TEXT,
    UNKNOWN_TOOL,
    ProtocolRefusal,
    too_large_text,
)
from .model import Lease
from .paths import APP, socket_dir
from .receipts import WAIT_MS_MAX
from .store.base import Fence, Store
from .store.sqlite import read_lease

log = logging.getLogger("lambo.hub")

#: sun_path on macOS and the BSDs is 104 bytes with its terminating NUL (Linux: 108);
#: a socket path must fit the smaller one, so at most 103 bytes of path.
MAX_SOCKET_PATH = 104
MAX_REQUEST = 4 * 1024 * 1024
#: one forwarded request line: the 4 MiB request plus room for the envelope
MAX_LINE = MAX_REQUEST + 64 * 1024
#: one answer line read by a forwarder (answers are bounded by the tools' own limits)
MAX_ANSWER_LINE = 64 * 1024 * 1024
LEASE_TTL = 45.0
HEARTBEAT = 15.0
#: [serve] forward_timeout_s's default: how long a forwarded call waits for the hub's
#: answer, beyond the call's own wait_ms (a recall waiting for a loading model is the
#: longest call that waits on nothing else)
DEFAULT_FORWARD_TIMEOUT_S = 30.0
TOO_LARGE = too_large_text(MAX_REQUEST)
SOCKET_DIR_ADVICE = "remove the directory or point XDG_RUNTIME_DIR at one you own"
HUB_GONE_TEXT = (
    "lambo memory is unavailable for this call: the lambo serve that holds this session "
    "stopped answering, so nothing was read and nothing was written. Memory returns once "
    "a lambo serve holds the session again (this one is taking it over); carry on "
    "without it rather than waiting."
)
#: a forwarded call the hub read but did not answer in time: it may yet act on it
HUB_SILENT_TEXT = (
    "lambo memory did not answer this call within {secs:g} s: the lambo serve that holds "
    "this session may be paused or overloaded, so what this call did is unknown (a write may "
    "still be applied). Recall, or ask lambo_stats with the write's receipt, before sending a "
    "write again; carry on without memory meanwhile."
)
#: a call to a serve whose lease has passed on (the spec's conflict class)
LEASE_LOST_CALL_TEXT = (
    "conflict: this lambo serve no longer holds the session's single-writer lease (it "
    "expired or passed to another serve), so nothing was read and nothing was written here; "
    "the detail was logged. Memory returns through the serve that holds the session now: "
    "call again shortly."
)
#: the holder (its pid filled in) still opening the session: it has published nothing yet
HOLDER_STARTING_TEXT = (
    "lambo memory is unavailable for this call: the lambo serve that holds this session "
    "(pid {pid}) is still opening it, so nothing was read and nothing was written. Memory "
    "returns once it answers; carry on without it rather than waiting."
)
#: the holder (its pid filled in) runs, but no serve can reach its socket
HOLDER_UNREACHABLE_TEXT = (
    "lambo memory is unavailable for this call: the lambo serve that holds this session "
    "(pid {pid}) is alive but its socket cannot be reached, so nothing was read and nothing "
    "was written. Restart that serve, or stop it so this one can take the session over; "
    "carry on without memory until then."
)

Handler = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
ToolNames = Callable[[], Collection[str]]
Role = Literal["starting", "hub", "forwarder", "electing", "closed"]

_CHUNK = 64 * 1024


class SocketPathTooLong(ConfigError):
    """The socket path does not fit a Unix socket address: no publishing, no forwarding."""


class SocketDirRefused(ConfigError):
    """A socket directory lambo neither binds nor forwards into (or could not create).

    ``message`` is for the log and names the directory; ``rule`` says what is
    wrong with it without naming it, for a caller's tool error.
    """

    def __init__(self, message: str, rule: str, *, detail: str | None = None) -> None:
        super().__init__(message, detail=detail)
        self.rule = rule


class HubGone(Exception):
    """The hub could not be reached, or dropped the connection while a call was in flight.

    Internal: callers see ``hub_gone_result()``; the reason is only logged.
    """


class HubSilent(HubGone):
    """The hub read a forwarded call and did not answer within the bound: unlike a hub
    that is gone, it may still act on the call."""

    def __init__(self, reason: str, bound_s: float) -> None:
        super().__init__(reason)
        self.bound_s = bound_s


def tool_error(text: str) -> dict[str, Any]:
    """A CallToolResult (as its JSON dict) that refuses with ``text``."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def hub_gone_result() -> dict[str, Any]:
    """What a call gets when its hub is gone: nothing read or written; memory comes back."""
    return tool_error(HUB_GONE_TEXT)


def unavailable_result(
    lease: Lease | None,
    session: str,
    store: str | os.PathLike[str] | None,
    *,
    own_holder: str,
    now: float,
    dir_rule: str | None = None,
) -> dict[str, Any]:
    """What a call no hub answered gets, by the state of the session's lease.

    Free, ours (this serve is taking it over) or held by a dead local process:
    ``hub_gone_result()``. Held by a live holder that recorded no socket yet:
    it is still opening the session. Otherwise the holder is alive but its
    socket cannot be reached: restart it or stop it; when a socket directory is
    the reason (the recorded one's, or this serve's own ``dir_rule`` when the
    holder published nowhere), the rule it breaks and the fix are added.
    """
    if (
        lease is None
        or lease_free(lease, now)
        or lease.holder == own_holder
        or holder_dead_here(lease)
    ):
        return hub_gone_result()
    if lease.socket is None:
        return tool_error(HOLDER_STARTING_TEXT.format(pid=lease.pid))
    text = HOLDER_UNREACHABLE_TEXT.format(pid=lease.pid)
    rule = None
    if lease.socket and store is not None:
        _, recorded_rule = recorded_socket(lease, session, store)
        rule = f"Its socket directory {recorded_rule}" if recorded_rule else None
    elif not lease.socket and dir_rule is not None:
        rule = f"This serve's socket directory {dir_rule}"
    if rule is not None:
        text += f" {rule}: {SOCKET_DIR_ADVICE}."
    return tool_error(text)


# --------------------------------------------------------------------------- the socket dir


def _current_uid() -> int:
    return os.getuid()


def _unsafe_dir(path: Path, reason: str, rule: str) -> SocketDirRefused:
    return SocketDirRefused(
        f"the socket directory {path} {reason}; lambo serve neither binds nor forwards into it, "
        "because a socket other local accounts can reach would let them issue writes against "
        f"your session: {SOCKET_DIR_ADVICE}",
        rule,
    )


def check_socket_dir(path: Path) -> bool:
    """True when ``path`` is a safe socket directory, False when it does not exist.

    Raises ``SocketDirRefused`` (with the spec's advice) when it exists and is
    a symlink, not a directory, not owned by this uid, or not mode 700.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise _unsafe_dir(path, "cannot be inspected", "cannot be inspected") from exc
    uid = _current_uid()
    if stat.S_ISLNK(st.st_mode):
        reason = rule = "is a symbolic link"
    elif not stat.S_ISDIR(st.st_mode):
        reason = rule = "is not a directory"
    elif st.st_uid != uid:
        reason = f"is owned by uid {st.st_uid}, not by you (uid {uid})"
        rule = "is not owned by you"
    elif stat.S_IMODE(st.st_mode) != 0o700:
        reason = rule = f"has mode {stat.S_IMODE(st.st_mode):o}, not 700"
    else:
        return True
    raise _unsafe_dir(path, reason, rule)


def prepare_socket_dir(path: str | os.PathLike[str]) -> Path:
    """Make sure ``path`` is a safe socket directory, creating it mode 700 if missing."""
    path = Path(path)
    if check_socket_dir(path):
        return path
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass  # another serve created it a moment ago: checked below like any other
    except OSError as exc:
        raise SocketDirRefused(
            f"the socket directory {path} could not be created ({exc.strerror}): "
            f"{SOCKET_DIR_ADVICE}",
            f"could not be created ({exc.strerror})",
            detail=str(exc),
        ) from exc
    else:
        os.chmod(path, 0o700)  # the umask may have removed bits from our own directory
    if not check_socket_dir(path):
        raise SocketDirRefused(
            f"the socket directory {path} vanished while it was being created",
            "vanished while it was being created",
        )
    return path


# --------------------------------------------------------------------------- the socket name


def store_identity(store: str | os.PathLike[str]) -> str:
    """The store's identity in a socket name: its real absolute path."""
    return os.path.realpath(os.fspath(store))


def socket_name(session: str, store: str | os.PathLike[str]) -> str:
    """The socket's file name: the same for one session and store in any environment."""
    key = (session + "\0" + store_identity(store)).encode("utf-8", "surrogateescape")
    return f"{APP}-{hashlib.sha256(key).hexdigest()[:16]}.sock"


def socket_path(
    directory: str | os.PathLike[str], session: str, store: str | os.PathLike[str]
) -> Path:
    """Where the holder of (session, store) publishes in ``directory``.

    Raises ``SocketPathTooLong`` when the path with its NUL exceeds 104 bytes.
    """
    return check_socket_path_length(Path(directory) / socket_name(session, store))


def check_socket_path_length(path: Path) -> Path:
    """``path`` if it fits a Unix socket address, else ``SocketPathTooLong``."""
    size = len(os.fsencode(path))
    if size + 1 > MAX_SOCKET_PATH:
        raise SocketPathTooLong(
            f"the socket path {path} is {size} bytes, but a Unix socket address holds at most "
            f"{MAX_SOCKET_PATH - 1} (104 with its terminating NUL), so this serve can neither "
            "publish the session nor forward to its holder; point XDG_RUNTIME_DIR at a "
            "shorter directory"
        )
    return path


def recorded_socket(
    lease: Lease | None, session: str, store: str | os.PathLike[str]
) -> tuple[Path | None, str | None]:
    """The socket the holder recorded with its lease, if this serve may forward into it.

    ``(path, None)`` when it may. ``(None, rule)`` when its directory is unsafe
    (``rule``: what is wrong, without the path). ``(None, None)`` when the
    lease records no socket, or one this serve must not use: not absolute, too
    long, or a file name other than this session and store's (logged).
    """
    if lease is None or not lease.socket:
        return None, None
    path = Path(lease.socket)
    if not path.is_absolute() or path.name != socket_name(session, store):
        _warn_once(
            f"hub: the lease of session {session!r} records the socket {path}, which is not "
            "this session and store's; not forwarding into it"
        )
        return None, None
    try:
        check_socket_path_length(path)
        if not check_socket_dir(path.parent):
            return None, None
    except SocketDirRefused as exc:
        _warn_once(f"hub: not forwarding to the holder of session {session!r}: {exc.message}")
        return None, exc.rule
    except SocketPathTooLong as exc:
        _warn_once(f"hub: not forwarding to the holder of session {session!r}: {exc.message}")
        return None, None
    return path, None


_warned: dict[str, None] = {}


def _warn_once(message: str) -> None:
    """Log ``message`` the first time only: the election looks for the holder every second."""
    if message in _warned:
        return
    _warned[message] = None
    if len(_warned) > 64:  # bounded: forget the oldest
        del _warned[next(iter(_warned))]
    log.warning("%s", message)


def hub_candidates(
    session: str,
    store: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    lease: Lease | None = None,
) -> list[Path]:
    """Sockets where the holder of (session, store) may answer, in the order to try them.

    The socket recorded with ``lease`` (see ``recorded_socket``). When the
    lease records none yet, also this environment's own directory's socket of
    that name, if one exists there (a holder that published but has not
    recorded it yet). A socket in an unsafe directory is never a candidate.
    """
    found: list[Path] = []
    recorded, _ = recorded_socket(lease, session, store)
    if recorded is not None:
        found.append(recorded)
    elif lease is not None and lease.socket is None:
        own = socket_dir(os.environ if env is None else env)
        try:
            if check_socket_dir(own):
                found.append(socket_path(own, session, store))
        except (SocketDirRefused, SocketPathTooLong) as exc:
            log.debug("hub: not looking for the holder in %s: %s", own, exc.message)
    return [path for path in found if _is_socket(path)]


def _is_socket(path: Path) -> bool:
    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


# --------------------------------------------------------------------------- the lease


def this_host() -> str:
    return socket.gethostname()


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


# --------------------------------------------------------------------------- lines


def _valid_id(value: object) -> bool:
    return value is None or (isinstance(value, int | str) and not isinstance(value, bool))


class StreamLines:
    """The lines of a stream, split by the shared framer (``framing.LineSplitter``).

    ``next()`` returns a ``Line`` or an ``OversizedLine`` (discarded unread
    past ``max_line``); it raises ``EOFError`` at the end of input (a line cut
    off by the end is dropped). A chunk is read only when no line is waiting.
    """

    def __init__(self, reader: asyncio.StreamReader, max_line: int) -> None:
        self._reader = reader
        self._splitter = LineSplitter(max_line)
        self._ready: deque[Line | OversizedLine] = deque()

    async def next(self) -> Line | OversizedLine:
        while not self._ready:
            chunk = await self._reader.read(_CHUNK)
            if not chunk:
                raise EOFError
            self._ready.extend(self._splitter.feed(chunk))
        return self._ready.popleft()


def _refusal(rid: object, code: int, text: str) -> dict[str, Any]:
    """An answer refusing a request before any tool ran: the JSON-RPC error stdio gives."""
    return {"id": rid, "error": {"code": code, "message": text}}


def _encode(message: dict[str, Any]) -> bytes:
    try:
        return json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
    except UnicodeEncodeError:
        # A lone surrogate a client sent has no UTF-8 form: ASCII JSON escapes it (\\ud800),
        # so the call still reaches the hub, whose text rule refuses the field by name.
        return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


#: a local client may send any number of bad lines: warn about a few, then count them
_bad_lines = RateLimitedWarnings(log, "hub: bad forwarded request lines")


# --------------------------------------------------------------------------- the hub's server


class HubServer:
    """The hub's end of the socket: answers forwarded calls with ``handler``.

    Start it only while holding the session lease: ``start`` clears whatever
    socket file a crashed holder left at ``path``.
    """

    def __init__(
        self,
        handler: Handler,
        path: str | os.PathLike[str],
        tool_names: ToolNames | None = None,
    ) -> None:
        self.handler = handler
        self.path = Path(path)
        #: the tools served: any other name is refused as stdio refuses it (None: no check)
        self.tool_names = tool_names
        self._server: asyncio.Server | None = None
        self._ident: tuple[int, int] | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._connections: set[asyncio.Task[Any]] = set()
        self._answers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        check_socket_path_length(self.path)
        prepare_socket_dir(self.path.parent)
        self._clear_stale()
        self._server = await asyncio.start_unix_server(self._connection, path=os.fspath(self.path))
        os.chmod(self.path, 0o600)
        st = os.lstat(self.path)
        self._ident = (st.st_dev, st.st_ino)
        log.info("hub: serving forwarded calls on %s", self.path)

    def _clear_stale(self) -> None:
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ConfigError(
                f"{self.path} exists and is not a socket; lambo will not remove it: "
                f"{SOCKET_DIR_ADVICE}"
            )
        log.info("hub: clearing the stale socket %s", self.path)
        os.unlink(self.path)

    async def close(self, *, unlink: bool = True) -> None:
        """Stop answering; remove the socket file if it is still ours. ``unlink=False``
        for a hub that lost its lease: the path is its successor's now, and a file the
        successor bound there may even carry the old file's inode number."""
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        for task in list(self._answers):
            task.cancel()
        for writer in list(self._writers):
            writer.close()  # each connection's reader sees the end and its task returns
        if self._answers:
            await asyncio.gather(*self._answers, return_exceptions=True)
        if self._connections:
            _, stuck = await asyncio.wait(list(self._connections), timeout=1.0)
            for task in stuck:
                task.cancel()
        await server.wait_closed()
        # remove the file only if it is still ours (a successor may have published anew)
        with contextlib.suppress(OSError):
            st = os.lstat(self.path)
            if unlink and (st.st_dev, st.st_ino) == self._ident:
                os.unlink(self.path)
        log.info("hub: stopped serving forwarded calls on %s", self.path)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        current = asyncio.current_task()
        if current is not None:
            self._connections.add(current)
            current.add_done_callback(self._connections.discard)
        self._writers.add(writer)
        lock = asyncio.Lock()

        async def send(message: dict[str, Any]) -> None:
            try:
                data = _encode(message)
            except (TypeError, ValueError) as exc:
                fault = internal_fault(f"answer not JSON: {exc}")
                log.error("hub: %s", fault.detail)
                data = _encode({"id": message.get("id"), "result": tool_error(fault.render())})
            async with lock:
                if writer.is_closing():
                    return
                writer.write(data)
                with contextlib.suppress(OSError):
                    await writer.drain()

        lines = StreamLines(reader, MAX_LINE)
        try:
            while True:
                try:
                    item = await lines.next()
                except (EOFError, OSError):
                    break
                if isinstance(item, OversizedLine):
                    log.warning(
                        "hub: discarded a forwarded request of %d bytes (over %d)",
                        item.size,
                        MAX_LINE,
                    )
                    rid = extract_request_id(item.head, item.tail)
                    await send(_refusal(rid, INVALID_REQUEST, TOO_LARGE))
                    continue
                task = asyncio.create_task(self._answer(bytes(item.data), send))
                self._answers.add(task)
                task.add_done_callback(self._answers.discard)
        finally:
            self._writers.discard(writer)
            writer.close()

    async def _answer(self, line: bytes, send: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        try:
            message = json.loads(line)
        except RecursionError:
            _bad_lines.warning("hub: a forwarded request nested too deeply (%d bytes)", len(line))
            rid = extract_request_id(line[:EDGE], line[-EDGE:])
            await send(_refusal(rid, INVALID_REQUEST, TOO_DEEP_TEXT))
            return
        except ValueError as exc:
            _bad_lines.warning(
                "hub: a forwarded request that is not JSON (%d bytes): %s", len(line), exc
            )
            await send(_refusal(None, PARSE_ERROR, PARSE_ERROR_TEXT))
            return
        if isinstance(message, list):
            _bad_lines.warning("hub: a batch of forwarded requests (%d bytes)", len(line))
            await send(_refusal(None, INVALID_REQUEST, BATCH_TEXT))
            return
        rid = message.get("id") if isinstance(message, dict) else None
        tool = message.get("tool") if isinstance(message, dict) else None
        arguments = message.get("arguments") if isinstance(message, dict) else None
        if not _valid_id(rid):
            _bad_lines.warning("hub: a forwarded request with an id of no id type")
            await send(_refusal(None, INVALID_REQUEST, INVALID_ID_TEXT))
            return
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            _bad_lines.warning("hub: a malformed forwarded request (%d bytes)", len(line))
            await send(_refusal(rid, INVALID_REQUEST, INVALID_REQUEST_TEXT))
            return
        if self.tool_names is not None and tool not in self.tool_names():
            await send(_refusal(rid, INVALID_PARAMS, UNKNOWN_TOOL))
            return
        try:
            result = await self.handler(tool, arguments)
        except LamboError as exc:
            if exc.detail:
                log.warning("hub: %s failed: %s (%s)", tool, exc.message, exc.detail)
            result = tool_error(exc.render())
        except Exception as exc:
            fault = internal_fault(repr(exc))
            log.exception("hub: %s raised", tool)
            result = tool_error(fault.render())
        await send({"id": rid, "result": result})


# --------------------------------------------------------------------------- forwarding


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.lock = asyncio.Lock()
        self.dead = False
        self.task: asyncio.Task[None] | None = None


class Forwarder:
    """A serve's (or the CLI's) end of the hub socket: forwards tool calls to the hub.

    ``target`` is a socket path, or an async function listing candidate paths
    (tried in order; see ``hub_candidates``). Connects lazily; a call that finds
    its connection gone connects again (once). ``HubGone`` when no hub answers
    or the connection drops while a call is in flight; ``ProtocolRefusal`` when
    the hub refuses the request before any tool ran (an unknown tool, a request
    too large), with the JSON-RPC code and text stdio answers; ``on_drop`` is
    called when an open connection drops, so a serve can start taking over at once.

    A call waits for its answer at most ``timeout_s`` seconds plus its own
    ``wait_ms`` (``call_timeout``): a hub that does not answer in that time (a
    paused process, a holder stuck past its lease) counts as gone, so the
    connection is dropped and every call on it gets ``HubGone`` rather than
    hanging. None: no bound.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | Callable[[], Awaitable[Sequence[Path]]],
        *,
        on_drop: Callable[[], None] | None = None,
        timeout_s: float | None = DEFAULT_FORWARD_TIMEOUT_S,
    ) -> None:
        if callable(target):
            self._resolve: Callable[[], Awaitable[Sequence[Path]]] = target
        else:
            fixed = [Path(target)]

            async def resolve() -> Sequence[Path]:
                return fixed

            self._resolve = resolve
        self._on_drop = on_drop
        self.timeout_s = timeout_s
        self._conn: _Conn | None = None
        self._connect_lock = asyncio.Lock()
        self._next_id = 0
        self._closed = False
        self.path: Path | None = None

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._conn.dead

    async def connect(self) -> Path:
        """Open the connection now (if not open); the path it reached, or ``HubGone``."""
        await self._connection()
        assert self.path is not None
        return self.path

    async def _connection(self) -> _Conn:
        if self._closed:
            raise HubGone("the forwarder is closed")
        async with self._connect_lock:
            if self._conn is not None and not self._conn.dead:
                return self._conn
            reasons: list[str] = []
            for path in await self._resolve():
                try:
                    reader, writer = await asyncio.open_unix_connection(os.fspath(path))
                except OSError as exc:
                    reasons.append(f"{path}: {exc.strerror or exc}")
                    continue
                conn = _Conn(reader, writer)
                conn.task = asyncio.create_task(self._read(conn))
                self._conn, self.path = conn, path
                return conn
            raise HubGone("no hub answered: " + ("; ".join(reasons) or "no socket published"))

    async def _read(self, conn: _Conn) -> None:
        lines = StreamLines(conn.reader, MAX_ANSWER_LINE)
        reason = "the hub closed the connection"
        try:
            while True:
                item = await lines.next()
                if isinstance(item, OversizedLine):
                    rid = extract_request_id(item.head, item.tail)
                    log.error("hub: an answer of %d bytes was too large to read", item.size)
                    message: dict[str, Any] = {"id": rid, "error": "the answer was too large"}
                else:
                    try:
                        message = json.loads(item.data)
                    except (ValueError, RecursionError):
                        log.error("hub: an answer that is not JSON (%d bytes)", len(item.data))
                        continue
                    if not isinstance(message, dict):
                        continue
                rid = message.get("id")
                future = conn.pending.pop(rid, None) if isinstance(rid, int) else None
                if future is not None and not future.done():
                    future.set_result(message)
        except EOFError:
            pass
        except (OSError, ValueError) as exc:
            reason = f"the connection to the hub failed: {exc}"
        finally:
            self._drop(conn, reason)

    def _drop(self, conn: _Conn, reason: str) -> None:
        if conn.dead:
            return
        conn.dead = True
        pending, conn.pending = conn.pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(HubGone(reason))
        conn.writer.close()
        if self._on_drop is not None and not self._closed:
            self._on_drop()

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Forward one tool call; the hub's CallToolResult as a JSON dict."""
        conn = await self._connection()
        self._next_id += 1
        rid = self._next_id
        line = _encode({"id": rid, "tool": tool, "arguments": arguments, "meta": meta or {}})
        if len(line) > MAX_LINE:
            log.warning("hub: not forwarding a request of %d bytes (over %d)", len(line), MAX_LINE)
            raise ProtocolRefusal(INVALID_REQUEST, TOO_LARGE)
        if conn.dead:
            raise HubGone("the hub closed the connection")
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        conn.pending[rid] = future
        try:
            try:
                async with conn.lock:
                    conn.writer.write(line)
                    await conn.writer.drain()
            except OSError as exc:
                self._drop(conn, f"sending to the hub failed: {exc}")
                raise HubGone(f"sending to the hub failed: {exc}") from exc
            bound = call_timeout(self.timeout_s, arguments)
            try:
                async with asyncio.timeout(bound):
                    message = await future
            except TimeoutError:
                reason = f"the hub did not answer {tool} within {bound:g} s"
                self._drop(conn, reason)
                raise HubSilent(reason, bound or 0.0) from None  # a timeout had a bound
        finally:
            conn.pending.pop(rid, None)
        result = message.get("result")
        if isinstance(result, dict):
            return result
        error = message.get("error")
        if isinstance(error, dict):
            code, text = error.get("code"), error.get("message")
            if isinstance(code, int) and isinstance(text, str):
                raise ProtocolRefusal(code, text)
        return tool_error(error if isinstance(error, str) else "the hub's answer was malformed")

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is None:
            return
        self._drop(conn, "the forwarder closed")
        if conn.task is not None:
            conn.task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await conn.task


def call_timeout(base_s: float | None, arguments: Mapping[str, Any]) -> float | None:
    """How long a forwarded call may wait for its answer: ``base_s`` plus the call's own
    ``wait_ms`` (a lambo_stats wait on a receipt, at most WAIT_MS_MAX); None: no bound."""
    if base_s is None:
        return None
    wait_ms = arguments.get("wait_ms")
    if isinstance(wait_ms, int | float) and not isinstance(wait_ms, bool) and wait_ms > 0:
        return base_s + min(float(wait_ms), float(WAIT_MS_MAX)) / 1000.0
    return base_s


async def connect_to_hub(
    session: str,
    store: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    *,
    timeout_s: float | None = DEFAULT_FORWARD_TIMEOUT_S,
) -> Forwarder | None:
    """A connected ``Forwarder`` when a hub of (session, store) answers, else None.

    For one-shot callers (the CLI): forward when a hub holds the session,
    otherwise open the store and take the lease yourself. The holder's socket
    is read from its lease in the store file (read-only: nothing is created).
    """

    async def candidates() -> list[Path]:
        lease = await asyncio.to_thread(read_lease, Path(store), session)
        return hub_candidates(session, store, env, lease)

    forwarder = Forwarder(candidates, timeout_s=timeout_s)
    try:
        await forwarder.connect()
    except HubGone:
        await forwarder.close()
        return None
    return forwarder


# --------------------------------------------------------------------------- the election


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
    """

    def __init__(
        self,
        store: Store,
        session: str,
        store_path: str | os.PathLike[str] | None,
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
        self.store_path = store_path
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
        self._handler: Handler | None = None
        self._server: HubServer | None = None
        self._forwarder: Forwarder | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._watch: asyncio.Task[None] | None = None
        self._election: asyncio.Task[None] | None = None
        self._settled = asyncio.Event()
        self._waiting_logged = False
        self._background: set[asyncio.Task[None]] = set()
        #: whether the election may take the lease (see the class docstring)
        self._want_lease = True
        #: set while the election takes the lease and opens the hub; ``close`` waits it out
        self._taking_over = False
        #: wakes the election loop early when a call asks for the session
        self._wake = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> Role:
        """Elect: hub if the lease is ours, forwarder if a holder answers, else keep trying."""
        if self.store_path is not None:
            try:
                own_dir = prepare_socket_dir(socket_dir(self._env))
                self._own_path = socket_path(own_dir, self.session, self.store_path)
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
        assert self.store_path is not None
        try:
            private = Path(tempfile.mkdtemp(prefix=f"{APP}-{_current_uid()}-", dir="/tmp"))
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
            self._own_path = socket_path(private, self.session, self.store_path)
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
                return await forwarder.call(tool, arguments, meta)
            except HubGone as exc:
                log.warning("hub: a forwarded %s found no hub: %s", tool, exc)
                self._hub_gone(forwarder)
                self._ask_for_lease()
                if isinstance(exc, HubSilent):  # it read the call: it may still act on it
                    return tool_error(HUB_SILENT_TEXT.format(secs=exc.bound_s))
                # The hub stopped answering this call (a holder that dies closes its
                # sockets before its pid reads as gone, so the lease cannot tell yet).
                return hub_gone_result()
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
            self.store_path,
            own_holder=self.keeper.holder,
            now=self.keeper.clock.now(),
            dir_rule=self._dir_rule,
        )

    def _ask_for_lease(self) -> None:
        """A call needs memory and no hub answers: let the election take the lease."""
        if self.role in ("electing", "starting"):
            self._want_lease = True
            self._wake.set()

    # -- the election ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self.role == "closed"

    async def _candidates(self) -> list[Path]:
        if self.store_path is None:
            return []
        try:
            lease = await asyncio.to_thread(self.keeper.current)
        except LamboError as exc:
            log.warning("hub: the lease could not be read: %s (%s)", exc.message, exc.detail)
            return []
        return hub_candidates(self.session, self.store_path, self._env, lease)

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
            if not self._waiting_logged:
                self._waiting_logged = True
                current = await asyncio.to_thread(self.keeper.current)
                now = self.keeper.clock.now()
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
        forwarder._on_drop = lambda: self._hub_gone(forwarder)
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
            # a call asking for the session cuts the wait short
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(backoff):
                    await self._wake.wait()

    def _hub_gone(self, forwarder: Forwarder) -> None:
        if self._forwarder is not forwarder:
            return
        self._forwarder, self.socket = None, None
        log.warning("hub: the holder of session %r is gone; electing a new one", self.session)
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
        self._want_lease = False
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
