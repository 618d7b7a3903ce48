"""The keyword leg in PostgreSQL: a ``tsvector`` per concept, a GIN index, BM25 in SQL.

Both sides are tokenized in Python by the tokenizer the other stores use
(``index/keywords.py``: NFKD, diacritics dropped, casefolded, split on every
non-letter/number), so "CAFE resume" finds "Café résumé" with no ``unaccent``
extension, and the database's ``simple`` configuration only sees plain words.
A query is never tsquery syntax from the user: its terms (letters and numbers
only) are quoted lexemes joined with ``|``, the OR semantics of the FTS5 leg.

Ranking is FTS5's bm25 (k1 = 1.2, b = 0.75, idf = ln((N - df + 0.5) / (df + 0.5)),
at least 1e-6), so a rare exact name beats a common word as it does on SQLite;
``ts_rank`` has no idf. One statement: each term's df counted through the GIN
index, N and the average length from the session's running sums (kept by the
store's writes, migration 2), each candidate's tf from its tsvector positions.
Two differences from FTS5: N and the average are the session's (FTS5's are the
whole file's), and a tsvector keeps at most 256 positions of a lexeme.

Work is bounded: candidates come from the rarest terms first while the rarer
ones' matches stay under ``MAX_CANDIDATES``, and at most that many of them,
shortest first. A concept matching only the common terms of a query can then
be missed (tests/bench/pg_keywords.py measures what this costs).
CockroachDB: its documented full-text functions do not include ``unnest`` of a
tsvector, so that dialect keeps ``ts_rank`` (untested here).
"""

from __future__ import annotations

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

# The query's lexemes come from to_tsvector of its own terms, so they are spelled as
# the documents' are; quote_literal is safe on them (letters and numbers only).
BM25_SQL = f"""
WITH stats AS (
    SELECT kw_docs::float8 AS n, GREATEST(kw_length::float8 / GREATEST(kw_docs, 1), 1.0) AS avgdl
    FROM sessions WHERE name = %(s)s
), terms AS (
    SELECT u.lexeme AS term,
        (SELECT count(*) FROM concepts c WHERE c.session = %(s)s
         AND c.tsv @@ quote_literal(u.lexeme)::tsquery) AS df
    FROM unnest(to_tsvector('simple', %(t)s)) AS u
), weighted AS (
    SELECT t.term,
        GREATEST(ln(GREATEST((s.n - t.df + 0.5) / (t.df + 0.5), 1.0)), 1e-6) AS idf,
        sum(t.df) OVER (ORDER BY t.df, t.term ROWS UNBOUNDED PRECEDING) - t.df AS rarer
    FROM terms t CROSS JOIN stats s WHERE t.df > 0
), picked AS (
    SELECT to_tsquery('simple', string_agg(quote_literal(term), ' | ')) AS q
    FROM weighted WHERE rarer < %(cap)s
), candidates AS (
    SELECT c.id, c.tsv, c.kw_length FROM concepts c CROSS JOIN picked p
    WHERE c.session = %(s)s AND c.tsv @@ p.q
    ORDER BY c.kw_length, c.id LIMIT %(cap)s
)
SELECT c.id, sum(w.idf * u.tf * {K1 + 1}
    / (u.tf + {K1} * (1 - {B} + {B} * c.kw_length / s.avgdl))) AS score
FROM candidates c
CROSS JOIN LATERAL (SELECT lexeme, array_length(positions, 1) AS tf FROM unnest(c.tsv)) u
JOIN weighted w ON w.term = u.lexeme
CROSS JOIN stats s
GROUP BY c.id ORDER BY score DESC, c.id LIMIT %(n)s
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
        if self._db.dialect == "cockroach":
            params = {"q": tsquery_text(query), "s": self._session, "n": limit}
            rows = self._db.read(TS_RANK_SQL, params)
        else:
            params = {"t": " ".join(terms), "s": self._session, "n": limit, "cap": MAX_CANDIDATES}
            rows = self._db.read(BM25_SQL, params)
        return [(str(node_id), float(score)) for node_id, score in rows]
