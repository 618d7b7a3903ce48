"""`lambo import` throughput with MiniLM: bulk import against one-at-a-time lambo_derive and
against the model's own batched embedding rate, all measured in the same run.

Run by hand (pytest does not collect tests/bench):

    /work/main/.venv/bin/python tests/bench/import.py [--lines 1000]

Everything is real: a `lambo serve` (the hub) on a SQLite store in a temp dir, the int8
all-MiniLM-L6-v2 from PyPI with one thread, distinct sentences (nothing merges).

- ``bulk import``: `lambo import FILE --session bulk` while the hub holds the session: the
  command forwards each line's lambo_derive to the hub with a window of outstanding writes
  under the lane bound. Timed by the command's own "in S s" (from its first call to its last
  settled receipt).
- ``one at a time``: the same lines as lambo_derive calls on another session of the same
  hub, each followed by lambo_stats receipt + wait_ms (a client that waits on every write).
- ``model, batch 32``: OnnxEmbedder.embed over the same texts framed as a derive frames a
  lone concept ("<text> — <text>"), 32 at a time: the physical limit of embedding here.

Prints concepts/s for each and the ratios; asserts nothing. The machine's load is printed
too, as other work skews every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# run as a script, this folder is sys.path[0], and its http.py would shadow the stdlib's
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from tests.bench._serve import RawServe, lambo_argv, make_home, serve_env  # noqa: E402
from tests.bench.embed import sentences  # noqa: E402

SUMMARY = re.compile(r"imported (\d+) line\(s\) in ([\d.]+) s: (\d+) concept\(s\) created")


def model_rate(home: Path, texts: list[str]) -> float:
    embedder = OnnxEmbedder(home / "cache" / "models" / "minilm", threads=1, batch_size=32)
    framed = [f"{t} — {t}" for t in texts]
    embedder.embed(framed[:32])  # warm-up
    started = time.perf_counter()
    for i in range(0, len(framed), 32):
        embedder.embed(framed[i : i + 32])
    return len(framed) / (time.perf_counter() - started)


def bulk_rate(home: Path, store: Path, source: Path) -> tuple[float, int]:
    out = subprocess.run(
        [*lambo_argv(), "import", str(source), "--session", "bulk", "--store", str(store)],
        capture_output=True,
        text=True,
        env=serve_env(home),
        cwd=home,
        timeout=3600,
        check=False,
    )
    match = SUMMARY.search(out.stdout)
    if out.returncode != 0 or match is None:
        raise SystemExit(f"lambo import failed ({out.returncode}): {out.stderr[-2000:]}")
    return int(match.group(3)) / float(match.group(2)), int(match.group(3))


def one_at_a_time_rate(serve: RawServe, texts: list[str]) -> float:
    started = time.perf_counter()
    for text in texts:
        ack = serve.call(
            "lambo_derive",
            {"agent_id": "one", "concepts": [{"content": text, "concept_type": "logic"}]},
        )
        serve.stats("one", receipt=ack["receipt"], wait_ms=34_000)
    return len(texts) / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=1000)
    args = parser.parse_args()
    texts = sentences(2 * args.lines)
    bulk_texts, single_texts = texts[: args.lines], texts[args.lines :]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        home = make_home(root)
        store = root / "bench.db"
        source = root / "lines.jsonl"
        source.write_text(
            "".join(json.dumps({"content": t, "type": "logic"}) + "\n" for t in bulk_texts)
        )
        model = model_rate(home, texts[: args.lines])
        serve = RawServe(home, store, "bulk")
        try:
            serve.wait_ready()
            bulk, created = bulk_rate(home, store, source)
        finally:
            serve.proc.terminate()
            serve.proc.wait(timeout=60)
        single_serve = RawServe(home, store, "single", name="single")
        try:
            single_serve.wait_ready()
            single = one_at_a_time_rate(single_serve, single_texts)
        finally:
            single_serve.proc.terminate()
            single_serve.proc.wait(timeout=60)
    load_after = os.getloadavg()[0]
    print(f"{args.lines} one-concept lines, MiniLM int8 (PyPI), 1 thread; {created} created")
    print()
    print("| path | concepts/s |")
    print("|---|---:|")
    print(f"| bulk import through the hub | {bulk:.0f} |")
    print(f"| one-at-a-time lambo_derive + wait | {single:.0f} |")
    print(f"| model alone, batch 32 (the limit) | {model:.0f} |")
    print()
    print(f"bulk / one-at-a-time: {bulk / single:.2f}x; bulk / model limit: {bulk / model:.2f}")
    print(
        f"{os.cpu_count()} cores; 1-min load average {load_before:.2f} before, "
        f"{load_after:.2f} after"
    )


if __name__ == "__main__":
    main()
