"""The Lambo context block: hit blocks rendered in rank order under a token budget.

Tokens are ``ceil(bytes / 3.5)`` of the rendered text; whole blocks in rank order, the
first one cut with a marker when it alone does not fit (spec: lambo_recall, "When the top
hit is longer than max_tokens"). Design notes: docs/design.md, recall.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, replace

from .model import short_id
from .text import show_safely

SEPARATOR = "\n\n"
ELLIPSIS = "…"
SHOWN_REPO_CHARS = 200  # as inspect shows a repository

PILLAR_LINE = "⚑ Load-bearing pillar — {n} nodes depend on this. Modify with caution."
TRUNCATED_LINE = "[truncated: {n} tokens left out; lambo_inspect {id} for the full concept]"
# a layer block's marker names the scope its id belongs to (spec: lambo_recall, Layered sessions)
TRUNCATED_SCOPED_LINE = (
    "[truncated: {n} tokens left out; lambo_inspect {id} (scope {scope}) for the full concept]"
)


def utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


def estimate_tokens(text: str) -> int:
    """``ceil(bytes / 3.5)`` in integer arithmetic."""
    return tokens_for_bytes(utf8_len(text))


def tokens_for_bytes(size: int) -> int:
    return (2 * size + 6) // 7


def byte_budget(max_tokens: int) -> int:
    """The most bytes whose estimate is within ``max_tokens``: ceil(2b/7) <= m iff b <= 3.5m."""
    return (7 * max_tokens) // 2


def pillar_line(blast_radius: int) -> str:
    return PILLAR_LINE.format(n=blast_radius)


@dataclass(frozen=True)
class HitBlock:
    """What a hit's block shows. ``lines`` are its warning lines, in order.

    ``also`` names the hits it replaced as repeats (``selection.also_label``,
    such as ``also 82c3dcb0``); it goes right after the id, so it is part of the
    label and counts toward max_tokens. Empty, the label is as without it.
    ``placed`` says why a hit sits where its score alone would not put it (such
    as ``via graph``); it ends the label after a semicolon.

    In a merged recall, ``from_session`` names the layer a hit is from (``from
    general`` right after the id) and ``marker_scope`` the scope a cut block's
    marker tells lambo_inspect to use. Both empty, the block is as without layers.
    """

    node_id: str
    content: str
    type_label: str
    canonical: bool
    score: float
    blast_radius: int
    lines: tuple[str, ...] = ()
    also: str = ""
    placed: str = ""
    repo_scope: str = ""  # a scoped path's repository, named in its label
    from_session: str = ""  # a layer hit's session in a merged recall ("from general")
    marker_scope: str = ""  # the scope its truncation marker tells lambo_inspect to pass

    def label_suffix(self) -> str:
        """`` [Type, canonical, repo "R"] (score S, id XXXXXXXX, from L, also ..., blast
        radius N)``."""
        kind = f"{self.type_label}, canonical" if self.canonical else self.type_label
        if self.repo_scope:
            kind += f', repo "{show_safely(self.repo_scope, SHOWN_REPO_CHARS)}"'
        meta = f"score {self.score:.2f}, id {short_id(self.node_id)}"
        if self.from_session:
            meta += f", from {self.from_session}"
        if self.also:
            meta += f", {self.also}"
        if self.blast_radius > 0:
            meta += f", blast radius {self.blast_radius}"
        if self.placed:
            meta += f"; {self.placed}"
        return f" [{kind}] ({meta})"

    def label_line(self) -> str:
        return self.content + self.label_suffix()

    def text(self) -> str:
        return "\n".join((self.label_line(), *self.lines))


@dataclass(frozen=True)
class Rendered:
    """The context text, and for each block whether it is in it (and which one was cut)."""

    context: str
    included: tuple[bool, ...]
    truncated: int | None = None
    header_shown: bool = False
    notice_shown: bool = False


def render_context(
    blocks: Sequence[HitBlock],
    max_tokens: int,
    *,
    header: str | None = None,
    notice: str | None = None,
) -> Rendered:
    """Render ``blocks`` in rank order within ``max_tokens`` (see the module doc)."""
    budget = byte_budget(max_tokens)
    if notice is None or utf8_len(notice) > budget:
        return _render(blocks, budget, header)
    body = _render(blocks, budget - utf8_len(notice) - len(SEPARATOR), header)
    context = notice + SEPARATOR + body.context if body.context else notice
    return replace(body, context=context, notice_shown=True)


def _render(blocks: Sequence[HitBlock], budget: int, header: str | None) -> Rendered:
    """The blocks (and header) within ``budget`` bytes."""
    texts = [block.text() for block in blocks]
    sizes = [utf8_len(text) for text in texts]
    if not blocks:
        if header is not None and utf8_len(header) <= budget:
            return Rendered(header, (), header_shown=True)
        return Rendered("", ())

    head = [header] if header is not None else []
    used = sum(utf8_len(h) + len(SEPARATOR) for h in head)
    if used + sizes[0] > budget and head:
        # The header goes only beside at least the whole first block; else the block wins.
        head, used = [], 0
    shown: list[str] = []
    for text, size in zip(texts, sizes, strict=True):
        extra = size + (len(SEPARATOR) if shown else 0)
        if used + extra > budget:
            break
        shown.append(text)
        used += extra
    if shown:
        included = tuple(i < len(shown) for i in range(len(blocks)))
        return Rendered(SEPARATOR.join([*head, *shown]), included, header_shown=bool(head))

    cut = truncate_block(blocks[0], budget)
    none = tuple(False for _ in blocks)
    if cut is None:
        return Rendered("", none)
    return Rendered(cut, (True, *none[1:]), truncated=0)


def truncate_block(block: HitBlock, budget: int) -> str | None:
    """The first block cut to ``budget`` bytes with its marker, or None if even that is too big.

    Tries, in order: text cut + label + warning lines; text cut + label; text
    cut alone. Each keeps at least one character of the text.
    """
    full = utf8_len(block.text())
    suffix = block.label_suffix()
    for tail_label, lines in ((suffix, block.lines), (suffix, ()), ("", ())):
        rest = "".join("\n" + line for line in lines)
        fixed = utf8_len(ELLIPSIS + tail_label + rest) + 1  # + the newline before the marker
        keep = _longest_prefix(block, budget, fixed, full)
        if keep is None:
            continue
        prefix = _clean_cut(block.content, keep)
        shown = prefix + ELLIPSIS + tail_label + rest
        return shown + "\n" + _marker(block, full - (utf8_len(shown) - utf8_len(ELLIPSIS)))
    return None


def _marker(block: HitBlock, left_out_bytes: int) -> str:
    n, node = tokens_for_bytes(left_out_bytes), short_id(block.node_id)
    if block.marker_scope:
        return TRUNCATED_SCOPED_LINE.format(n=n, id=node, scope=block.marker_scope)
    return TRUNCATED_LINE.format(n=n, id=node)


def _longest_prefix(block: HitBlock, budget: int, fixed: int, full: int) -> int | None:
    """The most code points of the text that fit with ``fixed`` bytes and the marker.

    The marker's count shrinks as more text is kept, so the size is not
    strictly monotone in the prefix; a binary search finds a fitting length and
    a short forward scan picks up the few extra characters a shorter count frees.
    """
    content = block.content

    def size(n: int) -> int:
        kept = utf8_len(_clean_cut(content, n))
        left_out = full - kept - (fixed - utf8_len(ELLIPSIS) - 1)
        return kept + fixed + utf8_len(_marker(block, max(left_out, 0)))

    if not content or size(1) > budget:
        return None
    lo, hi = 1, len(content)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    best = lo
    for n in range(lo + 1, min(len(content), lo + 16) + 1):
        if size(n) <= budget:
            best = n
    return best


def _clean_cut(content: str, n: int) -> str:
    """The first ``n`` code points, not splitting a base from its marks, trailing space dropped."""
    while 1 < n < len(content) and _continues(content[n]):
        n -= 1
    prefix = content[:n]
    stripped = prefix.rstrip()
    return stripped if stripped else prefix


def _continues(ch: str) -> bool:
    """A character that belongs to the one before it (a mark, a joiner, a selector)."""
    return (
        unicodedata.category(ch).startswith("M")
        or ch in "\u200c\u200d"
        or ("\ufe00" <= ch <= "\ufe0f")
    )
