"""Write pipeline benchmark: ack latency in-process, and apply throughput with MiniLM.

Run by hand (pytest does not collect tests/bench):

    /work/venv/bin/python tests/bench/writes.py [--repeats 5] [--threads 1]

Everything is real: ``WritePipeline.submit`` on a ``SqliteStore`` in a temp
dir (WAL, synchronous=NORMAL; the intent is committed before the ack) and the
int8 all-MiniLM-L6-v2 from PyPI. Each repeat uses a fresh store.

Ack latency (time inside ``submit``, one 1-concept derive per call):

- ``ack only``: the worker is not started, so an ack is admission + receipt +
  intent commit and nothing else. 960 acks over 16 agents (60 each, under the
  64-per-agent lane; 960 under the server's 1024).
- ``worker idle``: the worker runs; each ack is followed by a wait for its
  receipt, so nothing is being applied while the next ack is taken (an agent
  that waits for its writes). 300 acks.
- ``worker busy``: 960 acks sent back to back over 16 agents while the worker
  applies them (acks contend with apply transactions for SQLite's write lock
  and with the embedder for the GIL).

Apply throughput: ``--calls`` derives of 1 concept and ``--calls``/8 of 16 (distinct
sentences, so nothing merges), all submitted, then timed from the first ack
until the worker is idle: writes/s and concepts/s. A 16-concept call embeds 16
texts each framed with the whole call's text, in one batch.

Prints medians over ``--repeats`` (p50 and p99 are per repeat, then the median
of those); asserts nothing. Target: in-process ack p50 <= 0.3 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lambo_core.embed.importer import import_model
from lambo_core.embed.onnx import OnnxEmbedder
from lambo_core.session import EmbedderPlan, Session
from lambo_core.store import SqliteStore
from lambo_core.writes import WritePipeline
from tests.embed_fixtures import minilm_source_dir

SUBJECTS = ["The deploy job", "Alice", "The billing service", "Our parser", "The nightly backup"]
VERBS = ["failed again because", "was rewritten after", "now waits until", "stopped when"]
ENDS = [
    "the disk filled up on the build machine",
    "the team moved the database to another region",
    "a config file pointed at the old cluster",
    "the cache was cleared during the release",
]
AGENTS = 16
PER_AGENT = 60


def sentence(i: int) -> str:
    """A distinct concept-like sentence; the trailing id keeps keys (and merges) apart."""
    s = SUBJECTS[i % len(SUBJECTS)]
    v = VERBS[(i // len(SUBJECTS)) % len(VERBS)]
    e = ENDS[(i // (len(SUBJECTS) * len(VERBS))) % len(ENDS)]
    return f"{s} {v} {e} (case {i})"


def call(agent: str, first: int, n: int) -> dict[str, Any]:
    concepts = [{"content": sentence(first + j), "concept_type": "logic"} for j in range(n)]
    return {"agent_id": agent, "concepts": concepts}


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Bench:
    def __init__(self, embedder: OnnxEmbedder, tmp: Path) -> None:
        self.plan = EmbedderPlan.ready(embedder)
        self.tmp = tmp
        self.runs = 0

    def pipeline(self, *, start: bool) -> WritePipeline:
        self.runs += 1
        store = SqliteStore(self.tmp / f"bench-{self.runs}.db")
        p = WritePipeline(Session.open(store, "bench", self.plan))
        return p.start() if start else p

    @staticmethod
    def finish(p: WritePipeline) -> None:
        p.wait_idle(600)
        p.close()
        p.session.store.close()

    @staticmethod
    def timed_submit(p: WritePipeline, args: dict[str, Any], out: list[float]) -> Any:
        started = time.perf_counter()
        ack = p.submit("lambo_derive", args)
        out.append((time.perf_counter() - started) * 1000.0)
        assert ack.structured["receipt_state"] == "pending", ack.text
        return ack

    def ack_only(self) -> list[float]:
        p = self.pipeline(start=False)
        samples: list[float] = []
        for i in range(PER_AGENT):
            for a in range(AGENTS):
                self.timed_submit(p, call(f"agent-{a}", i * AGENTS + a, 1), samples)
        p.session.receipts.close()
        p.session.store.close()
        return samples

    def worker_idle(self, n: int = 300) -> list[float]:
        p = self.pipeline(start=True)
        samples: list[float] = []
        for i in range(n):
            ack = self.timed_submit(p, call("agent-0", i, 1), samples)
            p.session.receipts.wait(ack.structured["receipt"], "agent-0", "bench", 30_000)
        self.finish(p)
        return samples

    def worker_busy(self) -> list[float]:
        p = self.pipeline(start=True)
        samples: list[float] = []
        for i in range(PER_AGENT):
            for a in range(AGENTS):
                self.timed_submit(p, call(f"agent-{a}", i * AGENTS + a, 1), samples)
        self.finish(p)
        return samples

    def throughput(self, calls: int, per_call: int) -> tuple[float, float]:
        p = self.pipeline(start=True)
        started = time.perf_counter()
        for i in range(calls):
            agent = f"agent-{i % AGENTS}"
            # Stay under the lane: wait for this agent's oldest writes when it is full.
            ack = p.submit("lambo_derive", call(agent, i * per_call, per_call))
            while ack.structured["receipt_state"] == "dropped":
                time.sleep(0.01)
                ack = p.submit("lambo_derive", call(agent, i * per_call, per_call))
        assert p.wait_idle(600)
        elapsed = time.perf_counter() - started
        assert p.applied == calls, (p.applied, p.failed)
        self.finish(p)
        return calls / elapsed, calls * per_call / elapsed


def repeat(fn: Callable[[], list[float]], repeats: int) -> tuple[float, float]:
    p50s, p99s = [], []
    for _ in range(repeats):
        samples = fn()
        p50s.append(statistics.median(samples))
        p99s.append(percentile(samples, 0.99))
    return statistics.median(p50s), statistics.median(p99s)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    parser.add_argument("--calls", type=int, default=200, help="derives per throughput run")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = import_model(minilm_source_dir(root / "src"), "minilm", root / "models", "mean")
        embedder = OnnxEmbedder(model_dir, threads=args.threads)
        embedder.embed(["warm up"])
        bench = Bench(embedder, root)
        acks = {
            "ack only (worker stopped)": repeat(bench.ack_only, args.repeats),
            "worker idle (wait per write)": repeat(bench.worker_idle, args.repeats),
            "worker busy (16 agents, back to back)": repeat(bench.worker_busy, args.repeats),
        }
        rates = {}
        for per_call in (1, 16):
            calls = args.calls if per_call == 1 else max(1, args.calls // 8)
            runs = [bench.throughput(calls, per_call) for _ in range(args.repeats)]
            rates[per_call] = (
                calls,
                statistics.median(r[0] for r in runs),
                statistics.median(r[1] for r in runs),
            )
    load_after = os.getloadavg()[0]

    print("In-process ack latency, WritePipeline.submit, 1-concept derive, SQLite (WAL, NORMAL)")
    print(f"median over {args.repeats} repeats of each repeat's p50 / p99 (ms)")
    print()
    print("| ack path | p50 ms | p99 ms |")
    print("|:---------|-------:|-------:|")
    for name, (p50, p99) in acks.items():
        print(f"| {name} | {p50:.3f} | {p99:.3f} |")
    print()
    print(f"Apply throughput, all-MiniLM-L6-v2 int8, {args.threads} thread(s), median of repeats")
    print()
    print("| concepts per call | calls | writes/s | concepts/s |")
    print("|------------------:|------:|---------:|-----------:|")
    for per_call, (calls, writes, concepts) in rates.items():
        print(f"| {per_call} | {calls} | {writes:.1f} | {concepts:.1f} |")
    print()
    print("Target: in-process ack p50 <= 0.3 ms.")
    print(
        f"{os.cpu_count()} cores; 1-min load average {load_before:.2f} before, "
        f"{load_after:.2f} after"
    )


if __name__ == "__main__":
    main()
