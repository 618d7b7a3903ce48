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
from typing import Any

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


NAMES = ["hub", "forwarder-1", "forwarder-2"]


@dataclass
class Measured:
    """What one bench run saw, in the order of its phases."""

    args: argparse.Namespace
    serves: list[RawServe] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    solos: list[Run] = field(default_factory=list)
    stats_solo: list[list[float]] = field(default_factory=lambda: [[], [], []])
    written: int = 0
    dropped: int = 0
    acked_wall: float = 0.0
    applied_wall: float = 0.0
    load_concurrent: str = ""
    load_end: str = ""
    final: dict[str, Any] = field(default_factory=dict)
    rss: list[int] = field(default_factory=list)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=1000, help="derives through each serve")
    parser.add_argument("--agents", type=int, default=32, help="agent ids per client")
    parser.add_argument("--solo", type=int, default=300, help="one-at-a-time rounds")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir")
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object instead of the table"
    )
    return parser.parse_args()


def start_serves(m: Measured, home: Path, store: Path) -> None:
    """The hub first, then the forwarders, each checked to answer for the hub."""
    hub = RawServe(home, store, SESSION, name="hub")
    m.serves.append(hub)
    hub.wait_ready()
    hub_pid = hub.stats()["holder_pid"]
    assert hub_pid == hub.pid, f"the first serve is not the holder: {hub_pid} != {hub.pid}"
    for name in NAMES[1:]:
        fwd = RawServe(home, store, SESSION, name=name)
        m.serves.append(fwd)
        holder = fwd.stats()["holder_pid"]
        assert holder == hub_pid, f"{name} answers for {holder}, not the hub {hub_pid}"


def warm_up(m: Measured) -> None:
    """A few derives through each, applied, so every connection is open."""
    for k, serve in enumerate(m.serves):
        warm = Run(f"warm-{k}")
        drive(serve, warm, m.written, 20, 4, f"w{k}", WINDOW)
        if warm.error is not None:
            raise warm.error
        m.written += 20
    m.serves[0].wait_concepts(m.written, timeout=120)


def concurrent_phase(m: Measured) -> None:
    """--calls through each serve at once."""
    calls = m.args.calls
    m.runs = [Run(name) for name in NAMES]
    threads = [
        threading.Thread(
            target=drive,
            args=(serve, run, m.written + k * calls, calls, m.args.agents, f"c{k}", WINDOW),
            daemon=True,
        )
        for k, (serve, run) in enumerate(zip(m.serves, m.runs, strict=True))
    ]
    began = time.perf_counter()
    mono_began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(900)
        if t.is_alive():
            raise ServeError("a client thread did not finish within 900 s")
    m.acked_wall = time.perf_counter() - began
    for run in m.runs:
        if run.error is not None:
            raise run.error
    m.written += 3 * calls
    m.dropped = sum(run.dropped for run in m.runs)
    applied_at = m.serves[0].wait_concepts(m.written - m.dropped, timeout=600)
    m.applied_wall = applied_at - mono_began
    m.load_concurrent = loadavg()


def solo_phase(m: Measured) -> None:
    """The three serves in turn, one call each, nothing concurrent (so the hop is measured
    with the same load beside every serve). Derives first (the worker applies behind them),
    then, once drained, lambo_stats (nothing applying)."""
    m.solos = [Run(name) for name in NAMES]
    flows = [Window(serve, WINDOW) for serve in m.serves]
    for i in range(m.args.solo):
        for k, serve in enumerate(m.serves):
            agent = f"s{k}-agent-{i % m.args.agents}"
            flows[k].make_room()
            t0 = time.perf_counter()
            ack = serve.call("lambo_derive", derive_args(agent, sentence(m.written)))
            m.solos[k].samples.append(time.perf_counter() - t0)
            m.written += 1
            if ack["receipt_state"] == "dropped":
                m.solos[k].dropped += 1
            else:
                flows[k].add(agent, ack["receipt"])
    m.dropped += sum(solo.dropped for solo in m.solos)
    m.serves[0].wait_concepts(m.written - m.dropped, timeout=300)
    for _ in range(m.args.solo):
        for k, serve in enumerate(m.serves):
            t0 = time.perf_counter()
            serve.stats(f"s{k}-agent-0")
            m.stats_solo[k].append(time.perf_counter() - t0)


def measure(args: argparse.Namespace) -> Measured:
    m = Measured(args)
    root = Path(tempfile.mkdtemp(prefix="lambo-bench-clients-"))
    try:
        start_serves(m, make_home(root), root / "clients.db")
        warm_up(m)
        concurrent_phase(m)
        solo_phase(m)
        m.final = m.serves[0].stats()
        m.rss = [serve.peak_rss_kib() for serve in m.serves]
        m.load_end = loadavg()
    finally:
        for serve in reversed(m.serves):  # forwarders first, the hub last
            serve.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return m


def _cell(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(samples, 0.5) * 1000,
        "p99_ms": percentile(samples, 0.99) * 1000,
    }


def print_json(m: Measured) -> None:
    n = m.args.calls
    serves_out = {}
    for k, (serve, run, solo) in enumerate(zip(m.serves, m.runs, m.solos, strict=True)):
        serves_out[NAMES[k]] = {
            "pid": serve.pid,
            "acked_per_s": len(run.samples) / run.wall_s,
            "ack": _cell(run.samples),
            "one_by_one": _cell(solo.samples),
            "stats": _cell(m.stats_solo[k]),
            "dropped": run.dropped + solo.dropped,
            "peak_rss_kib": m.rss[k],
        }
    fwd_solo_samples = [x for r in m.solos[1:] for x in r.samples]
    print(
        json.dumps(
            {
                "calls": n,
                "serves": serves_out,
                "forwarders_one_by_one": _cell(fwd_solo_samples),
                "hop_ms": (percentile(fwd_solo_samples, 0.5) - percentile(m.solos[0].samples, 0.5))
                * 1000,
                "acked_per_s": 3 * n / m.acked_wall,
                "applied_per_s": (3 * n - sum(r.dropped for r in m.runs)) / m.applied_wall,
                "dropped": m.final["write_queue_dropped"],
                "load": m.load_end,
            }
        )
    )


def _row(label: str, pid: str, acked: float, samples: list[float], solo: list[float],
         stats: list[float], drops: str, rss: str) -> None:  # fmt: skip
    print(
        f"{label:<12} {pid:>7} {acked:>8.1f} {len(samples) / sum(samples):>10.0f} "
        f"{ms(samples, 0.5):>8} {ms(samples, 0.99):>8} {ms(solo, 0.5):>8} "
        f"{ms(solo, 0.99):>8} {ms(stats, 0.5):>9} {drops:>7} {rss:>9}"
    )


def print_table(m: Measured) -> None:
    n, runs, solos, rss, final = m.args.calls, m.runs, m.solos, m.rss, m.final
    print(
        f"one hub + two forwarders, session {SESSION}, SQLite, MiniLM int8 (1 thread); "
        f"{n} derives through each at once ({3 * n} total), {m.args.agents} agents per client; "
        f"{os.cpu_count()} cores, load average {m.load_concurrent} after the concurrent phase, "
        f"{m.load_end} at the end (1/5/15 min)"
    )
    head = (
        f"{'serve':<12} {'pid':>7} {'acked/s':>8} {'ack-only/s':>10} {'ack p50':>8} "
        f"{'ack p99':>8} {'1by1 p50':>8} {'1by1 p99':>8} {'stats p50':>9} {'dropped':>7} "
        f"{'peak RSS':>9}"
    )
    print(head)
    for k, (serve, run, solo) in enumerate(zip(m.serves, runs, solos, strict=True)):
        _row(
            NAMES[k],
            str(serve.pid),
            len(run.samples) / run.wall_s,
            run.samples,
            solo.samples,
            m.stats_solo[k],
            str(run.dropped + solo.dropped),
            f"{rss[k] / 1024:.0f} MiB",
        )
    _row(
        "forwarders",
        "",
        sum(len(r.samples) for r in runs[1:]) / m.acked_wall,
        [x for r in runs[1:] for x in r.samples],
        [x for r in solos[1:] for x in r.samples],
        m.stats_solo[1] + m.stats_solo[2],
        str(sum(r.dropped + q.dropped for r, q in zip(runs[1:], solos[1:], strict=True))),
        f"{(rss[1] + rss[2]) / 1024:.0f} MiB",
    )
    applied = 3 * n - sum(r.dropped for r in runs)
    print(
        f"{'total':<12} {'':>7} {3 * n / m.acked_wall:>8.1f}   {3 * n} acked in "
        f"{m.acked_wall:.1f} s; {applied} applied in {m.applied_wall:.1f} s = "
        f"{applied / m.applied_wall:.1f} writes/s"
    )
    hub_solo = percentile(solos[0].samples, 0.5)
    fwd_solo = percentile([x for r in solos[1:] for x in r.samples], 0.5)
    print(
        "times in ms: send the line, read the answer. acked/s: a client's derives over its wall "
        f"time, untimed window waits included ({', '.join(str(r.window_waits) for r in runs)} "
        "waits); ack-only/s: 1 / mean ack time. 1by1: "
        f"{m.args.solo} derives through each serve in turn, one at a time (worker applying); "
        f"stats: {m.args.solo} lambo_stats each in turn, queue drained ({final['concept_count']} "
        f"concepts). The hop adds {(fwd_solo - hub_solo) * 1000:.3f} ms to a derive at 1by1 p50; "
        "the forwarders row sums their RSS. "
        f"Server: {final['write_queue_accepted']} accepted, {final['write_queue_applied']} "
        f"applied, {final['write_queue_dropped']} dropped; ack-to-applied p50 "
        f"(write_queue_apply_ms_p50) {final['write_queue_apply_ms_p50']:.0f} ms"
    )


def main() -> int:
    m = measure(parse_args())
    if m.args.json:
        print_json(m)
    else:
        print_table(m)
    assert m.dropped == 0 and m.final["write_queue_dropped"] == 0, "a write was dropped"
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
