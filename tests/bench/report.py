"""One benchmark report: runs the benches and prints one table. Run by hand:

    /work/venv/bin/python tests/bench/report.py [--quick] [--markdown]

Each bench runs in its own process, one after another, so none is measured beside
another's threads, heap or page cache churn:

- ``store.py``: its ``--measure`` child on the cached 100k x 1024-d store (built first
  when missing): ``SessionIndex.open`` time, vector top-10 p50 against the numpy floor;
- ``writes.py`` (its ``Bench``, imported): in-process ack p50/p99 with the worker busy
  and idle, apply throughput at 1 and 16 concepts per call;
- ``stdio_ack.py --json``: the stdio round trip of a derive ack, back to back and idle;
- ``clients.py --json``: one hub and two forwarders (ack through the hop, applied
  writes/s with three clients at once, peak RSS of each process);
- ``recall.py`` (its ``build`` and ``measure``, imported): recall p50 at 1k, 10k and
  100k concepts excluding and including the query embedding, and the floor at 100k;
- ``startup.py --json``: spawn -> answered ``tools/list`` through the installed command
  and the .pyz (built first when stale);
- ``recall_quality.py`` (its ``measure``, imported): R@5 and MRR@10 of each leg alone,
  their RRF and lambo's default on the labelled sets, and the identifier set's R@1.

Every bench sets up what it needs itself (the MiniLM int8 from the test extra, a
LAMBO_HOME under /tmp, the cached synthetic stores under /tmp/lambo-bench). The full
run takes 10-20 minutes on two cores; ``--quick`` runs small sizes and few repeats as a
smoke (its numbers are not the report's). ``--markdown`` prints the table as Markdown
(as in the README). It prints the machine it ran on and the command to reproduce it,
and exits 1 if a bench failed (its rows say so); targets missed are reported, not
asserted.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
BENCH = Path(__file__).resolve().parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

Result = dict[str, Any]


# -- sizes -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Sizes:
    store_concepts: int
    store_dim: int
    store_reps: int
    writes_repeats: int
    writes_calls: int
    stdio_calls: int
    clients_calls: int
    clients_solo: int
    recall_sizes: tuple[int, ...]
    recall_reps: int
    startup_runs: int


FULL = Sizes(100_000, 1024, 101, 5, 200, 1000, 1000, 300, (1_000, 10_000, 100_000), 201, 7)
QUICK = Sizes(10_000, 1024, 21, 1, 40, 100, 60, 20, (1_000, 10_000), 21, 1)
RECALL_DIM = 384  # MiniLM's, so the "including the embedding" column is measured
WIDE_DIM = 1024  # BGE-M3's, the default embedder: the 100k ratio is also taken at its width


# -- parts run in this file's own child process (imported bench functions) ----------------
def part_writes(sizes: Sizes) -> Result:
    """writes.py's measurements: acks with the worker busy and idle, then throughput."""
    import statistics

    from lambo_core.embed.importer import import_model
    from lambo_core.embed.onnx import OnnxEmbedder
    from tests.bench import writes
    from tests.embed_fixtures import minilm_source_dir

    with tempfile.TemporaryDirectory(prefix="lambo-report-writes-") as tmp:
        root = Path(tmp)
        model_dir = import_model(minilm_source_dir(root / "src"), "minilm", root / "models", "mean")
        embedder = OnnxEmbedder(model_dir, threads=1)
        embedder.embed(["warm up"])
        bench = writes.Bench(embedder, root)
        busy = writes.repeat(bench.worker_busy, sizes.writes_repeats)
        idle = writes.repeat(bench.worker_idle, sizes.writes_repeats)
        rates = {}
        for per_call in (1, 16):
            calls = sizes.writes_calls if per_call == 1 else max(1, sizes.writes_calls // 8)
            runs = [bench.throughput(calls, per_call) for _ in range(sizes.writes_repeats)]
            rates[str(per_call)] = {
                "calls": calls,
                "writes_per_s": statistics.median(r[0] for r in runs),
                "concepts_per_s": statistics.median(r[1] for r in runs),
            }
    return {
        "busy": {"p50_ms": busy[0], "p99_ms": busy[1]},
        "idle": {"p50_ms": idle[0], "p99_ms": idle[1]},
        "throughput": rates,
        "repeats": sizes.writes_repeats,
    }


def part_recall(sizes: Sizes) -> Result:
    """recall.py's measurements at each size, with the real MiniLM for the query."""
    from lambo_core.embed.importer import import_model
    from lambo_core.embed.onnx import OnnxEmbedder
    from tests.bench import recall as bench
    from tests.embed_fixtures import minilm_source_dir

    bench.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    paths = {n: bench.CACHE_DIR / f"recall-{n}-{RECALL_DIM}.db" for n in sizes.recall_sizes}
    for n, path in paths.items():
        if not path.exists():
            print(f"building {path} ...")
            bench.build(path, n, RECALL_DIM)
    with tempfile.TemporaryDirectory(prefix="lambo-report-minilm-") as tmp:
        # as recall.load_model, in a directory that is removed afterwards
        model_dir = import_model(
            minilm_source_dir(Path(tmp) / "src"), "minilm", Path(tmp) / "models", pooling="mean"
        )
        model = OnnxEmbedder(model_dir, threads=0)
        rows = [bench.measure(p, n, RECALL_DIM, sizes.recall_reps, model) for n, p in paths.items()]
    wide = None
    if 100_000 in sizes.recall_sizes:
        path = bench.CACHE_DIR / f"recall-100000-{WIDE_DIM}.db"
        if not path.exists():
            print(f"building {path} ...")
            bench.build(path, 100_000, WIDE_DIM)
        wide = bench.measure(path, 100_000, WIDE_DIM, sizes.recall_reps, None)
    return {"rows": rows, "reps": sizes.recall_reps, "dim": RECALL_DIM, "wide": wide}


def part_quality(sizes: Sizes) -> Result:
    """recall_quality.py's numbers per labelled set (the quick run: the agent facts only)."""
    from tests.bench import recall_quality as bench

    names = ("agent-facts",) if sizes == QUICK else bench.SET_NAMES
    return bench.measure(names)


PARTS: dict[str, Callable[[Sizes], Result]] = {
    "writes": part_writes,
    "recall": part_recall,
    "quality": part_quality,
}


# -- running the benches -----------------------------------------------------------------
def log(message: str) -> None:
    print(f"[report] {message}", file=sys.stderr, flush=True)


def run_json(argv: list[str], timeout: float = 3600.0) -> Result:
    """Run ``argv``; its stdout's last line is one JSON object, the rest goes to stderr."""
    proc = subprocess.run(
        argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=None, text=True, timeout=timeout
    )
    lines = proc.stdout.strip().splitlines()
    for line in lines[:-1]:
        print(f"  {line}", file=sys.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"exit status {proc.returncode}: {shlex.join(argv)}")
    if not lines:
        raise RuntimeError(f"no output: {shlex.join(argv)}")
    return dict(json.loads(lines[-1]))


def store_bench(sizes: Sizes) -> Result:
    """store.py's fresh-process ``--measure`` child on its cached store (built if missing)."""
    from tests.bench import store

    store.CACHE_DIR.mkdir(parents=True, exist_ok=True)
    path = store.CACHE_DIR / f"store-{sizes.store_concepts}-{sizes.store_dim}.db"
    if not path.exists():
        with contextlib.redirect_stdout(sys.stderr):
            store.build(path, sizes.store_concepts, sizes.store_dim)
    out = run_json(
        [
            sys.executable,
            str(BENCH / "store.py"),
            "--measure",
            str(path),
            "--reps",
            str(sizes.store_reps),
        ]
    )
    out["dim"] = sizes.store_dim
    return out


def run_all(sizes: Sizes, quick: bool) -> tuple[dict[str, Result], dict[str, str]]:
    py = sys.executable
    own = [py, str(Path(__file__).resolve())] + (["--quick"] if quick else [])
    steps: list[tuple[str, Callable[[], Result]]] = [
        ("store", lambda: store_bench(sizes)),
        ("writes", lambda: run_json([*own, "--part", "writes"])),
        (
            "stdio",
            lambda: run_json(
                [py, str(BENCH / "stdio_ack.py"), "--json", "--calls", str(sizes.stdio_calls)]
            ),
        ),
        (
            "clients",
            lambda: run_json(
                [
                    py,
                    str(BENCH / "clients.py"),
                    "--json",
                    "--calls",
                    str(sizes.clients_calls),
                    "--solo",
                    str(sizes.clients_solo),
                ]
            ),
        ),
        ("recall", lambda: run_json([*own, "--part", "recall"])),
        (
            "startup",
            lambda: run_json(
                [py, str(BENCH / "startup.py"), "--json", "--runs", str(sizes.startup_runs)]
            ),
        ),
        ("quality", lambda: run_json([*own, "--part", "quality"])),
    ]
    results: dict[str, Result] = {}
    errors: dict[str, str] = {}
    for name, step in steps:
        log(f"{name} ...")
        began = time.perf_counter()
        try:
            results[name] = step()
        except Exception as exc:  # reported in the table; the other benches still run
            errors[name] = f"{type(exc).__name__}: {exc}"
            log(f"{name} FAILED: {errors[name]}")
        else:
            log(f"{name} done in {time.perf_counter() - began:.0f} s")
    return results, errors


# -- the table ---------------------------------------------------------------------------
@dataclass
class Row:
    group: str
    measure: str
    value: str
    target: str = ""
    met: bool | None = None


def kilo(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)


def p50_p99(cell: Result) -> str:
    return f"{cell['p50_ms']:.3f} / {cell['p99_ms']:.3f} ms"


class RowBuilder:
    """The report's rows, group by group; a bench that failed gets one row saying so."""

    def __init__(self, results: dict[str, Result], errors: dict[str, str]) -> None:
        self.results = results
        self.errors = errors
        self.rows: list[Row] = []

    def failed(self, name: str, group: str, what: str) -> bool:
        if name in self.errors:
            self.rows.append(Row(group, what, f"failed ({name}: {self.errors[name][:80]})"))
            return True
        return False

    def ack_latency(self) -> None:
        """The rows of ack latency."""
        results = self.results
        group = "ack latency, p50 / p99"
        if not self.failed("writes", group, "in-process (WritePipeline.submit)"):
            w = results["writes"]
            busy, idle = w["busy"], w["idle"]
            self.rows.append(
                Row(
                    group,
                    "in-process, worker busy (16 agents, back to back)",
                    p50_p99(busy),
                    "p50 <= 0.3 ms",
                    busy["p50_ms"] <= 0.3,
                )
            )
            self.rows.append(
                Row(
                    group,
                    "in-process, worker idle (wait per write)",
                    p50_p99(idle),
                    "p50 <= 0.3 ms",
                    idle["p50_ms"] <= 0.3,
                )
            )
        if not self.failed("stdio", group, "stdio round trip"):
            s = results["stdio"]["rows"]
            for key, what in (
                ("derive_busy", "stdio, back to back (worker busy)"),
                ("derive_idle", "stdio, worker idle"),
            ):
                self.rows.append(
                    Row(group, what, p50_p99(s[key]), "p50 <= 2 ms", s[key]["p50_ms"] <= 2.0)
                )
        if not self.failed("clients", group, "stdio through a forwarder"):
            c = results["clients"]
            hub = c["serves"]["hub"]["one_by_one"]
            fwd = c["forwarders_one_by_one"]
            self.rows.append(Row(group, "stdio, one at a time, hub", p50_p99(hub)))
            self.rows.append(
                Row(
                    group,
                    "stdio, one at a time, through a forwarder",
                    f"{p50_p99(fwd)} (hop +{c['hop_ms']:.3f} ms)",
                )
            )

    def recall_latency(self) -> None:
        """The rows of recall latency."""
        results = self.results
        group = "recall latency, p50"
        if not self.failed("recall", group, "lambo_recall"):
            by_n = {r["n"]: r for r in results["recall"]["rows"]}
            for n in (1_000, 10_000, 100_000):
                what = f"{kilo(n)} concepts, excl. / incl. query embedding"
                r = by_n.get(n)
                if r is None:
                    self.rows.append(Row(group, what, "skipped (--quick)"))
                    continue
                incl = f"{r['incl'][0]:.2f} ms" if "incl" in r else "n/a"
                value = f"{r['excl'][0]:.2f} ms / {incl}"
                if n == 10_000:
                    self.rows.append(Row(group, what, value, "excl. <= 5 ms", r["excl"][0] <= 5.0))
                else:
                    self.rows.append(Row(group, what, value))
            for r, dim in (
                (by_n.get(100_000), RECALL_DIM),
                (results["recall"].get("wide"), WIDE_DIM),
            ):
                if r is None:
                    continue
                ratio = r["excl"][0] / r["floor"][0]
                self.rows.append(
                    Row(
                        group,
                        f"100k at {dim}-d, excl. embedding / numpy floor (M @ q)",
                        f"{ratio:.2f}x ({r['excl'][0]:.2f} / {r['floor'][0]:.2f} ms)",
                        "<= 1.3x floor",
                        ratio <= 1.3,
                    )
                )

    def write_throughput(self) -> None:
        """The rows of write throughput."""
        results = self.results
        group = "write throughput (MiniLM int8)"
        if not self.failed("writes", group, "apply throughput"):
            for per_call, t in results["writes"]["throughput"].items():
                noun = "concept" if per_call == "1" else "concepts"
                self.rows.append(
                    Row(
                        group,
                        f"{per_call} {noun} per call, in-process, 1 thread",
                        f"{t['writes_per_s']:.1f} writes/s ({t['concepts_per_s']:.0f} concepts/s)",
                    )
                )
        if "clients" in results:
            c = results["clients"]
            self.rows.append(
                Row(
                    group,
                    "1 concept per call, hub + 2 forwarders at once (applied)",
                    f"{c['applied_per_s']:.1f} writes/s",
                )
            )

    def startup(self) -> None:
        """The rows of startup."""
        results = self.results
        group = "startup, spawn -> tools/list"
        if not self.failed("startup", group, "startup"):
            s = results["startup"]
            n = s["installed"]["runs"]
            for key, what, target in (
                ("installed", f"installed `lambo`, later runs (median of {n})", 1.5),
                ("pyz_later", f".pyz, later runs (median of {n})", 1.5),
                ("pyz_first", f".pyz, first run, empty unpack cache (median of {n})", None),
            ):
                median = s[key]["median_s"]
                if target is None:
                    self.rows.append(Row(group, what, f"{median:.2f} s"))
                else:
                    self.rows.append(
                        Row(group, what, f"{median:.2f} s", "<= 1.5 s", median <= target)
                    )

    def store(self) -> None:
        """The rows of store."""
        results = self.results
        group = "store (SQLite, random vectors)"
        if not self.failed("store", group, "SessionIndex.open"):
            s = results["store"]
            n = s["concepts"]
            full = n >= 100_000
            self.rows.append(
                Row(
                    group,
                    f"open {kilo(n)} concepts x {s['dim']}-d (SessionIndex.open)",
                    f"{s['open_s']:.2f} s",
                    "<= 3 s" if full else "",
                    s["open_s"] <= 3.0 if full else None,
                )
            )
            v = s["vectors"][str(n)]
            ratio = v["topk_ms"] / v["floor_ms"]
            self.rows.append(
                Row(
                    group,
                    f"vector top-10 at {kilo(n)}, p50 / numpy floor",
                    f"{ratio:.2f}x ({v['topk_ms']:.2f} vs {v['floor_ms']:.2f} ms)",
                    "<= 1.3x floor" if full else "",
                    ratio <= 1.3 if full else None,
                )
            )

    def rss(self) -> None:
        """The rows of RSS per process."""
        results = self.results
        group = "peak RSS per process"
        if not self.failed("clients", group, "hub + 2 forwarders"):
            for name, serve in results["clients"]["serves"].items():
                role = " (holds the session, loads the model)" if name == "hub" else ""
                self.rows.append(
                    Row(group, f"{name}{role}", f"{serve['peak_rss_kib'] / 1024:.0f} MiB")
                )

    def recall_quality(self) -> None:
        """The rows of recall quality: per set, each leg alone, their RRF and lambo's default."""
        group = "recall quality, R@5 / MRR@10"
        if self.failed("quality", group, "labelled sets"):
            return
        for name, numbers in self.results["quality"]["sets"].items():
            rows, beats = numbers["rows"], numbers["verdict"]["all"]["beats"]
            for ranking in ("keyword alone", "vector alone", "RRF k=60 (outside)"):
                q = rows[ranking]
                self.rows.append(
                    Row(group, f"{name}: {ranking}", f"{q['r5']:.3f} / {q['mrr10']:.3f}")
                )
            q = rows["lambo default"]
            self.rows.append(
                Row(
                    group,
                    f"{name}: lambo default",
                    f"{q['r5']:.3f} / {q['mrr10']:.3f}",
                    "beats RRF and each leg",
                    beats,
                )
            )
            if "identifier_r1" in numbers:
                r1 = numbers["identifier_r1"]
                self.rows.append(
                    Row(group, f"{name}: lambo default R@1", f"{r1:.3f}", ">= 0.99", r1 >= 0.99)
                )


def build_rows(results: dict[str, Result], errors: dict[str, str], sizes: Sizes) -> list[Row]:
    builder = RowBuilder(results, errors)
    for group in (
        builder.ack_latency,
        builder.recall_latency,
        builder.write_throughput,
        builder.startup,
        builder.store,
        builder.rss,
        builder.recall_quality,
    ):
        group()
    return builder.rows


def met_cell(row: Row) -> str:
    return {True: "yes", False: "NO", None: ""}[row.met]


def render(rows: list[Row], markdown: bool) -> str:
    head = ("bench", "measure", "value", "target", "met")
    cells = []
    last = None
    for r in rows:
        group = r.group if r.group != last else ""
        last = r.group
        cells.append((group, r.measure, r.value, r.target, met_cell(r)))
    if markdown:

        def esc(text: str) -> str:
            return text.replace("|", "\\|")

        lines = ["| " + " | ".join(head) + " |", "|:--|:--|--:|:--|:--|"]
        lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in cells]
        return "\n".join(lines)
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(len(head))]
    align = ["<", "<", ">", "<", "<"]

    def line(row: tuple[str, ...]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(row, align, widths, strict=True))

    out = [line(head), "  ".join("-" * w for w in widths)]
    out += [line(row) for row in cells]
    return "\n".join(line.rstrip() for line in out)


# -- the machine -------------------------------------------------------------------------
def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def ram_gib() -> float:
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 1024**2
    return float("nan")


def commit() -> str:
    """HEAD's short hash, and whether tracked files differ from it (the run measures those)."""

    def git(*argv: str) -> str:
        out = subprocess.run(["git", *argv], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git("status", "--porcelain", "--untracked-files=no")
    return f"{head} with uncommitted changes" if dirty else head


def machine_line(load_before: tuple[float, ...], load_after: tuple[float, ...]) -> str:
    def load(values: tuple[float, ...]) -> str:
        return " ".join(f"{x:.2f}" for x in values)

    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {ram_gib():.0f} GiB RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        f"load average (1/5/15 min) {load(load_before)} before, {load(load_after)} after"
    )


def reproduce_command(args: argparse.Namespace) -> str:
    flags = (["--quick"] if args.quick else []) + (["--markdown"] if args.markdown else [])
    return shlex.join(["python", "tests/bench/report.py", *flags])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats (a smoke)")
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--part", choices=sorted(PARTS), help=argparse.SUPPRESS)  # child entry
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL

    if args.part is not None:  # one bench in this fresh process; its prints go to stderr
        with contextlib.redirect_stdout(sys.stderr):
            result = PARTS[args.part](sizes)
        print(json.dumps(result))
        return 0

    load_before = os.getloadavg()
    began = time.perf_counter()
    started_at = datetime.datetime.now().astimezone()
    measured = commit()
    results, errors = run_all(sizes, args.quick)
    elapsed = time.perf_counter() - began
    load_after = os.getloadavg()

    rows = build_rows(results, errors, sizes)
    kind = "--quick smoke (not the report's sizes)" if args.quick else "full run"
    print(
        f"lambo benchmark report, {kind}: commit {measured}, "
        f"{started_at:%Y-%m-%d %H:%M %Z}, {elapsed / 60:.0f} min"
    )
    print()
    print(render(rows, args.markdown))
    print()
    print(f"Machine: {machine_line(load_before, load_after)}")
    print(f"Reproduce: {reproduce_command(args)}")
    print()
    print(notes(results, sizes))
    missed = [f"{r.measure}" for r in rows if r.met is False]
    if missed:
        print(f"Targets missed: {'; '.join(missed)}.")
    return 1 if errors else 0


def notes(results: dict[str, Result], sizes: Sizes) -> str:
    parts = [
        f"In-process acks: median over {sizes.writes_repeats} repeat(s) of each repeat's "
        "p50/p99 (960 acks busy, 300 idle);",
        f"stdio: {sizes.stdio_calls} derives per row through one `lambo serve`, raw JSON-RPC "
        "lines;",
        f"hub + 2 forwarders: {sizes.clients_calls} derives through each at once, then "
        f"{sizes.clients_solo} one at a time through each in turn.",
        f"Recall: {sizes.recall_reps} calls per size, {RECALL_DIM}-d "
        f"(and {WIDE_DIM}-d at 100k), top_k 5, "
        "traversal_depth 2, fusion sum, a fresh query each call; incl. = the real MiniLM "
        "embeds the query.",
        f"Throughput: {sizes.writes_calls} 1-concept calls / {max(1, sizes.writes_calls // 8)} "
        "16-concept calls, timed until applied.",
    ]
    if "startup" in results:
        s = results["startup"]
        parts.append(
            f"Startup: warm page cache, the model loads in the background; {s['archive']} "
            f"{s['archive_mb']:.0f} MB, run by {s['pyz_python']}."
        )
    if "quality" in results:
        sets = results["quality"]["sets"]
        parts.append(
            "Quality (tests/bench/recall_quality.py): "
            + "; ".join(
                f"{name}: {n['about']}, {n['questions']} questions" for name, n in sets.items()
            )
            + "; top_k 10, the served defaults; legs and RRF k=60 ranked outside lambo."
        )
    return " ".join(parts)


if __name__ == "__main__":
    raise SystemExit(main())
