"""32 concurrent MCP clients over Streamable HTTP on loopback against a 10k-concept session.

Run by hand (pytest does not collect tests/bench):

    python tests/bench/http.py [--clients 32] [--requests 200] [--seconds 20]
                               [--limits raised|default] [--rps 10000] [--concepts 10000]

The session is a SQLite store of ``--concepts`` concepts written straight through the
store by recall.py's ``build`` (five concepts per interaction, Derives and CoOccurrence
edges, a Dependency from about half the concepts to an earlier one), with English texts
of our own and their real MiniLM int8 vectors, stamped with MiniLM's contract: the serve
opens it as any session. Built once, cached under /tmp/lambo-bench, copied for each run
(the run writes to it).

`lambo serve --transport http --port 0 --session bench` (tests/e2e/http_serve.py's
HttpServe) runs on a copy, with a LAMBO_HOME holding MiniLM (one thread, as the other
benches). Once its embedder is ready, ``--clients`` SDK clients connect, each over its
own httpx2 client and its own MCP session, even ones with the 2025-11-25 handshake
(``mode="legacy"``) and odd ones with 2026-07-28 (``mode="auto"``). Then all start at
once and each makes up to ``--requests`` tool calls one after another, stopping early at
``--seconds``: four lambo_recall to one lambo_derive, every query and every derived text
its own (an agent id per client). Untimed afterwards: the write queue drains, the
concept count is read again, then the serve's VmHWM and VmRSS, then SIGTERM.

The serve's rate buckets count HTTP requests. An unauthenticated caller of a loopback
serve carries no credential, so only the session's rate applies (per_session_rps 100,
bursts of 200): ``--limits default`` (the default) runs with the shipped defaults, and
``--limits raised`` writes both rates as ``--rps`` in the home's lambo.toml and prints
them, to show what the serve does unthrottled.

Prints tool calls/s, HTTP requests/s, p50/p99 per tool (and per protocol version), every
error by kind (a 429 is one), the HTTP statuses the clients saw and the ones the serve
logged, concepts before and after, RSS, CPU of the serve and of the clients (this one
process, on the same cores), and the spec system's own figure beside ours. Asserts no
time; exits 1 when any call failed or any HTTP answer was >= 400.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# Run as a script, this file's directory heads sys.path and this file's name would shadow
# the standard library's http package (httpx2 imports http.client): drop it before that.
if sys.path and Path(sys.path[0] or ".").resolve() == Path(__file__).resolve().parent:
    del sys.path[0]
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402
import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from lambo_core.config_schema import KEYS_BY_DOTTED  # noqa: E402
from lambo_core.embed.onnx import OnnxEmbedder  # noqa: E402
from lambo_core.mcp.http.limits import BURST_SECONDS  # noqa: E402
from lambo_core.store import SqliteStore  # noqa: E402
from tests.bench import recall  # noqa: E402
from tests.bench._serve import loadavg, make_home, percentile  # noqa: E402
from tests.e2e.http_serve import HttpServe  # noqa: E402

SESSION = recall.SESSION
RECALL, DERIVE = "lambo_recall", "lambo_derive"
MODES = ("legacy", "auto")  # even clients: the 2025-11-25 handshake; odd: 2026-07-28
DERIVE_EVERY = 5  # one call in five derives: recall:derive 4:1
CALL_TIMEOUT_S = 60.0
DRAIN_TIMEOUT_S = 300.0
SEED_VERSION = 1  # bump when the texts change, so the cached store is rebuilt
LIMIT_KEYS = ("per_credential_rps", "per_session_rps", "max_live_sessions")


def _shipped(name: str) -> float:
    default = KEYS_BY_DOTTED[f"serve.{name}"].default
    assert isinstance(default, int | float)
    return float(default)


#: the shipped [serve] defaults, read from the schema so this bench follows them
DEFAULT_LIMITS = {name: _shipped(name) for name in LIMIT_KEYS}
SPEC_FIGURE = (
    "spec system's own HTTP load test (12 clients, SQLite): about 40 requests/s, "
    "falling to 11-19 requests/s as the graph grew"
)
STATUS = re.compile(r"http method=(\S+) session=\S+ status=(\d+)")

# -- texts: a team's working memory --------------------------------------------------------
SUBJECTS = [
    "The billing service", "The deploy pipeline", "Maya's log parser", "The nightly backup",
    "The search indexer", "The staging cluster", "The auth gateway", "The mobile sync job",
    "The invoice exporter", "The metrics collector", "Tom's migration script",
    "The payment webhook", "The image resizer", "The CI runner pool", "The feature flag service",
    "The email queue", "The warehouse load", "The API rate limiter", "The session store",
    "The weekly report", "The checkout page", "The DNS failover", "The audit trail",
    "The recommendation model", "The video transcoder", "The customer import",
    "The notification worker", "The cron scheduler", "The PDF renderer", "The admin dashboard",
    "The GraphQL layer", "The Kafka consumer", "The Redis cache", "The S3 archiver",
    "The onboarding flow", "The SSO login", "The load balancer", "The schema registry",
    "The translation pipeline", "The fraud check",
]  # fmt: skip
PREDICATES = [
    "times out when", "was rewritten after", "now retries until", "started failing after",
    "got twice as fast once", "must be restarted when", "drops requests whenever",
    "moved to Postgres because", "logs a warning each time", "needs a manual approval when",
    "was paused on Friday because", "pages the on-call engineer when", "skips a run whenever",
    "doubles its memory use when", "was rolled back after", "stays read-only until",
    "sends duplicate events when", "was split in two after", "falls behind whenever",
    "is blocked on legal review because", "runs on the old hosts until", "corrupts its output when",
    "was given its own queue after", "loses its lock when", "is owned by the platform team since",
    "needs a new certificate before", "charges customers twice when",
    "ignores the retry budget when", "was tuned by Priya after", "goes quiet for an hour when",
]  # fmt: skip
CAUSES = [
    "the disk on the build host fills up", "the certificate expires at the end of the month",
    "a config file points at the old cluster", "the cache is cleared during a release",
    "two deploys overlap on a Friday evening", "the upstream vendor changes its API",
    "the database fails over to the replica", "a customer uploads a file over 2 GB",
    "daylight saving time starts", "the VPN to the office drops",
    "the clock on one node drifts by a minute", "someone rotates the API keys",
    "the queue holds more than a million messages", "the nightly vacuum runs long",
    "traffic from Japan peaks at noon", "the feature flag is flipped by hand",
    "the region us-east-1 has an outage", "a schema change lands without a migration",
    "the test suite is skipped to ship a hotfix", "memory on the worker crosses 80 percent",
    "the payment provider returns HTTP 503", "the legacy cron job runs at the same time",
    "the CDN purges every image", "an intern deletes the staging bucket",
    "the load test hits production by mistake", "TLS 1.0 clients are finally refused",
    "the log volume triples after a release", "the primary key sequence wraps around",
    "the backup window overlaps the batch import", "a new region goes live in Frankfurt",
]  # fmt: skip
QUESTIONS = [
    "why does {s} fail", "what happened to {s}", "{s} {p}", "who owns {s}",
    "when must {s} be restarted", "{s} and {c}", "what breaks when {c}",
    "is {s} safe to deploy when {c}", "known problems with {s}", "what did we decide about {s}",
]  # fmt: skip
COMBINATIONS = len(SUBJECTS) * len(PREDICATES) * len(CAUSES)
# a multiplier coprime with COMBINATIONS walks every combination once, neighbours far apart
_STRIDE = 7919


def fact(k: int) -> str:
    """The ``k``-th distinct fact (0 <= k < COMBINATIONS); a ticket number as people write."""
    if not 0 <= k < COMBINATIONS:
        raise ValueError(f"only {COMBINATIONS} distinct facts; asked for number {k}")
    m = (k * _STRIDE) % COMBINATIONS
    s, rest = divmod(m, len(PREDICATES) * len(CAUSES))
    p, c = divmod(rest, len(CAUSES))
    return f"{SUBJECTS[s]} {PREDICATES[p]} {CAUSES[c]} (ticket OPS-{1000 + k})"


def derived_fact(concepts: int, clients: int, client: int, j: int) -> str:
    """Client ``client``'s ``j``-th derive: a fact no seed concept and no other derive has."""
    return fact(concepts + client + clients * j)


def question(rng: random.Random) -> str:
    template = rng.choice(QUESTIONS)
    text = template.format(
        s=rng.choice(SUBJECTS).lower(), p=rng.choice(PREDICATES), c=rng.choice(CAUSES)
    )
    return f"{text}?"


def tool_for(client: int, j: int) -> str:
    """Four recalls to one derive, the derives of different clients spread over the run."""
    return DERIVE if (client + j) % DERIVE_EVERY == DERIVE_EVERY - 1 else RECALL


# -- the session and the serve --------------------------------------------------------------
def seeded_store(root: Path, concepts: int, model_dir: Path) -> Path:
    """A fresh copy of the cached ``concepts``-concept MiniLM session (built when missing)."""
    if concepts > COMBINATIONS:
        raise ValueError(f"--concepts at most {COMBINATIONS}")
    cached = recall.CACHE_DIR / f"http-{concepts}-minilm-v{SEED_VERSION}.db"
    if not cached.exists():
        cached.parent.mkdir(parents=True, exist_ok=True)
        print(f"building {cached} (MiniLM vectors for {concepts} texts) ...", flush=True)
        embedder = OnnxEmbedder(model_dir, threads=0)
        recall.build(cached, concepts, embedder.dim, embedder=embedder, text_of=fact)
    store = root / "bench.db"
    shutil.copyfile(cached, store)
    return store


def limits_for(kind: str, rps: float, clients: int) -> dict[str, float]:
    """The [serve] limits of the run: the shipped defaults, or the rates raised to ``rps``
    (and the session ceiling to at least one per client)."""
    if kind == "default":
        return dict(DEFAULT_LIMITS)
    ceiling = max(DEFAULT_LIMITS["max_live_sessions"], float(clients))
    return {"per_credential_rps": rps, "per_session_rps": rps, "max_live_sessions": ceiling}


def write_limits(home: Path, kind: str, limits: dict[str, float]) -> None:
    if kind == "default":
        return  # nothing written: what a user who sets nothing gets
    config = home / "config" / "lambo.toml"
    lines = "".join(f"{key} = {value:g}\n" for key, value in limits.items())
    config.write_text(config.read_text() + "\n[serve]\n" + lines)


def quiet_log(serve: HttpServe, quiet_s: float = 0.5, bound_s: float = 10.0) -> int:
    """How many lines the serve has logged, once none came for ``quiet_s``: a request's
    line is written after its answer, so it may come just after the client had it."""
    seen, since, deadline = len(serve.lines), time.monotonic(), time.monotonic() + bound_s
    while time.monotonic() < min(since + quiet_s, deadline):
        time.sleep(0.05)
        if len(serve.lines) != seen:
            seen, since = len(serve.lines), time.monotonic()
    return seen


def proc_status(pid: int) -> dict[str, int]:
    """VmHWM and VmRSS (KiB) of ``pid``."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmHWM", "VmRSS"):
            out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU of ``pid`` (and of its children it waited for), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return ticks / float(os.sysconf("SC_CLK_TCK"))


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# -- the clients ----------------------------------------------------------------------------
@dataclass
class Tally:
    """What every client saw: call times per (tool, mode), errors by kind, HTTP statuses."""

    times: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    versions: Counter[str] = field(default_factory=Counter)
    receipts: list[tuple[str, str]] = field(default_factory=list)  # (agent, receipt) per derive
    derived: list[str] = field(default_factory=list)  # the text of each acked derive
    http_requests: int = 0
    first_start: float = 0.0
    last_end: float = 0.0

    def add_time(self, tool: str, mode: str, seconds: float) -> None:
        self.times.setdefault((tool, mode), []).append(seconds)

    def of_tool(self, tool: str) -> list[float]:
        return [t for (name, _), ts in self.times.items() if name == tool for t in ts]

    @property
    def calls(self) -> int:
        return sum(len(ts) for ts in self.times.values())

    @property
    def http_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if int(status.split()[1]) >= 400)


@contextlib.asynccontextmanager
async def connect(url: str, mode: str, tally: Tally) -> AsyncIterator[Client]:
    """The SDK client over its own httpx2 client, every HTTP answer counted by status."""

    async def seen(response: httpx2.Response) -> None:
        if tally.first_start:  # the timed phase (a legacy client's closing DELETE too)
            tally.http_requests += 1
        tally.statuses[f"{response.request.method} {response.status_code}"] += 1

    hooks: dict[str, list[Callable[..., Any]]] = {"response": [seen]}
    async with (
        httpx2.AsyncClient(timeout=CALL_TIMEOUT_S, event_hooks=hooks) as http,
        Client(streamable_http_client(url, http_client=http), mode=mode) as client,
    ):
        yield client


def arguments(tool: str, agent: str, text: str) -> dict[str, Any]:
    if tool == RECALL:
        return {"agent_id": agent, "query": text}
    return {"agent_id": agent, "concepts": [{"content": text, "concept_type": "observation"}]}


@dataclass(frozen=True)
class Plan:
    url: str
    clients: int
    requests: int
    seconds: float
    concepts: int


async def one_client(plan: Plan, k: int, tally: Tally, go: anyio.Event, ready: list[int]) -> None:
    """Client ``k``: connect, wait for every client, then call until the count or the time."""
    mode = MODES[k % len(MODES)]
    agent = f"agent-{k}"
    rng = random.Random(k)
    try:
        async with connect(plan.url, mode, tally) as client:
            tally.versions[f"{mode} -> {client.protocol_version}"] += 1
            ready.append(k)
            await go.wait()
            deadline = tally.first_start + plan.seconds
            derives = 0
            for j in range(plan.requests):
                if time.perf_counter() >= deadline:
                    break
                tool = tool_for(k, j)
                if tool == DERIVE:
                    text = derived_fact(plan.concepts, plan.clients, k, derives)
                    derives += 1
                else:
                    text = question(rng)
                await one_call(client, tool, mode, arguments(tool, agent, text), tally)
    except Exception as exc:  # a client that could not connect or lost its session
        tally.errors[f"client {mode}: {type(exc).__name__}: {str(exc)[:160]}"] += 1
        ready.append(k)


async def one_call(
    client: Client, tool: str, mode: str, args: dict[str, Any], tally: Tally
) -> None:
    started = time.perf_counter()
    try:
        result = await client.call_tool(tool, args)
    except Exception as exc:  # a 429 comes back as an MCPError naming the limit
        tally.errors[f"{tool}: {type(exc).__name__}: {str(exc)[:160]}"] += 1
        return
    finally:
        tally.last_end = max(tally.last_end, time.perf_counter())
    if result.is_error:
        said = " ".join(getattr(c, "text", "") for c in result.content)
        tally.errors[f"{tool} refused: {said[:160]}"] += 1
        return
    tally.add_time(tool, mode, time.perf_counter() - started)
    if tool == DERIVE:
        tally.receipts.append((args["agent_id"], str((result.structured_content or {})["receipt"])))
        tally.derived.append(args["concepts"][0]["content"])


async def run_clients(plan: Plan) -> Tally:
    tally = Tally()
    go = anyio.Event()
    ready: list[int] = []
    with anyio.fail_after(plan.seconds + 4 * CALL_TIMEOUT_S):
        async with anyio.create_task_group() as tasks:
            for k in range(plan.clients):
                tasks.start_soon(one_client, plan, k, tally, go, ready)
            while len(ready) < plan.clients:  # every handshake done (or failed) first
                await anyio.sleep(0.01)
            tally.first_start = time.perf_counter()
            go.set()
    return tally


async def control(url: str, what: Callable[[Client], Any]) -> Any:
    """An untimed client of our own (not counted) for stats before and after the run."""
    async with connect(url, "auto", Tally()) as client:
        return await what(client)


async def stats(client: Client, **ask: Any) -> dict[str, Any]:
    result = await client.call_tool("lambo_stats", {"agent_id": "bench-control", **ask})
    if result.is_error:
        raise RuntimeError(f"lambo_stats refused: {result.content}")
    return dict(result.structured_content or {})


async def wait_until(client: Client, done: Callable[[dict[str, Any]], bool], what: str) -> Any:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while True:
        now = await stats(client)
        if done(now):
            return now
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not within {DRAIN_TIMEOUT_S:.0f} s: {now}")
        await anyio.sleep(0.2)


def _ready(s: dict[str, Any]) -> bool:
    if s["embedder_state"] in ("failed", "missing"):
        raise RuntimeError(f"embedder {s['embedder_state']}")
    return bool(s["embedder_state"] == "ready")


def _drained(s: dict[str, Any]) -> bool:
    return bool(s["write_queue_outstanding"] == 0)


async def outcomes(
    client: Client, receipts: list[tuple[str, str]]
) -> tuple[Counter[str], list[str]]:
    """How each derive settled (created, or matched a concept already there), with the
    first few matches' receipt details: a run of distinct texts should create them all."""
    settled: Counter[str] = Counter()
    matched: list[str] = []
    for agent, receipt in receipts:
        seen = (await stats(client, agent_id=agent, receipt=receipt))["receipt"]
        detail = str(seen["detail"])
        kind = seen["state"]
        if kind == "applied":
            kind = "applied, created" if " 0 created" not in detail else "applied, matched existing"
        settled[kind] += 1
        if kind != "applied, created" and len(matched) < 3:
            matched.append(" | ".join(detail.splitlines()[:3]))
    return settled, matched


# -- the report -----------------------------------------------------------------------------
def ms(samples: list[float], q: float) -> str:
    return f"{percentile(samples, q) * 1000:9.1f}" if samples else f"{'-':>9}"


@dataclass
class Measured:
    tally: Tally
    before: dict[str, Any]
    after: dict[str, Any]
    memory: dict[str, int]
    serve_cpu_s: float
    client_cpu_s: float
    logged: Counter[str]
    settled: Counter[str]
    matched: list[str]
    in_file: tuple[int, list[str]]  # concepts in the store after the stop, derives missing
    exit_code: int


def stored(store: Path, derived: list[str]) -> tuple[int, list[str]]:
    """Read after the stop, from the file: the session's concepts, and the acked derives
    whose text is not among them."""
    db = SqliteStore(store)
    try:
        contents = [c.content for c in db.concepts(SESSION)]
    finally:
        db.close()
    texts = set(contents)
    return len(contents), [t for t in derived if t not in texts]


def gc_said(gc: dict[str, Any]) -> str:
    """The serve's last garbage-collection sweep, which may take concepts away meanwhile."""
    sweep = gc.get("last_sweep")
    if not sweep:
        return "no gc sweep in this serve"
    return f"last gc sweep ({sweep.get('trigger')}): {sweep.get('collected')} collected"


def throttle_line(rate: float) -> str:
    """Whether this load passes the shipped per-session rate, the one that applies to the
    unauthenticated clients of a loopback serve (they carry no credential)."""
    limit = DEFAULT_LIMITS["per_session_rps"]
    verdict = "above" if rate > limit else "below"
    return (
        f"the shipped per_session_rps {limit:g} (bursts to {limit * BURST_SECONDS:.0f}), "
        f"the rate unauthenticated clients meet: this load ({rate:.1f} HTTP requests/s) "
        f"is {verdict} it"
    )


def print_report(plan: Plan, kind: str, limits: dict[str, float], m: Measured) -> None:
    t = m.tally
    wall = max(t.last_end - t.first_start, 1e-9)
    print()
    print(
        f"lambo serve --transport http: {plan.clients} clients on loopback, {plan.concepts}-concept"
        f" SQLite session, MiniLM int8 (1 thread); up to {plan.requests} calls per client or "
        f"{plan.seconds:.0f} s, recall:derive 4:1"
    )
    print(
        f"limits ({kind}): "
        + ", ".join(f"{key} {value:g}" for key, value in limits.items())
        + f"; shipped defaults: {', '.join(f'{k} {v:g}' for k, v in DEFAULT_LIMITS.items())}"
    )
    print(f"protocol versions: {dict(sorted(t.versions.items()))}")
    print()
    print(f"tool calls answered  {t.calls} in {wall:.1f} s: {t.calls / wall:.1f} calls/s overall")
    print(f"HTTP requests        {t.http_requests} (tool calls, streams, closing DELETEs): "
          f"{t.http_requests / wall:.1f} requests/s, what the rate buckets count")  # fmt: skip
    print(throttle_line(t.http_requests / wall))
    print()
    print(f"{'tool':<14}{'mode':<8}{'calls':>7}{'p50 ms':>9}{'p99 ms':>9}")
    for tool in (RECALL, DERIVE):
        samples = t.of_tool(tool)
        print(f"{tool:<14}{'all':<8}{len(samples):>7}{ms(samples, 0.5)}{ms(samples, 0.99)}")
        for mode in MODES:
            own = t.times.get((tool, mode), [])
            print(f"{'':<14}{mode:<8}{len(own):>7}{ms(own, 0.5)}{ms(own, 0.99)}")
    print()
    failed = sum(t.errors.values())
    print(f"errors: {failed} failed calls or clients, {t.http_errors} HTTP answers >= 400")
    for kind_of, n in t.errors.most_common():
        print(f"  {n:>6}  {kind_of}")
    print(f"HTTP statuses the clients saw: {dict(sorted(t.statuses.items()))}")
    print(f"HTTP statuses the serve logged: {dict(sorted(m.logged.items()))}")
    print()
    before, after = m.before["concept_count"], m.after["concept_count"]
    derived = len(t.of_tool(DERIVE))
    print(
        f"concepts: {before} before, {after} after the queue drained "
        f"(+{after - before} for {derived} acked derives)"
    )
    print(f"derives settled: {dict(sorted(m.settled.items()))}; {gc_said(m.after['gc'])}")
    for detail in m.matched:
        print(f"  {detail}")
    count, missing = m.in_file
    print(f"the store after the stop: {count} concepts; acked derives not in it: {len(missing)}")
    for text in missing[:3]:
        print(f"  {text}")
    print(
        f"serve RSS: VmHWM {m.memory['VmHWM'] / 1024:.0f} MiB, VmRSS "
        f"{m.memory['VmRSS'] / 1024:.0f} MiB at the end; serve exit code {m.exit_code}"
    )
    print(
        f"CPU during the run: serve {m.serve_cpu_s:.1f} s, clients (this process) "
        f"{m.client_cpu_s:.1f} s, over {wall:.1f} s of wall on {os.cpu_count()} cores; "
        f"load average at the end {loadavg()}"
    )
    print()
    print(
        f"ours: {t.calls / wall:.1f} tool calls/s with {plan.clients} clients at {before} concepts"
    )
    print(f"beside it, the {SPEC_FIGURE}")


# -- main -----------------------------------------------------------------------------------
def measure(plan_args: argparse.Namespace, root: Path) -> tuple[Plan, dict[str, float], Measured]:
    home = make_home(root)
    limits = limits_for(plan_args.limits, plan_args.rps, plan_args.clients)
    write_limits(home, plan_args.limits, limits)
    store = seeded_store(root, plan_args.concepts, home / "cache" / "models" / "minilm")
    with HttpServe(home, store, (SESSION,)) as serve:
        url = serve.url(SESSION)
        plan = Plan(url, plan_args.clients, plan_args.requests, plan_args.seconds,
                    plan_args.concepts)  # fmt: skip
        before = anyio.run(control, url, lambda c: wait_until(c, _ready, "embedder ready"))
        serve_cpu, own_cpu = cpu_seconds(serve.proc.pid), own_cpu_seconds()
        logged_before = quiet_log(serve)
        tally = anyio.run(run_clients, plan)
        serve_cpu, own_cpu = cpu_seconds(serve.proc.pid) - serve_cpu, own_cpu_seconds() - own_cpu
        logged = Counter(
            f"{found.group(1)} {found.group(2)}"
            for line in serve.lines[logged_before : quiet_log(serve)]
            if (found := STATUS.search(line))
        )
        after = anyio.run(control, url, lambda c: wait_until(c, _drained, "write queue drained"))
        settled, matched = anyio.run(control, url, lambda c: outcomes(c, tally.receipts))
        memory = proc_status(serve.proc.pid)
        code = serve.stop()
    in_file = stored(store, tally.derived)
    measured = Measured(
        tally, before, after, memory, serve_cpu, own_cpu, logged, settled, matched, in_file, code
    )
    return plan, limits, measured


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--requests", type=int, default=200, help="calls per client at most")
    parser.add_argument("--seconds", type=float, default=20.0, help="time bound of the run")
    parser.add_argument("--concepts", type=int, default=10_000)
    parser.add_argument(
        "--limits",
        choices=("default", "raised"),
        default="default",
        help="default: the shipped [serve] rates; raised: both rates set to --rps",
    )
    parser.add_argument("--rps", type=float, default=10_000, help="both rates, --limits raised")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lambo-bench-http-") as tmp:
        plan, limits, measured = measure(args, Path(tmp))
    print_report(plan, args.limits, limits, measured)
    failed = sum(measured.tally.errors.values()) + measured.tally.http_errors
    return 1 if failed or measured.exit_code != 0 else 0


if __name__ == "__main__":
    sys.exit(main())
