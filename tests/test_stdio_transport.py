"""The bounded stdio transport, driven for real: a low-level mcp Server in a subprocess.

Every read has a timeout; one server process serves most tests, so the module stays fast.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lambo_core.framing import (
    EDGE,
    MAX_ID_CHARS,
    Line,
    LineSplitter,
    OversizedLine,
    extract_request_id,
)

REPO = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
LIMIT = 4 * MIB
TIMEOUT = 10.0
MARKER = "SECRET-PAYLOAD-MARKER"

SERVER_SCRIPT = """
import logging
import sys

import anyio
import mcp.types as types
from mcp.server import Server

from lambo_core.mcp.stdio import bounded_stdio_server


async def list_tools(ctx, params):
    schema = {"type": "object", "properties": {"text": {"type": "string"}}}
    return types.ListToolsResult(tools=[types.Tool(name="echo", input_schema=schema)])


async def call_tool(ctx, params):
    # A stray print (block-buffered on a pipe): it must never reach the wire.
    print("STRAY-PRINT from a handler")
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def main():
    server = Server("stdio-test", on_list_tools=list_tools, on_call_tool=call_tool)
    async with bounded_stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


logging.basicConfig(
    level=logging.WARNING, stream=sys.stderr, format="%(levelname)s %(name)s %(message)s"
)
anyio.run(main)
"""


class ServerProcess:
    """A server subprocess spoken to in raw JSON-RPC lines, every read with a timeout."""

    def __init__(self, script: Path) -> None:
        env = dict(os.environ, PYTHONPATH=str(REPO))
        self.proc = subprocess.Popen(
            [sys.executable, str(script)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.lines: queue.Queue[bytes | None] = queue.Queue()
        self.raw_stdout: list[bytes] = []
        self._stderr: list[bytes] = []
        self._stderr_lock = threading.Lock()
        self._pumps = [
            threading.Thread(target=self._pump_stdout, daemon=True),
            threading.Thread(target=self._pump_stderr, daemon=True),
        ]
        for pump in self._pumps:
            pump.start()
        self._next_id = 1000

    def _pump_stdout(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw_stdout.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _pump_stderr(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            with self._stderr_lock:
                self._stderr.append(line)

    @property
    def stderr(self) -> str:
        with self._stderr_lock:
            return b"".join(self._stderr).decode("utf-8", "replace")

    def write(self, data: bytes) -> None:
        """Write to the server's stdin, failing the test if it does not take it in time."""
        assert self.proc.stdin is not None
        stdin = self.proc.stdin
        failure: list[BaseException] = []

        def run() -> None:
            try:
                stdin.write(data)
                stdin.flush()
            except BaseException as exc:  # reported in the test's thread
                failure.append(exc)

        writer = threading.Thread(target=run, daemon=True)
        writer.start()
        writer.join(TIMEOUT)
        assert not writer.is_alive(), "the server did not read its input in time"
        assert not failure, failure

    def read(self, timeout: float = TIMEOUT) -> dict[str, Any]:
        line = self.lines.get(timeout=timeout)
        assert line is not None, "the server closed stdout"
        assert line.endswith(b"\n")
        message = json.loads(line)
        assert isinstance(message, dict)
        return message

    def assert_silent(self, timeout: float = 0.3) -> None:
        with pytest.raises(queue.Empty):
            self.lines.get(timeout=timeout)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.write(json.dumps(message).encode() + b"\n")
        reply = self.read()
        assert reply["id"] == self._next_id, reply
        return reply

    def echo(self, text: str) -> None:
        reply = self.request("tools/call", {"name": "echo", "arguments": {"text": text}})
        assert reply["result"]["content"] == [{"type": "text", "text": text}], reply

    def initialize(self) -> dict[str, Any]:
        reply = self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        self.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        return reply

    def wait_for_stderr(self, text: str) -> str:
        deadline = time.monotonic() + TIMEOUT
        while text not in self.stderr:
            assert time.monotonic() < deadline, f"{text!r} never logged: {self.stderr[-2000:]}"
            time.sleep(0.02)
        return self.stderr

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(TIMEOUT)
        # The pumps end at the pipes' EOF; then close our ends (collected open, they warn).
        for pump in self._pumps:
            pump.join(TIMEOUT)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()


def spawn(directory: Path) -> ServerProcess:
    script = directory / "stdio_server.py"
    script.write_text(SERVER_SCRIPT)
    return ServerProcess(script)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = spawn(tmp_path_factory.mktemp("stdio"))
    init = proc.initialize()
    assert init["result"]["protocolVersion"] == "2025-11-25", init
    yield proc
    try:
        assert proc.proc.stdin is not None
        proc.proc.stdin.close()
        assert proc.proc.wait(TIMEOUT) == 0, proc.stderr[-2000:]
        assert proc.lines.get(timeout=TIMEOUT) is None
        # Only protocol ever went out on stdout; the handler's prints went to stderr.
        for line in proc.raw_stdout:
            assert line.endswith(b"\n")
            json.loads(line)
        assert "STRAY-PRINT" in proc.stderr
    finally:
        proc.close()


def big_request(request_id: Any, id_first: bool, size: int = 5 * MIB) -> bytes:
    """A tools/call line of ``size`` bytes with MARKER in its payload; id before or after."""
    head = b'{"jsonrpc":"2.0",'
    id_part = b'"id":' + json.dumps(request_id).encode() if request_id is not None else b""
    if id_first and id_part:
        head += id_part + b","
    head += b'"method":"tools/call","params":{"name":"echo","arguments":{"text":"'
    end = b'"}}'
    end += b"," + id_part + b"}" if (id_part and not id_first) else b"}"
    filler = size - len(head) - len(end) - len(MARKER)
    line = head + MARKER.encode() + b"x" * filler + end
    assert len(line) == size
    return line


# --- end to end -----------------------------------------------------------------------------


def test_handshake_lists_and_calls_the_tool(server: ServerProcess) -> None:
    tools = server.request("tools/list")
    assert [t["name"] for t in tools["result"]["tools"]] == ["echo"]
    server.echo("hello")


@pytest.mark.parametrize(
    ("request_id", "id_first", "expected"),
    [
        (41, True, 41),
        (42, False, 42),
        ("req-43", True, "req-43"),
        ("req-44", False, "req-44"),
        (None, True, None),  # no id at all
        ([45], True, None),  # an id no request may carry is never echoed
        ("y" * (MAX_ID_CHARS + 1), False, None),  # nor is a long string
    ],
)
def test_oversized_line_is_answered_with_its_id_and_serving_goes_on(
    tmp_path: Path, request_id: Any, id_first: bool, expected: Any
) -> None:
    # A server of its own: bad-line warnings are rate-limited (five per 30 s), so on a
    # shared server the sixth case's warning would be counted instead of logged.
    server = spawn(tmp_path)
    try:
        server.initialize()
        server.write(big_request(request_id, id_first) + b"\n")
        reply = server.read()
        assert reply == {
            "jsonrpc": "2.0",
            "id": expected,
            "error": {"code": -32600, "message": "request too large (over 4 MiB)"},
        }
        log = server.wait_for_stderr(str(5 * MIB))
        assert "WARNING" in log
        assert MARKER not in server.stderr
        server.echo("still serving")
    finally:
        server.close()


def test_line_exactly_at_the_limit_is_parsed_and_one_byte_more_is_not(
    server: ServerProcess,
) -> None:
    def padded(request_id: int, size: int) -> bytes:
        base = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "at the limit"}},
        }
        raw = json.dumps(base, separators=(",", ":")).encode()
        line = raw[:-1] + b" " * (size - len(raw)) + b"}"  # spaces inside the JSON
        assert len(line) == size
        return line

    server.write(padded(7001, LIMIT) + b"\n")
    reply = server.read()
    assert reply["id"] == 7001
    assert reply["result"]["content"] == [{"type": "text", "text": "at the limit"}]

    server.write(padded(7002, LIMIT + 1) + b"\n")
    reply = server.read()
    assert reply["id"] == 7002
    assert reply["error"]["code"] == -32600
    server.echo("after the limit")


def test_bad_lines_answered_only_when_they_claim_json_rpc(server: ServerProcess) -> None:
    # Not JSON, but claims to be JSON-RPC: Parse error, id null.
    server.write(b'{"jsonrpc":"2.0","id":5,"method":"ping",\n')
    assert server.read() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }
    # JSON, a request attempt, but not a valid one: Invalid Request with its id.
    server.write(b'{"jsonrpc":"2.0","id":6,"method":"ping","params":[1]}\n')
    assert server.read() == {
        "jsonrpc": "2.0",
        "id": 6,
        "error": {"code": -32600, "message": "Invalid Request"},
    }
    # Noise that draws no answer (no error storms): blank lines, a peer's log lines,
    # JSON that is no request, a malformed response.
    before = len(server.stderr)
    server.write(b"\n   \t\r\n")
    server.write(b"INFO starting up " + MARKER.encode() + b"\n")
    server.write(b'{"level":"info","msg":"a JSON log line"}\n')
    server.write(b'{"jsonrpc":"2.0","id":7,"result":"x","error":1}\n')
    server.write(b"[1,2,3]\n")
    server.assert_silent()
    server.echo("after the noise")  # the next line out is this answer, nothing before it
    log = server.stderr[before:]
    assert "not a JSON-RPC request; not answered" in log
    assert MARKER not in log


NESTED = b"[" * 300 + b"]" * 300  # past pydantic's parser (about 250 levels)
TOO_DEEP = b"[" * 5000 + b"]" * 5000  # past Python's parser too


def call_line(request_id: bytes, arguments: bytes = b'{"text":"x"}') -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":' + request_id + b',"method":"tools/call",'
        b'"params":{"name":"echo","arguments":' + arguments + b"}}\n"
    )


@pytest.mark.parametrize(
    ("line", "expected_id", "code", "message"),
    [
        # ids JSON-RPC does not allow: Invalid Request, id null
        *(
            (call_line(raw), None, -32600, "Invalid Request: id must be a string or an integer")
            for raw in (
                b"1.5",
                b"1.0",
                b"true",
                b"false",
                b"null",
                b"{}",
                b"[]",
                b"NaN",
                b"-Infinity",
            )
        ),
        # a batch: one answer, id null
        (
            b"[" + call_line(b"1").rstrip() + b"," + call_line(b"2").rstrip() + b"]\n",
            None,
            -32600,
            "Invalid Request: batches are not supported; send one request per line",
        ),
        (b'[{"jsonrpc":"2.0","id":3,"method":"ping"}]\n', None, -32600, None),
        (b'[{"jsonrpc":"2.0"}\n', None, -32700, "Parse error"),
        # nested too deeply: its id, read from the line
        (
            call_line(b"76", b'{"text":"x","deep":' + NESTED + b"}"),
            76,
            -32600,
            "Invalid Request: nested too deeply to read",
        ),
        (
            call_line(b"77", b'{"text":' + TOO_DEEP + b"}"),
            77,
            -32600,
            "Invalid Request: nested too deeply to read",
        ),
        (
            b'{"jsonrpc":"2.0","method":"tools/call","params":' + TOO_DEEP + b',"id":"deep"}\n',
            "deep",
            -32600,
            None,
        ),
    ],
)
def test_requests_nobody_can_serve_are_answered_as_the_protocol_says(
    server: ServerProcess, line: bytes, expected_id: Any, code: int, message: str | None
) -> None:
    server.write(line)
    reply = server.read()
    assert reply["id"] == expected_id, reply
    assert reply["error"]["code"] == code, reply
    if message is not None:
        assert reply["error"]["message"] == message
    server.echo("still serving")


@pytest.mark.parametrize(
    "arguments",
    [
        b'{"text":"\\ud800"}',  # a lone surrogate, escaped: valid JSON pydantic refuses
        b'{"text":"\\udfff tail","more":"\\ud83d\\ude00"}',
    ],
)
def test_json_only_pythons_parser_reads_reaches_the_tool_with_its_id(
    server: ServerProcess, arguments: bytes
) -> None:
    # The tool itself judges the value (lambo's text rule refuses the field by name).
    server.write(call_line(b'"odd-1"', arguments))
    reply = server.read()
    assert reply["id"] == "odd-1", reply
    assert "result" in reply, reply


def test_an_id_with_a_lone_surrogate_is_echoed_as_sent(server: ServerProcess) -> None:
    server.write(b'{"jsonrpc":"2.0","id":"a\\ud800","method":"ping"}\n')
    line = server.lines.get(timeout=TIMEOUT)
    assert line is not None
    assert b'"id":"a\\ud800"' in line  # escaped ASCII JSON: the client's id exactly
    assert json.loads(line)["result"] == {}


def test_bad_lines_are_logged_a_few_at_a_time(tmp_path: Path) -> None:
    proc = spawn(tmp_path)
    try:
        proc.initialize()
        proc.write(b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}\n' * 2000)
        for _ in range(2000):
            assert proc.read()["id"] is None
        proc.echo("after the flood")
        assert proc.proc.stdin is not None
        proc.proc.stdin.close()
        assert proc.proc.wait(TIMEOUT) == 0
        log = proc.wait_for_stderr("were not logged one by one")
        assert log.count("has an id of no id type") <= 10
        assert "more stdio: bad request lines in the last" in log
    finally:
        proc.close()


def test_a_stray_print_goes_to_stderr_not_the_wire(server: ServerProcess) -> None:
    server.echo("print something")
    # The print is block-buffered; it is flushed at the latest when the server exits,
    # which the module fixture checks: stdout then holds only JSON lines.
    for line in list(server.raw_stdout):
        assert b"STRAY-PRINT" not in line


@pytest.mark.parametrize(
    "partial",
    [
        b'{"jsonrpc":"2.0","id":9,"method":"ping"}',  # complete JSON, but no newline
        b'{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"echo",'
        + b'"arguments":{"text":"'
        + b"z" * (5 * MIB),
    ],
    ids=["small", "oversized"],
)
def test_line_cut_by_eof_is_not_answered_and_the_server_exits(
    tmp_path: Path, partial: bytes
) -> None:
    proc = spawn(tmp_path)
    try:
        proc.initialize()
        proc.echo("before the cut")
        proc.write(partial)
        assert proc.proc.stdin is not None
        proc.proc.stdin.close()
        assert proc.proc.wait(TIMEOUT) == 0, proc.stderr
        assert proc.lines.get(timeout=TIMEOUT) is None  # stdout ended, nothing more said
        log = proc.wait_for_stderr("input ended inside a line")
        assert f"line of {len(partial)} bytes" in log
        assert "STRAY-PRINT" in log  # the handler's print was flushed to stderr
        for line in proc.raw_stdout:
            assert line.endswith(b"\n")
            json.loads(line)
        assert len(proc.raw_stdout) == 2  # initialize and the one echo
    finally:
        proc.close()


# --- units ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "tail", "expected"),
    [
        (b'{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"a":"xx', b"", 7),
        (b'{ "id" : -3 , "method":"m","params":{"a":"xx', b"", -3),
        (b'{"id":"abc\\"d","params":{"a":"xx', b"", 'abc"d'),
        # id after params: found at the end of the line
        (b'{"jsonrpc":"2.0","method":"m","params":{"a":"xx', b'xx"}},"id":12}', 12),
        (b'{"jsonrpc":"2.0","method":"m","params":{"a":"xx', b'xx"}},"id":"s-1"}\r', "s-1"),
        # id after params, followed by short scalar members only
        (b'{"method":"m","params":{"a":"xx', b'xx"},"id":13,"jsonrpc":"2.0"}', 13),
        # an "id" inside params is not the request's
        (b'{"jsonrpc":"2.0","method":"m","params":{"id":3,"a":"xx', b'xx"}}', None),
        (b'{"jsonrpc":"2.0","method":"m","params":{"a":"xx', b'xx","id":5}}', None),
        (b'{"method":"m","params":{"a":"xx', b'xx"},"id":14,"params2":{"q":1}}', None),
        # an "id" inside a string value is not a member
        (b'{"method":"m","params":{"a":"\\"id\\":4,', b"", None),
        # only integers within 64 bits and short strings
        (b'{"id":1.5,"method":"m"', b"", None),
        (b'{"id":1e3,"method":"m"', b"", None),
        (b'{"id":true,"method":"m"', b"", None),
        (b'{"id":null,"method":"m"', b"", None),
        (b'{"id":{"x":1},"method":"m"', b"", None),
        (b'{"id":[1],"method":"m"', b"", None),
        (b'{"id":99999999999999999999,"method":"m"', b"", None),
        (b'{"id":"' + b"a" * (MAX_ID_CHARS + 1) + b'","method":"m"', b"", None),
        (b'{"id":"' + b"a" * MAX_ID_CHARS + b'","method":"m"', b"", "a" * MAX_ID_CHARS),
        # cut off inside the id: not read
        (b'{"params":{},"id":"abc', b"", None),
        (b'{"id":12', b"", None),
        (b"", b"", None),
        (b"garbage", b"more garbage", None),
    ],
)
def test_extract_request_id(head: bytes, tail: bytes, expected: Any) -> None:
    assert extract_request_id(head, tail) == expected


def test_splitter_holds_at_most_the_limit_and_keeps_both_ends_of_a_long_line() -> None:
    splitter = LineSplitter(max_line=100)
    assert splitter.feed(b"one\ntw") == [Line(bytearray(b"one"))]
    assert splitter.pending == 2
    assert splitter.feed(b"o\n\n") == [Line(bytearray(b"two")), Line(bytearray())]
    exact = b"e" * 100
    assert splitter.feed(exact[:60]) == []
    assert splitter.feed(exact[60:] + b"\n") == [Line(bytearray(exact))]

    long_line = b"H" * 700 + b"m" * 5000 + b"T" * 700
    out: list[Line | OversizedLine] = []
    for i in range(0, len(long_line), 333):  # chunk edges anywhere
        out += splitter.feed(long_line[i : i + 333])
        assert len(splitter._buf) <= 100
        assert len(splitter._head) <= EDGE and len(splitter._tail) <= EDGE
    assert out == []
    assert splitter.pending == len(long_line)
    out = splitter.feed(b"\nnext\n")
    assert out == [
        OversizedLine(len(long_line), b"H" * EDGE, b"T" * EDGE),
        Line(bytearray(b"next")),
    ]
    assert splitter.pending == 0


def test_splitter_one_byte_over_the_limit_in_one_chunk() -> None:
    splitter = LineSplitter(max_line=10)
    [item] = splitter.feed(b"0123456789X\n")
    assert item == OversizedLine(11, b"0123456789X", b"0123456789X")
    with pytest.raises(ValueError):
        LineSplitter(max_line=0)
