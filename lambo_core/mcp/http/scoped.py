"""Which layer an HTTP request's tool call scopes, read before the request reaches the SDK.

A scoped call through a project's endpoint draws one request from the layer's own
per_session_rps, a merged recall only from the addressed session's (spec: lambo_recall,
"Layered sessions"; lambo_derive, "Writing to a layer"). The rate is applied before the
MCP layer, so the app reads the JSON-RPC body itself: ``buffered_body`` reads it as the
SDK's body limit does (never past the limit) and hands the SDK the very messages it read,
so the SDK's own checks (413 included) see the request as sent.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence

from starlette.types import Message, Receive

from ..tools import SCHEMAS


async def buffered_body(
    receive: Receive, limit: int, declared: int | None
) -> tuple[bytes | None, Receive]:
    """The whole body (None when it is over ``limit``, declared so or read so, or the
    client left before sending it all) and a ``receive`` that replays what was read."""
    if declared is not None and declared > limit:
        return None, receive  # the SDK refuses it unread (413)
    read: deque[Message] = deque()
    body = bytearray()
    complete = False
    while True:
        message = await receive()
        read.append(message)
        if message["type"] != "http.request":
            break  # a disconnect: the SDK hears it in its turn
        body.extend(message.get("body", b""))
        if len(body) > limit:
            break  # the SDK refuses at this very chunk
        if not message.get("more_body", False):
            complete = True
            break

    async def replay() -> Message:
        return read.popleft() if read else await receive()

    return (bytes(body) if complete else None), replay


def scoped_layer(body: bytes, layers: Sequence[str]) -> str | None:
    """The layer among ``layers`` a ``tools/call`` body names as its ``scope`` (of a tool
    that takes scope), else None: a merged recall, a call to the session itself, another
    method, or a body the SDK will refuse. Parsing here decides only which rate applies;
    the call itself is checked by the tool, as every call is."""
    if not layers:
        return None
    try:
        message = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(message, dict) or message.get("method") != "tools/call":
        return None
    params = message.get("params")
    if not isinstance(params, dict):
        return None
    name = params.get("name")
    schema = SCHEMAS.get(name) if isinstance(name, str) else None
    arguments = params.get("arguments")
    if schema is None or "scope" not in schema["properties"] or not isinstance(arguments, dict):
        return None
    scope = arguments.get("scope")
    return scope if isinstance(scope, str) and scope in layers else None
