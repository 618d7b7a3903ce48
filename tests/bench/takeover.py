"""Takeover of a killed hub: how soon a forwarder serves as the new hub, and how soon one
that was not asked to take over exits when its client leaves.

Run by hand (pytest does not collect tests/bench):

    .venv/bin/python tests/bench/takeover.py [--runs 5] [--json]

One LAMBO_HOME under /tmp with the real MiniLM (one thread). Each run starts a hub and a
forwarder of a fresh session and SIGKILLs the hub, then times either

- ``served``: from the kill to the first lambo_stats the forwarder answers as the new hub
  (the calls before it get the hub-gone error; the e2e test checks that and that the
  dead holder's lease was taken by rule, this measures it; the old target was 2 s), or
- ``exit``: from closing the forwarder's stdin (no call asked it to take over) to its
  exit (the old target was 5 s).

Prints medians and maxima, asserts nothing; ``--json`` prints the same numbers as one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.bench._serve import RawServe, make_home  # noqa: E402

BOUND_S = 60.0  # a stuck takeover fails the bench instead of hanging it


def _pair(home: Path, run: int, kind: str) -> tuple[RawServe, RawServe]:
    store = home / "takeover.db"
    session = f"takeover-{kind}-{run}"
    hub = RawServe(home, store, session, name=f"{kind}-hub-{run}")
    hub.wait_ready()
    forwarder = RawServe(home, store, session, name=f"{kind}-fwd-{run}")
    assert forwarder.stats()["holder_pid"] == hub.pid
    return hub, forwarder


def served_after_kill(home: Path, run: int) -> float:
    """Seconds from SIGKILL of the hub to the forwarder answering as the new hub."""
    hub, forwarder = _pair(home, run, "served")
    try:
        os.kill(hub.pid, signal.SIGKILL)
        hub.proc.wait()
        killed = time.monotonic()
        while True:
            reply = forwarder.request(
                "tools/call", {"name": "lambo_stats", "arguments": {"agent_id": "bench"}}
            )
            result = reply["result"]
            if not result["isError"] and result["structuredContent"]["holder_pid"] == forwarder.pid:
                return time.monotonic() - killed
            if time.monotonic() - killed > BOUND_S:
                raise RuntimeError(f"no takeover within {BOUND_S:g} s: {forwarder.tail()}")
            time.sleep(0.01)
    finally:
        forwarder.close()
        hub.close()


def exit_after_client_left(home: Path, run: int) -> float:
    """Seconds from closing the stdin of a forwarder whose hub was killed to its exit."""
    hub, forwarder = _pair(home, run, "exit")
    try:
        os.kill(hub.pid, signal.SIGKILL)
        hub.proc.wait()
        deadline = time.monotonic() + BOUND_S
        while "is gone; electing a new one" not in forwarder.stderr_path.read_text():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the forwarder never noticed: {forwarder.tail()}")
            time.sleep(0.01)
        assert forwarder.proc.stdin is not None
        left = time.monotonic()
        forwarder.proc.stdin.close()
        forwarder.proc.wait(BOUND_S)
        return time.monotonic() - left
    finally:
        forwarder.close()
        hub.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lambo-takeover-") as root:
        home = make_home(Path(root))
        served = [served_after_kill(home, run) for run in range(args.runs)]
        exited = [exit_after_client_left(home, run) for run in range(args.runs)]
    figures = {
        "runs": args.runs,
        "served_after_kill_median_s": statistics.median(served),
        "served_after_kill_max_s": max(served),
        "exit_after_client_left_median_s": statistics.median(exited),
        "exit_after_client_left_max_s": max(exited),
    }
    if args.json:
        print(json.dumps(figures))
        return
    print(f"takeover, {args.runs} runs (load {os.getloadavg()[0]:.2f})")
    for label, key in (
        ("kill -> served as the new hub", "served_after_kill"),
        ("stdin closed -> forwarder exited", "exit_after_client_left"),
    ):
        median, most = figures[f"{key}_median_s"], figures[f"{key}_max_s"]
        print(f"  {label}: median {median:.3f} s, max {most:.3f} s")


if __name__ == "__main__":
    main()
