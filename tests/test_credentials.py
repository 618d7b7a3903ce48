"""Who may call an HTTP serve: ``[[serve.credential]]`` parsing field by field, resolving each
entry to a digest, the bearer-header check, and what ``lambo config show`` shows of them.

Every refusal names the entry (``serve.credential #N``) and the field, never a value that may
be a secret: the tests plant a recognisable token in each bad value and look for it."""

from __future__ import annotations

import hashlib
import logging
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lambo_core.cli import cli
from lambo_core.config import load_config, render_show
from lambo_core.credentials import (
    AUTH_TOKEN_NAME,
    ENTRY_FIELDS,
    MIN_TOKEN_CHARS,
    Credential,
    CredentialEntry,
    Verifier,
    digest_of,
    parse_entries,
    resolve,
)
from lambo_core.errors import ConfigError

TOKEN_A = "alpha-token-0123456789abcdef"
TOKEN_B = "bravo-token-0123456789abcdef"
SECRET = "PLANTED-SECRET-9f8e7d6c5b4a"  # put into bad values; no refusal may echo it


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def entry(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"name": "ci", "sessions": ["web"], "token_sha256": sha(TOKEN_A)}
    base.update(fields)
    return {k: v for k, v in base.items() if v is not None}


def refusal(raw: object) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_entries(raw, "lambo.toml")
    return str(caught.value)


# -- parsing ---------------------------------------------------------------------------


def test_a_well_formed_entry_of_each_source_parses() -> None:
    parsed = parse_entries(
        [
            entry(),
            entry(name="bot", token_sha256=None, token_file="~/tok"),
            entry(name="ci.2_x-y", sessions=["*"], token_sha256=None, token_env="CI_TOKEN"),
        ],
        "lambo.toml",
    )
    assert [(e.name, e.source) for e in parsed] == [
        ("ci", "token_sha256"),
        ("bot", "token_file"),
        ("ci.2_x-y", "token_env"),
    ]
    assert parsed[2].sessions == ("*",)


def test_not_an_array_of_tables() -> None:
    assert refusal({"name": "ci"}) == "serve.credential (lambo.toml) must be an array of tables"
    assert refusal(["ci"]) == "serve.credential #1 (lambo.toml) must be a table"


@pytest.mark.parametrize("name", ["", "-ci", ".ci", "c i", "x" * 65, "ci/1", 7, None, f"{SECRET}!"])
def test_each_bad_name_is_refused_without_echoing_it(name: object) -> None:
    raw = entry(name=name) if name is not None else {"sessions": ["web"], "token_env": "X"}
    text = refusal([entry(name="ok"), raw])
    assert text.startswith("serve.credential #2 (lambo.toml): name must be 1-64 letters")
    assert SECRET not in text


@pytest.mark.parametrize("sessions", [[], "web", [""], ["  "], [1], None])
def test_sessions_must_be_a_non_empty_list_of_names(sessions: object) -> None:
    raw = entry(sessions=sessions) if sessions is not None else {"name": "ci", "token_env": "X"}
    text = refusal([raw])
    assert text.startswith("serve.credential #1 (lambo.toml): sessions must be a non-empty list")
    assert '["*"] reaches every session' in text


def test_exactly_one_token_source() -> None:
    none = refusal([{"name": "ci", "sessions": ["web"]}])
    two = refusal([entry(token_env="CI_TOKEN")])
    three = refusal([entry(token_env="CI_TOKEN", token_file="/t")])
    for text in (none, two, three):
        assert text.startswith("serve.credential #1 (lambo.toml): give exactly one of token_sha256")
        assert "the token itself never goes in lambo.toml" in text
        assert sha(TOKEN_A) not in text


def test_a_token_written_in_plain_text_is_an_unknown_field_and_not_echoed() -> None:
    text = refusal([entry(token=SECRET)])
    assert text == (
        "serve.credential #1 (lambo.toml): unknown field 'token'; a credential takes: "
        + ", ".join(ENTRY_FIELDS)
    )
    # a field name that is not plain is not shown either (it may be a pasted secret)
    text = refusal([entry(**{SECRET + " =x": "v"})])
    assert "unknown field (a field name)" in text
    assert SECRET not in text


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"token_sha256": SECRET}, "token_sha256 must be 64 lowercase hex digits"),
        ({"token_sha256": sha(SECRET).upper()}, "token_sha256 must be 64 lowercase hex digits"),
        ({"token_sha256": sha(SECRET)[:63]}, "token_sha256 must be 64 lowercase hex digits"),
        ({"token_sha256": ""}, "token_sha256 must be a non-empty string"),
        ({"token_sha256": None, "token_env": f"${SECRET}"}, "token_env must be a variable name"),
        ({"token_sha256": None, "token_env": 12}, "token_env must be a non-empty string"),
        ({"token_sha256": None, "token_file": ""}, "token_file must be a non-empty string"),
        ({"token_sha256": None, "token_file": ["/t"]}, "token_file must be a non-empty string"),
    ],
)
def test_each_bad_token_field_names_the_field_never_the_value(
    fields: dict[str, Any], says: str
) -> None:
    text = refusal([entry(), entry(name="two", **fields)])
    assert text == f"serve.credential #2 (lambo.toml): {says}"
    assert SECRET not in text and sha(SECRET) not in text.lower()


def test_a_name_used_twice_is_refused() -> None:
    text = refusal([entry(), entry(name="bot"), entry(token_sha256=sha(TOKEN_B))])
    assert text == "serve.credential (lambo.toml): the name 'ci' is used twice"


def test_the_origin_is_named() -> None:
    with pytest.raises(ConfigError, match=r"^serve\.credential #1 \(/etc/x\.toml\): "):
        parse_entries([{"name": "ci"}], "/etc/x.toml")


# -- resolving -------------------------------------------------------------------------


def resolved(*entries: CredentialEntry, auth: str = "", env: dict[str, str] | None = None) -> Any:
    return resolve(tuple(entries), auth, env or {})


def test_resolve_keeps_only_digests_and_reads_each_source(tmp_path: Path) -> None:
    token_file = tmp_path / "bot.token"
    token_file.write_text(TOKEN_B + "\n")  # the trailing newline of `echo > file` is not the token
    token_file.chmod(0o600)
    creds = resolved(
        CredentialEntry("ci", ("web",), token_sha256=sha(TOKEN_A)),
        CredentialEntry("bot", ("web", "notes"), token_file=str(token_file)),
        CredentialEntry("env", ("*",), token_env="ENV_TOKEN"),
        auth="auth-token-0123456789abcdef",
        env={"ENV_TOKEN": "envvar-token-0123456789"},
    )
    assert [c.name for c in creds] == [AUTH_TOKEN_NAME, "ci", "bot", "env"]
    assert [c.digest for c in creds] == [
        digest_of("auth-token-0123456789abcdef"),
        digest_of(TOKEN_A),
        digest_of(TOKEN_B),
        digest_of("envvar-token-0123456789"),
    ]
    assert [c.sessions for c in creds] == [None, {"web"}, {"web", "notes"}, None]
    for credential in creds:  # nothing but the digest is kept
        assert set(vars(credential)) == {"name", "digest", "sessions"}


def test_a_token_file_that_is_missing_or_empty(tmp_path: Path) -> None:
    missing = CredentialEntry("bot", ("web",), token_file=str(tmp_path / "nope"))
    with pytest.raises(ConfigError) as caught:
        resolved(missing)
    assert str(caught.value) == "credential 'bot': its token_file could not be read as text"
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    with pytest.raises(ConfigError, match=r"^credential 'bot': its token_file is empty$"):
        resolved(CredentialEntry("bot", ("web",), token_file=str(empty)))
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + SECRET.encode())
    with pytest.raises(ConfigError, match="could not be read as text") as caught:
        resolved(CredentialEntry("bot", ("web",), token_file=str(binary)))
    assert SECRET not in str(caught.value)


def test_a_token_file_others_can_read_is_warned_about_not_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    token_file = tmp_path / "bot.token"
    token_file.write_text(TOKEN_B)
    token_file.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="lambo_core.credentials"):
        creds = resolved(CredentialEntry("bot", ("web",), token_file=str(token_file)))
    assert creds[0].digest == digest_of(TOKEN_B)
    assert [r.getMessage() for r in caplog.records] == [
        "credential 'bot': its token_file can be read by other accounts (mode 644)"
    ]
    caplog.clear()
    token_file.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="lambo_core.credentials"):
        resolved(CredentialEntry("bot", ("web",), token_file=str(token_file)))
    assert caplog.records == []


def test_a_token_env_unset_or_empty() -> None:
    unset = CredentialEntry("ci", ("web",), token_env="CI_TOKEN")
    for env in ({}, {"CI_TOKEN": ""}):
        with pytest.raises(ConfigError) as caught:
            resolved(unset, env=env)
        assert str(caught.value) == "credential 'ci': the variable CI_TOKEN is not set or is empty"


def test_the_process_environment_is_read_when_none_is_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CI_TOKEN_FOR_TEST", TOKEN_A)
    creds = resolve((CredentialEntry("ci", ("web",), token_env="CI_TOKEN_FOR_TEST"),), "")
    assert creds[0].digest == digest_of(TOKEN_A)
    assert os.environ["CI_TOKEN_FOR_TEST"] == TOKEN_A


@pytest.mark.parametrize(
    "bad",
    [
        "x" * (MIN_TOKEN_CHARS - 1),
        "has a space in it 0123456789",
        "tab\there-0123456789abcdef",
        "bell\x07-0123456789abcdef",
        "ñandú-token-0123456789abcdef",  # a header carries bytes: only ASCII compares equal
    ],
)
def test_a_short_or_unprintable_token_is_refused_without_echoing_it(
    tmp_path: Path, bad: str
) -> None:
    token_file = tmp_path / "t"
    token_file.write_text(bad, encoding="utf-8")
    token_file.chmod(0o600)
    by_env = CredentialEntry("ci", ("web",), token_env="T")
    by_file = CredentialEntry("ci", ("web",), token_file=str(token_file))
    cases: list[tuple[tuple[CredentialEntry, ...], str, dict[str, str], str]] = [
        ((), bad, {}, "the --auth-token / LAMBO_AUTH_TOKEN token"),
        ((by_env,), "", {"T": bad}, "credential 'ci''s token (from T)"),
        ((by_file,), "", {}, "credential 'ci''s token (from its token_file)"),
    ]
    for entries, auth, env, what in cases:
        with pytest.raises(ConfigError) as caught:
            resolve(entries, auth, env)
        text = str(caught.value)
        assert text == (
            f"{what} must be at least {MIN_TOKEN_CHARS} printable ASCII characters without spaces"
        )
        assert bad not in text


def test_a_token_of_exactly_the_minimum_is_taken() -> None:
    assert resolved(auth="x" * MIN_TOKEN_CHARS)[0].name == AUTH_TOKEN_NAME


def test_the_same_token_twice_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        resolved(
            CredentialEntry("ci", ("web",), token_sha256=sha(TOKEN_A)),
            CredentialEntry("bot", ("notes",), token_env="T"),
            env={"T": TOKEN_A},
        )
    assert str(caught.value) == (
        "credential 'ci' has the same token as another credential; give each credential a "
        "token of its own"
    )
    with pytest.raises(ConfigError, match=r"^credential 'auth-token' has the same token"):
        resolved(CredentialEntry("ci", ("web",), token_sha256=sha(TOKEN_A)), auth=TOKEN_A)


def test_no_credential_configured_resolves_to_none() -> None:
    assert resolved() == ()
    assert not Verifier(()).required


# -- the bearer check ------------------------------------------------------------------


@pytest.fixture
def verifier() -> Verifier:
    return Verifier(
        (
            Credential("ci", digest_of(TOKEN_A), frozenset({"web"})),
            Credential("bot", digest_of(TOKEN_B), None),
        )
    )


@pytest.mark.parametrize(
    ("header", "found"),
    [
        (f"Bearer {TOKEN_A}", "ci"),
        (f"Bearer {TOKEN_B}", "bot"),
        (f"bearer {TOKEN_A}", "ci"),  # the scheme is case-insensitive (RFC 9110)
        (f"BEARER {TOKEN_A}", "ci"),
        (f"Bearer   {TOKEN_A}  ", "ci"),  # spaces around the token are not part of it
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Bearer    ", None),
        (TOKEN_A, None),
        (f"Basic {TOKEN_A}", None),
        (f"Token {TOKEN_A}", None),
        (f"Bearer {TOKEN_A}x", None),
        (f"Bearer {TOKEN_A[:-1]}", None),
        (f"Bearer {TOKEN_A.upper()}", None),
        (f"Bearer {TOKEN_A} {TOKEN_B}", None),
        (f"Bearer {sha(TOKEN_A)}", None),  # the digest is not the token
    ],
)
def test_identify(verifier: Verifier, header: str | None, found: str | None) -> None:
    credential = verifier.identify(header)
    assert (credential.name if credential else None) == found
    assert verifier.required


def test_a_credential_reaches_only_its_sessions(verifier: Verifier) -> None:
    ci = verifier.identify(f"Bearer {TOKEN_A}")
    bot = verifier.identify(f"Bearer {TOKEN_B}")
    assert ci is not None and bot is not None
    assert ci.reaches("web") and not ci.reaches("notes") and not ci.reaches("")
    assert bot.reaches("web") and bot.reaches("notes")
    star = resolved(CredentialEntry("all", ("web", "*"), token_sha256=sha(TOKEN_A)))[0]
    assert star.sessions is None and star.reaches("anything")


# -- lambo config show -----------------------------------------------------------------


def test_config_show_masks_the_token_and_shows_credentials_without_digests(
    tmp_path: Path,
) -> None:
    (tmp_path / "lambo.toml").write_text(
        "[[serve.credential]]\n"
        'name = "ci"\nsessions = ["web"]\n'
        f'token_sha256 = "{sha(TOKEN_A)}"\n'
        "[[serve.credential]]\n"
        'name = "bot"\nsessions = ["*"]\ntoken_env = "BOT_TOKEN"\n'
        "[[serve.credential]]\n"
        'name = "file"\nsessions = ["web", "notes"]\ntoken_file = "~/lambo.token"\n',
        encoding="utf-8",
    )
    cfg = load_config(env={"LAMBO_HOME": str(tmp_path), "LAMBO_AUTH_TOKEN": TOKEN_B}, cwd=tmp_path)
    shown = render_show(cfg)
    assert "auth_token = (set)  # env LAMBO_AUTH_TOKEN" in shown
    line = next(x for x in shown.splitlines() if x.startswith("credential = "))
    assert line == (
        'credential = [{ name = "ci", sessions = ["web"], token_sha256 = "(set)" }, '
        '{ name = "bot", sessions = ["*"], token_env = "BOT_TOKEN" }, '
        '{ name = "file", sessions = ["web", "notes"], token_file = "~/lambo.token" }]'
        f"  # file {tmp_path / 'lambo.toml'}"
    )
    # one key a line, each a TOML literal (a list of tables is not written as [[...]] blocks)
    serve = shown[shown.index("[serve]\n") :].split("\n[", 1)[0].splitlines()[1:]
    assert all(" = " in x and not x.startswith(("[", " ")) for x in serve), serve
    assert tomllib.loads(line.split("  # ")[0])["credential"][1] == {
        "name": "bot",
        "sessions": ["*"],
        "token_env": "BOT_TOKEN",
    }
    assert TOKEN_B not in shown
    assert sha(TOKEN_A) not in shown
    # and the same through the command itself
    result = CliRunner().invoke(
        cli,
        ["config", "show"],
        env={"LAMBO_HOME": str(tmp_path), "LAMBO_AUTH_TOKEN": TOKEN_B},
        prog_name="lambo",
    )
    assert result.exit_code == 0, result.output
    assert "auth_token = (set)" in result.stdout
    assert '"ci"' in result.stdout and '"(set)"' in result.stdout
    assert TOKEN_B not in result.output and sha(TOKEN_A) not in result.output


def test_config_show_lists_every_serve_limit_at_its_default(tmp_path: Path) -> None:
    shown = render_show(load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path))
    for line in (
        'auth_token = ""  # default',
        "credential = []  # default",
        "allowed_origins = []  # default",
        "allowed_hosts = []  # default",
        "per_credential_rps = 50.0  # default",
        "per_session_rps = 100.0  # default",
        "max_live_sessions = 32  # default",
        "session_idle_timeout_s = 1800.0  # default",
        f"max_request_bytes = {4 * 1024 * 1024}  # default",
    ):
        assert f"\n{line}\n" in shown, line


def test_a_bad_credential_in_lambo_toml_refuses_the_config(tmp_path: Path) -> None:
    (tmp_path / "lambo.toml").write_text(
        f'[[serve.credential]]\nname = "ci"\nsessions = ["web"]\ntoken = "{SECRET}"\n',
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path)
    assert "serve.credential #1" in str(caught.value)
    assert "unknown field 'token'" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_relative_token_file_is_read_beside_the_lambo_toml_that_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lambo_core.mcp.http.serve import HttpSettings

    home = tmp_path / "conf"
    home.mkdir()
    (home / "ci.token").write_text(TOKEN_A + "\n")
    (home / "lambo.toml").write_text(
        '[[serve.credential]]\nname = "ci"\nsessions = ["web"]\ntoken_file = "ci.token"\n'
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # the serve starts somewhere else
    config = load_config(config_path=str(home / "lambo.toml"), env={"LAMBO_HOME": str(tmp_path)})
    settings = HttpSettings.from_config(config, env={})
    assert [c.digest for c in settings.credentials] == [digest_of(TOKEN_A)]


def test_a_credential_naming_a_session_not_served_is_warned_about(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from lambo_core.mcp.http.serve import warn_unserved

    credentials = (
        Credential("ci", digest_of(TOKEN_A), frozenset({"web", "wbe"})),
        Credential("all", digest_of(TOKEN_B), None),
    )
    with caplog.at_level(logging.WARNING):
        warn_unserved(credentials, ["web", "notes"])
    assert [r.getMessage() for r in caplog.records] == [
        "credential 'ci' names session(s) this serve does not hold: wbe (it serves web, notes)"
    ]
