"""The identifier set of the recall quality bench, generated from a seed (issue #15).

300 short facts, each carrying exactly one identifier, in families of near neighbours
(LAMBO-113 beside LAMBO-131 and LAMBO-311, E4045 beside E4041, src/lease_7.rs beside
src/lease_17.rs, v1.4.2 beside v1.4.12, hashes sharing a prefix, CamelCase and snake_case
names sharing their words); the topics the facts are about, shared across families so
that use of one topic raises some neighbours of an identifier and not others; the heavy
use (ordinary topic questions with no identifier, popular topics asked far more often);
and one question per identifier, phrased several ways, one in three beside what a near
neighbour is about (the asker misremembering which one was which).

Everything comes from ``random.Random(seed)``: the same seed gives the same set.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

SEED = 15
HEAVY_USE_RECALLS = 300

# What a fact is about: noun phrases with no digit, slash, underscore or inner capital,
# so that a fact's only identifier is the one it was written with.
TOPICS = (
    "the flaky lease renewal on mac laptops",
    "slow cold starts of the indexer",
    "duplicate webhook deliveries after a retry",
    "the nightly backup that silently skips large tables",
    "memory growth in the query planner",
    "timeouts when the object store throttles us",
    "clock skew between the two schedulers",
    "the login page hanging behind the corporate proxy",
    "stale search results after a reindex",
    "the export job writing empty spreadsheets",
    "rate limiting that blocks our own health checks",
    "a deadlock between the cache and the writer",
    "broken links in the generated docs",
    "the invoice totals rounding the wrong way",
    "tokens expiring early for users abroad",
    "the mobile app draining batteries overnight",
    "emails landing in spam for gmail users",
    "the dashboard showing yesterday's numbers",
    "uploads failing for files with accents in their names",
    "the queue consumer stalling under load",
    "noisy alerts from the disk monitor",
    "the staging database filling up",
    "retries hammering the payment provider",
    "a crash when the config file is empty",
    "pagination skipping rows on the admin page",
    "the feature flag service returning defaults",
    "slow image thumbnails on the gallery",
    "the search box ignoring quoted phrases",
    "password resets sent twice",
    "the audit log missing deleted records",
    "shard rebalancing taking hours",
    "connection pool exhaustion at peak traffic",
    "the map view loading blank tiles",
    "inconsistent time zones in reports",
    "a memory leak in the websocket gateway",
    "the build cache never hitting on the release branch",
    "compressed logs that cannot be read back",
    "orders stuck in the pending state",
    "the spell checker flagging product names",
    "flaky integration tests on the shared runner",
    "the scheduler running the same job twice",
    "customers seeing each other's avatars",
    "the importer choking on semicolon separated files",
    "latency spikes when the garbage collector runs",
    "the chat widget covering the checkout button",
    "translations falling back to english",
    "the offline mode losing unsynced edits",
    "certificate renewal failing on the edge nodes",
    "the recommendation model serving stale weights",
    "a slow startup when the plugin folder is large",
    "the billing page double charging on refresh",
    "the keyboard shortcuts clashing with the browser",
    "dark mode rendering grey text on grey",
    "the sitemap leaving out new articles",
    "the metrics exporter dropping labels",
    "search suggestions leaking private project names",
    "the trash folder never being emptied",
    "the video player stuttering on slow networks",
    "a permissions check skipped for service accounts",
    "the print layout cutting off the last column",
)

_TICKET = (
    "{id} tracks {t}.",
    "{id} is the ticket about {t}.",
    "We filed {id} for {t}.",
    "{id} was reopened because of {t}.",
)
_ERROR = (
    "Error {id} is logged on {t}.",
    "{id} is the error code we raise for {t}.",
    "{id} shows up in the logs with {t}.",
    "We added {id} to report {t}.",
)
_COMMIT = (
    "Commit {id} fixed {t}.",
    "{id} is the commit that reworked {t}.",
    "{id} reverted the earlier change for {t}.",
    "The fix for {t} landed in {id}.",
)
_PATH = (
    "{id} holds the code for {t}.",
    "{id} is where we handle {t}.",
    "We touched {id} to deal with {t}.",
    "The workaround for {t} lives in {id}.",
)
_VERSION = (
    "{id} shipped the fix for {t}.",
    "{id} is the release that changed {t}.",
    "{id} regressed {t}.",
    "Upgrading to {id} brought back {t}.",
)
_CAMEL = (
    "{id} is the class behind {t}.",
    "{id} handles {t}.",
    "The {id} type was split out to deal with {t}.",
    "We rewrote {id} because of {t}.",
)
_SNAKE = (
    "{id} is the function that handles {t}.",
    "The {id} helper was added for {t}.",
    "{id} was patched to stop {t}.",
    "Calls to {id} are behind {t}.",
)
FACT_TEMPLATES: dict[str, tuple[str, ...]] = {
    "ticket": _TICKET,
    "error": _ERROR,
    "commit": _COMMIT,
    "path": _PATH,
    "version": _VERSION,
    "camel": _CAMEL,
    "snake": _SNAKE,
}
QUESTION_TEMPLATES: dict[str, tuple[str, ...]] = {
    "ticket": (
        "what is {id} about?",
        "anything on {id}?",
        "what was {id} filed for",
        "remind me what {id} is",
    ),
    "error": (
        "what is {id} about?",
        "anything on {id}?",
        "why do we get {id}",
        "when is {id} raised?",
    ),
    "commit": (
        "what changed in {id}",
        "what did commit {id} do?",
        "anything on {id}?",
        "why was {id} made",
    ),
    "path": (
        "why did we touch {id}",
        "what is in {id}?",
        "anything on {id}?",
        "what is {id} for",
    ),
    "version": (
        "what changed in {id}?",
        "anything on {id}?",
        "what went wrong with {id}",
        "what is {id} about",
    ),
    "camel": (
        "what does {id} do?",
        "anything on {id}?",
        "why does {id} exist",
        "what is {id} about?",
    ),
    "snake": (
        "what does {id} do?",
        "anything on {id}?",
        "why was {id} added",
        "what is {id} about?",
    ),
}
# How each kind of fact is written (a path is a resource, a name an entity).
CONCEPT_TYPES = {
    "ticket": "observation",
    "error": "observation",
    "commit": "observation",
    "path": "resource",
    "version": "observation",
    "camel": "entity",
    "snake": "entity",
}
HEAVY_USE_TEMPLATES = (
    "what do we know about {t}?",
    "any notes on {t}",
    "{t}: what happened there?",
    "remind me about {t}",
    "is there anything about {t}",
)


@dataclass(frozen=True)
class IdentifierFact:
    id: str
    kind: str  # a key of FACT_TEMPLATES
    family: str  # the near-neighbour family it belongs to
    identifier: str
    topic: str
    text: str


@dataclass(frozen=True)
class IdentifierQuestion:
    id: str
    question: str
    fact_id: str
    identifier: str


@dataclass(frozen=True)
class IdentifierSet:
    facts: list[IdentifierFact]
    heavy_use: list[str]  # topic questions, recalled in this order before the questions
    questions: list[IdentifierQuestion]


# -- families of near neighbours --------------------------------------------------------


def _digit_family(
    rng: random.Random,
    digits: int,
    size: int,
    name: Callable[[str], str],
    taken: set[str],
    first: str = "123456789",
) -> list[str]:
    """``size`` names of numbers of ``digits`` digits not in ``taken``, each a digit swap
    or a one-digit change from one before it (113, 131, 311, 111, 133)."""
    while True:
        base = [rng.choice(first)] + [rng.choice("0123456789") for _ in range(digits - 1)]
        if len(set(base)) > 1 and name("".join(base)) not in taken:
            break
    numbers = ["".join(base)]
    while len(numbers) < size:
        variant = list(rng.choice(numbers))
        if rng.random() < 0.5:
            i, j = rng.sample(range(digits), 2)
            variant[i], variant[j] = variant[j], variant[i]
        else:
            variant[rng.randrange(digits)] = rng.choice("0123456789")
        text = "".join(variant)
        if text[0] != "0" and text not in numbers and name(text) not in taken:
            numbers.append(text)
    family = [name(n) for n in numbers]
    taken.update(family)
    return family


def _named(prefix: str) -> Callable[[str], str]:
    return lambda number: f"{prefix}{number}"


def _tickets(rng: random.Random) -> list[list[str]]:
    taken: set[str] = set()
    prefixes = ["LAMBO-"] * 10 + ["INFRA-"] * 2
    return [_digit_family(rng, 3, 5, _named(p), taken) for p in prefixes]


def _errors(rng: random.Random) -> list[list[str]]:
    taken: set[str] = set()
    return [_digit_family(rng, 4, 5, _named("E"), taken, "45") for _ in range(10)]


def _commits(rng: random.Random) -> list[list[str]]:
    """Hashes of 7 to 12 hex digits sharing a 4-5 digit prefix, each with a letter and a
    digit (so no hash reads as a plain number or word)."""
    families: list[list[str]] = []
    taken: set[str] = set()
    for _ in range(10):
        prefix = "".join(rng.choice("0123456789abcdef") for _ in range(rng.choice((4, 5))))
        family: list[str] = []
        while len(family) < 5:
            length = rng.randint(7, 12)
            tail = "".join(rng.choice("0123456789abcdef") for _ in range(length - len(prefix)))
            text = prefix + tail
            has_letter = any(c in "abcdef" for c in text)
            has_digit = any(c.isdigit() for c in text)
            if has_letter and has_digit and text not in taken:
                family.append(text)
                taken.add(text)
        families.append(family)
    return families


_PATH_STEMS = (
    ("lease", "rs"),
    ("shard", "go"),
    ("ticket", "py"),
    ("queue", "ts"),
    ("cache", "rs"),
    ("span", "py"),
    ("quota", "go"),
    ("blob", "ts"),
)


def _paths(rng: random.Random) -> list[list[str]]:
    families: list[list[str]] = []
    for stem, ext in _PATH_STEMS:
        n = rng.randint(2, 9)
        numbers = [str(n), f"1{n}", f"{n}1", f"{n}{n}"]
        folder = rng.choice(("src", "lib", "pkg"))
        family = [f"{folder}/{stem}_{k}.{ext}" for k in numbers]
        family.append(f"tests/{stem}_{n}.{ext}")  # same file name, another folder
        families.append(family)
    return families


def _versions(rng: random.Random) -> list[list[str]]:
    families: list[list[str]] = []
    seen: set[str] = set()
    while len(families) < 8:
        a, b, c = rng.randint(0, 3), rng.randint(1, 9), rng.randint(1, 9)
        family = [
            f"v{a}.{b}.{c}",
            f"v{a}.{b}.1{c}",
            f"v{a}.1{b}.{c}",
            f"v{a}.{b}.{c}1",
            f"v{a}.{c}.{b}" if b != c else f"v{a}.{b}.{c + 1}",
        ]
        if len(set(family)) == 5 and not seen & set(family):
            seen.update(family)
            families.append(family)
    return families


_CAMEL_WORDS = (
    ("Lease", "Renew", "Renewer", "Renewal"),
    ("Shard", "Balance", "Balancer", "Balancing"),
    ("Token", "Refresh", "Refresher", "Refreshing"),
    ("Queue", "Drain", "Drainer", "Draining"),
    ("Cache", "Evict", "Evictor", "Eviction"),
    ("Span", "Export", "Exporter", "Exporting"),
)
_SNAKE_WORDS = (
    ("flush", "batch"),
    ("retry", "budget"),
    ("index", "merge"),
    ("sweep", "orphans"),
    ("upload", "chunk"),
    ("check", "quota"),
)


def _camels(_rng: random.Random) -> list[list[str]]:
    return [
        [f"{a}{er}", f"{a}{al}", f"{a}{er}Pool", f"{verb}{a}", f"{a}{er}s"]
        for a, verb, er, al in _CAMEL_WORDS
    ]


def _snakes(_rng: random.Random) -> list[list[str]]:
    return [
        [f"{v}_{n}", f"{v}_{n}_all", f"{n}_{v}", f"{v}_{n}_now", f"try_{v}_{n}"]
        for v, n in _SNAKE_WORDS
    ]


FAMILIES: dict[str, Callable[[random.Random], list[list[str]]]] = {
    "ticket": _tickets,
    "error": _errors,
    "commit": _commits,
    "path": _paths,
    "version": _versions,
    "camel": _camels,
    "snake": _snakes,
}


# -- the set ------------------------------------------------------------------------------


def generate(seed: int = SEED, heavy_use: int = HEAVY_USE_RECALLS) -> IdentifierSet:
    """The whole set for ``seed``: facts in writing order, heavy use, questions."""
    rng = random.Random(seed)
    labelled = [
        (kind, f"{kind}-{number}", identifier)
        for kind, make in FAMILIES.items()
        for number, family in enumerate(make(rng))
        for identifier in family
    ]
    rng.shuffle(labelled)  # written in no particular order, as work comes
    facts = []
    for n, (kind, family, identifier) in enumerate(labelled, start=1):
        topic = TOPICS[rng.randrange(len(TOPICS))]
        text = rng.choice(FACT_TEMPLATES[kind]).format(id=identifier, t=topic)
        facts.append(IdentifierFact(f"I{n:03d}", kind, family, identifier, topic, text))
    return IdentifierSet(facts, _heavy_use(rng, facts, heavy_use), _questions(rng, facts))


def _heavy_use(rng: random.Random, facts: list[IdentifierFact], count: int) -> list[str]:
    """Topic questions drawn with a long tail: a few topics are asked about very often."""
    topics = sorted({f.topic for f in facts})
    rng.shuffle(topics)
    weights = [1.0 / (rank + 1) for rank in range(len(topics))]
    drawn = rng.choices(topics, weights=weights, k=count)
    return [rng.choice(HEAVY_USE_TEMPLATES).format(t=t) for t in drawn]


# A question that names the identifier beside what a near neighbour is about, as when the
# asker misremembers which ticket was which: the words favour the neighbour, the name does not.
MISREMEMBERED = "is {id} the one about {t}?"
MISREMEMBERED_EVERY = 3  # one question in three


def _questions(rng: random.Random, facts: list[IdentifierFact]) -> list[IdentifierQuestion]:
    order = list(facts)
    rng.shuffle(order)
    by_family: dict[str, list[IdentifierFact]] = {}
    for fact in facts:
        by_family.setdefault(fact.family, []).append(fact)
    questions = []
    for n, f in enumerate(order, start=1):
        neighbours = [o for o in by_family[f.family] if o.topic != f.topic]
        if n % MISREMEMBERED_EVERY == 0 and neighbours:
            text = MISREMEMBERED.format(id=f.identifier, t=rng.choice(neighbours).topic)
        else:
            text = rng.choice(QUESTION_TEMPLATES[f.kind]).format(id=f.identifier)
        questions.append(IdentifierQuestion(f"IQ{n:03d}", text, f.id, f.identifier))
    return questions
