"""lambo_recall latency at 1k, 10k and 100k concepts. Run by hand: ``python -m tests.bench.recall``.

Builds (once, cached under /tmp/lambo-bench) a SQLite session per size through
the store directly, not the write pipeline: short texts over a Zipf
vocabulary, precomputed random unit vectors, five concepts per interaction
(a DERIVES edge each, CoOccurrence between them) and a Dependency edge from
about half the concepts to an earlier one. Then it opens the session
(``SessionIndex`` rebuilt from the store, as a serve does) and times whole
``recall`` calls with the default arguments (top_k 5, traversal_depth 2,
max_tokens 500, fusion sum), each with a query no earlier call used, so
neither the leg cache nor the query-embedding cache answers:

- **excluding the query embedding**: the embedder hands back a precomputed
  random unit vector for each query text;
- **including it**: the real MiniLM int8 model embeds each query (only when
  ``--dim`` is its 384).

Beside them, in the same run and interleaved with the recalls, the numpy
bandwidth floor: one ``M @ q`` over the same matrix the vector leg reads.
Prints p50 and p95 per size and the p50 ratio to the floor; asserts nothing.
Targets: p50 <= 5 ms at 10k excluding the embedding; <= 1.3x the floor at 100k.

Every size is measured at 384 dimensions (MiniLM's, so the query can be
embedded for real) and, at 100k, also at 1024 (BGE-M3's, the default
embedder): the scan grows with the width while the keyword leg and the
ranking do not, so the ratio to the floor depends on it.

Then the merged recall of issue #17: a session layered with ``general`` (two sessions of
one store, 10k concepts each by default, ``--merged-sizes``), timed as ``recall_parts`` of
each session and ``merge_recall`` of the two, beside the session's own unlayered ``recall``,
with the same kind of fresh query alternating (medians side by side, nothing asserted;
``--merged-only`` runs just these rows).

Options: ``--dims`` (default 384,1024; widths other than 384 run only the
100k size unless ``--sizes`` says otherwise), ``--reps N`` (default 201),
``--sizes``, ``--rebuild``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lambo_core.canon.history import CanonHistory  # noqa: E402
from lambo_core.canon.rules import CanonRules  # noqa: E402
from lambo_core.embed.base import Embedder, EmbeddingContract, make_contract  # noqa: E402
from lambo_core.embed.importer import import_model  # noqa: E402
from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from lambo_core.model import (  # noqa: E402
    Concept,
    ConceptType,
    Edge,
    EdgeType,
    Interaction,
    InteractionKind,
    WriteBatch,
)
from lambo_core.recall import RecallDefaults, recall  # noqa: E402
from lambo_core.recall.merge import merge_recall  # noqa: E402
from lambo_core.recall.parts import RecallParts  # noqa: E402
from lambo_core.recall.pipeline import recall_parts  # noqa: E402
from lambo_core.scoring import (  # noqa: E402
    start_summary_warm,
    wait_for_summaries,
)
from lambo_core.session import EmbedderPlan, Session  # noqa: E402
from lambo_core.store import SqliteStore  # noqa: E402
from lambo_core.store.base import Store  # noqa: E402
from lambo_core.text import canonical_key  # noqa: E402
from tests.embed_fixtures import minilm_source_dir  # noqa: E402

SESSION = "bench"
LAYER = "general"  # the merged recall's layer: a second session of the same store
VOCAB = 20_000
WORDS_PER_DOC = 8
PER_INTERACTION = 5
BATCH = 1000
CACHE_DIR = Path("/tmp/lambo-bench")
CONTRACT = make_contract("random", "bench", 0)
T0 = 1_760_000_000.0
TYPES = list(ConceptType)


def vocabulary(rng: np.random.Generator) -> list[str]:
    """Distinct pronounceable words, most common first."""
    cons, vows = "bcdfghjklmnprstvz", "aeiou"
    words: dict[str, None] = {}
    while len(words) < VOCAB:
        n = int(rng.integers(2, 5))
        word = "".join(
            cons[int(rng.integers(len(cons)))] + vows[int(rng.integers(len(vows)))]
            for _ in range(n)
        )
        words.setdefault(word, None)
    return list(words)


def zipf(rng: np.random.Generator, count: int) -> npt.NDArray[np.int64]:
    weights = 1.0 / np.arange(1, VOCAB + 1) ** 1.1
    return rng.choice(VOCAB, size=count, p=weights / weights.sum())


def uuid_from(rng: np.random.Generator) -> str:
    h = rng.bytes(16).hex()
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-a{h[17:20]}-{h[20:32]}"


def _edge(inter: Interaction, src: str, dst: str, kind: EdgeType, weight: float = 1.0) -> Edge:
    t = inter.created_at
    return Edge(inter.session, src, dst, kind, weight, inter.id, "bench", t, t)


def build(
    path: Path,
    n: int,
    dim: int,
    *,
    embedder: Embedder | None = None,
    text_of: Callable[[int], str] | None = None,
    sessions: Sequence[str] = (SESSION,),
) -> None:
    """Write the session. With ``embedder`` its vectors are the model's (and the session is
    stamped with its contract, so a serve configured with that model opens it); with
    ``text_of`` concept ``i`` reads ``text_of(i)`` instead of Zipf words (tests/bench/http.py
    uses both). Without them the draws are the same as ever, so cached stores keep.
    ``sessions``: each gets ``n`` concepts of its own, the later ones drawn after the first."""
    rng = np.random.default_rng(20240611)
    words = vocabulary(rng)
    tmp = path.with_suffix(".building")
    for leftover in tmp.parent.glob(tmp.name + "*"):
        leftover.unlink()
    store = SqliteStore(tmp)
    for name in sessions:
        _build_session(store, name, n, dim, rng, words, embedder=embedder, text_of=text_of)
    store.close()
    for suffix in ("-wal", "-shm"):
        leftover = Path(str(tmp) + suffix)
        if leftover.exists():
            leftover.unlink()
    tmp.rename(path)


def _build_session(
    store: SqliteStore,
    session: str,
    n: int,
    dim: int,
    rng: np.random.Generator,
    words: list[str],
    *,
    embedder: Embedder | None,
    text_of: Callable[[int], str] | None,
) -> None:
    store.ensure_session(session, T0)
    contract = embedder.contract if embedder is not None else make_contract("random", "bench", dim)
    store.stamp_contract(session, dict(contract))
    ids: list[str] = []
    t0 = time.perf_counter()
    for start in range(0, n, BATCH):
        count = min(BATCH, n - start)
        if embedder is None:
            vecs = rng.standard_normal((count, dim), dtype=np.float32)
            vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
        ranks = zipf(rng, count * WORDS_PER_DOC).reshape(count, WORDS_PER_DOC)
        texts = [
            text_of(start + i)
            if text_of is not None
            else " ".join(words[r] for r in ranks[i]) + f" item{start + i}"
            for i in range(count)
        ]
        if embedder is not None:
            vecs = embedder.embed(texts)
        for first in range(0, count, PER_INTERACTION):  # one interaction: one batch
            now = T0 + start + first
            inter = Interaction(
                uuid_from(rng), session, "bench", InteractionKind.DERIVE, now, now, "bench"
            )
            concepts: list[Concept] = []
            edges: list[Edge] = []
            for i in range(first, min(first + PER_INTERACTION, count)):
                text = texts[i]
                node = uuid_from(rng)
                concepts.append(
                    Concept(
                        id=node,
                        session=session,
                        content=text,
                        canonical_key=canonical_key(text),
                        concept_type=TYPES[int(rng.integers(len(TYPES)))],
                        created_at=now,
                        about_time=now,
                        agent_id="bench",
                        interaction_id=inter.id,
                        vector=vecs[i],
                    )
                )
                edges.append(_edge(inter, inter.id, node, EdgeType.DERIVES))
                edges.extend(
                    _edge(inter, c.id, node, EdgeType.COOCCURRENCE, 0.5) for c in concepts[:-1]
                )
                if ids and rng.random() < 0.5:  # depends on an earlier concept: acyclic
                    dst = ids[int(rng.integers(len(ids)))]
                    edges.append(_edge(inter, node, dst, EdgeType.DEPENDENCY))
                ids.append(node)
            store.apply(WriteBatch(session, interaction=inter, concepts=concepts, edges=edges))
        if (start // BATCH) % 20 == 0:
            print(f"  built {start + count:>7} / {n}  ({time.perf_counter() - t0:.1f} s)")
    print(f"  built {n} concepts of {session} in {time.perf_counter() - t0:.1f} s")


class SwitchEmbedder:
    """Hands out precomputed query vectors, or the real model's when ``real`` is set."""

    def __init__(self, dim: int, model: OnnxEmbedder | None) -> None:
        self._dim = dim
        self.model = model
        self.real = False
        self.prepared: dict[str, npt.NDArray[np.float32]] = {}

    @property
    def contract(self) -> EmbeddingContract:
        return make_contract("random", "bench", self._dim)

    @property
    def modalities(self) -> list[str]:
        return ["text"]

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def merge_threshold(self) -> float:
        return 0.99

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return np.stack([self.embed_query(t) for t in texts])

    def embed_query(self, text: str) -> npt.NDArray[np.float32]:
        if self.real:
            assert self.model is not None
            vector: npt.NDArray[np.float32] = self.model.embed([text])[0]  # uncached, every call
            return vector
        return self.prepared[text]


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1e3


def open_as_serve(store: Store, embedder: SwitchEmbedder) -> tuple[Session, float]:
    """The bench session opened as a serve opens it (``Session.open``, which runs
    ``SessionIndex.open``), and the seconds that took."""
    t0 = time.perf_counter()
    session = Session.open(store, SESSION, EmbedderPlan.ready(embedder))
    assert session.plan.lazy is not None and session.plan.lazy.wait(10)
    return session, time.perf_counter() - t0


def warm_summaries(session: Session) -> None:
    """The steady state: a serve that holds the session summarises its concepts' edges in
    the background (about 1.5 s at 100k)."""
    start_summary_warm(session.index)
    assert wait_for_summaries(session.index, 600)


def serve_history(session: Session) -> CanonHistory:
    """One demotion history for the session, as a serve holds it (a recall without one
    would read the stored canonization events on every call)."""
    return CanonHistory(session, CanonRules())


def timed_recall(
    session: Session,
    embedder: SwitchEmbedder,
    history: CanonHistory,
    text: str,
    vector: npt.NDArray[np.float32],
) -> tuple[float, int]:
    """One whole ``recall`` with the default arguments, excluding the query embedding (the
    embedder hands back ``vector`` for ``text``, which no earlier call may have used, so
    no cache answers): (seconds, hits)."""
    embedder.prepared[text] = vector
    embedder.real = False
    t = time.perf_counter()
    result = recall(
        session, {"agent_id": "b", "query": text}, defaults=RecallDefaults(), canon_history=history
    )
    return time.perf_counter() - t, len(result.hits)


def measure(path: Path, n: int, dim: int, reps: int, model: OnnxEmbedder | None) -> dict[str, Any]:
    rng = np.random.default_rng(n)
    words = vocabulary(np.random.default_rng(20240611))
    embedder = SwitchEmbedder(dim, model)
    store = SqliteStore(path)
    session, open_s = open_as_serve(store, embedder)
    warm_summaries(session)
    assert session.index.vectors is not None
    matrix = session.index.vectors.in_ram()  # the SQLite store's own matrix (no copy)
    assert len(matrix) == n
    defaults = RecallDefaults()

    def query_text(i: int, tag: str) -> str:
        terms = [words[int(r)] for r in rng.integers(50, 5000, size=3)]
        return " ".join(terms) + f" {tag}{i}"  # a fresh text each call: no cache answers

    def prepare(text: str) -> None:
        q = rng.standard_normal(dim).astype(np.float32)
        embedder.prepared[text] = q / np.linalg.norm(q)

    history = serve_history(session)
    for i in range(5):  # warm: BLAS threads, FTS pages, the session-wide degree table
        text = query_text(i, "warm")
        prepare(text)
        recall(session, {"agent_id": "b", "query": text}, defaults=defaults, canon_history=history)
    floor: list[float] = []
    excl: list[float] = []
    incl: list[float] = []
    hits: list[int] = []
    mat = matrix.rows()
    for i in range(reps):
        q = rng.standard_normal(dim).astype(np.float32)
        q /= np.linalg.norm(q)
        t = time.perf_counter()
        mat @ q
        floor.append(time.perf_counter() - t)
        text = query_text(i, "x")
        prepare(text)
        took, found = timed_recall(session, embedder, history, text, embedder.prepared[text])
        excl.append(took)
        hits.append(found)
        if model is not None:
            text = query_text(i, "y")
            embedder.real = True
            t = time.perf_counter()
            recall(
                session, {"agent_id": "b", "query": text}, defaults=defaults, canon_history=history
            )
            incl.append(time.perf_counter() - t)
            embedder.real = False
        session.access_counts.drain()
    store.close()
    out: dict[str, Any] = {
        "n": n,
        "open_s": open_s,
        "edges": session.index.graph.edge_count,
        "floor": (percentile(floor, 0.5), percentile(floor, 0.95)),
        "excl": (percentile(excl, 0.5), percentile(excl, 0.95)),
        "hits": statistics.mean(hits),
    }
    if incl:
        out["incl"] = (percentile(incl, 0.5), percentile(incl, 0.95))
    return out


def measure_merged(path: Path, n: int, dim: int, reps: int) -> dict[str, Any]:
    """The session alone beside the session merged with its layer (``n`` concepts each, two
    sessions of one store, in one process): the same fresh query, one call of each in turn;
    the merged one is ``recall_parts`` of each session, the layer's parts through JSON text
    (as a layer held by another serve answers them) and ``merge_recall`` of the two. Random
    vectors match nothing, so few layer hits pass the measured floor; the floor-0 row admits
    every layer hit with a relevance, to time a merge that renders layer blocks too."""
    rng = np.random.default_rng(n + 1)
    words = vocabulary(np.random.default_rng(20240611))
    embedder = SwitchEmbedder(dim, None)
    store = SqliteStore(path)
    sessions = [
        Session.open(store, name, EmbedderPlan.ready(embedder)) for name in (SESSION, LAYER)
    ]
    for session in sessions:
        assert session.plan.lazy is not None and session.plan.lazy.wait(10)
        start_summary_warm(session.index)
        assert wait_for_summaries(session.index, 60)
    own, layer = sessions
    histories = [CanonHistory(session, CanonRules()) for session in sessions]
    defaults = RecallDefaults()
    floors = {LAYER: defaults.layer_relevance_floor}

    def query(tag: str, i: int) -> dict[str, Any]:
        terms = [words[int(r)] for r in rng.integers(50, 5000, size=3)]
        text = " ".join(terms) + f" {tag}{i}"
        q = rng.standard_normal(dim).astype(np.float32)
        embedder.prepared[text] = q / np.linalg.norm(q)
        return {"agent_id": "b", "query": text}

    def merged(args: dict[str, Any], floors: dict[str, float] = floors) -> Any:
        got = [
            recall_parts(s, args, defaults=defaults, canon_history=h)
            for s, h in zip(sessions, histories, strict=True)
        ]
        layer_parts = RecallParts.from_json(json.loads(json.dumps(got[1].to_json())))
        return merge_recall(
            SESSION, got[0], [(LAYER, layer_parts)], top_k=5, max_tokens=500, floors=floors
        )

    for i in range(5):  # warm both sessions
        merged(query("warm", i))
    plain: list[float] = []
    both: list[float] = []
    open_floor: list[float] = []
    layer_hits: list[int] = []
    open_hits: list[int] = []
    for i in range(reps):
        args = query("p", i)
        t = time.perf_counter()
        recall(own, args, defaults=defaults, canon_history=histories[0])
        plain.append(time.perf_counter() - t)
        args = query("m", i)
        t = time.perf_counter()
        result = merged(args)
        both.append(time.perf_counter() - t)
        layer_hits.append(sum(hit["session"] == LAYER for hit in result.hits))
        args = query("z", i)
        t = time.perf_counter()
        result = merged(args, {LAYER: 0.0})
        open_floor.append(time.perf_counter() - t)
        open_hits.append(sum(hit["session"] == LAYER for hit in result.hits))
        for session in sessions:
            session.access_counts.drain()
    store.close()
    return {
        "n": n,
        "plain": (percentile(plain, 0.5), percentile(plain, 0.95)),
        "merged": (percentile(both, 0.5), percentile(both, 0.95)),
        "layer_hits": statistics.mean(layer_hits),
        "open": (percentile(open_floor, 0.5), percentile(open_floor, 0.95)),
        "open_hits": statistics.mean(open_hits),
        "layer": len(layer.index.graph),
    }


def print_merged(rows: list[dict[str, Any]], reps: int) -> None:
    print()
    print(
        f"merged recall (session + layer {LAYER!r}, two sessions of one store, in process) "
        f"beside the session alone; 384 dims, excluding the query embedding; {reps} calls each"
    )
    print(
        f"{'concepts':>9}{'layer':>8}{'alone p50':>11}{'merged p50':>12}{'alone p95':>11}"
        f"{'merged p95':>12}{'ratio':>7}{'layer hits':>12}"
    )
    print("-" * 82)
    for r in rows:
        print(
            f"{r['n']:>9}{r['layer']:>8}{r['plain'][0]:>11.2f}{r['merged'][0]:>12.2f}"
            f"{r['plain'][1]:>11.2f}{r['merged'][1]:>12.2f}"
            f"{r['merged'][0] / r['plain'][0]:>6.2f}x{r['layer_hits']:>12.2f}"
        )
        print(
            f"{'floor 0':>17}{'':>11}{r['open'][0]:>12.2f}{'':>11}{r['open'][1]:>12.2f}"
            f"{r['open'][0] / r['plain'][0]:>6.2f}x{r['open_hits']:>12.2f}"
        )
    print("times in ms; layer hits = mean hits from the layer per merged result")


def load_model(dim: int) -> OnnxEmbedder | None:
    if dim != 384:
        return None
    workdir = Path(tempfile.mkdtemp(prefix="lambo-bench-minilm-"))
    model_dir = import_model(
        minilm_source_dir(workdir / "src"), "minilm", workdir / "models", pooling="mean"
    )
    return OnnxEmbedder(model_dir, threads=0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dims", default="384,1024")
    parser.add_argument("--reps", type=int, default=201)
    parser.add_argument("--sizes", default=None)
    parser.add_argument("--rebuild", action="store_true")
    parser.add_argument(
        "--merged-sizes", default="10000", help="concepts per session of the merged rows"
    )
    parser.add_argument("--merged-only", action="store_true", help="only the merged rows")
    args = parser.parse_args()
    merged_sizes = [int(n) for n in args.merged_sizes.split(",") if n.strip()]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    merged_rows = []
    for n in merged_sizes:
        path = CACHE_DIR / f"recall-layered-{n}-384.db"
        if args.rebuild and path.exists():
            path.unlink()
        if not path.exists():
            print(f"building {path} ...")
            build(path, n, 384, sessions=(SESSION, LAYER))
        merged_rows.append(measure_merged(path, n, 384, args.reps))
    if args.merged_only:
        print_merged(merged_rows, args.reps)
        return
    plan: list[tuple[int, int]] = []  # (dim, n)
    for dim in (int(d) for d in args.dims.split(",")):
        default = "1000,10000,100000" if dim == 384 else "100000"
        plan += [(dim, int(n)) for n in (args.sizes or default).split(",")]
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    for dim, n in plan:
        path = CACHE_DIR / f"recall-{n}-{dim}.db"
        if args.rebuild and path.exists():
            path.unlink()
        if not path.exists():
            print(f"building {path} ...")
            build(path, n, dim)
    models = {dim: load_model(dim) for dim in {d for d, _ in plan}}
    rows = [
        measure(CACHE_DIR / f"recall-{n}-{dim}.db", n, dim, args.reps, models[dim])
        for dim, n in plan
    ]
    for r, (dim, _) in zip(rows, plan, strict=True):
        r["dim"] = dim
    print()
    print(
        "lambo recall latency: SQLite/FTS5, top_k 5, traversal_depth 2, "
        f"max_tokens 500, fusion sum; {args.reps} calls per size"
    )
    threads = os.environ.get("OPENBLAS_NUM_THREADS", "default")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"cpus {os.cpu_count()}, OPENBLAS_NUM_THREADS={threads}, numpy {np.__version__}, "
        f"load average at the end {load} (a shared machine skews every column)"
    )
    print()
    print(
        f"{'dim':>5}{'concepts':>9}{'edges':>9}{'floor p50':>11}{'excl p50':>10}{'excl p95':>10}"
        f"{'x floor':>9}{'incl p50':>10}{'incl p95':>10}  target"
    )
    print("-" * 95)
    for r in rows:
        incl = r.get("incl")
        incl_cells = f"{incl[0]:>10.2f}{incl[1]:>10.2f}" if incl else f"{'n/a':>10}{'n/a':>10}"
        target = {10_000: "excl p50 <= 5 ms", 100_000: "<= 1.3x floor"}.get(r["n"], "")
        print(
            f"{r['dim']:>5}{r['n']:>9}{r['edges']:>9}{r['floor'][0]:>11.2f}{r['excl'][0]:>10.2f}"
            f"{r['excl'][1]:>10.2f}{r['excl'][0] / r['floor'][0]:>8.2f}x{incl_cells}  {target}"
        )
    print()
    print("times in ms; floor = one numpy M @ q over the session's matrix, same run")
    print_merged(merged_rows, args.reps)


if __name__ == "__main__":
    main()
