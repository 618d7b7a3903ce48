"""The shell layer's pieces in-process: flags named in refusals, `-` for stdin, the --store
rule on every command, and the lines and exit codes a write's outcome prints.

Real processes cover each behaviour end to end (tests/e2e/test_cli_shell.py); these cases
cover the variants that need no process: CliRunner, a memory store, no model.
"""

from __future__ import annotations

import io
from itertools import takewhile
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from lambo_core.cli import cli
from lambo_core.cli.flags import FieldFlags, text_or_stdin
from lambo_core.cli.output import (
    ShellCall,
    split_receipt_line,
    stats_exit_code,
    write_exit_code,
    write_outcome,
)
from lambo_core.cli.tools import derive_flags
from lambo_core.errors import ParameterError
from lambo_core.text import MAX_STRING_BYTES

KINDS = "entity, logic, constraint, resource, observation"


def invoke(*args: str, stdin: str | bytes | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), input=stdin)


def last_line(result: Result) -> str:
    return result.output.strip().splitlines()[-1]


# --- refusals name the flag, through the real admission rules -------------------------------


@pytest.mark.parametrize(
    ("args", "code", "line"),
    [
        (
            ("derive", "--content", "y", "--concept", "z:gadget"),
            2,
            f"lambo: --concept KIND: unknown variant gadget, expected one of {KINDS}",
        ),
        (("derive", "--content", "y", "--concept", "  :entity"), 2, None),
        (
            ("derive", "--content", "y", "--parent-of", "a:b", "--parent-of", "c: "),
            2,
            "lambo: --parent-of #2 PARENT must not be empty or blank",
        ),
        (
            ("derive", "--content", "y", "--against", "x", "--against", "nope"),
            1,
            'lambo: reference refused: --against #1 "x" matches nothing in this session; '
            "nothing was written",
        ),
        (
            ("derive", "--content", "y", "--event-time", "soon"),
            2,
            None,
        ),
        (
            ("record-action", "--action", "a", "--modifies", " "),
            2,
            "lambo: --modifies must not be empty or blank",
        ),
        (("derive", "--content", " "), 2, "lambo: --content must not be empty or blank"),
        (
            ("derive", "--content", "README.md", "--kind", "resource", "--repo-scope", " "),
            2,
            "lambo: --repo-scope must not be empty or whitespace; nothing was written",
        ),
        (
            ("record-action", "--action", "a", "--modifies", "x", "--repo-scope", "a b"),
            2,
            "lambo: --repo-scope contains whitespace inside it (U+0020); a repository id is "
            "one run of visible characters, such as github.com/acme/widgets; nothing was written",
        ),
        (
            ("derive", "--agent", "a\tb", "--content", "y"),
            2,
            "lambo: --agent must be one line with no tabs, control or line-separator "
            "characters; found U+0009",
        ),
    ],
)
def test_a_tool_refusal_names_the_flag(args: tuple[str, ...], code: int, line: str | None) -> None:
    verb, *rest = args
    result = invoke(verb, "--session", "s", "--store", "memory", *rest)
    assert result.exit_code == code, result.output
    said = last_line(result)
    if line is not None:
        assert said == line
    assert said.removeprefix("lambo: reference refused: ").startswith(("lambo: --", "--")), said
    assert "concepts[" not in result.output and "parent_of[" not in result.output


def test_a_field_in_the_rest_of_a_message_is_left_alone() -> None:
    flags = FieldFlags({"agent_id": "a", "query": "q", "top_k": 5})
    assert flags.rewrite("top_k must be in 1..=100") == "--top-k must be in 1..=100"
    assert flags.rewrite('reference refused: query "top_k" matches nothing') == (
        'reference refused: --query "top_k" matches nothing'
    )
    # quoted caller text, and a field a message names later, are not touched
    assert flags.rewrite("the whole call's text is big; top_k") == (
        "the whole call's text is big; top_k"
    )
    assert flags.rewrite("configuration error: no model") == "configuration error: no model"
    action = FieldFlags({"produces": ["a"], "modifies": ["b"], "depends_on": ["c", "d"]})
    assert action.rewrite("produces, modifies and depends_on hold more than 64 entries") == (
        "--produces, --modifies and --depends-on hold more than 64 entries"
    )
    assert action.rewrite("depends_on[1] must be a string") == "--depends-on #2 must be a string"


def test_derive_flags_cover_every_field_a_derive_sends() -> None:
    arguments = {
        "agent_id": "a",
        "concepts": [{"content": "x", "concept_type": "entity"}, {"content": "y"}],
        "parent_of": [{"parent": "x", "child": "y"}],
        "event_time": "2026-01-01T00:00:00Z",
    }
    flags = derive_flags(arguments, depends_on=2, against=1, more=1, parent_of=1)
    assert flags.flag("concepts[0].depends_on[1]") == "--depends-on #2"
    assert flags.flag("concepts[0].against[0]") == "--against"
    assert flags.flag("concepts[1].content") == "--concept TEXT"
    assert flags.flag("parent_of[0].child") == "--parent-of CHILD"
    assert flags.flag("event_time") == "--event-time"
    assert flags.flag("agent_id") == "--agent"


# --- `-` reads standard input ------------------------------------------------------------------


def test_text_or_stdin() -> None:
    assert text_or_stdin("--content", "as given") == "as given"
    assert text_or_stdin("--content", "-", io.BytesIO(b"one line\n")) == "one line"
    assert text_or_stdin("--content", "-", io.BytesIO(b"two\n\n")) == "two\n"  # only one
    assert text_or_stdin("--content", "-", io.BytesIO(b"crlf\r\n")) == "crlf"
    assert text_or_stdin("--content", "-", io.BytesIO("é\n".encode())) == "é"
    cap = b"x" * MAX_STRING_BYTES
    assert text_or_stdin("--content", "-", io.BytesIO(cap + b"\n")) == cap.decode()
    refusals = {
        b"": "--content - reads standard input, which was empty; pipe the text in, or give it "
        "as --content TEXT",
        b"\xff\xfe\n": "--content - read standard input that is not UTF-8 text",
        cap + b"yy": f"--content - read more than {MAX_STRING_BYTES} bytes from standard "
        f"input; the cap is {MAX_STRING_BYTES} bytes",
    }
    for raw, message in refusals.items():
        with pytest.raises(ParameterError) as caught:
            text_or_stdin("--content", "-", io.BytesIO(raw))
        assert caught.value.render() == message


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("derive", "--content", "-"), "--content"),
        (("record-action", "--action", "-"), "--action"),
        (("recall", "--query", "-"), "--query"),
    ],
)
def test_dash_with_nothing_piped_is_refused(args: tuple[str, ...], flag: str) -> None:
    verb, *rest = args
    result = invoke(verb, "--session", "s", "--store", "memory", *rest, stdin="")
    assert result.exit_code == 2
    assert last_line(result) == (
        f"lambo: {flag} - reads standard input, which was empty; pipe the text in, or give it "
        f"as {flag} TEXT"
    )


# --- the --store rule, on every command that takes --store -----------------------------------

STORE_COMMANDS = [
    ("config", "show"),
    ("provision",),
    ("serve", "--session", "s"),
    ("derive", "--session", "s", "--content", "x"),
    ("record-action", "--session", "s", "--action", "x"),
    ("recall", "--session", "s", "--query", "x"),
    ("stats", "--session", "s"),
    ("inspect", "--session", "s", "--focus", "x"),
    ("saints", "--session", "s"),
    ("stale", "--session", "s"),
    ("reserve", "--session", "s", "--node", "x"),
    ("release", "--session", "s", "--node", "x"),
    ("demo",),
    ("canon", "suspected", "--session", "s"),
    ("session", "verify", "--session", "s"),
    ("session", "list"),
    ("serve-web", "--session", "s"),
    ("forget", "--session", "s", "abcdef12"),
    ("backup", "--force", "copy.db"),
    ("import", "--session", "s", "-"),
    ("export", "--session", "s"),
]


def _store_options(group: click.Group, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    found: set[tuple[str, ...]] = set()
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            found |= _store_options(command, (*prefix, name))
        elif any("--store" in getattr(p, "opts", ()) for p in command.params):
            found.add((*prefix, name))
    return found


def test_every_command_with_a_store_flag_is_listed() -> None:
    listed = {tuple(takewhile(lambda w: not w.startswith("-"), args)) for args in STORE_COMMANDS}
    assert listed == _store_options(cli)


@pytest.mark.parametrize("args", STORE_COMMANDS, ids=lambda a: " ".join(a[:2]))
def test_a_store_whose_directory_is_missing_is_refused(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    store = tmp_path / "missing" / "deeper" / "x.db"
    result = invoke(*args, "--store", str(store))
    assert result.exit_code == 2, result.output
    assert last_line(result) == (
        f"Error: Invalid value for '--store': the directory {store.parent} does not exist; "
        "lambo creates the store file but not its directory, so create the directory first "
        "or name a file in one that exists"
    )
    assert not (tmp_path / "missing").exists()
    empty = invoke(*args, "--store", "")
    assert empty.exit_code == 2
    assert (
        last_line(empty)
        == "Error: Invalid value for '--store': must name a SQLite file, or be `memory`"
    )


def test_integer_flags_refuse_without_echoing() -> None:
    result = invoke("recall", "--session", "s", "--query", "x", "--top-k", "five\x1b[2J")
    assert result.exit_code == 2
    assert last_line(result) == "Error: Invalid value for '--top-k': must be a whole number"
    assert "five" not in result.output


def test_wait_ms_flags_are_checked_before_anything_runs(tmp_path: Path) -> None:
    store = tmp_path / "untouched.db"
    alone = invoke("stats", "--session", "s", "--store", str(store), "--wait-ms", "10")
    assert alone.exit_code == 2
    assert "--wait-ms waits for the write a --receipt names" in last_line(alone)
    negative = invoke(
        "stats", "--session", "s", "--store", str(store), "--receipt", "r", "--wait-ms", "-3"
    )
    assert negative.exit_code == 2
    assert last_line(negative) == (
        "lambo: --wait-ms must be an integer in 0..=34000 (a larger value is clamped to 34000)"
    )
    assert not store.exists()


def test_reads_on_a_memory_store_say_it_starts_empty() -> None:
    result = invoke("saints", "--session", "s", "--store", "memory")
    assert result.exit_code == 1
    assert last_line(result) == (
        "lambo: no session named 's' in a memory store, which starts empty for every command; "
        "nothing was read, and nothing was created; `lambo session list --store memory` lists "
        "the sessions a store has"
    )


# --- what a write's outcome prints ----------------------------------------------------------------

ACK = {"summary": "accepted 1 concept(s)", "receipt": "lwr1.r", "receipt_state": "pending"}
SHELL = ShellCall("my session", "me", "/tmp/a b.db", "/etc/l.toml")
CHECK = (
    "check it with: lambo --config /etc/l.toml stats --session 'my session' --agent me "
    "--store '/tmp/a b.db' --receipt lwr1.r --wait-ms 34000"
)


def receipt(state: str, detail: str = "why", **data: object) -> dict[str, object]:
    return {"receipt": "lwr1.r", "state": state, "detail": detail, **data}


def test_applied_prints_the_ids() -> None:
    flags = FieldFlags({})
    for state in ("applied", "applied_after_restart"):
        printed = write_outcome(
            ACK,
            receipt(state, "derived 2\n- a candidate", created=["n1"], matched=["n2", "n3"]),
            SHELL,
            flags,
        )
        assert printed.out == [
            f"{state} — derived 2",
            "  - a candidate",
            "created: n1",
            "matched: n2 n3",
        ]
        assert printed.err == [] and printed.code == 0
    action = write_outcome(
        ACK, receipt("applied", "did", action_node="n1", created=["n1"]), SHELL, flags
    )
    assert action.out == ["applied — did", "action: n1", "created: n1"]


def test_not_applied_exits_1_and_says_how_to_check() -> None:
    flags = FieldFlags({"parent_of": []})
    failed = write_outcome(
        ACK, receipt("failed", "store error: parent_of would loop"), SHELL, flags
    )
    assert failed.out == [] and failed.code == 1
    assert failed.err == ["lambo: failed — store error: --parent-of would loop"]
    dropped = write_outcome(ACK, receipt("dropped", "nothing was written: full"), SHELL, flags)
    assert dropped.err == ["lambo: dropped — nothing was written: full"]
    for state in ("intent_durable", "close_unflushed", "pending_replay"):
        printed = write_outcome(ACK, receipt(state), SHELL, flags)
        assert printed.err == [f"lambo: {state} — why", CHECK] and printed.code == 1
    pending = write_outcome(ACK, receipt("pending"), SHELL, flags)
    assert pending.err == [
        "lambo: pending — admitted (receipt lwr1.r) and not applied yet",
        CHECK,
    ]
    assert write_exit_code(ACK, receipt("pending")) == 1


def test_no_wait_prints_the_receipt_in_shell_terms() -> None:
    printed = write_outcome(ACK, None, SHELL, FieldFlags({}))
    assert printed.out == ["accepted 1 concept(s)", "receipt lwr1.r: pending", CHECK]
    assert printed.code == 0 == write_exit_code(ACK, None)
    plain = ShellCall("s", "cli").check_receipt("lwr1.r")
    assert plain == "lambo stats --session s --receipt lwr1.r --wait-ms 34000"


@pytest.mark.parametrize(
    ("state", "code"),
    [
        ("never_issued", 1),
        ("restart_lost", 1),
        ("expired", 1),
        ("forbidden", 1),
        ("applied", 0),
        ("failed", 0),
        ("pending", 0),
        ("dropped", 0),
    ],
)
def test_stats_exits_1_only_for_a_receipt_it_cannot_answer(state: str, code: int) -> None:
    assert stats_exit_code({"receipt": receipt(state)}) == code
    assert stats_exit_code({}) == 0


def test_split_receipt_line() -> None:
    text = "receipt r: applied — x\n  - more\nsession s: 1 concepts\nwrite queue: 0"
    assert split_receipt_line(text) == (
        ["receipt r: applied — x", "  - more"],
        ["session s: 1 concepts", "write queue: 0"],
    )
    assert split_receipt_line("session s: 1") == ([], ["session s: 1"])


def test_repo_scope_flags_send_the_repository() -> None:
    for args in (
        ("record-action", "--action", "rewrote the notes", "--modifies", "README.md"),
        ("derive", "--content", "README.md", "--kind", "resource"),
    ):
        verb, *rest = args
        result = invoke(
            verb, "--session", "s", "--store", "memory", *rest,
            "--repo-scope", "github.com/acme/widgets",
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        assert "applied" in result.output
