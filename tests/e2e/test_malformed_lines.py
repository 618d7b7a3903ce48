"""A real `lambo serve` fed raw malformed JSON-RPC lines: every request is answered.

Lone surrogates, deep nesting, ids JSON-RPC does not allow and batches each get an
answer (with the request's id wherever it can be read), and a flood of 100,000 bad
lines neither floods stderr nor stalls a serve whose stderr pipe nobody reads.
"""

from __future__ import annotations

import queue
import re
import subprocess
import threading
from pathlib import Path
from typing import Any

from tests.e2e.raw_serve import RawServe

ANSWER_BOUND_S = 120.0  # a failure bound on each answer, not a timing
FLOOD = 100_000
SMALL_STDERR = 64 * 1024


def call_line(request_id: bytes, tool: str, arguments: bytes) -> bytes:
    return (
        b'{"jsonrpc":"2.0","id":'
        + request_id
        + b',"method":"tools/call","params":{"name":"'
        + tool.encode()
        + b'","arguments":'
        + arguments
        + b"}}\n"
    )


class Answers:
    """The serve's stdout read by a thread, so no read can hang the test."""

    def __init__(self, serve: RawServe) -> None:
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._serve = serve
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        while True:
            try:
                message = self._serve.read()
            except ValueError:  # the test closed the pipe: nobody reads on
                message = None
            self.lines.put(message)
            if message is None:
                return

    def next(self) -> dict[str, Any]:
        message = self.lines.get(timeout=ANSWER_BOUND_S)
        assert message is not None, "the serve closed its stdout"
        return message

    def until(self, request_id: object) -> list[dict[str, Any]]:
        """Every message up to and including the answer to ``request_id``."""
        seen = [self.next()]
        while seen[-1].get("id") != request_id:
            seen.append(self.next())
        return seen


def write(serve: RawServe, data: bytes) -> None:
    assert serve.proc.stdin is not None
    serve.proc.stdin.write(data)
    serve.proc.stdin.flush()


def stop(serve: RawServe) -> None:
    assert serve.proc.stdin is not None
    serve.proc.stdin.close()
    assert serve.proc.wait(ANSWER_BOUND_S) == 0


def test_every_malformed_request_gets_an_answer(served_home: Path, tmp_path: Path) -> None:
    serve = RawServe(served_home, tmp_path / "odd.db", session="odd")
    answers = Answers(serve)
    try:
        agent = b'"agent_id":"agent-a"'
        # A lone surrogate is valid JSON: the tool refuses the field, with the caller's id.
        write(serve, call_line(b"101", "lambo_recall", b"{" + agent + b',"query":"a\\ud800"}'))
        [reply] = answers.until(101)
        result = reply["result"]
        assert result["isError"] is True
        assert result["content"][0]["text"].startswith(
            "query contains an unpaired surrogate (U+D800)"
        )
        concept = b'{"content":"x\\udfff","concept_type":"logic"}'
        write(
            serve,
            call_line(b'"w-1"', "lambo_derive", b"{" + agent + b',"concepts":[' + concept + b"]}"),
        )
        [reply] = answers.until("w-1")
        assert reply["result"]["content"][0]["text"].startswith(
            "concepts[0].content contains an unpaired surrogate (U+DFFF)"
        )

        # Nested too deeply to read: -32600 with the id, read from the line.
        deep = b"[" * 300 + b"]" * 300
        write(serve, call_line(b"102", "lambo_recall", b"{" + agent + b',"query":' + deep + b"}"))
        [reply] = answers.until(102)
        assert reply["error"] == {
            "code": -32600,
            "message": "Invalid Request: nested too deeply to read",
        }

        # Ids of no id type and a batch: each one answer, id null, in order.
        odd_ids = [b"1.5", b"1.0", b"true", b"false", b"{}", b"[]", b"NaN", b"null"]
        for raw in odd_ids:
            write(serve, b'{"jsonrpc":"2.0","id":' + raw + b',"method":"ping"}\n')
        write(
            serve,
            b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]\n',
        )
        write(serve, b'{"jsonrpc":"2.0","id":103,"method":"ping"}\n')
        seen = answers.until(103)
        assert seen[-1] == {"jsonrpc": "2.0", "id": 103, "result": {}}
        errors = seen[:-1]
        assert [e["id"] for e in errors] == [None] * (len(odd_ids) + 1)
        assert [e["error"]["message"] for e in errors] == [
            "Invalid Request: id must be a string or an integer"
        ] * len(odd_ids) + ["Invalid Request: batches are not supported; send one request per line"]
        assert {e["error"]["code"] for e in errors} == {-32600}

        # An id with a lone surrogate is echoed as the client wrote it, in ASCII JSON.
        write(serve, b'{"jsonrpc":"2.0","id":"q\\ud800","method":"ping"}\n')
        assert answers.until("q\ud800")[-1]["result"] == {}

        # Still a working memory.
        write(serve, call_line(b"104", "lambo_stats", b"{" + agent + b"}"))
        [reply] = answers.until(104)
        assert reply["result"]["structuredContent"]["session"] == "odd"
        stop(serve)
    finally:
        serve.close()


def flood(serve: RawServe) -> None:
    """100,000 tiny lines that are no request (noise is never answered)."""
    noise = [b"x\n", b"{}\n", b"[1]\n", b'{"jsonrpc":"2.0","id":1,"result":"no"}\n']
    write(serve, b"".join(noise[i % len(noise)] for i in range(FLOOD)))


def test_a_flood_of_bad_lines_keeps_stderr_small(served_home: Path, tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        serve = RawServe(served_home, tmp_path / "flood.db", session="flood", stderr=err)
        try:
            before = log.stat().st_size
            flood(serve)
            answers = Answers(serve)
            write(serve, b'{"jsonrpc":"2.0","id":7,"method":"ping"}\n')
            assert answers.until(7)[-1]["result"] == {}
            stop(serve)
        finally:
            serve.close()
    text = log.read_text(errors="replace")
    assert log.stat().st_size - before < SMALL_STDERR, text[-3000:]
    one_by_one = text.count("is not a JSON-RPC request; not answered")
    summarized = re.findall(r"(\d+) more stdio: bad request lines in the last", text)
    assert 0 < one_by_one <= 50
    assert summarized
    assert one_by_one + sum(int(n) for n in summarized) == FLOOD  # every bad line accounted


def test_a_stderr_nobody_reads_never_stalls_the_serve(served_home: Path, tmp_path: Path) -> None:
    # DEBUG: the SDK logs a line for every rejected line, far past what a pipe holds.
    serve = RawServe(
        served_home,
        tmp_path / "unread.db",
        session="unread",
        stderr=subprocess.PIPE,  # never read while the serve runs
        env={"LAMBO_LOG": "DEBUG"},
    )
    try:
        answers = Answers(serve)
        flood(serve)
        write(serve, b'{"jsonrpc":"2.0","id":1000,"method":"ping"}\n')
        assert answers.until(1000)[-1]["result"] == {}
        concept = b'{"content":"the flood did not stop memory","concept_type":"logic"}'
        arguments = b'{"agent_id":"agent-a","concepts":[' + concept + b"]}"
        write(serve, call_line(b"2000", "lambo_derive", arguments))
        [reply] = answers.until(2000)
        assert reply["result"]["isError"] is False, reply
        stop(serve)  # and a stderr nobody reads does not hold the exit either
    finally:
        serve.close()
