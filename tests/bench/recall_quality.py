"""Retrieval quality of lambo_recall on three labelled sets (issue #15). Run by hand:
``python tests/bench/recall_quality.py [--sets ...] [--conversations DIR] [--json PATH]``.

The sets (``quality_sets.py``): **agent facts** (``recall_quality_data.json``: 330 facts
coding agents store, written three per lambo_derive call), **conversations** (every
``conversations/part_*.json`` in ONE session, each dialogue turn derived alone as
``"<speaker>: <text>"`` dated by its session's date) and **identifiers** (300 facts with
one identifier each, in families of near neighbours, generated from a seed; 300 ordinary
topic recalls of heavy use come before its questions, and their access counts are kept
and made durable by the write pipeline's write-behind, as a serve does).

Each set is written through the real write pipeline (SQLite, FTS5, the real MiniLM int8
model from PyPI) into its own session, waiting on every receipt; a turn or fact merged
by similarity or matched by key into an earlier concept is answered for by that concept.
The pipeline is then closed (its final flush writes what the heavy use left), so no
write-behind runs while questions are asked. Each question is then ranked by:

- **keyword alone**, **vector alone**: the raw legs' own order, from
  ``lambo_core.recall.legs.run_legs`` (depth top_k * 4, as recall asks), outside lambo's
  scoring; **RRF k=60 (outside)**: those two lists fused by the sum of 1 / (60 + rank);
- **lambo default**: ``lambo_core.recall.recall`` as a serve calls it: the default
  configuration's fusion and recall settings, every leg, the default traversal depth,
  top_k 10, max_tokens 100000, one CanonHistory per session; and lambo with each fusion
  method (max, rrf, sum) and each other ``[fusion] standing`` (where this lambo has
  that setting), the rest as served, to show what each setting does.

The default is recalled first for each question, so its p50 includes the query's
embedding; the fusion rows after it find the embedding cached (their p50 excludes it).
Each lambo recall runs its legs afresh (the leg cache is emptied before it), and its
access counts are drained after it, so one question does not change the next.

It prints per set R@1, R@5, MRR@10 (``quality_metrics.py``) and p50 ms of the lambo rows,
R@5 by kind of question, whether the default beats RRF and both legs on R@5 and MRR@10
on all questions and on each half (odd, even: the ranking was tuned looking at these
sets, so a margin that holds on one half only is not one to trust), the identifier
R@1, and at the end a markdown table for the README. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.canon.history import CanonHistory  # noqa: E402
from lambo_core.canon.rules import CanonRules  # noqa: E402
from lambo_core.config import Config, Setting  # noqa: E402
from lambo_core.config_schema import KEYS  # noqa: E402
from lambo_core.embed.importer import import_model  # noqa: E402
from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from lambo_core.index.caches import LegCache  # noqa: E402
from lambo_core.recall import Ranking, RecallDefaults, RecallResult, recall  # noqa: E402
from lambo_core.recall.legs import (  # noqa: E402
    CANDIDATES_PER_HIT,
    LEG_KEYWORD,
    LEG_VECTOR,
    run_legs,
)
from lambo_core.session import EmbedderPlan, Session  # noqa: E402
from lambo_core.store import SqliteStore  # noqa: E402
from lambo_core.text import canonical_key  # noqa: E402
from lambo_core.writes import WritePipeline  # noqa: E402
from tests.bench import quality_metrics as qm  # noqa: E402
from tests.bench import quality_sets  # noqa: E402
from tests.bench.quality_sets import LabelledSet, Write  # noqa: E402
from tests.embed_fixtures import minilm_source_dir  # noqa: E402

TOP_K = 10
MAX_TOKENS = 100_000
FUSIONS = ("max", "rrf", "sum")
AGENT = "bench"
RECEIPT_WAIT_MS = 60_000
SET_NAMES = ("agent-facts", "conversations", "identifiers")
BOTH_LEGS = frozenset({LEG_KEYWORD, LEG_VECTOR})


def served_config() -> Config:
    """Every setting at its default, as a serve with no lambo.toml runs."""
    return Config({k.dotted: Setting(k.default, "default") for k in KEYS}, file=None)


@dataclass
class Served:
    """How the serve calls recall: its defaults and its ``[fusion]`` settings."""

    defaults: RecallDefaults
    fusion: dict[str, Any]  # [fusion] name -> value: method, rrf_k, standing
    config: Config

    @classmethod
    def from_config(cls, config: Config) -> Served:
        fusion = {k.name: config.get(k.dotted) for k in KEYS if k.section == "fusion"}
        return cls(RecallDefaults.from_config(config), fusion, config)

    def ranking(self, overrides: dict[str, Any]) -> Ranking:
        """The served [fusion] settings with ``overrides`` (names as in [fusion])."""
        return dataclasses.replace(Ranking.from_config(self.config), **overrides)


def lambo_rows(served: Served) -> dict[str, dict[str, Any]]:
    """The lambo rankings measured: the default, then each other [fusion] choice alone
    (method, and standing) with the rest as served."""
    rows: dict[str, dict[str, Any]] = {qm.DEFAULT: {}}
    rows.update({f"lambo fusion={m}": {"method": m} for m in FUSIONS})
    for key in KEYS:
        if key.section == "fusion" and key.name == "standing" and key.choices:
            rows.update(
                {f"lambo standing={c}": {"standing": c} for c in key.choices if c != key.default}
            )
    return rows


@dataclass
class Built:
    session: Session
    embedder: OnnxEmbedder
    node_of: dict[str, str]  # the set's item id -> the concept that answers for it
    write_s: float
    history: CanonHistory  # the session's one demotion history, as a serve holds it
    heavy_use_hits: int = 0


def _write(pipeline: WritePipeline, write: Write) -> dict[str, Any]:
    args: dict[str, Any] = {
        "agent_id": AGENT,
        "concepts": [{"content": i.text, "concept_type": i.concept_type} for i in write.items],
    }
    if write.event_time is not None:
        args["event_time"] = write.event_time
    ack = pipeline.submit("lambo_derive", args)
    session = pipeline.session
    view = session.receipts.wait(ack.structured["receipt"], AGENT, session.name, RECEIPT_WAIT_MS)
    assert view.state.value == "applied", view.detail
    return dict(view.data)


def build(workdir: Path, model_dir: Path, labelled: LabelledSet, served: Served) -> Built:
    """Write the set, run its heavy use with the pipeline running, then close the pipeline."""
    embedder = OnnxEmbedder(model_dir, threads=2)
    store = SqliteStore(workdir / "quality.db")
    session = Session.open(store, "quality", EmbedderPlan.ready(embedder))
    pipeline = WritePipeline(session).start()
    started = time.perf_counter()
    node_of: dict[str, str] = {}
    for write in labelled.writes:
        data = _write(pipeline, write)
        if len(write.items) == 1:  # the receipt names the one concept written or matched
            node_of[write.items[0].id] = (data["created"] + data["matched"])[0]
    write_s = time.perf_counter() - started
    for item in labelled.items():  # several per call: found by key, else by similarity
        if item.id not in node_of:
            node_of[item.id] = _concept_of(session, embedder, item.text)
    built = Built(session, embedder, node_of, write_s, CanonHistory(session, CanonRules()))
    for query in labelled.heavy_use:  # ordinary recalls, their access counts kept
        result = _served_recall(session, {"agent_id": AGENT, "query": query}, served, built.history)
        built.heavy_use_hits += len(result.hits)
    pipeline.close()  # the final flush makes the heavy use's access counts durable
    return built


def _concept_of(session: Session, embedder: OnnxEmbedder, text: str) -> str:
    same = session.index.graph.concepts_with_key(canonical_key(text))
    if same:
        return same[0].id
    vectors = session.index.vectors
    assert vectors is not None
    return vectors.top_k(embedder.embed_query(text), 1)[0][0]


def _served_recall(
    session: Session,
    args: dict[str, Any],
    served: Served,
    history: CanonHistory,
    overrides: dict[str, Any] | None = None,
) -> RecallResult:
    return recall(
        session,
        args,
        defaults=served.defaults,
        canon_history=history,
        ranking=served.ranking(overrides or {}),
    )


@dataclass
class Miss:
    question: str
    evidence: list[str]
    top: list[str]


def _timed_recall(
    session: Session,
    args: dict[str, Any],
    served: Served,
    history: CanonHistory,
    overrides: dict[str, Any],
) -> tuple[list[str], float]:
    """(the hits' node ids in the result's order, ms); the legs run afresh and the access
    counts the recall left are drained."""
    session.index.leg_cache = LegCache()
    started = time.perf_counter()
    result = _served_recall(session, args, served, history, overrides)
    elapsed = (time.perf_counter() - started) * 1e3
    session.access_counts.drain()
    return [h["node_id"] for h in result.hits], elapsed


def evaluate(
    built: Built, labelled: LabelledSet, served: Served
) -> tuple[dict[str, qm.Row], list[Miss]]:
    session = built.session
    rankings = lambo_rows(served)
    rows = {name: qm.Row() for name in (*qm.BASELINES, *rankings)}
    history = built.history
    written: dict[str, int] = {}  # node id -> when it was first written
    for node_id in built.node_of.values():
        written.setdefault(node_id, len(written))
    misses: list[Miss] = []
    for question in labelled.questions:
        relevant = {built.node_of[e] for e in question.evidence}
        args = {"agent_id": AGENT, "query": question.text, "top_k": TOP_K, "max_tokens": MAX_TOKENS}
        for name, overrides in rankings.items():  # the default first: its embedding not cached
            ranked, ms = _timed_recall(session, args, served, history, overrides)
            rows[name].add(ranked, relevant, question.kind)
            rows[name].ms.append(ms)
            if name != qm.DEFAULT:
                continue
            if qm.recall_at(ranked, relevant, 5) == 0:
                misses.append(_miss(session, question.text, relevant, ranked))
            # again, its embedding cached now; then the raw legs
            rows[name].warm_ms.append(_timed_recall(session, args, served, history, {})[1])
            depth = TOP_K * CANDIDATES_PER_HIT
            legs = run_legs(session, question.text, depth, BOTH_LEGS, built.embedder)
            keyword = _by_raw_score(legs.keyword, written)
            vector = _by_raw_score(legs.vector, written)
            rows[qm.KEYWORD].add(keyword, relevant, question.kind)
            rows[qm.VECTOR].add(vector, relevant, question.kind)
            rows[qm.RRF_OUTSIDE].add(qm.rrf([keyword, vector]), relevant, question.kind)
    return rows, misses


def _by_raw_score(hits: list[tuple[str, float]], written: dict[str, int]) -> list[str]:
    """Best raw score first; a tie goes to the concept written first (node ids are random,
    so breaking ties by id would change the figures from one run to the next)."""
    ranked = sorted(hits, key=lambda hit: (-hit[1], written.get(hit[0], len(written))))
    return [node_id for node_id, _ in ranked]


def _miss(session: Session, question: str, relevant: set[str], ranked: list[str]) -> Miss:
    def text(node_id: str) -> str:
        concept = session.index.graph.concept(node_id)
        return concept.content if concept is not None else node_id

    return Miss(question, [text(n) for n in sorted(relevant)], [text(n) for n in ranked[:3]])


def load_sets(names: list[str], conversations_dir: Path) -> list[LabelledSet]:
    loaders: dict[str, Callable[[], LabelledSet]] = {
        "agent-facts": quality_sets.agent_facts,
        "conversations": lambda: quality_sets.conversations(conversations_dir),
        "identifiers": quality_sets.identifiers,
    }
    found = []
    for name in names:
        if name == "conversations" and not quality_sets.conversation_parts(conversations_dir):
            print(f"conversations: no part_*.json in {conversations_dir}; set skipped")
            continue
        found.append(loaders[name]())
    return found


def _absorbed_evidence(labelled: LabelledSet, built: Built) -> list[tuple[str, str, str]]:
    """(item id, its text, the text of the concept answering for it) for every evidence item
    merged by similarity or matched by key into a concept with other text; printed, since
    a merge that swallowed the fact asked about is a miss no ranking can mend."""
    texts = {i.id: i.text for i in labelled.items()}
    evidence = sorted({e for q in labelled.questions for e in q.evidence})
    graph = built.session.index.graph
    found = []
    for e in evidence:
        concept = graph.concept(built.node_of[e])
        if concept is not None and concept.content != texts[e]:
            found.append((e, texts[e], concept.content))
    if found:
        print(
            f"  {len(found)} of {len(evidence)} evidence items are answered by a concept with "
            "other text (merged by similarity or matched by key):"
        )
        for e, text, answering in found[:10]:
            print(f"     {e} {text!r}\n       -> {answering!r}")
    return found


def _report_set(
    labelled: LabelledSet, built: Built, rows: dict[str, qm.Row], misses: list[Miss], shown: int
) -> dict[str, Any]:
    concepts = len(set(built.node_of.values()))
    items = len(built.node_of)
    print(f"\n== {labelled.name}: {labelled.about}")
    print(
        f"  wrote {items} items in {built.write_s:.1f} s: {concepts} concepts answer for them "
        f"({items - concepts} merged or matched into earlier ones); "
        f"{len(labelled.questions)} questions"
    )
    if labelled.heavy_use:
        session = built.session
        stored = session.store.concepts(session.name)  # what the write-behind made durable
        used = sorted((c.access_count for c in stored), reverse=True)
        print(
            f"  heavy use: {len(labelled.heavy_use)} topic recalls, {built.heavy_use_hits} hits "
            f"counted; durable access counts: {sum(used)} in all, top concepts {used[:5]}"
        )
    absorbed = _absorbed_evidence(labelled, built)
    qm.print_set_table(rows)
    default = rows[qm.DEFAULT]
    print(
        f"  lambo default p50: {default.p50_ms():.1f} ms with the query's embedding, "
        f"{statistics.median(default.warm_ms):.1f} ms with it cached"
    )
    qm.print_by_kind(rows)
    out: dict[str, Any] = {
        "about": labelled.about,
        "questions": len(labelled.questions),
        "items": items,
        "concepts": concepts,
        "evidence_absorbed": {e: {"text": t, "answered_by": c} for e, t, c in absorbed},
        "rows": {name: row.summary() for name, row in rows.items()},
        "default_p50_ms_embedding_cached": round(statistics.median(default.warm_ms), 2),
        "verdict": {},
    }
    for label, half in qm.HALVES:
        v = qm.verdict(rows, half)
        out["verdict"][label] = {
            "beats": v.beats,
            "r5_margin": round(v.r5_margin, 4),
            "mrr_margin": round(v.mrr_margin, 4),
        }
        print(f"  {label}: default beats RRF and both legs on R@5 and MRR@10: {v.text()}")
    if labelled.name == "identifiers":
        r1 = rows[qm.DEFAULT].mean("r1")
        out["identifier_r1"] = r1
        print(f"  identifier R@1: {r1:.3f} (target >= 0.99)")
    for miss in misses[:shown]:
        print(f"  MISS {miss.question}\n     wanted: {' | '.join(miss.evidence)}")
        for text in miss.top:
            print(f"     - {text}")
    return out


def _commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return "unknown"


def measure(
    names: Sequence[str] = SET_NAMES,
    conversations_dir: Path = quality_sets.CONVERSATIONS,
    show_misses: int = 0,
) -> dict[str, Any]:
    """Build and evaluate each named set, printing as it goes; the numbers, per set, as
    ``--json`` writes them (report.py imports this)."""
    served = Served.from_config(served_config())
    print(
        f"lambo {_commit()}, MiniLM int8; [fusion] as served {served.fusion}, top_k {TOP_K}, "
        f"traversal_depth {served.defaults.traversal_depth}"
    )
    report: dict[str, Any] = {"commit": _commit(), "fusion": served.fusion, "sets": {}}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lambo-quality-") as tmp:
        work = Path(tmp)
        model_dir = import_model(
            minilm_source_dir(work / "src"), "minilm", work / "models", pooling="mean"
        )
        for n, labelled in enumerate(load_sets(list(names), conversations_dir)):
            (work / str(n)).mkdir()
            built = build(work / str(n), model_dir, labelled, served)
            rows, misses = evaluate(built, labelled, served)
            report["sets"][labelled.name] = _report_set(labelled, built, rows, misses, show_misses)
            built.session.store.close()
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sets", default=",".join(SET_NAMES), help="comma-separated")
    parser.add_argument("--conversations", type=Path, default=quality_sets.CONVERSATIONS)
    parser.add_argument("--json", type=Path, help="write the numbers here")
    parser.add_argument("--show-misses", type=int, default=0, metavar="N")
    args = parser.parse_args()
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    unknown = set(names) - set(SET_NAMES)
    if unknown:
        parser.error(f"unknown set(s) {sorted(unknown)}; sets: {', '.join(SET_NAMES)}")
    report = measure(names, args.conversations, args.show_misses)
    print(f"\n(whole run {report['seconds']:.0f} s)\n")
    print(qm.markdown(report["sets"]))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
