"""The hub's end of the socket: reads forwarded calls and answers them with its handler.

Calls on one connection may overlap; answers go back in completion order. A
bad line is refused as stdio refuses it. Spec: "More than one client on one
machine", "Limits".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import stat
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError, LamboError, internal_fault
from ..framing import EDGE, OversizedLine, extract_request_id
from ..log_limits import RateLimitedWarnings
from ..mcp.refusals import (
    BATCH_TEXT,
    INVALID_ID_TEXT,
    INVALID_PARAMS,
    INVALID_REQUEST,
    INVALID_REQUEST_TEXT,
    PARSE_ERROR,
    PARSE_ERROR_TEXT,
    TOO_DEEP_TEXT,
    UNKNOWN_TOOL,
)
from ..reach import reach_in_meta, reaching
from .answers import tool_error
from .socket_dir import SOCKET_DIR_ADVICE, check_socket_path_length, prepare_socket_dir
from .wire import (
    MAX_LINE,
    TOO_LARGE,
    Handler,
    StreamLines,
    ToolNames,
    encode,
    refusal,
    valid_id,
)

log = logging.getLogger("lambo.hub")


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
        #: a local client may send any number of bad lines: warn about a few, then count them
        self._bad_lines = RateLimitedWarnings(log, "hub: bad forwarded request lines")

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
                data = encode(message)
            except (TypeError, ValueError) as exc:
                fault = internal_fault(f"answer not JSON: {exc}")
                log.error("hub: %s", fault.detail)
                data = encode({"id": message.get("id"), "result": tool_error(fault.render())})
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
                    await send(refusal(rid, INVALID_REQUEST, TOO_LARGE))
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
            self._bad_lines.warning(
                "hub: a forwarded request nested too deeply (%d bytes)", len(line)
            )
            rid = extract_request_id(line[:EDGE], line[-EDGE:])
            await send(refusal(rid, INVALID_REQUEST, TOO_DEEP_TEXT))
            return
        except ValueError as exc:
            self._bad_lines.warning(
                "hub: a forwarded request that is not JSON (%d bytes): %s", len(line), exc
            )
            await send(refusal(None, PARSE_ERROR, PARSE_ERROR_TEXT))
            return
        if isinstance(message, list):
            self._bad_lines.warning("hub: a batch of forwarded requests (%d bytes)", len(line))
            await send(refusal(None, INVALID_REQUEST, BATCH_TEXT))
            return
        rid = message.get("id") if isinstance(message, dict) else None
        tool = message.get("tool") if isinstance(message, dict) else None
        arguments = message.get("arguments") if isinstance(message, dict) else None
        if not valid_id(rid):
            self._bad_lines.warning("hub: a forwarded request with an id of no id type")
            await send(refusal(None, INVALID_REQUEST, INVALID_ID_TEXT))
            return
        if not isinstance(tool, str) or not isinstance(arguments, dict):
            self._bad_lines.warning("hub: a malformed forwarded request (%d bytes)", len(line))
            await send(refusal(rid, INVALID_REQUEST, INVALID_REQUEST_TEXT))
            return
        if self.tool_names is not None and tool not in self.tool_names():
            await send(refusal(rid, INVALID_PARAMS, UNKNOWN_TOOL))
            return
        try:
            # a forwarded call is narrowed to its caller's reach as it was where it came in
            with reaching(reach_in_meta(message.get("meta"))):
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
