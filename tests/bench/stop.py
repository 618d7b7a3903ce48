"""A clean stop with a queue: signal (or end of stdin) -> process exit, and the next serve's replay.

Run by hand (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/stop.py [--runs 5] [--writes 240] [--json]

One LAMBO_HOME under /tmp with the real MiniLM (one thread). Each run starts a serve of a
fresh session, waits for the model, acks ``--writes`` one-concept derives from four agents
back to back (so most are still queued), then stops it by SIGTERM or by closing its stdin
(alternately) and times until the process has exited. A second serve of the same session
then replays what the first handed on; the replay is timed until its last receipt answers
applied_after_restart (a ``lambo_stats`` wait on it).

Rows: the stop (signal -> exit, median and max), how many writes it handed on (the
intents the next serve found owed) and the next serve's replay rate. The budget is 15 s
for the whole stop. Prints medians, asserts nothing; ``--json`` prints the same numbers
as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench._serve import RawServe, make_home  # noqa: E402

AGENTS = 4


def one_run(home: Path, run: int, writes: int, how: str) -> dict[str, Any]:
    store = home / "stop.db"
    session = f"stop-{run}"
    serve = RawServe(home, store, session, name=f"stop-{run}")
    serve.wait_ready()
    receipts: list[tuple[str, str]] = []
    for i in range(writes):
        agent = f"agent-{i % AGENTS}"
        ack = serve.call(
            "lambo_derive",
            {
                "agent_id": agent,
                "concepts": [{"content": f"stop bench {run} fact {i}", "concept_type": "logic"}],
            },
        )
        receipts.append((agent, ack["receipt"]))
    started = time.monotonic()
    if how == "sigterm":
        serve.proc.send_signal(signal.SIGTERM)
    else:
        serve.proc.stdin.close()  # type: ignore[union-attr]
    rc = serve.proc.wait(60)
    stop_s = time.monotonic() - started

    again = RawServe(home, store, session, name=f"replay-{run}")
    began = time.monotonic()
    first = again.stats()
    handed_on = first["write_queue_replayed"] + first["write_queue_replay_owed"]
    agent, last = receipts[-1]
    state = again.stats(agent, receipt=last, wait_ms=34_000)["receipt"]["state"]
    replay_s = time.monotonic() - began
    again.proc.stdin.close()  # type: ignore[union-attr]
    again.proc.wait(60)
    return {
        "how": how,
        "rc": rc,
        "stop_s": stop_s,
        "handed_on": handed_on,
        "replay_s": replay_s,
        "last_state": state,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--writes", type=int, default=240)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    home = make_home(Path(tempfile.mkdtemp(prefix="lambo-bench-stop-")))
    runs = [
        one_run(home, run, args.writes, "sigterm" if run % 2 == 0 else "eof")
        for run in range(args.runs)
    ]
    stops = [r["stop_s"] for r in runs]
    handed = [r["handed_on"] for r in runs if r["handed_on"] is not None]
    rates = [r["handed_on"] / r["replay_s"] for r in runs if r["handed_on"]]
    result = {
        "runs": len(runs),
        "writes": args.writes,
        "exit_codes": sorted({r["rc"] for r in runs}),
        "stop_s_median": statistics.median(stops),
        "stop_s_max": max(stops),
        "handed_on_median": statistics.median(handed) if handed else None,
        "replay_writes_per_s_median": statistics.median(rates) if rates else None,
        "last_states": sorted({r["last_state"] for r in runs}),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"clean stop with {args.writes} acked writes, {len(runs)} runs (SIGTERM / EOF alternately)"
    )
    print(
        f"  signal -> exit: median {result['stop_s_median']:.2f} s, max "
        f"{result['stop_s_max']:.2f} s (budget 15 s); exit codes {result['exit_codes']}"
    )
    print(f"  handed on as durable intents: median {result['handed_on_median']}")
    rate = result["replay_writes_per_s_median"]
    print(
        f"  next serve's replay: median {rate:.1f} writes/s; last receipt "
        f"{', '.join(result['last_states'])}"
        if rate is not None
        else "  next serve's replay: nothing was handed on"
    )


if __name__ == "__main__":
    main()
