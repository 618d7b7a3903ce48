"""Retrieval quality of lambo_recall on a labelled set. Run by hand:
``python tests/bench/recall_quality.py``.

The set (``recall_quality_data.json`` beside this file) holds 330 short facts
of the kind coding agents store, across six made-up projects, and 177
questions phrased the way an agent asks, each labelled with the fact(s) that
answer it. The facts are written through the real write pipeline (SQLite,
FTS5, the real MiniLM int8 model from PyPI), three facts per lambo_derive call
in file order, as an agent writes them. Then every question is recalled with
top_k 10 and traversal_depth 0 (expansion is a separate matter from the legs),
once per configuration:

- keyword only and vector only, each with raw scores and rescaled as the
  fused recall rescales them (the bar a fusion must clear is each single leg
  at its better setting);
- keyword + vector fused by ``sum`` (the default), by ``max``, by ``max`` over raw scores
  (BM25 against cosine, the literal reading), by ``rrf`` and by ``sum``;
- the recall as served: keyword + vector + recent, by each method.

It reports recall@5 (the share of a question's relevant facts in its first 5
hits, averaged), MRR@10 (1 / rank of the first relevant hit, 0 past 10) and
hit@1. Access counts are drained after every recall so one question's hits do
not raise the next one's scores. Nothing is asserted; it prints the table,
names the configurations that beat both single legs on both metrics, and
repeats that on each half of the questions (odd, even): the fusion choices
were made looking at this set, so a margin that holds on one half only is
not one to trust.

Options: ``--show-misses N`` prints the fused recall's first N misses.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.canon.history import CanonHistory  # noqa: E402
from lambo_core.canon.rules import CanonRules  # noqa: E402
from lambo_core.embed.importer import import_model  # noqa: E402
from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from lambo_core.recall import Ranking, RecallDefaults, recall  # noqa: E402
from lambo_core.session import EmbedderPlan, Session  # noqa: E402
from lambo_core.store import SqliteStore  # noqa: E402
from lambo_core.text import canonical_key  # noqa: E402
from lambo_core.writes import WritePipeline  # noqa: E402
from tests.embed_fixtures import minilm_source_dir  # noqa: E402

DATA = Path(__file__).with_name("recall_quality_data.json")
FACTS_PER_CALL = 3
TOP_K = 10


@dataclass(frozen=True)
class Config:
    label: str
    legs: frozenset[str]
    fusion: str = "sum"
    rrf_k: int = 60
    normalize: bool | None = None  # None: as served (rescaled whenever the vector leg ran)
    standing: str = "tiebreak"
    single: bool = False  # a single-leg baseline


KEYWORD = frozenset({"keyword"})
VECTOR = frozenset({"vector"})
FUSED = frozenset({"keyword", "vector"})
SERVED = frozenset({"keyword", "vector", "recent"})
CONFIGS = (
    Config("keyword only, raw BM25", KEYWORD, normalize=False, single=True),
    Config("keyword only, rescaled", KEYWORD, normalize=True, single=True),
    Config("vector only, raw cosine", VECTOR, normalize=False, single=True),
    Config("vector only, rescaled", VECTOR, normalize=True, single=True),
    Config("kw+vec, max of raw scores", FUSED, "max", normalize=False),
    Config("kw+vec, max", FUSED, "max"),
    Config("kw+vec, rrf k=60", FUSED, "rrf"),
    Config("kw+vec, sum (default)", FUSED, "sum"),
    Config("served +recent, max", SERVED, "max"),
    Config("served +recent, rrf k=60", SERVED, "rrf"),
    Config("served +recent, sum (default)", SERVED, "sum"),
    Config("served, sum, standing half", SERVED, "sum", standing="half"),
    Config("served, max, standing half (spec)", SERVED, "max", standing="half"),
)


def build(workdir: Path, data: dict[str, Any]) -> tuple[Session, WritePipeline, dict[str, str]]:
    """Write every fact through the pipeline; return the session and fact id -> node id."""
    model_dir = import_model(
        minilm_source_dir(workdir / "src"), "minilm", workdir / "models", pooling="mean"
    )
    embedder = OnnxEmbedder(model_dir, threads=2)
    store = SqliteStore(workdir / "quality.db")
    pipeline = WritePipeline(Session.open(store, "quality", EmbedderPlan.ready(embedder))).start()
    facts = data["facts"]
    for start in range(0, len(facts), FACTS_PER_CALL):
        group = facts[start : start + FACTS_PER_CALL]
        ack = pipeline.submit(
            "lambo_derive",
            {
                "agent_id": "bench",
                "concepts": [{"content": f["text"], "concept_type": f["type"]} for f in group],
            },
        )
        view = pipeline.session.receipts.wait(ack.structured["receipt"], "bench", "quality", 60_000)
        assert view.state.value == "applied", view.detail
    session = pipeline.session
    graph = session.index.graph
    vectors = session.index.vectors
    assert vectors is not None
    node_of: dict[str, str] = {}
    for fact in facts:
        same = graph.concepts_with_key(canonical_key(fact["text"]))
        if same:
            node_of[fact["id"]] = same[0].id
        else:  # merged by similarity into an earlier concept: that concept answers for it
            node_of[fact["id"]] = vectors.top_k(embedder.embed_query(fact["text"]), 1)[0][0]
    return session, pipeline, node_of


@dataclass
class Scores:
    recall5: list[float]  # per question
    mrr10: list[float]
    hit1: list[float]
    ms: float
    misses: list[tuple[str, list[str]]]

    def mean(self, name: str, part: int | None = None) -> float:
        values: list[float] = getattr(self, name)
        return statistics.fmean(values if part is None else values[part::2])


def evaluate(
    session: Session, data: dict[str, Any], node_of: dict[str, str], config: Config
) -> Scores:
    defaults = RecallDefaults()
    history = CanonHistory(session, CanonRules())  # one per session, as a serve holds it
    text_of = {node_of[f["id"]]: f["text"] for f in data["facts"]}
    recalls, rrs, hits1, times = [], [], [], []
    misses: list[tuple[str, list[str]]] = []
    for q in data["questions"]:
        relevant = {node_of[r] for r in q["relevant"]}
        args = {
            "agent_id": "bench",
            "query": q["question"],
            "top_k": TOP_K,
            "traversal_depth": 0,
            "max_tokens": 100_000,
        }
        t = time.perf_counter()
        result = recall(
            session,
            args,
            defaults=defaults,
            ranking=Ranking(config.fusion, config.rrf_k, config.standing),
            legs=config.legs,
            normalize=config.normalize,
            canon_history=history,
        )
        times.append(time.perf_counter() - t)
        session.access_counts.drain()
        ranked = [h["node_id"] for h in result.hits]
        recalls.append(len(relevant & set(ranked[:5])) / len(relevant))
        first = next((i for i, node in enumerate(ranked[:TOP_K]) if node in relevant), None)
        rrs.append(0.0 if first is None else 1.0 / (first + 1))
        hits1.append(1.0 if first == 0 else 0.0)
        if first is None or first >= 5:
            misses.append((q["question"], [text_of.get(n, n) for n in ranked[:3]]))
    return Scores(recalls, rrs, hits1, statistics.median(times) * 1e3, misses)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show-misses", type=int, default=0)
    args = parser.parse_args()
    data = json.loads(DATA.read_text())
    n_facts, n_questions = len(data["facts"]), len(data["questions"])
    with tempfile.TemporaryDirectory(prefix="lambo-quality-") as tmp:
        t0 = time.perf_counter()
        session, pipeline, node_of = build(Path(tmp), data)
        merged = n_facts - len(set(node_of.values()))
        print(
            f"wrote {n_facts} facts in {time.perf_counter() - t0:.1f} s "
            f"({len(session.index.graph)} concepts; {merged} merged by similarity); "
            f"{n_questions} questions, top_k {TOP_K}, traversal_depth 0, MiniLM int8"
        )
        print()
        print(f"{'configuration':<32}{'recall@5':>10}{'MRR@10':>10}{'hit@1':>8}{'p50 ms':>9}")
        print("-" * 69)
        results: dict[str, Scores] = {}
        for config in CONFIGS:
            scores = evaluate(session, data, node_of, config)
            results[config.label] = scores
            print(
                f"{config.label:<32}{scores.mean('recall5'):>10.3f}"
                f"{scores.mean('mrr10'):>10.3f}{scores.mean('hit1'):>8.3f}{scores.ms:>9.1f}"
            )
        pipeline.close()
    print()
    singles = [results[c.label] for c in CONFIGS if c.single]
    for part, name in ((None, "all questions"), (0, "odd half"), (1, "even half")):
        bar_r = max(s.mean("recall5", part) for s in singles)
        bar_m = max(s.mean("mrr10", part) for s in singles)
        winners = [
            c.label
            for c in CONFIGS
            if not c.single
            and results[c.label].mean("recall5", part) > bar_r
            and results[c.label].mean("mrr10", part) > bar_m
        ]
        print(
            f"{name}: best single leg recall@5 {bar_r:.3f}, MRR@10 {bar_m:.3f}; "
            f"beat both on both metrics: {', '.join(winners) or 'none'}"
        )
    if args.show_misses:
        served = next(c for c in CONFIGS if c.label.startswith("served") and "default" in c.label)
        print()
        print(f"{served.label}: misses (no relevant fact in the first 5)")
        for question, top in results[served.label].misses[: args.show_misses]:
            print(f"  Q: {question}")
            for text in top:
                print(f"     - {text}")


if __name__ == "__main__":
    main()
