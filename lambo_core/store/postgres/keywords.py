"""The keyword leg in PostgreSQL: a ``tsvector`` per concept, a GIN index, BM25 in SQL.

Both sides are tokenized in Python by the tokenizer the other stores use
(``index/keywords.py``: NFKD, diacritics dropped, casefolded, split on every
non-letter/number), so "CAFE resume" finds "Café résumé" with no ``unaccent``
extension, and the database's ``simple`` configuration only sees plain words.
A query is never tsquery syntax from the user: its terms (letters and numbers
only) are quoted lexemes joined with ``|``, the OR semantics of the FTS5 leg.

Ranking is FTS5's bm25 (k1 = 1.2, b = 0.75, idf = ln((N - df + 0.5) / (df + 0.5)),
at least 1e-6), so a rare exact name beats a common word as it does on SQLite;
``ts_rank`` has no idf. One statement: the matches read once through the GIN
index (as the ts_rank query read them), each term's df counted over them, N
and the average length from the session's running sums (kept by the store's
writes and deletes, migration 2), tf from the tsvector positions. Differences
from FTS5: N and the average are the session's (FTS5's are the whole file's),
and a tsvector keeps at most 256 positions of a lexeme.

Work is bounded: unnesting a tsvector for its tf is the costly part, so only the
``MAX_CANDIDATES`` matches with the highest upper bound (each matched term given
the most occurrences the text can hold) are scored exactly. A match left out
still belongs in the top n only when that many matches have a higher bound but
a lower exact score than it (tests/bench/pg_keywords.py measures what the bound
costs: nothing on its 30k-concept corpus).
CockroachDB: its documented full-text functions do not include ``unnest`` of a
tsvector, so that dialect keeps ``ts_rank`` (untested here).
"""

from __future__ import annotations

from functools import lru_cache

from ...index.keywords import K1, B, query_terms
from .connection import Database

#: PostgreSQL refuses a lexeme of 2 KB or more; such a "word" matches nothing anyway
MAX_LEXEME_BYTES = 2046
#: candidates scored per query at most (see the module docstring)
MAX_CANDIDATES = 2000

TSV_SQL = "to_tsvector('simple', %s)"

# the query written out twice (not a function in FROM): a form CockroachDB takes too
TS_RANK_SQL = (
    "SELECT id, ts_rank(tsv, to_tsquery('simple', %(q)s), 1) AS rank FROM concepts "
    "WHERE session = %(s)s AND tsv @@ to_tsquery('simple', %(q)s) "
    "ORDER BY rank DESC, id LIMIT %(n)s"
)


@lru_cache(maxsize=64)
def bm25_sql(terms: int) -> str:
    """The BM25 statement for a query of ``terms`` distinct terms (parameters: the ORed
    tsquery ``q``, each term ``t0``.. and its tsquery ``q0``.., session ``s``, bound
    ``cap``, limit ``n``).

    Every tsquery is a parameter, so the planner sees a constant and can use the GIN
    index (a tsquery computed inside the statement would scan the table). The matches
    are read once, as ts_rank's query reads them; df is counted over them."""
    each = range(terms)
    counts = ", ".join(
        f"count(*) FILTER (WHERE tsv @@ to_tsquery('simple', %(q{i})s))" for i in each
    )
    unpivot = ", ".join(f"(%(t{i})s::text, c.f{i + 1})" for i in each)
    # an upper bound of each match's BM25, cheap (no unnest): every matched term given
    # the most occurrences the text can hold, 1 + (tokens - distinct lexemes)
    guess = " + ".join(
        f"CASE WHEN tsv @@ to_tsquery('simple', %(q{i})s) "
        f"THEN (SELECT w.idf FROM weighted w WHERE w.term = %(t{i})s) ELSE 0 END"
        for i in each
    )
    return f"""
WITH stats AS (
    SELECT kw_docs::float8 AS n,
        GREATEST(kw_length::float8 / GREATEST(kw_docs, 1), 1.0) AS avgdl
    FROM sessions WHERE name = %(s)s
), hits AS MATERIALIZED (
    SELECT id, kw_length, tsv FROM concepts
    WHERE session = %(s)s AND tsv @@ to_tsquery('simple', %(q)s)
), terms AS (
    SELECT v.term, v.df FROM (SELECT ROW({counts}) AS f FROM hits) h,
    LATERAL (SELECT (h.f).*) c, LATERAL (VALUES {unpivot}) AS v(term, df)
), weighted AS MATERIALIZED (
    SELECT t.term,
        GREATEST(ln(GREATEST((s.n - t.df + 0.5) / (t.df + 0.5), 1.0)), 1e-6) AS idf
    FROM terms t CROSS JOIN stats s WHERE t.df > 0
), pool AS (
    SELECT id, dl, tsv FROM (
        SELECT id, kw_length::float8 AS dl, tsv,
            GREATEST(1 + kw_length - length(tsv), 1)::float8 AS most
        FROM hits
    ) h
    ORDER BY ({guess}) * most / (most + {K1}::float8 * ({1 - B}::float8 + {B}::float8 * dl
        / (SELECT avgdl FROM stats))) DESC, id
    LIMIT %(cap)s
)
SELECT p.id, sum(w.idf * u.tf * {K1 + 1}::float8
    / (u.tf + {K1}::float8 * ({1 - B}::float8 + {B}::float8 * p.dl / s.avgdl))) AS score
FROM pool p
CROSS JOIN LATERAL (
    SELECT lexeme, array_length(positions, 1)::float8 AS tf FROM unnest(p.tsv)
) u
JOIN weighted w ON w.term = u.lexeme
CROSS JOIN stats s
GROUP BY p.id ORDER BY score DESC, p.id LIMIT %(n)s
"""


def safe_terms(query: str) -> list[str]:
    """The query's distinct terms that PostgreSQL can hold as lexemes."""
    return [t for t in query_terms(query) if len(t.encode()) <= MAX_LEXEME_BYTES]


def tsquery_text(query: str) -> str | None:
    """A safe tsquery for user text: every term a quoted lexeme, ORed; None when no terms."""
    terms = safe_terms(query)
    if not terms:
        return None
    return " | ".join(f"'{term}'" for term in terms)  # terms hold no quote or backslash


class PgKeywordIndex:
    """One session's view of the tsvector index."""

    def __init__(self, db: Database, session: str) -> None:
        self._db = db
        self._session = session

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """[(node id, score)] restricted to the session, best first, ties by id."""
        terms = safe_terms(query)
        if not terms or limit <= 0:
            return []
        params: dict[str, object] = {"s": self._session, "n": limit, "q": tsquery_text(query)}
        if self._db.dialect == "cockroach":
            rows = self._db.read(TS_RANK_SQL, params)
        else:
            params["cap"] = MAX_CANDIDATES
            for i, term in enumerate(terms):
                params[f"t{i}"], params[f"q{i}"] = term, f"'{term}'"
            rows = self._db.read(bm25_sql(len(terms)), params)
        return [(str(node_id), float(score)) for node_id, score in rows]
