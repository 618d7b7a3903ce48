"""The keyword leg in PostgreSQL: a ``tsvector`` per concept, a GIN index, ``ts_rank``.

Both sides are tokenized in Python by the tokenizer the other stores use
(``index/keywords.py``: NFKD, diacritics dropped, casefolded, split on every
non-letter/number), so "CAFE resume" finds "Café résumé" with no ``unaccent``
extension, and the database's ``simple`` configuration only sees plain words.
A query is never tsquery syntax from the user: its terms (letters and numbers
only) are quoted lexemes joined with ``|``, the OR semantics of the FTS5 leg.
Ranking is ``ts_rank`` with length normalisation 1 (rank / (1 + log length)),
close to BM25's order on short texts: more occurrences and shorter texts first.
"""

from __future__ import annotations

from ...index.keywords import query_terms, tokenize
from .connection import Database

#: PostgreSQL refuses a lexeme of 2 KB or more; such a "word" matches nothing anyway
MAX_LEXEME_BYTES = 2046

TSV_SQL = "to_tsvector('simple', %s)"


def tsv_text(content: str) -> str:
    """What a concept's tsvector is built from: its folded terms, spaced."""
    return " ".join(tokenize(content))


def tsquery_text(query: str) -> str | None:
    """A safe tsquery for user text: every term a quoted lexeme, ORed; None when no terms."""
    terms = [t for t in query_terms(query) if len(t.encode()) <= MAX_LEXEME_BYTES]
    if not terms:
        return None
    return " | ".join(f"'{term}'" for term in terms)  # terms hold no quote or backslash


class PgKeywordIndex:
    """One session's view of the tsvector index."""

    def __init__(self, db: Database, session: str) -> None:
        self._db = db
        self._session = session

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """[(node id, rank)] restricted to the session, best first, ties by id."""
        text = tsquery_text(query)
        if text is None or limit <= 0:
            return []
        rows = self._db.read(
            "SELECT id, ts_rank(tsv, q, 1) AS rank "
            "FROM concepts, to_tsquery('simple', %s) AS q "
            "WHERE session = %s AND tsv @@ q ORDER BY rank DESC, id LIMIT %s",
            (text, self._session, limit),
        )
        return [(str(node_id), float(rank)) for node_id, rank in rows]
