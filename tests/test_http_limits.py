"""The limits an HTTP serve applies before a request reaches a session: token buckets on an
injected clock (burst, refill, Retry-After), the two rates together, the live-session
ceiling, and ``open_sessions`` read off a real SDK session manager."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx2
import pytest
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from lambo_core.mcp.http.app import open_sessions
from lambo_core.mcp.http.limits import BURST_SECONDS, LiveSessions, RateLimits, TokenBucket
from lambo_core.mcp.server import build_server
from tests.http_requests import MCP_HEADERS, initialize


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def admitted(bucket: TokenBucket) -> int:
    """How many requests the bucket admits now, in a row, without the clock moving."""
    count = 0
    while bucket.available():
        bucket.take()
        count += 1
        assert count < 10_000
    return count


# -- TokenBucket -----------------------------------------------------------------------


@pytest.mark.parametrize("rate", [1.0, 5.0, 50.0])
def test_a_bucket_bursts_to_twice_its_rate_then_refills_at_it(rate: float) -> None:
    clock = Clock()
    bucket = TokenBucket(rate, clock)
    assert admitted(bucket) == int(rate * BURST_SECONDS) == int(rate * 2)
    clock.advance(1.0)
    assert admitted(bucket) == int(rate)  # one second refills one second of the rate
    clock.advance(60.0)
    assert admitted(bucket) == int(rate * 2)  # never more than the burst, however long idle


def test_a_partial_refill_admits_nothing_until_a_whole_token() -> None:
    clock = Clock()
    bucket = TokenBucket(2.0, clock)
    admitted(bucket)
    clock.advance(0.49)
    assert not bucket.available()
    clock.advance(0.01)
    assert bucket.available()


@pytest.mark.parametrize(
    ("rate", "elapsed", "retry_after"),
    [
        (1.0, 0.0, 1),  # one token owed at 1/s: 1 s
        (1.0, 0.5, 1),  # half a second owed: rounded up to a whole second
        (0.5, 0.0, 2),
        (0.25, 0.0, 4),
        (0.3, 0.0, 4),  # 3.33 s rounds up: a client that waits Retry-After is admitted
        (50.0, 0.0, 1),  # 20 ms owed: never 0, which would invite an immediate retry
    ],
)
def test_retry_after_is_the_whole_seconds_until_a_request_would_pass(
    rate: float, elapsed: float, retry_after: int
) -> None:
    clock = Clock()
    bucket = TokenBucket(rate, clock)
    admitted(bucket)
    clock.advance(elapsed)
    assert not bucket.available()
    assert bucket.retry_after() == retry_after
    clock.advance(retry_after)
    assert bucket.available()  # waiting what it said is enough


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.4])
def test_a_rate_under_one_every_two_seconds_still_admits_a_request(rate: float) -> None:
    """[serve] per_credential_rps takes 0.1: a bucket of 2 s of that holds 0.2 of a
    request, and would refuse every request forever, each with a Retry-After that lies."""
    clock = Clock()
    bucket = TokenBucket(rate, clock)
    assert admitted(bucket) == 1
    waited = bucket.retry_after()
    assert waited == pytest.approx(1 / rate, abs=1)
    clock.advance(waited)
    assert admitted(bucket) == 1


# -- RateLimits ------------------------------------------------------------------------


def test_the_credential_rate_is_per_credential() -> None:
    clock = Clock()
    rates = RateLimits(per_credential_rps=1.0, per_session_rps=100.0, clock=clock)
    assert [rates.admit("ci", "web") for _ in range(2)] == [None, None]
    refused = rates.admit("ci", "web")
    assert refused is not None
    assert (refused.status, refused.message, refused.retry_after) == (
        429,
        "too many requests from this credential",
        1,
    )
    assert rates.admit("bot", "web") is None  # another credential has its own bucket
    clock.advance(1.0)
    assert rates.admit("ci", "web") is None


def test_the_session_rate_is_shared_by_every_credential() -> None:
    clock = Clock()
    rates = RateLimits(per_credential_rps=100.0, per_session_rps=1.0, clock=clock)
    assert rates.admit("ci", "web") is None
    assert rates.admit("bot", "web") is None
    refused = rates.admit("third", "web")
    assert refused is not None
    assert (refused.status, refused.message, refused.retry_after) == (
        429,
        "too many requests to this session",
        1,
    )
    assert rates.admit("third", "notes") is None  # another session has its own bucket


def test_a_session_rate_refusal_does_not_spend_the_credentials_token() -> None:
    clock = Clock()
    rates = RateLimits(per_credential_rps=1.0, per_session_rps=1.0, clock=clock)
    assert rates.admit("bot", "web") is None
    assert rates.admit("bot", "web") is None  # web's burst of 2 is gone
    for _ in range(5):
        refused = rates.admit("ci", "web")
        assert refused is not None and refused.message == "too many requests to this session"
    # ci's own burst of 2 is whole: the refusals took nothing from it
    assert rates.admit("ci", "notes") is None
    assert rates.admit("ci", "notes") is None
    refused = rates.admit("ci", "notes")
    assert refused is not None and refused.message == "too many requests from this credential"


def test_a_credential_rate_refusal_does_not_spend_the_sessions_token() -> None:
    clock = Clock()
    rates = RateLimits(per_credential_rps=1.0, per_session_rps=2.0, clock=clock)
    assert [rates.admit("ci", "web") for _ in range(2)] == [None, None]
    for _ in range(5):
        refused = rates.admit("ci", "web")
        assert refused is not None and refused.message == "too many requests from this credential"
    # web took two of its four: two left for other credentials, then it is refused
    assert [rates.admit("bot", "web") for _ in range(2)] == [None, None]
    refused = rates.admit("third", "web")
    assert refused is not None and refused.message == "too many requests to this session"


def test_retry_after_follows_the_bucket_that_refused() -> None:
    clock = Clock()
    rates = RateLimits(per_credential_rps=0.25, per_session_rps=100.0, clock=clock)
    assert rates.admit("ci", "web") is None
    refused = rates.admit("ci", "web")
    assert refused is not None and refused.retry_after == 4
    clock.advance(4.0)
    assert rates.admit("ci", "web") is None


# -- LiveSessions ----------------------------------------------------------------------


def test_the_ceiling_counts_open_and_opening_sessions() -> None:
    open_now = [0]
    live = LiveSessions(2, lambda: open_now[0])
    assert live.admit_new() is None  # one opening
    assert live.admit_new() is None  # two opening: the ceiling is reached
    refused = live.admit_new()
    assert refused is not None
    assert (refused.status, refused.message, refused.retry_after) == (
        503,
        "too many open MCP sessions; retry later",
        1,
    )
    live.opened()  # the first one's answer went out (opened, or refused and gone)
    assert live.admit_new() is None
    live.opened()
    live.opened()
    assert live.opening == 0
    open_now[0] = 2  # the manager now holds two
    assert live.admit_new() is not None
    open_now[0] = 1  # one was DELETEd or expired
    assert live.admit_new() is None
    assert live.admit_new() is not None


# -- open_sessions against a real session manager ---------------------------------------


def _recording_server() -> Any:
    async def handler(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"content": [{"type": "text", "text": "ok"}], "isError": False}

    return build_server("web", handler, lambda: ["lambo_stats"])


def test_open_sessions_reads_the_sdk_managers_own_table() -> None:
    """The SDK keeps no public count of its sessions; ``open_sessions`` reads a private
    table. This test opens and closes real sessions so a renamed table fails here."""
    manager = StreamableHTTPSessionManager(
        app=_recording_server(),
        security_settings=TransportSecuritySettings(
            enable_dns_rebinding_protection=True, allowed_hosts=["testserver"]
        ),
    )
    assert isinstance(manager._server_instances, dict)

    async def scenario() -> None:
        async with manager.run():
            transport = httpx2.ASGITransport(app=manager.handle_request)
            async with httpx2.AsyncClient(
                transport=transport, base_url="http://testserver"
            ) as http:
                assert open_sessions(manager) == 0
                ids = []
                for n in range(3):
                    opened = await http.post("/mcp", json=initialize(), headers=MCP_HEADERS)
                    assert opened.status_code == 200, opened.text
                    ids.append(opened.headers["mcp-session-id"])
                    assert open_sessions(manager) == n + 1
                # a refused opening request leaves nothing open
                bad = await http.post(
                    "/mcp", content=json.dumps(initialize()), headers={**MCP_HEADERS, "host": "x"}
                )
                assert bad.status_code == 421
                assert open_sessions(manager) == 3
                gone = await http.delete("/mcp", headers={**MCP_HEADERS, "mcp-session-id": ids[0]})
                assert gone.status_code == 200
                assert open_sessions(manager) == 2
            assert open_sessions(manager) == 2
        assert open_sessions(manager) == 0  # the manager's stop closes them all

    anyio.run(scenario)
