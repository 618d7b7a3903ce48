"""Solo's score gate: the bar (a percentile of every concept's base score) and a concept's terms.

Spec: lambo_inspect's admission section (the ``solo`` part). The bar is cached on the
session index (``SessionIndex.score_table``), the owner of the graph it was taken from.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..index.graph import SessionGraph
from ..model import Concept
from ..scoring import BaseParts, base_parts, bulk_scores
from .locking import held_when
from .solo_table import ScoreTable

if TYPE_CHECKING:
    from ..session import Session

SOLO_EXACT_MAX = 20_000  # up to this many concepts the bar is taken afresh at every change
SOLO_BAR_MAX_AGE_S = 600.0  # past it, a bar is reused this long ...
SOLO_BAR_MAX_DRIFT = 0.01  # ... while the session's size moved by at most this share
SCREEN_EPSILON = 1e-9  # the screen never drops a score the gate would pass


def solo_parts(
    table: ScoreTable, session: Session, graph: SessionGraph, concept: Concept, now: float
) -> BaseParts:
    """One concept's score terms now, with the table's session-wide terms (lock held)."""
    return base_parts(
        graph,
        concept,
        now,
        max_degree=table.max_degree,
        interactions=table.interactions,
        pending_access=session.access_counts.pending(concept.id),
    )


def _fresh_enough(table: ScoreTable, version: int, size: int, now: float) -> bool:
    if table.version == version and table.at == now:
        return True
    if size <= SOLO_EXACT_MAX or not table.at <= now < table.at + SOLO_BAR_MAX_AGE_S:
        return False
    return abs(size - table.size) <= SOLO_BAR_MAX_DRIFT * table.size


def score_table(
    session: Session, now: float, percentile: float, *, writer: bool = False
) -> ScoreTable:
    """The Solo bar: the ``percentile`` of every concept's base score (``scoring.bulk_scores``).

    Up to ``SOLO_EXACT_MAX`` concepts it is taken again at every change of the
    graph. Past that one pass costs about a second at 100k concepts, so a bar
    is reused for up to ``SOLO_BAR_MAX_AGE_S`` while the session's size stays
    within ``SOLO_BAR_MAX_DRIFT`` of the size it was taken at; each concept's
    own score is always taken afresh. One pass over the adjacency, under the
    index lock unless ``writer`` says the caller is the session's writer thread.
    """
    index = session.index
    with index.lock:
        graph = index.graph
        version, size = graph.version, len(graph)
        cached = index.score_table
        if cached is not None and _fresh_enough(cached, version, size, now):
            return cached
    with held_when(index.lock, not writer):
        scores, max_degree, interactions = bulk_scores(session, graph, now)
    values = np.fromiter(scores.values(), dtype=np.float64, count=len(scores))
    bar = float(np.percentile(values, percentile)) if len(values) else math.inf
    table = ScoreTable(version, now, len(values), bar, scores, max_degree, interactions)
    with index.lock:
        index.score_table = table
    return table
