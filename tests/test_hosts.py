"""One rule for what is loopback and what is a wildcard, shared by `lambo serve`'s bind
check and the URLs `lambo setup` writes."""

from __future__ import annotations

import pytest

from lambo_core.hosts import in_url, is_loopback, is_wildcard


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.0.9", True),
        ("127.8.9.10", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("LOCALHOST.", True),
        ("lambo.localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.2", False),
        ("192.168.1.5", False),
        ("example.com", False),
        ("localhost.example.com", False),
        ("", False),
    ],
)
def test_loopback_is_127_0_0_0_8_ipv6_one_and_localhost(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(
    ("host", "wildcard"),
    [("0.0.0.0", True), ("::", True), ("[::]", True), ("127.0.0.1", False), ("lo", False)],
)
def test_a_wildcard_is_every_address(host: str, wildcard: bool) -> None:
    assert is_wildcard(host) is wildcard


def test_an_ipv6_address_goes_in_brackets_in_a_url() -> None:
    assert [in_url(h) for h in ("::1", "[::1]", "10.0.0.1", "mem.example")] == [
        "[::1]",
        "[::1]",
        "10.0.0.1",
        "mem.example",
    ]
