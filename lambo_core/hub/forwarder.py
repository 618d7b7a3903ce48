"""A serve's (or a command's) end of the hub socket: forwards tool calls to the hub.

Every forwarded call is bounded (``call_timeout``): a hub that does not answer
in time counts as gone, so a paused hub never leaves a client hanging. Spec:
"More than one client on one machine".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..framing import OversizedLine, extract_request_id
from ..limits import WAIT_MS_MAX
from ..mcp.refusals import INVALID_REQUEST, ProtocolRefusal
from ..model import Lease
from ..store.sqlite import read_lease
from .answers import tool_error
from .socket_dir import WarnOnce, hub_candidates
from .wire import MAX_ANSWER_LINE, MAX_LINE, TOO_LARGE, StreamLines, encode

log = logging.getLogger("lambo.hub")

#: [serve] forward_timeout_s's default: how long a forwarded call waits for the hub's
#: answer, beyond the call's own wait_ms (a recall waiting for a loading model is the
#: longest call that waits on nothing else)
DEFAULT_FORWARD_TIMEOUT_S = 30.0


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
        #: called once when the connection drops (not on close); the election sets it
        self.on_drop = on_drop
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
        if self.on_drop is not None and not self._closed:
            self.on_drop()

    async def call(
        self, tool: str, arguments: dict[str, Any], meta: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """Forward one tool call; the hub's CallToolResult as a JSON dict."""
        conn = await self._connection()
        self._next_id += 1
        rid = self._next_id
        line = encode({"id": rid, "tool": tool, "arguments": arguments, "meta": meta or {}})
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
    warn: WarnOnce | None = None,
    lease_of: Callable[[], Lease | None] | None = None,
) -> Forwarder | None:
    """A connected ``Forwarder`` when a hub of (session, store) answers, else None.

    For one-shot callers (the CLI): forward when a hub holds the session,
    otherwise open the store and take the lease yourself. The holder's socket
    is read from its lease: by ``lease_of`` (a database server's store), else
    from the SQLite file ``store`` names (read-only: nothing is created).
    """

    def read() -> Lease | None:
        return lease_of() if lease_of is not None else read_lease(Path(store), session)

    async def candidates() -> list[Path]:
        lease = await asyncio.to_thread(read)
        return hub_candidates(session, store, env, lease, warn)

    forwarder = Forwarder(candidates, timeout_s=timeout_s)
    try:
        await forwarder.connect()
    except HubGone:
        await forwarder.close()
        return None
    return forwarder
