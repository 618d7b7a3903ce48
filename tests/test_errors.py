"""The error family renders the spec's classes and never its internal detail."""

from __future__ import annotations

import pytest

from lambo_core.errors import (
    ConfigError,
    ConflictError,
    DownloadError,
    ErrorKind,
    InternalError,
    LamboError,
    ParameterError,
    ReferenceRefused,
    StoreError,
    internal_fault,
)


@pytest.mark.parametrize(
    ("cls", "prefix"),
    [
        (ReferenceRefused, "reference refused: "),
        (StoreError, "store error: "),
        (ConfigError, "configuration error: "),
        (ConflictError, "conflict: "),
        (InternalError, "internal error: "),
        (DownloadError, "download error: "),
    ],
)
def test_classes_prefix_their_name(cls: type[LamboError], prefix: str) -> None:
    err = cls("something happened", detail="/secret/path.db: SQLITE_BUSY")
    assert err.render() == prefix + "something happened"
    assert "secret" not in err.render()
    assert err.detail == "/secret/path.db: SQLITE_BUSY"


def test_parameter_error_reads_as_the_rule() -> None:
    assert ParameterError("top_k must be in 1..=100").render() == "top_k must be in 1..=100"
    assert ParameterError("x").kind is ErrorKind.PARAMETER


def test_internal_fault_hides_the_traceback() -> None:
    err = internal_fault("Traceback (most recent call last): KeyError('x')")
    assert "Traceback" not in err.render()
    assert "no effect beyond anything already written" in err.render()
    assert "KeyError" in (err.detail or "")
