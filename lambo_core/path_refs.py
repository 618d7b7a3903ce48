"""Which texts name a file or a directory, and the identity two such texts share (issue #17).

Two rules of the spec rest on this, and only on the text: a write into a shared layer refuses a
bare relative path (lambo_derive, "Writing to a layer"), and repo_scope gives each repository
its own concept for a path ("Repository-scoped paths"). Nothing here reads a filesystem or a
remote. The whole trimmed text is judged: "README.md" is a path, "edited README.md" is prose.

- An anchored text is a path: ``./`` ``../`` (or with ``\\``), ``/``, ``\\``, ``~/``, a drive
  (``C:\\``) or a variable (``$HOME/``). Only an anchored path may hold a space, never right
  after a separator (``/ note`` and ``~ 5 minutes`` are prose).
- An unanchored text is a path when it reads as a file (a known extension, a dotfile, Makefile
  and the like) or ends in a separator (``docs/reference/``). With neither, several segments
  are only loosely a path (``docs/reference``, ``scripts/build``): ``PathRef.clear`` is False.
- Not paths: URLs and ``git@host:path`` remotes (a colon that is no drive and no line
  reference), domain-led names (``github.com/x/a.rs``), names that are not files (``crates.io``,
  ``Node.js``, ``vercel/next.js``), slash prose (``and/or``, ``I/O``, ``TCP/IP``), one plain word.
- A ``:12``, ``:12:5``, ``#L12`` (or ``#L12-L20``) line reference names the same file, so the key
  drops it, and a trailing separator (``docs/`` and ``docs`` are one directory). Otherwise the
  key is the text after trimming and NFC, so case and spelling count (``./a.rs`` is not
  ``a.rs``, ``src\\a.rs`` is not ``src/a.rs``).

recall/names.py answers a different question (which words of a question to match exactly):
Node.js and TCP/IP are names there and not paths here, .env and Makefile the reverse.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from lambo_core.text import find_refused, visible_nfc


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Linux's PATH_MAX: a longer text is a paragraph that happens to start with a slash.
MAX_PATH_BYTES = 4096

# File extensions, compared in lower case. Deliberately absent: endings that are mostly domains
# or product names when a text is only that name (io, com, org, net, dev, app, ai, co, so, me).
# Present although they are domains too, because in code they are files first: md, rs, py, sh.
FILE_EXTENSIONS = _words(
    """
    py pyi pyx pxd ipynb rs go c h cc cpp cxx hpp hh hxx m mm swift kt kts java scala sc groovy
    gradle clj cljs cljc edn ex exs erl hrl hs lhs ml mli fs fsi fsx cs vb js mjs cjs jsx ts mts
    cts tsx vue svelte astro rb rake php pl pm lua r jl dart nim zig sv vhd cr elm purs sol asm s
    wasm wat f90 lisp el scm rkt tcl awk sql prisma graphql gql proto thrift capnp
    sh bash zsh fish ps1 psm1 bat cmd
    toml yaml yml json jsonc json5 xml ini cfg conf config env properties plist lock mod sum nix
    dhall cue hcl tf tfvars bzl bazel mk cmake ninja gn gni in am ac m4
    md markdown mdx rst txt adoc asciidoc tex bib csv tsv log diff patch pdf html htm css scss
    sass less styl xhtml svg
    png jpg jpeg gif webp ico bmp tiff mp3 mp4 wav ogg mov webm ttf otf woff woff2
    zip tar gz tgz bz2 xz zst 7z jar war whl egg deb rpm dmg exe dll dylib a o obj class pyc bin
    img iso db sqlite sqlite3 pem crt csr pub p12
    service socket timer desktop map template tmpl tpl j2 jinja hbs ejs pug erb haml liquid
    mustache njk spec qml xaml csproj sln vcxproj fsproj pbxproj xcconfig gemspec podspec cabal
    opam ron kdl http
    """
)

# Files named without an extension (and with one after it, Dockerfile.dev), case counting:
# "LICENSE" is the file, "license" a word.
KNOWN_FILES = _words(
    """
    Makefile makefile GNUmakefile Dockerfile Containerfile Jenkinsfile Vagrantfile Gemfile
    Rakefile Procfile Justfile justfile Brewfile Podfile Fastfile Guardfile Snakefile Pipfile
    Cakefile Earthfile Tiltfile Berksfile Capfile Puppetfile Dangerfile Caddyfile
    LICENSE LICENCE COPYING README CHANGELOG AUTHORS CONTRIBUTORS CODEOWNERS NOTICE MAINTAINERS
    WORKSPACE
    """
)

# Libraries named like a .js file (Node.js, vercel/next.js), compared in lower case. Only names
# unlikely to be a project's own file are listed: "app.js" and "math.js" stay files.
_LIBRARY_STEMS = _words(
    """
    node next nuxt vue three d3 ember backbone chart moment alpine pixi anime p5 knockout
    handlebars meteor nest sails tone babylon tensorflow ml5 web3 ethers discord reveal
    highlight popper underscore require mithril riot immutable hammer plotly cytoscape sigma
    zepto cannon typed particles impress express react angular
    """
)
LIBRARY_NAMES = frozenset(f"{stem}.js" for stem in _LIBRARY_STEMS)

# Slash prose written in lower case; acronyms (I/O, TCP/IP) and one-letter halves (w/o, n/a)
# are recognised by their shape.
PROSE_PAIRS = _words(
    """
    and/or either/or he/she his/her him/her his/hers yes/no on/off true/false read/write
    input/output pros/cons plus/minus before/after
    """
)

# Wrappers a name is quoted or bracketed in: `README.md`, "src/main.rs", (docs/).
_WRAPPERS = {'"': '"', "'": "'", "`": "`", "“": "”", "‘": "’", "«": "»", "(": ")"}
_SENTENCE_END = re.compile(r"(?<=[\w`'\"”’»)])[.,;:!?]+$")
_LINE_REF = re.compile(r"(?<=.)(:\d+(?::\d+)?|#L\d+(?:-L\d+)?)$")
_SEPARATOR = re.compile(r"[/\\]")
# A glob, a redirect, a fragment or markup: a pattern or prose, not one file.
_NOT_IN_A_PATH = re.compile(r"[*?<>|\"`#]|[^\S ]| {2}")
_ANCHOR = re.compile(
    r"""(?x)
    (?P<relative>\.\.?[/\\])
    | (?P<absolute>~[/\\] | \$\{?\w+\}?[/\\] | %\w+%[/\\] | [A-Za-z]:[/\\] | \\\\ | [/\\])
    """
)
_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,63}")
_DOTFILE = re.compile(r"\.[\w][\w.+-]*")


@dataclass(frozen=True)
class PathRef:
    """A text that names a file or directory, by the identity repo_scope matches on."""

    key: str  # NFC, trimmed; no line reference, quotes, sentence end or trailing separator
    clear: bool  # reads as a file or directory on its own; False for docs/reference
    absolute: bool  # anchored at /, \, a drive, a UNC share, ~ or a variable
    line_ref: str = ""  # the :12, :12:5 or #L12 the key dropped


def is_relative_path(text: str) -> bool:
    """Whether ``text`` is a bare relative path, which a write into a shared layer refuses:
    README.md, .env, Makefile, src/main.rs, docs/reference/, ./run.sh, ..\\lambo\\AGENTS.md,
    also with a line reference. Absolute and home paths, URLs, remotes, domain and library
    names, branch names, repo slugs, slash prose and docs/reference (no trailing /) pass."""
    ref = path_key(text)
    return ref is not None and ref.clear and not ref.absolute


def path_key(text: str) -> PathRef | None:
    """The path ``text`` names, or None when it names none (see the module docstring).

    Where the type is named (a resource concept, produces, modifies, an action text) any
    PathRef is a path; where it is inferred, only a ``clear`` one creates a scoped path."""
    body = _unwrap(unicodedata.normalize("NFC", text).strip())
    body, line_ref = _split_line_ref(body)
    if not _may_be_a_path(body):
        return None
    anchor = _ANCHOR.match(body)
    rest = body[anchor.end() :] if anchor else body
    if not rest or rest[0] == " " or not re.search(r"\w", rest):
        return None  # "/", "./", "/ note": a prefix with no name after it
    if ":" in rest or (body.startswith("//") and _HOST.fullmatch(_SEPARATOR.split(rest)[1])):
        return None  # a URL, a scp-style remote, or a protocol-relative URL
    trailing = bool(_SEPARATOR.fullmatch(rest[-1]))
    segments = _segments(rest)
    if " " in rest and not _spaces_fit(segments, trailing, anchored=anchor is not None):
        return None
    if anchor is not None:
        clear = True
    else:
        reading = _unanchored(segments, trailing)
        if reading is None:
            return None
        clear = reading
    key = unicodedata.normalize("NFC", body.rstrip("/\\"))
    return PathRef(key, clear, anchor is not None and anchor["absolute"] is not None, line_ref)


def directory_of(parent: str, child: PathRef) -> PathRef | None:
    """``parent`` as a directory of ``child`` (``src`` over ``src/main.rs``), so a parent_of
    parent names that repository's directory rather than one shared word; None otherwise."""
    named = path_key(parent)
    key = named.key if named is not None else unicodedata.normalize("NFC", parent.strip())
    if not key or not _may_be_a_path(key) or not child.key.startswith(key):
        return None
    if not _SEPARATOR.fullmatch(child.key[len(key) : len(key) + 1]):
        return None
    return PathRef(key, True, child.absolute)


# --- the pieces --------------------------------------------------------------------------


def _unwrap(text: str) -> str:
    """``text`` without a sentence's end (README.md.) and the quotes around it (`README.md`)."""
    while True:
        text = _SENTENCE_END.sub("", text)
        if len(text) > 2 and _WRAPPERS.get(text[0]) == text[-1]:
            text = text[1:-1].strip()
        else:
            return text


def _split_line_ref(text: str) -> tuple[str, str]:
    match = _LINE_REF.search(text)
    return (text[: match.start()], match.group()) if match else (text, "")


def _may_be_a_path(text: str) -> bool:
    """Characters any path could have: no control or invisible one, no tab or line break, no
    run of spaces, no glob or markup, and short enough."""
    return (
        bool(text)
        and len(text.encode("utf-8", "surrogatepass")) <= MAX_PATH_BYTES
        and find_refused(text) is None
        and visible_nfc(text) == text
        and not _NOT_IN_A_PATH.search(text)
    )


def _segments(rest: str) -> list[str]:
    return _SEPARATOR.split(rest.rstrip("/\\"))


def _spaces_fit(segments: list[str], trailing: bool, *, anchored: bool) -> bool:
    """Spaces are inside an anchored path's names (./my notes.md, C:\\Program Files\\x.exe),
    never next to a separator, and a last name with one reads as a file or ends in a
    separator: "./run.sh --verbose" and "/etc/hosts is where" are prose."""
    if not anchored or any(s != s.strip(" ") for s in segments):
        return False
    last = segments[-1]
    return " " not in last or trailing or _extension(last) is not None


def _unanchored(segments: list[str], trailing: bool) -> bool | None:
    """How an unanchored text reads: True a clear path, False loosely one, None not one."""
    several = len(segments) > 1 or trailing
    if several and (segments[0].startswith("@") or _HOST.fullmatch(segments[0])):
        return None  # an npm scope (@types/node) or a domain-led name (github.com/x)
    last = segments[-1]
    if last.casefold() in LIBRARY_NAMES:
        return None
    if _reads_as_file(last) or trailing or any(_is_dotfile(s) for s in segments):
        return True
    if len(segments) == 1 or _slash_prose(segments):
        return None
    return False


def _reads_as_file(name: str) -> bool:
    return _extension(name) is not None or _is_dotfile(name) or name.split(".")[0] in KNOWN_FILES


def _extension(name: str) -> str | None:
    """The file extension of one name (rs in main.rs), if it is a known one. A one-letter
    extension needs a stem of two letters or more, so a.m and U.S.A are abbreviations."""
    stem, dot, ext = name.rpartition(".")
    if not dot or not stem.strip("."):
        return None
    if ext.lower() not in FILE_EXTENSIONS:
        return None
    if len(ext) == 1 and len(stem.rpartition(".")[2]) < 2:
        return None
    return ext


def _is_dotfile(name: str) -> bool:
    """.env, .gitignore, .DS_Store; not .NET (a name in capitals), .5 or an ellipsis."""
    return bool(_DOTFILE.fullmatch(name)) and any(ch.islower() for ch in name)


def _slash_prose(segments: list[str]) -> bool:
    """and/or, I/O, TCP/IP, CI/CD, w/o, 24/7: slashes that join words, not directories."""
    if all(not any(ch.islower() for ch in s) for s in segments):
        return True
    if any(len(s) <= 1 for s in segments):
        return True
    return "/".join(segments).casefold() in PROSE_PAIRS
