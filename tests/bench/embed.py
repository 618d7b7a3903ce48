"""Sentences per second of OnnxEmbedder on the int8 MiniLM from PyPI.

Run by hand (pytest does not collect tests/bench):

    /work/venv/bin/python tests/bench/embed.py [--repeats 7]

Batch 1 and 32, 1 and 2 intra-op threads. Each cell is the median of
``--repeats`` timed runs after one warm-up run; a run embeds the same 256
short English sentences (10-20 tokens, like concepts), in calls of the batch
size. Prints medians, the speed-up ratios and the machine's load average (other
work skews the 2-thread cells most); asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from lambo_core.embed.importer import import_model
from lambo_core.embed.onnx import OnnxEmbedder
from tests.embed_fixtures import minilm_source_dir

SUBJECTS = ["The deploy job", "Alice", "The billing service", "Our parser", "The nightly backup"]
VERBS = ["failed again because", "was rewritten after", "now waits until", "stopped when"]
ENDS = [
    "the disk filled up on the build machine.",
    "the team moved the database to another region.",
    "a config file pointed at the old cluster.",
    "the cache was cleared during the release.",
]


def sentences(n: int) -> list[str]:
    out = []
    for i in range(n):
        s = SUBJECTS[i % len(SUBJECTS)]
        v = VERBS[(i // len(SUBJECTS)) % len(VERBS)]
        e = ENDS[(i // (len(SUBJECTS) * len(VERBS))) % len(ENDS)]
        out.append(f"{s} {v} {e} (#{i})")
    return out


def rate(embedder: OnnxEmbedder, texts: list[str], batch: int, repeats: int) -> float:
    def one_run() -> float:
        started = time.perf_counter()
        for i in range(0, len(texts), batch):
            embedder.embed(texts[i : i + batch])
        return len(texts) / (time.perf_counter() - started)

    one_run()  # warm-up
    return statistics.median(one_run() for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--sentences", type=int, default=256)
    args = parser.parse_args()
    texts = sentences(args.sentences)
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model_dir = import_model(minilm_source_dir(root / "src"), "minilm", root / "models", "mean")
        results: dict[tuple[int, int], float] = {}
        for threads in (1, 2):
            embedder = OnnxEmbedder(model_dir, threads=threads, batch_size=32)
            lengths = [len(ids) for ids in embedder.tokenize(texts[:32])["attention_mask"]]
            for batch in (1, 32):
                results[(threads, batch)] = rate(embedder, texts, batch, args.repeats)
    load_after = os.getloadavg()[0]
    print(f"OnnxEmbedder, all-MiniLM-L6-v2 int8 (PyPI), {args.sentences} sentences of")
    print(f"{min(lengths)}-{max(lengths)} tokens, median of {args.repeats} runs (sentences/s)")
    print()
    print("| threads | batch 1 | batch 32 | batch 32 / batch 1 |")
    print("|--------:|--------:|---------:|-------------------:|")
    for threads in (1, 2):
        one, many = results[(threads, 1)], results[(threads, 32)]
        print(f"| {threads} | {one:.0f} | {many:.0f} | {many / one:.2f}x |")
    print()
    print(
        f"2 threads / 1 thread: batch 1 {results[(2, 1)] / results[(1, 1)]:.2f}x, "
        f"batch 32 {results[(2, 32)] / results[(1, 32)]:.2f}x"
    )
    # Other work on the machine skews multi-thread numbers most: say how busy it was.
    print(
        f"{os.cpu_count()} cores; 1-min load average {load_before:.2f} before, "
        f"{load_after:.2f} after"
    )


if __name__ == "__main__":
    main()
