"""What a call gets when no hub answers it, in the words the spec gives each case.

The hub is gone (nothing happened; memory returns), silent (it may still act
on the call), this serve lost its lease (conflict), the holder is still
starting, or it is alive but unreachable. Spec: "Errors", "More than one
client on one machine".
"""

from __future__ import annotations

import os
from typing import Any

from ..model import Lease
from .lease import (
    OTHER_HOST_OPENING,
    held_on_another_host,
    holder_dead_here,
    lease_free,
    other_host_refusal,
)
from .socket_dir import SOCKET_DIR_ADVICE, WarnOnce, recorded_socket

HUB_GONE_TEXT = (
    "lambo memory is unavailable for this call: the lambo serve that holds this session "
    "stopped answering, so nothing was read and nothing was written. Memory returns once "
    "a lambo serve holds the session again (this one is taking it over); carry on "
    "without it rather than waiting."
)
#: a forwarded call the hub read but did not answer in time: it may yet act on it
HUB_SILENT_TEXT = (
    "lambo memory did not answer this call within {secs:g} s: the lambo serve that holds "
    "this session may be paused or overloaded, so what this call did is unknown (a write may "
    "still be applied). Recall, or ask lambo_stats with the write's receipt, before sending a "
    "write again; carry on without memory meanwhile."
)
#: a call to a serve whose lease has passed on (the spec's conflict class)
LEASE_LOST_CALL_TEXT = (
    "conflict: this lambo serve no longer holds the session's single-writer lease (it "
    "expired or passed to another serve), so nothing was read and nothing was written here; "
    "the detail was logged. Memory returns through the serve that holds the session now: "
    "call again shortly."
)
#: the holder (its pid filled in) still opening the session: it has published nothing yet
HOLDER_STARTING_TEXT = (
    "lambo memory is unavailable for this call: the lambo serve that holds this session "
    "(pid {pid}) is still opening it, so nothing was read and nothing was written. Memory "
    "returns once it answers; carry on without it rather than waiting."
)
#: the holder (its pid filled in) runs, but no serve can reach its socket
HOLDER_UNREACHABLE_TEXT = (
    "lambo memory is unavailable for this call: the lambo serve that holds this session "
    "(pid {pid}) is alive but its socket cannot be reached, so nothing was read and nothing "
    "was written. Restart that serve, or stop it so this one can take the session over; "
    "carry on without memory until then."
)


def tool_error(text: str) -> dict[str, Any]:
    """A CallToolResult (as its JSON dict) that refuses with ``text``."""
    return {"content": [{"type": "text", "text": text}], "isError": True}


def hub_gone_result() -> dict[str, Any]:
    """What a call gets when its hub is gone: nothing read or written; memory comes back."""
    return tool_error(HUB_GONE_TEXT)


def unavailable_result(
    lease: Lease | None,
    session: str,
    store: str | os.PathLike[str] | None,
    *,
    own_holder: str,
    now: float,
    dir_rule: str | None = None,
    warn: WarnOnce | None = None,
    host: str | None = None,
) -> dict[str, Any]:
    """What a call no hub answered gets, by the state of the session's lease.

    Free, ours (this serve is taking it over) or held by a dead local process:
    ``hub_gone_result()``. Held by a live holder on another host: a conflict naming it
    and when its lease expires (``other_host_refusal``). Held by a live holder that
    recorded no socket yet: it is still opening the session. Otherwise the holder is alive but its
    socket cannot be reached: restart it or stop it; when a socket directory is
    the reason (the recorded one's, or this serve's own ``dir_rule`` when the
    holder published nowhere), the rule it breaks and the fix are added. ``host`` is
    this serve's (default ``this_host()``).
    """
    if (
        lease is None
        or lease_free(lease, now)
        or lease.holder == own_holder
        or holder_dead_here(lease, host=host)
    ):
        return hub_gone_result()
    if held_on_another_host(lease, now, host=host):
        return tool_error(other_host_refusal(session, lease, now).render())
    if lease.socket is None:
        return tool_error(HOLDER_STARTING_TEXT.format(pid=lease.pid))
    text = HOLDER_UNREACHABLE_TEXT.format(pid=lease.pid)
    rule = None
    if lease.socket and store is not None:
        _, recorded_rule = recorded_socket(lease, session, store, warn)
        rule = f"Its socket directory {recorded_rule}" if recorded_rule else None
    elif not lease.socket and dir_rule is not None:
        rule = f"This serve's socket directory {dir_rule}"
    if rule is not None:
        text += f" {rule}: {SOCKET_DIR_ADVICE}."
    return tool_error(text)


#: the opening words of each answer a serve gives in a tool's place (no tool ran)
_HUB_ANSWER_OPENINGS = (
    HUB_GONE_TEXT.split(":", 1)[0],  # "lambo memory is unavailable for this call" (all three)
    HUB_SILENT_TEXT.split(" within", 1)[0],
    LEASE_LOST_CALL_TEXT.split(" (", 1)[0],
    f"conflict: {OTHER_HOST_OPENING}",
)


def answered_by_hub(result: dict[str, Any]) -> str | None:
    """Which answer a serve gave in a tool's place: "silent" (the holder read the call and
    may still act on it), "unavailable" (nothing was read or written), or None when a
    tool answered (its own refusals included)."""
    if not result.get("isError"):
        return None
    content = result.get("content") or [{}]
    text = content[0].get("text", "") if isinstance(content[0], dict) else ""
    if not isinstance(text, str) or not text.startswith(_HUB_ANSWER_OPENINGS):
        return None
    return "silent" if text.startswith(_HUB_ANSWER_OPENINGS[1]) else "unavailable"
