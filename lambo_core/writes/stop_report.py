"""What a clean stop of a write pipeline reports (spec: lambo_stats, intent_durable and
close_unflushed; "What a crash can lose")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StopReport:
    """What a clean stop did with the writes it had not applied."""

    worker_stopped: bool  # False: the worker was still busy when the budget ran out
    flushed: bool  # the final flush completed (and the session was healthy and held)
    applied: int  # this server's own writes applied before the stop (all of its run)
    deferred: int  # this server's writes handed on as durable intents (intent_durable)
    unflushed: int  # this server's writes the stop could not vouch for (close_unflushed)
    replays_left: int  # an earlier server's intents still owed, left for the next one
    elapsed_s: float

    def summary(self) -> str:
        line = (
            f"stopped in {self.elapsed_s:.1f} s: {self.applied} write(s) applied, "
            f"{self.deferred} handed on as durable intents (intent_durable), "
            f"{self.unflushed} close_unflushed, {self.replays_left} replay(s) left owed"
        )
        if not self.flushed:
            line += "; the final flush did not complete"
        if not self.worker_stopped:
            line += (
                "; the worker was still busy (a write or a background job) when the "
                "shutdown budget ran out"
            )
        return line
