"""What lambo may say about a PostgreSQL DSN: never its password.

A DSN is a ``postgres://`` / ``postgresql://`` URI or a libpq ``key=value``
string. ``mask_dsn`` hides the password in both forms (``config show``, logs),
``dsn_identity`` names the database without any secret (hub sockets, messages),
``dsn_problem`` refuses what libpq would not read as a DSN (another scheme).
A URI is read as libpq reads it, not as ``urllib`` does: its userinfo runs from
``://`` to the first ``@`` (a ``/`` first means there is none), so an unencoded
``#`` or ``?`` belongs to the password. psycopg's parser (libpq's own) is used
when psycopg is importable; config code never needs it.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
DEFAULT_PORT = "5432"

_URI = re.compile(r"^\s*postgres(?:ql)?://", re.IGNORECASE)
# any scheme's "scheme://user:password@": masked in every text scrub sees
_ANY_USERINFO = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^@\s]+@")
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

RULE = (
    "must be a postgresql:// or postgres:// URI or a libpq key=value string "
    "(the value is not shown: it may hold a password)"
)


def looks_like_dsn(text: str) -> bool:
    """A postgres URI, or a libpq ``key=value`` string whose first key is a libpq keyword
    (so a SQLite path with an ``=`` in it stays a path)."""
    if _URI.match(text):
        return True
    first = _PAIR.match(text)
    return first is not None and first.group(1).lower() in _KEYWORDS


def dsn_problem(text: str) -> str | None:
    """Why libpq would not read ``text`` as a DSN (words to follow a field's name, never
    the value), or None. Another scheme (SQLAlchemy's ``postgresql+psycopg://``, a typo)
    is refused here rather than read as a path or handed to libpq, which echoes it."""
    if not looks_like_dsn(text):
        return RULE
    if not _libpq_reads(text):
        return (
            "is not a DSN libpq can read (an unclosed quote, a value with a space not in "
            "quotes, a key it does not know) (the value is not shown: it may hold a password)"
        )
    if _URI.match(text):
        ports = _parse(text).get("port", "")
        if any(not port.isdigit() for port in ports.split(",") if port):
            return (
                "has a port that is not a number: a password holding '/' must be "
                "percent-encoded (%2F) (the value is not shown: it may hold a password)"
            )
    return None


def _pairs(dsn: str) -> list[tuple[str, str, tuple[int, int]]]:
    """(key, value, span of the value) of a key=value DSN, values unquoted."""
    found = []
    for match in _PAIR.finditer(dsn):
        raw = match.group(2)
        value = raw[1:-1] if raw.startswith("'") and raw.endswith("'") and len(raw) >= 2 else raw
        found.append((match.group(1).lower(), re.sub(r"\\(.)", r"\1", value), match.span(2)))
    return found


def _userinfo_end(rest: str) -> int | None:
    """Where libpq's userinfo ends in a URI after ``://`` (the ``@``), or None: libpq scans
    to the first ``@`` or ``/``, and only an ``@`` found first makes a userinfo."""
    for at, char in enumerate(rest):
        if char == "@":
            return at
        if char == "/":
            return None
    return None


def _parse_uri(dsn: str) -> dict[str, str]:
    """A URI's parts as libpq's conninfo_uri_parse_options finds them (psycopg absent)."""
    rest = dsn.strip().partition("://")[2]
    out: dict[str, str] = {}
    end = _userinfo_end(rest)
    if end is not None:
        user, colon, password = rest[:end].partition(":")
        if user:
            out["user"] = unquote(user)
        if colon and password:
            out["password"] = unquote(password)
        rest = rest[end + 1 :]
    cut = min([i for i in (rest.find("/"), rest.find("?")) if i != -1] or [len(rest)])
    netloc, rest = rest[:cut], rest[cut:]
    hosts, ports = [], []
    for piece in netloc.split(","):
        if piece.startswith("["):
            host, _, tail = piece[1:].partition("]")
            port = tail[1:] if tail.startswith(":") else ""
        else:
            host, _, port = piece.partition(":")
        hosts.append(unquote(host))
        ports.append(port)
    if any(hosts):
        out["host"] = ",".join(hosts)
    if any(ports):
        out["port"] = ",".join(ports)
    query = rest[1:] if rest.startswith("?") else ""
    if rest.startswith("/"):
        dbname, _, query = rest[1:].partition("?")
        if dbname:
            out["dbname"] = unquote(dbname)
    for pair in query.split("&"):
        key, eq, value = pair.partition("=")
        if eq:
            out[unquote(key)] = unquote(value)
    return out


def _libpq_reads(dsn: str) -> bool:
    """Whether libpq's own parser takes ``dsn`` (True where psycopg is not importable)."""
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # pragma: no cover - config code without psycopg installed
        return True
    try:
        conninfo_to_dict(dsn.strip())
    except psycopg.Error:
        return False
    return True


def _mask_query(rest: str) -> str:
    """A URI's ``?key=value&…`` with the value of every password key masked, keys read
    percent-decoded as libpq reads them (``passw%6Frd`` is ``password``)."""
    head, mark, query = rest.partition("?")
    if not mark:
        return rest
    pairs = []
    for pair in query.split("&"):
        key, eq, _ = pair.partition("=")
        pairs.append(f"{key}={MASK}" if eq and unquote(key).lower() in _SECRET_KEYS else pair)
    return f"{head}?{'&'.join(pairs)}"


def _parse(dsn: str) -> dict[str, str]:
    """The DSN's connection parameters: libpq's parser through psycopg when importable."""
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # pragma: no cover - config code without psycopg installed
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None:
        try:
            return {k: str(v) for k, v in conninfo_to_dict(dsn.strip()).items() if v is not None}
        except psycopg.Error:
            pass  # libpq refuses it (it will at connect, too): read it by hand for messages
    if _URI.match(dsn):
        return _parse_uri(dsn)
    return {key: value for key, value, _ in _pairs(dsn)}


def dsn_password(dsn: str) -> str | None:
    """The password a DSN carries (URI userinfo, ``?password=`` or ``password=``), or None."""
    return _parse(dsn).get("password") or None


def mask_userinfo(text: str) -> str:
    """``text`` with the password of any ``scheme://user:password@`` in it masked."""
    return _ANY_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)


def mask_dsn(dsn: str) -> str:
    """The DSN with every password replaced by ``***`` (URI and key=value forms); a DSN
    libpq cannot read is masked from its first password key on, and whatever password
    libpq would take from it never survives in the text."""
    masked = _mask_forms(dsn)
    if not _URI.match(dsn) and not _libpq_reads(dsn):  # a URI's parts are masked one by one
        key = re.search(r"(?:ssl)?passw(?:o|%6f)rd", masked, flags=re.I)
        if key is not None:
            masked = masked[: key.end()] + "=" + MASK
    password = dsn_password(dsn)
    if password and len(password) >= 3 and password in masked:
        masked = masked.replace(password, MASK)
    return masked


def _mask_forms(dsn: str) -> str:
    if _URI.match(dsn):
        head, sep, rest = dsn.partition("://")
        end = _userinfo_end(rest)
        if end is not None:
            user, colon, password = rest[:end].partition(":")
            if colon and password:
                rest = f"{user}:{MASK}{rest[end:]}"
        rest = _mask_query(rest)
        # a '/' in a password ends libpq's userinfo early: mask up to the '@' all the same
        return mask_userinfo(f"{head}{sep}{rest}")
    out, last = [], 0
    for key, value, (start, end) in _pairs(dsn):
        if key in _SECRET_KEYS and value:
            out.append(dsn[last:start] + MASK)
            last = end
    out.append(dsn[last:])
    return "".join(out)


def scrub(text: str, dsn: str) -> str:
    """``text`` (a driver message, say) with the DSN's password, the DSN itself, and any
    ``scheme://user:password@`` in it masked."""
    if dsn:
        password = dsn_password(dsn)
        if password:
            text = text.replace(password, MASK)
        text = text.replace(dsn, mask_dsn(dsn))
    return mask_userinfo(text)


def dsn_identity(dsn: str) -> str:
    """Stable text naming the database a DSN reaches, without password or other options:
    ``postgresql://user@host:port/dbname``, normalised so that spellings of one database
    agree (either scheme, port 5432 said or not, dbname defaulting to the user). Hosts
    are taken as spelt: ``localhost`` and ``127.0.0.1`` stay two identities."""
    values = _parse(dsn)
    user = values.get("user", "")
    hosts = (values.get("host") or values.get("hostaddr") or "").split(",")
    ports = (values.get("port") or "").split(",")
    if len(ports) == 1:  # libpq: one port serves every host
        ports = ports * len(hosts)
    ports += [""] * (len(hosts) - len(ports))
    netloc = ",".join(
        f"{f'[{host}]' if ':' in host else host}:{port or DEFAULT_PORT}"
        for host, port in zip(hosts, ports, strict=False)
    )
    dbname = values.get("dbname") or user
    who = f"{user}@" if user else ""
    return mask_userinfo(f"postgresql://{who}{netloc}/{dbname}")
