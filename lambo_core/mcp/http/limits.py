"""The limits an HTTP serve applies before a request reaches a session: request rates per
credential and per session, a layer's too for a call scoped to it (token buckets, 429
with Retry-After) and the ceiling on live
MCP sessions across every session the serve holds (503).

The request-body limit (413) is the SDK's, read before the body (``app``). Defaults and
why: docs/design.md (the HTTP transport).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: a bucket holds this many seconds of its rate, so a client may burst to twice its rate
BURST_SECONDS = 2.0


@dataclass
class TokenBucket:
    """``rate`` requests a second, bursts of ``rate * BURST_SECONDS`` (at least one)."""

    rate: float
    clock: Callable[[], float] = time.monotonic
    tokens: float = field(init=False)
    stamp: float = field(init=False)

    def __post_init__(self) -> None:
        self.tokens = self.capacity
        self.stamp = self.clock()

    @property
    def capacity(self) -> float:
        # at least one whole request: under 0.5/s, two seconds of the rate hold less than
        # one, and a bucket that can never fill to one refuses every request forever
        return max(1.0, self.rate * BURST_SECONDS)

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def available(self) -> bool:
        self._refill()
        return self.tokens >= 1.0

    def take(self) -> None:
        self.tokens -= 1.0

    def retry_after(self) -> int:
        """Whole seconds until one request would be admitted (at least 1, as Retry-After)."""
        return max(1, math.ceil((1.0 - self.tokens) / self.rate))


@dataclass(frozen=True)
class Refusal:
    """A limit's answer: the status, what the body says, and the headers."""

    status: int
    message: str
    retry_after: int | None = None


class RateLimits:
    """One bucket per credential and one per session. A request takes from both or from
    neither, so a caller refused by the session's rate does not also spend its own. The
    unauthenticated callers of a loopback serve carry no credential, so only the session's
    rate applies to them: one bucket shared by every local client would throttle
    independent clients against each other without protecting the writer any better."""

    def __init__(
        self,
        per_credential_rps: float,
        per_session_rps: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.per_credential_rps = per_credential_rps
        self.per_session_rps = per_session_rps
        self.clock = clock
        self._credentials: dict[str, TokenBucket] = {}
        self._sessions: dict[str, TokenBucket] = {}

    def _bucket(self, table: dict[str, TokenBucket], name: str, rate: float) -> TokenBucket:
        bucket = table.get(name)
        if bucket is None:
            bucket = table[name] = TokenBucket(rate, self.clock)
        return bucket

    def admit(
        self, credential: str | None, session: str, layer: str | None = None
    ) -> Refusal | None:
        """None when the request may go on (its buckets spent), else the 429. A call
        through ``session`` scoped to its ``layer`` also draws one request from that
        layer's own bucket, the one its own address draws on: every project's scoped
        calls and the layer's direct callers share the layer's rate."""
        mine = (
            None
            if credential is None
            else self._bucket(self._credentials, credential, self.per_credential_rps)
        )
        theirs = self._bucket(self._sessions, session, self.per_session_rps)
        shared = (
            None if layer is None else self._bucket(self._sessions, layer, self.per_session_rps)
        )
        if mine is not None and not mine.available():
            return Refusal(429, "too many requests from this credential", mine.retry_after())
        if not theirs.available():
            return Refusal(429, "too many requests to this session", theirs.retry_after())
        if shared is not None and not shared.available():
            return Refusal(429, f"too many requests to layer {layer}", shared.retry_after())
        for bucket in (mine, theirs, shared):
            if bucket is not None:
                bucket.take()
        return None


class LiveSessions:
    """The ceiling on MCP sessions open at once over every session the serve holds.

    ``count`` reads how many the session managers have open (``app.open_sessions``): the
    SDK keeps that book, so expiry and DELETE free room without a count of our own
    drifting. At the ceiling, ``evict`` may close the session idle longest (True when it
    did). A request opening a session counts from its admission until it is answered, so
    two opening at once cannot both take the last place (one opened meanwhile may be
    counted twice for that moment: refusing early, never admitting past the ceiling).
    """

    def __init__(
        self, ceiling: int, count: Callable[[], int], evict: Callable[[], bool] | None = None
    ) -> None:
        self.ceiling = ceiling
        self.count = count
        self.evict = evict
        self.opening = 0

    def admit_new(self) -> Refusal | None:
        """None, counting the request as opening until ``opened``; else the 503."""
        while self.count() + self.opening >= self.ceiling:
            if self.evict is None or not self.evict():
                return Refusal(503, "too many open MCP sessions; retry later", 1)
        self.opening += 1
        return None

    def opened(self) -> None:
        self.opening -= 1
