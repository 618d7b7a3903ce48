"""What a shell command prints for a tool's answer, and the exit code it ends with.

A tool's text is written for a model ("the outcome arrives on your next tool
response…"); a shell wants to know what its own call did. So write verbs print
from the structured content: the outcome and the ids created and matched, or
the receipt and the `lambo stats` command that checks it. The exit
code follows the outcome: 0 only for a write that was applied (``--no-wait``: one
that was admitted), 1 for any other end.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..limits import WAIT_MS_MAX
from .flags import FieldFlags

APPLIED = frozenset({"applied", "applied_after_restart"})
# Receipt states that may still end applied: worth asking about again.
OUTSTANDING = frozenset({"pending", "pending_replay", "intent_durable", "close_unflushed"})
# `lambo stats --receipt` states that answer nothing about the write.
UNKNOWN_RECEIPT = frozenset({"never_issued", "restart_lost", "expired", "forbidden"})
WAIT_MS = WAIT_MS_MAX  # how long a write verb waits for its outcome: all lambo_stats allows


@dataclass(frozen=True)
class ShellCall:
    """Enough of one command line to write the follow-up command a user can paste."""

    session: str
    agent: str
    store: str | None = None
    config_path: str | None = None
    default_agent: str = "cli"

    def command(self, *words: str, session: bool = True, agent: bool = True) -> str:
        """``lambo [--config C] WORDS… --session S [--agent A] [--store P]``, quoted for a
        shell; ``--agent`` only when not the default, as receipts belong to their agent."""
        line = ["lambo"]
        if self.config_path is not None:
            line += ["--config", self.config_path]
        line += words
        if session:
            line += ["--session", self.session]
        if agent and self.agent != self.default_agent:
            line += ["--agent", self.agent]
        if self.store is not None:
            line += ["--store", self.store]
        return shlex.join(line)

    def check_receipt(self, receipt: str) -> str:
        return self.command("stats") + f" --receipt {shlex.quote(receipt)} --wait-ms {WAIT_MS}"


@dataclass
class Printed:
    """Lines for stdout and stderr, and the exit code."""

    out: list[str] = field(default_factory=list)
    err: list[str] = field(default_factory=list)
    code: int = 0


def _detail_lines(state: str, detail: str, flags: FieldFlags) -> list[str]:
    """``state — detail``, the detail's further lines indented (replacement candidates, the
    stale report), its opening field named by its flag."""
    first, *rest = flags.rewrite(detail).split("\n")
    return [f"{state} — {first}", *(f"  {line}" for line in rest)]


def _ids(label: str, ids: object) -> list[str]:
    if isinstance(ids, Sequence) and not isinstance(ids, str) and ids:
        return [f"{label}: {' '.join(str(i) for i in ids)}"]
    return []


def write_outcome(
    ack: Mapping[str, Any],
    receipt: Mapping[str, Any] | None,
    call: ShellCall,
    flags: FieldFlags,
) -> Printed:
    """A write verb's lines. ``receipt`` is the lambo_stats receipt object read after the
    ack (waited for unless ``--no-wait``), or None when nothing was asked."""
    receipt_id = str(ack.get("receipt") or "")
    if receipt is None:  # --no-wait
        if write_exit_code(ack, None):
            return Printed(err=[f"lambo: not admitted — {ack.get('summary', '')}"], code=1)
        return Printed(
            out=[
                str(ack.get("summary", "")),
                f"receipt {receipt_id}: pending",
                f"check it with: {call.check_receipt(receipt_id)}",
            ]
        )
    state = str(receipt.get("state", ""))
    detail = str(receipt.get("detail", ""))
    if state in APPLIED:
        lines = _detail_lines(state, detail, flags)
        action = receipt.get("action_node")
        if isinstance(action, str):
            lines.append(f"action: {action}")
        lines += _ids("created", receipt.get("created"))
        lines += _ids("matched", receipt.get("matched"))
        return Printed(out=lines)
    if state == "pending":
        err = [f"lambo: pending — admitted (receipt {receipt_id}) and not applied yet"]
    else:
        first, *rest = _detail_lines(state, detail, flags)
        err = [f"lambo: {first}", *rest]
    if state in OUTSTANDING:
        err.append(f"check it with: {call.check_receipt(receipt_id)}")
    return Printed(err=err, code=1)


def write_exit_code(ack: Mapping[str, Any], receipt: Mapping[str, Any] | None) -> int:
    """0 for an applied write, or with ``--no-wait`` an admitted one; else 1."""
    if receipt is None:
        return 0 if ack.get("receipt_state") == "pending" else 1
    return 0 if receipt.get("state") in APPLIED else 1


def unknown_receipt_hint(structured: Mapping[str, Any]) -> str | None:
    """A shell's next step for a receipt that answers nothing, when the detail lacks one."""
    receipt = structured.get("receipt")
    if isinstance(receipt, Mapping) and receipt.get("state") == "forbidden":
        return "a receipt answers only the --agent and --session that made the write"
    return None


def stats_exit_code(structured: Mapping[str, Any]) -> int:
    """1 when ``--receipt`` named a write this session cannot answer for."""
    receipt = structured.get("receipt")
    if isinstance(receipt, Mapping) and receipt.get("state") in UNKNOWN_RECEIPT:
        return 1
    return 0


def split_receipt_line(text: str) -> tuple[list[str], list[str]]:
    """lambo_stats's text as (its receipt line with any continuation lines, the rest)."""
    lines = text.split("\n")
    if not lines or not lines[0].startswith("receipt "):
        return [], lines
    end = 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    return lines[:end], lines[end:]
