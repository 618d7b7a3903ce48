"""The [serve] keys of lambo.toml: transports, sessions and layers, HTTP limits, the lease
and the stop (spec: "Configuration", "Transports"). ``config_schema.KEYS`` ends with them.
"""

from __future__ import annotations

from .config_key import Key
from .credentials import parse_entries

SERVE_KEYS: tuple[Key, ...] = (
    Key("serve", "transport", "stdio", "stdio or http", choices=("stdio", "http")),
    Key("serve", "bind", "127.0.0.1", "HTTP bind address"),
    Key(
        "serve",
        "port",
        7700,
        "HTTP port; 0 picks a free one (the serve logs it)",
        minimum=0,
        maximum=65535,
    ),
    Key("serve", "agent", "lambo", "the id this process holds the session lease under"),
    Key(
        "serve",
        "auth_token",
        "",
        "a bearer token every HTTP request must carry (reaches every session); required, or a "
        "[[serve.credential]], to bind off loopback; from LAMBO_AUTH_TOKEN or --auth-token "
        "only, never this file",
        env="LAMBO_AUTH_TOKEN",
        secret=True,
    ),
    Key(
        "serve",
        "sessions",
        (),
        "the sessions an HTTP serve holds, each at /mcp/s/<session>; /mcp serves the first "
        "(--session replaces the list)",
    ),
    Key(
        "serve",
        "layers",
        (),
        "shared sessions of the same store, such as general, that every session this serve "
        "holds also reads (a merged recall) and can write to with scope; a session listed "
        "here is served unlayered (--layer replaces the list)",
    ),
    Key(
        "serve",
        "credential",
        (),
        '[[serve.credential]] tables: name, sessions (or ["*"]), and one of token_sha256, '
        "token_file, token_env; never the token itself",
        parse=parse_entries,
    ),
    Key(
        "serve",
        "allowed_origins",
        (),
        "browser origins an HTTP request may come from besides loopback's "
        "(http://localhost:*, http://127.0.0.1:*, http://[::1]:*); a trailing :* takes any port",
    ),
    Key(
        "serve",
        "allowed_hosts",
        (),
        "Host header values accepted besides loopback's and the bind address's; a trailing :* "
        "takes any port",
    ),
    Key(
        "serve",
        "per_credential_rps",
        50.0,
        "HTTP requests per second one configured credential may make (unauthenticated "
        "loopback callers meet only per_session_rps); "
        "bursts of twice that (at least one request); past it 429 with Retry-After",
        minimum=0.1,
        maximum=100_000.0,
    ),
    Key(
        "serve",
        "per_session_rps",
        100.0,
        "HTTP requests per second one session takes from every caller together; bursts of "
        "twice that (at least one request); past it 429 with Retry-After",
        minimum=0.1,
        maximum=100_000.0,
    ),
    Key(
        "serve",
        "max_live_sessions",
        32,
        "MCP sessions an HTTP serve keeps open at once, over all its sessions; past it 503",
        minimum=1,
        maximum=100_000,
    ),
    Key(
        "serve",
        "evict_idle_after_s",
        60.0,
        "at the max_live_sessions ceiling, the MCP session idle longest is closed to make "
        "room if it has been idle this long (a one-shot client never closes its own)",
        minimum=0.0,
        maximum=604_800.0,
    ),
    Key(
        "serve",
        "session_idle_timeout_s",
        1800.0,
        "an MCP session over HTTP with no request for this long is closed (its client starts "
        "a new one)",
        minimum=1.0,
        maximum=604_800.0,
    ),
    Key(
        "serve",
        "max_request_bytes",
        4 * 1024 * 1024,
        "the largest HTTP request body, refused with 413 before it is read; at most the 4 MiB "
        "every transport caps a request at",
        minimum=1024,
        maximum=4 * 1024 * 1024,
    ),
    Key(
        "serve",
        "lease_ttl_s",
        45.0,
        "session lease time to live (the holder heartbeats every third of it)",
        minimum=1.0,
        maximum=3600.0,
    ),
    Key(
        "serve",
        "forward_timeout_s",
        30.0,
        "how long a call forwarded to the session's hub waits for its answer, beyond the "
        "call's own wait_ms; a hub silent that long counts as gone",
        minimum=0.1,
        maximum=3600.0,
    ),
    Key(
        "serve",
        "shutdown_budget_s",
        15.0,
        "how long a clean stop may take in all (finish the write being applied, flush, hand "
        "the rest on as durable intents); kept below the lease TTL",
        minimum=1.0,
        maximum=3600.0,
    ),
)
