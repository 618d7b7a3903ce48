"""The layer relevance floor, measured (issue #17). Run by hand:
``python tests/bench/layer_floor.py [--sets ...] [--json PATH]``.

A merged recall lets a layer's hit in only when its relevance (``recall/part_hits.py``: the
cosine of the question and the concept, at least the share of the question's exact names
it carries) reaches the layer's floor, ``[recall] layer_relevance_floor``. This bench picks
that floor's default from the labelled sets of ``recall_quality.py``, each written through
the real write pipeline into its own session with the real MiniLM, as a layer would hold it:

- **relevant**: for each question of a set, the hits of that set's session that are the
  question's evidence (``recall_parts`` as a serve calls it, top_k 10): layer hits a
  merged recall must keep;
- **unrelated**: for each question of every OTHER set, every hit of this set's session
  (nothing there answers it): layer hits a merged recall must drop.

Hits with no relevance of their own (graph expansion or the recent leg alone) never pass,
whatever the floor; they are counted apart. For each floor on a 0.025 grid it prints the
share of relevant hits kept and of unrelated hits kept, and picks the floor with the
largest difference (Youden's J; the lowest such floor on a tie). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.embed.importer import import_model  # noqa: E402
from lambo_core.index.caches import LegCache  # noqa: E402
from lambo_core.recall.parts import RecallParts  # noqa: E402
from lambo_core.recall.pipeline import recall_parts  # noqa: E402
from tests.bench import quality_sets  # noqa: E402
from tests.bench.recall_quality import (  # noqa: E402
    AGENT,
    SET_NAMES,
    TOP_K,
    Built,
    Served,
    build,
    load_sets,
    served_config,
)
from tests.embed_fixtures import minilm_source_dir  # noqa: E402

GRID = [round(0.025 * i, 3) for i in range(0, 33)]  # 0.0 .. 0.8


@dataclass
class Samples:
    relevant: list[float] = field(default_factory=list)
    unrelated: list[float] = field(default_factory=list)
    relevant_none: int = 0  # relevant hits with no relevance of their own (never pass)
    unrelated_none: int = 0

    def kept(self, floor: float) -> tuple[float, float]:
        """(share of relevant hits kept, share of unrelated hits kept) at ``floor``."""
        rel = sum(r >= floor for r in self.relevant) / max(
            1, len(self.relevant) + self.relevant_none
        )
        unrel = sum(r >= floor for r in self.unrelated) / max(
            1, len(self.unrelated) + self.unrelated_none
        )
        return rel, unrel


def _parts(built: Built, query: str, served: Served) -> RecallParts:
    session = built.session
    session.index.leg_cache = LegCache()
    parts = recall_parts(
        session,
        {"agent_id": AGENT, "query": query, "top_k": TOP_K},
        defaults=served.defaults,
        canon_history=built.history,
        ranking=served.ranking({}),
    )
    session.access_counts.drain()
    return parts


def sample(layers: dict[str, tuple[Built, Any]], served: Served) -> dict[str, Samples]:
    """Per layer set, its relevant and unrelated hits' relevances."""
    out: dict[str, Samples] = {}
    for name, (built, labelled) in layers.items():
        found = out[name] = Samples()
        for question in labelled.questions:  # its own questions: the evidence is relevant
            relevant = {built.node_of[e] for e in question.evidence}
            for hit in _parts(built, question.text, served).hits:
                if hit.node_id not in relevant:
                    continue
                if hit.relevance is None:
                    found.relevant_none += 1
                else:
                    found.relevant.append(hit.relevance)
        for other, (_, other_set) in layers.items():
            if other == name:
                continue
            for question in other_set.questions:  # another set's question: nothing answers
                for hit in _parts(built, question.text, served).hits:
                    if hit.relevance is None:
                        found.unrelated_none += 1
                    else:
                        found.unrelated.append(hit.relevance)
    return out


def pick(all_samples: Samples) -> float:
    best = max(GRID, key=lambda f: (round(_j(all_samples, f), 6), -f))
    return best


def _j(samples: Samples, floor: float) -> float:
    rel, unrel = samples.kept(floor)
    return rel - unrel


def report(per_set: dict[str, Samples]) -> dict[str, Any]:
    total = Samples()
    for s in per_set.values():
        total.relevant += s.relevant
        total.unrelated += s.unrelated
        total.relevant_none += s.relevant_none
        total.unrelated_none += s.unrelated_none
    for name, s in [*per_set.items(), ("all sets", total)]:
        print(
            f"{name}: {len(s.relevant)} relevant hits (+{s.relevant_none} with no relevance), "
            f"{len(s.unrelated)} unrelated (+{s.unrelated_none} with no relevance)"
        )
    names = [*per_set, "all sets"]
    print("\nfloor  " + "  ".join(f"{n[:14]:>14} rel/unrel" for n in names) + "   J(all)")
    for floor in GRID:
        cells = []
        for name in names:
            s = total if name == "all sets" else per_set[name]
            rel, unrel = s.kept(floor)
            cells.append(f"{rel:>14.3f} / {unrel:.3f}")
        print(f"{floor:>5.3f}  " + "  ".join(cells) + f"   {_j(total, floor):.3f}")
    floor = pick(total)
    rel, unrel = total.kept(floor)
    print(
        f"\npicked floor {floor:.3f}: keeps {rel:.1%} of relevant layer hits and "
        f"{unrel:.1%} of unrelated ones (J {rel - unrel:.3f})"
    )
    return {
        "floor": floor,
        "kept_relevant": rel,
        "kept_unrelated": unrel,
        "sets": {
            n: {"relevant": len(s.relevant), "unrelated": len(s.unrelated)}
            for n, s in per_set.items()
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--sets", default=",".join(SET_NAMES), help="comma-separated")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    served = Served.from_config(served_config())
    with tempfile.TemporaryDirectory(prefix="lambo-floor-") as tmp:
        work = Path(tmp)
        model_dir = import_model(
            minilm_source_dir(work / "src"), "minilm", work / "models", pooling="mean"
        )
        layers: dict[str, tuple[Built, Any]] = {}
        for n, labelled in enumerate(load_sets(names, quality_sets.CONVERSATIONS)):
            (work / str(n)).mkdir()
            print(f"writing {labelled.name} ...", flush=True)
            layers[labelled.name] = (build(work / str(n), model_dir, labelled, served), labelled)
        out = report(sample(layers, served))
        for built, _ in layers.values():
            built.session.store.close()
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
