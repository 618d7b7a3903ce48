"""repo_scope's rules as text (issue #17, lambo_derive "Repository-scoped paths"): the ids it
accepts and the refusals of its "Refusals" bullet, the identity of a scoped path, "No fallback",
and a dependency question naming its repository (spec17.md Q23-Q26 for where the spec is
silent). Pure: no store, no filesystem."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambo_core.errors import ParameterError
from lambo_core.model import Concept, ConceptType
from lambo_core.path_refs import path_key
from lambo_core.repo_scope import (
    MAX_REPO_SCOPE_BYTES,
    ScopedKey,
    check_repo_scope,
    lookup_key,
    repos_named_in,
    scoped_key,
    scoped_path,
    text_may_name,
)
from lambo_core.text import canonical_key, check_string, find_refused, visible_nfc

FIELD = "repo_scope"
WIDGETS = "github.com/acme/widgets"
GADGETS = "github.com/acme/gadgets"
SECRET = "ghp_S3cr3tT0kenValue"
ONE_RUN = "a repository id is one run of visible characters, such as github.com/acme/widgets"
NOTHING = "; nothing was written"


def refusal(value: object, field: str = FIELD) -> str:
    with pytest.raises(ParameterError) as caught:
        check_repo_scope(field, value)
    return caught.value.render()


# --- accepted ids ---------------------------------------------------------------------------

# "Use its remote as host/owner/repo, such as github.com/acme/widgets ... For a repository with
# no remote, use an agreed root name". The spec's one example, then ids of that shape.
ACCEPTED = [
    WIDGETS,
    "gitlab.com/group/subgroup/project",
    "bitbucket.org/team/repo",
    "git.example.com:8443/team/widgets",
    "widgets",  # an agreed root name
    "lambo-monorepo",
    "codeberg.org/acme/wídgets",
    "例え.jp/チーム/リポジトリ",
]

# Q23: "no scheme, credentials, query or .git" and "Never send a token, a password or a private
# machine path" are advice; the Refusals bullet is the whole list, and "Lambo takes the id as
# given and cannot tell that two spellings name the same repository".
TAKEN_AS_GIVEN = [
    "https://github.com/acme/widgets",
    "github.com/acme/widgets.git",
    "git@github.com:acme/widgets.git",
    "github.com/acme/widgets?ref=main",
    f"user:{SECRET}@github.com/acme/widgets",
    "/home/me/src/widgets",
    "C:\\src\\widgets",
    "GitHub.com/Acme/Widgets",
]


@pytest.mark.parametrize("repo", ACCEPTED + TAKEN_AS_GIVEN)
def test_a_repository_id_is_accepted_as_given(repo: str) -> None:
    assert check_repo_scope(FIELD, repo) == repo


@pytest.mark.parametrize(
    "around", [" ", "\t", "\n", " \n\t ", "\u00a0", "\u3000", "\u2028", "\u2003"]
)
def test_the_ends_are_trimmed(around: str) -> None:
    assert check_repo_scope(FIELD, f"{around}{WIDGETS}{around}") == WIDGETS


def test_the_id_is_nfc() -> None:
    decomposed = unicodedata.normalize("NFD", "codeberg.org/acme/wídgets")
    assert decomposed != "codeberg.org/acme/wídgets"
    assert check_repo_scope(FIELD, decomposed) == "codeberg.org/acme/wídgets"
    assert check_repo_scope(FIELD, "A\u030a") == "\u00c5"


def test_exactly_512_bytes_are_accepted_once_trimmed() -> None:
    repo = "g/" + "é" * 255  # 2 + 510 bytes
    assert len(repo.encode()) == MAX_REPO_SCOPE_BYTES
    assert check_repo_scope(FIELD, f"  {repo}\n") == repo


def test_the_bytes_are_counted_once_normalised() -> None:
    """200 decomposed é are 600 bytes as sent and 400 in NFC: the stored id is what counts."""
    decomposed = unicodedata.normalize("NFD", "é" * 200)
    assert len(decomposed.encode()) > MAX_REPO_SCOPE_BYTES
    assert check_repo_scope(FIELD, decomposed) == "é" * 200


# --- refusals -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", " ", "\t\n", "\u00a0", "\u3000 \u2029", " " * 600])
def test_an_empty_or_whitespace_id_is_refused(value: str) -> None:
    assert refusal(value) == "repo_scope must not be empty or whitespace" + NOTHING


@pytest.mark.parametrize("value", [None, 1, True, [WIDGETS], {"repo": WIDGETS}])
def test_a_value_that_is_no_string_is_refused(value: object) -> None:
    assert refusal(value) == "repo_scope must be a string" + NOTHING


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("x" * 513, 513),
        ("é" * 257, 514),
        (f"github.com/acme/{SECRET}" + "w" * 500, 536),
        (f"  {'x' * 513}  ", 513),  # counted after trimming
        ("x" * 600 + "\x1b", 601),  # the spec's order: the size before the characters
        ("x" * 513 + " y", 515),
    ],
)
def test_an_id_over_512_bytes_is_refused_with_its_size(value: str, size: int) -> None:
    text = refusal(value)
    assert text == f"repo_scope is {size} bytes; at most 512 are accepted" + NOTHING
    assert SECRET not in text


# Unicode whitespace that is no control character: refused inside as whitespace.
# U+2000 is named as sent, though NFC makes it U+2002.
INNER_WHITESPACE = [" ", "\t", "\n", "\u00a0", "\u1680", "\u2000", "\u2007", "\u200a"]
INNER_WHITESPACE += ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000"]
# Whitespace to Python that is a control character to lambo, and other controls.
CONTROLS = ["\x00", "\x1b", "\x7f", "\r", "\x0b", "\x0c", "\x1c", "\x1f", "\x85", "\x9b"]
# Invisible characters check_string refuses, then the ones it lets into prose (joiners,
# variation selectors, the combining grapheme joiner): an id compared as exact text may hold
# none of them, since each makes an id that reads as another.
INVISIBLES = ["\u200b", "\u202e", "\u2066", "\ufeff", "\u00ad", "\u2800", "\U000e0041"]
ALLOWED_IN_PROSE = ["\u200d", "\u200c", "\ufe0f", "\u034f", "\U000e0100", "\u180b"]
# Pieces of ids, good and bad, for the property test ("e\u0301" and "A\u030a" compose).
PIECES = ["a", "Z", "/", ".", ":", "-", "é", "e\u0301", "A\u030a", "字", " ", "\t", "\n"]
PIECES += ["\u00a0", "\u2028", "\x1f", "\x00", "\u200b", "\u200d", "\ufe0f", "\ud800"]


def _planted(char: str) -> str:
    return f"github.com/acme/{SECRET}{char}widgets"


@pytest.mark.parametrize("char", INNER_WHITESPACE)
def test_whitespace_inside_is_refused_by_codepoint(char: str) -> None:
    text = refusal(_planted(char))
    code = f"U+{ord(char):04X}"
    assert text == f"repo_scope contains whitespace inside it ({code}); {ONE_RUN}" + NOTHING
    assert SECRET not in text and char not in text.replace(" ", "")


@pytest.mark.parametrize("char", CONTROLS)
@pytest.mark.parametrize("where", ["inside", "start", "end"])
def test_a_control_character_is_refused_wherever_it_is(char: str, where: str) -> None:
    """Never trimmed off an end, though Python counts U+001C..U+001F and U+0085 as space."""
    value = {"inside": _planted(char), "start": char + SECRET, "end": SECRET + char}[where]
    text = refusal(value)
    code = f"U+{ord(char):04X}"
    assert text == f"repo_scope contains a disallowed control character ({code}); {ONE_RUN}" + (
        NOTHING
    )
    assert SECRET not in text and char not in text


@pytest.mark.parametrize("char", INVISIBLES + ALLOWED_IN_PROSE)
@pytest.mark.parametrize("where", ["inside", "end"])
def test_an_invisible_character_is_refused_wherever_it_is(char: str, where: str) -> None:
    text = refusal(_planted(char) if where == "inside" else SECRET + char)
    code = f"U+{ord(char):04X}"
    assert text == (
        f"repo_scope contains a disallowed invisible formatting character ({code}); {ONE_RUN}"
        + NOTHING
    )
    assert SECRET not in text and char not in text


def test_an_unpaired_surrogate_is_refused() -> None:
    text = refusal(_planted("\ud83d"))
    assert text == (
        "repo_scope contains an unpaired surrogate (U+D83D), which is not a character; "
        "send the text as valid UTF-8" + NOTHING
    )
    assert SECRET not in text


@pytest.mark.parametrize(("char", "kind"), [("\x1b", "control"), ("\u202e", "invisible")])
def test_the_class_is_named_in_check_strings_words(char: str, kind: str) -> None:
    """The Errors row: "The field, the offending codepoint, and which class of character was
    refused", opening exactly as every other field's refusal does."""
    with pytest.raises(ParameterError) as caught:
        check_string(FIELD, f"a{char}b")
    opening = caught.value.message.split(";")[0]
    assert kind in opening
    assert refusal(f"a{char}b").startswith(opening + "; ")


def test_the_first_refused_character_is_the_one_named() -> None:
    assert "(U+0020)" in refusal("a b\x1bc")
    assert "(U+001B)" in refusal("a\x1bb c")


def test_the_field_is_the_callers() -> None:
    assert refusal(" ", field="--repo-scope") == "--repo-scope must not be empty or whitespace" + (
        NOTHING
    )


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40).map("".join))
def test_an_accepted_id_is_one_visible_nfc_run_and_a_refusal_never_echoes(text: str) -> None:
    value = f"{text}{SECRET}{text}"
    try:
        repo = check_repo_scope(FIELD, value)
    except ParameterError as refused:
        assert SECRET not in refused.message
        assert refused.message.startswith(FIELD + " ") and refused.message.endswith(NOTHING)
        return
    assert repo == unicodedata.normalize("NFC", value.strip())
    assert 0 < len(repo.encode()) <= MAX_REPO_SCOPE_BYTES
    assert not any(ch.isspace() for ch in repo)
    assert find_refused(repo) is None and visible_nfc(repo) == repo == canonical_key(repo)
    assert check_repo_scope(FIELD, repo) == repo


# --- the identity of a scoped path ----------------------------------------------------------


def key(repo: str, text: str) -> ScopedKey:
    ref = path_key(text)
    assert ref is not None, text
    return scoped_key(repo, ref)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("src/main.rs:12", "src/main.rs"),  # "src/main.rs:12 and src/main.rs are one concept"
        ("src/main.rs#L12", "src/main.rs"),
        ("src/main.rs:12:5", "src/main.rs"),  # Q21
        ("src/main.rs#L12-L20", "src/main.rs"),
        ("README.md:12", "README.md#L3"),
        ("docs/reference/", "docs/reference"),  # "docs/ and docs are one scoped directory"
        ("/etc/", "/etc"),
        ("  src/main.rs\n", "src/main.rs"),
        (unicodedata.normalize("NFD", "docs/résumé.md"), "docs/résumé.md"),
    ],
)
def test_two_spellings_of_one_path_in_one_repository_are_one_key(one: str, other: str) -> None:
    assert key(WIDGETS, one) == key(WIDGETS, other)


def test_a_directory_written_as_one_word_finds_its_scoped_directory() -> None:
    """docs alone is a word (path_refs), yet "docs/ and docs are one scoped directory"."""
    assert path_key("docs") is None
    assert lookup_key(WIDGETS, "docs") == key(WIDGETS, "docs/") == ScopedKey(WIDGETS, "docs")
    assert lookup_key(WIDGETS, "src/main.rs:12") == ScopedKey(WIDGETS, "src/main.rs")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ((WIDGETS, "src/Main.rs"), (WIDGETS, "src/main.rs")),  # case counts
        ((WIDGETS, "./src/main.rs"), (WIDGETS, "src/main.rs")),  # so does spelling
        ((WIDGETS, "src\\main.rs"), (WIDGETS, "src/main.rs")),
        ((WIDGETS, "README.md"), (GADGETS, "README.md")),  # "README.md in two repositories"
        ((WIDGETS, "README.md"), ("GitHub.com/acme/widgets", "README.md")),
        ((WIDGETS, "README.md"), ("github.com/acme/widgets.git", "README.md")),
        ((WIDGETS, "README.md"), ("https://github.com/acme/widgets", "README.md")),
    ],
)
def test_a_different_path_or_repository_is_another_key(
    one: tuple[str, str], other: tuple[str, str]
) -> None:
    assert key(*one) != key(*other)


def test_the_repository_is_compared_trimmed_and_nfc() -> None:
    decomposed = unicodedata.normalize("NFD", "codeberg.org/acme/wídgets")
    assert key(f" {decomposed} ", "a.rs") == key("codeberg.org/acme/wídgets", "a.rs")


@pytest.mark.parametrize("repo", ["", "  \n"])
def test_a_scoped_key_needs_a_repository(repo: str) -> None:
    """A stored scope is only checked to be nonempty at replay ("After a restart")."""
    ref = path_key("README.md")
    assert ref is not None
    with pytest.raises(ValueError, match="needs a repository"):
        scoped_key(repo, ref)


# --- which text becomes a scoped path -------------------------------------------------------

# (text, key where the type is named, key where it is inferred): "What it covers" and "Where
# the type is inferred".
SCOPED_PATHS: list[tuple[str, str | None, str | None]] = [
    ("README.md", "README.md", "README.md"),
    ("Makefile", "Makefile", "Makefile"),
    (".env", ".env", ".env"),
    ("src/main.rs", "src/main.rs", "src/main.rs"),
    ("src/main.rs:12", "src/main.rs", "src/main.rs"),
    ("src/main.rs#L12", "src/main.rs", "src/main.rs"),
    ("docs/reference", "docs/reference", None),  # a bare directory name stays plain text
    ("docs/reference/", "docs/reference", "docs/reference"),
    ("scripts/build", "scripts/build", None),
    ("scripts/build/", "scripts/build", "scripts/build"),
    ("./scripts/build", "./scripts/build", "./scripts/build"),
    ("./run.sh", "./run.sh", "./run.sh"),
    ("/etc/hosts", "/etc/hosts", "/etc/hosts"),
    ("C:\\work\\a.rs", "C:\\work\\a.rs", "C:\\work\\a.rs"),
    ("~/.config/x", "~/.config/x", "~/.config/x"),
    ("./my file.txt", "./my file.txt", "./my file.txt"),
    ("TCP/IP", None, None),
    ("CI/CD", None, None),
    ("I/O", None, None),
    ("and/or", None, None),
    ("https://github.com/acme/widgets", None, None),
    ("git@github.com:acme/widgets.git", None, None),
    ("github.com/x/a.rs", None, None),
    ("Node.js", None, None),
    ("/ note", None, None),
    ("~ 5 minutes", None, None),
    ("rewrote the build notes", None, None),
]


@pytest.mark.parametrize(("text", "named", "inferred"), SCOPED_PATHS)
def test_which_text_is_a_scoped_path(text: str, named: str | None, inferred: str | None) -> None:
    as_named = scoped_path(WIDGETS, text, type_named=True)
    as_inferred = scoped_path(WIDGETS, text, type_named=False)
    assert as_named == (None if named is None else ScopedKey(WIDGETS, named))
    assert as_inferred == (None if inferred is None else ScopedKey(WIDGETS, inferred))


def test_a_clear_spelling_names_one_concept_in_either_order() -> None:
    """The spec: "Write such a name as a clear path (./scripts/build or scripts/build/) and both
    name the one scoped concept, in either order"; the loose spelling a depends_on meets first
    stays plain."""
    for clear in ["./scripts/build", "scripts/build/"]:
        produced = scoped_path(WIDGETS, clear, type_named=True)
        assert produced is not None
        assert scoped_path(WIDGETS, clear, type_named=False) == produced
    assert scoped_path(WIDGETS, "scripts/build", type_named=False) is None
    assert scoped_path(WIDGETS, "scripts/build", type_named=True) == ScopedKey(
        WIDGETS, "scripts/build"
    )


# --- No fallback ----------------------------------------------------------------------------


def concept(
    content: str, ctype: ConceptType = ConceptType.RESOURCE, repo: str | None = None
) -> Concept:
    return Concept(
        id="00000000-0000-4000-8000-000000000000",
        session="lambo",
        content=content,
        canonical_key=canonical_key(content),
        concept_type=ctype,
        created_at=0.0,
        about_time=0.0,
        agent_id="agent",
        repo_scope=repo,
    )


SCOPED_README = concept("README.md", repo=WIDGETS)
UNSCOPED_README = concept("README.md")

# (reference text, the write's repo_scope, the concept it met, may name it)
NO_FALLBACK: list[tuple[str, str | None, Concept, bool]] = [
    ("README.md", WIDGETS, SCOPED_README, True),
    ("README.md:12", WIDGETS, SCOPED_README, True),
    ("`README.md`", WIDGETS, SCOPED_README, True),
    ("README.md", GADGETS, SCOPED_README, False),  # another repository's file
    ("README.md", None, SCOPED_README, False),  # "an unscoped write never finds a scoped one"
    ("./README.md", WIDGETS, SCOPED_README, False),  # another spelling
    ("readme.md", WIDGETS, SCOPED_README, False),  # case counts, whatever names.py folds
    ("README.md", WIDGETS, UNSCOPED_README, False),  # "does not find a README.md Resource"
    ("README.md:12", WIDGETS, UNSCOPED_README, False),
    ("README.md", None, UNSCOPED_README, True),  # "exactly as before 0.6.0"
    ("src/main.rs", WIDGETS, concept("src/main.rs:12", repo=WIDGETS), True),  # first spelling
    ("docs", WIDGETS, concept("docs/", repo=WIDGETS), True),
    ("docs/", WIDGETS, concept("docs", repo=WIDGETS), True),
    ("docs", GADGETS, concept("docs/", repo=WIDGETS), False),
    ("docs/reference", WIDGETS, concept("docs/reference"), False),  # a path once type named
    # "an existing concept of another type under its plain key ... is that concept"
    ("config.toml", WIDGETS, concept("config.toml", ConceptType.LOGIC), True),
    ("TCP/IP", WIDGETS, concept("TCP/IP", ConceptType.ENTITY), True),
    ("README.md", WIDGETS, concept("README.md", ConceptType.OBSERVATION), True),
    # an unscoped Resource that is no path is no path Resource
    ("Redis", WIDGETS, concept("Redis"), True),
    ("Node.js", WIDGETS, concept("Node.js"), True),
]


@pytest.mark.parametrize(("text", "repo", "met", "names"), NO_FALLBACK)
def test_no_fallback_between_scoped_and_unscoped(
    text: str, repo: str | None, met: Concept, names: bool
) -> None:
    assert text_may_name(repo, text, met) is names


def test_the_repositories_of_a_reference_and_a_concept_compare_as_nfc() -> None:
    decomposed = unicodedata.normalize("NFD", "codeberg.org/acme/wídgets")
    stored = concept("README.md", repo="codeberg.org/acme/wídgets")
    assert text_may_name(decomposed, "README.md", stored)
    assert not text_may_name("", "README.md", stored)


# --- a question that names its repository (Q26) ---------------------------------------------

CANDIDATES = [WIDGETS, GADGETS]

QUESTIONS: list[tuple[str, list[str]]] = [
    # the spec's example
    ("what depends on README.md in github.com/acme/widgets", [WIDGETS]),
    ("what depends on README.md", []),
    # any occurrence as a whole word selects it, at either end and after punctuation
    ("what depends on README.md in github.com/acme/widgets?", [WIDGETS]),
    ("what depends on README.md in github.com/acme/widgets.", [WIDGETS]),
    ('what depends on README.md in "github.com/acme/widgets"?', [WIDGETS]),
    ("what depends on README.md (github.com/acme/gadgets)", [GADGETS]),
    ("what depends on README.md in `github.com/acme/gadgets`", [GADGETS]),
    ("github.com/acme/widgets: what depends on README.md", [WIDGETS]),
    ("in github.com/acme/widgets, what depends on README.md", [WIDGETS]),
    ("what depends on README.md in\tgithub.com/acme/widgets\n", [WIDGETS]),
    # a longer or another spelling is another id ("cannot tell that two spellings name ...")
    ("what depends on README.md in github.com/acme/widgets-extra", []),
    ("what depends on README.md in github.com/acme/widgets.git", []),
    ("what depends on README.md in https://github.com/acme/widgets", []),
    ("what depends on README.md in GitHub.com/acme/widgets", []),
    ("what depends on github.com/acme/widgets/README.md", []),
    ("what depends on README.md in acme/widgets", []),
    ("what depends on README.md in github.com/acme/wid\u200bgets", []),
    # both named: both, in the candidates' order
    ("what depends on README.md in github.com/acme/gadgets or github.com/acme/widgets", CANDIDATES),
]


@pytest.mark.parametrize(("question", "named"), QUESTIONS)
def test_a_question_names_a_candidate_repository_as_a_whole_word(
    question: str, named: list[str]
) -> None:
    assert repos_named_in(question, CANDIDATES) == named


def test_a_root_name_inside_a_remote_is_not_named() -> None:
    candidates = ["widgets", WIDGETS, "github.com/acme/widgets-extra"]
    assert repos_named_in(f"what depends on README.md in {WIDGETS}", candidates) == [WIDGETS]
    assert repos_named_in("what depends on README.md in widgets", candidates) == ["widgets"]


def test_an_id_is_matched_as_text_not_as_a_pattern() -> None:
    odd = "a+b(c)|d.*"
    assert repos_named_in(f"what depends on x.md in {odd}", [odd]) == [odd]
    assert repos_named_in("what depends on x.md in aab(c)|dxx", [odd]) == []


def test_the_question_and_the_ids_compare_as_nfc_and_each_is_named_once() -> None:
    composed = "codeberg.org/acme/wídgets"
    decomposed = unicodedata.normalize("NFD", composed)
    question = f"what depends on README.md in {decomposed} ({composed})"
    assert repos_named_in(question, [composed, decomposed, f" {composed} "]) == [composed]
    assert repos_named_in("what depends on README.md", ["", "  "]) == []
