"""`lambo` in a shell says what is true: exit codes and lines, through real processes (#12).

Each test shares one store between its commands. Refusals are asserted by
their whole `lambo: ` line on stderr (the log lines around them start
`lambo INFO` / `lambo WARNING`), outcomes by their stdout lines.
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from lambo_core import __version__
from tests.e2e.conftest import ROOT, lambo_argv, serve_env

UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
# What a tool's text tells a model, which a shell must never be told.
AGENT_ADVICE = ("next tool response", "send this same id", "lambo_stats", "wait_ms")
NO_MODEL = '[embedder]\nmodel = "nosuchmodel"\n'
KEYWORD_ONLY = '[embedder]\nmatch_strategy = "canonical"\n'
KINDS = "entity, logic, constraint, resource, observation"


def lambo(home: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return lambo_at(home, lambo_argv(), *args, stdin=stdin)


def lambo_at(
    home: Path, argv: list[str], *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*argv, *args],
        capture_output=True,
        text=True,
        input=stdin if stdin is not None else "",
        env=serve_env(home),
        cwd=home,
        timeout=120,
    )


def in_parallel(
    home: Path, commands: list[tuple[str, ...]]
) -> list[subprocess.CompletedProcess[str]]:
    """Independent commands at once (each on its own session, or refused before a lease)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: lambo(home, *args), commands))


def said(out: subprocess.CompletedProcess[str]) -> list[str]:
    """The CLI's own stderr lines (a refusal, a failed outcome), without the log's."""
    return [line for line in out.stderr.splitlines() if not line.startswith("lambo ")]


def no_advice(out: subprocess.CompletedProcess[str]) -> None:
    for text in AGENT_ADVICE:
        assert text not in out.stdout and text not in "\n".join(said(out)), text


def sessions(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return [row[0] for row in conn.execute("SELECT name FROM sessions ORDER BY name")]


def no_model_home(home: Path) -> Path:
    config = home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(NO_MODEL)
    return home


def keyword_only_home(home: Path) -> Path:
    """Memory without an embedder: writes apply with no model at all (and quickly)."""
    config = home / "config" / "lambo.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(KEYWORD_ONLY)
    return home


# --- the entry points ------------------------------------------------------------------------


def test_every_entry_point_runs(lambo_home: Path) -> None:
    """The console script, the checkout's lambo.py and `python -m lambo_core` (the CLI's
    behaviour itself is tested in-process, tests/test_cli.py)."""
    lambo_home.mkdir(parents=True)
    for argv in (
        lambo_argv(),
        [sys.executable, str(ROOT / "lambo.py")],
        [sys.executable, "-m", "lambo_core"],
    ):
        out = lambo_at(lambo_home, argv, "--version")
        assert out.returncode == 0, out.stderr
        assert __version__ in out.stdout
    out = lambo(lambo_home, "--help")
    assert out.returncode == 0, out.stderr
    assert "recall" in out.stdout and "serve" in out.stdout


# --- write verbs wait, exit by their outcome, and print about the shell's call -----------


def test_a_write_waits_and_prints_what_it_created(served_home: Path, tmp_path: Path) -> None:
    db = tmp_path / "w.db"
    base = ("--session", "w", "--store", str(db))
    out = lambo(served_home, "derive", *base, "--content", "lease TTL is 45s", "--kind", "logic")
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()
    assert first == "applied — derived 1 concept(s): 1 created (1 embedded), 0 matched existing"
    created = re.fullmatch(rf"created: ({UUID})", second)
    assert created, second
    no_advice(out)

    again = lambo(served_home, "derive", *base, "--content", "lease TTL is 45s", "--kind", "logic")
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[1:] == [f"matched: {created.group(1)}"]

    action = lambo(
        served_home,
        "record-action",
        *base,
        "--action",
        "raised the lease TTL",
        "--depends-on",
        "lease TTL is 45s",
    )
    assert action.returncode == 0, action.stderr
    lines = action.stdout.splitlines()
    assert lines[0].startswith("applied — recorded action ")
    assert "1 citation(s) recorded" in lines[0]
    node = re.fullmatch(rf"action: ({UUID})", lines[1])
    assert node and lines[2] == f"created: {node.group(1)}"
    no_advice(action)

    as_json = lambo(
        served_home, "record-action", *base, "--action", "ran the suite", "--json", "--no-wait"
    )
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert body["receipt_state"] == "pending" and "outcome" not in body

    # --no-wait: the receipt, pending, and the command that checks it, which works as printed
    later = lambo(served_home, "derive", *base, "--agent", "me", "--content", "x", "--no-wait")
    assert later.returncode == 0, later.stderr
    summary, pending, check = later.stdout.splitlines()
    assert summary.startswith("accepted 1 concept(s) for background write")
    receipt = re.fullmatch(r"receipt (lwr1\.\S+): pending", pending)
    assert receipt, pending
    assert check == (
        f"check it with: lambo stats --session w --agent me --store {db} "
        f"--receipt {receipt.group(1)} --wait-ms 34000"
    )
    no_advice(later)
    checked = lambo(served_home, *shlex.split(check.removeprefix("check it with: "))[1:])
    assert checked.returncode == 0, checked.stderr
    assert checked.stdout.startswith(f"receipt {receipt.group(1)}: applied_after_restart — ")
    # applied by the --no-wait command itself before it exited, not handed on for a replay
    assert "; replayed 0, owed 0" in checked.stdout


def test_a_write_that_fails_exits_1_also_with_json(lambo_home: Path) -> None:
    home = no_model_home(lambo_home)
    out = lambo(home, "derive", "--session", "nm", "--content", "a fact")
    assert out.returncode == 1
    assert out.stdout == ""
    (line,) = said(out)
    assert line.startswith(
        'lambo: failed — configuration error: embedder.model "nosuchmodel" is not a catalog model'
    )
    assert line.endswith(
        "; nothing was written by this server, and the write's intent is kept: the next "
        "server on this session replays it"
    )
    no_advice(out)

    as_json = lambo(home, "derive", "--session", "nm", "--content", "a fact", "--json")
    assert as_json.returncode == 1
    body = json.loads(as_json.stdout)
    assert body["outcome"]["state"] == "failed"

    action = lambo(home, "record-action", "--session", "nm", "--action", "did a thing", "--json")
    assert action.returncode == 1
    assert json.loads(action.stdout)["outcome"]["state"] == "failed"

    # keyword-only memory (no embedder) applies, and exits 0
    keyword_only_home(home)
    applied = lambo(home, "record-action", "--session", "nm", "--action", "did a thing")
    assert applied.returncode == 0, applied.stderr
    assert applied.stdout.startswith("applied — recorded action ")


# --- lambo stats --receipt / --wait-ms ------------------------------------------------------


def test_stats_exits_1_for_a_receipt_it_cannot_answer(lambo_home: Path) -> None:
    home = keyword_only_home(lambo_home)
    write = lambo(home, "derive", "--session", "st", "--content", "x", "--json")
    assert write.returncode == 0, write.stderr
    receipt = json.loads(write.stdout)["receipt"]

    bogus = lambo(home, "stats", "--session", "st", "--receipt", "bogus")
    assert bogus.returncode == 1
    assert said(bogus) == [
        "lambo: receipt (not a lambo receipt id): never_issued — this server has never handed "
        "out that id; it is not in the form a lambo receipt id takes"
    ]
    assert bogus.stdout.startswith("session st: ")  # the figures are still reported

    as_json = lambo(home, "stats", "--session", "st", "--receipt", "bogus", "--json")
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["receipt"]["state"] == "never_issued"

    lost = lambo(home, "stats", "--session", "st", "--receipt", "lwr1.0123456789abcdef.1a.7")
    assert lost.returncode == 1
    assert said(lost)[0].startswith("lambo: receipt lwr1.0123456789abcdef.1a.7: restart_lost — ")

    other = lambo(home, "stats", "--session", "st", "--agent", "other", "--receipt", receipt)
    assert other.returncode == 1
    assert said(other) == [
        f"lambo: receipt {receipt}: forbidden — this receipt belongs to another agent or session",
        "a receipt answers only the --agent and --session that made the write",
    ]

    # a known outcome is an answer, whatever it is; a wait above the bound is clamped
    known = lambo(home, "stats", "--session", "st", "--receipt", receipt, "--wait-ms", "99999")
    assert known.returncode == 0, known.stderr
    assert known.stdout.startswith(f"receipt {receipt}: applied_after_restart — derived 1 ")

    alone = lambo(home, "stats", "--session", "st", "--wait-ms", "500")
    assert alone.returncode == 2
    assert said(alone) == [
        "lambo: --wait-ms waits for the write a --receipt names, so it needs --receipt; pass "
        "--receipt ID, or leave --wait-ms out"
    ]
    negative = lambo(home, "stats", "--session", "st", "--receipt", receipt, "--wait-ms", "-1")
    assert negative.returncode == 2
    assert said(negative) == [
        "lambo: --wait-ms must be an integer in 0..=34000 (a larger value is clamped to 34000)"
    ]


# --- refusals name the flag ---------------------------------------------------------------


def test_refusals_name_the_flag_not_the_field(lambo_home: Path) -> None:
    home = no_model_home(lambo_home)
    assert lambo(home, "provision").returncode == 0
    cases: list[tuple[tuple[str, ...], int, str | None]] = [
        (
            ("derive", "--content", "y", "--kind", "widget"),
            2,
            f"lambo: --kind: unknown variant widget, expected one of {KINDS}",
        ),
        (
            ("derive", "--content", "y", "--kind", "wid\x07get"),
            2,
            f"lambo: --kind: unknown variant (not shown), expected one of {KINDS}",
        ),
        (
            ("derive", "--content", "y", "--concept", "z:entity", "--concept", "w:Logic"),
            2,
            f"lambo: --concept #2 KIND: unknown variant Logic, expected one of {KINDS}",
        ),
        (
            ("derive", "--content", "y", "--depends-on", "no such"),
            1,
            'lambo: reference refused: --depends-on "no such" matches nothing in this session; '
            "nothing was written",
        ),
        (
            ("record-action", "--action", "a", "--produces", "p", "--produces", " "),
            2,
            "lambo: --produces #2 must not be empty or blank",
        ),
        (("derive", "--content", "y", "--event-time", "yesterday"), 2, None),
    ]
    # one session each: one-shot commands on one session would contend for its lease
    outs = in_parallel(
        home,
        [(verb, "--session", f"rf{i}", *rest) for i, ((verb, *rest), _, _) in enumerate(cases)],
    )
    for out, (args, code, line) in zip(outs, cases, strict=True):
        assert out.returncode == code, (args, out.stderr)
        if line is None:
            (only,) = said(out)
            assert only.startswith("lambo: --event-time "), out.stderr
        else:
            assert said(out) == [line], args
        assert "concepts[" not in out.stderr and "\x07" not in out.stderr

    # the refused derives created their sessions (a write opens its session): read them
    top_k, focus = in_parallel(
        home,
        [
            ("recall", "--session", "rf0", "--query", "y", "--top-k", "101"),
            ("inspect", "--session", "rf1", "--focus", "nothing like it"),
        ],
    )
    assert top_k.returncode == 2
    assert said(top_k) == ["lambo: --top-k must be in 1..=100"]
    assert focus.returncode == 1
    assert said(focus)[0].startswith('lambo: reference refused: --focus "nothing like it" ')


# --- `-` reads standard input ----------------------------------------------------------------


def test_dash_reads_standard_input(served_home: Path) -> None:
    base = ("--session", "in")
    out = lambo(served_home, "derive", *base, "--content", "-", stdin="piped from a shell\n")
    assert out.returncode == 0, out.stderr
    shown = lambo(served_home, "inspect", *base, "--focus", "piped from a shell", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["content"] == "piped from a shell"  # one newline dropped

    action = lambo(served_home, "record-action", *base, "--action", "-", stdin="ran it\r\n")
    assert action.returncode == 0, action.stderr
    shown = lambo(served_home, "inspect", *base, "--focus", "ran it", "--json")
    assert json.loads(shown.stdout)["content"] == "ran it"

    # the query is the piped text: its own concept outranks the latest write
    query = ("recall", *base, "--query", "-", "--top-k", "1", "--json")
    recalled = lambo(served_home, *query, stdin="piped from a shell\n")
    assert recalled.returncode == 0, recalled.stderr
    assert [hit["content"] for hit in json.loads(recalled.stdout)["hits"]] == ["piped from a shell"]

    empty = lambo(served_home, "derive", *base, "--content", "-", stdin="\n")
    assert empty.returncode == 2
    assert said(empty) == [
        "lambo: --content - reads standard input, which was empty; pipe the text in, or give "
        "it as --content TEXT"
    ]
    assert lambo(served_home, *query, stdin="").returncode == 2


# --- reads on a session the store does not have -----------------------------------------------


def test_reads_on_an_unknown_session_create_nothing(lambo_home: Path, tmp_path: Path) -> None:
    home = no_model_home(lambo_home)
    db = tmp_path / "r.db"
    made = lambo(home, "derive", "--session", "real", "--store", str(db), "--content", "x")
    assert made.returncode == 1  # failed (no model), but the session exists now
    assert sessions(db) == ["real"]
    reads = [
        ("recall", "--query", "x"),
        ("stats",),
        ("inspect", "--focus", "x"),
        ("saints",),
        ("stale",),
    ]
    outs = in_parallel(home, [(*verb, "--session", "raal", "--store", str(db)) for verb in reads])
    for out, verb in zip(outs, reads, strict=True):
        assert out.returncode == 1, (verb, out.stderr)
        assert said(out) == [
            f"lambo: no session named 'raal' in the store {db}; nothing was read, and nothing "
            f"was created; `lambo session list --store {db}` lists the sessions a store has"
        ], verb
        assert out.stdout == ""
    assert sessions(db) == ["real"]

    missing = tmp_path / "never.db"
    out = lambo(home, "stats", "--session", "real", "--store", str(missing))
    assert out.returncode == 1
    assert said(out)[0].startswith(
        f"lambo: no session named 'real' in the store {missing}, which does not exist yet; "
    )
    assert not missing.exists()


# --- --store in a directory that does not exist ------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ("derive", "--session", "s", "--content", "x"),
        ("stats", "--session", "s"),
        ("serve", "--session", "s"),
        ("session", "list"),
    ],
)
def test_a_store_in_a_missing_directory_is_refused(lambo_home: Path, args: tuple[str, ...]) -> None:
    lambo_home.mkdir()
    store = lambo_home.parent / "no" / "such" / "dir" / "x.db"
    out = lambo(lambo_home, *args, "--store", str(store))
    assert out.returncode == 2
    assert out.stderr.splitlines()[-1] == (
        f"Error: Invalid value for '--store': the directory {store.parent} does not exist; "
        "lambo creates the store file but not its directory, so create the directory first "
        "or name a file in one that exists"
    )
    assert not (lambo_home.parent / "no").exists()


# --- locks live in a serve ----------------------------------------------------------------------


def test_reserve_and_release_need_the_serve_that_holds_the_session(served_home: Path) -> None:
    node = "478416c2-0000-0000-0000-000000000000"
    for verb in ("reserve", "release"):
        out = lambo(served_home, verb, "--session", "locks", "--node", node)
        assert out.returncode == 1, out.stderr
        assert said(out) == [
            "lambo: no lambo serve holds session 'locks', and locks live in the serve that "
            "holds a session: a lock taken by this command would end with it, so nothing was "
            "locked or released; start `lambo serve --session locks` (an agent's MCP client "
            "runs one) and run this again while it runs, or use lambo_reserve from the agent"
        ]
    assert not (served_home / "data" / "lambo.db").exists()  # nothing opened, nothing created

    argv = lambo_argv()
    params = StdioServerParameters(
        command=argv[0],
        args=[*argv[1:], "serve", "--session", "locks"],
        env=serve_env(served_home),
        cwd=str(served_home),
    )

    async def scenario() -> None:
        async with Client(params) as client:
            await client.call_tool("lambo_stats", {"agent_id": "a"})  # the serve holds it

            def shell(*args: str) -> subprocess.CompletedProcess[str]:
                return lambo(served_home, *args)

            made = await anyio.to_thread.run_sync(
                shell, "derive", "--session", "locks", "--content", "the lease table"
            )
            assert made.returncode == 0, made.stderr
            concept = made.stdout.splitlines()[1].removeprefix("created: ")
            held = await anyio.to_thread.run_sync(
                shell, "reserve", "--session", "locks", "--agent", "me", "--node", concept
            )
            assert held.returncode == 0, held.stderr
            other = await client.call_tool("lambo_reserve", {"agent_id": "a", "node_id": concept})
            assert other.is_error  # the lock is held in the serve, under the shell's agent
            freed = await anyio.to_thread.run_sync(
                shell, "release", "--session", "locks", "--agent", "me", "--node", concept
            )
            assert freed.returncode == 0, freed.stderr
            taken = await client.call_tool("lambo_reserve", {"agent_id": "a", "node_id": concept})
            assert not taken.is_error

    anyio.run(scenario)


# --- a one-shot recall has its vector leg --------------------------------------------------------


def test_a_one_shot_recall_waits_for_the_model(served_home: Path) -> None:
    config = served_home / "config" / "lambo.toml"
    # A serve's recall would not wait for the model at all: the one-shot command must.
    config.write_text(config.read_text() + "[recall]\nmodel_wait_ms = 0\n")
    out = lambo(served_home, "derive", "--session", "v", "--content", "The cat naps on the sofa")
    assert out.returncode == 0, out.stderr
    recalled = lambo(
        served_home, "recall", "--session", "v", "--query", "where is the kitten", "--json"
    )
    assert recalled.returncode == 0, recalled.stderr
    body = json.loads(recalled.stdout)
    assert not [w for w in body["warnings"] if "vector leg" in w], body["warnings"]
    assert "Keyword-only" not in body["context"]
    assert [hit["content"] for hit in body["hits"]] == ["The cat naps on the sofa"]


# --- a command rides out a hub that is still starting (#13) -------------------------------------

# A serve started with this holds every Session.open while the gate file exists: it holds
# the lease and has published nothing, as a hub still opening a large session has.
SLOW_OPEN = """
import os, time
import lambo_core.session as session

_open = session.Session.open.__func__
_gate = os.environ["LAMBO_E2E_OPEN_GATE"]

def _held_open(cls, *args, **kwargs):
    while os.path.exists(_gate):
        time.sleep(0.01)
    return _open(cls, *args, **kwargs)

session.Session.open = classmethod(_held_open)
"""
# A command started with this waits at most 1 s for a holder that does not answer.
SHORT_WAIT = "import lambo_core.client as client\nclient.HUB_START_WAIT_S = 1.0\n"


def _hooked(home: Path, tmp: Path, name: str, code: str, **env: str) -> dict[str, str]:
    where = tmp / name
    where.mkdir()
    (where / "sitecustomize.py").write_text(code)
    return {**serve_env(home), "PYTHONPATH": str(where), **env}


def _lease_row(db: Path, session: str) -> tuple[int, str | None] | None:
    """(holder pid, recorded socket) of the session's lease, or None before there is one."""
    if not db.exists():
        return None
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute(
                "SELECT pid, socket FROM session_leases WHERE session = ?", (session,)
            ).fetchone()
    except sqlite3.OperationalError:  # the serve is still creating the schema
        return None
    return None if row is None else (int(row[0]), row[1])


def _starting_hub(home: Path, tmp: Path, gate: Path, session: str) -> subprocess.Popen[bytes]:
    """A `lambo serve` that holds the lease of ``session`` and answers nothing yet."""
    gate.write_text("closed")
    env = _hooked(home, tmp, "slow-open", SLOW_OPEN, LAMBO_E2E_OPEN_GATE=str(gate))
    hub = subprocess.Popen(
        [*lambo_argv(), "serve", "--session", session],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=home,
    )
    db = home / "data" / "lambo.db"
    for _ in range(6000):  # a failure bound of about a minute, polling the lease record
        row = _lease_row(db, session)
        if row is not None and row[0] == hub.pid:
            assert row[1] is None  # held, nothing published: still starting
            return hub
        assert hub.poll() is None, "the serve exited"
        subprocess.run(["sleep", "0.01"], check=True)
    raise AssertionError("the serve never took the lease")


def _stop(hub: subprocess.Popen[bytes]) -> None:
    assert hub.stdin is not None
    hub.stdin.close()
    try:
        hub.wait(30)
    except subprocess.TimeoutExpired:
        hub.kill()
        hub.wait()


def test_concurrent_writes_ride_out_a_hub_that_is_still_starting(
    lambo_home: Path, tmp_path: Path
) -> None:
    """The issue saw 11 of 36 concurrent derives refused while a hub was starting: each
    command now waits for the holder to answer and forwards to it."""
    home = keyword_only_home(lambo_home)
    gate = tmp_path / "open-gate"
    hub = _starting_hub(home, tmp_path, gate, "starting")
    try:
        commands = [
            [*lambo_argv(), "derive", "--session", "starting", "--agent", f"shell-{n}",
             "--content", f"the starting hub answers command {n}", "--kind", "logic"]
            for n in range(12)
        ]  # fmt: skip
        started = [
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=serve_env(home),
                cwd=home,
            )
            for argv in commands
        ]
        for p in started:  # each command is waiting for the holder (its log says so)
            assert p.stderr is not None
            for line in p.stderr:
                if "waiting up to 10 s for its holder (pid" in line:
                    break
            else:
                raise AssertionError("a command did not wait for the starting hub")
        gate.unlink()  # the hub finishes opening the session while the commands wait
        outs = [p.communicate(timeout=120) for p in started]
        codes = [p.returncode for p in started]
        assert codes == [0] * len(commands), outs
        for stdout, _ in outs:
            assert stdout.splitlines()[0].startswith("applied — derived 1 concept(s): 1 created")
        row = _lease_row(home / "data" / "lambo.db", "starting")
        assert row is not None and row[0] == hub.pid and row[1]  # the hub answered them all
    finally:
        _stop(hub)
    with sqlite3.connect(home / "data" / "lambo.db") as conn:
        contents = sorted(
            row[0]
            for row in conn.execute("SELECT content FROM concepts WHERE session = 'starting'")
        )
    assert contents == sorted(f"the starting hub answers command {n}" for n in range(12))


def test_a_hub_that_never_answers_is_refused_after_the_wait_saying_why(
    lambo_home: Path, tmp_path: Path
) -> None:
    home = keyword_only_home(lambo_home)
    gate = tmp_path / "open-gate"
    hub = _starting_hub(home, tmp_path, gate, "stuck")
    try:
        env = _hooked(home, tmp_path, "short-wait", SHORT_WAIT)
        out = subprocess.run(
            [*lambo_argv(), "derive", "--session", "stuck", "--content", "never written"],
            capture_output=True,
            text=True,
            env=env,
            cwd=home,
            timeout=120,
        )
        assert out.returncode == 1, out.stderr
        [line] = said(out)
        assert re.fullmatch(
            r"lambo: conflict: session 'stuck' is held by lambo-serve@\S+#"
            + str(hub.pid)
            + r" \(agent lambo-serve, pid "
            + str(hub.pid)
            + r"; last heartbeat \d+ s ago, lease expires in \d+ s\), which published no "
            r"socket within 1 s: a lambo serve still opening the session, or another lambo "
            r"command using it; try again once it answers or exits; nothing was read or written",
            line,
        ), line
    finally:
        gate.unlink()
        _stop(hub)
