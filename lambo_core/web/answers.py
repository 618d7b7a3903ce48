"""What each /api endpoint answers, read from the view's current load through the paths the
tools use: recall through ``recall``, inspect and the graph through ``run_inspect``, the
stats through the figures ``lambo_stats`` reports that the store holds.

The figures only the hub holds in RAM (its write queue's flow, the writer's lag, the
daemon's counters, the ledger's) cannot be read here; /api/stats names each one under
``absent`` with the reason, rather than show a zero that would read as a measurement.
"""

from __future__ import annotations

import time
from typing import Any

from ..errors import ReferenceRefused
from ..gc.sweep import gc_stats
from ..inspect import SHOWN_FOCUS_CHARS, pillar_ids, run_inspect
from ..model import IntentState, Status
from ..recall import Ranking, RecallDefaults, recall
from ..text import format_rfc3339, show_safely
from ..version import __version__
from .events import last_write_at
from .view import Loaded, ReadOnlyView

AGENT = "lambo-web"  # the agent id the window's reads go under (it writes nothing)

HUB_ONLY = "held in the serving hub's RAM; this window reads the store and holds no hub"
ABSENT: dict[str, str] = {
    "flush_lag_ms": HUB_ONLY,
    "dead_lettered": HUB_ONLY,
    "degraded": HUB_ONLY,
    "write_queue_accepted": HUB_ONLY,
    "write_queue_dropped": HUB_ONLY,
    "write_queue_replayed": HUB_ONLY,
    "write_queue_replay_owed": HUB_ONLY,
    "canonization_cycles": "the daemon's counter, kept by the process that runs it",
    "canonization_promotions": (
        "the daemon's counter; /api/stats gives the stored events' count as "
        "recorded_promotions instead"
    ),
    "canonization_demotions": (
        "the daemon's counter; /api/stats gives the stored events' count as "
        "recorded_demotions instead"
    ),
    "embedder_state": "the serving process's model; this window's own is in /api/session",
    "ledger_*": "kept by a serve started with --ledger",
}


class Answers:
    """The endpoints' bodies for one view."""

    def __init__(self, view: ReadOnlyView) -> None:
        self.view = view
        config = view.config
        self._defaults = RecallDefaults.from_config(config)
        self._ranking = Ranking.from_config(config)
        self._policy = view.rules.policy.capitalize()
        self.started_at = time.time()

    # -- session, stats, pulse -----------------------------------------------------------
    def session(self) -> dict[str, Any]:
        view = self.view
        record = view.store.get_session(view.name)
        lease = view.store.get_lease(view.name)
        held = lease is not None and lease.expires_at > time.time()
        return {
            "session": view.name,
            "store_kind": view.store.kind,
            "version": __version__,
            "read_only": True,
            "created_at": format_rfc3339(record.created_at) if record is not None else None,
            "embedding_contract": dict(record.embedding_contract)
            if record is not None and record.embedding_contract
            else None,
            "held_by": lease.holder if held and lease is not None else None,
            "recall_mode": "hybrid" if view.plan.lazy is not None else "keyword-only",
            "recall_note": view.keyword_note
            or (view.plan.problem.render() if view.plan.problem is not None else None),
            "promotion_policy": self._policy,
            "reloads": view.reloads,
        }

    def stats(self) -> dict[str, Any]:
        loaded = self.view.current()
        session = loaded.session
        index = session.index
        with index.lock:
            graph = index.graph
            concepts = len(graph)
            interactions = graph.interaction_count
            payload: dict[str, Any] = {
                "session": session.name,
                "node_count": concepts + interactions,
                "concept_count": concepts,
                "edge_count": graph.edge_count,
                "interaction_count": interactions,
                "canonical_count": graph.status_count(Status.CANONICAL),
                "status_counts": {s.label: graph.status_count(s) for s in Status},
            }
        store = self.view.store
        states = {s.value: 0 for s in IntentState}
        for intent in store.intents(session.name):
            states[intent.state.value] += 1
        events = store.canon_events(session.name)
        ranks = list(Status)
        promotions = sum(ranks.index(e.to_status) > ranks.index(e.from_status) for e in events)
        record = store.get_session(session.name)
        payload.update(
            {
                "promotion_policy": self._policy,
                # the store's intents: what a hub's write queue answers from RAM
                "write_queue_outstanding": states[IntentState.PENDING.value],
                "write_queue_applied": states[IntentState.APPLIED.value],
                "write_queue_failed": states[IntentState.FAILED.value],
                "recorded_promotions": promotions,
                "recorded_demotions": len(events) - promotions,
                "mutation_count": record.mutation_count if record is not None else 0,
                "embedding_contract": dict(session.contract),
                "gc": gc_stats(session),
                "absent": ABSENT,
            }
        )
        return payload

    def pulse(self) -> dict[str, Any]:
        """The page's status bar: counts, the last write, health in a word."""
        loaded = self.view.current()
        session = loaded.session
        with session.index.lock:
            graph = session.index.graph
            counts = {
                "concepts": len(graph),
                "edges": graph.edge_count,
                "interactions": graph.interaction_count,
                "canonical": graph.status_count(Status.CANONICAL),
            }
        store = self.view.store
        pending = len(store.pending_intents(session.name))
        failed = sum(1 for i in store.intents(session.name) if i.state is IntentState.FAILED)
        last = last_write_at(store, session.name)
        lease = store.get_lease(session.name)
        held = lease is not None and lease.expires_at > time.time()
        problems = []
        if failed:
            problems.append(f"{failed} write(s) failed")
        if pending and not held:
            problems.append(f"{pending} write(s) pending and no serve holds the session")
        return {
            "session": session.name,
            **counts,
            "pending_writes": pending,
            "failed_writes": failed,
            "last_write_at": format_rfc3339(last) if last is not None else None,
            "served": held,
            "health": "ok" if not problems else "attention",
            "problems": problems,
            "loaded_at": format_rfc3339(loaded.loaded_at),
        }

    # -- recall, inspect, graph ----------------------------------------------------------
    def recall(self, query: str, top_k: int | None) -> dict[str, Any]:
        loaded = self.view.current()
        args: dict[str, Any] = {"agent_id": AGENT, "query": query}
        if top_k is not None:
            args["top_k"] = top_k
        result = recall(
            loaded.session,
            args,
            defaults=self._defaults,
            ranking=self._ranking,
            canon_history=loaded.history,
        )
        return {
            "query": query,
            "context": result.context,
            "warnings": result.warnings,
            # each hit with its annotations (kind, line, ...) and fusion, as the spec has
            # /api/recall's hits[].annotations
            "hits": result.annotated_hits(),
        }

    def inspect(self, focus: str, depth: int | None = None) -> dict[str, Any]:
        text, structured = self._inspect(self.view.current(), focus, depth)
        return {"text": text, **structured}

    def graph(self, focus: str | None, depth: int) -> dict[str, Any]:
        """The focus's neighbourhood as nodes and edges (inspect's walk, its caps); with no
        focus, the session's largest pillar's (an empty graph for an empty session)."""
        loaded = self.view.current()
        if focus is None:
            pillars = pillar_ids(loaded.session)
            if not pillars:
                return {"focus": None, "depth": depth, "nodes": [], "edges": [], "truncated": False}
            focus = pillars[0]
        _, found = self._inspect(loaded, focus, depth)
        graph = loaded.session.index.graph
        nodes = [
            {
                "id": found["node_id"],
                "label": found["content"],
                "concept_type": found["concept_type"],
                "status": found["status"],
                "hop": 0,
                "blast_radius": found["blast_radius"],
            }
        ]
        with loaded.session.index.lock:
            for n in found["neighbours"]:
                concept = graph.concept(n["node_id"])
                nodes.append(
                    {
                        "id": n["node_id"],
                        "label": n["label"],
                        "concept_type": n["concept_type"],
                        "status": concept.status.label if concept is not None else None,
                        "hop": n["hop"],
                    }
                )
        shown = {n["id"] for n in nodes}
        edges = [
            {
                "source": e["src"],
                "target": e["dst"],
                "edge_type": e["edge_type"],
                "weight": e["weight"],
            }
            for e in found["edges"]
            if e["src"] in shown and e["dst"] in shown
        ]
        return {
            "focus": found["node_id"],
            "depth": depth,
            "nodes": nodes,
            "edges": edges,
            "truncated": bool(found.get("neighbours_truncated") or found.get("edges_truncated")),
        }

    def _inspect(self, loaded: Loaded, focus: str, depth: int | None) -> tuple[str, dict[str, Any]]:
        args: dict[str, Any] = {"agent_id": AGENT, "focus": focus}
        if depth is not None:
            args["depth"] = depth
        try:
            return run_inspect(
                loaded.session,
                args,
                promotion_policy=self._policy,
                edge_min_age=self.view.rules.edge_min_age_s,
                canon_history=loaded.history,
            )
        except ReferenceRefused as exc:
            # the tool's refusal quotes the focus; the window's never repeats what was sent
            quoted = f'focus "{show_safely(focus, SHOWN_FOCUS_CHARS)}"'
            raise ReferenceRefused(exc.message.replace(quoted, "the focus", 1)) from None
