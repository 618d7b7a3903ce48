"""One layer a layered session reads and writes: held here, or forwarded to its holder.

A layer is a session of the same store. Its ``Serve`` (built by the project's serve, on
the same store and models) takes the layer's lease when it is free and forwards to the
serve that holds it otherwise, taking it over once that holder is gone: the session
hub's election, unchanged. What the project may not wait for (a merged recall) asks
``probe``: the layer answers now or is unavailable now. Spec: lambo_recall, "Layered
sessions"; lambo_derive, "Writing to a layer".
"""

from __future__ import annotations

import logging
import time
from typing import Any, Literal, Protocol

import anyio

from ..errors import LamboError
from ..hub.answers import answered_by_hub
from ..hub.election import SessionHub
from ..hub.forwarder import call_timeout

log = logging.getLogger(__name__)

#: a probe's bound when none is configured: [recall] model_wait_ms's default (a layer's
#: recall may wait that long for a model still loading) and two seconds of margin
DEFAULT_PROBE_TIMEOUT_S = 5.0
#: after a probe a holder elsewhere missed, probes skip it for this long, doubling while
#: it keeps missing (a paused holder accepts connections and answers nothing)
QUIET_FIRST_S = 2.0
QUIET_MAX_S = 30.0

#: what a caller can see of a layer
LayerState = Literal["serving", "unreachable", "detaching", "failed"]


class LayerServe(Protocol):
    """What a layer's handle needs of the serve it runs (``serve.Serve``)."""

    hub: SessionHub
    error: LamboError | None
    unfinished: bool

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def __call__(
        self, tool: str, arguments: dict[str, Any], *, keep_ledger: bool = False
    ) -> dict[str, Any]: ...


class LayerUnavailable(Exception):
    """The layer did not answer this call: ``state`` says how (nothing ran there, except
    with ``may_have_acted``: its holder read the call and did not answer in time)."""

    def __init__(self, state: LayerState, *, may_have_acted: bool = False) -> None:
        super().__init__(state)
        self.state: LayerState = state
        self.may_have_acted = may_have_acted


class LayerHandle:
    """A layer attached by this serve: ``call`` answers through the layer's own service,
    wherever it runs; ``state`` says whether it can."""

    def __init__(
        self,
        name: str,
        serve: LayerServe,
        *,
        owned: bool = True,
        probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S,
    ) -> None:
        self.name = name
        self.serve = serve
        #: False: ``serve`` is shared by several sessions of this process (an HTTP serve's
        #: layer), which its owner starts and stops; this handle only stops using it
        self.owned = owned
        #: how long a probe waits for a layer held elsewhere (plus a receipt wait's own)
        self.probe_timeout_s = probe_timeout_s
        self._detaching = False
        #: a holder elsewhere that missed a probe is not probed again until then (monotonic
        #: s), so a paused holder stalls one call now and then rather than every call
        self._quiet_until = 0.0
        self._quiet_s = 0.0

    async def start(self) -> None:
        """Join the layer (its election): hold it, forward to it, or keep electing."""
        await self.serve.start()

    async def close(self) -> None:
        """Detach: a layer held here hands its queue on, as a serve's stop does (a shared
        one is left serving the other sessions)."""
        self._detaching = True
        if self.owned:
            await self.serve.close()

    @property
    def state(self) -> LayerState:
        if self._detaching or self.serve.hub.closed:
            return "detaching"
        if self.serve.error is not None:
            return "failed"  # its attach failed for good: the reason is in the serve's log
        if self.serve.hub.role in ("hub", "forwarder"):
            return "serving"
        return "unreachable"

    async def call(
        self, tool: str, arguments: dict[str, Any], *, probe: bool = False
    ) -> dict[str, Any]:
        """The layer's answer to ``tool`` (an internal tool's structured content, or a
        public tool's result dict), or ``LayerUnavailable``. With ``probe`` a layer that is
        not serving right now is unavailable at once (its election is asked to take the
        lease, so a holder that died comes back by takeover), a holder elsewhere gets at
        most ``probe_timeout_s`` to answer, and one that missed is skipped for a while
        (``quiet``); without it the call waits the election's short settle and the forward
        timeout, as any call to a session does."""
        state = self.state
        if state in ("detaching", "failed") or (probe and state != "serving"):
            if state == "unreachable":
                self.serve.hub.request_lease()
            raise LayerUnavailable(state)
        forwarded = self.serve.hub.role == "forwarder"
        if probe and forwarded and self.quiet:
            raise LayerUnavailable("unreachable")
        if probe and forwarded:
            result = None
            with anyio.move_on_after(call_timeout(self.probe_timeout_s, arguments)):
                result = await self.serve(tool, arguments, keep_ledger=True)
            if result is None:
                log.info("layer %s: %s was not answered within its probe bound", self.name, tool)
                self._back_off()
                raise LayerUnavailable("unreachable", may_have_acted=True)
        else:
            result = await self.serve(tool, arguments, keep_ledger=True)
        answered = answered_by_hub(result)
        if answered is not None or self.serve.error is not None:
            log.info("layer %s: %s did not reach it (%s)", self.name, tool, answered)
            if probe:
                self._back_off()
            raise LayerUnavailable(
                "failed" if self.serve.error is not None else self.state_after_miss(),
                may_have_acted=answered == "silent",
            )
        self._quiet_s = 0.0
        return result

    @property
    def quiet(self) -> bool:
        """A holder elsewhere missed a probe lately: probes skip it for now."""
        return time.monotonic() < self._quiet_until

    def _back_off(self) -> None:
        self._quiet_s = min(max(self._quiet_s * 2, QUIET_FIRST_S), QUIET_MAX_S)
        self._quiet_until = time.monotonic() + self._quiet_s

    def state_after_miss(self) -> LayerState:
        state = self.state
        return "unreachable" if state == "serving" else state
