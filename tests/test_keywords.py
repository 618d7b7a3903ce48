"""The keyword tokenizer, the FTS5 query builder and the in-RAM BM25."""

from __future__ import annotations

import math
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambo_core.index.keywords import (
    MAX_QUERY_TERMS,
    Bm25Index,
    fts5_query,
    query_terms,
    tokenize,
)


def test_tokenize_folds_case_and_diacritics_and_splits_on_punctuation() -> None:
    assert tokenize("Café-Résumé, naïve_ÉCOLE!") == ["cafe", "resume", "naive", "ecole"]
    assert tokenize("x1 2.5 ab'cd") == ["x1", "2", "5", "ab", "cd"]
    assert tokenize("Straße") == ["strasse"]
    assert tokenize("日本語 текст") == ["日本語", "текст"]
    assert tokenize("  ...  ") == []


def test_query_terms_dedupe_and_cap() -> None:
    assert query_terms("b a B a c") == ["b", "a", "c"]
    many = " ".join(f"t{i}" for i in range(MAX_QUERY_TERMS + 50))
    assert len(query_terms(many)) == MAX_QUERY_TERMS


def test_fts5_query_quotes_and_ors() -> None:
    assert fts5_query('lease NEAR(x) "y" -z a*') == '"lease" OR "near" OR "x" OR "y" OR "z" OR "a"'
    assert fts5_query("--- ** ::") is None
    assert fts5_query("") is None


@given(st.text())
def test_fts5_query_is_always_valid_fts5(text: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61 remove_diacritics 2')")
    conn.execute("INSERT INTO t(x) VALUES ('some text')")
    match = fts5_query(text)
    if match is None:
        assert query_terms(text) == []
    else:
        conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (match,)).fetchall()


# Latin letters with and without accents, digits, and separators: where both tokenizers agree
_ALIGNED = st.text(alphabet="abcXYZéÉüñçøÅ019 -_.,'\"()*:", max_size=40)


@given(_ALIGNED)
def test_tokenize_agrees_with_fts5_unicode61(text: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='unicode61 remove_diacritics 2')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, 'instance')")
    conn.execute("INSERT INTO t(x) VALUES (?)", (text,))
    fts_terms = [r[0] for r in conn.execute("SELECT term FROM v ORDER BY offset")]
    assert tokenize(text) == fts_terms


def test_bm25_scores_follow_the_formula() -> None:
    index = Bm25Index()
    index.add("d1", "lease lease heartbeat")
    index.add("d2", "lease")
    index.add("d3", "vector matrix search engine")
    n, avg = 3, (3 + 1 + 4) / 3
    idf_lease = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))

    def term(tf: int, dl: int) -> float:
        return tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * dl / avg))

    hits = dict(index.search("lease", 10))
    assert hits["d1"] == approx(idf_lease * term(2, 3))
    assert hits["d2"] == approx(idf_lease * term(1, 1))
    assert "d3" not in hits


def approx(value: float) -> object:
    return pytest.approx(value, rel=1e-12)


def test_bm25_ranks_rarer_terms_higher_and_breaks_ties_by_id() -> None:
    index = Bm25Index()
    for doc_id in ("c", "a", "b"):
        index.add(doc_id, "common words here")
    index.add("z", "common rare")
    hits = index.search("rare common", 10)
    assert hits[0][0] == "z"
    assert [d for d, _ in hits[1:]] == ["a", "b", "c"]
    assert index.search("rare common", 2) == hits[:2]
    assert index.search("rare", 0) == []
    assert index.search("!!!", 5) == []


def test_bm25_add_replaces_and_remove_forgets() -> None:
    index = Bm25Index()
    index.add("d1", "alpha beta")
    index.add("d2", "beta gamma")
    index.add("d1", "delta")  # re-adding replaces the old text
    assert [d for d, _ in index.search("alpha", 5)] == []
    assert [d for d, _ in index.search("delta", 5)] == ["d1"]
    index.remove("d2")
    index.remove("never-added")
    assert index.search("beta gamma", 5) == []
    assert len(index) == 1 and "d1" in index and "d2" not in index
    index.remove("d1")
    assert len(index) == 0 and index.search("delta", 5) == []
    assert index._postings == {} and index._total_len == 0


@given(st.lists(st.tuples(st.sampled_from("abcdef"), st.text(max_size=40)), max_size=30))
def test_bm25_remove_undoes_add(ops: list[tuple[str, str]]) -> None:
    index = Bm25Index()
    for doc_id, text in ops:
        index.add(doc_id, text)
    for doc_id, _ in ops:
        index.remove(doc_id)
    assert len(index) == 0 and index._postings == {} and index._total_len == 0


@given(st.text(max_size=200))
def test_bm25_search_never_errors_and_scores_are_positive(query: str) -> None:
    index = Bm25Index()
    index.add("d1", "the lease heartbeat renews every fifteen seconds")
    index.add("d2", "Café naïve résumé")
    for _, score in index.search(query, 5):
        assert score > 0
