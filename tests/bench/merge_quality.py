"""False and missed similarity merges on labelled near pairs. Run by hand:
``python tests/bench/merge_quality.py``.

The set (``merge_pairs.json`` beside this file) holds short agent-style facts in pairs,
each labelled ``same`` (one fact reworded: a merge is right) or not (different facts that
read alike: a merge loses one), with a category in ``why``. Both sides are embedded with the
real MiniLM int8 model the tests use, and each pair is judged by the write pipeline's rule:
a merge happens when the cosine is at or above the model's merge threshold and the guard
allows it. A pair whose texts share a canonical key is one concept whatever the guard says.

It prints, per category and in total, how many pairs are above the threshold, and the false
merges (different facts merged) and missed merges (one fact kept apart) under three guards:
the guard before #15 (identifiers, digit numbers, negation words), the guard now
(``matching.merge_forbidden``), and the guard now plus the order of shared words (the
repeat rule's extra check, which merging does not use). Nothing is asserted.

Options: ``--show`` lists every pair the new guard gets wrong.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import unicodedata
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.embed.importer import import_model  # noqa: E402
from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from lambo_core.matching import facts_differ, merge_forbidden  # noqa: E402
from lambo_core.text import canonical_key  # noqa: E402
from tests.embed_fixtures import minilm_source_dir  # noqa: E402

DATA = Path(__file__).with_name("merge_pairs.json")

# The guard as it was before #15 (commit 80a2251), kept here to measure against.
_OLD_NUMBER_RE = re.compile(r"\d+(?:[.,]\d+)*")
_OLD_NEGATIONS = frozenset(
    " ".join(
        (
            "not no never none nothing neither nor without cannot can't don't doesn't didn't",
            "isn't aren't wasn't weren't won't shouldn't mustn't disable disabled disables",
        )
    ).split()
)


def _old_negations(text: str) -> set[str]:
    words = re.findall(r"[\w']+", text.casefold().replace("’", "'"))
    return {w for w in words if w in _OLD_NEGATIONS} | {"n't" for w in words if w.endswith("n't")}


def _old_is_identifier(word: str) -> bool:
    core = word.strip(".:,;")
    if not core:
        return False
    if "_" in core or "/" in core or "\\" in core:
        return True
    if re.fullmatch(r"[A-Z][A-Z0-9]+", core) or re.search(r"[a-z][A-Z]", core):
        return True
    if re.fullmatch(r"v?\d+(\.\d+)+", core):
        return True
    return bool(re.fullmatch(r"[0-9a-f]{7,40}", core) and re.search(r"\d", core))


def _old_identifiers(text: str) -> list[str]:
    words = re.findall(r"[\w./:@#-]+", unicodedata.normalize("NFC", text))
    return [w.strip(".:,;") for w in words if _old_is_identifier(w)]


def old_guard(a: str, b: str) -> str | None:
    if _old_identifiers(a) != _old_identifiers(b):
        return "identifiers differ"
    if _OLD_NUMBER_RE.findall(a) != _OLD_NUMBER_RE.findall(b):
        return "numbers differ"
    if _old_negations(a) != _old_negations(b):
        return "negations differ"
    return None


def _old_key(text: str) -> str:
    # The canonical key before #15 folded case.
    return unicodedata.normalize("NFC", canonical_key(text).casefold())


def ordered_guard(a: str, b: str) -> str | None:
    return facts_differ(a, b, word_order=True)


GUARDS: tuple[tuple[str, Callable[[str, str], str | None], Callable[[str], str]], ...] = (
    ("old guard", old_guard, _old_key),
    ("new guard", merge_forbidden, canonical_key),
    ("new + word order", ordered_guard, canonical_key),  # the repeat rule, for comparison
)


def merges(pair: dict[str, Any], cosine: float, threshold: float, guard: int) -> bool:
    _, forbidden, key = GUARDS[guard]
    if key(pair["a"]) == key(pair["b"]):
        return True  # one concept by key, before any similarity search
    return cosine >= threshold and forbidden(pair["a"], pair["b"]) is None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--show", action="store_true", help="list the new guard's errors")
    args = parser.parse_args()
    pairs = json.loads(DATA.read_text(encoding="utf-8"))["pairs"]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = import_model(
            minilm_source_dir(work / "src"), "minilm", work / "models", pooling="mean"
        )
        embedder = OnnxEmbedder(model_dir, threads=2)
        threshold = embedder.merge_threshold
        va = embedder.embed([p["a"] for p in pairs])
        vb = embedder.embed([p["b"] for p in pairs])
    cosines = [float(x @ y) for x, y in zip(va, vb, strict=True)]
    same = sum(1 for p in pairs if p["same"])
    print(f"{len(pairs)} pairs ({same} same fact, {len(pairs) - same} different facts)")
    print(f"MiniLM int8 merge threshold {threshold:.2f}\n")
    rows: dict[tuple[bool, str], list[int]] = defaultdict(list)
    for i, pair in enumerate(pairs):
        rows[(pair["same"], pair["why"])].append(i)
    names = [name for name, _, _ in GUARDS]
    header = f"{'category':<28}{'pairs':>6}{'>=thr':>7}" + "".join(f"{n:>18}" for n in names)
    for label, is_same, what in (
        ("Different facts: false merges", False, "merged"),
        ("Same fact: missed merges", True, "kept apart"),
    ):
        print(f"{label} (pairs {what})")
        print(header)
        totals = [0] * len(GUARDS)
        count = above = 0
        for (row_same, why), members in sorted(rows.items()):
            if row_same is not is_same:
                continue
            hot = sum(1 for i in members if cosines[i] >= threshold)
            wrong = []
            for g in range(len(GUARDS)):
                n = sum(1 for i in members if merges(pairs[i], cosines[i], threshold, g) != is_same)
                wrong.append(n)
                totals[g] += n
            count += len(members)
            above += hot
            cells = "".join(f"{n:>18}" for n in wrong)
            print(f"{why:<28}{len(members):>6}{hot:>7}{cells}")
        cells = "".join(f"{n:>12} ({n / count:.0%})" for n in totals)
        print(f"{'total':<28}{count:>6}{above:>7}{cells}\n")
    if args.show:
        for i, pair in enumerate(pairs):
            if merges(pair, cosines[i], threshold, 1) != pair["same"]:
                kind = "missed" if pair["same"] else "FALSE MERGE"
                print(f"{kind} [{pair['why']}] cos {cosines[i]:.3f}: {pair['a']!r} / {pair['b']!r}")


if __name__ == "__main__":
    main()
