"""The path rules of issue #17 as text: which entries a shared layer refuses as a bare relative
path, and the identity repo_scope matches a path by.

Every example of the spec's bullets is a row (lambo_derive "Writing to a layer", and "What it
covers", "Where the type is inferred", "Directories" and "Exact text" of "Repository-scoped
paths"); the edge cases the spec leaves open follow, each with the reading chosen.
"""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lambo_core.path_refs import MAX_PATH_BYTES, PathRef, directory_of, is_relative_path, path_key
from lambo_core.recall.names import NameMatcher, question_names
from lambo_core.text import canonical_key

LINE_REFS = [":12", ":12:5", "#L12"]

# "A bare relative path is README.md, Cargo.toml, .env, Makefile, src/main.rs, docs/reference/,
# ./run.sh, ..\lambo\AGENTS.md, also with a :12, :12:5 or #L12 line reference."
SPEC_BARE_RELATIVE = {
    "README.md": "README.md",
    "Cargo.toml": "Cargo.toml",
    ".env": ".env",
    "Makefile": "Makefile",
    "src/main.rs": "src/main.rs",
    "docs/reference/": "docs/reference",
    "./run.sh": "./run.sh",
    "..\\lambo\\AGENTS.md": "..\\lambo\\AGENTS.md",
}

# "Absolute paths, URLs, git@host:path remotes, domain-led names (github.com/x/README.md),
# domain and library names (crates.io, socket.io, Node.js, vercel/next.js), branch names, repo
# slugs and prose (and/or, I/O, TCP/IP) pass, and so does a directory named without a trailing /."
# The absolute paths are the ones "What it covers" gives; branch names and repo slugs the spec
# names without an example, so these are ours.
SPEC_PASSES_A_LAYER = [
    "/etc/hosts",
    "C:\\work\\a.rs",
    "~/.config/x",
    "https://github.com/acme/widgets/blob/main/README.md",
    "https://github.com/acme/widgets/blob/main/src/main.rs#L12",
    "git@github.com:acme/widgets.git",
    "git@gitlab.example.com:team/widgets.git",
    "github.com/x/README.md",
    "github.com/acme/widgets",
    "crates.io",
    "socket.io",
    "Node.js",
    "vercel/next.js",
    "main",
    "feature/login",
    "release/1.4",
    "dependabot/npm_and_yarn/lodash-4.17.21",
    "origin/main",
    "acme/widgets",
    "rust-lang/rust",
    "and/or",
    "I/O",
    "TCP/IP",
    "docs/reference",
]


@pytest.mark.parametrize("text", SPEC_BARE_RELATIVE)
def test_each_spec_bare_relative_path_is_refused_in_a_layer(text: str) -> None:
    assert is_relative_path(text)
    ref = path_key(text)
    assert ref == PathRef(SPEC_BARE_RELATIVE[text], clear=True, absolute=False)


@pytest.mark.parametrize("line_ref", LINE_REFS)
@pytest.mark.parametrize("text", SPEC_BARE_RELATIVE)
def test_with_a_line_reference_it_is_still_one_and_names_the_same_file(
    text: str, line_ref: str
) -> None:
    assert is_relative_path(text + line_ref)
    assert path_key(text + line_ref) == PathRef(SPEC_BARE_RELATIVE[text], True, False, line_ref)


@pytest.mark.parametrize("text", SPEC_PASSES_A_LAYER)
def test_each_spec_passing_entry_is_let_into_a_layer(text: str) -> None:
    assert not is_relative_path(text)


@pytest.mark.parametrize("line_ref", LINE_REFS)
@pytest.mark.parametrize("text", ["/etc/hosts", "C:\\work\\a.rs", "~/.config/x", "docs/reference"])
def test_a_passing_path_still_passes_with_a_line_reference(text: str, line_ref: str) -> None:
    assert not is_relative_path(text + line_ref)


# --- Repository-scoped paths: what it covers ------------------------------------------------

# "A path there is a relative or absolute local path: README.md, Makefile, .env, src/main.rs,
# docs/reference, ./run.sh, /etc/hosts, C:\work\a.rs, ~/.config/x"
SPEC_SCOPED_PATHS = {
    "README.md": (True, False),
    "Makefile": (True, False),
    ".env": (True, False),
    "src/main.rs": (True, False),
    "docs/reference": (False, False),  # a path where the type is named, loosely one otherwise
    "./run.sh": (True, False),
    "/etc/hosts": (True, True),
    "C:\\work\\a.rs": (True, True),
    "~/.config/x": (True, True),
}

# "URLs, git@host:path remotes, domain-led names (github.com/x/a.rs), names that are not files
# (Node.js) and prose are not paths. ... (/ note and ~ 5 minutes are prose)."
SPEC_NOT_PATHS = [
    "https://github.com/acme/widgets",
    "http://localhost:8080/docs/",
    "file:///etc/hosts",
    "git@github.com:acme/widgets.git",
    "github.com/x/a.rs",
    "Node.js",
    "rewrote the build notes",
    "/ note",
    "~ 5 minutes",
    # slash prose and a plain word (Where the type is inferred)
    "TCP/IP",
    "CI/CD",
    "I/O",
    "and/or",
    "docs",
]


@pytest.mark.parametrize("text", SPEC_SCOPED_PATHS)
def test_each_spec_path_is_a_path_under_repo_scope(text: str) -> None:
    clear, absolute = SPEC_SCOPED_PATHS[text]
    assert path_key(text) == PathRef(text, clear, absolute)


@pytest.mark.parametrize("text", SPEC_NOT_PATHS)
def test_each_spec_non_path_is_not_one(text: str) -> None:
    assert path_key(text) is None
    assert not is_relative_path(text)


@pytest.mark.parametrize(
    ("text", "line_ref"), [("src/main.rs:12", ":12"), ("README.md#L12", "#L12")]
)
def test_a_line_reference_names_the_same_file(text: str, line_ref: str) -> None:
    """The spec: "src/main.rs:12 and src/main.rs are one concept"; the reference is kept."""
    ref = path_key(text)
    assert ref is not None and ref.line_ref == line_ref
    assert ref.key == text.removesuffix(line_ref)
    assert ref == path_key(text.removesuffix(line_ref) + line_ref)
    plain = path_key(text.removesuffix(line_ref))
    assert plain is not None and plain.key == ref.key


# --- Where the type is inferred: what reads as a file or a directory ------------------------

# "a file name (README.md, src/main.rs), a dotfile, Makefile and the like, a name ending in /
# (docs/reference/), or an anchored path. Slash prose (TCP/IP, CI/CD, I/O, and/or) and a bare
# directory name (docs/reference) stay plain text ... (./scripts/build or scripts/build/)"
SPEC_CLEAR = ["README.md", "src/main.rs", ".env", ".gitignore", "Makefile", "Dockerfile"]
SPEC_CLEAR += ["docs/reference/", "./scripts/build", "scripts/build/", "/etc/hosts"]
SPEC_LOOSE = ["docs/reference", "scripts/build"]


@pytest.mark.parametrize("text", SPEC_CLEAR)
def test_a_clear_path_creates_a_scoped_path_where_the_type_is_inferred(text: str) -> None:
    ref = path_key(text)
    assert ref is not None and ref.clear


@pytest.mark.parametrize("text", SPEC_LOOSE)
def test_a_bare_directory_name_is_only_loosely_a_path(text: str) -> None:
    ref = path_key(text)
    assert ref is not None and not ref.clear and ref.key == text


def test_a_loose_name_written_clearly_with_a_slash_keeps_its_key() -> None:
    """scripts/build/ is the clear spelling of scripts/build: the one directory. ./scripts/build
    is a different spelling ("./src/main.rs is not src/main.rs"), its own key."""
    assert path_key("scripts/build/") == PathRef("scripts/build", True, False)
    assert path_key("./scripts/build") == PathRef("./scripts/build", True, False)


# --- Directories ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("with_slash", "without"),
    [("docs/", "docs"), ("docs/reference/", "docs/reference"), ("/etc/", "/etc")],
)
def test_a_directory_with_and_without_its_trailing_slash_has_one_key(
    with_slash: str, without: str
) -> None:
    ref = path_key(with_slash)
    assert ref is not None and ref.key == without
    bare = path_key(without)
    assert bare is None or bare.key == without  # "docs" alone is a word, found by that key


def test_a_parent_that_is_a_directory_of_its_child_is_that_directory() -> None:
    """The spec: "A parent_of parent that is a directory of its scoped child (src over
    src/main.rs)" is that repository's directory."""
    child = path_key("src/main.rs")
    assert child is not None
    assert directory_of("src", child) == PathRef("src", True, False)
    assert directory_of("src/", child) == PathRef("src", True, False)
    deep = path_key("src/lease/keeper.rs")
    assert deep is not None and directory_of("src", deep) == PathRef("src", True, False)
    assert directory_of("src/lease", deep) == PathRef("src/lease", True, False)
    root = path_key("/etc/ssh/sshd_config.conf")
    assert root is not None and directory_of("/etc", root) == PathRef("/etc", True, True)


@pytest.mark.parametrize("parent", ["sr", "src/main.rs", "lib", "", "source code", "Src"])
def test_a_parent_that_is_no_directory_of_its_child_is_not_one(parent: str) -> None:
    child = path_key("src/main.rs")
    assert child is not None and directory_of(parent, child) is None


# --- Exact text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("src/Main.rs", "src/main.rs"),  # case counts
        ("./src/main.rs", "src/main.rs"),  # so does spelling
        ("src\\main.rs", "src/main.rs"),  # and the separator
        ("docs/./reference/", "docs/reference/"),  # no path is resolved
        ("README.MD", "README.md"),
    ],
)
def test_two_spellings_are_two_paths(one: str, other: str) -> None:
    a, b = path_key(one), path_key(other)
    assert a is not None and b is not None and a.key != b.key


def test_the_key_is_trimmed_and_nfc_and_nothing_else() -> None:
    decomposed = unicodedata.normalize("NFD", "docs/résumé.md")
    assert decomposed != "docs/résumé.md"
    assert path_key(f"  {decomposed}\n") == PathRef("docs/résumé.md", True, False)
    assert path_key("Docs/Résumé.md") == PathRef("Docs/Résumé.md", True, False)


# --- edge cases the spec leaves open ----------------------------------------------------------

# (text, is a bare relative path, its key or None)
EDGES: list[tuple[str, bool, str | None]] = [
    # Windows
    ("src\\main.rs", True, "src\\main.rs"),
    (".\\run.ps1", True, ".\\run.ps1"),
    ("C:/work/a.rs", False, "C:/work/a.rs"),
    ("C:\\Program Files\\App\\app.exe", False, "C:\\Program Files\\App\\app.exe"),
    ("\\\\server\\share\\notes.txt", False, "\\\\server\\share\\notes.txt"),
    ("\\Windows\\System32", False, "\\Windows\\System32"),
    ("%APPDATA%\\lambo\\lambo.toml", False, "%APPDATA%\\lambo\\lambo.toml"),
    ("C:\\work\\a.rs:12", False, "C:\\work\\a.rs"),
    ("C:", False, None),
    ("C:\\", False, None),
    # home and variables: the same file from every project of one user
    ("~/x", False, "~/x"),
    ("~/.config/lambo/", False, "~/.config/lambo"),
    ("$HOME/.bashrc", False, "$HOME/.bashrc"),
    ("${XDG_CONFIG_HOME}/lambo/lambo.toml", False, "${XDG_CONFIG_HOME}/lambo/lambo.toml"),
    ("~", False, None),
    ("~/", False, None),
    ("~user/notes", False, "~user/notes"),  # no ~/ anchor: loosely a path
    # quotes and brackets around a path are not part of it
    ("`README.md`", True, "README.md"),
    ('"src/main.rs:12"', True, "src/main.rs"),
    ("'./run.sh'", True, "./run.sh"),
    ("“docs/reference/”", True, "docs/reference"),
    ("(Makefile)", True, "Makefile"),
    ("`/etc/hosts`", False, "/etc/hosts"),
    ("``", False, None),
    # a sentence's end is not part of it either
    ("README.md.", True, "README.md"),
    ("src/main.rs:12,", True, "src/main.rs"),
    ("Makefile:", True, "Makefile"),
    ("`.env`.", True, ".env"),
    ("./run.sh!", True, "./run.sh"),
    ("docs/reference.", False, "docs/reference"),
    # spaces: only in an anchored path, never next to a separator
    ("./my notes.md", True, "./my notes.md"),
    ("my notes.md", False, None),
    ("/Users/me/My Files/", False, "/Users/me/My Files"),
    ("~/My Documents/plan.txt", False, "~/My Documents/plan.txt"),
    ("./run.sh --verbose", False, None),
    ("/etc/hosts is where they live", False, None),
    ("./ run.sh", False, None),
    ("/usr/ bin", False, None),
    ("./my  notes.md", False, None),  # a run of spaces is prose (and no canonical key)
    ("edited README.md", False, None),
    ("README.md and Makefile", False, None),
    # whitespace, control and invisible characters
    ("src/main.rs\nREADME.md", False, None),
    ("src/\tmain.rs", False, None),
    ("READ\u200bME.md", False, None),
    ("READ\u200dME.md", False, None),
    ("src/\x00main.rs", False, None),
    # globs, fragments, markup: patterns and links, not one file
    ("src/*.rs", False, None),
    ("**/*.py", False, None),
    ("README.md#usage", False, None),
    ("<src/main.rs>", False, None),
    ("ls | grep x.md", False, None),
    # line references: only the spec's, and GitHub's range
    ("src/main.rs#L12-L20", True, "src/main.rs"),
    ("src/main.rs:12-20", False, None),
    (":12", False, None),
    ("#L12", False, None),
    # names a file might have, and names that are not files
    (".github/workflows/ci.yml", True, ".github/workflows/ci.yml"),
    (".github/workflows", True, ".github/workflows"),  # a dotfile directory reads as a path
    (".env.local", True, ".env.local"),
    (".DS_Store", True, ".DS_Store"),
    (".NET", False, None),
    ("ASP.NET", False, None),
    ("Dockerfile.dev", True, "Dockerfile.dev"),
    ("LICENSE", True, "LICENSE"),
    ("license", False, None),
    ("go.mod", True, "go.mod"),
    ("index.d.ts", True, "index.d.ts"),
    ("node_modules/@types/node/index.d.ts", True, "node_modules/@types/node/index.d.ts"),
    ("@types/node", False, None),
    ("src/app.js", True, "src/app.js"),
    ("lib/math.js", True, "lib/math.js"),
    ("next.config.js", True, "next.config.js"),
    ("./node.js", True, "./node.js"),  # anchored: a file whatever its name
    ("Vue.js", False, None),
    ("mrdoob/three.js", False, None),
    ("example.com", False, None),
    ("www.example.com/about", False, None),
    ("//cdn.example.com/lib.js", False, None),
    ("user@example.com", False, None),
    ("localhost:8080", False, None),
    ("std::fs::read", False, None),
    ("e.g.", False, None),
    ("a.m.", False, None),
    ("U.S.A", False, None),
    ("v1.4.2", False, None),
    ("3.14", False, None),
    ("main.c", True, "main.c"),
    ("config.d/50-lambo.conf", True, "config.d/50-lambo.conf"),
    ("w/o", False, None),
    ("24/7", False, None),
    ("2024/06/12", False, None),
    ("read/write", False, None),
    ("client/server", False, "client/server"),  # could be a directory: loosely a path
    ("lambo_core/recall", False, "lambo_core/recall"),
    # anchors with nothing after them
    (".", False, None),
    ("./", False, None),
    ("..", False, None),
    ("/", False, None),
    ("...", False, None),
    ("", False, None),
    ("   ", False, None),
]


@pytest.mark.parametrize(("text", "relative", "key"), EDGES)
def test_edge_cases(text: str, relative: bool, key: str | None) -> None:
    assert is_relative_path(text) is relative
    ref = path_key(text)
    assert (ref.key if ref is not None else None) == key


def test_a_text_longer_than_any_path_is_not_one() -> None:
    name = "a" * (MAX_PATH_BYTES - len("/x.md"))
    assert path_key(f"/{name}x.md") is not None
    assert path_key(f"/{name}xy.md") is None
    assert not is_relative_path(f"src/{'é' * MAX_PATH_BYTES}.md")


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ09_.-/\\:#~$ `\"'()@é\u0301\u200d\n"), max_size=24))
def test_every_key_is_its_own_canonical_key(text: str) -> None:
    """A path's key is what lambo already compares concepts by (trimmed, NFC, no invisible, one
    space at a time), so a scoped key never needs a second normalisation."""
    ref = path_key(text)
    if ref is None:
        assert not is_relative_path(text)
        return
    assert ref.key and canonical_key(ref.key) == ref.key
    assert not ref.key.endswith(("/", "\\")) or ref.key in {"/", "\\"}
    assert is_relative_path(text) == (ref.clear and not ref.absolute)


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([*SPEC_BARE_RELATIVE, *SPEC_SCOPED_PATHS, *SPEC_CLEAR, *SPEC_LOOSE]))
def test_a_line_reference_never_changes_what_a_text_is(text: str) -> None:
    plain = path_key(text)
    assert plain is not None
    for line_ref in [*LINE_REFS, "#L12-L20"]:
        expected = PathRef(plain.key, plain.clear, plain.absolute, line_ref)
        assert path_key(text + line_ref) == expected


# --- beside recall/names.py -------------------------------------------------------------------

# Clear paths a question's exact names (recall/names.py) do not carry as the path, and why.
# names.py picks the words of a question to match exactly; it strips "./" and a leading dot as
# punctuation and wants a digit, a / or a dotted name. These are gaps of the keyword side that
# repo_scope's dependency question will meet, not disagreements about what a path is.
NAMES_MISS = {
    ".env": "a leading dot is stripped as punctuation, and env is a plain word",
    ".gitignore": "likewise",
    "Makefile": "a plain word to names.py: no digit, dot, slash or inner capital",
    "Dockerfile": "likewise",
    "README.md:12": "names.py keeps the line reference: it looks for README.md:12",
    "src/main.rs#L12": "names.py keeps #L12 as part of the name",
}


@pytest.mark.parametrize(
    "text",
    [*SPEC_BARE_RELATIVE, *SPEC_CLEAR, "README.md:12", "src/main.rs#L12", "/etc/hosts"],
)
def test_a_question_naming_a_clear_path_finds_it_exactly_unless_noted(text: str) -> None:
    ref = path_key(text)
    assert ref is not None and ref.clear
    names = question_names(f"what depends on {text}")
    found = any(score == 1.0 for score in NameMatcher(names).matches(ref.key))
    assert found is (text not in NAMES_MISS), NAMES_MISS.get(text, names)


@pytest.mark.parametrize("text", ["Node.js", "crates.io", "TCP/IP", "vercel/next.js"])
def test_a_name_is_not_always_a_path(text: str) -> None:
    """names.py matches these exactly, as it should; they name no file."""
    assert question_names(f"what depends on {text}") == [text]
    assert path_key(text) is None
