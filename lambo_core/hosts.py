"""What a host name or address is, for the HTTP serve's bind and the URLs `lambo setup`
writes: loopback or not, a wildcard or not, and how it is written in a URL."""

from __future__ import annotations

import ipaddress


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_loopback(host: str) -> bool:
    """``localhost`` (or a name under it), 127.0.0.0/8, or ::1 (bracketed or not)."""
    name = host.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    address = _address(name)
    return address is not None and address.is_loopback


def is_wildcard(host: str) -> bool:
    """0.0.0.0 or :: : every address of the machine."""
    address = _address(host)
    return address is not None and address.is_unspecified


def in_url(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    bare = host.strip("[]")
    return f"[{bare}]" if ":" in bare else bare
