"""The Solo bar as last taken: a record the session index keeps for its graph (``solo.py``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ScoreTable:
    """The Solo bar (a percentile of every concept's base score) and the terms it used."""

    version: int  # the graph's version when taken
    at: float
    size: int  # concepts scored
    bar: float  # the configured percentile of the scores (inf for an empty session)
    scores: dict[str, float]  # each concept's score when the bar was taken
    max_degree: int  # the session-wide terms the scores were taken with
    interactions: int
