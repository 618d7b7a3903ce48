"""The hub's socket: its private directory, its name, and where a holder published it.

A serve publishes in ``$XDG_RUNTIME_DIR/lambo`` (else ``/tmp/lambo-<uid>``),
only if that is a real directory of this uid, mode 700; otherwise in a private
directory of its own (``election``). The holder records its socket with its
lease, so any serve finds it there. Spec: "More than one client on one machine".
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
from collections.abc import Mapping
from pathlib import Path

from ..errors import ConfigError
from ..model import Lease
from ..paths import APP, socket_dir
from .lease import on_another_host

log = logging.getLogger("lambo.hub")

#: sun_path on macOS and the BSDs is 104 bytes with its terminating NUL (Linux: 108);
#: a socket path must fit the smaller one, so at most 103 bytes of path.
MAX_SOCKET_PATH = 104
SOCKET_DIR_ADVICE = "remove the directory or point XDG_RUNTIME_DIR at one you own"


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


class WarnOnce:
    """Logs each distinct message once, remembering the last ``limit`` of them.

    Owned by whoever looks for a holder again and again (a ``SessionHub``, one
    command's wait for its hub), and used from that owner's event loop only.
    """

    def __init__(self, limit: int = 64) -> None:
        self._limit = limit
        self._seen: dict[str, None] = {}

    def __call__(self, message: str) -> None:
        if message in self._seen:
            return
        self._seen[message] = None
        if len(self._seen) > self._limit:  # bounded: forget the oldest
            del self._seen[next(iter(self._seen))]
        log.warning("%s", message)


def _warn(message: str) -> None:
    log.warning("%s", message)


def current_uid() -> int:
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
    uid = current_uid()
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


#: a location naming a database server, not a file: a URI, as ``store_location`` gives a
#: postgres store (``postgresql://user@host:port/dbname``, no password)
_SERVER_LOCATION = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def store_identity(store: str | os.PathLike[str]) -> str:
    """The store's identity in a socket name: a SQLite file's real absolute path, or a
    database server's location text as it is (it names no file)."""
    text = os.fspath(store)
    if not isinstance(store, os.PathLike) and _SERVER_LOCATION.match(text):
        return text
    return os.path.realpath(text)


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
    lease: Lease | None,
    session: str,
    store: str | os.PathLike[str],
    warn: WarnOnce | None = None,
) -> tuple[Path | None, str | None]:
    """The socket the holder recorded with its lease, if this serve may forward into it.

    ``(path, None)`` when it may. ``(None, rule)`` when its directory is unsafe
    (``rule``: what is wrong, without the path). ``(None, None)`` when the
    lease records no socket, or one this serve must not use: not absolute, too
    long, or a file name other than this session and store's (logged).
    """
    if lease is None or not lease.socket:
        return None, None
    say = warn or _warn
    path = Path(lease.socket)
    if not path.is_absolute() or path.name != socket_name(session, store):
        say(
            f"hub: the lease of session {session!r} records the socket {path}, which is not "
            "this session and store's; not forwarding into it"
        )
        return None, None
    try:
        check_socket_path_length(path)
        if not check_socket_dir(path.parent):
            return None, None
    except SocketDirRefused as exc:
        say(f"hub: not forwarding to the holder of session {session!r}: {exc.message}")
        return None, exc.rule
    except SocketPathTooLong as exc:
        say(f"hub: not forwarding to the holder of session {session!r}: {exc.message}")
        return None, None
    return path, None


def hub_candidates(
    session: str,
    store: str | os.PathLike[str],
    env: Mapping[str, str] | None = None,
    lease: Lease | None = None,
    warn: WarnOnce | None = None,
    *,
    host: str | None = None,
) -> list[Path]:
    """Sockets where the holder of (session, store) may answer, in the order to try them.

    The socket recorded with ``lease`` (see ``recorded_socket``). When the
    lease records none yet, also this environment's own directory's socket of
    that name, if one exists there (a holder that published but has not
    recorded it yet). A socket in an unsafe directory is never a candidate, and
    neither is any of a holder on another host than ``host`` (default: this one's,
    ``this_host``): its socket is that machine's.
    """
    found: list[Path] = []
    if on_another_host(lease, host=host):
        return found
    recorded, _ = recorded_socket(lease, session, store, warn)
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
