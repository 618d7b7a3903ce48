"""stdio round trip of a lambo_derive ack against a real `lambo serve` (the hub).

Run by hand (pytest does not collect tests/bench):

    /work/venv/bin/python tests/bench/stdio_ack.py [--calls 1000] [--agents 32] [--json]

A fresh LAMBO_HOME under /tmp with the real MiniLM (int8, one thread), one
`lambo serve --session bench-ack --store <tmp>/ack.db` spoken to in raw JSON-RPC
lines. A round trip is: write the request line, flush, read lines until the
answer with that id (the client's own cost is a few tens of microseconds).
Everything starts after the model has loaded and a warm-up.

Rows:

- ``lambo_stats, fresh session``: the comparison, a call that writes nothing (0
  concepts in the graph).
- ``lambo_derive ack, back to back``: ``--calls`` one-concept derives sent one after
  another over ``--agents`` agents (agent-(i % agents)) while the apply worker
  embeds and commits them behind the acks. Paced by a client window (at most 900
  of our writes outstanding, each agent far under its 64) so nothing is dropped:
  the dropped count is printed and must be 0.
- ``lambo_derive ack, worker idle``: each ack is followed by an untimed wait for
  its receipt, so nothing is being applied while the next one is taken.
- ``lambo_stats, N concepts``: the comparison again once the graph holds every write.

Prints p50/p99 per row, the load average beside them; target: stdio round trip
p50 <= 2 ms. Asserts nothing but the dropped count.
``--json`` prints the same numbers as one JSON object (tests/bench/report.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._serve import (
    RawServe,
    Window,
    derive_args,
    loadavg,
    make_home,
    ms,
    percentile,
    profiled_argv,
    sentence,
)

WINDOW = 900  # of our writes outstanding, under the server's 1024


def timed_stats(serve: RawServe, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        serve.stats("agent-0")
        samples.append(time.perf_counter() - t0)
    return samples


def timed_derives(
    serve: RawServe, n: int, agents: int, first: int, *, wait_each: bool
) -> tuple[list[float], int]:
    window = Window(serve, 1 if wait_each else WINDOW)
    samples, dropped = [], 0
    for i in range(n):
        agent = f"agent-{i % agents}"
        window.make_room()  # untimed; with wait_each the previous write is applied first
        args = derive_args(agent, sentence(first + i))
        t0 = time.perf_counter()
        ack = serve.call("lambo_derive", args)
        samples.append(time.perf_counter() - t0)
        if ack["receipt_state"] == "dropped":
            dropped += 1
        else:
            window.add(agent, ack["receipt"])
    while window.held:
        window.settle_oldest()
    return samples, dropped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--agents", type=int, default=32)
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument(
        "--profile", type=Path, help="run the serve under cProfile, write its stats here"
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the table"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="lambo-bench-ack-"))
    serve: RawServe | None = None
    try:
        home = make_home(root)
        store = root / "ack.db"
        argv = profiled_argv("bench-ack", store, args.profile.resolve()) if args.profile else None
        serve = RawServe(home, store, "bench-ack", name="hub", argv=argv)
        serve.wait_ready()
        holder = serve.stats()["holder_pid"]
        assert holder == serve.pid, (holder, serve.pid)  # the first serve holds the session

        timed_stats(serve, 50)  # warm-up
        stats_fresh = timed_stats(serve, args.calls)
        warm, warm_dropped = timed_derives(serve, 64, args.agents, 0, wait_each=False)

        busy, busy_dropped = timed_derives(serve, args.calls, args.agents, 64, wait_each=False)
        idle, idle_dropped = timed_derives(
            serve, args.calls, args.agents, 64 + args.calls, wait_each=True
        )
        total = len(warm) + len(busy) + len(idle)
        serve.wait_concepts(total - warm_dropped - busy_dropped - idle_dropped, timeout=300)
        stats_full = timed_stats(serve, args.calls)
        final = serve.stats()
        rss = serve.peak_rss_kib()
        load = loadavg()
    finally:
        if serve is not None:
            serve.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    dropped = busy_dropped + idle_dropped + warm_dropped
    rows = [
        ("lambo_stats, fresh session (0 concepts)", stats_fresh, 0),
        ("lambo_derive ack, back to back (worker busy)", busy, busy_dropped),
        ("lambo_derive ack, worker idle", idle, idle_dropped),
        (f"lambo_stats, {final['concept_count']} concepts", stats_full, 0),
    ]
    if args.json:
        print(
            json.dumps(
                {
                    "rows": {
                        key: {
                            "label": label,
                            "n": len(samples),
                            "p50_ms": percentile(samples, 0.5) * 1000,
                            "p99_ms": percentile(samples, 0.99) * 1000,
                            "max_ms": max(samples) * 1000,
                            "dropped": drops,
                        }
                        for key, (label, samples, drops) in zip(
                            ("stats_fresh", "derive_busy", "derive_idle", "stats_full"),
                            rows,
                            strict=True,
                        )
                    },
                    "accepted": final["write_queue_accepted"],
                    "applied": final["write_queue_applied"],
                    "dropped": final["write_queue_dropped"],
                    "apply_ms_p50": final["write_queue_apply_ms_p50"],
                    "peak_rss_kib": rss,
                    "load": load,
                }
            )
        )
        assert dropped == 0 and final["write_queue_dropped"] == 0, "a write was dropped"
        return 0
    print(
        f"stdio round trip, raw JSON-RPC lines, one `lambo serve` (hub, MiniLM int8, 1 thread); "
        f"{os.cpu_count()} cores, load average {load} (1/5/15 min)"
    )
    print(f"{'call':<46} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'dropped':>8}")
    for label, samples, drops in rows:
        print(
            f"{label:<46} {len(samples):>5} {ms(samples, 0.5):>8} {ms(samples, 0.99):>8} "
            f"{max(samples) * 1000:>8.3f} {drops:>8}"
        )
    print(
        f"server: {final['write_queue_accepted']} accepted, {final['write_queue_applied']} "
        f"applied, {final['write_queue_dropped']} dropped; ack-to-applied p50 "
        f"{final['write_queue_apply_ms_p50']:.1f} ms; serve peak RSS {rss / 1024:.0f} MiB"
    )
    target = sorted(busy)[len(busy) // 2] * 1000
    print(f"target: derive ack p50 <= 2 ms: back to back {target:.3f} ms")
    assert dropped == 0 and final["write_queue_dropped"] == 0, "a write was dropped"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
