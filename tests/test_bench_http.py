"""The HTTP load bench's own parts (tests/bench/http.py), without a serve: its texts are all
distinct (no derive repeats a seed concept or another derive), its mix is four recalls to
one derive, and the limits it writes are the ones a serve reads from lambo.toml."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from pathlib import Path

import pytest

from lambo_core.config import load_config
from lambo_core.config_schema import KEYS_BY_DOTTED
from tests.bench import http as bench


def test_every_fact_is_distinct_and_there_are_no_more_than_the_combinations() -> None:
    texts = {bench.fact(k) for k in range(bench.COMBINATIONS)}
    assert len(texts) == bench.COMBINATIONS
    # distinct before the ticket number too: the stride walks every combination once
    assert len({t.rsplit(" (ticket", 1)[0] for t in texts}) == bench.COMBINATIONS
    for outside in (-1, bench.COMBINATIONS):
        with pytest.raises(ValueError, match="distinct facts"):
            bench.fact(outside)


def test_neighbouring_facts_differ_in_their_subject() -> None:
    # seeds are written five to an interaction: neighbours should not read alike
    subjects = [next(s for s in bench.SUBJECTS if bench.fact(k).startswith(s)) for k in range(50)]
    assert all(a != b for a, b in itertools.pairwise(subjects))


def test_no_derive_repeats_a_seed_concept_or_another_derive() -> None:
    concepts, clients, per_client = 10_000, 32, 200
    seeds = {bench.fact(k) for k in range(concepts)}
    derived = [
        bench.derived_fact(concepts, clients, c, j)
        for c in range(clients)
        for j in range(per_client)
    ]
    assert len(set(derived)) == len(derived)
    assert not seeds & set(derived)


def test_four_recalls_to_one_derive_for_each_client_and_spread_across_clients() -> None:
    for client in range(32):
        tools = Counter(bench.tool_for(client, j) for j in range(200))
        assert tools == {bench.RECALL: 160, bench.DERIVE: 40}
    first_derive = [
        next(j for j in range(10) if bench.tool_for(c, j) == bench.DERIVE) for c in range(5)
    ]
    assert sorted(first_derive) == [0, 1, 2, 3, 4]  # not every client derives at once


def test_questions_are_seeded_and_end_in_a_question_mark() -> None:
    one = [bench.question(random.Random(3)) for _ in range(3)]
    again = [bench.question(random.Random(3)) for _ in range(3)]
    assert one == again
    assert all(q.endswith("?") and "{" not in q for q in one)


def test_the_shipped_limits_are_the_schemas() -> None:
    for name, value in bench.DEFAULT_LIMITS.items():
        assert value == KEYS_BY_DOTTED[f"serve.{name}"].default
    assert bench.limits_for("default", 10_000, 64) == bench.DEFAULT_LIMITS


def _home(tmp_path: Path) -> Path:
    config = tmp_path / "config" / "lambo.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[embedder]\nmodel = "minilm"\nthreads = 1\n')
    return tmp_path


def test_raised_limits_are_written_where_a_serve_reads_them(tmp_path: Path) -> None:
    home = _home(tmp_path)
    limits = bench.limits_for("raised", 10_000, 40)
    assert limits == {"per_credential_rps": 10_000, "per_session_rps": 10_000,
                      "max_live_sessions": 40}  # fmt: skip
    bench.write_limits(home, "raised", limits)
    config = load_config(env={"LAMBO_HOME": str(home)}, cwd=tmp_path)
    assert config.get("serve.per_credential_rps") == 10_000.0
    assert config.get("serve.per_session_rps") == 10_000.0
    assert config.get("serve.max_live_sessions") == 40
    assert config.get("embedder.model") == "minilm"  # what was there stays


def test_default_limits_write_nothing(tmp_path: Path) -> None:
    home = _home(tmp_path)
    before = (home / "config" / "lambo.toml").read_text()
    bench.write_limits(home, "default", bench.limits_for("default", 10_000, 32))
    assert (home / "config" / "lambo.toml").read_text() == before
    config = load_config(env={"LAMBO_HOME": str(home)}, cwd=tmp_path)
    assert config.source("serve.per_credential_rps") == "default"


def test_the_throttle_line_says_above_or_below_the_shipped_rate() -> None:
    limit = bench.DEFAULT_LIMITS["per_session_rps"]
    assert bench.throttle_line(limit + 0.5).endswith("is above it")
    assert bench.throttle_line(limit).endswith("is below it")


def test_the_tally_counts_http_answers_of_400_and_over_as_errors() -> None:
    tally = bench.Tally()
    tally.statuses.update({"POST 200": 5, "POST 202": 1, "DELETE 429": 2, "POST 413": 1})
    assert tally.http_errors == 3
    tally.add_time(bench.RECALL, "legacy", 0.01)
    tally.add_time(bench.RECALL, "auto", 0.02)
    tally.add_time(bench.DERIVE, "auto", 0.03)
    assert sorted(tally.of_tool(bench.RECALL)) == [0.01, 0.02]
    assert tally.calls == 3
