"""What an HTTP serve resolves before it listens: which sessions, whether the bind needs a
credential (fails closed), the Host and Origin lists, and the listening socket."""

from __future__ import annotations

import socket
from pathlib import Path

import click
import pytest

from lambo_core.cli.serve import served_sessions
from lambo_core.config import load_config
from lambo_core.errors import ConfigError, ParameterError
from lambo_core.hosts import in_url
from lambo_core.mcp.http.serve import HttpSettings, check_bind, listen, security_settings

TOKEN = "a-token-of-thirty-two-characters"


def config(tmp_path: Path, toml: str = "", **flags: object):  # type: ignore[no-untyped-def]
    (tmp_path / "lambo.toml").write_text(toml)
    return load_config(env={"LAMBO_HOME": str(tmp_path)}, cwd=tmp_path, flags=flags)


def test_a_bind_off_loopback_without_a_credential_refuses(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        HttpSettings.from_config(config(tmp_path, **{"serve.bind": "0.0.0.0"}), env={})
    text = info.value.render()
    assert "serve.bind 0.0.0.0 is not a loopback address" in text
    assert "--auth-token or LAMBO_AUTH_TOKEN" in text and "[[serve.credential]]" in text


def test_a_bind_off_loopback_with_a_token_or_a_credential_starts(tmp_path: Path) -> None:
    flags = {"serve.bind": "0.0.0.0", "serve.auth_token": TOKEN}
    settings = HttpSettings.from_config(config(tmp_path, **flags), env={})
    assert [c.name for c in settings.credentials] == ["auth-token"]
    toml = (
        '[serve]\nbind = "10.1.2.3"\n[[serve.credential]]\nname = "ci"\nsessions = ["*"]\n'
        'token_env = "CI_TOKEN"\n'
    )
    settings = HttpSettings.from_config(config(tmp_path, toml), env={"CI_TOKEN": TOKEN})
    assert [c.name for c in settings.credentials] == ["ci"]
    assert settings.bind == "10.1.2.3"


def test_loopback_needs_no_credential_and_the_limits_come_from_the_config(tmp_path: Path) -> None:
    toml = "[serve]\nper_credential_rps = 5.0\nper_session_rps = 7.0\nmax_live_sessions = 3\n"
    settings = HttpSettings.from_config(config(tmp_path, toml), env={})
    assert settings.credentials == ()
    assert (settings.per_credential_rps, settings.per_session_rps) == (5.0, 7.0)
    assert settings.max_live_sessions == 3
    assert settings.max_request_bytes == 4 * 1024 * 1024


def test_the_request_limit_cannot_be_raised_past_four_mib(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"serve.max_request_bytes .* must be at most 4194304"):
        config(tmp_path, "[serve]\nmax_request_bytes = 5242880\n")


def test_host_and_origin_lists() -> None:
    loopback = security_settings("127.0.0.1", 7700, (), ())
    assert loopback.enable_dns_rebinding_protection
    assert loopback.allowed_hosts == ["127.0.0.1:7700", "localhost:7700", "[::1]:7700"]
    assert loopback.allowed_origins == [
        "http://127.0.0.1:*",
        "http://localhost:*",
        "http://[::1]:*",
    ]
    named = security_settings("10.1.2.3", 8000, ("mem.example:8000",), ("https://app.example",))
    assert "10.1.2.3:8000" in named.allowed_hosts and "mem.example:8000" in named.allowed_hosts
    assert "https://app.example" in named.allowed_origins
    # a wildcard bind answers as every name and address of the machine
    wildcard = security_settings("0.0.0.0", 7700, (), ())
    assert f"{socket.gethostname()}:7700" in wildcard.allowed_hosts
    for info in socket.getaddrinfo(socket.gethostname(), None):
        assert f"{in_url(str(info[4][0]))}:7700" in wildcard.allowed_hosts
    assert "0.0.0.0:7700" in wildcard.allowed_hosts
    # another loopback address is the serve's own too
    assert "127.0.0.2:7700" in security_settings("127.0.0.2", 7700, (), ()).allowed_hosts
    six = security_settings("::1", 7700, (), ())
    assert six.allowed_hosts.count("[::1]:7700") == 1


def test_a_bind_with_spaces_or_control_characters_is_refused_without_echo() -> None:
    for bad in ("ev\x1b[31mil\nline2", "127.0.0.1 extra", "", "   "):
        with pytest.raises(ConfigError) as info:
            check_bind(bad)
        text = info.value.render()
        assert text.startswith("configuration error: serve.bind must be an IP address")
        assert "\x1b" not in text and "line2" not in text and "extra" not in text
    assert check_bind(" 127.0.0.1 ") == "127.0.0.1"


def test_listen_takes_port_zero_and_a_busy_port_refuses_naming_it() -> None:
    sock = listen("127.0.0.1", 0)
    try:
        port = sock.getsockname()[1]
        assert port > 0
        with pytest.raises(ConfigError) as info:
            listen("127.0.0.1", port)
        assert f"cannot listen on 127.0.0.1:{port}" in info.value.render()
        assert "--port or --bind" in info.value.render()
    finally:
        sock.close()


def test_served_sessions_from_flags_or_the_config() -> None:
    assert served_sessions(("a", "b"), ("c",), http=True) == ["a", "b"]  # flags win
    assert served_sessions((), ("c", "d"), http=True) == ["c", "d"]
    assert served_sessions((), ("only",), http=False) == ["only"]


def test_served_sessions_refusals_name_the_flag_or_the_key() -> None:
    with pytest.raises(click.UsageError, match="give --session"):
        served_sessions((), (), http=True)
    with pytest.raises(ParameterError, match="a stdio serve serves one"):
        served_sessions(("a", "b"), (), http=False)
    with pytest.raises(ParameterError, match=r"^serve.sessions names 2 sessions"):
        served_sessions((), ("a", "b"), http=False)
    with pytest.raises(ParameterError, match="--session names a session twice"):
        served_sessions(("a", "a"), (), http=True)
    with pytest.raises(ParameterError, match=r"cannot hold '/'"):
        served_sessions(("team/a",), (), http=True)
    with pytest.raises(ParameterError) as info:
        served_sessions(("bad\x1b[31m",), (), http=True)
    assert "\x1b" not in info.value.render() and "--session" in info.value.render()
    assert served_sessions(("team/a",), (), http=False) == ["team/a"]  # stdio has no URL
