"""MCP over stdio with a bound on one request line, and an answer for every request.

A drop-in for the SDK's ``stdio_server()`` (the same pair of streams), except
that lines are split by ``framing.LineSplitter`` (an oversized line is
discarded and answered -32600), every line claiming JSON-RPC that cannot be
served is answered (``judge_line``), noise is never answered, and warnings
about bad lines are rate-limited. While serving, fds 0 and 1 point away from
the wire, so a stray ``print`` cannot corrupt it. Spec: "Transports", "Limits".
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import anyio.to_thread
import mcp_types as types
import pydantic_core
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.shared.message import SessionMessage

from ..framing import (
    EDGE,
    Line,
    LineSplitter,
    OversizedLine,
    RequestId,
    echoable_id,
    extract_request_id,
)
from ..log_limits import RateLimitedWarnings
from .refusals import (
    BATCH_TEXT,
    INVALID_ID_TEXT,
    INVALID_REQUEST_TEXT,
    MIB,
    PARSE_ERROR_TEXT,
    TOO_DEEP_TEXT,
    too_large_text,
)

log = logging.getLogger(__name__)

MAX_LINE = 4 * MIB
"""The largest request line accepted, in bytes, not counting its newline."""
CHUNK = 64 * 1024
READ_AHEAD_CHUNKS = 4  # chunks read from stdin before the transport has taken them
"""How much is read from the input at a time."""
ReadStream = MemoryObjectReceiveStream[SessionMessage | Exception]
WriteStream = MemoryObjectSendStream[SessionMessage]


class LineRejected(ValueError):
    """Sent on the read stream (as the SDK sends a parse failure) for a line not dispatched.

    It carries the line's size and why, never its content.
    """

    def __init__(self, reason: str, size: int) -> None:
        super().__init__(f"{reason} ({size} bytes)")
        self.reason = reason
        self.size = size


# --- the transport --------------------------------------------------------------------------


def _serialize(message: types.JSONRPCMessage) -> bytes:
    # As the SDK's stdio writer: exclude_unset keeps an explicit "id": null in an error.
    try:
        return (message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode("utf-8")
    except (pydantic_core.PydanticSerializationError, UnicodeEncodeError):
        # A lone surrogate the client sent (in its id, say) has no UTF-8 form: answer in
        # ASCII JSON, where it is escaped (\\ud800) exactly as the client wrote it.
        data = message.model_dump(mode="json", by_alias=True, exclude_unset=True)
        return (json.dumps(data, ensure_ascii=True, separators=(",", ":")) + "\n").encode()


def _error(request_id: RequestId | None, code: int, message: str) -> bytes:
    return _serialize(
        types.JSONRPCError(
            jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
        )
    )


def _claims_jsonrpc(line: bytes | bytearray) -> bool:
    stripped = line.lstrip()
    return stripped.startswith((b"{", b"[")) and b'"jsonrpc"' in stripped


class _TooDeep(ValueError):
    """JSON nested deeper than the parsers read."""


def _load_json(line: bytes | bytearray) -> object:
    """One line as JSON: pydantic's parser, then Python's for what only Python reads.

    pydantic refuses a lone surrogate escaped in a string (``"\\ud800"``), which is
    valid JSON: Python's parser reads it, so the request reaches the tool and its text
    rule refuses the field by name, as on the hub socket. Nesting past pydantic's
    limit (about 250 levels; no tool argument nests past a few) is ``_TooDeep``.
    Raises ValueError for anything that is not JSON.
    """
    try:
        return pydantic_core.from_json(line)
    except ValueError as exc:
        if "recursion limit" in str(exc):
            raise _TooDeep(str(exc)) from None
    try:
        return json.loads(line)
    except RecursionError:
        raise _TooDeep("nested too deeply") from None


def _allowed_id(value: object) -> bool:
    """An id JSON-RPC allows a request (MCP also forbids null)."""
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


@dataclass(frozen=True)
class Verdict:
    """What to do with one line: dispatch ``message``, answer ``reply``, or neither; why."""

    message: types.JSONRPCMessage | None = None
    reply: bytes | None = None
    reason: str = ""


_NOT_A_REQUEST = "is not a JSON-RPC request; not answered"


def _answered(request_id: RequestId | None, code: int, text: str, reason: str) -> Verdict:
    return Verdict(reply=_error(request_id, code, text), reason=reason + "; answered with an error")


def judge_line(line: bytes | bytearray) -> Verdict:
    """Dispatch, answer or ignore one complete line of at most the size limit.

    Every request gets an answer: a valid one is dispatched; one that claims
    JSON-RPC (an object or array naming ``jsonrpc``) but cannot be served gets
    the JSON-RPC error the protocol prescribes, with its id when that is
    readable and allowed: -32700 for a line that is not JSON; -32600 for a batch
    (id null), an id that is not a string or an integer (id null), JSON nested
    too deeply to read (its id read from the line's ends) or any other invalid
    request. A request whose only flaw is a lone surrogate in a string is
    dispatched: the tool refuses the field. Anything else that is not a
    request, such as a peer's stray log line or a response, is never answered,
    so two peers cannot answer each other's noise forever.
    """
    if b'"jsonrpc"' not in line and b"\\" not in line:
        return Verdict(reason=_NOT_A_REQUEST)  # no message lacks it: noise, cheaply
    try:
        message = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        pass
    else:
        # pydantic reads a request with a float or boolean id as a notification.
        if not isinstance(message, types.JSONRPCNotification) or b'"id"' not in line:
            return Verdict(message)
    claims = _claims_jsonrpc(line)
    try:
        obj = _load_json(line)
    except _TooDeep:
        if not claims:
            return Verdict(reason="is nested too deeply to read and " + _NOT_A_REQUEST)
        rid = extract_request_id(bytes(line[:EDGE]), bytes(line[-EDGE:]))
        return _answered(rid, types.INVALID_REQUEST, TOO_DEEP_TEXT, "is nested too deeply")
    except ValueError:
        if not claims:
            return Verdict(reason=_NOT_A_REQUEST)
        return _answered(None, types.PARSE_ERROR, PARSE_ERROR_TEXT, "is not JSON")
    if isinstance(obj, list):
        if not claims or not line.lstrip().startswith(b"["):
            return Verdict(reason=_NOT_A_REQUEST)
        return _answered(None, types.INVALID_REQUEST, BATCH_TEXT, "is a batch")
    if not claims or not isinstance(obj, dict):
        return Verdict(reason=_NOT_A_REQUEST)
    if "method" not in obj or "result" in obj or "error" in obj:
        return Verdict(reason=_NOT_A_REQUEST)  # a response is never answered
    if "id" in obj and not _allowed_id(obj["id"]):
        return _answered(None, types.INVALID_REQUEST, INVALID_ID_TEXT, "has an id of no id type")
    try:
        message = types.jsonrpc_message_adapter.validate_python(obj, by_name=False)
    except ValueError:
        rid = echoable_id(obj.get("id"))
        return _answered(rid, types.INVALID_REQUEST, INVALID_REQUEST_TEXT, "is invalid")
    return Verdict(message)


class _LinePipe:
    """One byte pipe as MCP message streams: lines in through the framer, messages out.

    The reader judges each line (dispatch, answer or ignore); the writer serializes
    what the server sends. Both write under one lock; once the output has failed,
    what the server sends is dropped.
    """

    def __init__(
        self,
        receive_chunk: Callable[[], Awaitable[bytes]],
        send_bytes: Callable[[bytes], Awaitable[None]],
        max_line: int,
        peer: str,
    ) -> None:
        self._receive_chunk = receive_chunk
        self._send_bytes = send_bytes
        self._max_line = max_line
        self._peer = peer
        self._splitter = LineSplitter(max_line)
        self._too_large = too_large_text(max_line)
        self._write_lock = anyio.Lock()
        self._output_broken = False
        # A client may send any number of bad lines: warn about a few, then count them.
        self._bad_lines = RateLimitedWarnings(log, f"{peer}: bad request lines")
        self.read_send, self.read_recv = anyio.create_memory_object_stream[
            SessionMessage | Exception
        ](0)
        self.write_send, self._write_recv = anyio.create_memory_object_stream[SessionMessage](0)

    async def _write(self, data: bytes) -> None:
        async with self._write_lock:
            if self._output_broken:
                return
            try:
                await self._send_bytes(data)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
                self._output_broken = True
                log.warning(
                    "%s: output closed (%s); dropping what the server sends", self._peer, exc
                )

    async def _refuse_oversized(self, item: OversizedLine) -> None:
        # Each costs the sender over 4 MiB: these cannot flood the log, so each is logged.
        log.warning(
            "%s: request line of %d bytes is over the %d-byte limit; discarded and answered",
            self._peer,
            item.size,
            self._max_line,
        )
        rid = extract_request_id(item.head, item.tail)
        await self._write(_error(rid, types.INVALID_REQUEST, self._too_large))
        await self.read_send.send(LineRejected("request too large", item.size))

    async def _handle(self, item: Line | OversizedLine) -> None:
        if isinstance(item, OversizedLine):
            await self._refuse_oversized(item)
            return
        line = item.data
        if not line or line.isspace():
            return
        verdict = judge_line(line)
        if verdict.message is not None:
            await self.read_send.send(SessionMessage(verdict.message))
            return
        self._bad_lines.warning("%s: line of %d bytes %s", self._peer, len(line), verdict.reason)
        if verdict.reply is not None:
            await self._write(verdict.reply)
        await self.read_send.send(LineRejected("invalid JSON-RPC message", len(line)))

    def _input_ended(self) -> None:
        self._bad_lines.flush()
        if self._splitter.pending:
            log.warning(
                "%s: input ended inside a line of %d bytes; not answered",
                self._peer,
                self._splitter.pending,
            )

    async def read_all(self) -> None:
        try:
            async with self.read_send:
                while chunk := await self._receive_chunk():
                    for item in self._splitter.feed(chunk):
                        await self._handle(item)
                self._input_ended()
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            # The server stopped reading: nobody is left to serve.
            return

    async def write_all(self) -> None:
        async with self._write_recv:
            async for session_message in self._write_recv:
                await self._write(_serialize(session_message.message))


@contextlib.asynccontextmanager
async def bounded_message_streams(
    receive_chunk: Callable[[], Awaitable[bytes]],
    send_bytes: Callable[[bytes], Awaitable[None]],
    *,
    max_line: int = MAX_LINE,
    peer: str = "stdio",
) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Newline-delimited JSON-RPC over any byte pipe, with one line bounded at ``max_line``.

    ``receive_chunk`` returns the next bytes of input (at most ``CHUNK`` is best),
    ``b""`` at the end of input; ``send_bytes`` writes and flushes. Yields the
    ``(read_stream, write_stream)`` pair ``mcp.server.Server.run`` takes. The
    read side closes at the end of input; on leaving, output already handed to
    the write stream is written out and the reader is cancelled.
    """
    pipe = _LinePipe(receive_chunk, send_bytes, max_line, peer)
    async with anyio.create_task_group() as tg:
        reader_scope = anyio.CancelScope()

        async def run_reader() -> None:
            with reader_scope:
                await pipe.read_all()

        tg.start_soon(run_reader)
        tg.start_soon(pipe.write_all)
        try:
            yield pipe.read_recv, pipe.write_send
        finally:
            reader_scope.cancel()
            await pipe.write_send.aclose()


# --- stdio: claiming fds 0 and 1 ------------------------------------------------------------

_claim_lock = threading.Lock()
_claimed = False


def _claim_std_fds() -> tuple[int, int, Callable[[], None]]:
    """Divert fd 0 to the null device and fd 1 to stderr; return private wire duplicates.

    As the SDK's stdio transport does: the duplicates sit above the standard range
    and are close-on-exec; they are never closed, since a worker thread may still
    block on the input one after the transport exits. The returned callable puts
    the wire back on fds 0 and 1.
    """
    wire_in = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    wire_out = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    null_in = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null_in, 0)
    finally:
        os.close(null_in)
    os.dup2(2, 1)

    def restore() -> None:
        # A stray print still buffered in sys.stdout belongs on stderr, not on the wire.
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        for fd, wire in ((0, wire_in), (1, wire_out)):
            try:
                os.dup2(wire, fd)
            except OSError as exc:  # pragma: no cover - only if the process ran out of fds
                log.warning("stdio: could not restore fd %d: %s", fd, exc)

    return wire_in, wire_out, restore


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _daemon_reader(fd: int) -> Callable[[], Awaitable[bytes]]:
    """``receive_chunk`` for ``fd``, read by one daemon thread.

    Not anyio's worker threads: the interpreter joins those at exit, and one blocked
    reading a stdin the client keeps open (a serve stopped by SIGTERM) would keep the
    process alive forever. A daemon thread blocked in ``read`` does not.
    """
    loop = asyncio.get_running_loop()
    chunks: asyncio.Queue[bytes] = asyncio.Queue()
    room = threading.Semaphore(READ_AHEAD_CHUNKS)  # back-pressure: read no further ahead

    def deliver(chunk: bytes) -> bool:
        try:
            loop.call_soon_threadsafe(chunks.put_nowait, chunk)
        except RuntimeError:  # the loop has closed: nobody is reading any more
            return False
        return True

    def run() -> None:
        while True:
            room.acquire()
            try:
                chunk = os.read(fd, CHUNK)
            except OSError as exc:
                log.warning("stdio: reading stdin failed (%s); treating it as the end", exc)
                chunk = b""
            if not deliver(chunk) or not chunk:
                return

    async def receive_chunk() -> bytes:
        chunk = await chunks.get()
        room.release()
        return chunk

    threading.Thread(target=run, name="lambo-stdin", daemon=True).start()
    return receive_chunk


@contextlib.asynccontextmanager
async def bounded_stdio_server(
    max_line: int = MAX_LINE,
) -> AsyncIterator[tuple[ReadStream, WriteStream]]:
    """Serve MCP over this process's stdin and stdout, one request line at most ``max_line``.

    A drop-in for ``mcp.server.stdio.stdio_server()``::

        async with bounded_stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())

    Raises RuntimeError when another bounded_stdio_server of this process is serving.
    """
    global _claimed
    with _claim_lock:
        if _claimed:
            raise RuntimeError("another bounded_stdio_server() in this process holds stdin/stdout")
        _claimed = True
    try:
        wire_in, wire_out, restore = _claim_std_fds()
        try:
            receive_chunk = _daemon_reader(wire_in)

            async def send_bytes(data: bytes) -> None:
                await anyio.to_thread.run_sync(_write_all, wire_out, data, abandon_on_cancel=True)

            async with bounded_message_streams(
                receive_chunk, send_bytes, max_line=max_line, peer="stdio"
            ) as streams:
                yield streams
        finally:
            restore()
    finally:
        with _claim_lock:
            _claimed = False
