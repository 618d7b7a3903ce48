"""`lambo canon suspected`, `lambo session verify`, `lambo session list`: read a store, print.

Register with ``cli.add_command(canon_group)`` and ``cli.add_command(session_group)``.
Each reads the store directly and writes nothing, so it takes no lease and
runs beside a serve that holds the session (SQLite readers never wait for the
writer). A store file that does not exist is refused rather than created.

- ``canon suspected`` (spec: "Possibly superseded, not declared": "Only new
  writes are flagged; lambo canon suspected reports the pairs an existing
  store already holds"): every pair the write-time rule would flag, newest
  first, each marked ``recorded`` when the store already holds its
  SUPERSEDES_SUSPECTED edge. The rule is the write path's
  (``supersession.flags``): a near vector match at
  or above the merge threshold among each concept's 8 nearest, of the same
  type (logic, constraint or observation), refused a merge because an
  identifier or number differs, differing in one value after the predicate,
  dated apart, and with no against or depends_on between the two. The
  threshold is ``[embedder] merge_threshold``, else the installed model's
  calibrated one, else 0.85; ``--threshold`` overrides it. Every concept is
  compared with every other of its type, so the cost grows with the square
  of the session's size.
- ``session verify``: integrity (edges whose ends are gone, a status that
  disagrees with the concept's last canonization event, more Canonical
  concepts than the budget) and the annotation kinds recall would put on the
  session's concepts now, each counted with up to three example ids:
  ``contradiction``, ``contradicts``, ``rests_on_contradicted``,
  ``possibly_superseded`` (whether or not the line is shown: verify reports
  the kind either way) and ``superseded``. Exit 1 when an integrity check
  fails.
- ``session list``: the store's sessions, their embedding contract, lease
  holder and garbage-collection clock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, TypeVar

import click

from .canon import CanonRules, DemotionLog
from .cli_flags import store_option
from .config import Config, load_config, store_flags
from .contradiction import ContradictionInfo, is_contradicted
from .errors import ConfigError, ParameterError
from .index.graph import SessionGraph
from .matching import resolve_merge_threshold
from .model import EdgeType, Status, short_id
from .store import open_store
from .store.base import Store
from .supersession import linked_either_way, suspected_pairs
from .text import format_rfc3339, show_safely

F = TypeVar("F", bound=Callable[..., Any])

EXAMPLES = 3  # example ids per annotation kind
SNIPPET_CHARS = 80
PAIR_ROWS = 200  # pairs printed by default (--limit)

KINDS = (
    "contradiction",
    "contradicts",
    "rests_on_contradicted",
    "possibly_superseded",
    "superseded",
)


# =====================================================================================
# canon suspected
# =====================================================================================


def merge_threshold(config: Config) -> tuple[float, str]:
    """The threshold the write path would use, and where it came from."""
    configured = float(config.get("embedder.merge_threshold"))
    if configured > 0:
        return resolve_merge_threshold(configured, None, None)
    try:
        from .embed.installed import resolve_model_dir
        from .embed.manifest import ModelManifest

        manifest = ModelManifest.read(resolve_model_dir(config))
    except Exception:  # no model installed: the uncalibrated default, said so
        manifest = None
    if manifest is None:
        return resolve_merge_threshold(configured, None, None)
    return resolve_merge_threshold(configured, manifest.merge_threshold, manifest.name)


# =====================================================================================
# session verify
# =====================================================================================


@dataclass
class VerifyReport:
    """What ``session verify`` found: integrity problems and annotation kinds."""

    session: str
    concepts: int
    edges: int
    problems: list[str] = field(default_factory=list)
    kinds: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})

    def as_dict(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "concepts": self.concepts,
            "edges": self.edges,
            "ok": not self.problems,
            "problems": self.problems,
            "annotation_kinds": {
                kind: {"count": len(ids), "examples": sorted(ids)[:EXAMPLES]}
                for kind, ids in self.kinds.items()
            },
        }


def verify_session(
    store: Store, name: str, rules: CanonRules, now: float, graph: SessionGraph | None = None
) -> VerifyReport:
    """Check one session's graph and count the annotation kinds recall would show now."""
    graph = graph or SessionGraph.load(store, name)
    report = VerifyReport(name, len(graph), graph.edge_count)

    # integrity
    dangling = [
        e for e in graph.iter_edges() if not _is_node(graph, e.src) or not _is_node(graph, e.dst)
    ]
    if dangling:
        shown = ", ".join(f"{e.edge_type.value} {e.src} -> {e.dst}" for e in dangling[:EXAMPLES])
        report.problems.append(f"{len(dangling)} edge(s) name a node that is gone: {shown}")
    events = store.canon_events(name)
    last_to: dict[str, Status] = {}
    for event in events:
        last_to[event.node_id] = event.to_status
    mismatched = [
        c for c in graph.iter_concepts() if last_to.get(c.id, Status.NONE) is not c.status
    ]
    if mismatched:
        shown = ", ".join(
            f"{c.id} is {c.status.label}, its last event says "
            f"{last_to.get(c.id, Status.NONE).label}"
            for c in mismatched[:EXAMPLES]
        )
        report.problems.append(
            f"{len(mismatched)} concept(s) hold a status no canonization event gave them: {shown}"
        )
    canonical = sum(1 for c in graph.iter_concepts() if c.status is Status.CANONICAL)
    if canonical > rules.canonical_budget:
        report.problems.append(
            f"{canonical} Canonical concepts, over the budget of {rules.canonical_budget}"
        )

    # annotation kinds
    firing: dict[str, ContradictionInfo] = {}
    for concept in graph.iter_concepts():
        if graph.edges_in(concept.id, (EdgeType.CONTRADICTS,)):
            info = is_contradicted(graph, concept.id, now, rules.edge_min_age_s)
            if info is not None:
                firing[concept.id] = info
    report.kinds["contradiction"] = list(firing)
    report.kinds["contradicts"] = sorted({info.by for info in firing.values()})
    rests: list[str] = []
    possibly: list[str] = []
    for concept in graph.iter_concepts():
        for edge in graph.edges_out(concept.id, (EdgeType.DEPENDENCY,)):
            cited = edge.dst
            if cited in firing and graph.edge(concept.id, cited, EdgeType.CONTRADICTS) is None:
                rests.append(concept.id)
                break
        for edge in graph.edges_in(concept.id, (EdgeType.SUPERSEDES_SUSPECTED,)):
            if edge.src in graph and not linked_either_way(graph, edge.src, concept.id):
                possibly.append(concept.id)
                break
    report.kinds["rests_on_contradicted"] = rests
    report.kinds["possibly_superseded"] = possibly
    log = DemotionLog.rebuild(events, graph, rules)
    report.kinds["superseded"] = [
        c.id
        for c in graph.iter_concepts()
        if c.status is not Status.CANONICAL
        and (d := log.get(c.id)) is not None
        and d.reason == "superseded"
    ]
    return report


def _is_node(graph: SessionGraph, node_id: str) -> bool:
    return node_id in graph or graph.is_interaction(node_id)


def render_verify(report: VerifyReport) -> str:
    lines = [
        f"session {report.session}: {report.concepts} concepts, {report.edges} edges; "
        + ("ok" if not report.problems else f"{len(report.problems)} problem(s)")
    ]
    lines += [f"problem: {p}" for p in report.problems]
    lines.append("annotation kinds (concepts recall would annotate now):")
    for kind in KINDS:
        ids = sorted(report.kinds[kind])
        examples = ", ".join(short_id(i) for i in ids[:EXAMPLES])
        more = f" (e.g. {examples}{', …' if len(ids) > EXAMPLES else ''})" if ids else ""
        lines.append(f"  {kind}: {len(ids)}{more}")
    return "\n".join(lines)


# =====================================================================================
# session list
# =====================================================================================


def list_sessions(store: Store, now: float) -> list[dict[str, Any]]:
    out = []
    for record in store.list_sessions():
        lease = store.get_lease(record.name)
        held = lease is not None and lease.expires_at > now
        row: dict[str, Any] = {
            "session": record.name,
            "created_at": format_rfc3339(record.created_at),
            "embedding_contract": dict(record.embedding_contract)
            if record.embedding_contract
            else None,
            "held_by": lease.holder if held and lease is not None else None,
            "lease_expires_at": format_rfc3339(lease.expires_at)
            if held and lease is not None
            else None,
            "last_gc_at": format_rfc3339(record.last_gc_at) if record.last_gc_at else None,
            "mutation_count": record.mutation_count,
        }
        out.append(row)
    return out


def render_list(rows: Iterable[dict[str, Any]]) -> str:
    lines = []
    for row in rows:
        contract = row["embedding_contract"]
        stamped = (
            f"{contract.get('kind')}/{contract.get('model')}/{contract.get('dim')}"
            if contract
            else "not stamped"
        )
        held = f"held by {row['held_by']}" if row["held_by"] else "not held"
        lines.append(
            f"{row['session']}: created {row['created_at']}, embedding {stamped}, {held}, "
            f"{row['mutation_count']} mutations, last gc {row['last_gc_at'] or 'never'}"
        )
    return "\n".join(lines) if lines else "no sessions in this store"


# =====================================================================================
# the commands
# =====================================================================================


def _reports_errors(fn: F) -> F:
    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from .cli import reports_errors

        return reports_errors(fn)(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _config(ctx: click.Context, store: str | None) -> Config:
    root = ctx.find_root().obj
    config_path = getattr(root, "config_path", None)
    return load_config(
        config_path=config_path if isinstance(config_path, str) else None,
        flags=store_flags(store),
    )


def _open(config: Config) -> Store:
    if config.store_kind == "sqlite":
        if not config.store_path.is_file():
            raise ConfigError(f"no store at {config.store_path}; nothing was read")
        return open_store("sqlite", config.store_path)
    return open_store(config.store_kind, None)


def _known_session(store: Store, name: str) -> None:
    if store.get_session(name) is None:
        known = ", ".join(r.name for r in store.list_sessions()[:10]) or "none"
        raise ParameterError(f"no session named {name!r} in this store (sessions: {known})")


_store_option = store_option("the SQLite file to read, or `memory`")
_json_option = click.option("--json", "as_json", is_flag=True, help="print JSON")


@click.group("canon")
def canon_group() -> None:
    """Canonization and supersession, read from a store."""


@canon_group.command("suspected")
@click.option("--session", required=True, help="the session to read")
@_store_option
@_json_option
@click.option("--threshold", type=click.FloatRange(0.0, 1.0), help="cosine for a near match")
@click.option("--limit", type=click.IntRange(min=1), default=PAIR_ROWS, show_default=True)
@click.pass_context
@_reports_errors
def suspected_cmd(
    ctx: click.Context,
    session: str,
    store: str | None,
    as_json: bool,
    threshold: float | None,
    limit: int,
) -> None:
    """Pairs where a newer concept may replace an older one, not declared (#198).

    \b
    Example:
      lambo canon suspected --session demo
    """
    from .index.session_index import SessionIndex

    config = _config(ctx, store)
    held = _open(config)
    try:
        _known_session(held, session)
        index = SessionIndex.open(held, session)
    finally:
        held.close()
    source = "--threshold"
    if threshold is None:
        threshold, source = merge_threshold(config)
    pairs = suspected_pairs(index.graph, index.vectors, threshold)
    if as_json:
        payload = {
            "session": session,
            "threshold": threshold,
            "threshold_source": source,
            "total": len(pairs),
            "pairs": [p.as_dict() for p in pairs[:limit]],
        }
        click.echo(json.dumps(payload, indent=2, ensure_ascii=False))
        return
    if index.vectors is None or len(index.vectors) == 0:
        click.echo(f"session {session}: no stored vectors, so no pair can be read")
        return
    recorded = sum(p.recorded for p in pairs)
    click.echo(
        f"session {session}: {len(pairs)} possibly superseded pair(s) at cosine >= "
        f"{threshold:g} ({source}); {recorded} already recorded"
    )
    for pair in pairs[:limit]:
        mark = "recorded" if pair.recorded else "not recorded"
        click.echo(
            f'{short_id(pair.newer.id)} "{show_safely(pair.newer.content, SNIPPET_CHARS)}" '
            f"may replace {short_id(pair.older.id)} "
            f'"{show_safely(pair.older.content, SNIPPET_CHARS)}" '
            f"[{pair.newer.concept_type.label}] (cosine {pair.cosine:.4f}, {mark})"
        )
    if len(pairs) > limit:
        click.echo(f"… {len(pairs) - limit} more (--limit)")


@click.group("session")
def session_group() -> None:
    """Sessions in a store: list them, verify one."""


@session_group.command("verify")
@click.option("--session", required=True, help="the session to verify")
@_store_option
@_json_option
@click.pass_context
@_reports_errors
def verify_cmd(ctx: click.Context, session: str, store: str | None, as_json: bool) -> None:
    """Check a session's graph and report the annotation kinds on its concepts.

    \b
    Example:
      lambo session verify --session demo
    """
    config = _config(ctx, store)
    held = _open(config)
    try:
        _known_session(held, session)
        report = verify_session(held, session, CanonRules.from_config(config), time.time())
    finally:
        held.close()
    if as_json:
        click.echo(json.dumps(report.as_dict(), indent=2, ensure_ascii=False))
    else:
        click.echo(render_verify(report))
    if report.problems:
        ctx.exit(1)


@session_group.command("list")
@_store_option
@_json_option
@click.pass_context
@_reports_errors
def list_cmd(ctx: click.Context, store: str | None, as_json: bool) -> None:
    """The sessions a store holds.

    \b
    Example:
      lambo session list
    """
    config = _config(ctx, store)
    held = _open(config)
    try:
        rows = list_sessions(held, time.time())
    finally:
        held.close()
    if as_json:
        click.echo(json.dumps(rows, indent=2, ensure_ascii=False))
    else:
        click.echo(render_list(rows))
