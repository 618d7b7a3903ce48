"""`lambo setup CLIENT --url URL`: the URL of a ``lambo serve --transport http``, checked,
and the url entry each client expects for it. The spec's "HTTP for a machine with several
independent clients" says why a machine moves every client to one URL.

A refusal names ``--url`` (or ``--auth-token-env``) and the rule and never repeats the
value: it may hold a control character, or a password someone put in the URL.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from .errors import ParameterError
from .hosts import is_loopback
from .text import check_string, describe_codepoint, find_refused

URL_EXAMPLE = "http://127.0.0.1:7700/mcp/s/<session>"
_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z", re.ASCII)


@dataclass(frozen=True)
class ServerUrl:
    """Where a client reaches an HTTP serve, and the variable holding its bearer token."""

    url: str
    token_env: str | None = None

    def entry(self, client: str) -> dict[str, Any]:
        """The ``lambo`` entry in ``client``'s own form (cursor, codex, pi, generic, claude).

        The token is only ever referred to by its variable, in the syntax the client
        expands: Cursor ``${env:VAR}``, Pi and a ``.mcp.json`` ``${VAR}``, Codex by name.
        """
        if client == "codex":
            entry: dict[str, Any] = {"url": self.url}
            if self.token_env:
                entry["bearer_token_env_var"] = self.token_env
            return entry
        entry = (
            {"url": self.url} if client in ("cursor", "pi") else {"type": "http", "url": self.url}
        )
        if self.token_env:
            reference = (
                f"${{env:{self.token_env}}}" if client == "cursor" else f"${{{self.token_env}}}"
            )
            entry["headers"] = {"Authorization": f"Bearer {reference}"}
        return entry

    def describe(self) -> str:
        token = f", the bearer token from ${self.token_env}" if self.token_env else ""
        return f"url {self.url}{token}"


def _rule(what: str) -> ParameterError:
    return ParameterError(
        f"--url {what}; it must be an http:// or https:// URL with a host and a path, "
        f"such as {URL_EXAMPLE}"
    )


def _split(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        port = parts.port  # raises for a port that is not a number in 0..65535
    except ValueError:
        raise _rule("does not parse as a URL (a bracketed host or a port is malformed)") from None
    if port == 0:
        raise _rule("has port 0")
    return parts


def check_url(value: object) -> str:
    """``value`` as the URL of an HTTP serve; ``ParameterError`` naming the rule it breaks."""
    if not isinstance(value, str):
        raise ParameterError("--url must be a string")
    for char in value:
        # Stricter than check_string: no tab or newline, no space, no joiner either.
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cf", "Cs") or find_refused(char):
            raise ParameterError(
                "--url must not contain a control, whitespace or invisible formatting "
                f"character; found {describe_codepoint(char)}"
            )
    url = check_string("--url", value)
    parts = _split(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise _rule("does not start with http:// or https://")
    if "@" in parts.netloc:
        raise ParameterError(
            "--url must not carry a user or password (user:password@host): a token belongs "
            "in the Authorization header, never in the URL; name the environment variable "
            "that holds it with --auth-token-env VAR"
        )
    if not parts.hostname:
        raise _rule("has no host")
    if parts.path in ("", "/"):
        raise _rule("has no path (/mcp serves the default session, /mcp/s/<session> another)")
    return url


def check_token_env(value: object) -> str:
    """The name ``--auth-token-env`` gives: a variable name, never the token itself."""
    if not isinstance(value, str) or not _ENV_NAME_RE.match(value):
        raise ParameterError(
            "--auth-token-env must name an environment variable (ASCII letters, digits and _, "
            "not starting with a digit); the client reads the token from it, and the token "
            "itself never goes into a config file"
        )
    return value


def url_warnings(server: ServerUrl, env: dict[str, str] | None = None) -> list[str]:
    """What is worth saying about a URL that passed: plain http off loopback, a token unset."""
    warnings: list[str] = []
    parts = urlsplit(server.url)
    host = parts.hostname or ""
    if parts.scheme.lower() == "http" and not is_loopback(host):
        warnings.append(
            "--url is plain http to a host that is not loopback: the bearer token and every "
            "request cross the network in clear; put the serve behind https"
        )
    environ = os.environ if env is None else env
    if server.token_env and not environ.get(server.token_env):
        warnings.append(
            "the variable --auth-token-env names is not set in this shell; the client reads "
            "it from its own environment when it connects, so set it there"
        )
    return warnings
