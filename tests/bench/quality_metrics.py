"""What the recall quality bench measures and how it prints it (issue #15).

R@k: the share of a question's evidence concepts among the first k hits, averaged over the
questions. MRR@10: 1 / the rank of the first evidence hit, 0 past 10. The verdict of a set:
does lambo's default beat RRF and each leg alone on R@5 and MRR@10, on all the questions
and on each half of them (odd, even)? Beating means a margin, except that a baseline
already at 1.000 can only be matched (the verdict says so when that is how it was met).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

KEYWORD = "keyword alone"
VECTOR = "vector alone"
RRF_OUTSIDE = "RRF k=60 (outside)"
DEFAULT = "lambo default"
BASELINES = (KEYWORD, VECTOR, RRF_OUTSIDE)  # what the default must beat
MRR_DEPTH = 10
HALVES: tuple[tuple[str, int | None], ...] = (("all", None), ("odd half", 0), ("even half", 1))


def recall_at(ranked: Sequence[str], relevant: set[str], k: int) -> float:
    return len(relevant & set(ranked[:k])) / len(relevant)


def reciprocal_rank(ranked: Sequence[str], relevant: set[str], depth: int = MRR_DEPTH) -> float:
    for i, node_id in enumerate(ranked[:depth]):
        if node_id in relevant:
            return 1.0 / (i + 1)
    return 0.0


def rrf(lists: Sequence[Sequence[str]], k: int = 60) -> list[str]:
    """Reciprocal-rank fusion: each list adds 1 / (k + rank) (rank from 1), best first;
    ties keep the order in which ids were first seen."""
    scores: dict[str, float] = {}
    for ranked in lists:
        for rank, node_id in enumerate(ranked, start=1):
            scores[node_id] = scores.get(node_id, 0.0) + 1.0 / (k + rank)
    return sorted(scores, key=lambda node_id: -scores[node_id])


@dataclass
class Row:
    """One ranking's per-question results on one set."""

    r1: list[float] = field(default_factory=list)
    r5: list[float] = field(default_factory=list)
    mrr: list[float] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)  # lambo rows only
    warm_ms: list[float] = field(default_factory=list)  # the default again, embedding cached

    def add(self, ranked: Sequence[str], relevant: set[str], kind: str) -> None:
        self.r1.append(recall_at(ranked, relevant, 1))
        self.r5.append(recall_at(ranked, relevant, 5))
        self.mrr.append(reciprocal_rank(ranked, relevant))
        self.kinds.append(kind)

    def mean(self, metric: str, half: int | None = None, kind: str | None = None) -> float:
        values: list[float] = getattr(self, metric)
        if kind is not None:
            values = [v for v, k in zip(values, self.kinds, strict=True) if k == kind]
        picked = values if half is None else values[half::2]
        return statistics.fmean(picked) if picked else 0.0

    def p50_ms(self) -> float | None:
        return statistics.median(self.ms) if self.ms else None

    def summary(self) -> dict[str, Any]:
        return {
            "r1": round(self.mean("r1"), 6),
            "r5": round(self.mean("r5"), 6),
            "mrr10": round(self.mean("mrr"), 6),
            "p50_ms": None if not self.ms else round(statistics.median(self.ms), 2),
        }


@dataclass(frozen=True)
class Verdict:
    beats: bool
    r5_margin: float  # default minus the best baseline, per metric
    mrr_margin: float
    at_ceiling: tuple[str, ...] = ()  # metrics where the best baseline is already 1.000

    def text(self) -> str:
        tied = (
            f"; a baseline is perfect on {' and '.join(self.at_ceiling)}, where matching it "
            "is enough"
            if self.at_ceiling
            else ""
        )
        return (
            f"{'yes' if self.beats else 'no'} "
            f"(R@5 {self.r5_margin:+.3f}, MRR@10 {self.mrr_margin:+.3f} over the best of them"
            f"{tied})"
        )


CEILING = 1.0 - 1e-9  # a baseline this good cannot be beaten, only matched


def verdict(rows: dict[str, Row], half: int | None = None) -> Verdict:
    """Whether the default beats every baseline on R@5 and on MRR@10: by a margin, or, where
    the best baseline is already perfect (1.000), by matching it (said in the text)."""
    margins, ceiling = {}, []
    for metric, label in (("r5", "R@5"), ("mrr", "MRR@10")):
        best = max(rows[b].mean(metric, half) for b in BASELINES)
        margins[metric] = rows[DEFAULT].mean(metric, half) - best
        if best >= CEILING:
            ceiling.append(label)
    beats = all(
        margin > 0 or (label in ceiling and margin >= 0)
        for (metric, margin), label in zip(margins.items(), ("R@5", "MRR@10"), strict=True)
    )
    return Verdict(beats, margins["r5"], margins["mrr"], tuple(ceiling))


def print_set_table(rows: dict[str, Row]) -> None:
    print(f"  {'ranking':<26}{'R@1':>8}{'R@5':>8}{'MRR@10':>8}{'p50 ms':>9}")
    for name, row in rows.items():
        p50 = row.p50_ms()
        shown = "" if p50 is None else f"{p50:.1f}"
        print(
            f"  {name:<26}{row.mean('r1'):>8.3f}{row.mean('r5'):>8.3f}"
            f"{row.mean('mrr'):>8.3f}{shown:>9}"
        )


def print_by_kind(rows: dict[str, Row]) -> None:
    """R@5 by kind of question, for sets whose questions have kinds."""
    kinds = list(dict.fromkeys(rows[DEFAULT].kinds))
    if len(kinds) < 2:
        return
    counts = {k: rows[DEFAULT].kinds.count(k) for k in kinds}
    head = "".join(f"{f'{k} ({counts[k]})':>18}" for k in kinds)
    print(f"  R@5 by kind{'':<15}{head}")
    for name, row in rows.items():
        cells = "".join(f"{row.mean('r5', kind=k):>18.3f}" for k in kinds)
        print(f"  {name:<26}{cells}")


def markdown(sets: dict[str, dict[str, Any]]) -> str:
    """The README's table, sets x rankings x metrics, from each set's ``rows`` summaries."""
    lines = [
        "| set | ranking | R@1 | R@5 | MRR@10 | p50 ms |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for set_name, numbers in sets.items():
        for name, row in numbers["rows"].items():
            p50 = "" if row["p50_ms"] is None else f"{row['p50_ms']:.1f}"
            lines.append(
                f"| {set_name} | {name} | {row['r1']:.3f} | {row['r5']:.3f} "
                f"| {row['mrr10']:.3f} | {p50} |"
            )
    return "\n".join(lines)
