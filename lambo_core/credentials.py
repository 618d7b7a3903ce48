"""Who may call an HTTP serve: ``[[serve.credential]]`` entries and ``--auth-token``, resolved
to token digests, and the constant-time check of a request's ``Authorization: Bearer``.

lambo.toml never holds a token in plain text: an entry gives the token's SHA-256 digest, a
file to read it from, or a variable to read it from; only digests are kept in memory. Spec:
"Transports" and its caution ("every request must carry Authorization: Bearer <token>").
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from .errors import ConfigError

log = logging.getLogger(__name__)

#: the shortest token accepted: a guessable token on a network port is no credential
MIN_TOKEN_CHARS = 16
#: the name a credential from --auth-token / LAMBO_AUTH_TOKEN goes by in logs
AUTH_TOKEN_NAME = "auth-token"
#: ``sessions = ["*"]``: every session the serve holds
EVERY_SESSION = "*"
ENTRY_FIELDS = ("name", "sessions", "token_sha256", "token_file", "token_env")
TOKEN_SOURCES = ("token_sha256", "token_file", "token_env")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


@dataclass(frozen=True)
class CredentialEntry:
    """One ``[[serve.credential]]`` table as written: a name, where its token comes from, and
    the sessions it reaches."""

    name: str
    sessions: tuple[str, ...]
    token_sha256: str = ""
    token_file: str = ""
    token_env: str = ""

    @property
    def source(self) -> str:
        """Which of the three the token comes from (for ``config show``; never the token)."""
        for field in TOKEN_SOURCES:
            if getattr(self, field):
                return field
        return ""

    def shown(self) -> dict[str, object]:
        """The entry as ``config show`` prints it: a digest is shown only as set."""
        shown: dict[str, object] = {"name": self.name, "sessions": list(self.sessions)}
        if self.token_sha256:
            shown["token_sha256"] = "(set)"
        if self.token_file:
            shown["token_file"] = self.token_file
        if self.token_env:
            shown["token_env"] = self.token_env
        return shown


def parse_entries(raw: object, origin: str) -> tuple[CredentialEntry, ...]:
    """``[[serve.credential]]`` as TOML gave it, checked field by field (refusals name the
    entry by its position and the field, never a value that may be a secret)."""
    if not isinstance(raw, list):
        raise ConfigError(f"serve.credential ({origin}) must be an array of tables")
    entries = tuple(_entry(i, item, origin) for i, item in enumerate(raw, 1))
    names = [e.name for e in entries]
    for name in names:
        if names.count(name) > 1:
            raise ConfigError(f"serve.credential ({origin}): the name {name!r} is used twice")
    return entries


def _entry(index: int, item: object, origin: str) -> CredentialEntry:
    where = f"serve.credential #{index} ({origin})"
    if not isinstance(item, dict):
        raise ConfigError(f"{where} must be a table")
    unknown = sorted(set(item) - set(ENTRY_FIELDS))
    if unknown:
        raise ConfigError(
            f"{where}: unknown field {_safe(unknown[0])}; a credential takes: "
            f"{', '.join(ENTRY_FIELDS)}"
        )
    name = item.get("name")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(
            f"{where}: name must be 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit"
        )
    sessions = item.get("sessions")
    if (
        not isinstance(sessions, list)
        or not sessions
        or not all(isinstance(s, str) and s.strip() for s in sessions)
    ):
        raise ConfigError(
            f"{where}: sessions must be a non-empty list of session names "
            f'(["*"] reaches every session the serve holds)'
        )
    given = [field for field in TOKEN_SOURCES if field in item]
    if len(given) != 1:
        raise ConfigError(
            f"{where}: give exactly one of token_sha256 (the token's SHA-256 digest, 64 "
            "lowercase hex digits), token_file (a file holding the token) or token_env (a "
            "variable holding it); the token itself never goes in lambo.toml"
        )
    field = given[0]
    value = item[field]
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {field} must be a non-empty string")
    if field == "token_sha256" and not _HEX64.fullmatch(value):
        raise ConfigError(f"{where}: token_sha256 must be 64 lowercase hex digits")
    if field == "token_env" and not _ENV_NAME.fullmatch(value):
        raise ConfigError(f"{where}: token_env must be a variable name")
    return CredentialEntry(name, tuple(sessions), **{field: value})


def _safe(text: str) -> str:
    """A field name from the file, shown only when it is plain."""
    return repr(text) if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", text) else "(a field name)"


@dataclass(frozen=True)
class Credential:
    """A resolved credential: its name, its token's digest, and the sessions it reaches
    (None: every session)."""

    name: str
    digest: bytes
    sessions: frozenset[str] | None

    def reaches(self, session: str) -> bool:
        return self.sessions is None or session in self.sessions


def digest_of(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8")).digest()


def resolve(
    entries: tuple[CredentialEntry, ...],
    auth_token: str,
    env: Mapping[str, str] | None = None,
    *,
    base: Path | None = None,
) -> tuple[Credential, ...]:
    """Every configured credential with its digest: ``--auth-token`` / LAMBO_AUTH_TOKEN (every
    session) and each entry. Refuses a token too short, a file or variable that yields none,
    and two credentials with one token. A relative ``token_file`` is read from ``base`` (the
    directory of the lambo.toml that names it), not from wherever the serve was started."""
    env = os.environ if env is None else env
    resolved: list[Credential] = []
    if auth_token:
        _check_token(auth_token, "the --auth-token / LAMBO_AUTH_TOKEN token")
        resolved.append(Credential(AUTH_TOKEN_NAME, digest_of(auth_token), None))
    for entry in entries:
        resolved.append(_resolve_entry(entry, env, base))
    digests = [c.digest for c in resolved]
    for credential in resolved:
        if digests.count(credential.digest) > 1:
            raise ConfigError(
                f"credential {credential.name!r} has the same token as another credential; "
                "give each credential a token of its own"
            )
    return tuple(resolved)


def _resolve_entry(entry: CredentialEntry, env: Mapping[str, str], base: Path | None) -> Credential:
    where = f"credential {entry.name!r}"
    sessions = None if EVERY_SESSION in entry.sessions else frozenset(entry.sessions)
    if entry.token_sha256:
        return Credential(entry.name, bytes.fromhex(entry.token_sha256), sessions)
    if entry.token_env:
        token = env.get(entry.token_env, "")
        if not token:
            raise ConfigError(f"{where}: the variable {entry.token_env} is not set or is empty")
        _check_token(token, f"{where}'s token (from {entry.token_env})")
        return Credential(entry.name, digest_of(token), sessions)
    path = Path(entry.token_file).expanduser()
    if base is not None and not path.is_absolute():
        path = base / path
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise ConfigError(f"{where}: its token_file could not be read as text") from None
    if not token:
        raise ConfigError(f"{where}: its token_file is empty")
    from .store.files import readable_by_others  # the store package is heavy to import

    mode = readable_by_others(path)
    if mode is not None:
        log.warning("%s: its token_file can be read by other accounts (mode %s)", where, mode)
    _check_token(token, f"{where}'s token (from its token_file)")
    return Credential(entry.name, digest_of(token), sessions)


def _check_token(token: str, what: str) -> None:
    # ASCII only: a header arrives as bytes read as latin-1, so a token with other
    # characters (sent as UTF-8) could never compare equal to its own digest
    if len(token) < MIN_TOKEN_CHARS or not all("!" <= ch <= "~" for ch in token):
        raise ConfigError(
            f"{what} must be at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces"
        )


class Verifier:
    """Which credential a request's ``Authorization`` header carries, compared in constant
    time against every configured digest (no early exit, so timing says nothing of which)."""

    def __init__(self, credentials: tuple[Credential, ...]) -> None:
        self.credentials = credentials

    @property
    def required(self) -> bool:
        return bool(self.credentials)

    def identify(self, authorization: str | None) -> Credential | None:
        if authorization is None:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        presented = digest_of(token.strip())
        found: Credential | None = None
        for credential in self.credentials:
            if hmac.compare_digest(presented, credential.digest):
                found = credential
        return found
