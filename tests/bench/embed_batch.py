"""Batched embedding in the apply worker: applied writes/s of one agent, batching on and off.

Run by hand (pytest does not collect tests/bench):

    /work/main/.venv/bin/python tests/bench/embed_batch.py [--writes 500] [--repeats 3]

Everything is real: ``WritePipeline.submit`` on a ``SqliteStore`` in a temp dir (a fresh store
per run) and the int8 all-MiniLM-L6-v2 from PyPI. One agent submits ``--writes`` one-concept
derives back to back, not waiting for receipts (when its lane of 64 outstanding writes is full
it retries the refused call after 1 ms); a run is timed from the first submit until the worker
is idle. ``[writes] embed_batch`` is 32 (the default: the writes queued behind the one in hand
are embedded in one call) or 1 (each write alone, as before), the two runs interleaved.

Beside them, in the same run, MiniLM's own rate on the same texts (each framed as lambo_derive
frames it): one call over all of them (the embedder batches 32 at a time) and one call per
text. Prints medians and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The checkout, in place of this script's folder (whose http.py would shadow the stdlib's).
sys.path[0] = str(Path(__file__).resolve().parents[2])

from lambo_core.embed.importer import import_model  # noqa: E402
from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from lambo_core.session import EmbedderPlan, Session  # noqa: E402
from lambo_core.store import SqliteStore  # noqa: E402
from lambo_core.writes import WritePipeline  # noqa: E402
from lambo_core.writes.embedding import texts_to_embed  # noqa: E402
from tests.bench.writes import sentence  # noqa: E402
from tests.embed_fixtures import minilm_source_dir  # noqa: E402

AGENT = "agent-0"


def derive(i: int) -> dict[str, Any]:
    return {"agent_id": AGENT, "concepts": [{"content": sentence(i), "concept_type": "logic"}]}


def run(embedder: OnnxEmbedder, db: Path, writes: int, embed_batch: int) -> dict[str, float]:
    session = Session.open(SqliteStore(db), "bench", EmbedderPlan.ready(embedder))
    p = WritePipeline(session, embed_batch=embed_batch).start()
    calls = [0]
    inner = embedder.embed

    def counted(texts: Any) -> Any:
        calls[0] += 1
        return inner(texts)

    embedder.embed = counted  # type: ignore[method-assign]
    try:
        started = time.perf_counter()
        for i in range(writes):
            while True:
                ack = p.submit("lambo_derive", derive(i))
                if ack.structured["receipt_state"] != "dropped":
                    break
                time.sleep(0.001)  # the lane is full: the agent retries
        assert p.wait_idle(600)
        elapsed = time.perf_counter() - started
    finally:
        del embedder.embed  # back to the class's own
    assert p.applied == writes, (p.applied, p.failed)
    stats = p.stats()
    p.close()
    session.store.close()
    return {
        "writes_s": writes / elapsed,
        "calls": calls[0],
        "apply_p50": stats["write_queue_apply_ms_p50"],
        "apply_p90": stats["write_queue_apply_ms_p90"],
        "serial": stats["write_queue_serial_items_per_sec"] or 0.0,
        "wide": stats["write_queue_items_per_sec"] or 0.0,
    }


def model_rates(embedder: OnnxEmbedder, writes: int) -> tuple[float, float]:
    """(texts/s in one batched call, texts/s one call per text) on the derives' own texts."""
    texts = [
        t
        for i in range(writes)
        for t in texts_to_embed(
            {"kind": "derive", "concepts": [{"content": sentence(i)}], "parent_of": []}
        )
    ]
    started = time.perf_counter()
    embedder.embed(texts)
    batched = len(texts) / (time.perf_counter() - started)
    alone = texts[: min(len(texts), 200)]
    started = time.perf_counter()
    for text in alone:
        embedder.embed([text])
    return batched, len(alone) / (time.perf_counter() - started)


def med(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--writes", type=int, default=500, help="derives per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="onnxruntime intra-op threads")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    results: dict[int, list[dict[str, float]]] = {32: [], 1: []}
    model: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = import_model(minilm_source_dir(root / "src"), "minilm", root / "models", "mean")
        embedder = OnnxEmbedder(model_dir, threads=args.threads)
        embedder.embed(["warm up"])
        runs = 0
        for _ in range(args.repeats):
            for batch in (32, 1):  # interleaved, so a load change hits both alike
                runs += 1
                results[batch].append(run(embedder, root / f"b{runs}.db", args.writes, batch))
            model.append(model_rates(embedder, args.writes))
    load_after = os.getloadavg()[0]

    batched_model = statistics.median(m[0] for m in model)
    alone_model = statistics.median(m[1] for m in model)
    on, off = med(results[32], "writes_s"), med(results[1], "writes_s")
    print(
        f"One agent, {args.writes} one-concept derives back to back, all-MiniLM-L6-v2 int8, "
        f"{args.threads} thread(s), SQLite; median of {args.repeats} runs each"
    )
    print()
    print(
        "| embed_batch | applied writes/s | embedder calls | apply p50 ms | apply p90 ms "
        "| serial/s key | drain/s key |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for batch in (32, 1):
        rows = results[batch]
        print(
            f"| {batch} | {med(rows, 'writes_s'):.1f} | {med(rows, 'calls'):.0f} "
            f"| {med(rows, 'apply_p50'):.0f} | {med(rows, 'apply_p90'):.0f} "
            f"| {med(rows, 'serial'):.1f} | {med(rows, 'wide'):.1f} |"
        )
    print()
    print(
        f"MiniLM alone on the same texts: {batched_model:.1f} texts/s in one batched call, "
        f"{alone_model:.1f} texts/s one call per text (one text per write)"
    )
    print()
    print(f"batched / unbatched applied writes/s: {on / off:.2f}")
    print(f"batched applied writes/s / MiniLM batched texts/s: {on / batched_model:.2f}")
    print(f"unbatched applied writes/s / MiniLM one-at-a-time texts/s: {off / alone_model:.2f}")
    print(
        f"{os.cpu_count()} cores; 1-min load average {load_before:.2f} before, "
        f"{load_after:.2f} after"
    )


if __name__ == "__main__":
    main()
