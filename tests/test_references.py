"""Reference resolution: node ids, short ids, exact content, and every refusal."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lambo_core.errors import ErrorKind, ReferenceRefused
from lambo_core.model import Concept, ConceptType, short_id
from lambo_core.references import (
    ConceptLookup,
    ReferenceMatch,
    check_not_self,
    describe_candidates,
    is_node_id_form,
    is_short_id_form,
    match_reference,
    refuse_changed,
    refuse_cited_and_contradicted,
    refuse_cycle,
    refuse_other_scope,
    refuse_self_reference,
    resolve_reference,
    still_names,
)
from lambo_core.text import canonical_key, fold_case

FIELD = "concepts[0].depends_on[0]"


class FakeLookup:
    """A session graph in a dict: just enough for ConceptLookup."""

    def __init__(self) -> None:
        self.by_id: dict[str, Concept] = {}
        self.interactions: set[str] = set()

    def add(self, node_id: str, content: str, created_at: float = 0.0) -> Concept:
        concept = Concept(
            id=node_id,
            session="lambo",
            content=content,
            canonical_key=canonical_key(content),
            concept_type=ConceptType.LOGIC,
            created_at=created_at,
            about_time=created_at,
            agent_id="tester",
        )
        self.by_id[node_id] = concept
        return concept

    def remove(self, node_id: str) -> None:
        del self.by_id[node_id]

    # ConceptLookup
    def concept(self, node_id: str) -> Concept | None:
        return self.by_id.get(node_id)

    def concepts_with_prefix(self, hex8: str) -> list[Concept]:
        return [c for c in self.by_id.values() if c.id.replace("-", "").startswith(hex8)]

    def concepts_with_key(self, key: str) -> list[Concept]:
        return [c for c in self.by_id.values() if c.canonical_key == key]

    def concepts_with_folded_key(self, folded: str) -> list[Concept]:
        return [c for c in self.by_id.values() if fold_case(c.canonical_key) == folded]

    def is_interaction(self, some_id: str) -> bool:
        return some_id in self.interactions


RULING_ID = "8baad4e0-1111-4222-8333-444455556666"
OTHER_ID = "1a2b3c4d-aaaa-4bbb-8ccc-dddddddddddd"
INTERACTION_ID = "99999999-0000-4000-8000-000000000000"


@pytest.fixture
def graph() -> FakeLookup:
    lookup = FakeLookup()
    lookup.add(RULING_ID, "Lease TTL is 45s because it must exceed the 15s shutdown budget", 1.0)
    lookup.add(OTHER_ID, "the embedder listens on port 8080", 2.0)
    lookup.interactions.add(INTERACTION_ID)
    return lookup


def refused(ref: str, lookup: FakeLookup, field: str = FIELD) -> str:
    with pytest.raises(ReferenceRefused) as info:
        resolve_reference(field, ref, lookup)
    assert info.value.kind is ErrorKind.REFERENCE
    message = info.value.render()
    assert message.startswith(f"reference refused: {field} ")
    assert message.endswith("; nothing was written")
    return info.value.message


def test_fake_lookup_satisfies_the_protocol() -> None:
    lookup: ConceptLookup = FakeLookup()
    assert lookup.concept(RULING_ID) is None


# --- what resolves ------------------------------------------------------------------


def test_full_node_id_names_that_concept(graph: FakeLookup) -> None:
    assert resolve_reference(FIELD, RULING_ID, graph).id == RULING_ID
    assert resolve_reference(FIELD, RULING_ID.upper(), graph).id == RULING_ID
    assert resolve_reference(FIELD, f"  {RULING_ID}\n", graph).id == RULING_ID


def test_short_id_names_the_one_concept_it_prefixes(graph: FakeLookup) -> None:
    assert resolve_reference(FIELD, "8baad4e0", graph).id == RULING_ID
    assert resolve_reference(FIELD, "8BAAD4E0", graph).id == RULING_ID
    assert match_reference("8baad4e0", graph).form == "short_id"


def test_exact_content_names_the_concept(graph: FakeLookup) -> None:
    ref = "lease  TTL is 45s because it must exceed the 15s shutdown\tbudget "
    assert resolve_reference(FIELD, ref, graph).id == RULING_ID
    assert match_reference(ref, graph).form == "text"


def test_content_with_allowed_invisibles_still_names_the_concept(graph: FakeLookup) -> None:
    ref = "the embed\u200dder listens on port 8080\ufe0f"
    assert resolve_reference(FIELD, ref, graph).id == OTHER_ID


def test_text_that_names_a_concept_wins_over_a_short_id(graph: FakeLookup) -> None:
    # an 8-hex string whose text names a concept is that concept, not a prefix
    graph.add("cafebabe-0000-4000-8000-000000000001", "8baad4e0")
    assert resolve_reference(FIELD, "8baad4e0", graph).id == "cafebabe-0000-4000-8000-000000000001"
    assert match_reference("8baad4e0", graph).form == "text"


def test_hyphenated_id_naming_no_concept_is_read_as_text(graph: FakeLookup) -> None:
    unknown = "00000000-1111-4222-8333-444455556666"
    assert match_reference(unknown, graph) == ReferenceMatch("text", ())
    graph.add("abcdef01-0000-4000-8000-000000000002", unknown)
    assert resolve_reference(FIELD, unknown, graph).id == "abcdef01-0000-4000-8000-000000000002"


def test_other_hex_forms_are_text_not_ids(graph: FakeLookup) -> None:
    # a longer prefix and the unhyphenated node id are read as text
    for ref in ("8baad4e01", "8baad4e", RULING_ID.replace("-", ""), "{" + RULING_ID + "}"):
        match = match_reference(ref, graph)
        assert match.form == "text"
        assert match.concepts == ()


def test_id_forms() -> None:
    assert is_node_id_form(RULING_ID)
    assert is_node_id_form(RULING_ID.upper())
    assert not is_node_id_form(RULING_ID.replace("-", ""))
    assert is_short_id_form("8baad4e0")
    assert not is_short_id_form("8baad4e")
    assert not is_short_id_form("8baad4g0")
    # ASCII hex only: fullwidth digits are not an id
    assert not is_short_id_form("８baad4e0")


# --- refusals --------------------------------------------------------------------------


def test_matches_nothing(graph: FakeLookup) -> None:
    message = refused("user schema", graph)
    assert message == f'{FIELD} "user schema" matches nothing in this session; nothing was written'


def test_never_a_substring(graph: FakeLookup) -> None:
    assert "matches nothing" in refused("Lease TTL is 45s", graph)
    assert "matches nothing" in refused("embedder", graph)


def test_unknown_short_id_matches_nothing(graph: FakeLookup) -> None:
    assert "matches nothing" in refused("deadbeef", graph)


def test_interaction_id_is_refused(graph: FakeLookup) -> None:
    message = refused(INTERACTION_ID, graph)
    assert message == (
        f"{FIELD} \"{INTERACTION_ID}\" is an interaction's id, not a concept's; nothing was written"
    )


def test_short_id_shared_by_several_lists_full_ids(graph: FakeLookup) -> None:
    twin = graph.add("8baad4e0-9999-4999-8999-999999999999", "a second ruling", 5.0)
    message = refused("8baad4e0", graph)
    assert message == (
        f'{FIELD} "8baad4e0" matches several: '
        f'{RULING_ID} "Lease TTL is 45s because it must exceed the 15s shutdown bud…", '
        f'{twin.id} "a second ruling"; name one by its full node id; nothing was written'
    )


def test_content_matching_several_lists_short_ids(graph: FakeLookup) -> None:
    # Text as written names its concept; in a third case it names both.
    graph.add("feedface-0000-4000-8000-000000000003", "The embedder listens on port 8080", 3.0)
    assert resolve_reference(FIELD, "the embedder listens on port 8080", graph).id == OTHER_ID
    message = refused("THE embedder listens on port 8080", graph)
    assert message == (
        f'{FIELD} "THE embedder listens on port 8080" matches several: '
        '1a2b3c4d "the embedder listens on port 8080", '
        'feedface "The embedder listens on port 8080"; name one by its id; nothing was written'
    )


def test_several_lists_at_most_ten() -> None:
    lookup = FakeLookup()
    for i in range(13):
        lookup.add(f"{i:08x}-0000-4000-8000-000000000000", "same text", float(i))
    message = refused("same text", lookup)
    assert message.count('"same text"') == 1 + 10  # the reference, then ten candidates
    assert "and 3 more" in message
    assert "0000000c" not in message  # the newest three are the ones left off


def test_listing_uses_full_ids_when_short_ids_collide() -> None:
    lookup = FakeLookup()
    a = lookup.add("abcdabcd-0000-4000-8000-000000000001", "dup", 1.0)
    b = lookup.add("abcdabcd-0000-4000-8000-000000000002", "dup", 2.0)
    listing = describe_candidates([a, b])
    assert a.id in listing and b.id in listing


def test_reference_is_shown_on_one_line_and_capped(graph: FakeLookup) -> None:
    long_ref = "word " * 40
    message = refused(long_ref, graph)
    shown = message.split('"')[1]
    assert shown.endswith("…")
    assert len(shown) == 81
    message = refused("two\nlines\tand tab", graph)
    assert '"two lines and tab"' in message
    assert "\n" not in message and "\t" not in message


def test_candidate_content_is_shown_safely() -> None:
    lookup = FakeLookup()
    lookup.add("11111111-0000-4000-8000-000000000001", "line one\nline two", 1.0)
    lookup.add("22222222-0000-4000-8000-000000000002", "line  one line two", 2.0)
    message = refused("line one line two", lookup)
    assert "\n" not in message
    assert '11111111 "line one line two"' in message


def test_self_reference(graph: FakeLookup) -> None:
    resolved = resolve_reference(FIELD, "8baad4e0", graph)
    # Keys keep case: the same text in capitals is another concept, not this one.
    check_not_self(FIELD, "8baad4e0", resolved, canonical_key(resolved.content.upper()))
    with pytest.raises(ReferenceRefused) as info:
        check_not_self(FIELD, "8baad4e0", resolved, canonical_key(f"  {resolved.content}\u200d"))
    assert info.value.message == (
        f'{FIELD} "8baad4e0" names the concept itself; nothing was written'
    )
    check_not_self(FIELD, "8baad4e0", resolved, canonical_key("something else"))


def test_refusal_builders() -> None:
    assert (
        refuse_self_reference("f", "r").message
        == 'f "r" names the concept itself; nothing was written'
    )
    assert refuse_cycle("concepts[1].depends_on[2]", "8baad4e0").message == (
        'concepts[1].depends_on[2] "8baad4e0" would close a dependency loop; nothing was written'
    )
    assert refuse_cited_and_contradicted("concepts[0].against[0]", "x").message == (
        'concepts[0].against[0] "x" is both cited and contradicted by one concept of the call; '
        "nothing was written"
    )
    assert refuse_other_scope("depends_on[0]", "x", "general", what="citations").message == (
        'depends_on[0] "x" is in scope "general"; cross-session citations are not recorded; '
        "nothing was written"
    )
    assert refuse_other_scope("against[0]", "x", "lambo", what="contradictions").render() == (
        'reference refused: against[0] "x" is in scope "lambo"; '
        "cross-session contradictions are not recorded; nothing was written"
    )
    changed = refuse_changed("depends_on[0]", "8baad4e0").message
    assert changed.startswith('depends_on[0] "8baad4e0" named something else when the write')
    assert changed.endswith("; nothing was written")


def test_refused_reference_with_hostile_characters_is_not_echoed_raw() -> None:
    # callers validate first; resolution still never puts a refused character in a message
    message = refused("evil\u202eref\x1b[0m", FakeLookup())
    assert "\u202e" not in message and "\x1b" not in message


# --- apply-time re-check ---------------------------------------------------------------


def test_still_names(graph: FakeLookup) -> None:
    assert still_names("8baad4e0", RULING_ID, graph)
    assert still_names(RULING_ID, RULING_ID, graph)
    # the short id comes to match a second concept
    graph.add("8baad4e0-7777-4777-8777-777777777777", "another", 9.0)
    assert not still_names("8baad4e0", RULING_ID, graph)
    assert still_names(RULING_ID, RULING_ID, graph)
    # the concept is removed
    graph.remove(RULING_ID)
    assert not still_names(RULING_ID, RULING_ID, graph)


def test_still_names_text_shadowed(graph: FakeLookup) -> None:
    # Text in another case names its concept while it is the only one in any case; a second
    # concept differing only in case shadows it.
    ref = "THE embedder listens on port 8080"
    assert still_names(ref, OTHER_ID, graph)
    graph.add("33333333-0000-4000-8000-000000000003", "The Embedder listens on port 8080", 9.0)
    assert not still_names(ref, OTHER_ID, graph)


def test_text_as_written_wins_over_text_in_another_case(graph: FakeLookup) -> None:
    graph.add("33333333-0000-4000-8000-000000000003", "THE embedder listens on port 8080", 9.0)
    assert still_names("the embedder listens on port 8080", OTHER_ID, graph)
    found = resolve_reference(FIELD, "THE embedder listens on port 8080", graph)
    assert found.id == "33333333-0000-4000-8000-000000000003"
    message = refused("The Embedder Listens On Port 8080", graph)
    assert "matches several: " in message and "1a2b3c4d" in message and "33333333" in message


# --- properties ---------------------------------------------------------------------------


@given(st.uuids(version=4))
def test_property_node_id_and_short_id_both_name_a_lone_concept(uid: object) -> None:
    lookup = FakeLookup()
    node_id = str(uid)
    lookup.add(node_id, "the one concept")
    assert resolve_reference(FIELD, node_id, lookup).id == node_id
    assert resolve_reference(FIELD, short_id(node_id), lookup).id == node_id
    assert resolve_reference(FIELD, "THE ONE  concept", lookup).id == node_id


@given(st.text(min_size=1, max_size=30))
def test_property_resolution_is_exact_or_refused(ref: str) -> None:
    lookup = FakeLookup()
    lookup.add("44444444-0000-4000-8000-000000000004", "alpha beta gamma")
    try:
        found = resolve_reference(FIELD, ref, lookup)
    except ReferenceRefused as err:
        assert err.message.endswith("; nothing was written")
        return
    # only an id form or the exact (canonical) content can name it
    assert found.canonical_key == canonical_key(ref) or ref.strip().lower() in (
        "44444444",
        "44444444-0000-4000-8000-000000000004",
    )
