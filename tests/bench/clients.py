"""One hub and two forwarders: throughput, ack latency through the hop, peak RSS.

Run by hand (pytest does not collect tests/bench):

    /work/venv/bin/python tests/bench/clients.py [--calls 1000] [--agents 32] [--solo 300] [--json]

A fresh LAMBO_HOME under /tmp with the real MiniLM (int8, one thread). Three
`lambo serve --session bench-clients --store <tmp>/clients.db` processes are
started in order: the first is the hub (it holds the lease, loads the model and
applies every write), the two later ones forward every tool call to it over its
Unix socket. ``holder_pid`` from ``lambo_stats`` through each one must be the
hub's pid. Each serve is driven by its own thread in raw JSON-RPC lines.

Concurrent phase: ``--calls`` one-concept derives through EACH serve at once, each
client on its own ``--agents`` agent ids (c<k>-agent-<i % agents>), every sentence
distinct so nothing merges. Each client keeps at most 330 of its writes
outstanding (waiting, untimed, for its oldest receipt when it has 330), so the
three stay under the server's 1024 and no write is dropped (the dropped count is
printed). Acked writes/s per client is its derives over its wall time (window
waits included); the total is all acked derives over the phase's wall time.
Applied writes/s is the total over the time from the phase's start until
``concept_count`` reaches the total.

One-at-a-time phase (``--solo``): the three serves in turn, one derive each per
round, ``--solo`` rounds (the worker applying behind them); then, with the queue
drained, ``--solo`` rounds of ``lambo_stats``. Every serve sees the same load, so
the difference between hub and forwarders is the hop.

Peak RSS is each process's VmHWM from /proc/<pid>/status, read at the end before
closing. Prints one table and the load average; asserts only that nothing was
dropped and that the hub is the holder.
``--json`` prints the same numbers as one JSON object (tests/bench/report.py reads it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.bench._serve import (
    RawServe,
    ServeError,
    Window,
    derive_args,
    loadavg,
    make_home,
    ms,
    percentile,
    sentence,
)

SESSION = "bench-clients"
WINDOW = 330  # per client; three of them stay under the server's 1024


@dataclass
class Run:
    name: str
    samples: list[float] = field(default_factory=list)
    dropped: int = 0
    wall_s: float = 0.0
    window_waits: int = 0
    window_wait_s: float = 0.0
    error: BaseException | None = None


def drive(
    serve: RawServe, run: Run, first: int, n: int, agents: int, prefix: str, window: int
) -> None:
    """``n`` derives through ``serve``; latencies, drops and wall time into ``run``."""
    flow = Window(serve, window)
    began = time.perf_counter()
    try:
        for i in range(n):
            agent = f"{prefix}-agent-{i % agents}"
            flow.make_room()
            args = derive_args(agent, sentence(first + i))
            t0 = time.perf_counter()
            ack = serve.call("lambo_derive", args)
            run.samples.append(time.perf_counter() - t0)
            if ack["receipt_state"] == "dropped":
                run.dropped += 1
            else:
                flow.add(agent, ack["receipt"])
        run.wall_s = time.perf_counter() - began
    except BaseException as exc:  # reported by the main thread
        run.error = exc
    run.window_waits, run.window_wait_s = flow.waits, flow.wait_s


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="derives through each serve")
    parser.add_argument("--agents", type=int, default=32, help="agent ids per client")
    parser.add_argument("--solo", type=int, default=300, help="one-at-a-time rounds")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the table"
    )
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="lambo-bench-clients-"))
    store = root / "clients.db"
    serves: list[RawServe] = []
    names = ["hub", "forwarder-1", "forwarder-2"]
    try:
        home = make_home(root)
        hub = RawServe(home, store, SESSION, name="hub")
        serves.append(hub)
        hub.wait_ready()
        hub_pid = hub.stats()["holder_pid"]
        assert hub_pid == hub.pid, f"the first serve is not the holder: {hub_pid} != {hub.pid}"
        for name in names[1:]:
            fwd = RawServe(home, store, SESSION, name=name)
            serves.append(fwd)
            holder = fwd.stats()["holder_pid"]
            assert holder == hub_pid, f"{name} answers for {holder}, not the hub {hub_pid}"

        # Warm-up: a few derives through each, applied, so every connection is open.
        written = 0
        for k, serve in enumerate(serves):
            warm = Run(f"warm-{k}")
            drive(serve, warm, written, 20, 4, f"w{k}", WINDOW)
            if warm.error is not None:
                raise warm.error
            written += 20
        hub.wait_concepts(written, timeout=120)

        # Concurrent phase: --calls through each serve at once.
        runs = [Run(name) for name in names]
        threads = [
            threading.Thread(
                target=drive,
                args=(
                    serve,
                    run,
                    written + k * args.calls,
                    args.calls,
                    args.agents,
                    f"c{k}",
                    WINDOW,
                ),
                daemon=True,
            )
            for k, (serve, run) in enumerate(zip(serves, runs, strict=True))
        ]
        began = time.perf_counter()
        mono_began = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(900)
            if t.is_alive():
                raise ServeError("a client thread did not finish within 900 s")
        acked_wall = time.perf_counter() - began
        for run in runs:
            if run.error is not None:
                raise run.error
        written += 3 * args.calls
        dropped = sum(run.dropped for run in runs)
        applied_at = hub.wait_concepts(written - dropped, timeout=600)
        applied_wall = applied_at - mono_began
        load_concurrent = loadavg()

        # One at a time: the three serves in turn, one call each, nothing concurrent (so
        # the hop is measured with the same load beside every serve). Derives first (the
        # worker applies behind them), then, once drained, lambo_stats (nothing applying).
        solos = [Run(name) for name in names]
        stats_solo: list[list[float]] = [[], [], []]
        flows = [Window(serve, WINDOW) for serve in serves]
        for i in range(args.solo):
            for k, serve in enumerate(serves):
                agent = f"s{k}-agent-{i % args.agents}"
                flows[k].make_room()
                t0 = time.perf_counter()
                ack = serve.call("lambo_derive", derive_args(agent, sentence(written)))
                solos[k].samples.append(time.perf_counter() - t0)
                written += 1
                if ack["receipt_state"] == "dropped":
                    solos[k].dropped += 1
                else:
                    flows[k].add(agent, ack["receipt"])
        dropped += sum(solo.dropped for solo in solos)
        hub.wait_concepts(written - dropped, timeout=300)
        for _ in range(args.solo):
            for k, serve in enumerate(serves):
                t0 = time.perf_counter()
                serve.stats(f"s{k}-agent-0")
                stats_solo[k].append(time.perf_counter() - t0)

        final = hub.stats()
        rss = [serve.peak_rss_kib() for serve in serves]
        load_end = loadavg()
    finally:
        for serve in reversed(serves):  # forwarders first, the hub last
            serve.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)

    n = args.calls
    if args.json:

        def cell(samples: list[float]) -> dict[str, float]:
            return {
                "p50_ms": percentile(samples, 0.5) * 1000,
                "p99_ms": percentile(samples, 0.99) * 1000,
            }

        serves_out = {}
        for k, (serve, run, solo) in enumerate(zip(serves, runs, solos, strict=True)):
            serves_out[names[k]] = {
                "pid": serve.pid,
                "acked_per_s": len(run.samples) / run.wall_s,
                "ack": cell(run.samples),
                "one_by_one": cell(solo.samples),
                "stats": cell(stats_solo[k]),
                "dropped": run.dropped + solo.dropped,
                "peak_rss_kib": rss[k],
            }
        fwd_solo_samples = [x for r in solos[1:] for x in r.samples]
        print(
            json.dumps(
                {
                    "calls": n,
                    "serves": serves_out,
                    "forwarders_one_by_one": cell(fwd_solo_samples),
                    "hop_ms": (
                        percentile(fwd_solo_samples, 0.5) - percentile(solos[0].samples, 0.5)
                    )
                    * 1000,
                    "acked_per_s": 3 * n / acked_wall,
                    "applied_per_s": (3 * n - sum(r.dropped for r in runs)) / applied_wall,
                    "dropped": final["write_queue_dropped"],
                    "load": load_end,
                }
            )
        )
        assert dropped == 0 and final["write_queue_dropped"] == 0, "a write was dropped"
        return 0
    print(
        f"one hub + two forwarders, session {SESSION}, SQLite, MiniLM int8 (1 thread); "
        f"{n} derives through each at once ({3 * n} total), {args.agents} agents per client; "
        f"{os.cpu_count()} cores, load average {load_concurrent} after the concurrent phase, "
        f"{load_end} at the end (1/5/15 min)"
    )
    head = (
        f"{'serve':<12} {'pid':>7} {'acked/s':>8} {'ack-only/s':>10} {'ack p50':>8} "
        f"{'ack p99':>8} {'1by1 p50':>8} {'1by1 p99':>8} {'stats p50':>9} {'dropped':>7} "
        f"{'peak RSS':>9}"
    )
    print(head)

    def row(label: str, pid: str, acked: float, samples: list[float], solo: list[float],
            stats: list[float], drops: str, rss: str) -> None:  # fmt: skip
        print(
            f"{label:<12} {pid:>7} {acked:>8.1f} {len(samples) / sum(samples):>10.0f} "
            f"{ms(samples, 0.5):>8} {ms(samples, 0.99):>8} {ms(solo, 0.5):>8} "
            f"{ms(solo, 0.99):>8} {ms(stats, 0.5):>9} {drops:>7} {rss:>9}"
        )

    for k, (serve, run, solo) in enumerate(zip(serves, runs, solos, strict=True)):
        row(
            names[k],
            str(serve.pid),
            len(run.samples) / run.wall_s,
            run.samples,
            solo.samples,
            stats_solo[k],
            str(run.dropped + solo.dropped),
            f"{rss[k] / 1024:.0f} MiB",
        )
    row(
        "forwarders",
        "",
        sum(len(r.samples) for r in runs[1:]) / acked_wall,
        [x for r in runs[1:] for x in r.samples],
        [x for r in solos[1:] for x in r.samples],
        stats_solo[1] + stats_solo[2],
        str(sum(r.dropped + q.dropped for r, q in zip(runs[1:], solos[1:], strict=True))),
        f"{(rss[1] + rss[2]) / 1024:.0f} MiB",
    )
    applied = 3 * n - sum(r.dropped for r in runs)
    print(
        f"{'total':<12} {'':>7} {3 * n / acked_wall:>8.1f}   {3 * n} acked in {acked_wall:.1f} s; "
        f"{applied} applied in {applied_wall:.1f} s = {applied / applied_wall:.1f} writes/s"
    )
    hub_solo = percentile(solos[0].samples, 0.5)
    fwd_solo = percentile([x for r in solos[1:] for x in r.samples], 0.5)
    print(
        "times in ms: send the line, read the answer. acked/s: a client's derives over its wall "
        f"time, untimed window waits included ({', '.join(str(r.window_waits) for r in runs)} "
        "waits); ack-only/s: 1 / mean ack time. 1by1: "
        f"{args.solo} derives through each serve in turn, one at a time (worker applying); "
        f"stats: {args.solo} lambo_stats each in turn, queue drained ({final['concept_count']} "
        f"concepts). The hop adds {(fwd_solo - hub_solo) * 1000:.3f} ms to a derive at 1by1 p50; "
        "the forwarders row sums their RSS. "
        f"Server: {final['write_queue_accepted']} accepted, {final['write_queue_applied']} "
        f"applied, {final['write_queue_dropped']} dropped; ack-to-applied p50 "
        f"(write_queue_apply_ms_p50) {final['write_queue_apply_ms_p50']:.0f} ms"
    )
    assert dropped == 0 and final["write_queue_dropped"] == 0, "a write was dropped"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
