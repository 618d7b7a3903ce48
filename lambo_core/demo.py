"""`lambo demo`: one scripted scenario that shows what lambo does, step by step: two agents
derive and cite facts, the daemon promotes ``user schema`` to Canonical, and a contradiction
reaches the second agent's recall (spec: "lambo_recall", its warning lines). Every call goes
through ``MemoryService.call``; ``run_demo`` returns 1 naming the step that failed. The
script's design is in docs/design.md.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from .config import Config, store_flags
from .embed.catalog import CATALOG
from .embed.loader import read_contract, wants_embedder
from .errors import ConfigError, ConflictError, LamboError
from .hub import LeaseKeeper
from .model import Status
from .serve import ServeOptions, open_service, stop_service
from .service import MemoryService, ToolResult
from .store import open_config_store, store_location

Echo = Callable[[str], None]
LoadConfig = Callable[[dict[str, object]], Config]

API = "agent-api"
AUTH = "agent-auth"
SCHEMA = "user schema"

# The demo's own settings: 0.2.2's demo timings, and every gate the scenario meets pinned,
# so a user's lambo.toml cannot stall it. min_agents is 1 because the demo has two agents
# and the writer's own citations never count (the default, 2, needs a third agent).
CYCLE_S = 0.025
EDGE_AGE_S = 0.01
DEMO_SETTINGS: dict[str, object] = {
    "canonization.promotion_policy": "swarm",
    "canonization.cycle_interval_s": CYCLE_S,
    "canonization.edge_min_age_s": EDGE_AGE_S,
    "canonization.candidate_min_interactions": 1,
    "canonization.venerable_min_interactions": 3,
    "canonization.min_agents": 1,
    "canonization.canonical_min_blast_radius": 5,
    "canonization.canonical_budget": 1000,
    "canonization.demotion_cooldown_s": 300.0,
    "canonization.supersede": False,
    "canonization.batch": 50,
    "canonization.contradiction_budget": 10_000,
    "recall.pillar_threshold": 5,
    "gc.mutations_per_sweep": 1_000_000,
    "gc.elapsed_s": 86_400.0,
}

WAIT_S = 10.0  # the longest the demo waits on the daemon for one thing
POLL_S = 0.005
RECEIPT_WAIT_MS = 34_000  # a write's outcome; the first one may wait for the model to load
RECALL_ARGS: dict[str, Any] = {"top_k": 3, "max_tokens": 400, "traversal_depth": 1}


class StepFailed(Exception):
    """A step did not give what it should; the message says what came back."""


@dataclass(frozen=True)
class DemoPlan:
    """The configuration the demo runs with, and how it embeds."""

    config: Config
    keyword_only: bool
    embedder_line: str


def default_session_name(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    return f"demo-{stamp}"


def plan_demo(load: LoadConfig, store: str) -> DemoPlan:
    """The demo's settings over the user's, and how it embeds: with the configured model, or
    keyword-only when none is installed or the store keeps no vectors (said plainly)."""
    flags: dict[str, object] = {**store_flags(store), **DEMO_SETTINGS}
    config = load(flags)
    keyword_only = {**flags, "embedder.match_strategy": "canonical"}
    if not wants_embedder(config):
        return DemoPlan(
            config,
            True,
            "embedder: none, by your configuration (embedder.kind = none or match_strategy = "
            '"canonical"): the demo runs keyword-only',
        )
    try:
        contract = read_contract(config)
    except LamboError as exc:
        model = str(config.get("embedder.model"))
        pull = f"`lambo model pull {model}`" if model in CATALOG else "`lambo model pull`"
        why = (
            f'no model is installed for embedder.model = "{model}"'
            if exc.message.startswith("no embedding model is installed")
            else f"the configured model cannot be used ({exc.message.rstrip('.')})"
        )
        return DemoPlan(
            load(keyword_only),
            True,
            f'embedder: {why}, so the demo runs keyword-only (match_strategy = "canonical").\n'
            f"  For semantic matching get a model: {pull} (or offline: "
            "`lambo model import DIR --name NAME`)",
        )
    if config.store_kind == "memory":
        return DemoPlan(
            load(keyword_only),
            True,
            "embedder: the memory store keeps no vectors, so the demo runs keyword-only "
            f'(match_strategy = "canonical"); leave out --store memory to run with '
            f"{contract['model']}",
        )
    return DemoPlan(
        config,
        False,
        f"embedder: {contract['model']} ({contract['dim']} dimensions), hybrid matching "
        "(keywords and vectors); the first write waits while the model loads",
    )


def settings_line() -> str:
    return (
        f"demo settings: a daemon cycle every {CYCLE_S * 1000:g} ms and evidence counted once "
        f"{EDGE_AGE_S * 1000:g} ms old (defaults: 60 s each); Venerable needs citations from 3 "
        "other interactions and 1 agent besides the writer; Canonical needs a blast radius "
        "above 5"
    )


def check_fresh(config: Config, session: str) -> None:
    """A store that outlives the demo must not hold the session yet: the demo writes only
    into a fresh one."""
    if config.store_kind == "memory":
        return
    store = open_config_store(config)
    try:
        found = store.get_session(session)
    finally:
        store.close()
    if found is not None:
        raise ConfigError(
            f"session {session!r} already exists in {store_location(config)}; the demo writes only "
            "into a fresh session: leave --session out, or name one that does not exist"
        )


def run_demo(load: LoadConfig, store: str | None, session: str | None, echo: Echo) -> int:
    """Run the scenario, printing each step; 0 on success, 1 when a step failed.

    ``store``: None for a throwaway SQLite file (deleted at the end), ``memory``, or a
    SQLite path (the session is kept there). A configuration refusal (a bad store, a
    session that is not fresh) raises ``LamboError`` before anything runs.
    """
    with contextlib.ExitStack() as stack:
        throwaway = store is None
        if store is None:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="lambo-demo-"))
            store = str(Path(tmp) / "demo.db")
        plan = plan_demo(load, store)
        name = session or default_session_name()
        check_fresh(plan.config, name)
        return _run(plan, name, throwaway, echo)
    raise AssertionError("unreachable")  # pragma: no cover (mypy: ExitStack may swallow)


def _run(plan: DemoPlan, name: str, throwaway: bool, echo: Echo) -> int:
    config = plan.config
    if config.store_kind == "memory":
        where = "a memory store (gone when the demo ends)"
    elif throwaway:
        where = "a throwaway SQLite store (deleted when the demo ends)"
    else:
        where = store_location(config)
    echo(f"lambo demo: two agents build one REST API in session {name!r}, in {where}")
    echo(plan.embedder_line)
    echo(settings_line())
    demo = Demo(echo)
    started = time.monotonic()
    try:
        anyio.run(_hold_and_run, config, name, demo)
    except StepFailed as exc:
        echo(f"\nlambo demo: step {demo.number} ({demo.title}) failed: {exc}")
        return 1
    except LamboError as exc:
        echo(f"\nlambo demo: step {demo.number} ({demo.title}) failed: {exc.render()}")
        return 1
    echo(f"\ndemo finished in {time.monotonic() - started:.1f} s.")
    if config.store_kind == "sqlite" and not throwaway:
        echo(
            f"The session stays in {config.store_path}: try `lambo recall --store "
            f"{config.store_path} --session {name} --query 'user schema'`."
        )
    elif config.store_kind != "memory":
        echo(
            f"The session stays in {store_location(config)}: try `lambo recall --session "
            f"{name} --query 'user schema'` with this configuration."
        )
    echo(
        "Next: `lambo setup claude` (or cursor, codex, generic) prints the config that adds "
        "lambo to your MCP client."
    )
    return 0


async def _hold_and_run(config: Config, name: str, demo: Demo) -> None:
    """Take the session's lease, open it with its daemon, run the scenario, close it."""
    store = open_config_store(config)
    keeper = LeaseKeeper(store, name, "lambo-demo")
    try:
        if keeper.try_acquire() is None:
            raise ConflictError(f"session {name!r} is held by another process")
        demo.title = "opening the session"
        service = await anyio.to_thread.run_sync(
            open_service, store, config, ServeOptions(session=name, agent="lambo-demo")
        )
        demo.service = service
        try:
            await scenario(demo)
        finally:
            await anyio.to_thread.run_sync(stop_service, service)
    finally:
        keeper.release()
        store.close()


# =====================================================================================
# printing the calls
# =====================================================================================


def _show(value: object) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k}: {_show(v)}" for k, v in value.items()) + "}"
    return str(value)


def describe_call(tool: str, args: Mapping[str, Any]) -> str:
    """``lambo_derive agent-api: concepts=[...]``: the call as a reader wants to see it."""
    rest = ", ".join(f"{k}={_show(v)}" for k, v in args.items() if k != "agent_id")
    return f"{tool} as {args.get('agent_id')}" + (f": {rest}" if rest else "")


class Demo:
    """The running scenario: its service, the current step, and how it prints."""

    def __init__(self, echo: Echo) -> None:
        self.echo = echo
        self.service: MemoryService | None = None
        self.number = 0
        self.title = "starting"

    def step(self, title: str) -> None:
        self.number += 1
        self.title = title
        self.echo(f"\n[{self.number}] {title}")

    def say(self, line: str) -> None:
        self.echo(f"    {line}")

    def show(self, text: str, limit: int | None = None) -> None:
        lines = text.splitlines()
        for line in lines[:limit]:
            self.echo(f"    < {line}" if line else "    <")
        if limit is not None and len(lines) > limit:
            self.echo(f"    < … ({len(lines) - limit} more lines)")

    async def call(self, tool: str, args: dict[str, Any], *, quiet: bool = False) -> ToolResult:
        assert self.service is not None
        if not quiet:
            self.echo(f"    > {describe_call(tool, args)}")
        result = await self.service.call(tool, args)
        if result.is_error:
            raise StepFailed(f"{tool} answered an error: {result.texts[0]}")
        return result

    async def write(self, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """A write, its ack's first line, then its outcome (waited for through lambo_stats)."""
        ack = await self.call(tool, args)
        self.echo(f"    < {ack.texts[0].splitlines()[0]}")
        receipt = (ack.structured or {}).get("receipt")
        if not receipt:
            raise StepFailed(f"{tool} returned no receipt: {ack.texts[0]}")
        stats = await self.call(
            "lambo_stats",
            {"agent_id": args["agent_id"], "receipt": receipt, "wait_ms": RECEIPT_WAIT_MS},
            quiet=True,
        )
        outcome: dict[str, Any] = (stats.structured or {}).get("receipt") or {}
        line = stats.texts[0].splitlines()[0]
        shown = line.split(": ", 1)[1] if line.startswith("receipt ") and ": " in line else line
        self.echo(f"    < outcome: {shown}")
        if outcome.get("state") != "applied":
            raise StepFailed(f"the write was not applied: {line}")
        return outcome

    async def recall(self, agent: str, query: str) -> ToolResult:
        result = await self.call("lambo_recall", {"agent_id": agent, "query": query, **RECALL_ARGS})
        self.show(result.texts[0])
        return result

    def announce_inspect(self, short: str, how: str) -> None:
        call = describe_call("lambo_inspect", inspect_args(short))
        self.echo(f"    > {call}  ({how})")

    async def admission(self, short: str) -> dict[str, Any]:
        result = await self.call("lambo_inspect", inspect_args(short), quiet=True)
        admission = (result.structured or {}).get("admission")
        if not isinstance(admission, dict):
            raise StepFailed(f"lambo_inspect gave no admission section: {result.texts[0]}")
        return admission

    async def counters(self) -> dict[str, Any]:
        result = await self.call("lambo_stats", {"agent_id": API}, quiet=True)
        return result.structured or {}


def inspect_args(short: str) -> dict[str, Any]:
    return {"agent_id": AUTH, "focus": short, "depth": 0}


def _schema_id(result: ToolResult) -> str:
    for hit in (result.structured or {}).get("hits", []):
        if hit.get("content") == SCHEMA:
            return str(hit["node_id"])
    raise StepFailed(f"recall did not return {SCHEMA!r}: {result.texts[0]!r}")


# =====================================================================================
# the scenario
# =====================================================================================


async def scenario(demo: Demo) -> None:
    assert demo.service is not None
    service = demo.service

    demo.step(f"{API} starts the API: it derives the {SCHEMA} and a constraint")
    await demo.write(
        "lambo_derive",
        {
            "agent_id": API,
            "concepts": [
                {"content": SCHEMA, "concept_type": "entity"},
                {
                    "content": "the REST API speaks JSON over HTTPS only",
                    "concept_type": "constraint",
                },
            ],
        },
    )

    demo.step(f"{API} recalls the schema, to cite it by id")
    found = await demo.recall(API, SCHEMA)
    node_id = _schema_id(found)
    short = node_id[:8]
    demo.say(f"the {SCHEMA} is {short}: later writes cite it by that 8-hex id")

    demo.step(f"{API} derives four endpoints that depend on the {SCHEMA}")
    await demo.write(
        "lambo_derive",
        {
            "agent_id": API,
            "concepts": [
                {"content": text, "concept_type": "logic", "depends_on": [short]}
                for text in (
                    "GET /users/{id} returns one user",
                    "POST /users creates a user from a signup form",
                    "GET /users lists users fifty per page",
                    "DELETE /users/{id} soft-deletes the account",
                )
            ],
        },
    )

    demo.step(f"{AUTH} joins: it recalls the schema and builds authentication on it")
    await demo.recall(AUTH, SCHEMA)
    await demo.write(
        "lambo_derive",
        {
            "agent_id": AUTH,
            "concepts": [
                {"content": text, "concept_type": kind, "depends_on": [short]}
                for text, kind in (
                    ("passwords are hashed with argon2id", "constraint"),
                    ("POST /login checks the password hash", "logic"),
                    ("access tokens carry the user id in the sub claim", "logic"),
                    ("PATCH /users/{id} requires the owner's token", "constraint"),
                )
            ],
        },
    )

    demo.step(f"{AUTH} asks lambo_inspect why the {SCHEMA} is not Canonical yet")
    await anyio.sleep(4 * CYCLE_S)  # let the citations age in and a cycle see them
    demo.announce_inspect(short, "its admission section")
    admission = await _wait_for(demo, short, Status.CANDIDATE, WAIT_S)
    demo.say(f"status {admission['status']}; its next hop, as the daemon measures it:")
    for check in admission.get("checks", []):
        mark = "met" if check["met"] else "NOT met"
        demo.say(
            f"  stage {check['stage']} {check['gate']}: {check['current']} "
            f"{check['comparison']} {check['bar']} ({mark})"
        )

    demo.step(f"{API} records the action that created the users table")
    await demo.write(
        "lambo_record_action",
        {
            "agent_id": API,
            "action": "wrote the users table migration",
            "produces": ["migrations/0001_create_users.sql"],
            "depends_on": [short],
        },
    )

    demo.step(f"the daemon walks the {SCHEMA} to Canonical (polling lambo_inspect)")
    demo.announce_inspect(short, f"every {POLL_S * 1000:g} ms, at most {WAIT_S:g} s")
    walked = await _watch_walk(demo, short)
    if walked.get("status") != Status.CANONICAL.label:
        raise StepFailed(f"the {SCHEMA} did not reach Canonical: {walked}")
    events = await anyio.to_thread.run_sync(
        service.session.store.canon_events, service.session.name
    )
    demo.say("the store's canonization events for it (the durable record):")
    first = None
    for event in (e for e in events if e.node_id == node_id):
        first = event.occurred_at if first is None else first
        radius = "" if event.blast_radius is None else f", blast radius {event.blast_radius}"
        demo.say(
            f"  +{event.occurred_at - first:.3f} s  {event.from_status.label} -> "
            f"{event.to_status.label}{radius}"
        )
    saints = await demo.call("lambo_saints", {"agent_id": AUTH})
    demo.show(saints.texts[0], limit=4)

    demo.step(f"{API} changes its mind: a new concept against the {SCHEMA}")
    await demo.write(
        "lambo_derive",
        {
            "agent_id": API,
            "concepts": [
                {
                    "content": "users are keyed by email and the numeric user id is dropped",
                    "concept_type": "constraint",
                    "against": [short],
                }
            ],
        },
    )
    waited = await _wait_for_contradiction(demo)
    demo.say(f"the daemon listed the contradiction after {waited * 1000:.0f} ms")

    demo.step(f"{AUTH} recalls the {SCHEMA} before building on it again")
    result = await demo.recall(AUTH, SCHEMA)
    text = result.texts[0]
    if "Load-bearing pillar" not in text:
        raise StepFailed("the recall carried no load-bearing pillar line")
    if "⚠ Contradicted" not in text:
        raise StepFailed("the recall carried no contradiction warning")
    demo.say(
        "seen: the blast-radius (pillar) warning and the contradiction warning, "
        "with the contradicting concept beside it"
    )

    demo.step(f"{AUTH} asks lambo_stale which facts rest on the contradicted schema")
    stale = await demo.call("lambo_stale", {"agent_id": AUTH})
    demo.show(stale.texts[0], limit=6)

    demo.step("lambo_stats: the session at the end")
    stats = await demo.call("lambo_stats", {"agent_id": AUTH})
    demo.show(stats.texts[0])


async def _wait_for(demo: Demo, short: str, status: Status, bound: float) -> dict[str, Any]:
    """Poll lambo_inspect until the concept holds ``status`` or a later one (bounded)."""
    rank = _rank(status.label)
    deadline = time.monotonic() + bound
    while True:
        admission = await demo.admission(short)
        if _rank(str(admission.get("status"))) >= rank:
            return admission
        if time.monotonic() > deadline:
            raise StepFailed(
                f"the {SCHEMA} is still {admission.get('status')} after {bound:g} s: "
                f"{'; '.join(admission.get('reasons', []))}"
            )
        await anyio.sleep(POLL_S)


async def _watch_walk(demo: Demo, short: str) -> dict[str, Any]:
    """Print each status the concept is seen in until Canonical (bounded)."""
    started = time.monotonic()
    seen: str | None = None
    admission: dict[str, Any] = {}
    while time.monotonic() - started < WAIT_S:
        admission = await demo.admission(short)
        status = str(admission.get("status"))
        if status != seen:
            demo.say(f"{time.monotonic() - started:6.3f} s  seen {status}")
            seen = status
        if status == Status.CANONICAL.label:
            return admission
        await anyio.sleep(POLL_S)
    reasons = "; ".join(admission.get("reasons", []))
    raise StepFailed(f"the {SCHEMA} is still {seen} after {WAIT_S:g} s: {reasons}")


async def _wait_for_contradiction(demo: Demo) -> float:
    started = time.monotonic()
    while time.monotonic() - started < WAIT_S:
        if int((await demo.counters()).get("contradictions_listed", 0)) >= 1:
            return time.monotonic() - started
        await anyio.sleep(POLL_S)
    raise StepFailed(f"the daemon listed no contradiction within {WAIT_S:g} s")


def _rank(label: str) -> int:
    labels = [s.label for s in (Status.NONE, Status.CANDIDATE, Status.VENERABLE, Status.CANONICAL)]
    return labels.index(label) if label in labels else -1
