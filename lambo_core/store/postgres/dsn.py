"""What lambo may say about a PostgreSQL DSN: never its password.

A DSN is a ``postgres://`` / ``postgresql://`` URI or a libpq ``key=value``
string. ``mask_dsn`` hides the password in both forms (``config show``, logs),
``dsn_identity`` names the database without any secret (hub sockets, messages).
Parsed here by hand so that config code never needs psycopg.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, unquote, urlsplit

MASK = "***"

_URI = re.compile(r"^\s*postgres(?:ql)?://", re.IGNORECASE)
# libpq connection keywords (libpq's "Parameter Key Words"): a key=value string starts with one
_KEYWORDS = frozenset(
    [
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "requiressl",
        "sslnegotiation",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcertmode",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
    ]
)
_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)*)")
_SECRET_KEYS = frozenset({"password", "sslpassword"})


def looks_like_dsn(text: str) -> bool:
    """A postgres URI, or a libpq ``key=value`` string whose first key is a libpq keyword
    (so a SQLite path with an ``=`` in it stays a path)."""
    if _URI.match(text):
        return True
    first = _PAIR.match(text)
    return first is not None and first.group(1).lower() in _KEYWORDS


def _pairs(dsn: str) -> list[tuple[str, str, tuple[int, int]]]:
    """(key, value, span of the value) of a key=value DSN, values unquoted."""
    found = []
    for match in _PAIR.finditer(dsn):
        raw = match.group(2)
        value = raw[1:-1] if raw.startswith("'") and raw.endswith("'") and len(raw) >= 2 else raw
        found.append((match.group(1).lower(), re.sub(r"\\(.)", r"\1", value), match.span(2)))
    return found


def dsn_password(dsn: str) -> str | None:
    """The password a DSN carries (URI userinfo, ``?password=`` or ``password=``), or None."""
    if _URI.match(dsn):
        parts = urlsplit(dsn.strip())
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key.lower() == "password" and value:
                return value
        userinfo = parts.netloc.rpartition("@")[0] if "@" in parts.netloc else ""
        if ":" in userinfo:
            password = unquote(userinfo.split(":", 1)[1])
            return password or None
        return None
    for key, value, _ in _pairs(dsn):
        if key == "password" and value:
            return value
    return None


def mask_dsn(dsn: str) -> str:
    """The DSN with every password replaced by ``***`` (URI and key=value forms)."""
    if _URI.match(dsn):
        head, sep, rest = dsn.partition("://")
        netloc_end = len(rest)
        for stop in "/?#":
            at = rest.find(stop)
            if at != -1:
                netloc_end = min(netloc_end, at)
        netloc, tail = rest[:netloc_end], rest[netloc_end:]
        if "@" in netloc:
            userinfo, _, hosts = netloc.rpartition("@")
            user, colon, password = userinfo.partition(":")
            if colon and password:
                netloc = f"{user}:{MASK}@{hosts}"
        tail = re.sub(
            r"([?&](?:ssl)?password=)[^&#]*", lambda m: m.group(1) + MASK, tail, flags=re.I
        )
        return f"{head}{sep}{netloc}{tail}"
    out, last = [], 0
    for key, value, (start, end) in _pairs(dsn):
        if key in _SECRET_KEYS and value:
            out.append(dsn[last:start] + MASK)
            last = end
    out.append(dsn[last:])
    return "".join(out)


def scrub(text: str, dsn: str) -> str:
    """``text`` (a driver message, say) with the DSN's password, and any DSN in it, masked."""
    password = dsn_password(dsn)
    if password:
        text = text.replace(password, MASK)
    return text.replace(dsn, mask_dsn(dsn))


def dsn_identity(dsn: str) -> str:
    """Stable text naming the database a DSN reaches, without password or other options:
    ``postgresql://user@host:port/dbname``, parts the DSN leaves out left out."""
    user = host = port = dbname = ""
    if _URI.match(dsn):
        parts = urlsplit(dsn.strip())
        netloc = parts.netloc
        userinfo, _, hosts = netloc.rpartition("@") if "@" in netloc else ("", "", netloc)
        user = unquote(userinfo.partition(":")[0])
        host = unquote(hosts)
        dbname = unquote(parts.path.lstrip("/"))
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            key = key.lower()
            if key == "host" and not host:
                host = value
            elif key == "port" and value:
                port = value
            elif key == "dbname" and value:
                dbname = value
            elif key == "user" and value:
                user = value
        if port:
            host = f"{host}:{port}"
    else:
        values = {key: value for key, value, _ in _pairs(dsn)}
        user, dbname = values.get("user", ""), values.get("dbname", "")
        host = values.get("host", values.get("hostaddr", ""))
        if values.get("port"):
            host = f"{host}:{values['port']}"
    who = f"{user}@" if user else ""
    return f"postgresql://{who}{host}/{dbname}"
