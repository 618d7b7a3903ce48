"""Keyword search: the shared tokenizer, FTS5 query building, and an in-RAM BM25.

The tokenizer follows SQLite FTS5's ``unicode61 remove_diacritics 2`` closely
(not byte-for-byte): NFKD, drop combining marks, casefold, and split on every
character that is not a letter, a number or private-use. Both stores turn a
query into terms with ``query_terms``, so the same text asks the same question
of FTS5 and of ``Bm25Index``.
"""

from __future__ import annotations

import math
import unicodedata
from collections import Counter

# A 16 KB recall query can hold thousands of words; past this many distinct
# terms the extra OR branches cost time and change nothing useful.
MAX_QUERY_TERMS = 256

K1 = 1.2
B = 0.75


def _is_token_char(ch: str) -> bool:
    category = unicodedata.category(ch)
    return category[0] in "LN" or category == "Co"


def tokenize(text: str) -> list[str]:
    """Split ``text`` into folded terms, in order, repeats kept."""
    decomposed = unicodedata.normalize("NFKD", text)
    stripped = "".join(ch for ch in decomposed if unicodedata.category(ch) != "Mn")
    folded = stripped.casefold()
    tokens: list[str] = []
    current: list[str] = []
    for ch in folded:
        if _is_token_char(ch):
            current.append(ch)
        elif current:
            tokens.append("".join(current))
            current = []
    if current:
        tokens.append("".join(current))
    return tokens


def query_terms(text: str) -> list[str]:
    """Distinct terms of a query, first occurrence first, at most MAX_QUERY_TERMS."""
    return list(dict.fromkeys(tokenize(text)))[:MAX_QUERY_TERMS]


def fts5_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression for user text: every term quoted, ORed.

    Terms hold only letters, numbers and private-use characters, so nothing the
    user typed can act as FTS5 syntax (NEAR, *, -, :, ^, quotes, AND/OR/NOT).
    Returns None when the text has no terms at all (only punctuation or blank).
    """
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


class Bm25Index:
    """Okapi BM25 over short documents, in RAM.

    idf = ln(1 + (N - df + 0.5) / (df + 0.5)), k1 = 1.2, b = 0.75. Not
    thread-safe: the owner serialises access (MemoryStore holds its lock).
    """

    def __init__(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}  # term -> doc id -> term frequency
        self._doc_terms: dict[str, tuple[str, ...]] = {}  # doc id -> its distinct terms
        self._doc_len: dict[str, int] = {}  # doc id -> its token count
        self._total_len = 0

    def __len__(self) -> int:
        return len(self._doc_terms)

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self._doc_terms

    def add(self, doc_id: str, text: str) -> None:
        """Index ``text`` under ``doc_id``, replacing what it held before."""
        if doc_id in self._doc_terms:
            self.remove(doc_id)
        counts = Counter(tokenize(text))
        self._doc_terms[doc_id] = tuple(counts)
        self._doc_len[doc_id] = counts.total()
        self._total_len += counts.total()
        for term, tf in counts.items():
            self._postings.setdefault(term, {})[doc_id] = tf

    def remove(self, doc_id: str) -> None:
        """Forget ``doc_id``; a no-op for an id never added."""
        terms = self._doc_terms.pop(doc_id, None)
        if terms is None:
            return
        self._total_len -= self._doc_len.pop(doc_id)
        for term in terms:
            docs = self._postings[term]
            del docs[doc_id]
            if not docs:
                del self._postings[term]

    def search(self, query: str, limit: int) -> list[tuple[str, float]]:
        """Up to ``limit`` (doc id, score) pairs, best first; ties by id."""
        n_docs = len(self._doc_terms)
        if limit <= 0 or n_docs == 0:
            return []
        avg_len = self._total_len / n_docs if self._total_len else 1.0
        scores: dict[str, float] = {}
        for term in query_terms(query):
            docs = self._postings.get(term)
            if not docs:
                continue
            df = len(docs)
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            for doc_id, tf in docs.items():
                doc_len = self._doc_len[doc_id]
                norm = tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * doc_len / avg_len))
                scores[doc_id] = scores.get(doc_id, 0.0) + idf * norm
        ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
        return ranked[:limit]
